/* Portable single-precision GEMM in the GotoBLAS manner: blocks of B
 * (KC x NC) and A (MC x KC) are packed into contiguous panels so that a
 * register-blocked MR x NR micro-kernel streams through them. On x86-64
 * with AVX2+FMA a vector micro-kernel is chosen at run time; elsewhere a
 * plain C one, which the compiler vectorises as it can. With AVX-512 the
 * tile is 12 x 32 instead of 6 x 16. bf16 operands go to AMX tiles
 * (matmul_amx.c, its own blocks) where the CPU and OS allow them, else to
 * the AVX512-BF16 kernel (matmul_bf16.c) where the CPU has it, packed as
 * pairs along k in this file's blocks; elsewhere they are widened to fp32
 * while packing.
 *
 * Each C element is summed in the same order whatever the thread count
 * (threads split rows or columns of C, never K), so results do not depend
 * on WEFT_THREADS. */
#include "train/matmul.h"
#include "train/matmul_amx.h"
#include "train/matmul_bf16.h"

#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/log.h"
#include "core/param.h"
#include "weft.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MMP_X86 1
#endif

/* MR x NR: the tile of the C and AVX2 kernels. MC and NC are multiples of
 * every kernel's tile. */
enum { MR = 6, NR = 16, KC = 256, MC = 120, NC = 1024 };

typedef void (*kern_fn)(int kc, const float *a, const float *b, float *c,
                        int ldc, int mr, int nr, int accumulate);

typedef struct {
    float *ap;   /* MC x KC */
    float *bp;   /* KC x NC */
} mmp_buf;

struct mmp {
    int nthreads;
    const char *isa;
    int mr, nr;
    int t8;   /* packing may use AVX2's transposes */
    mmp_buf *buf;
    kern_fn kern;
    const char *isa_bf16;   /* the bf16 kernel; NULL: bf16 is widened for kern */
    int amx;                /* bf16 products go to matmul_amx.c */
};

static void store_tile(const float *acc, int acc_ld, float *c, int ldc, int mr, int nr,
                       int accumulate)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] = accumulate ? c[(size_t)i * ldc + j] + acc[i * acc_ld + j]
                                                : acc[i * acc_ld + j];
}

static void kern_c(int kc, const float *a, const float *b, float *c, int ldc,
                   int mr, int nr, int accumulate)
{
    float acc[MR * NR];
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * NR;
        const float *ak = a + (size_t)k * MR;
        for (int i = 0; i < MR; i++) {
            float ai = ak[i];
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] += ai * bk[j];
        }
    }
    store_tile(acc, NR, c, ldc, mr, nr, accumulate);
}

#ifdef MMP_X86
__attribute__((target("avx2,fma")))
static void kern_avx2(int kc, const float *a, const float *b, float *c, int ldc,
                      int mr, int nr, int accumulate)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    /* Unrolled four times by hand: the loop's own add and branch, and the
     * moves the compiler adds between iterations, cost about a fifth of the
     * kernel's speed otherwise (measured on Zen 3). */
