/* The machine's matmul peak, measured once per host: one thread's
 * single-precision GEMM rate with each candidate kernel (the portable one
 * at the CPU's best ISA, OpenBLAS when built in) on a few shapes of the
 * kind a transformer step runs, and the rate of bf16 products on the same
 * shapes (the peak of a run in bf16). The kernel faster over all the shapes is
 * what MM_AUTO uses; the faster kernel's best shape is the denominator of
 * model-FLOPs utilisation, so that no real step exceeds it. The result
 * is kept in a small text file per host so that later processes (and
 * every model of one process) agree without measuring again. */
#ifndef TRAIN_PEAK_H
#define TRAIN_PEAK_H

#include <stddef.h>

typedef struct {
    double gflops;        /* one thread's peak: WEFT_PEAK_GFLOPS, else the best measured
                           * (the faster kernel's best shape) */
    double port_gflops;   /* the portable kernel's best shape's rate */
    double blas_gflops;   /* OpenBLAS's; 0 when not built in */
    double port_mix;      /* the portable kernel over all the shapes together */
    double blas_mix;      /* OpenBLAS's; the faster mix is the kernel MM_AUTO takes */
    int best;             /* MM_PORTABLE or MM_OPENBLAS, the faster mix */
    char port_name[32];   /* "portable avx2" */
    char blas_name[48];   /* "openblas Zen" */
    double bf16_gflops;   /* the portable kernel's bf16 products (train_mm_gemm_bf16), best
                           * shape: a bf16 run's peak; WEFT_PEAK_GFLOPS leaves it */
    char bf16_name[32];   /* "portable avx512bf16"; "portable avx2 widened" where bf16 is
                           * widened for the fp32 kernel */
    char source[320];     /* where it came from: "measured now", the cache file, ... */
} train_peak;

/* WEFT_PEAK_FILE names the cache; empty: $XDG_CACHE_HOME/weft/peak-HOST,
 * else $HOME/.cache/weft/peak-HOST, falling back to
 * $TMPDIR (or /tmp)/weft-peak-UID-HOST when that cannot be written. A
 * cache that cannot be read or written is measured around, not an error;
 * errors are a bad WEFT_PEAK_* value or no memory. */
int train_peak_get(train_peak *out);

/* Measures now, writes nothing (tests, weft-enginebench --probe). */
int train_peak_measure(train_peak *out);

/* The peak a run's MFU is against, and its kernel's name: bf16 set, the
 * bf16 products' rate (the fp32 peak where none was measured), else the
 * fp32 peak (the faster kernel's). */
double train_peak_for(const train_peak *p, int bf16, const char **kernel);

/* The textbook bound at the clock /proc/cpuinfo gives: two FMA units x
 * the vector's lanes x 2 flops x the clock, in GFLOP/s; 0 when either is
 * unknown. *mhz (when given) gets that clock. The clock shown is often
 * the base one (a VM's always), and a boosting CPU runs above it, so a
 * measured rate above this bound says the clock rose, not that it is
 * wrong. */
double train_peak_theory(double *mhz);

#endif
