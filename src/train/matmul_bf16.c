/* bf16 micro-kernel and packing for the portable GEMM (see
 * matmul_bf16.h). One VDPBF16PS does 32 multiply-adds where an fp32 FMA
 * does 16, with the same 12 x 32 tile and register use as the AVX-512
 * fp32 kernel: B's two vectors of 16 column pairs, A's pair of row i
 * broadcast. Each product of two bf16 values is exact in fp32, so an
 * element's only rounding is that of its fp32 sums, taken in k order. */
#include "train/matmul_bf16.h"

#include <stddef.h>
#include <string.h>

#include "core/half.h"

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 9) || \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#include <cpuid.h>
#include <immintrin.h>
#define MMB_BUILT 1
#define MMB_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#endif

#ifdef MMB_BUILT
/* The plain form of train_mmb_pack's along case, from pair q0 on (the
 * odd kc's last pair). */
static void pack_along_c(uint32_t *dst, int W, const uint16_t *src, int ld, int w, int kc,
                         int q0)
{
    int kp = (kc + 1) / 2;
    for (int jp = 0; jp < w; jp += W, dst += (size_t)kp * W)
        for (int q = q0; q < kp; q++)
            for (int j = 0; j < W; j++) {
                const uint16_t *s = src + (size_t)(jp + j) * ld + 2 * q;
                uint32_t lo = jp + j < w ? s[0] : 0;
                uint32_t hi = jp + j < w && 2 * q + 1 < kc ? s[1] : 0;
                dst[(size_t)q * W + j] = lo | hi << 16;
            }
}

int train_mmb_supported(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned f = 1u << 16, bw = 1u << 30, vl = 1u << 31;
    if ((b & (f | bw | vl)) != (f | bw | vl) || a < 1)   /* a: the last subleaf */
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    if (!(a & (1u << 5)))
        return 0;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27)))   /* OSXSAVE: XGETBV may run */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    /* SSE, AVX, opmask, ZMM0-15's upper halves, ZMM16-31 */
    return (lo & 0xe6) == 0xe6;
}

static inline __mmask16 first(int n)
{
    n = n < 0 ? 0 : n > 16 ? 16 : n;
    return (__mmask16)((1u << n) - 1);
}

/* Depth runs down the rows: each pair is two rows' values interleaved.
 * A whole 32-wide panel (B's) takes two 32-value loads, interleaved by
 * 16-bit unpacks within 128-bit lanes and put in index order by two
 * permutes: 8 instructions for 32 pairs, where the general form below
 * (16 indices at a time, zero-extended to 32 bits and merged) takes 14.
 * Masked loads read nothing past w, and give the panel's zero padding. */
MMB_TARGET
static void pack_across(uint32_t *dst, int W, const uint16_t *src, int ld, int w, int kc)
{
    int kp = (kc + 1) / 2;
    size_t step = (size_t)kp * W;
    /* unpacklo holds indices 8L .. 8L+3 of lane L, unpackhi 8L+4 .. 8L+7 */
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29,
                                         30, 31);
    for (int q = 0; q < kp; q++) {
        const uint16_t *r0 = src + (size_t)(2 * q) * ld;
        int two = 2 * q + 1 < kc;
        uint32_t *d = dst + (size_t)q * W;
        for (int jp = 0; jp < w; jp += W, d += step) {
            if (W == 32 && w - jp >= 32) {
                __m512i a = _mm512_loadu_si512(r0 + jp);
                __m512i b = two ? _mm512_loadu_si512(r0 + jp + ld) : _mm512_setzero_si512();
                __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
                _mm512_storeu_si512(d, _mm512_permutex2var_epi32(lo, i0, hi));
                _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi32(lo, i1, hi));
                continue;
            }
            for (int g = 0; g < W; g += 16) {
                __mmask16 in = first(w - jp - g);
                const uint16_t *s = in ? r0 + jp + g : r0;
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, s));
                __m512i hi = two ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, s + ld))
                                 : _mm512_setzero_si512();
                _mm512_mask_storeu_epi32(d + g, first(W - g),
                                         _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
    }
}

/* r[0..16) as a 16 x 16 matrix of 32-bit words, transposed into t: word
 * c of t[i] is word i of r[c]. Pairs within 128-bit lanes, then quads,
 * then the lanes themselves. */
MMB_TARGET
static void tr16(const __m512i *r, __m512i *t)
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* b[4i + k], lane L: word 4L + k of rows 4i .. 4i + 3 */
    for (int i = 0; i < 16; i += 4) {
        b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    for (int k = 0; k < 4; k++) {
        __m512i x0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44);
        __m512i x1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xee);
        __m512i y0 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44);
        __m512i y1 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xee);
        t[k] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        t[4 + k] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        t[8 + k] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        t[12 + k] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
}

MMB_TARGET
void train_mmb_tr16(uint32_t *dst, size_t dld, const uint32_t *src, size_t sld)
{
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512(src + (size_t)i * sld);
    tr16(r, t);
    for (int i = 0; i < 16; i++)
        _mm512_storeu_si512(dst + (size_t)i * dld, t[i]);
}

