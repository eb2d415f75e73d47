/* TCP transport: one listening socket per communicator and, per peer, one
 * outgoing connection (made on first send) and one incoming connection
 * (accepted when a message from that peer is first awaited). Each
 * connection carries bytes one way only, so two ranks that start talking
 * to each other at the same moment never race to set up one socket.
 * Connections are made only to the peers an algorithm uses. */
#ifndef WEFT_TRANSPORT_TCP_H
#define WEFT_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "transport/sock.h"

#define FRAME_MAGIC 0x54464557u /* "WEFT" */
#define HELLO_MAGIC 0x48544657u /* "WFTH" */
#define WIRE_VERSION 1

/* Every message starts with this header. The fingerprint (seq .. root)
 * names the operation the sender is in, so that a receiver in a different
 * operation reports the mismatch instead of misreading bytes. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint8_t kind;    /* weft_coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t algo;
    int32_t root;
    uint64_t seq;
    uint64_t count;
    uint64_t len;    /* payload bytes that follow */
} frame_hdr;

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t pad;
    uint64_t comm_id;
    int32_t src;
    int32_t dst;
} hello_msg;

_Static_assert(sizeof(frame_hdr) == 40, "frame_hdr layout");
_Static_assert(sizeof(hello_msg) == 24, "hello_msg layout");

typedef struct {
    int rank, size;
    uint64_t comm_id;
    int lfd;
    char (*addr)[SOCK_ADDR_MAX]; /* peers' listening addresses */
    int *out_fd;                 /* per peer; -1 until connected */
    int *in_fd;
    double connect_timeout_s;
    int loglevel;
} tcp_net;

/* Listen on bind_ip (NULL: any) and write "ip:port" to addr_out. */
int tcp_net_init(tcp_net *n, int rank, int size, uint64_t comm_id, const char *bind_ip,
                 char addr_out[SOCK_ADDR_MAX], char *err, size_t errlen);
void tcp_net_close(tcp_net *n);
/* Outgoing connection to peer, connecting on first use. */
int tcp_out(tcp_net *n, int peer, char *err, size_t errlen);
/* Accept one pending connection on the listening socket and file it under
 * its sender. A connection that does not introduce itself as a member of
 * this communicator is dropped. */
int tcp_accept_one(tcp_net *n, char *err, size_t errlen);

#endif
