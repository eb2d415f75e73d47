/* Non-blocking collectives: many in flight, completed in issue order,
 * mixed with blocking calls, polled with weft_test. */
#include "mp.h"

#include <sched.h>
#include <stdlib.h>

#define NREQ 6

static void body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t cnt = 50000;
    float *buf[NREQ];
    weft_request *req[NREQ];
    (void)arg;
    for (int k = 0; k < NREQ; k++) {
        buf[k] = malloc(cnt * sizeof(float));
        for (size_t i = 0; i < cnt; i++)
            buf[k][i] = (float)((r + k + (int)i) % 7);
        weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = buf[k], .recv = buf[k],
                             .count = cnt, .dtype = WEFT_F32, .op = WEFT_SUM,
                             .algo = k % 2 ? WEFT_ALGO_RING : WEFT_ALGO_NAIVE };
        CHECK(weft_icollective(c, &a, &req[k]) == 0);
    }
    /* a blocking call waits its turn behind the queued ones */
    int32_t one = 1, total = 0;
    CHECK(weft_allreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM) == 0 && total == n);
    CHECK(weft_wait_all(req, NREQ) == 0);
    int ok = 1;
    for (int k = 0; k < NREQ; k++) {
        for (size_t i = 0; i < cnt; i++) {
            float want = 0;
            for (int j = 0; j < n; j++)
                want += (float)((j + k + (int)i) % 7);
            ok &= buf[k][i] == want;
        }
        free(buf[k]);
    }
    CHECK(ok);

    /* weft_test until done; a broadcast and an all-gather in flight */
    int64_t v = r == 1 % n ? 42 : 0, mine = r, *all = calloc((size_t)n, sizeof *all);
    weft_request *b, *g;
    CHECK(weft_ibroadcast(c, &v, 1, WEFT_I64, 1 % n, &b) == 0);
    CHECK(weft_iallgather(c, &mine, all, 1, WEFT_I64, &g) == 0);
    int done = 0, rc = 0;
    while (!done) {
        rc = weft_test(b, &done);
        if (!done)
            sched_yield();
    }
    CHECK(rc == 0 && v == 42);
    CHECK(weft_wait(g) == 0);
    /* released requests stay recognisable: a second wait or test is an
     * error, not a use after free (ASan runs this too) */
    CHECK(weft_wait(g) == WEFT_EINVAL);
    CHECK(weft_test(b, &done) == WEFT_EINVAL);
    for (int k = 0; k < 62; k++) { /* g is still inside the window */
        weft_request *q;
        CHECK(weft_iallreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM, &q) == 0);
        CHECK(weft_wait(q) == 0 && total == n);
    }
    CHECK(weft_wait(g) == WEFT_EINVAL);
    for (int j = 0; j < n; j++)
        CHECK(all[j] == j);
    free(all);

    /* an error inside a request comes back from weft_wait */
    weft_request *bad;
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = &one, .recv = &total, .count = 1,
                         .dtype = (weft_dtype)77 };
    CHECK(weft_icollective(c, &a, &bad) == 0);
    CHECK(weft_wait(bad) == WEFT_EINVAL);
}

TEST(ranks_1) { CHECK(mp_run(1, 60, body, NULL) == 0); }
TEST(ranks_2) { CHECK(mp_run(2, 60, body, NULL) == 0); }
TEST(ranks_3) { CHECK(mp_run(3, 60, body, NULL) == 0); }
TEST(ranks_4) { CHECK(mp_run(4, 60, body, NULL) == 0); }
TEST(ranks_8) { CHECK(mp_run(8, 60, body, NULL) == 0); }

/* The request calls refuse what is not a request (NULL arrays and
 * handles, negative counts, missing out-parameters) with WEFT_EINVAL,
 * never a crash, and the communicator stays usable. */
static void misuse(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), done = 7;
    int32_t one = 1, total = 0;
    weft_request *q = NULL, *none[3] = { NULL, NULL, NULL };
    (void)arg;
    CHECK(weft_wait_all(NULL, 3) == WEFT_EINVAL);
    CHECK(weft_wait_all(NULL, -1) == WEFT_EINVAL);
    CHECK(weft_wait_all(none, -1) == WEFT_EINVAL);
    CHECK(weft_wait_all(NULL, 0) == 0);
    CHECK(weft_wait_all(none, 3) == WEFT_EINVAL);
    CHECK(weft_wait(NULL) == WEFT_EINVAL);
    CHECK(weft_test(NULL, &done) == WEFT_EINVAL);
    CHECK(weft_icollective(NULL, NULL, &q) == WEFT_EINVAL);
    CHECK(weft_icollective(c, NULL, &q) == WEFT_EINVAL && q == NULL);
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = &one, .recv = &total,
                         .count = 1, .dtype = WEFT_I32, .op = WEFT_SUM };
    CHECK(weft_icollective(c, &a, NULL) == WEFT_EINVAL);
    CHECK(weft_iallreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM, NULL) == WEFT_EINVAL);
    CHECK(weft_isend(c, &one, 1, WEFT_I32, 0, NULL) == WEFT_EINVAL);
    CHECK(weft_irecv(c, &one, 1, WEFT_I32, 0, NULL) == WEFT_EINVAL);
    CHECK(weft_isend(NULL, &one, 1, WEFT_I32, 0, &q) == WEFT_EINVAL);
    CHECK(weft_group_end(c) == WEFT_EINVAL); /* no group open */
    CHECK(weft_group_end(NULL) == WEFT_EINVAL);
    /* an empty group ends with nothing to wait for */
    CHECK(weft_group_start(c) == 0 && weft_group_end(c) == 0);
    /* a NULL buffer with a count is refused when its request is waited
     * for, as other bad arguments are */
    weft_coll_args nobuf = a;
    nobuf.send = NULL;
    CHECK(weft_icollective(c, &nobuf, &q) == 0);
    CHECK(weft_wait(q) == WEFT_EINVAL);
    /* a request of the array waited for twice: the second is refused */
    weft_request *two[2];
    CHECK(weft_iallreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM, &two[0]) == 0);
    two[1] = two[0];
    CHECK(weft_wait_all(two, 2) == WEFT_EINVAL && two[0] == NULL && two[1] == NULL);
    CHECK(total == n);
    /* still usable */
    total = 0;
    CHECK(weft_allreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM) == 0 && total == n);
    CHECK(weft_test(NULL, NULL) == WEFT_EINVAL);
    CHECK(weft_iallreduce(c, &one, &total, 1, WEFT_I32, WEFT_SUM, &q) == 0);
    CHECK(weft_test(q, NULL) == WEFT_EINVAL); /* refused, q still pending */
    CHECK(weft_wait(q) == 0 && total == n);
}

TEST(misuse_1) { CHECK(mp_run(1, 20, misuse, NULL) == 0); }
TEST(misuse_2) { CHECK(mp_run(2, 20, misuse, NULL) == 0); }
