#include "transport/tcp.h"

#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "transport/stripe.h"
#include "transport/wan.h"
#include "weft.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* how long closing a communicator lets the TLS pump send what is queued */
#define TLS_FLUSH_S 5.0

int tcp_net_init(tcp_net *n, int rank, int size, uint64_t comm_id, const char *bind_ip,
                 char addr_out[SOCK_ADDR_MAX], char *err, size_t errlen)
{
    int port;
    memset(n, 0, sizeof *n);
    n->rank = rank;
    n->size = size;
    n->comm_id = comm_id;
    n->lfd = -1;
    n->addr = calloc((size_t)size, sizeof *n->addr);
    n->out_fd = malloc((size_t)size * sizeof(int));
    n->in_fd = malloc((size_t)size * sizeof(int));
    n->out_hs = calloc((size_t)size, sizeof *n->out_hs);
    if (!n->addr || !n->out_fd || !n->in_fd || !n->out_hs) {
        tcp_net_close(n);
        return WEFT_ENOMEM;
    }
    for (int i = 0; i < size; i++)
        n->out_fd[i] = n->in_fd[i] = -1;
    /* WEFT_HANDSHAKE_TIMEOUT: how long an accepted connection may take to
     * introduce itself and prove the secret (a member sends its hello right
     * after connecting, its proof one round trip later) */
    int bad = param_read_dbl(PARAM_handshake_timeout, &n->hello_wait_s, err, errlen);
    if (!bad)
        bad = param_read_int(PARAM_wan_streams, &n->streams, err, errlen);
    if (!bad && (n->tls = tls_wanted(err, errlen)) < 0)
        bad = n->tls;
    if (bad) {
        tcp_net_close(n);
        return bad;
    }
    n->max_pend = (size - 1) * (n->streams > 1 ? n->streams : 1) + TCP_PEND_MAX;
    n->lfd = sock_listen(bind_ip, 0, 4096, &port, err, errlen);
    if (n->lfd < 0) {
        int rc = n->lfd;
        n->lfd = -1;
        tcp_net_close(n);
        return rc;
    }
    sock_set_nonblock(n->lfd, 1);
    if (bind_ip && strchr(bind_ip, ':'))
        snprintf(addr_out, SOCK_ADDR_MAX, "[%s]:%d", bind_ip, port);
    else
        snprintf(addr_out, SOCK_ADDR_MAX, "%s:%d", bind_ip ? bind_ip : "127.0.0.1", port);
    return 0;
}

void tcp_drop(tcp_net *n, int peer)
{
    if (n->out_fd && n->out_fd[peer] >= 0)
        close(n->out_fd[peer]);
    if (n->in_fd && n->in_fd[peer] >= 0)
        close(n->in_fd[peer]);
    if (n->out_fd)
        n->out_fd[peer] = n->in_fd[peer] = -1;
    if (n->out_hs)
        memset(&n->out_hs[peer], 0, sizeof n->out_hs[peer]);
}

void tcp_net_close(tcp_net *n)
{
    for (int i = 0; n->out_fd && n->in_fd && i < n->size; i++)
        tcp_drop(n, i);
    /* the owners' ends are closed: the streams' threads pass on the rest */
    stripe_set_free(n->stripes, TLS_FLUSH_S);
    for (int i = 0; i < n->npend; i++)
        close(n->pend[i].fd);
    if (n->pend)
        close(n->efd); /* made with the table */
    free(n->pend);
    n->npend = 0;
    if (n->lfd >= 0)
        close(n->lfd);
    /* the owners' ends are closed: what they wrote still goes out, through
     * the emulated WAN first, then TLS */
    wan_net_free(n->wan, TLS_FLUSH_S);
    tls_pump_free(n->pump, TLS_FLUSH_S);
    free(n->addr);
    free(n->out_fd);
    free(n->in_fd);
    free(n->out_hs);
    memset(n, 0, sizeof *n);
    n->lfd = -1;
}

/* Reads into buf until *have reaches want. 1: complete, 0: would block,
 * WEFT_EPEER: closed or reset. */
