/* Rendezvous key-value store over TCP: set, get (waiting for the key),
 * atomic add, check, delete. Served by a thread of rank 0's communicator or
 * by the standalone weft-store tool. Values are opaque bytes. */
#ifndef WEFT_BOOTSTRAP_STORE_H
#define WEFT_BOOTSTRAP_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_MAX_KEY 4096
#define STORE_MAX_VALUE (64u << 20)

typedef struct store_server store_server;
typedef struct store_client store_client;

/* Serve on host:port (host NULL = all addresses, port 0 = any) in a new
 * thread. *port_out gets the bound port. */
int store_server_start(store_server **out, const char *host, int port, int *port_out,
                       char *err, size_t errlen);
/* Run the server loop in the calling thread until store_server_stop is
 * called from another thread (for weft-store). */
int store_server_create(store_server **out, const char *host, int port, int *port_out,
                        char *err, size_t errlen);
int store_server_run(store_server *s);
void store_server_stop(store_server *s);  /* stops, joins and frees */

int store_connect(store_client **out, const char *host, int port, double timeout_s,
                  char *err, size_t errlen);
void store_close(store_client *c);
int store_fd(const store_client *c);
int store_set(store_client *c, const char *key, const void *val, size_t len);
/* Waits up to timeout_s for key to exist; *val is malloc'd (caller frees)
 * and NUL-terminated for convenience. */
int store_get(store_client *c, const char *key, void **val, size_t *len, double timeout_s);
int store_add(store_client *c, const char *key, int64_t delta, int64_t *result);
int store_check(store_client *c, const char *key, int *exists);
int store_del(store_client *c, const char *key);
/* Wait until every key exists. */
int store_wait(store_client *c, const char *const *keys, int n, double timeout_s);
const char *store_error(const store_client *c);

#endif
