/* Reduction kernels. Each (type, op) pair gets three loops — out of place,
 * in place on the left operand, in place on the right — so that every loop
 * can promise the compiler its pointers do not alias (restrict) and be
 * vectorised without run-time overlap checks. The loops are compiled for
 * AVX-512, AVX2 and the baseline, chosen once at load time (SIMD_CLONES).
 * Signed integers add and multiply in the unsigned type of the same width:
 * the bits are the same and wrapping is defined. */
#include "coll/reduce.h"

#include <string.h>

#include "core/half.h"

#if defined(__GNUC__) && !defined(__clang__)
/* gcc's -O2 only vectorises loops that need no epilogue; these do. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Comparisons joined with | rather than || keep the loops branch-free. A
 * NaN operand wins: x != x is true only for NaN. */
#define OP_ADD(x, y) ((x) + (y))
#define OP_MUL(x, y) ((x) * (y))
#define OP_FMIN(x, y) ((((x) < (y)) | ((x) != (x))) ? (x) : (y))
#define OP_FMAX(x, y) ((((x) > (y)) | ((x) != (x))) ? (x) : (y))
#define OP_IMIN(x, y) ((x) < (y) ? (x) : (y))
#define OP_IMAX(x, y) ((x) > (y) ? (x) : (y))

#define KERNELS(name, T, OP)                                                  \
    static SIMD_CLONES void name##_3(T *restrict d, const T *restrict a,      \
                                     const T *restrict b, size_t n)           \
    {                                                                         \
        for (size_t i = 0; i < n; i++)                                        \
            d[i] = (T)OP(a[i], b[i]);                                         \
    }                                                                         \
    static SIMD_CLONES void name##_l(T *restrict d, const T *restrict b,      \
                                     size_t n)                                \
    {                                                                         \
        for (size_t i = 0; i < n; i++)                                        \
            d[i] = (T)OP(d[i], b[i]);                                         \
    }                                                                         \
    static SIMD_CLONES void name##_r(T *restrict d, const T *restrict a,      \
                                     size_t n)                                \
    {                                                                         \
        for (size_t i = 0; i < n; i++)                                        \
            d[i] = (T)OP(a[i], d[i]);                                         \
    }

KERNELS(f32_sum, float, OP_ADD)
KERNELS(f32_prod, float, OP_MUL)
KERNELS(f32_min, float, OP_FMIN)
KERNELS(f32_max, float, OP_FMAX)
KERNELS(f64_sum, double, OP_ADD)
KERNELS(f64_prod, double, OP_MUL)
KERNELS(f64_min, double, OP_FMIN)
KERNELS(f64_max, double, OP_FMAX)
KERNELS(u8_sum, uint8_t, OP_ADD)
KERNELS(u8_prod, uint8_t, OP_MUL)
KERNELS(u8_min, uint8_t, OP_IMIN)
KERNELS(u8_max, uint8_t, OP_IMAX)
KERNELS(i8_min, int8_t, OP_IMIN)
KERNELS(i8_max, int8_t, OP_IMAX)
KERNELS(u32_sum, uint32_t, OP_ADD)
KERNELS(u32_prod, uint32_t, OP_MUL)
KERNELS(i32_min, int32_t, OP_IMIN)
KERNELS(i32_max, int32_t, OP_IMAX)
KERNELS(u64_sum, uint64_t, OP_ADD)
KERNELS(u64_prod, uint64_t, OP_MUL)
KERNELS(i64_min, int64_t, OP_IMIN)
KERNELS(i64_max, int64_t, OP_IMAX)

/* Elements per block when a loop needs scratch: 8 KiB of f32 per operand,
 * small enough for any thread's stack and for L1. */
#define BLOCK 2048

/* dst == a == b: the left-in-place loop would read through its restrict
 * operand what it writes, so the right operand goes through a copy. */
#define RUN(name, T)                                                          \
    do {                                                                      \
        T *d_ = dst;                                                          \
        const T *a_ = a, *b_ = b;                                             \
        if (d_ == a_ && d_ == b_) {                                           \
            T tmp_[BLOCK];                                                    \
            for (size_t o_ = 0; o_ < n; o_ += BLOCK) {                        \
                size_t m_ = n - o_ < BLOCK ? n - o_ : BLOCK;                  \
                memcpy(tmp_, d_ + o_, m_ * sizeof(T));                        \
                name##_l(d_ + o_, tmp_, m_);                                  \
            }                                                                 \
        } else if (d_ == a_) {                                                \
            name##_l(d_, b_, n);                                              \
        } else if (d_ == b_) {                                                \
            name##_r(d_, a_, n);                                              \
        } else {                                                              \
            name##_3(d_, a_, b_, n);                                          \
        }                                                                     \
        return 0;                                                             \
    } while (0)

/* UT: the unsigned type that adds and multiplies, T: the one that compares
 * (an object may be accessed through its signed or unsigned variant). */
#define RUN_OPS(sum, prod, min, max, UT, T)                                   \
    switch (op) {                                                             \
    case WEFT_SUM: case WEFT_AVG: RUN(sum, UT);                               \
    case WEFT_PROD: RUN(prod, UT);                                            \
    case WEFT_MIN: RUN(min, T);                                               \
    case WEFT_MAX: RUN(max, T);                                               \
    default: return WEFT_EINVAL;                                              \
    }

/* f16/bf16: widen a block of each operand, reduce in f32, narrow once. The
 * whole block is read before any of it is written, so dst may alias. */
