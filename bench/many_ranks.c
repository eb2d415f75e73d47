/* Every algorithm at many ranks: weftrun -n N many_ranks [COUNT]. Each
 * algorithm runs an all-reduce (COUNT elements a rank, default 1000), a
 * broadcast, an all-gather and an all-to-all where it does the collective,
 * and every rank checks the results; rank 0 prints one line an algorithm
 * with the seconds it took and how many ranks saw a wrong or failed call.
 * Exit status 0 only when none did. */
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 0: ran right or not done by this algorithm; 1: failed or wrong */
static int bad(weft_comm *c, int rc, int right, const char *what)
{
    if (rc == WEFT_ENOTSUP)
        return 0;
    if (rc || !right)
        fprintf(stderr, "rank %d, %s, %s: %s\n", weft_comm_rank(c),
                weft_algo_name(weft_comm_algo(c)), what, rc ? weft_comm_error(c) : "wrong");
    return rc || !right;
}

int main(int argc, char **argv)
{
    weft_comm *c;
    int count = argc > 1 ? atoi(argv[1]) : 1000, rc, failed = 0;
    if ((rc = weft_comm_init_env(&c))) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        return 1;
    }
    int P = weft_comm_size(c), r = weft_comm_rank(c);
    size_t n = (size_t)(count > P ? count : P);
    int32_t *x = malloc(4 * n * (size_t)P), *y = malloc(4 * n * (size_t)P);
    if (!x || !y)
        return 1;
    for (int a = 0; a < WEFT_ALGO_COUNT; a++) {
        int nbad = 0, ok = 1, fatal = 0;
        double t0 = now();
        if (weft_comm_set_algo(c, (weft_algo)a))
            continue;
        for (int i = 0; i < count; i++)
            x[i] = r + i;
        rc = weft_allreduce(c, x, y, (size_t)count, WEFT_I32, WEFT_SUM);
        for (int i = 0; !rc && i < count; i++)
            ok &= y[i] == P * i + P * (P - 1) / 2;
        nbad += bad(c, rc, ok, "allreduce");
        fatal |= rc && rc != WEFT_ENOTSUP;
        x[0] = r == P - 1 ? 12345 : -1;
        rc = fatal ? 0 : weft_broadcast(c, x, 1, WEFT_I32, P - 1);
        nbad += bad(c, rc, x[0] == 12345 || fatal, "broadcast");
        fatal |= rc && rc != WEFT_ENOTSUP;
        x[0] = r;
        x[1] = -r;
        rc = fatal ? 0 : weft_allgather(c, x, y, 2, WEFT_I32);
        ok = 1;
        for (int q = 0; !rc && !fatal && q < P; q++)
            ok &= y[2 * q] == q && y[2 * q + 1] == -q;
        nbad += bad(c, rc, ok, "allgather");
        fatal |= rc && rc != WEFT_ENOTSUP;
        for (int q = 0; q < P; q++)
            x[q] = r * 1000 + q;
        rc = fatal ? 0 : weft_alltoall(c, x, y, 1, WEFT_I32);
        ok = 1;
        for (int q = 0; !rc && !fatal && q < P; q++)
            ok &= y[q] == q * 1000 + r;
        nbad += bad(c, rc, ok, "alltoall");
        fatal |= rc && rc != WEFT_ENOTSUP;
        if (fatal) {
            failed++;
            break; /* the communicator is broken: nothing more can be said */
        }
        int32_t tally = nbad != 0;
        weft_comm_set_algo(c, WEFT_ALGO_RING);
        if (weft_allreduce(c, &tally, &tally, 1, WEFT_I32, WEFT_SUM)) {
            fprintf(stderr, "rank %d: tally: %s\n", r, weft_comm_error(c));
            failed++;
            break;
        }
        failed += tally;
        if (r == 0)
            printf("ranks %d algo %-13s %7.2f s  ranks wrong or failed: %d\n", P,
                   weft_algo_name((weft_algo)a), now() - t0, tally);
        fflush(stdout);
    }
    free(x);
    free(y);
    weft_comm_destroy(c);
    return failed ? 1 : 0;
}
