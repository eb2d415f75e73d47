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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256u << 10) /* a turn's most bytes: enough to fill a window between turns */
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

/* Waits for what the owner writes, then takes what is there (at most
 * cap): bytes read, 0 at its close, negative on an error. */
static ssize_t read_some(int fd, uint8_t *buf, size_t cap)
{
    for (;;) {
        ssize_t r = recv(fd, buf, cap, MSG_DONTWAIT);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (poll(&pf, 1, -1) < 0 && errno != EINTR)
            return -1;
    }
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

static void *send_main(void *arg)
{
    stripe_conn *k = arg;
    stripe_set *s = k->set;
    uint8_t pre[STRIPE_PREAMBLE], *buf = malloc(CHUNK + 4);
    char err[200] = "out of memory";
    int ok = buf != NULL;
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
    for (uint64_t turn = 0; ok; turn++) {
        ssize_t got = read_some(k->app, buf + 4, CHUNK);
        if (got <= 0)
            break;
        uint32_t len = (uint32_t)got;
        memcpy(buf, &len, 4);
        ok = !sock_write_full(k->fd[turn % (uint64_t)s->n], buf, (size_t)got + 4,
                              clock_now() + FOREVER);
    }
    return finish(k, buf);
}

static void *recv_main(void *arg)
{
    stripe_conn *k = arg;
    stripe_set *s = k->set;
    uint8_t *buf = malloc(CHUNK);
    for (uint64_t turn = 0; buf; turn++) {
        int fd = k->fd[turn % (uint64_t)s->n];
        uint32_t len;
        if (sock_read_full(fd, &len, sizeof len, clock_now() + FOREVER) || len > CHUNK ||
            sock_read_full(fd, buf, len, clock_now() + FOREVER) ||
            sock_write_full(k->app, buf, len, clock_now() + FOREVER))
            break;
    }
    return finish(k, buf);
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
