/* CRC-32 by carry-less multiplication (PCLMULQDQ), for x86-64 hosts whose
 * CPU has it (chosen at run time by crc32_tables_init). Sixteen-byte
 * blocks are folded forward: a block X followed by D bits of message is
 * replaced by a 128-bit value congruent to X * x^D modulo the polynomial,
 * XORed into the block D bits on, which leaves the message's CRC as it
 * was. Four blocks in flight hide the multiplier's latency; the last
 * folded block and the tail go through the byte table, so no Barrett
 * reduction is needed and the values are the table's exactly. */
#include "core/crc32.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

int crc32_clmul_supported(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c & bit_PCLMUL) && (c & bit_SSE4_1);
}

#define CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

/* One block folded D bits forward and the block there added. */
CLMUL_TARGET static inline __m128i fold(__m128i x, __m128i k, __m128i y)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), y);
}

CLMUL_TARGET uint32_t crc32_clmul(const uint64_t k[4], uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (n < 64)
        return crc32_update(crc, p, n);
    const __m128i k512 = _mm_set_epi64x((long long)k[1], (long long)k[0]);
    const __m128i k128 = _mm_set_epi64x((long long)k[3], (long long)k[2]);
    /* the register's start joins the message's first bytes */
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                               _mm_cvtsi32_si128((int)~crc));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x0 = fold(x0, k512, _mm_loadu_si128((const __m128i *)p));
        x1 = fold(x1, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = fold(x2, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = fold(x3, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x1 = fold(x0, k128, x1);
    x2 = fold(x1, k128, x2);
    x3 = fold(x2, k128, x3);
    for (; n >= 16; p += 16, n -= 16)
        x3 = fold(x3, k128, _mm_loadu_si128((const __m128i *)p));
    unsigned char last[16];
    _mm_storeu_si128((__m128i *)last, x3);
    /* the folded block from a zero register (0xffffffff before inversion) */
    return crc32_update(crc32_update(0xffffffffu, last, 16), p, n);
}

#else

int crc32_clmul_supported(void)
{
    return 0;
}

uint32_t crc32_clmul(const uint64_t k[4], uint32_t crc, const void *data, size_t n)
{
    (void)k;
    return crc32_update(crc, data, n);
}

#endif
