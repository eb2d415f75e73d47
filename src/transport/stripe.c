/* Several TCP streams behind one connection (see stripe.h). */
#include "transport/stripe.h"

#include "core/clock.h"
#include "core/log.h"
#include "transport/sock.h"
#include "weft.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/sockios.h> /* SIOCOUTQ */
#endif

#define CHUNK (256u << 10) /* a chunk's most bytes: enough to fill a window between turns */
#define STRIPE_HDR 8       /* a chunk's length and sequence number, u32 each */
#define HELD_MAX 64        /* chunks held ahead of their turn: 16 MiB, a lost packet's
                            * recovery at 1 Gbit/s (~100 ms) with the other streams busy */
#define FOREVER 1e9        /* a stream waits on its peer as long as the owner does */

typedef struct {
    stripe_set *set;
    int peer, out;
    int app; /* this side's end of the owner's socketpair */
    int fd[STRIPE_MAX], have;
    pthread_t th;
    int started;
    atomic_int done;
} stripe_conn;

struct stripe_set {
    int rank, n, loglevel;
    stripe_dial_fn dial;
    void *ctx;
    pthread_mutex_t mu;
    stripe_conn **conn;
    int nconn, cap;
};

int stripe_set_new(stripe_set **out, int rank, int nstreams, stripe_dial_fn dial, void *ctx,
                   int loglevel)
{
    stripe_set *s = calloc(1, sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    s->rank = rank;
    s->n = nstreams;
    s->dial = dial;
    s->ctx = ctx;
    s->loglevel = loglevel;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void stripe_preamble(uint8_t out[STRIPE_PREAMBLE], int index, int n)
{
    uint16_t v[2] = { (uint16_t)index, (uint16_t)n };
    out[0] = 'W';
    out[1] = 'S';
    memcpy(out + 2, v, sizeof v);
    out[6] = out[7] = 0;
}

static void close_streams(stripe_conn *k)
{
    for (int i = 0; i < k->have; i++)
        if (k->fd[i] >= 0) {
            shutdown(k->fd[i], SHUT_RDWR);
            close(k->fd[i]);
            k->fd[i] = -1;
        }
    /* the owner sees the connection end, as it would a peer's socket */
    shutdown(k->app, SHUT_RDWR);
}

/* A thread's end: its streams and the owner's socket closed. */
static void *finish(stripe_conn *k, uint8_t *buf)
{
    pthread_mutex_lock(&k->set->mu);
    close_streams(k);
    pthread_mutex_unlock(&k->set->mu);
    free(buf);
    atomic_store(&k->done, 1);
    return NULL;
}

/* The sender's state of one stream: the chunk it is writing, if any. */
typedef struct {
    uint8_t *buf;
    size_t len, off; /* off < len: still writing */
} stripe_tx;

/* Bytes the kernel still holds for fd (not yet acknowledged): the
 * stream with the least has the most room on the path. */
static int outq(int fd)
{
#ifdef SIOCOUTQ
    int q = 0;
    if (ioctl(fd, SIOCOUTQ, &q) == 0)
        return q;
#else
    (void)fd;
#endif
    return 0;
}

/* Writes what the stream can take now: 0, or -1 on an error. */
static int tx_push(int fd, stripe_tx *t)
{
    while (t->off < t->len) {
        ssize_t w = send(fd, t->buf + t->off, t->len - t->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            t->off += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        else
            return -1;
    }
    return 0;
}

static void *send_main(void *arg)
{
    stripe_conn *k = arg;
    stripe_set *s = k->set;
    uint8_t pre[STRIPE_PREAMBLE];
    char err[200] = "out of memory";
    stripe_tx tx[STRIPE_MAX] = { { 0 } };
    uint8_t *pool = malloc((size_t)s->n * (CHUNK + STRIPE_HDR));
    int ok = pool != NULL;
    for (int i = 0; pool && i < s->n; i++)
        tx[i].buf = pool + (size_t)i * (CHUNK + STRIPE_HDR);
    stripe_preamble(pre, 0, s->n);
    ok = ok && !sock_write_full(k->fd[0], pre, sizeof pre, clock_now() + FOREVER);
    for (int i = 1; ok && i < s->n; i++) {
        int fd = s->dial(s->ctx, k->peer, err, sizeof err);
        if (fd < 0) {
            ok = 0;
            break;
        }
        pthread_mutex_lock(&s->mu);
        k->fd[k->have++] = fd;
        pthread_mutex_unlock(&s->mu);
        stripe_preamble(pre, i, s->n);
        ok = !sock_write_full(fd, pre, sizeof pre, clock_now() + FOREVER);
    }
    if (!ok)
        log_msg(s->loglevel, LOG_WARN, s->rank, "streams to rank %d: %s", k->peer, err);
    /* Each chunk goes to an idle stream, the one with the least in flight,
     * not to the next in turn: a stream that lost a packet and backs off
     * keeps its one chunk while the others carry on (the receiver puts
     * the chunks back in order by their sequence numbers). */
    uint32_t seq = 0;
    int app_eof = 0;
    while (ok) {
        struct pollfd pf[STRIPE_MAX + 1];
        int busy = 0, idle = -1, idleq = 0;
        for (int i = 0; i < s->n; i++) {
            pf[i] = (struct pollfd){ .fd = k->fd[i], .events = 0 };
            if (tx[i].off < tx[i].len) {
                pf[i].events = POLLOUT;
                busy++;
            }
        }
        if (app_eof && !busy)
            break;
        pf[s->n] = (struct pollfd){ .fd = k->app, .events = 0 };
        if (!app_eof && busy < s->n)
            pf[s->n].events = POLLIN;
        if (poll(pf, (nfds_t)s->n + 1, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; ok && i < s->n; i++) {
            if (pf[i].revents & (POLLERR | POLLHUP | POLLNVAL))
                ok = 0; /* the peer is gone (or the set is closing) */
            else if (pf[i].revents && tx[i].off < tx[i].len)
                ok = !tx_push(k->fd[i], &tx[i]);
        }
        /* take what the owner wrote while a stream is free for it */
        while (ok && !app_eof && (pf[s->n].revents || idle >= 0)) {
            idle = -1;
            for (int i = 0; i < s->n; i++) {
                if (tx[i].off < tx[i].len)
                    continue;
                int q = outq(k->fd[i]);
                if (idle < 0 || q < idleq) {
                    idle = i;
                    idleq = q;
                }
            }
            if (idle < 0)
                break;
            ssize_t got = recv(k->app, tx[idle].buf + STRIPE_HDR, CHUNK, MSG_DONTWAIT);
            if (got == 0) {
                app_eof = 1;
                break;
            }
            if (got < 0) {
                if (errno == EINTR)
                    continue;
                ok = errno == EAGAIN || errno == EWOULDBLOCK;
                break;
            }
            uint32_t h[2] = { (uint32_t)got, seq++ };
            memcpy(tx[idle].buf, h, sizeof h);
            tx[idle].len = (size_t)got + STRIPE_HDR;
            tx[idle].off = 0;
            ok = !tx_push(k->fd[idle], &tx[idle]);
        }
    }
    return finish(k, pool);
}

/* The receiver's state of one stream: a chunk's header, then its body. */
typedef struct {
    uint8_t hdr[STRIPE_HDR];
    size_t hoff;
    uint8_t *body; /* NULL until the header is whole and there is room */
    uint32_t len, seq, boff;
    int eof;
} stripe_rx;

/* Chunks that came ahead of their turn, held until it comes. */
typedef struct {
    uint8_t *body;
    uint32_t len, seq;
} stripe_held;

/* Reads what fd has now into want bytes at buf (*off of them done):
 * 1 once whole, 0 for more later, -1 at an error or the stream's end
 * (*eof set at the end). */
static int rx_pull(int fd, uint8_t *buf, size_t want, size_t *off, int *eof)
{
    while (*off < want) {
        ssize_t r = recv(fd, buf + *off, want - *off, MSG_DONTWAIT);
        if (r > 0)
            *off += (size_t)r;
        else if (r == 0) {
            *eof = 1;
            return -1;
        } else if (errno == EINTR)
            continue;
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        else
            return -1;
    }
    return 1;
}

static void *recv_main(void *arg)
{
    stripe_conn *k = arg;
    stripe_set *s = k->set;
    stripe_rx rx[STRIPE_MAX];
    memset(rx, 0, sizeof rx);
    /* each stream may finish one chunk past the limit: room for those too */
    stripe_held held[HELD_MAX + STRIPE_MAX];
    int nheld = 0, ok = 1, live = s->n;
    uint32_t next = 0;
    while (ok && live > 0) {
        struct pollfd pf[STRIPE_MAX];
        for (int i = 0; i < s->n; i++) {
            stripe_rx *x = &rx[i];
            int parked = x->hoff == STRIPE_HDR && !x->body; /* ahead, and no room to hold it */
            pf[i] = (struct pollfd){ .fd = x->eof ? -1 : k->fd[i], .events = parked ? 0 : POLLIN };
        }
        if (poll(pf, (nfds_t)s->n, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < s->n; i++)
            if (!pf[i].events && (pf[i].revents & (POLLERR | POLLHUP | POLLNVAL)))
                ok = 0; /* a parked stream broke: the peer is gone */
        int moved = 1;
        while (ok && moved) {
            moved = 0;
            for (int i = 0; ok && i < s->n; i++) {
                stripe_rx *x = &rx[i];
                if (x->eof)
                    continue;
                if (x->hoff < STRIPE_HDR) {
                    if (!pf[i].revents)
                        continue;
                    int rc = rx_pull(k->fd[i], x->hdr, STRIPE_HDR, &x->hoff, &x->eof);
                    if (rc < 0) {
                        /* the sender's end closes a stream between chunks only */
                        ok = x->eof && x->hoff == 0;
                        live--;
                        continue;
                    }
                    if (rc == 0)
                        continue;
                    uint32_t h[2];
                    memcpy(h, x->hdr, sizeof h);
                    x->len = h[0];
                    x->seq = h[1];
                    x->boff = 0;
                    if (x->len == 0 || x->len > CHUNK) {
                        ok = 0;
                        break;
                    }
                }
                if (!x->body) {
                    if (x->seq != next && nheld >= HELD_MAX)
                        continue; /* parked until its turn comes */
                    if (!(x->body = malloc(x->len))) {
                        ok = 0;
                        break;
                    }
                }
                size_t off = x->boff;
                int rc = rx_pull(k->fd[i], x->body, x->len, &off, &x->eof);
                x->boff = (uint32_t)off;
                if (rc < 0) {
                    ok = 0;
                    break;
                }
                if (rc == 0)
                    continue;
                moved = 1;
                held[nheld++] = (stripe_held){ x->body, x->len, x->seq };
                x->body = NULL;
                x->hoff = 0;
                /* pass on every chunk whose turn it now is */
                for (int j = 0; ok && j < nheld;) {
                    if (held[j].seq != next) {
                        j++;
                        continue;
                    }
                    ok = !sock_write_full(k->app, held[j].body, held[j].len, clock_now() + FOREVER);
                    free(held[j].body);
                    held[j] = held[--nheld];
                    next++;
                    j = 0;
                }
            }
            /* a parked stream may take its chunk now */
            for (int i = 0; i < s->n; i++)
                if (!rx[i].eof && rx[i].hoff == STRIPE_HDR && !rx[i].body &&
                    (rx[i].seq == next || nheld < HELD_MAX))
                    moved = 1, pf[i].revents = POLLIN;
        }
    }
    for (int i = 0; i < nheld; i++)
        free(held[i].body);
    for (int i = 0; i < s->n; i++)
        free(rx[i].body);
    return finish(k, NULL);
}

/* A new connection of the set with its socketpair; *owner: the owner's end. */
static stripe_conn *conn_new(stripe_set *s, int peer, int out, int *owner)
{
    int sp[2];
    stripe_conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    if (s->nconn == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        stripe_conn **g = realloc(s->conn, (size_t)cap * sizeof *g);
        if (!g) {
            free(k);
            return NULL;
        }
        s->conn = g;
        s->cap = cap;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
        free(k);
        return NULL;
    }
    k->set = s;
    k->peer = peer;
    k->out = out;
    k->app = sp[1];
    for (int i = 0; i < STRIPE_MAX; i++)
        k->fd[i] = -1;
    *owner = sp[0];
    s->conn[s->nconn++] = k;
    return k;
}

int stripe_out(stripe_set *s, int peer, int *fd, char *err, size_t errlen)
{
    int owner;
    pthread_mutex_lock(&s->mu);
    stripe_conn *k = conn_new(s, peer, 1, &owner);
    if (k) {
        k->fd[0] = *fd;
        k->have = 1;
        k->started = !pthread_create(&k->th, NULL, send_main, k);
    }
    pthread_mutex_unlock(&s->mu);
    if (!k || !k->started) {
        snprintf(err, errlen, "streams to rank %d: %s", peer,
                 k ? "cannot start a thread" : "out of memory");
        if (k) {
            close(owner);
            k->fd[0] = -1; /* still the caller's */
        }
        return k ? WEFT_ESYS : WEFT_ENOMEM;
    }
    *fd = owner;
    return 0;
}

int stripe_in(stripe_set *s, int src, int fd, const uint8_t *pre, int *owner)
{
    uint16_t v[2];
    memcpy(v, pre + 2, sizeof v);
    if (pre[0] != 'W' || pre[1] != 'S' || v[1] != s->n || v[0] >= s->n)
        return WEFT_EPROTO; /* another N, or no streams on that side */
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    stripe_conn *k = NULL;
    for (int i = s->nconn; i-- > 0 && !k;)
        if (!s->conn[i]->out && s->conn[i]->peer == src && !s->conn[i]->started)
            k = s->conn[i];
    if (!k && !(k = conn_new(s, src, 0, owner)))
        rc = WEFT_ENOMEM;
    else if (k->fd[v[0]] >= 0)
        rc = WEFT_EPROTO;
    if (!rc) {
        k->fd[v[0]] = fd;
        if (++k->have == s->n && pthread_create(&k->th, NULL, recv_main, k) == 0)
            k->started = 1;
        else if (k->have == s->n)
            close_streams(k); /* no thread: the owner sees the peer gone */
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int stripe_count(const stripe_set *s, int peer, int out)
{
    int n = 0;
    if (!s)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    for (int i = 0; i < s->nconn; i++)
        if (s->conn[i]->peer == peer && s->conn[i]->out == out && !atomic_load(&s->conn[i]->done))
            n = s->conn[i]->have;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return n;
}

void stripe_set_free(stripe_set *s, double flush_s)
{
    if (!s)
        return;
    double until = clock_now() + flush_s;
    struct timespec nap = { 0, 1000000 };
    for (int i = 0; i < s->nconn; i++) {
        stripe_conn *k = s->conn[i];
        /* a sender ends once it has passed on what its owner wrote (the
         * owner's end is closed by now); past the flush, or a receiver,
         * its streams are shut to wake it */
        while (k->started && k->out && !atomic_load(&k->done) && clock_now() < until)
            nanosleep(&nap, NULL);
        if (k->started && !atomic_load(&k->done)) {
            pthread_mutex_lock(&s->mu);
            for (int j = 0; j < k->have; j++)
                if (k->fd[j] >= 0)
                    shutdown(k->fd[j], SHUT_RDWR);
            shutdown(k->app, SHUT_RDWR);
            pthread_mutex_unlock(&s->mu);
        }
        if (k->started)
            pthread_join(k->th, NULL);
        else
            close_streams(k);
        close(k->app);
        free(k);
    }
    free(s->conn);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
