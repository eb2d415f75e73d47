/* MM_AUTO's choice between the matmul kernels on a model's own products:
 * the shapes (transposes, M, N, K, accumulate or not) a training step
 * runs, each with how often a step runs it, are timed on each candidate
 * kernel, and the kernel with the smaller step total is taken. The probe
 * of train/peak.h runs four fixed width-512 shapes, which can rank the
 * kernels the other way round from a real step. The choice is kept per
 * host and model signature in a text file next to the peak's. */
#ifndef TRAIN_MM_CHOOSE_H
#define TRAIN_MM_CHOOSE_H

#include <stddef.h>
#include <stdint.h>

#include "train/mm_shapes.h"

/* Seconds of one run of shape s on backend (MM_PORTABLE, MM_OPENBLAS). */
typedef double (*mm_timer_fn)(void *arg, int backend, const mm_shape *s);

/* Each product on its own faster kernel is taken only where that beats
 * the faster kernel for all by this fraction of a step: the best-of of
 * each shape favours the split a little by itself, and on gpt512 (Zen 3,
 * one thread) a forced split that the timing put 4-5% ahead was not
 * faster in whole steps by process CPU time (best 667 against 722 ms a
 * step, medians 726 and 729, at load 7-8). */
#define MM_MIXED_GAIN 0.05

/* forced MM_PORTABLE or MM_OPENBLAS is taken untimed (WEFT_MATMUL, or a
 * model told which); without OpenBLAS the portable kernel, untimed. Else
 * each shape is timed reps times on each kernel, the runs interleaved and
 * the best kept (other processes only ever slow a run down), weighted by
 * its count; ties go to the portable kernel. Sets each shape's pick. */
void train_mm_choose(mm_shapes *t, int forced, int have_blas, int reps,
                     mm_timer_fn fn, void *arg, mm_choice *out);

/* The per-host cache (host_cache_paths, stem "matmul"), keyed by a
 * model signature and the kernels' names ("portable avx2 + openblas Zen"):
 * 0 and *out filled when a line matches, -1 otherwise; store returns 0
 * when a file took the line. Other keys' lines are kept (the most recent
 * MM_CACHE_LINES). */
enum { MM_CACHE_LINES = 64 };
int train_mm_choice_load(uint64_t key, const char *kernels, mm_choice *out);
int train_mm_choice_store(uint64_t key, const char *kernels, mm_choice *c);

#endif
