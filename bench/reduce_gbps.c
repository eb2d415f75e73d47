/* Build and run: sh bench/reduce_gbps.sh */
/* f32 sum throughput of reduce_apply, single thread, per CPU second (the
 * build machine is shared; CPU time discounts waiting for the core). Bytes counted: two
 * operands read, one result written (12 bytes per element). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "coll/reduce.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(void)
{
    size_t max = 16u << 20;
    float *a = malloc(max * 4), *b = malloc(max * 4), *d = malloc(max * 4);
    for (size_t i = 0; i < max; i++) { a[i] = (float)i; b[i] = 1.0f; d[i] = 0; }
    printf("dispatch: %s\n", reduce_simd_name());
    printf("%10s %12s %12s\n", "n", "out-of-place", "in-place");
    for (size_t n = 1u << 20; n <= max; n *= 2) {
        double best[2] = { 0, 0 };
        for (int mode = 0; mode < 2; mode++) {
            float *dst = mode ? a : d;
            for (int rep = 0; rep < 5; rep++) {
                int iters = (int)((64u << 20) / n) + 1;
                double t0 = now();
                for (int k = 0; k < iters; k++)
                    reduce_apply(dst, a, b, n, WEFT_F32, WEFT_SUM);
                double gbs = 12.0 * n * iters / (now() - t0) / 1e9;
                if (gbs > best[mode]) best[mode] = gbs;
            }
        }
        printf("%10zu %9.1f GB/s %6.1f GB/s\n", n, best[0], best[1]);
    }
    /* 16-bit types at n = 4M, in place: 6 bytes per element */
    for (int t = WEFT_F16; t <= WEFT_BF16; t++) {
        size_t n = 4u << 20;
        double best = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            for (int k = 0; k < 8; k++)
                reduce_apply(a, a, b, n, (weft_dtype)t, WEFT_SUM);
            double gbs = 6.0 * n * 8 / (now() - t0) / 1e9;
            if (gbs > best) best = gbs;
        }
        printf("%s sum n=%zu in place: %.1f GB/s\n", t == WEFT_F16 ? "f16" : "bf16", n, best);
    }
    return (int)d[1] == 12345; /* keep the work */
}
