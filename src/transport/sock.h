/* Thin, error-checked wrappers over BSD sockets (IPv4 and IPv6). */
#ifndef WEFT_TRANSPORT_SOCK_H
#define WEFT_TRANSPORT_SOCK_H

#include <stddef.h>
#include <sys/socket.h>

#define SOCK_ADDR_MAX 80 /* "host:port", IPv6 in brackets */

/* Listen on host:port (host NULL or "" = any address, port 0 = any port).
 * Fills *port_out with the bound port. Returns fd or negative WEFT_E*. */
int sock_listen(const char *host, int port, int backlog, int *port_out,
                char *err, size_t errlen);
/* Connect to host:port, retrying refused connections until deadline
 * (clock_now() seconds), since the listener may not be up yet. */
int sock_connect(const char *host, int port, double deadline, char *err,
                 size_t errlen);
/* One attempt, for a listener known to be up: WEFT_EPEER when refused. */
int sock_connect_once(const char *host, int port, double deadline, char *err,
                      size_t errlen);
void sock_tune(int fd);          /* TCP_NODELAY, large buffers, keep-alive */
int sock_set_nonblock(int fd, int on);
/* Blocking full read/write with a deadline; 0, WEFT_ETIMEDOUT, WEFT_EPEER
 * (orderly close or reset) or WEFT_ESYS. */
int sock_read_full(int fd, void *buf, size_t len, double deadline);
int sock_write_full(int fd, const void *buf, size_t len, double deadline);
/* Local IP of a connected socket, or the first IPv4 address of interface
 * ifname; numeric form into buf. */
int sock_local_ip(int fd, char *buf, size_t len);
int sock_iface_ip(const char *ifname, char *buf, size_t len);
/* A port on 127.0.0.1 that nothing listens on as of the call, for a
 * listener another process will open there; -1 if none is found. */
int sock_spare_port(void);
/* A system call failed with errno e for want of a resource (descriptors,
 * socket memory): append to msg (a string in a buffer of len bytes) which
 * limit it met and its value, so the error names the resource rather than
 * looking like a lost peer. Nothing for other errors. */
void sock_limit_note(int e, char *msg, size_t len);
/* "host:port" -> parts; accepts "[v6]:port". */
int sock_split_addr(const char *addr, char *host, size_t hostlen, int *port);

#endif
