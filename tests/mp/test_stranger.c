/* A stranger on a data port or the store never holds up the job.
 *
 * 1. Strangers that connect and say nothing (or half a hello, or a flood of
 *    more connections than a rank keeps pending) while 4 ranks
 *    run collectives and a split, with a handshake deadline far longer
 *    than each rank's alarm: the collectives must finish with the right
 *    results, so no rank waited on a stranger; the strangers are still
 *    pending (accepted, not yet dropped) when the job is done.
 * 2. With a 1 s deadline, a silent stranger and one that sends its hello a
 *    byte at a time are dropped while the job goes on, and the rank logs
 *    why; the slow one is dropped before it can finish its hello, so
 *    trickling bytes does not extend the deadline. */
#include "mp.h"

#include "coll/comm.h"
#include "core/clock.h"
#include "transport/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

static int connect_to(const char *addr)
{
    char host[SOCK_ADDR_MAX], err[160];
    int port;
    if (sock_split_addr(addr, host, sizeof host, &port))
        return -1;
    return sock_connect(host, port, clock_now() + 5, err, sizeof err);
}

/* 1 once the other end has closed fd (without waiting). */
static int gone(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    char b[256];
    if (poll(&p, 1, 0) <= 0)
        return 0;
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int allreduce_ok(weft_comm *c, float *x, int n, float flag)
{
    int P = weft_comm_size(c), r = weft_comm_rank(c), ok = 1;
    for (int i = 0; i < n; i++)
        x[i] = (float)(r + i);
    x[n] = flag;
    if (weft_allreduce(c, x, x, (size_t)n + 1, WEFT_F32, WEFT_SUM))
        return 0;
    for (int i = 0; i < n; i++)
        ok &= x[i] == (float)(P * i + P * (P - 1) / 2);
    return ok;
}

#define FLOOD (2 * TCP_PEND_MAX + 8)

static void silent(weft_comm *c, void *arg)
{
    int r = c->rank, fds[3] = { -1, -1, -1 }, flood[FLOOD], ok = 1;
    float x[1001];
    alarm(40); /* far below the handshake deadline: a wait on a stranger fails */
    if (r == 0) {
        hello_msg half = { .magic = HELLO_MAGIC, .version = WIRE_VERSION, .auth = 1 };
        fds[0] = connect_to(c->net.addr[1]);
        fds[1] = connect_to(c->net.addr[2]);
        fds[2] = sock_connect(c->store_host, c->store_port, clock_now() + 5, NULL, 0);
        CHECK(fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0);
        CHECK(sock_write_full(fds[1], &half, sizeof half / 2, clock_now() + 5) == 0);
        /* more silent ones than rank 3 has slots for */
        for (int i = 0; i < FLOOD; i++)
            flood[i] = connect_to(c->net.addr[3]);
        CHECK(store_set(c->store, "test/strangers", "1", 1) == 0);
    } else {
        /* no data connection exists before this: the first ones queue
         * behind the strangers, so ranks 1 and 2 accept those too */
        void *v = NULL;
        CHECK(store_get(c->store, "test/strangers", &v, NULL, 30) == 0);
        free(v);
    }
    for (int i = 0; i < 30; i++)
        ok &= allreduce_ok(c, x, 1000, 0);
    CHECK(ok);
    /* the store serves rendezvous while a stranger sits on it */
    weft_comm *sub = NULL;
    CHECK(weft_comm_split(c, r % 2, r, &sub) == 0 && sub);
    if (sub) {
        CHECK(allreduce_ok(sub, x, 1000, 0));
        CHECK(weft_comm_destroy(sub) == 0);
    }
    CHECK(allreduce_ok(c, x, 1000, 0));
    /* Ranks 1 and 2 may or may not have accepted their stranger by now: a
     * rank that already has every connection it needs (made while the
     * communicator was set up, or carried by shared memory) need not look
     * at its listening socket again, and the stranger waits in the
     * kernel's backlog. Either way it was not dropped (checked below on
     * rank 0) and did not hold anything up (the collectives above). */
    if (r == 0) {
        CHECK(!gone(fds[0]) && !gone(fds[1]));
        for (int i = 0; i < 3; i++)
            close(fds[i]);
        for (int i = 0; i < FLOOD; i++)
            if (flood[i] >= 0)
                close(flood[i]);
    }
}

typedef struct {
    const char *log;
} timed_arg;

static void timed(weft_comm *c, void *arg)
{
    timed_arg *t = arg;
    int r = c->rank, quiet = -1, slow = -1, quiet_gone = 0, slow_gone = 0, ok = 1;
    size_t slow_sent = 0;
    hello_msg h = { .magic = HELLO_MAGIC, .version = WIRE_VERSION, .auth = 1,
                    .comm_id = c->id, .src = 0, .dst = 1 };
    double next_byte = 0, give_up = clock_now() + 30;
    float x[101];
    if (r == 1) { /* what rank 1 logs, for the parent to read */
        int fd = open(t->log, O_WRONLY | O_TRUNC);
        CHECK(fd >= 0 && dup2(fd, 2) == 2);
        close(fd);
    }
    if (r == 0) {
        quiet = connect_to(c->net.addr[1]);
        slow = connect_to(c->net.addr[1]);
        CHECK(quiet >= 0 && slow >= 0);
    }
    for (;;) {
        float stop = 0;
        if (r == 0) {
            if (!slow_gone && slow_sent < sizeof h && clock_now() >= next_byte) {
                if (send(slow, (char *)&h + slow_sent, 1, MSG_NOSIGNAL) == 1)
                    slow_sent++;
                else
                    slow_gone = 1;
                next_byte = clock_now() + 0.25;
            }
            quiet_gone |= gone(quiet);
            slow_gone |= gone(slow);
            stop = (quiet_gone && slow_gone) || clock_now() > give_up;
        }
        ok &= allreduce_ok(c, x, 100, stop);
        if (x[100] != 0)
            break;
        usleep(2000);
    }
    CHECK(ok);
    if (r == 0) {
        CHECK(quiet_gone);
        CHECKF(slow_gone && slow_sent < sizeof h, "slow stranger %s after %zu of %zu bytes",
               slow_gone ? "dropped" : "NOT dropped", slow_sent, sizeof h);
        close(quiet);
        close(slow);
    }
    if (r == 1)
        CHECK(c->net.npend == 0);
}

TEST(silent)
{
    setenv("WEFT_HANDSHAKE_TIMEOUT", "300", 1);
    CHECK(mp_run(4, 30, silent, NULL) == 0);
    unsetenv("WEFT_HANDSHAKE_TIMEOUT");
}

TEST(dropped_at_deadline)
{
    char path[] = "/tmp/weft-stranger-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    timed_arg t = { .log = path };
    setenv("WEFT_HANDSHAKE_TIMEOUT", "1", 1);
    CHECK(mp_run(4, 30, timed, &t) == 0);
    unsetenv("WEFT_HANDSHAKE_TIMEOUT");
    char *log = fx_slurp(path, NULL);
    unlink(path);
    const char *want = "dropped an incoming connection: it did not introduce itself within 1 s";
    const char *p1 = log ? strstr(log, want) : NULL, *p2 = p1 ? strstr(p1 + 1, want) : NULL;
    CHECKF(p1 && p2, "rank 1 logged:\n%s", log ? log : "");
    free(log);
}