static int reduce_16(uint16_t *dst, const uint16_t *a, const uint16_t *b,
                     size_t n, weft_op op, int bf)
{
    float fa[BLOCK], fb[BLOCK];
    for (size_t o = 0; o < n; o += BLOCK) {
        size_t m = n - o < BLOCK ? n - o : BLOCK;
        if (bf) {
            half_bf16_to_f32(fa, a + o, m);
            half_bf16_to_f32(fb, b + o, m);
        } else {
            half_f16_to_f32(fa, a + o, m);
            half_f16_to_f32(fb, b + o, m);
        }
        switch (op) {
        case WEFT_SUM: case WEFT_AVG: f32_sum_l(fa, fb, m); break;
        case WEFT_PROD: f32_prod_l(fa, fb, m); break;
        case WEFT_MIN: f32_min_l(fa, fb, m); break;
        case WEFT_MAX: f32_max_l(fa, fb, m); break;
        default: return WEFT_EINVAL;
        }
        if (bf)
            half_f32_to_bf16(dst + o, fa, m);
        else
            half_f32_to_f16(dst + o, fa, m);
    }
    return 0;
}

int reduce_apply(void *dst, const void *a, const void *b, size_t n,
                 weft_dtype t, weft_op op)
{
    if ((unsigned)op >= WEFT_OP_COUNT)
        return WEFT_EINVAL;
    if (n > 0 && (!dst || !a || !b))
        return WEFT_EINVAL;
    switch (t) {
    case WEFT_F32: RUN_OPS(f32_sum, f32_prod, f32_min, f32_max, float, float)
    case WEFT_F64: RUN_OPS(f64_sum, f64_prod, f64_min, f64_max, double, double)
    case WEFT_F16: return reduce_16(dst, a, b, n, op, 0);
    case WEFT_BF16: return reduce_16(dst, a, b, n, op, 1);
    case WEFT_I8: RUN_OPS(u8_sum, u8_prod, i8_min, i8_max, uint8_t, int8_t)
    case WEFT_U8: RUN_OPS(u8_sum, u8_prod, u8_min, u8_max, uint8_t, uint8_t)
    case WEFT_I32: RUN_OPS(u32_sum, u32_prod, i32_min, i32_max, uint32_t, int32_t)
    case WEFT_I64: RUN_OPS(u64_sum, u64_prod, i64_min, i64_max, uint64_t, int64_t)
    default: return WEFT_EINVAL;
    }
}

int reduce_apply_many(void *dst, const void *const *src, int k, size_t n,
                      weft_dtype t, weft_op op)
{
    size_t es = weft_dtype_size(t);
    if (k < 1 || es == 0 || (unsigned)op >= WEFT_OP_COUNT || (n > 0 && (!src || !dst)))
        return WEFT_EINVAL;
    if (n == 0)
        return 0;
    for (int j = 0; j < k; j++)
        if (!src[j])
            return WEFT_EINVAL;
    if (k == 1) {
        if (dst != src[0])
            memmove(dst, src[0], n * es);
        return 0;
    }
    /* a block of dst stays in L1 while every source is folded into it */
    size_t block = (16u << 10) / es;
    char *d = dst;
    for (size_t o = 0; o < n; o += block) {
        size_t m = n - o < block ? n - o : block, at = o * es;
        int rc = reduce_apply(d + at, (const char *)src[0] + at, (const char *)src[1] + at,
                              m, t, op);
        for (int j = 2; j < k && !rc; j++)
            rc = reduce_apply(d + at, d + at, (const char *)src[j] + at, m, t, op);
        if (rc)
            return rc;
    }
    return 0;
}

#define AVG_LOOP(T, DT)                                                       \
    do {                                                                      \
        T *p_ = buf;                                                          \
        for (size_t i_ = 0; i_ < n; i_++)                                     \
            p_[i_] = (T)(p_[i_] / (DT)nranks);                                \
        return 0;                                                             \
    } while (0)

int reduce_avg_finish(void *buf, size_t n, weft_dtype t, int nranks)
{
    if (nranks < 1 || (n > 0 && !buf))
        return WEFT_EINVAL;
    switch (t) {
    case WEFT_F32: AVG_LOOP(float, float);
    case WEFT_F64: AVG_LOOP(double, double);
    /* C division truncates toward zero; the operands are promoted to int or
     * kept at 64 bits, and INT_MIN / nranks cannot overflow for nranks > 0. */
    case WEFT_I8: AVG_LOOP(int8_t, int);
    case WEFT_U8: AVG_LOOP(uint8_t, int);
    case WEFT_I32: AVG_LOOP(int32_t, int32_t);
    case WEFT_I64: AVG_LOOP(int64_t, int64_t);
    case WEFT_F16:
    case WEFT_BF16: {
        uint16_t *p = buf;
        float f[BLOCK];
        for (size_t o = 0; o < n; o += BLOCK) {
            size_t m = n - o < BLOCK ? n - o : BLOCK;
            if (t == WEFT_BF16)
                half_bf16_to_f32(f, p + o, m);
            else
                half_f16_to_f32(f, p + o, m);
            for (size_t i = 0; i < m; i++)
                f[i] /= (float)nranks;
            if (t == WEFT_BF16)
                half_f32_to_bf16(p + o, f, m);
            else
                half_f32_to_f16(p + o, f, m);
        }
        return 0;
    }
    default:
        return WEFT_EINVAL;
    }
}

const char *reduce_simd_name(void)
{
#if defined(__x86_64__) && defined(__has_attribute) && !defined(WEFT_NO_CLONES)
#if __has_attribute(target_clones)
    /* The same order of preference as the SIMD_CLONES resolvers. */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "avx512f";
    if (__builtin_cpu_supports("avx2"))
        return "avx2";
#endif
#endif
    return "default";
}
