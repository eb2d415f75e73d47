/* IEEE binary16 (f16) and bfloat16 (bf16) <-> binary32 conversion.
 *
 * Narrowing rounds to nearest, ties to even, in every range: finite values
 * past the largest f16 (65504) round to infinity once they reach 65520, the
 * midpoint to the next power; small values become f16 subnormals or signed
 * zero. NaN stays NaN with its sign and is made quiet (the top payload bits
 * are kept). Widening is exact.
 *
 * The scalar forms are inline and branch-free so that loops calling them
 * vectorise; the array forms in half.c are compiled for several instruction
 * sets and picked at load time. */
#ifndef WEFT_CORE_HALF_H
#define WEFT_CORE_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* SIMD_CLONES on a loop function makes the compiler emit AVX-512, AVX2 and
 * baseline copies of it and pick one when the library loads, so one binary
 * runs everywhere without -march=native. Empty where unsupported. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(WEFT_NO_CLONES)
#if __has_attribute(target_clones)
#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef SIMD_CLONES
#define SIMD_CLONES
#endif

static inline uint32_t half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t special = 0x7f800000u | (m << 13);
    /* m * 2^-24 is exact in binary32, and covers zero as well. The masks
     * (not ?:) keep the float operations unconditional, which lets the
     * compiler vectorise without having to speculate them. */
    uint32_t sub = half_f32_bits((float)(int32_t)m * 0x1p-24f);
    uint32_t is_sub = 0u - (uint32_t)(e == 0);
    uint32_t u = e == 31 ? special : normal;
    return half_bits_f32(sign | (sub & is_sub) | (u & ~is_sub));
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = half_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    uint32_t e = ax >> 23;
    /* Rounding by addition: adding half an ulp minus one, plus the kept
     * lowest bit, carries exactly when round-to-nearest-even goes up; a
     * carry out of the mantissa bumps the exponent, up to infinity. */
    uint32_t normal = (ax - (112u << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    /* Below 2^-14 the result is subnormal: shift the significand with its
     * implicit bit into place. A shift of 25 or more leaves less than half
     * of the smallest subnormal, which is zero; clamping keeps the shift
     * defined on the lanes whose result is discarded. */
    int s = 126 - (int)e;
    s = s < 1 ? 1 : s > 25 ? 25 : s;
    uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
    uint32_t sub = (sig + (1u << (s - 1)) - 1u + ((sig >> s) & 1u)) >> s;
    uint32_t h = ax < (113u << 23) ? sub : normal;
    h = ax >= (143u << 23) ? 0x7c00u : h;
    h = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : h;
    return (uint16_t)(sign | h);
}

static inline float bf16_to_f32(uint16_t b)
{
    return half_bits_f32((uint32_t)b << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = half_f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t q = (x >> 16) | 0x40u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* Bulk forms; src and dst must not overlap. */
void half_f16_to_f32(float *dst, const uint16_t *src, size_t n);
void half_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void half_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void half_f32_to_bf16(uint16_t *dst, const float *src, size_t n);

#endif
