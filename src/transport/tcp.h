/* TCP transport: one listening socket per communicator and, per peer, one
 * outgoing connection (made on first send) and one incoming connection
 * (accepted whenever one arrives). Each connection carries bytes one way
 * only, so two ranks that start talking to each other at the same moment
 * never race to set up one socket. Connections are made only to the peers
 * an algorithm uses.
 *
 * A connection starts with a hello (communicator, source, destination)
 * and, when the job has a secret, the challenge-response of core/auth.h.
 * Both ends run their half of it without blocking on the other end's
 * schedule: tcp_out and tcp_in say "pending" and which socket to poll.
 * With WEFT_TLS=1 an authenticated connection then continues in TLS
 * (transport/tls.h), and out_fd/in_fd are the pump's socketpair ends. */
#ifndef WEFT_TRANSPORT_TCP_H
#define WEFT_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "core/frame.h"
#include "transport/sock.h"
#include "transport/tls.h"

enum { HS_NONE = 0, HS_PENDING, HS_READY };

/* An outgoing connection's side of the handshake. */
typedef struct {
    uint8_t buf[sizeof(auth_challenge)]; /* the challenge so far */
    auth_hello mine;                     /* the hello this rank sent */
    uint16_t have;
    uint8_t state;
} tcp_hs;

/* Incoming connections still in their handshake: every member may be in
 * one at once (a full-mesh exchange opens them all together), so the table
 * grows to (size - 1) times the streams per peer plus TCP_PEND_MAX for
 * strangers; past that the oldest silent one is pushed out. Pollers see
 * them all through one descriptor (tcp_pending), so TCP_PEND_MAX also
 * stays the room a poller keeps for them. */
#define TCP_PEND_MAX 16

enum { PEND_HELLO = 0, PEND_CHALLENGE, PEND_PROOF, PEND_STRIPE };

/* An incoming connection that has not yet become a member's: it owes its
 * hello, then (with a secret) takes the challenge and owes the proof. It
 * advances only as its bytes arrive, so a silent or slow stranger costs
 * a slot, never a wait, and it is dropped at its deadline. */
typedef struct {
    int fd, src;
    uint8_t stage;                       /* PEND_* */
    uint8_t in[sizeof(hello_msg) + sizeof(auth_hello)]; /* hello, then the proof */
    uint16_t have;
    uint16_t sent;                       /* bytes of ch sent */
    auth_challenge ch;
    uint8_t expect[AUTH_MAC_LEN];
    uint8_t key[AUTH_MAC_LEN];           /* TLS key of this connection */
    double deadline;
    uint32_t ev;                         /* the events it is watched for (EPOLLIN/OUT) */
} tcp_pend;

typedef struct {
    int rank, size;
    uint64_t comm_id;
    int lfd;
    char (*addr)[SOCK_ADDR_MAX]; /* peers' listening addresses */
    int *out_fd;                 /* per peer; -1 until connected */
    int *in_fd;
    tcp_hs *out_hs;
    tcp_pend *pend;              /* incoming, not yet members' */
    int npend, cap_pend, max_pend;
    int efd;                     /* epoll set of the pending sockets; -1 until the first */
    const char *secret;          /* NULL: no authentication */
    double connect_timeout_s;
    double hello_wait_s;         /* a pending connection's deadline (WEFT_HANDSHAKE_TIMEOUT) */
    int loglevel;
    int tls;                     /* WEFT_TLS=1: connections go through pump */
    tls_pump *pump;              /* made with the first secured connection */
    struct wan_net *wan;         /* clusters, WEFT_WAN emulation (transport/wan.h); NULL: none */
    int streams;                 /* WEFT_WAN_STREAMS: TCP streams per wan-class connection */
    struct stripe_set *stripes;  /* theirs when streams > 1 (transport/stripe.h) */
} tcp_net;

/* Listen on bind_ip (NULL: any) and write "ip:port" to addr_out. */
int tcp_net_init(tcp_net *n, int rank, int size, uint64_t comm_id, const char *bind_ip,
                 char addr_out[SOCK_ADDR_MAX], char *err, size_t errlen);
void tcp_net_close(tcp_net *n);
/* Outgoing connection to peer, connecting on first use. 1: ready, *fd is
 * the socket; 0: the handshake waits for the peer, poll *fd for POLLIN;
 * negative: WEFT_EPEER (peer gone), WEFT_EAUTH, ... with err filled. */
int tcp_out(tcp_net *n, int peer, int *fd, char *err, size_t errlen);
/* Incoming connection from peer. 1: ready, *fd is the socket; 0: not yet
 * (*fd = -1). A connection gets here only once it has proved the secret. */
int tcp_in(tcp_net *n, int peer, int *fd, char *err, size_t errlen);
/* Accept the connections waiting on the listening socket and start their
 * handshakes; nothing here waits for a peer. A connection that does not
 * introduce itself as a member of this communicator is dropped and
 * logged; one that does is filed under its sender once it has proved the
 * secret (several may claim the same sender: the first to prove it wins,
 * so an impostor cannot evict the real one).
 * Returns 1 when a member's connection was filed, 0 when none was (yet),
 * negative only when the listening socket fails. */
int tcp_accept_one(tcp_net *n, char *err, size_t errlen);
/* Connections still in their handshake: adds what to poll for them to pf
 * (struct pollfd, at most max; one descriptor that is readable when any
 * of them can move) and returns how many entries (0 or 1). */
int tcp_pending(const tcp_net *n, void *pf, int max);
/* Advances every pending handshake as far as its bytes allow; files the
 * proven, drops the false and those past their deadline. Returns how many
 * were filed. */
int tcp_check_pending(tcp_net *n);
/* Is anyone still listening at peer's address? 0: yes (or cannot tell),
 * WEFT_EPEER: refused, the process is gone. For peers this rank waits on
 * but has no connection from. */
int tcp_probe(tcp_net *n, int peer);
/* Close both connections with peer (after a failure). */
void tcp_drop(tcp_net *n, int peer);

#endif
