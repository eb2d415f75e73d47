/* Several streams behind one connection (transport/stripe.h), on
 * socketpairs in one process: what the owner writes arrives whole and in
 * order, and a stream that drains slowly (a relay that naps between
 * reads, as a stream backing off after a loss would) is given fewer
 * chunks than its turn while the others carry on: the receiver puts the
 * chunks back in order by their sequence numbers. */
#include "test.h"

#include "transport/stripe.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 4
#define SLOW 1
#define TOTAL ((size_t)16 << 20)

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ends[N], nends; /* receiving ends of the streams, as dialled */
    stripe_set *rx;
    int owner_rx;
    int relay_in, relay_out;
    size_t relayed;
    pthread_t relay;
    int relaying;
} rig;

static int dial(void *ctx, int peer, char *err, size_t errlen)
{
    rig *g = ctx;
    int sp[2];
    (void)peer;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
        snprintf(err, errlen, "socketpair");
        return -1;
    }
    pthread_mutex_lock(&g->mu);
    g->ends[g->nends++] = sp[1];
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return sp[0];
}

/* The slow stream's path: 8 KiB at a time, 10 ms apart (0.8 MB/s). */
static void *relay_main(void *arg)
{
    rig *g = arg;
    char *buf = malloc(8 << 10);
    struct timespec nap = { 0, 10 * 1000 * 1000 };
    for (;;) {
        ssize_t r = read(g->relay_in, buf, 8 << 10);
        if (r <= 0)
            break;
        for (ssize_t off = 0; off < r;) {
            /* the receiver may close its end once every chunk is in, while
             * this relay still forwards the tail: an error, not SIGPIPE */
            ssize_t w = send(g->relay_out, buf + off, (size_t)(r - off), MSG_NOSIGNAL);
            if (w <= 0)
                goto out;
            off += w;
        }
        g->relayed += (size_t)r;
        nanosleep(&nap, NULL);
    }
out:
    close(g->relay_out);
    free(buf);
    return NULL;
}

/* The listener's part: each stream's preamble read, the stream filed. */
static void *accept_main(void *arg)
{
    rig *g = arg;
    for (int k = 0; k < N; k++) {
        pthread_mutex_lock(&g->mu);
        while (g->nends <= k)
            pthread_cond_wait(&g->cv, &g->mu);
        int fd = g->ends[k];
        pthread_mutex_unlock(&g->mu);
        uint8_t pre[STRIPE_PREAMBLE];
        size_t got = 0;
        while (got < sizeof pre) {
            ssize_t r = read(fd, pre + got, sizeof pre - got);
            if (r <= 0)
                return NULL;
            got += (size_t)r;
        }
        uint16_t idx;
        memcpy(&idx, pre + 2, sizeof idx);
        if (idx == SLOW) {
            int sp[2];
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
                return NULL;
            g->relay_in = fd;
            g->relay_out = sp[0];
            fd = sp[1];
            g->relaying = !pthread_create(&g->relay, NULL, relay_main, g);
        }
        int owner = -1;
        if (stripe_in(g->rx, 0, fd, pre, &owner) == 0 && owner >= 0)
            g->owner_rx = owner;
    }
    return NULL;
}

/* The data, a word at a time (cheap under the sanitizers): word w of
 * the stream. */
static uint64_t word_at(size_t w) { return w * 0x9E3779B97F4A7C15ull + (w >> 7); }

typedef struct {
    int fd;
} writer;

/* The owners' ends are non-blocking, as the transport uses them. */
static void wait_for(int fd, short ev)
{
    struct pollfd pf = { .fd = fd, .events = ev };
    poll(&pf, 1, 1000);
}

static void *write_main(void *arg)
{
    writer *w = arg;
    uint8_t *buf = malloc(1 << 20);
    for (size_t off = 0; off < TOTAL;) {
        size_t len = (size_t)1 << 20;
        if (len > TOTAL - off)
            len = TOTAL - off;
        for (size_t i = 0; i < len; i += 8) {
            uint64_t v = word_at((off + i) / 8);
            memcpy(buf + i, &v, 8);
        }
        for (size_t done = 0; done < len;) {
            ssize_t r = send(w->fd, buf + done, len - done, MSG_NOSIGNAL);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                wait_for(w->fd, POLLOUT);
                continue;
            }
            if (r <= 0)
                goto out;
            done += (size_t)r;
        }
        off += len;
    }
out:
    close(w->fd); /* the end of the owner's data: the sender flushes and closes */
    free(buf);
    return NULL;
}

TEST(slow_stream_gets_fewer_chunks_and_order_holds)
{
    rig g = { .owner_rx = -1, .relay_in = -1, .relay_out = -1 };
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    stripe_set *tx = NULL;
    CHECK(stripe_set_new(&tx, 0, N, dial, &g, 0) == 0);
    CHECK(stripe_set_new(&g.rx, 1, N, dial, &g, 0) == 0);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    pthread_mutex_lock(&g.mu);
    g.ends[g.nends++] = sp[1]; /* stream 0 is the connection itself */
    pthread_mutex_unlock(&g.mu);
    pthread_t acc, wr;
    CHECK(pthread_create(&acc, NULL, accept_main, &g) == 0);
    int fd = sp[0];
    CHECK(stripe_out(tx, 1, &fd, (char[64]){ 0 }, 64) == 0);
    writer w = { fd };
    CHECK(pthread_create(&wr, NULL, write_main, &w) == 0);
    pthread_join(acc, NULL);
    CHECK(g.owner_rx >= 0);
    uint8_t *buf = malloc(TOTAL + 1);
    size_t got = 0, wrong = 0;
    for (;;) {
        ssize_t r = recv(g.owner_rx, buf + got, TOTAL + 1 - got, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait_for(g.owner_rx, POLLIN);
            continue;
        }
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    for (size_t i = 0; i + 8 <= got; i += 8) {
        uint64_t v;
        memcpy(&v, buf + i, 8);
        wrong += v != word_at(i / 8);
    }
    pthread_join(wr, NULL);
    if (g.relaying)
        pthread_join(g.relay, NULL);
    CHECKF(got == TOTAL, "%zu of %zu bytes", got, TOTAL);
    CHECKF(wrong == 0, "%zu words out of place", wrong);
    /* in turns it would carry TOTAL / N exactly (a chunk is 256 KiB) */
    fprintf(stderr, "the slow stream carried %zu of %zu bytes\n", g.relayed, TOTAL);
    CHECKF(g.relayed < TOTAL / N * 3 / 4, "the slow stream carried %zu of %zu bytes", g.relayed,
           TOTAL);
    stripe_set_free(tx, 1.0);
    stripe_set_free(g.rx, 0);
    close(g.owner_rx);
    free(buf);
}
