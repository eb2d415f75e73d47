/* Start-up time: weftrun -n N startup [ALGO]. Every rank notes the wall
 * clock (one clock for every process of a host, or of namespaces on one
 * host) when it enters weft_comm_init_env, when that returns, and when its
 * first collective (an 8-byte all-reduce, by ALGO or WEFT_ALGO) returns.
 * Rank 0 prints, from the first rank's entry into init: when the last
 * rank left init, and when the last rank finished the first collective;
 * and the longest any rank took over a second one like it. */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    weft_comm *c;
    weft_algo algo = WEFT_ALGO_AUTO;
    if (argc > 1 && weft_algo_parse(argv[1], &algo)) {
        fprintf(stderr, "startup: no algorithm %s\n", argv[1]);
        return 2;
    }
    double t0 = now();
    int rc = weft_comm_init_env(&c);
    if (rc) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        return 1;
    }
    double t1 = now();
    double x = 1;
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = &x, .recv = &x, .count = 1,
                         .dtype = WEFT_F64, .op = WEFT_SUM, .algo = algo };
    rc = weft_collective(c, &a);
    double t2 = now();
    /* the same again, its connections made: what the first one spent on
     * making them is the difference */
    double x2 = 1;
    a.send = a.recv = &x2;
    if (!rc)
        rc = weft_collective(c, &a);
    double t3 = now();
    /* -t0 so that one max gives the earliest start */
    double t[4] = { -t0, t1, t2, t3 - t2 }, sum = x;
    weft_coll_args m = { .kind = WEFT_COLL_ALLREDUCE, .send = t, .recv = t, .count = 4,
                         .dtype = WEFT_F64, .op = WEFT_MAX, .algo = WEFT_ALGO_RING };
    if (rc || (rc = weft_collective(c, &m))) {
        fprintf(stderr, "rank %d: %s\n", weft_comm_rank(c), weft_comm_error(c));
        weft_comm_destroy(c);
        return 1;
    }
    int P = weft_comm_size(c), ok = sum == P;
    if (weft_comm_rank(c) == 0)
        printf("ranks %d algo %s init_s %.3f first_s %.3f second_call_s %.3f %s\n", P,
               weft_algo_name(algo), t[1] + t[0], t[2] + t[0], t[3], ok ? "ok" : "WRONG");
    weft_comm_destroy(c);
    return ok ? 0 : 1;
}
