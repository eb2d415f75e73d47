/* Barrier latency: weftrun -n N barrier_lat ALGO [ITERS]. Mean time per
 * barrier of the slowest rank, in microseconds. */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    weft_comm *c;
    weft_algo algo = WEFT_ALGO_AUTO;
    int iters = argc > 2 ? atoi(argv[2]) : 2000, rc;
    for (int a = 0; argc > 1 && a < WEFT_ALGO_COUNT; a++)
        if (weft_algo_name((weft_algo)a) && !strcmp(argv[1], weft_algo_name((weft_algo)a)))
            algo = (weft_algo)a;
    if ((rc = weft_comm_init_env(&c))) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        return 1;
    }
    weft_coll_args b = { .kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8, .algo = algo };
    for (int i = 0; i < 100; i++)
        if ((rc = weft_collective(c, &b)))
            break;
    double t0 = now();
    for (int i = 0; i < iters && !rc; i++)
        rc = weft_collective(c, &b);
    double us = (now() - t0) / iters * 1e6;
    if (rc) {
        fprintf(stderr, "barrier: %s\n", weft_comm_error(c));
        return 1;
    }
    weft_allreduce(c, &us, &us, 1, WEFT_F64, WEFT_MAX);
    if (weft_comm_rank(c) == 0)
        printf("barrier %d %s %.2f\n", weft_comm_size(c), argc > 1 ? argv[1] : "auto", us);
    weft_comm_destroy(c);
    return 0;
}
