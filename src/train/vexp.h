/* expf eight lanes at a time, for the engine's elementwise loops (GELU,
 * softmax): libm's expf is a call per element, which the compiler does
 * not vectorise without -ffast-math, and those calls were a tenth of a
 * GPT step. Cephes' single-precision method: x = n ln2 + r with
 * |r| <= ln2/2, a degree-6 polynomial for exp(r), 2^n put into the
 * exponent; within 2 ulp of expf over the range where expf is normal.
 * Below that range it returns 0 and above it the largest it can hold
 * (not infinity), which no caller here can tell from expf's answer.
 *
 * VEXP_X86 is set where the AVX2 form exists; callers compile their loop
 * with VEXP_TARGET and take it only when vexp_have_avx2() says so, with a
 * plain loop over expf for the rest. */
#ifndef TRAIN_VEXP_H
#define TRAIN_VEXP_H

#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VEXP_X86 1
#define VEXP_TARGET __attribute__((target("avx2,fma")))

static inline int vexp_have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The same method sixteen lanes at a time, for element-wise loops whose
 * lanes never mix (GELU): each lane goes through the same operations in
 * the same order at either width, so its value is the same bits. Sums
 * across lanes (vexp_row's) stay on eight, whose order they fix. */
#define VEXP512_TARGET __attribute__((target("avx512f")))

static inline int vexp_have_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* What differs between the widths: AVX-512 compares into a mask register
 * and rounds with roundscale. */
#define VEXP_MM(W, op) _mm##W##_##op
VEXP_TARGET static inline __m256 vexp_under256(__m256 x, __m256 lo)
{
    return _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
}
VEXP_TARGET static inline __m256 vexp_round256(__m256 x)
{
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VEXP_TARGET static inline __m256 vexp_zero256(__m256 under, __m256 y)
{
    return _mm256_andnot_ps(under, y);
}
VEXP512_TARGET static inline __mmask16 vexp_under512(__m512 x, __m512 lo)
{
    return _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
}
VEXP512_TARGET static inline __m512 vexp_round512(__m512 x)
{
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VEXP512_TARGET static inline __m512 vexp_zero512(__mmask16 under, __m512 y)
{
    return _mm512_maskz_mov_ps((__mmask16)~under, y);
}

/* vexp256_ps and vexp512_ps: exp of each lane. ln2 is taken in two parts,
 * so that n ln2 is subtracted without losing r. */
#define VEXP_DEF(W, TARGET)                                                              \
    TARGET static inline __m##W vexp##W##_ps(__m##W x)                                  \
    {                                                                                   \
        const __m##W hi = VEXP_MM(W, set1_ps)(88.0f);                                   \
        const __m##W lo = VEXP_MM(W, set1_ps)(-87.3365478515625f);                      \
        __typeof__(vexp_under##W(x, lo)) under = vexp_under##W(x, lo);                  \
        x = VEXP_MM(W, min_ps)(VEXP_MM(W, max_ps)(x, lo), hi);                          \
        __m##W n = vexp_round##W(                                                       \
            VEXP_MM(W, mul_ps)(x, VEXP_MM(W, set1_ps)(1.44269504088896341f)));          \
        __m##W r = VEXP_MM(W, fnmadd_ps)(n, VEXP_MM(W, set1_ps)(0.693359375f), x);       \
        r = VEXP_MM(W, fnmadd_ps)(n, VEXP_MM(W, set1_ps)(-2.12194440e-4f), r);          \
        __m##W y = VEXP_MM(W, set1_ps)(1.9875691500e-4f);                               \
        y = VEXP_MM(W, fmadd_ps)(y, r, VEXP_MM(W, set1_ps)(1.3981999507e-3f));          \
        y = VEXP_MM(W, fmadd_ps)(y, r, VEXP_MM(W, set1_ps)(8.3334519073e-3f));          \
        y = VEXP_MM(W, fmadd_ps)(y, r, VEXP_MM(W, set1_ps)(4.1665795894e-2f));          \
        y = VEXP_MM(W, fmadd_ps)(y, r, VEXP_MM(W, set1_ps)(1.6666665459e-1f));          \
        y = VEXP_MM(W, fmadd_ps)(y, r, VEXP_MM(W, set1_ps)(5.0000001201e-1f));          \
        y = VEXP_MM(W, fmadd_ps)(y, VEXP_MM(W, mul_ps)(r, r),                           \
                                 VEXP_MM(W, add_ps)(r, VEXP_MM(W, set1_ps)(1.0f)));     \
        __m##W##i e = VEXP_MM(W, slli_epi32)(                                           \
            VEXP_MM(W, add_epi32)(VEXP_MM(W, cvtps_epi32)(n), VEXP_MM(W, set1_epi32)(127)), \
            23);                                                                        \
        y = VEXP_MM(W, mul_ps)(y, VEXP_MM(W, castsi##W##_ps)(e));                       \
        return vexp_zero##W(under, y);                                                  \
    }
VEXP_DEF(256, VEXP_TARGET)
VEXP_DEF(512, VEXP512_TARGET)
#undef VEXP_DEF

VEXP_TARGET static inline float vexp_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

VEXP_TARGET static inline float vexp_row_avx2(float *row, int n, float a, float b)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = vexp256_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + i), va, vb));
        _mm256_storeu_ps(row + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = vexp_hsum8(acc);
    /* the last few through the same vector exp, so a row's values do
     * not depend on where its tail starts */
    if (i < n) {
        float tail[8] = { 0 };
        for (int k = 0; i + k < n; k++)
            tail[k] = row[i + k];
        __m256 e = vexp256_ps(_mm256_fmsub_ps(_mm256_loadu_ps(tail), va, vb));
        _mm256_storeu_ps(tail, e);
        for (int k = 0; i + k < n; k++) {
            row[i + k] = tail[k];
            sum += tail[k];
        }
    }
    return sum;
}
#endif

/* row[0..n) = exp(row * a - b), returning their sum: softmax's numerators
 * (a the scale, b the row's scaled maximum). avx2: vexp_have_avx2()'s
 * answer, asked once by the caller. */
static inline float vexp_row(float *row, int n, float a, float b, int avx2)
{
#ifdef VEXP_X86
    if (avx2)
        return vexp_row_avx2(row, n, a, b);
#endif
    (void)avx2;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        row[i] = expf(row[i] * a - b);
        sum += row[i];
    }
    return sum;
}

#endif
