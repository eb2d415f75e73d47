/* mpi_allreduce: MPI_Allreduce (f32 sum) timed the way weft-bench times
 * weft_allreduce, so the two print rows that can be compared line by line.
 *
 *   mpirun -np 4 ./mpi_allreduce -b 8 -e 64M -f 4 -w 5 -n 20
 *
 * Per size: out-of-place, then in-place (MPI_IN_PLACE); each is warm-up
 * calls, a barrier, the timed calls, and the mean time per call taken as the
 * maximum over ranks. Inputs are small integers, so the sum is exact in any
 * order and #wrong counts every element that differs from it. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

/* The size sequence of weft-bench -b/-e/-f. */
static uint64_t next_size(uint64_t size, double factor)
{
    uint64_t next = (uint64_t)((double)size * factor);
    return next == size ? next + 1 : next;
}

/* The same inputs weft-bench uses for sum. */
static float value(int r, uint64_t i)
{
    return (float)(((uint64_t)r * 3 + i * 7) % 5);
}

static void fill(float *in, float *out, uint64_t count, int r)
{
    for (uint64_t i = 0; i < count; i++)
        in[i] = value(r, i);
    memset(out, 0xa5, count * sizeof(float));
}

static long long count_wrong(const float *got, uint64_t count, int n)
{
    long long bad = 0;
    for (uint64_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
            want += value(r, i);
        bad += got[i] != want;
    }
    return bad;
}

/* One mode of one size: returns the slowest rank's mean seconds per call. */
static double measure(float *in, float *out, int count, int warmup, int iters, int inplace,
                      int check, int r, int n, long long *wrong)
{
    const void *send = inplace ? MPI_IN_PLACE : in;
    double t0, dt, slowest = 0;
    long long bad = 0;
    fill(in, out, (uint64_t)count, r);
    if (inplace)
        memcpy(out, in, (size_t)count * sizeof(float));
    for (int i = 0; i < warmup; i++)
        MPI_Allreduce(send, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(send, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    dt = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (check) {
        fill(in, out, (uint64_t)count, r);
        if (inplace)
            memcpy(out, in, (size_t)count * sizeof(float));
        MPI_Allreduce(send, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        bad = count_wrong(out, (uint64_t)count, n);
    }
    MPI_Allreduce(&bad, wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (!check)
        *wrong = -1;
    return slowest;
}

static void usage(void)
{
    fprintf(stderr, "usage: mpi_allreduce [-b BYTES] [-e BYTES] [-f X] [-w N] [-n N] [-c 0|1]\n"
                    "  the options and defaults of weft-bench allreduce (f32 sum only)\n");
}

int main(int argc, char **argv)
{
    uint64_t minb = 8, maxb = 32u << 20;
    double factor = 2;
    int warmup = 5, iters = 20, check = 1, ch, r, n, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    while ((ch = getopt(argc, argv, "b:e:f:w:n:c:h")) != -1) {
        switch (ch) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'f': factor = atof(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'c': check = atoi(optarg); break;
        default:
            if (r == 0)
                usage();
            MPI_Finalize();
            return 2;
        }
    }
    if (iters < 1 || factor <= 1 || minb > maxb || maxb / sizeof(float) > INT32_MAX) {
        if (r == 0)
            usage();
        MPI_Finalize();
        return 2;
    }
    float *in = malloc(maxb + 64), *out = malloc(maxb + 64);
    if (!in || !out) {
        fprintf(stderr, "mpi_allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (r == 0) {
        printf("# mpi_allreduce: %d ranks, %s, warm-up %d, iterations %d\n#\n", n, lib, warmup,
               iters);
        printf("# %10s %12s %8s %6s %6s %32s %32s\n", "", "", "", "", "", "out-of-place",
               "in-place");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)",
               "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    long long wrong_total = 0;
    for (uint64_t size = minb; size <= maxb; size = next_size(size, factor)) {
        int count = (int)(size / sizeof(float));
        double t[2], algbw[2], busbw[2];
        long long wrong[2];
        for (int inplace = 0; inplace < 2; inplace++) {
            t[inplace] = measure(in, out, count, warmup, iters, inplace, check, r, n,
                                 &wrong[inplace]);
            algbw[inplace] = t[inplace] > 0 ? (double)count * sizeof(float) / t[inplace] / 1e9 : 0;
            busbw[inplace] = algbw[inplace] * 2.0 * (n - 1) / n;
            wrong_total += wrong[inplace] > 0 ? wrong[inplace] : 0;
        }
        if (r == 0) {
            printf("  %10llu %12d %8s %6s %6d %9.2f %7.3f %7.3f %6lld %9.2f %7.3f %7.3f %6lld\n",
                   (unsigned long long)((uint64_t)count * sizeof(float)), count, "float", "sum",
                   -1, t[0] * 1e6, algbw[0], busbw[0], wrong[0], t[1] * 1e6, algbw[1], busbw[1],
                   wrong[1]);
            fflush(stdout);
        }
    }
    if (r == 0)
        printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    free(in);
    free(out);
    MPI_Finalize();
    return wrong_total ? 1 : 0;
}