#define K2_STEP(o) do { \
        __m256 b0 = _mm256_loadu_ps(b + (o) * NR), b1 = _mm256_loadu_ps(b + (o) * NR + 8), t; \
        const float *ak = a + (o) * MR; \
        t = _mm256_broadcast_ss(ak + 0); c00 = _mm256_fmadd_ps(t, b0, c00); c01 = _mm256_fmadd_ps(t, b1, c01); \
        t = _mm256_broadcast_ss(ak + 1); c10 = _mm256_fmadd_ps(t, b0, c10); c11 = _mm256_fmadd_ps(t, b1, c11); \
        t = _mm256_broadcast_ss(ak + 2); c20 = _mm256_fmadd_ps(t, b0, c20); c21 = _mm256_fmadd_ps(t, b1, c21); \
        t = _mm256_broadcast_ss(ak + 3); c30 = _mm256_fmadd_ps(t, b0, c30); c31 = _mm256_fmadd_ps(t, b1, c31); \
        t = _mm256_broadcast_ss(ak + 4); c40 = _mm256_fmadd_ps(t, b0, c40); c41 = _mm256_fmadd_ps(t, b1, c41); \
        t = _mm256_broadcast_ss(ak + 5); c50 = _mm256_fmadd_ps(t, b0, c50); c51 = _mm256_fmadd_ps(t, b1, c51); \
    } while (0)
    /* Prefetches: the C tile's rows (written at the end, read too when
     * accumulating) and the B panel four k-steps ahead. Without them the
     * step's products ran 20-30% slower in an interleaved A/B on Zen 3
     * (a shared 2-core VM at load 10, so caches were contended; not yet
     * measured on an idle machine). */
    for (int i = 0; i < mr; i++) {
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + 15), _MM_HINT_T0);
    }
    int k = 0;
    for (; k + 4 <= kc; k += 4) {
        for (int l = 0; l < 4; l++)
            _mm_prefetch((const char *)(b + 4 * NR * 4 + 16 * l), _MM_HINT_T0);
        K2_STEP(0); K2_STEP(1); K2_STEP(2); K2_STEP(3);
        a += 4 * MR;
        b += 4 * NR;
    }
    for (; k < kc; k++) {
        K2_STEP(0);
        a += MR;
        b += NR;
    }
#undef K2_STEP
    float acc[MR * NR];
    _mm256_storeu_ps(acc + 0 * NR, c00); _mm256_storeu_ps(acc + 0 * NR + 8, c01);
    _mm256_storeu_ps(acc + 1 * NR, c10); _mm256_storeu_ps(acc + 1 * NR + 8, c11);
    _mm256_storeu_ps(acc + 2 * NR, c20); _mm256_storeu_ps(acc + 2 * NR + 8, c21);
    _mm256_storeu_ps(acc + 3 * NR, c30); _mm256_storeu_ps(acc + 3 * NR + 8, c31);
    _mm256_storeu_ps(acc + 4 * NR, c40); _mm256_storeu_ps(acc + 4 * NR + 8, c41);
    _mm256_storeu_ps(acc + 5 * NR, c50); _mm256_storeu_ps(acc + 5 * NR + 8, c51);
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; i++) {
            float *ci = c + (size_t)i * ldc;
            __m256 v0 = _mm256_loadu_ps(acc + i * NR), v1 = _mm256_loadu_ps(acc + i * NR + 8);
            if (accumulate) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
            }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        }
        return;
    }
    /* Clean upper register halves before plain SSE code runs: some CPUs
     * charge every SSE instruction while they are dirty, for the rest of
     * the program, and the compiler does not clear them before this call. */
    _mm256_zeroupper();
    store_tile(acc, NR, c, ldc, mr, nr, accumulate);
}

#define K5_DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define K5_FMA(i) t = _mm512_set1_ps(a[i]); \
    c##i##0 = _mm512_fmadd_ps(t, b0, c##i##0); c##i##1 = _mm512_fmadd_ps(t, b1, c##i##1);
