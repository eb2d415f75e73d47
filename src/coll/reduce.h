/* Reduction kernels: the arithmetic of every collective.
 *
 * reduce_apply computes dst[i] = op(a[i], b[i]) for n elements of dtype t.
 * dst may be the very same buffer as a, or as b, or both; any other overlap
 * is not allowed. WEFT_AVG adds here, like WEFT_SUM; the caller finishes an
 * average once, at the end, with reduce_avg_finish.
 *
 * Semantics per dtype:
 *   - integers wrap on overflow (two's complement), i8/u8 included;
 *   - f16/bf16 operands are widened to f32, combined, and rounded to
 *     nearest-even once;
 *   - float min/max return NaN when either operand is NaN (unlike fmin/fmax,
 *     which drop a NaN: a NaN gradient must not vanish in a reduction); for
 *     min(-0, +0) and max(-0, +0) either zero may come back.
 *
 * Both return 0, or WEFT_EINVAL for an unknown dtype/op, NULL buffers with
 * n > 0, or nranks < 1. */
#ifndef WEFT_COLL_REDUCE_H
#define WEFT_COLL_REDUCE_H

#include <stddef.h>
#include "weft.h"

int reduce_apply(void *dst, const void *a, const void *b, size_t n,
                 weft_dtype t, weft_op op);

/* dst[i] = op(...op(op(src[0][i], src[1][i]), src[2][i])..., src[k-1][i])
 * for k >= 1 sources: the same bits as reduce_apply folding them in
 * turn, in one pass over dst (a block at a time, kept in L1) instead of
 * k - 1. dst may be src[0]; it must not overlap any other source. */
int reduce_apply_many(void *dst, const void *const *src, int k, size_t n,
                      weft_dtype t, weft_op op);

/* Divides each of n elements by nranks: floats as x / nranks (f16/bf16
 * computed in f32 and rounded once), integers truncated toward zero. */
int reduce_avg_finish(void *buf, size_t n, weft_dtype t, int nranks);

/* The instruction set the kernels run with here: "avx512f", "avx2" or
 * "default". */
const char *reduce_simd_name(void);

#endif