/* Depth runs along the rows: a pair is one 32-bit word of a row, so a
 * panel's 16 rows are read 16 words at a time and transposed in
 * registers, each result vector one pair's 16 indices (had been one
 * gather per pair: the bf16 products' packing took a quarter of their
 * time). Masked loads read nothing past the rows' kc or the panel's
 * rows; missing rows give the panel's zero padding. */
MMB_TARGET
static void pack_along(uint32_t *dst, int W, const uint16_t *src, int ld, int w, int kc)
{
    int kp = kc / 2;
    size_t step = (size_t)((kc + 1) / 2) * W;
    uint32_t *d = dst;
    for (int jp = 0; jp < w; jp += W, d += step)
        for (int g = 0; g < W; g += 16) {
            int rows = w - jp - g < W - g ? w - jp - g : W - g;
            rows = rows < 0 ? 0 : rows > 16 ? 16 : rows;
            __mmask16 out = first(W - g);
            for (int q0 = 0; q0 < kp; q0 += 16) {
                int n = kp - q0 < 16 ? kp - q0 : 16;
                __mmask16 in = first(n);
                __m512i r[16], t[16];
                for (int i = 0; i < 16; i++)
                    r[i] = i < rows ? _mm512_maskz_loadu_epi32(
                                          in, src + (size_t)(jp + g + i) * ld + 2 * q0)
                                    : _mm512_setzero_si512();
                tr16(r, t);
                for (int i = 0; i < n; i++)
                    _mm512_mask_storeu_epi32(d + (size_t)(q0 + i) * W + g, out, t[i]);
            }
        }
    if (kc & 1)
        pack_along_c(dst, W, src, ld, w, kc, kp);
}

void train_mmb_pack(uint32_t *dst, int W, int along, const uint16_t *src, int ld, int w, int kc)
{
    if (!along)
        pack_across(dst, W, src, ld, w, kc);
    else
        pack_along(dst, W, src, ld, w, kc);
}

static void store_tile(const float *acc, float *c, int ldc, int mr, int nr, int accumulate)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] = accumulate ? c[(size_t)i * ldc + j] + acc[i * MMB_NR + j]
                                                : acc[i * MMB_NR + j];
}

#define KB_DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define KB_DOT(i) t = (__m512bh)_mm512_set1_epi32((int)a[i]); \
    c##i##0 = _mm512_dpbf16_ps(c##i##0, t, b0); c##i##1 = _mm512_dpbf16_ps(c##i##1, t, b1);
#define KB_STORE(i) _mm512_storeu_ps(acc + (i) * 32, c##i##0); \
    _mm512_storeu_ps(acc + (i) * 32 + 16, c##i##1);
#define KB_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

MMB_TARGET
void train_mmb_kern(int kp, const uint32_t *a, const uint32_t *b, float *c, int ldc, int mr,
                    int nr, int accumulate)
{
    KB_ALL(KB_DECL)
    for (int q = 0; q < kp; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
        __m512bh t;
        KB_ALL(KB_DOT)
        a += MMB_MR;
        b += MMB_NR;
    }
    float acc[MMB_MR * MMB_NR];
    KB_ALL(KB_STORE)
    if (mr == MMB_MR && nr == MMB_NR) {
        for (int i = 0; i < MMB_MR; i++) {
            float *ci = c + (size_t)i * ldc;
            __m512 v0 = _mm512_loadu_ps(acc + i * 32), v1 = _mm512_loadu_ps(acc + i * 32 + 16);
            if (accumulate) {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(ci));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(ci + 16));
            }
            _mm512_storeu_ps(ci, v0);
            _mm512_storeu_ps(ci + 16, v1);
        }
        return;
    }
    /* plain code follows: clean the upper register halves (see
     * matmul_portable.c's kern_avx2) */
    _mm256_zeroupper();
    store_tile(acc, c, ldc, mr, nr, accumulate);
}

MMB_TARGET
static void round_cvt(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)v);
    }
    for (; i < n; i += 16) {
        __mmask16 k = first((int)(n - i < 16 ? n - i : 16));
        __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, src + i));
        _mm256_mask_storeu_epi16(dst + i, k, (__m256i)v);
    }
}

mmb_round_fn train_mmb_rounder(void)
{
    return train_mmb_supported() ? round_cvt : half_f32_to_bf16;
}
#else
mmb_round_fn train_mmb_rounder(void)
{
    return half_f32_to_bf16;
}

/* Without a compiler that knows the instruction (or off x86-64) the
 * kernel is never chosen; these keep the link whole. */
int train_mmb_supported(void)
{
    return 0;
}

void train_mmb_pack(uint32_t *dst, int W, int along, const uint16_t *src, int ld, int w, int kc)
{
    (void)dst; (void)W; (void)along; (void)src; (void)ld; (void)w; (void)kc;
}

void train_mmb_tr16(uint32_t *dst, size_t dld, const uint32_t *src, size_t sld)
{
    (void)dst; (void)dld; (void)src; (void)sld;
}

void train_mmb_kern(int kp, const uint32_t *a, const uint32_t *b, float *c, int ldc, int mr,
                    int nr, int accumulate)
{
    (void)kp; (void)a; (void)b; (void)c; (void)ldc; (void)mr; (void)nr; (void)accumulate;
}
#endif
