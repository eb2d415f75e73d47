/* Rendezvous key-value store over TCP: set, get (waiting for the key),
 * atomic add, check, delete. Served by a thread of rank 0's communicator or
 * by the standalone weft-store tool. Values are opaque bytes.
 *
 * With a job secret every connection starts with the challenge-response of
 * core/auth.h; the server drops (and logs) a client that fails it, or that
 * has not finished it within STORE_AUTH_WAIT_S, and goes on serving the
 * others. */
#ifndef WEFT_BOOTSTRAP_STORE_H
#define WEFT_BOOTSTRAP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/frame.h" /* STORE_MAX_KEY, STORE_MAX_VALUE */

typedef struct store_server store_server;
typedef struct store_client store_client;

#define STORE_AUTH_WAIT_S 10.0

/* Serve on host:port (host NULL = all addresses, port 0 = any) in a new
 * thread. *port_out gets the bound port. secret NULL: no authentication. */
int store_server_start(store_server **out, const char *host, int port, int *port_out,
                       const char *secret, char *err, size_t errlen);
/* Run the server loop in the calling thread until store_server_stop is
 * called from another thread (for weft-store). The server created here
 * authenticates clients with WEFT_JOB_SECRET when that is set. */
int store_server_create(store_server **out, const char *host, int port, int *port_out,
                        char *err, size_t errlen);
int store_server_run(store_server *s);
void store_server_stop(store_server *s);  /* stops, joins and frees */

/* secret NULL: no authentication. */
int store_connect(store_client **out, const char *host, int port, double timeout_s,
                  const char *secret, char *err, size_t errlen);
/* The same, with timeout_s bounding the authentication too (store_connect
 * gives it at least 10 s): for a caller that asks whether the store
 * answers at all. A store that does not answer in time: WEFT_ETIMEDOUT. */
int store_connect_within(store_client **out, const char *host, int port, double timeout_s,
                         const char *secret, char *err, size_t errlen);
void store_close(store_client *c);
int store_fd(const store_client *c);
/* This end's IP address on the connection to the store, numeric: the
 * address the store's peers can reach this host at (under WEFT_TLS=1
 * store_fd is a socketpair, so ask here rather than of the fd). */
int store_local_ip(const store_client *c, char *buf, size_t len);
int store_set(store_client *c, const char *key, const void *val, size_t len);
/* Waits up to timeout_s for key to exist; *val is malloc'd (caller frees)
 * and NUL-terminated for convenience. */
int store_get(store_client *c, const char *key, void **val, size_t *len, double timeout_s);
int store_add(store_client *c, const char *key, int64_t delta, int64_t *result);
int store_check(store_client *c, const char *key, int *exists);
int store_del(store_client *c, const char *key);
/* When this connection ends (close, or the process's death), the server
 * sets key to val: the others learn of a death from the store itself. One
 * held key per connection; a second call replaces the first. */
int store_hold(store_client *c, const char *key, const void *val, size_t len);
/* Set key to val unless it exists; *out (malloc'd, NUL-terminated) gets
 * the value that stands, *won 1 when it is this call's. */
int store_setnx(store_client *c, const char *key, const void *val, size_t len, void **out,
                size_t *outlen, int *won);
/* Wait until every key exists. */
int store_wait(store_client *c, const char *const *keys, int n, double timeout_s);
const char *store_error(const store_client *c);
/* How long a call may wait for the store's answer beyond the wait it asks
 * for (default 30 s): a failure path bounds its notice by the job's
 * timeout with this. A call that fails halfway (no answer in time, the
 * store gone) leaves the client broken: every later call fails at once
 * with that call's code, and store_broken returns it (0 while whole). */
void store_set_answer_timeout(store_client *c, double s);
int store_broken(const store_client *c);
/* Watching a key: send a GET that waits (practically) forever and return
 * at once; store_fd(c) turns readable when the key is set or the store goes
 * away, and store_watch_read then collects the value (WEFT_EPEER: the
 * store is gone). A watching client serves no other request. */
int store_watch_arm(store_client *c, const char *key);
int store_watch_read(store_client *c, void **val, size_t *len);

#endif