#define K5_STORE(i) _mm512_storeu_ps(acc + (i) * 32, c##i##0); \
    _mm512_storeu_ps(acc + (i) * 32 + 16, c##i##1);
#define K5_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* 12 x 32 tile: 24 of the 32 zmm registers accumulate. */
__attribute__((target("avx512f")))
static void kern_avx512(int kc, const float *a, const float *b, float *c, int ldc,
                        int mr, int nr, int accumulate)
{
    K5_ALL(K5_DECL)
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), t;
        K5_ALL(K5_FMA)
        a += 12;
        b += 32;
    }
    float acc[12 * 32];
    K5_ALL(K5_STORE)
    if (mr == 12 && nr == 32) {
        for (int i = 0; i < 12; i++) {
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
    _mm256_zeroupper();   /* as in kern_avx2 */
    store_tile(acc, 32, c, ldc, mr, nr, accumulate);
}
#endif

/* An operand: fp32, or bf16 widened while packing (exactly, so a bf16
 * product equals the fp32 product of the rounded values). */
typedef struct {
    const void *p;
    int bf16;
} operand;

static inline float ld(operand x, size_t i)
{
    return x.bf16 ? bf16_to_f32(((const uint16_t *)x.p)[i]) : ((const float *)x.p)[i];
}

static inline operand shift(operand x, size_t i)
{
    x.p = x.bf16 ? (const void *)((const uint16_t *)x.p + i) : (const void *)((const float *)x.p + i);
    return x;
}

#ifdef MMP_X86
/* dst[k][0..8) = src rows 0..8 at column k, for k in [0, kc): B^T's
 * 16-wide panel built eight rows at a time by 8 x 8 transposes in
 * registers, so both the reads and the writes are whole vectors. */
__attribute__((target("avx2,fma")))
static void pack_t8(float *dst, int dld, const float *src, int ld, int kc)
{
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        const float *sk = src + k;
        size_t l = (size_t)ld;
        __m256 r0 = _mm256_loadu_ps(sk), r1 = _mm256_loadu_ps(sk + l);
        __m256 r2 = _mm256_loadu_ps(sk + 2 * l), r3 = _mm256_loadu_ps(sk + 3 * l);
        __m256 r4 = _mm256_loadu_ps(sk + 4 * l), r5 = _mm256_loadu_ps(sk + 5 * l);
        __m256 r6 = _mm256_loadu_ps(sk + 6 * l), r7 = _mm256_loadu_ps(sk + 7 * l);
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
        __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
        __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
        __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        float *d = dst + (size_t)k * dld;
        _mm256_storeu_ps(d + 0 * (size_t)dld, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_storeu_ps(d + 1 * (size_t)dld, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_storeu_ps(d + 2 * (size_t)dld, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_storeu_ps(d + 3 * (size_t)dld, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_storeu_ps(d + 4 * (size_t)dld, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_storeu_ps(d + 5 * (size_t)dld, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_storeu_ps(d + 6 * (size_t)dld, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_storeu_ps(d + 7 * (size_t)dld, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    for (; k < kc; k++)
        for (int j = 0; j < 8; j++)
            dst[(size_t)k * dld + j] = src[(size_t)j * ld + k];
}

/* pack_t8 for four rows, by 4 x 4 transposes. */
__attribute__((target("avx2")))
static void pack_t4(float *dst, int dld, const float *src, int ld, int kc)
{
    int k = 0;
    size_t l = (size_t)ld;
    for (; k + 4 <= kc; k += 4) {
        const float *sk = src + k;
        __m128 r0 = _mm_loadu_ps(sk), r1 = _mm_loadu_ps(sk + l);
        __m128 r2 = _mm_loadu_ps(sk + 2 * l), r3 = _mm_loadu_ps(sk + 3 * l);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        float *d = dst + (size_t)k * dld;
        _mm_storeu_ps(d, r0);
        _mm_storeu_ps(d + (size_t)dld, r1);
        _mm_storeu_ps(d + 2 * (size_t)dld, r2);
        _mm_storeu_ps(d + 3 * (size_t)dld, r3);
    }
    for (; k < kc; k++)
        for (int j = 0; j < 4; j++)
            dst[(size_t)k * dld + j] = src[(size_t)j * l + k];
}
#endif

/* dst[k * dld + j] = src[j * ld + k] for j < rows, k < kc: a panel of
 * rows stored along k (op(A) untransposed, op(B) transposed). t8: by
 * register transposes, eight and then four rows at a time; a strided
 * scalar loop costs as much as a fifth of a 512-wide product. */
static void pack_rows(float *dst, int dld, int t8, const float *src, int ld, int rows, int kc)
{
    int j = 0;
#ifdef MMP_X86
    if (t8) {
        for (; j + 8 <= rows; j += 8)
            pack_t8(dst + j, dld, src + (size_t)j * ld, ld, kc);
        for (; j + 4 <= rows; j += 4)
            pack_t4(dst + j, dld, src + (size_t)j * ld, ld, kc);
    }
#endif
    if (j == rows)
        return;
    for (int k = 0; k < kc; k++)
        for (int i = j; i < rows; i++)
            dst[(size_t)k * dld + i] = src[(size_t)i * ld + k];
}

/* Panels of Rt from a source whose rows already run along k (row k holds
 * the w values of every panel side by side): panel p at dst + p kc Rt,
 * its element (k, j) at k Rt + j, the last panel zero-padded. Row by row,
 * so the source is read in order (a panel at a time would stride across a
 * page per k), with copies of a size known at compile time for the tile
 * widths, a few vector moves each. */
static void pack_along(float *dst, int Rt, const float *src, int ld, int w, int kc)
{
    int full = w / Rt * Rt, rest = w - full;
    size_t step = (size_t)kc * Rt;
    for (int k = 0; k < kc; k++) {
        const float *s = src + (size_t)k * ld;
        float *d = dst + (size_t)k * Rt;
        int j = 0;
#define ALONG_W(W)                                                       \
    case W:                                                              \
        for (; j < full; j += W, d += step)                              \
            memcpy(d, s + j, W * sizeof(float));                         \
        break;
        switch (Rt) {
            ALONG_W(6) ALONG_W(12) ALONG_W(16) ALONG_W(32)
        default:
            for (; j < full; j += Rt, d += step)
                memcpy(d, s + j, (size_t)Rt * sizeof(float));
        }
#undef ALONG_W
        if (rest) {
            memcpy(d, s + j, (size_t)rest * sizeof(float));
            memset(d + rest, 0, (size_t)(Rt - rest) * sizeof(float));
        }
    }
}

/* Packs op(A)[i0.., k0..] (mc x kc) into MRt-row panels, zero-padded.
 * fp32 has loops of its own: with the bf16 test inside, -O2 neither
 * hoists it nor vectorises, and packing took a third of the time of a
 * small product (attention's). Writes go in order, the panel's layout. */
static void pack_a(float *dst, int MRt, int t8, int ta, operand A, int lda, int i0, int mc,
                   int k0, int kc)
{
    if (!A.bf16 && ta) {
        pack_along(dst, MRt, (const float *)A.p + (size_t)k0 * lda + i0, lda, mc, kc);
        return;
    }
    for (int ip = 0; ip < mc; ip += MRt) {
        int mr = mc - ip < MRt ? mc - ip : MRt;
        if (!A.bf16) {
            pack_rows(dst, MRt, t8, (const float *)A.p + (size_t)(i0 + ip) * lda + k0, lda, mr,
                      kc);
        } else if (ta) {
            for (int k = 0; k < kc; k++) {
                size_t at = (size_t)(k0 + k) * lda + i0 + ip;
                for (int i = 0; i < mr; i++)
                    dst[(size_t)k * MRt + i] = ld(A, at + i);
            }
        } else {
            for (int i = 0; i < mr; i++) {
                size_t at = (size_t)(i0 + ip + i) * lda + k0;
                for (int k = 0; k < kc; k++)
                    dst[(size_t)k * MRt + i] = ld(A, at + k);
            }
        }
        for (int i = mr; i < MRt; i++)
            for (int k = 0; k < kc; k++)
                dst[(size_t)k * MRt + i] = 0.0f;
        dst += (size_t)kc * MRt;
    }
}

/* Packs op(B)[k0.., j0..] (kc x nc) into NRt-column panels, zero-padded;
 * t8: the CPU has AVX2, so B^T's panels are built by register transposes. */
static void pack_b(float *dst, int NRt, int t8, int tb, operand B, int ldb, int k0, int kc,
                   int j0, int nc)
{
    if (!tb && !B.bf16) {
        pack_along(dst, NRt, (const float *)B.p + (size_t)k0 * ldb + j0, ldb, nc, kc);
        return;
    }
    for (int jp = 0; jp < nc; jp += NRt) {
        int nr = nc - jp < NRt ? nc - jp : NRt;
        const float *b = (const float *)B.p;
        if (tb && !B.bf16) {
            pack_rows(dst, NRt, t8, b + (size_t)(j0 + jp) * ldb + k0, ldb, nr, kc);
        } else if (tb) {
            for (int j = 0; j < nr; j++) {
                size_t at = (size_t)(j0 + jp + j) * ldb + k0;
                for (int k = 0; k < kc; k++)
                    dst[(size_t)k * NRt + j] = ld(B, at + k);
            }
        } else {
            for (int k = 0; k < kc; k++) {
                size_t at = (size_t)(k0 + k) * ldb + j0 + jp;
                for (int j = 0; j < nr; j++)
                    dst[(size_t)k * NRt + j] = ld(B, at + j);
            }
        }
        for (int j = nr; j < NRt; j++)
            for (int k = 0; k < kc; k++)
                dst[(size_t)k * NRt + j] = 0.0f;
        dst += (size_t)kc * NRt;
    }
}

static void gemm_serial(const mmp *p, mmp_buf *bf, int ta, int tb, int M, int N, int K,
                        operand A, int lda, operand B, int ldb, float beta, float *C, int ldc)
{
    if (K == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    if (beta != 0.0f && beta != 1.0f)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] *= beta;
    if (A.bf16 && p->amx) {
        train_mma_gemm(bf->ap, bf->bp, ta, tb, M, N, K, A.p, lda, B.p, ldb, beta != 0.0f, C, ldc,
                       0);
        return;
    }
    /* pairs: the bf16 kernel's panels, a 32-bit word per pair along k, in
     * the same buffers: blocks twice as deep fill them as fp32's do, and
     * ran 5-20% faster than KC deep (GPT-512 shapes and 2048^3, thread CPU
     * time on a loaded Zen 5) */
    int pairs = A.bf16 && p->isa_bf16;
    int MRt = pairs ? MMB_MR : p->mr, NRt = pairs ? MMB_NR : p->nr, KB = pairs ? 2 * KC : KC;
    const uint16_t *a16 = A.p, *b16 = B.p;
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KB) {
            int kc = K - pc < KB ? K - pc : KB;
            int acc = pc > 0 || beta != 0.0f;
            int kw = pairs ? (kc + 1) / 2 : kc;   /* a panel's 4-byte words per index */
            if (pairs)
                train_mmb_pack((uint32_t *)bf->bp, MMB_NR, tb,
                               tb ? b16 + (size_t)jc * ldb + pc : b16 + (size_t)pc * ldb + jc,
                               ldb, nc, kc);
            else
                pack_b(bf->bp, p->nr, p->t8, tb, B, ldb, pc, kc, jc, nc);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                if (pairs)
                    train_mmb_pack((uint32_t *)bf->ap, MMB_MR, !ta,
                                   ta ? a16 + (size_t)pc * lda + ic : a16 + (size_t)ic * lda + pc,
                                   lda, mc, kc);
                else
                    pack_a(bf->ap, p->mr, p->t8, ta, A, lda, ic, mc, pc, kc);
                for (int jr = 0; jr < nc; jr += NRt) {
                    int nr = nc - jr < NRt ? nc - jr : NRt;
                    const float *bpan = bf->bp + (size_t)jr * kw;
                    for (int ir = 0; ir < mc; ir += MRt) {
                        int mr = mc - ir < MRt ? mc - ir : MRt;
                        float *c = C + (size_t)(ic + ir) * ldc + jc + jr;
                        if (pairs)
                            train_mmb_kern(kw, (const uint32_t *)(bf->ap + (size_t)ir * kw),
                                           (const uint32_t *)bpan, c, ldc, mr, nr, acc);
                        else
                            p->kern(kc, bf->ap + (size_t)ir * kc, bpan, c, ldc, mr, nr, acc);
                    }
                }
            }
        }
    }
}

typedef struct {
    const mmp *p;
    int ta, tb, M, N, K, lda, ldb, ldc, by_rows;
    int mt, nt;   /* the kernel's tile: threads split C at its multiples */
    operand A, B;
    float beta;
    float *C;
} gemm_job;

static void gemm_worker(void *v, int tid, int nt)
{
    gemm_job *j = v;
    int lo, hi;
    if (j->by_rows) {
        train_pool_split(j->M, j->mt, tid, nt, &lo, &hi);
        if (hi <= lo)
            return;
        operand a = shift(j->A, j->ta ? (size_t)lo : (size_t)lo * j->lda);
        gemm_serial(j->p, &j->p->buf[tid], j->ta, j->tb, hi - lo, j->N, j->K, a, j->lda,
                    j->B, j->ldb, j->beta, j->C + (size_t)lo * j->ldc, j->ldc);
    } else {
        train_pool_split(j->N, j->nt, tid, nt, &lo, &hi);
        if (hi <= lo)
            return;
        operand b = shift(j->B, j->tb ? (size_t)lo * j->ldb : (size_t)lo);
        gemm_serial(j->p, &j->p->buf[tid], j->ta, j->tb, j->M, hi - lo, j->K, j->A, j->lda,
                    b, j->ldb, j->beta, j->C + lo, j->ldc);
    }
}

/* The slowest thread's share of a product whose m side (rows or
 * columns of C, in tiles) is split: its tiles' multiply-adds and its
 * packing, every thread packing the whole of the operand it does not
 * split (for rows, all of B: K x n). A packed element is taken as 32
 * multiply-adds, about a cycle of a 16-lane kernel with two FMA units. */
static double split_cost(int m, int tile, int n, int K, int nt)
{
    int tiles = (m + tile - 1) / tile, per = (tiles + nt - 1) / nt * tile;
    if (per > m)
        per = m;
    return (double)per * n * K + 32.0 * ((double)K * n + (double)per * K);
}

static int split_rows(int mt, int ntile, int nt, int M, int N, int K)
{
    return split_cost(M, mt, N, K, nt) <= split_cost(N, ntile, M, K, nt);
}

static void gemm_any(mmp *p, pool *pl, int ta, int tb, int M, int N, int K, operand A,
                     int lda, operand B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    int nt = train_pool_size(pl);
    if (nt > p->nthreads)
        nt = p->nthreads;
    long work = (long)M * N * (K > 0 ? K : 1);
    if (nt <= 1 || work < 32L * 1024) {
        gemm_serial(p, &p->buf[0], ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* AMX's blocks are 32 x 32; the other kernels share the fp32 tile */
    int mt = A.bf16 && p->amx ? MMA_TILE : p->mr, ntile = A.bf16 && p->amx ? MMA_TILE : p->nr;
    gemm_job j = { p, ta, tb, M, N, K, lda, ldb, ldc, split_rows(mt, ntile, nt, M, N, K),
                   mt, ntile, A, B, beta, C };
    train_pool_run(pl, gemm_worker, &j);
}

void train_mmp_gemm(mmp *p, pool *pl, int ta, int tb, int M, int N, int K,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc)
{
    operand a = { A, 0 }, b = { B, 0 };
    gemm_any(p, pl, ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
}

void train_mmp_gemm_on(mmp *p, int tid, int ta, int tb, int M, int N, int K,
                       const float *A, int lda, const float *B, int ldb,
                       float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (!p) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++)
                    s += A[ta ? (size_t)k * lda + i : (size_t)i * lda + k] *
                         B[tb ? (size_t)j * ldb + k : (size_t)k * ldb + j];
                C[(size_t)i * ldc + j] = s + (beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j]);
            }
        return;
    }
    operand a = { A, 0 }, b = { B, 0 };
    gemm_serial(p, &p->buf[tid], ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
}

void train_mmp_gemm_bf16_on(mmp *p, int tid, int ta, int tb, int M, int N, int K,
                            const uint16_t *A, int lda, const uint16_t *B, int ldb,
                            float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (!p) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++)
                    s += bf16_to_f32(A[ta ? (size_t)k * lda + i : (size_t)i * lda + k]) *
                         bf16_to_f32(B[tb ? (size_t)j * ldb + k : (size_t)k * ldb + j]);
                C[(size_t)i * ldc + j] = s + (beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j]);
            }
        return;
    }
    operand a = { A, 1 }, b = { B, 1 };
    gemm_serial(p, &p->buf[tid], ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
}

void train_mmp_gemm_bf16(mmp *p, pool *pl, int ta, int tb, int M, int N, int K,
                         const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float beta, float *C, int ldc)
{
    operand a = { A, 1 }, b = { B, 1 };
    gemm_any(p, pl, ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
}

int train_mmp_create(mmp **out, int threads)
{
    int isa = MMP_ISA_AUTO;
#ifdef MMP_X86
    /* WEFT_MATMUL_ISA, for tests and comparisons */
    int rc = param_read_int(PARAM_matmul_isa, &isa, NULL, 0);
    if (rc)
        return rc;
#endif
    return train_mmp_create_isa(out, threads, isa);
}

int train_mmp_create_isa(mmp **out, int threads, int isa)
{
    if (threads < 1)
        threads = 1;
    mmp *p = calloc(1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    p->nthreads = threads;
    p->kern = kern_c;
    p->isa = "c";
    p->mr = MR;
    p->nr = NR;
#ifndef MMP_X86
    (void)isa;
#else
    __builtin_cpu_init();
    int want512 = isa <= MMP_ISA_AVX512, want2 = isa != MMP_ISA_C;
    if (want512 && __builtin_cpu_supports("avx512f")) {
        p->kern = kern_avx512;
        p->isa = "avx512";
        p->mr = 12;
        p->nr = 32;
        p->t8 = __builtin_cpu_supports("avx2");
    } else if (want2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        p->kern = kern_avx2;
        p->isa = "avx2";
        p->t8 = 1;
    }
    /* The bf16 kernel, best first; without one, bf16 operands are widened
     * for the fp32 kernel. The VDPBF16PS kernel shares the AVX-512 fp32
     * kernel's tile, so that threads split C alike for both. */
    char why[256] = "";
    if (isa <= MMP_ISA_AMX && p->kern == kern_avx512 && train_mma_supported(why, sizeof why)) {
        p->isa_bf16 = "amx";
        p->amx = 1;
    } else if (isa <= MMP_ISA_AVX512BF16 && p->kern == kern_avx512 && train_mmb_supported()) {
        p->isa_bf16 = "avx512bf16";
    }
    if (isa == MMP_ISA_AMX && !p->amx) {
        log_msg(LOG_ERROR, LOG_ERROR, -1,
                "WEFT_MATMUL_ISA=amx: %s; auto takes the best kernel it has",
                why[0] ? why : "this CPU has no AVX-512, so no AMX");
        free(p);
        return WEFT_ECONFIG;
    }
    if (isa == MMP_ISA_AVX512BF16 && !p->isa_bf16) {
        log_msg(LOG_ERROR, LOG_ERROR, -1,
                "WEFT_MATMUL_ISA=avx512bf16: this CPU (or its OS) cannot run AVX512-BF16 "
                "(CPUID leaf 7 subleaf 1 EAX bit 5, with AVX-512 enabled by XGETBV); "
                "auto takes the best kernel it has");
        free(p);
        return WEFT_ECONFIG;
    }
#endif
    p->buf = calloc((size_t)threads, sizeof *p->buf);
    if (!p->buf) {
        free(p);
        return WEFT_ENOMEM;
    }
    /* AMX's packed slices are larger than the other kernels' */
    size_t abytes = sizeof(float) * MC * KC, bbytes = sizeof(float) * KC * NC;
    if (p->amx) {
        abytes = train_mma_abytes() > abytes ? train_mma_abytes() : abytes;
        bbytes = train_mma_bbytes() > bbytes ? train_mma_bbytes() : bbytes;
    }
    for (int t = 0; t < threads; t++) {
        p->buf[t].ap = aligned_alloc(64, abytes);
        p->buf[t].bp = aligned_alloc(64, bbytes);
        if (!p->buf[t].ap || !p->buf[t].bp) {
            train_mmp_destroy(p);
            return WEFT_ENOMEM;
        }
    }
    *out = p;
    return 0;
}

const char *train_mmp_isa(const mmp *p)
{
    return p->isa;
}

const char *train_mmp_isa_bf16(const mmp *p)
{
    return p->isa_bf16;
}

void train_mmp_destroy(mmp *p)
{
    if (!p)
        return;
    if (p->buf)
        for (int t = 0; t < p->nthreads; t++) {
            free(p->buf[t].ap);
            free(p->buf[t].bp);
        }
    free(p->buf);
    free(p);
}