static int fill_to(int fd, uint8_t *buf, uint16_t *have, size_t want)
{
    while (*have < want) {
        ssize_t r = recv(fd, buf + *have, want - *have, MSG_DONTWAIT);
        if (r > 0) {
            *have += (uint16_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return WEFT_EPEER;
    }
    return 1;
}

/* The same for a handshake's buffer. */
static int fill(int fd, tcp_hs *hs, size_t want)
{
    return fill_to(fd, hs->buf, &hs->have, want);
}

/* The secret connections prove, or NULL: a build without libcrypto
 * cannot prove one, whatever its owner set (as the store does). */
static const char *secret_of(const tcp_net *n)
{
    return auth_compiled() ? n->secret : NULL;
}

/* WEFT_TLS=1: the authenticated socket fd goes to the pump; *app is the
 * end that stands in for it. */
static int secure(tcp_net *n, int fd, int server, const uint8_t key[AUTH_MAC_LEN], int peer,
                  int *app, char *err, size_t errlen)
{
    char what[48];
    int rc;
    if (!n->pump && (rc = tls_pump_new(&n->pump, n->loglevel, n->rank, err, errlen))) {
        close(fd);
        return rc;
    }
    snprintf(what, sizeof what, "the connection %s rank %d", server ? "from" : "to", peer);
    return tls_pump_add(n->pump, fd, server, key, what, app, err, errlen);
}

/* Connections with peer go as several streams (WEFT_WAN_STREAMS): wan
 * links only, and not under TLS, whose pump owns the socket. */
static int striped(const tcp_net *n, int peer)
{
    return n->streams > 1 && !n->tls && wan_is_wan(n->wan, peer);
}

static int dial(void *ctx, int peer, char *err, size_t errlen);

/* A connection to peer has just become ready: one to another cluster goes
 * through the emulated WAN when WEFT_WAN asks for it, and through the
 * streams when WEFT_WAN_STREAMS asks for them. */
static int ready(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    int fd = *fdp, rc = wan_take(n->wan, peer, &fd, err, errlen);
    if (!rc && striped(n, peer) && !n->stripes)
        rc = stripe_set_new(&n->stripes, n->rank, n->streams, dial, n, n->loglevel);
    if (!rc && striped(n, peer))
        rc = stripe_out(n->stripes, peer, &fd, err, errlen);
    if (rc)
        return rc;
    n->out_fd[peer] = *fdp = fd;
    return 1;
}

/* One more stream to peer, introduced and authenticated as tcp_out does
 * it, but blocking: the streams' thread runs it, not the owner. The
 * emulated WAN takes it as any wan connection. */
static int dial(void *ctx, int peer, char *err, size_t errlen)
{
    tcp_net *n = ctx;
    char host[SOCK_ADDR_MAX], e[160];
    int port, fd, rc;
    struct {
        hello_msg h;
        auth_hello a;
    } intro;
    double until = clock_now() + n->connect_timeout_s;
    if (sock_split_addr(n->addr[peer], host, sizeof host, &port)) {
        snprintf(err, errlen, "rank %d published a bad address", peer);
        return WEFT_EPROTO;
    }
    if ((fd = sock_connect_once(host, port, until, e, sizeof e)) < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", n->addr[peer], e);
        return fd;
    }
    memset(&intro, 0, sizeof intro);
    intro.h = (hello_msg){ .magic = HELLO_MAGIC, .version = WIRE_VERSION,
                           .auth = secret_of(n) != NULL, .comm_id = n->comm_id,
                           .src = n->rank, .dst = peer };
    if (secret_of(n) && (rc = auth_start(&intro.a, AUTH_ROLE_DATA)))
        goto fail;
    rc = sock_write_full(fd, &intro, secret_of(n) ? sizeof intro : sizeof intro.h, until);
    if (!rc && secret_of(n)) {
        uint8_t buf[sizeof(auth_challenge)], proof[AUTH_MAC_LEN];
        auth_challenge ch;
        const char *why;
        hello_msg bind = intro.h;
        bind.auth = 1;
        rc = sock_read_full(fd, buf, sizeof buf, until);
        if (!rc && (auth_challenge_decode(buf, sizeof buf, &ch, &why) ||
                    auth_answer(secret_of(n), &intro.a, &ch, &bind, sizeof bind, proof)))
            rc = WEFT_EAUTH;
        if (!rc)
            rc = sock_write_full(fd, proof, sizeof proof, until);
    }
    if (!rc)
        rc = wan_take(n->wan, peer, &fd, err, errlen);
    if (!rc)
        return fd;
fail:
    close(fd);
    snprintf(err, errlen, "a further stream to rank %d: %s", peer, weft_strerror(rc));
    return rc;
}

static int out_once(tcp_net *n, int peer, int *fdp, char *err, size_t errlen, int again);

int tcp_out(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    return out_once(n, peer, fdp, err, errlen, 0);
}

/* A new connection to peer, its introduction sent: out_fd set, and the
 * handshake READY, or PENDING the peer's challenge when the job has a
 * secret. 0, or what stops it with err saying why. */
static int out_dial(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    tcp_hs *hs = &n->out_hs[peer];
    int fd, rc;
    char host[SOCK_ADDR_MAX], e[200];
    int port;
    struct {
        hello_msg h;
        auth_hello a;
    } intro;
    if (n->tls && !secret_of(n)) {
        snprintf(err, errlen, "WEFT_TLS=1 needs a job secret (WEFT_JOB_SECRET; weftrun "
                              "sets one)");
        return WEFT_ECONFIG;
    }
    if (sock_split_addr(n->addr[peer], host, sizeof host, &port)) {
        snprintf(err, errlen, "rank %d published a bad address '%s'", peer, n->addr[peer]);
        return WEFT_EPROTO;
    }
    /* the peer listened before it published its address: a refused
     * connection means it is gone, so do not retry */
    fd = sock_connect_once(host, port, clock_now() + n->connect_timeout_s, e, sizeof e);
    if (fd < 0 && fd != WEFT_ETIMEDOUT && fd != WEFT_EPEER) {
        /* this rank's own limit (descriptors, ports, memory), not the peer */
        snprintf(err, errlen, "cannot connect to rank %d: %s", peer, e);
        return fd;
    }
    if (fd < 0) {
        snprintf(err, errlen, "rank %d died (cannot connect to %s: %s)", peer,
                 n->addr[peer], e);
        return WEFT_EPEER;
    }
    memset(&intro, 0, sizeof intro);
    intro.h = (hello_msg){ .magic = HELLO_MAGIC, .version = WIRE_VERSION,
                           .auth = secret_of(n) != NULL, .comm_id = n->comm_id,
                           .src = n->rank, .dst = peer };
    memset(hs, 0, sizeof *hs);
    if (secret_of(n) && (rc = auth_start(&hs->mine, AUTH_ROLE_DATA))) {
        close(fd);
        snprintf(err, errlen, "no random numbers for authentication");
        return rc;
    }
    intro.a = hs->mine;
    rc = sock_write_full(fd, &intro, secret_of(n) ? sizeof intro : sizeof intro.h,
                         clock_now() + n->connect_timeout_s);
    if (rc) {
        close(fd);
        snprintf(err, errlen, "rank %d died (cannot introduce this rank at %s: %s)", peer,
                 n->addr[peer], weft_strerror(rc));
        return rc == WEFT_ETIMEDOUT ? WEFT_EPEER : rc;
    }
    sock_set_nonblock(fd, 1);
    n->out_fd[peer] = fd;
    hs->state = secret_of(n) ? HS_PENDING : HS_READY;
    *fdp = fd;
    return 0;
}

/* again: this call already found a handshake closed and dialled anew. */
static int out_once(tcp_net *n, int peer, int *fdp, char *err, size_t errlen, int again)
{
    tcp_hs *hs = &n->out_hs[peer];
    int fd = n->out_fd[peer], rc;
    if (fd >= 0 && hs->state == HS_READY) {
        *fdp = fd;
        return 1;
    }
    if (fd < 0 && (rc = out_dial(n, peer, &fd, err, errlen)))
        return rc;
    *fdp = fd;
    if (hs->state == HS_READY)
        return ready(n, peer, fdp, err, errlen);
    /* waiting for the peer's challenge */
    rc = fill(fd, hs, sizeof(auth_challenge));
    if (rc > 0) {
        /* the listener sends nothing after its challenge until it has the
         * proof: an end behind the challenge means it gave up waiting */
        char b;
        ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            rc = -1;
    }
    if (rc < 0 && !again) {
        /* A handshake this rank began and then left unanswered (a hint's,
         * coll/exec/exec_hint.c, whose round ended before the challenge
         * came) is dropped by the listener after its allowance, as is one
         * pushed out of its table: neither is a death, and a fresh
         * connection says whether the peer lives. */
        close(fd);
        n->out_fd[peer] = -1;
        memset(hs, 0, sizeof *hs);
        return out_once(n, peer, fdp, err, errlen, 1);
    }
    if (rc <= 0) {
        if (rc < 0)
            snprintf(err, errlen,
                     "rank %d died (it closed the connection during authentication)", peer);
        return rc;
    }
    auth_challenge ch;
    uint8_t proof[AUTH_MAC_LEN];
    const char *why;
    hello_msg bind = { .magic = HELLO_MAGIC, .version = WIRE_VERSION, .auth = 1,
                       .comm_id = n->comm_id, .src = n->rank, .dst = peer };
    if (auth_challenge_decode(hs->buf, hs->have, &ch, &why) ||
        auth_answer(secret_of(n), &hs->mine, &ch, &bind, sizeof bind, proof)) {
        snprintf(err, errlen, "the listener of rank %d at %s failed to prove the job secret",
                 peer, n->addr[peer]);
        return WEFT_EAUTH;
    }
    if ((rc = sock_write_full(fd, proof, sizeof proof, clock_now() + n->connect_timeout_s))) {
        snprintf(err, errlen, "rank %d died (authentication: %s)", peer, weft_strerror(rc));
        return WEFT_EPEER;
    }
    if (n->tls) {
        uint8_t key[AUTH_MAC_LEN];
        int app;
        if ((rc = auth_channel_key(secret_of(n), &hs->mine, &ch, &bind, sizeof bind, key)))
            close(fd);
        else
            rc = secure(n, fd, 0, key, peer, &app, err, errlen); /* takes fd */
        if (rc) {
            n->out_fd[peer] = -1;
            memset(hs, 0, sizeof *hs);
            return rc;
        }
        n->out_fd[peer] = fd = app;
        *fdp = fd;
    }
    hs->state = HS_READY;
    log_sub(n->loglevel, LOG_TRACE, LOG_SUB_AUTH, n->rank, "connection to rank %d authenticated%s",
            peer, n->tls ? " (TLS)" : "");
    return ready(n, peer, fdp, err, errlen);
}

int tcp_in(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    *fdp = n->in_fd[peer];
    return *fdp >= 0;
}

static void pend_remove(tcp_net *n, int k)
{
    n->pend[k] = n->pend[--n->npend];
}

/* The epoll set watches p for what its stage waits on: its challenge going
 * out, else its bytes coming in. */
static void pend_watch(tcp_net *n, tcp_pend *p)
{
    uint32_t ev = p->stage == PEND_CHALLENGE ? EPOLLOUT : EPOLLIN;
    struct epoll_event e = { .events = ev, .data.fd = p->fd };
    if (p->ev == ev)
        return;
    epoll_ctl(n->efd, p->ev ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p->fd, &e);
    p->ev = ev;
}

/* p leaves the table: its socket is closed or goes to its member. */
static void pend_unwatch(tcp_net *n, tcp_pend *p)
{
    if (p->ev)
        epoll_ctl(n->efd, EPOLL_CTL_DEL, p->fd, NULL);
    p->ev = 0;
}

/* Room for one more pending connection: 0, or WEFT_ESYS/WEFT_ENOMEM with
 * err naming what ran out. */
static int pend_room(tcp_net *n, char *err, size_t errlen)
{
    if (!n->pend) {
        if ((n->efd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            snprintf(err, errlen, "epoll_create1: %s%s", strerror(errno),
                     errno == EMFILE ? " (RLIMIT_NOFILE reached)" : "");
            return WEFT_ESYS;
        }
    }
    if (n->npend < n->cap_pend)
        return 0;
    int cap = n->cap_pend ? 2 * n->cap_pend : TCP_PEND_MAX;
    if (cap > n->max_pend)
        cap = n->max_pend;
    tcp_pend *t = realloc(n->pend, (size_t)cap * sizeof *t);
    if (!t) {
        if (!n->pend)
            close(n->efd);
        snprintf(err, errlen, "no memory for %d connections in their handshake", cap);
        return WEFT_ENOMEM;
    }
    n->pend = t;
    n->cap_pend = cap;
    return 0;
}


enum { ADV_WAIT = 0, ADV_FILED, ADV_DROPPED };

static int drop_pend(tcp_net *n, tcp_pend *p, const char *why)
{
    if (p->src < 0)
        log_msg(n->loglevel, LOG_WARN, n->rank, "dropped an incoming connection: %s", why);
    else
        log_msg(n->loglevel, LOG_WARN, n->rank,
                "dropped a connection claiming to be rank %d: it %s", p->src, why);
    pend_unwatch(n, p);
    close(p->fd);
    return ADV_DROPPED;
}

/* A stream of a striped connection says which it is (stripe.h) before it
 * joins the others of its sender. */
static int advance_stripe(tcp_net *n, tcp_pend *p)
{
    int rc = fill_to(p->fd, p->in, &p->have, STRIPE_PREAMBLE), owner = -1;
    if (rc < 0)
        return drop_pend(n, p, "closed before naming its stream");
    if (rc == 0)
        return ADV_WAIT;
    pend_unwatch(n, p);
    if (!n->stripes &&
        stripe_set_new(&n->stripes, n->rank, n->streams, dial, n, n->loglevel))
        return drop_pend(n, p, "found no memory for its streams");
    if (stripe_in(n->stripes, p->src, p->fd, p->in, &owner))
        return drop_pend(n, p, "sent a bad stream preamble (is WEFT_WAN_STREAMS the same on "
                               "every rank?)");
    if (owner >= 0) {
        if (n->in_fd[p->src] >= 0)
            close(n->in_fd[p->src]); /* an earlier connection's, broken */
        n->in_fd[p->src] = owner;
    }
    log_sub(n->loglevel, LOG_TRACE, LOG_SUB_AUTH, n->rank, "stream from rank %d filed", p->src);
    return ADV_FILED;
}

/* A proven (or, without a secret, introduced) connection becomes src's. */
static int file_pend(tcp_net *n, tcp_pend *p)
{
    int fd = p->fd;
    pend_unwatch(n, p);
    if (striped(n, p->src)) {
        p->stage = PEND_STRIPE;
        p->have = 0;
        return advance_stripe(n, p);
    }
    if (n->tls) {
        char e[160];
        int rc = secure(n, p->fd, 1, p->key, p->src, &fd, e, sizeof e);
        if (rc) {
            log_msg(n->loglevel, LOG_WARN, n->rank,
                    "dropped the connection from rank %d: %s", p->src, e);
            return ADV_DROPPED;
        }
    }
    n->in_fd[p->src] = fd;
    log_sub(n->loglevel, LOG_TRACE, LOG_SUB_AUTH, n->rank, "connection from rank %d %s%s",
            p->src, secret_of(n) ? "authenticated" : "accepted", n->tls ? " (TLS)" : "");
    return ADV_FILED;
}

/* Moves pending connection p on as far as its bytes allow. */
static int advance(tcp_net *n, tcp_pend *p)
{
    const char *why;
    int rc;
    if (p->stage == PEND_STRIPE)
        return advance_stripe(n, p);
    if (p->stage == PEND_HELLO) {
        hello_msg h;
        size_t want = sizeof h;
        if (p->have >= sizeof h && secret_of(n))
            want += sizeof(auth_hello);
        rc = fill_to(p->fd, p->in, &p->have, want);
        if (rc < 0 && p->have == 0) {
            pend_unwatch(n, p);
            close(p->fd); /* a liveness probe (tcp_probe), or a port scan */
            return ADV_DROPPED;
        }
        if (rc < 0)
            return drop_pend(n, p, "it closed before introducing itself");
        if (p->have < sizeof h)
            return ADV_WAIT;
        if (frame_hello_decode(p->in, sizeof h, n->size, &h, &why))
            return drop_pend(n, p, why);
        if (h.comm_id != n->comm_id || h.dst != n->rank)
            return drop_pend(n, p,
                             "not a member of this communicator (or a different job secret)");
        if (h.auth != (secret_of(n) != NULL))
            return drop_pend(n, p, h.auth ? "peer authenticates but this rank has no job secret"
                                          : "peer does not authenticate (no job secret)");
        p->src = h.src;
        /* A member owes its proof one round trip later, but answers only
         * when it next runs: hundreds of ranks on a few cores can take
         * longer than a stranger's allowance, and dropping it would read
         * as its death. It knows the communicator's id (a hash of the
         * address and the secret); a flood of such is still pushed out. */
        if (p->deadline < clock_now() + n->connect_timeout_s)
            p->deadline = clock_now() + n->connect_timeout_s;
        if (n->in_fd[h.src] >= 0 && !striped(n, h.src))
            return drop_pend(n, p, "is a second connection from that rank");
        if (!secret_of(n)) {
            if (n->tls)
                return drop_pend(n, p, "cannot use TLS without a job secret");
            return file_pend(n, p);
        }
        rc = fill_to(p->fd, p->in, &p->have, sizeof h + sizeof(auth_hello));
        if (rc < 0)
            return drop_pend(n, p, "closed during authentication");
        if (p->have < sizeof h + sizeof(auth_hello))
            return ADV_WAIT;
        auth_hello a;
        if (auth_hello_decode(p->in + sizeof h, sizeof a, &a, &why) || a.role != AUTH_ROLE_DATA)
            return drop_pend(n, p, "sent a bad authentication hello");
        if (auth_challenge_make(secret_of(n), &a, &h, sizeof h, &p->ch, p->expect) ||
            (n->tls && auth_channel_key(secret_of(n), &a, &p->ch, &h, sizeof h, p->key)))
            return drop_pend(n, p, "could not be given a challenge");
        p->stage = PEND_CHALLENGE;
        p->sent = 0;
    }
    if (p->stage == PEND_CHALLENGE) {
        while (p->sent < sizeof p->ch) {
            ssize_t r = send(p->fd, (uint8_t *)&p->ch + p->sent, sizeof p->ch - p->sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r > 0) {
                p->sent += (uint16_t)r;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return ADV_WAIT;
            return drop_pend(n, p, "closed during authentication");
        }
        p->stage = PEND_PROOF;
        p->have = 0;
    }
    rc = fill_to(p->fd, p->in, &p->have, AUTH_MAC_LEN);
    if (rc < 0)
        return drop_pend(n, p, "closed before proving the job secret");
    if (rc == 0)
        return ADV_WAIT;
    if (auth_check(p->in, p->expect))
        return drop_pend(n, p, "failed to prove the job secret");
    if (n->in_fd[p->src] >= 0 && !striped(n, p->src))
        return drop_pend(n, p, "is a second proven connection from that rank");
    return file_pend(n, p);
}

int tcp_check_pending(tcp_net *n)
{
    int filed = 0;
    double now = clock_now();
    for (int k = n->npend; k-- > 0;) {
        tcp_pend *p = &n->pend[k];
        int r = advance(n, p);
        if (r == ADV_WAIT && now >= p->deadline) {
            char why[96];
            snprintf(why, sizeof why, "%s within %.0f s",
                     p->src < 0 ? "it did not introduce itself"
                                : "did not prove the job secret",
                     n->hello_wait_s);
            r = drop_pend(n, p, why);
        }
        if (r == ADV_WAIT) {
            pend_watch(n, p);
            continue;
        }
        filed += r == ADV_FILED;
        pend_remove(n, k);
    }
    return filed;
}

int tcp_accept_one(tcp_net *n, char *err, size_t errlen)
{
    int filed = 0, rc;
    /* a bounded batch: the caller has other sockets to look at too */
    for (int i = 0; i < 4 * TCP_PEND_MAX; i++) {
        int fd = accept4(n->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                break;
            int e = errno;
            snprintf(err, errlen, "accept: %s", strerror(e));
            sock_limit_note(e, err, errlen);
            return WEFT_ESYS;
        }
        if ((rc = pend_room(n, err, errlen))) {
            close(fd);
            return rc;
        }
        sock_tune(fd);
        if (n->npend == n->cap_pend) {
            /* Under a flood one must go: the oldest of those that have not
             * even introduced themselves, so a member half way through its
             * handshake (a round trip) survives a flood of silent ones. */
            int victim = -1;
            for (int k = 0; k < n->npend; k++)
                if (victim < 0 || (n->pend[k].src < 0) > (n->pend[victim].src < 0) ||
                    ((n->pend[k].src < 0) == (n->pend[victim].src < 0) &&
                     n->pend[k].deadline < n->pend[victim].deadline))
                    victim = k;
            drop_pend(n, &n->pend[victim], "was pushed out by newer connections");
            pend_remove(n, victim);
        }
        n->pend[n->npend++] = (tcp_pend){ .fd = fd, .src = -1, .stage = PEND_HELLO,
                                          .deadline = clock_now() + n->hello_wait_s };
        /* a member's hello is usually there already: take it now */
        filed += tcp_check_pending(n);
    }
    return filed > 0;
}

int tcp_pending(const tcp_net *n, void *pfv, int max)
{
    struct pollfd *pf = pfv;
    if (!n->npend || max < 1)
        return 0;
    /* an epoll set is readable while any socket in it is ready, so a
     * waiter polls every handshake, however many, through one entry */
    pf[0] = (struct pollfd){ .fd = n->efd, .events = POLLIN };
    return 1;
}

int tcp_probe(tcp_net *n, int peer)
{
    char host[SOCK_ADDR_MAX], e[160];
    int port, fd;
    if (sock_split_addr(n->addr[peer], host, sizeof host, &port))
        return 0;
    /* the kernel completes the connection for a live listener even while
     * its process is busy elsewhere; a dead process's port refuses */
    fd = sock_connect_once(host, port, clock_now() + 1.0, e, sizeof e);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return fd == WEFT_EPEER ? WEFT_EPEER : 0;
}
