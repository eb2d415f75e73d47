/* Array forms of the conversions in half.h. The multi-versioned loops are
 * static and reached through plain functions: clang 14 names the dispatcher
 * of an external target_clones function differently from what callers in
 * other files link against. */
#include "core/half.h"

#if defined(__GNUC__) && !defined(__clang__)
/* gcc's -O2 only vectorises loops that need no epilogue; these do. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

static SIMD_CLONES void widen_f16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f16_to_f32(src[i]);
}

static SIMD_CLONES void narrow_f16(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_f16(src[i]);
}

static SIMD_CLONES void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(src[i]);
}

static SIMD_CLONES void narrow_bf16(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

/* Most x86-64 CPUs convert f16 in hardware (F16C), about ten times faster
 * than the bit arithmetic above and with the same results, NaN payloads and
 * subnormals included. Compilers cannot test for F16C by name everywhere,
 * so an ifunc resolver asks cpuid once, when the library is loaded. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(WEFT_NO_CLONES)
#if __has_attribute(ifunc) && __has_attribute(target)
#define HALF_F16C 1
#endif
#endif

static void widen_f16_soft(float *dst, const uint16_t *src, size_t n)
{
    widen_f16(dst, src, n);
}

static void narrow_f16_soft(uint16_t *dst, const float *src, size_t n)
{
    narrow_f16(dst, src, n);
}

#ifdef HALF_F16C
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx,f16c")))
static void widen_f16_hw(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c")))
static void narrow_f16_hw(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = f32_to_f16(src[i]);
}

/* F16C and AVX present, and the OS saves the YMM registers. */
static int have_f16c(void)
{
    unsigned a, b, c, d, lo, hi;
    unsigned need = bit_F16C | bit_AVX | bit_OSXSAVE;
    if (!__get_cpuid(1, &a, &b, &c, &d) || (c & need) != need)
        return 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

typedef void widen_fn(float *, const uint16_t *, size_t);
typedef void narrow_fn(uint16_t *, const float *, size_t);

__attribute__((used)) static widen_fn *resolve_widen(void)
{
    return have_f16c() ? widen_f16_hw : widen_f16_soft;
}

__attribute__((used)) static narrow_fn *resolve_narrow(void)
{
    return have_f16c() ? narrow_f16_hw : narrow_f16_soft;
}

void half_f16_to_f32(float *dst, const uint16_t *src, size_t n)
    __attribute__((ifunc("resolve_widen")));
void half_f32_to_f16(uint16_t *dst, const float *src, size_t n)
    __attribute__((ifunc("resolve_narrow")));
#else
void half_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    widen_f16_soft(dst, src, n);
}

void half_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
    narrow_f16_soft(dst, src, n);
}
#endif

void half_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    widen_bf16(dst, src, n);
}

void half_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    narrow_bf16(dst, src, n);
}
