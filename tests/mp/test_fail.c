/* Failures become errors, not hangs: a rank that dies mid-collective, a
 * rank that never shows up for a collective (timeout), and an abort from
 * another thread. */
#include "mp.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* Rank 2 of 4 dies in the middle of a stream of all-reduces; every other
 * rank must get WEFT_EPEER (not a timeout) naming a rank. */
static void die_midway(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t n = 1 << 18;
    float *buf = calloc(n, sizeof *buf);
    int rc = 0;
    (void)arg;
    for (int it = 0; it < 1000 && rc == 0; it++) {
        if (r == 2 && it == 5)
            _exit(9); /* a crash: no goodbye */
        rc = weft_allreduce(c, buf, buf, n, WEFT_F32, WEFT_SUM);
    }
    CHECKF(rc == WEFT_EPEER, "rank %d: %s: %s", r, weft_strerror(rc), weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), "rank ") != NULL, "message: %s", weft_comm_error(c));
    /* the communicator stays failed, and says so */
    CHECK(weft_allreduce(c, buf, buf, 1, WEFT_F32, WEFT_SUM) != 0);
    free(buf);
}

/* Rank 1 does not join the all-reduce in time. */
static void no_show(weft_comm *c, void *arg)
{
    float x = 1;
    (void)arg;
    if (weft_comm_rank(c) == 1) {
        sleep(3);
        weft_comm_abort(c); /* rank 0 has given up on this job */
        return;
    }
    int rc = weft_allreduce(c, &x, &x, 1, WEFT_F32, WEFT_SUM);
    CHECKF(rc == WEFT_ETIMEDOUT, "%s", weft_strerror(rc));
    CHECKF(strstr(weft_comm_error(c), "allreduce(count=1, f32, sum)") &&
           strstr(weft_comm_error(c), "1"), "message: %s", weft_comm_error(c));
}

static void *aborter(void *arg)
{
    usleep(300 * 1000);
    weft_comm_abort(arg);
    return NULL;
}

/* An abort from another thread unblocks a rank waiting for a peer. */
static void aborted(weft_comm *c, void *arg)
{
    float x = 1;
    pthread_t th;
    (void)arg;
    if (weft_comm_rank(c) == 1) {
        sleep(2);
        weft_comm_abort(c);
        return;
    }
    pthread_create(&th, NULL, aborter, c);
    int rc = weft_allreduce(c, &x, &x, 1, WEFT_F32, WEFT_SUM);
    pthread_join(th, NULL);
    CHECKF(rc == WEFT_EABORTED, "%s", weft_strerror(rc));
    CHECK(weft_barrier(c) == WEFT_EABORTED);
}

static char dump[4096];

static void *dumper(void *arg)
{
    int fds[2];
    usleep(500 * 1000);
    if (pipe(fds) == 0) {
        weft_comm_dump(arg, fds[1]);
        close(fds[1]);
        ssize_t n = read(fds[0], dump, sizeof dump - 1);
        dump[n > 0 ? n : 0] = 0;
        close(fds[0]);
    }
    weft_comm_abort(arg);
    return NULL;
}

/* The flight recorder shows finished operations and, for the one in
 * progress, the rank it waits on; weft_comm_dump works from another thread
 * while the operation blocks. */
static void recorder(weft_comm *c, void *arg)
{
    float x = 1;
    pthread_t th;
    (void)arg;
    CHECK(weft_allreduce(c, &x, &x, 1, WEFT_F32, WEFT_SUM) == 0);
    CHECK(weft_comm_dump(NULL, 2) == WEFT_EINVAL);
    if (weft_comm_rank(c) == 1) {
        sleep(2);
        weft_comm_abort(c);
        return;
    }
    pthread_create(&th, NULL, dumper, c);
    int rc = weft_broadcast(c, &x, 1, WEFT_F32, 1);
    pthread_join(th, NULL);
    CHECKF(rc == WEFT_EABORTED, "%s", weft_strerror(rc));
    CHECKF(strstr(dump, "allreduce(count=1, f32, sum) as op #1") && strstr(dump, "done"),
           "dump: %s", dump);
    CHECKF(strstr(dump, "broadcast(count=1, f32, root=1) as op #2") &&
           strstr(dump, "in progress") && strstr(dump, "waiting on from rank 1"),
           "dump: %s", dump);
}

TEST(die_midway) { CHECKF(mp_run(4, 100, die_midway, NULL) == 1, "exactly the killed rank fails"); }
TEST(no_show) { mp_run(2, 1, no_show, NULL); }
TEST(aborted) { mp_run(2, 100, aborted, NULL); }
TEST(recorder) { mp_run(2, 100, recorder, NULL); }
