/* bf16 products on AMX tiles (see matmul_amx.h). Every tile of the
 * palette is configured alike, 16 rows of 64 bytes: tmm0-3 hold a 32 x 32
 * block of C as 2 x 2 fp32 tiles, tmm4-5 two 16-row slices of A (16 pairs
 * along k a row), tmm6-7 two 16-column slices of B (16 pairs deep, a
 * column's pair a 32-bit word). Each TDPBF16PS then does 16 x 16 x 32
 * multiply-adds; a block's four share each A and B tile loaded.
 *
 * Packed layouts, in 32-bit words (a pair of bf16 along k, the lower k in
 * the low half, as matmul_bf16.h's), with kq = the slice's pairs rounded
 * up to 16 (the padding zero, so a tile never reads past the slice):
 * - A: panels of 16 rows, panel p at p 16 kq; in it, 16 pairs of k at a
 *   time as a 16 x 16 block (1 KiB, one tile, rows 64 bytes apart), block
 *   c at c 256, row m's pair q at m 16 + q;
 * - B: panels of 32 columns, panel p at p 32 kq; pair q's row of the
 *   panel at q 32, column n at n (matmul_bf16.h's packing, so it packs
 *   them), a tile 16 rows of 16 columns, rows 128 bytes apart.
 * Rows of A past M and columns of B past N are zero too; the block's
 * sums go through a 32 x 32 buffer into C, of which only the rows and
 * columns that exist are written. */
#include "train/matmul_amx.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/half.h"
#include "train/matmul_bf16.h"

#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MMA_BUILT 1
#define MMA_TILES __attribute__((target("amx-tile,amx-bf16")))
#define MMA_VEC __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif

enum { KQ_MAX = MMA_KC / 2, PANEL_A = 16, PANEL_B = 32, CHUNK = 16 };

size_t train_mma_abytes(void)
{
    /* the slice's panels, then one panel of scratch for A^T's packing */
    return (size_t)(MMA_MC + PANEL_A) * KQ_MAX * sizeof(uint32_t);
}

size_t train_mma_bbytes(void)
{
    return (size_t)MMA_NC * KQ_MAX * sizeof(uint32_t);
}

/* The block's products in plain C: what the tile code below computes, in
 * the order TDPBF16PS's definition gives (each pair's low then high
 * product added to the element's fp32 sum, pairs in k order). Each
 * product of two bf16 values is exact in fp32. */
static void block_plain(const uint32_t *a, const uint32_t *b, int kq, int two_rows,
                        int two_cols, float *acc)
{
    memset(acc, 0, sizeof(float) * MMA_TILE * MMA_TILE);
    for (int c = 0; c < kq / CHUNK; c++)
        for (int r = 0; r <= two_rows; r++)
            for (int m = 0; m < 16; m++) {
                const uint32_t *ar = a + (size_t)r * PANEL_A * kq + (size_t)c * 256 + m * 16;
                for (int t = 0; t <= two_cols; t++) {
                    float *o = acc + (r * 16 + m) * MMA_TILE + t * 16;
                    for (int q = 0; q < CHUNK; q++) {
                        const uint32_t *br = b + (size_t)(c * CHUNK + q) * PANEL_B + t * 16;
                        float lo = bf16_to_f32((uint16_t)ar[q]);
                        float hi = bf16_to_f32((uint16_t)(ar[q] >> 16));
                        for (int n = 0; n < 16; n++) {
                            o[n] += lo * bf16_to_f32((uint16_t)br[n]);
                            o[n] += hi * bf16_to_f32((uint16_t)(br[n] >> 16));
                        }
                    }
                }
            }
}

#ifdef MMA_BUILT
/* ARCH_REQ_XCOMP_PERM and ARCH_GET_XCOMP_PERM (asm/prctl.h, Linux 5.16)
 * and the tile data's XSAVE feature number. */
enum { REQ_XCOMP_PERM = 0x1023, GET_XCOMP_PERM = 0x1022, XTILEDATA = 18 };

static const char *errno_name(int e)
{
    switch (e) {
    case EINVAL: return "EINVAL (a kernel before 5.16, or one without AMX support)";
    case EPERM: return "EPERM";
    case ENOSPC: return "ENOSPC (a signal stack too small for the tile state)";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOSYS: return "ENOSYS";
    case EBUSY: return "EBUSY";
    default: return "another errno";
    }
}

int train_mma_supported(char *why, size_t cap)
{
    char none[1];
    if (!why || !cap) {
        why = none;
        cap = sizeof none;
    }
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) {
        snprintf(why, cap, "this CPU has no CPUID leaf 7, so no AMX");
        return 0;
    }
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 24)) || !(d & (1u << 22))) {
        snprintf(why, cap, "this CPU has no %s (CPUID leaf 7 EDX bit %d)",
                 !(d & (1u << 24)) ? "AMX-TILE" : "AMX-BF16", !(d & (1u << 24)) ? 24 : 22);
        return 0;
    }
    /* palette 1 as configured below: 8 tiles of 16 rows of 64 bytes */
    if (__get_cpuid_max(0, NULL) < 0x1d) {
        snprintf(why, cap, "this CPU has AMX but no CPUID leaf 0x1D to describe its tiles");
        return 0;
    }
    __cpuid_count(0x1d, 1, a, b, c, d);
    if ((b & 0xffff) < 64 || (b >> 16) < 8 || (c & 0xffff) < 16) {
        snprintf(why, cap, "the AMX tile palette 1 is smaller than 8 tiles of 16 rows of 64 bytes "
                           "(CPUID leaf 0x1D subleaf 1: EBX %#x, ECX %#x)", b, c);
        return 0;
    }
    if (!train_mmb_supported()) {
        snprintf(why, cap, "the CPU has AMX but its OS or CPU lacks the AVX512-BF16 and "
                           "AVX-512 state the tiles' packing uses");
        return 0;
    }
    /* the tile data is off for every process until it asks */
    if (syscall(SYS_arch_prctl, (long)REQ_XCOMP_PERM, (unsigned long)XTILEDATA) != 0) {
        int e = errno;
        snprintf(why, cap, "the kernel refused the tile state: arch_prctl(ARCH_REQ_XCOMP_PERM, "
                           "XFEATURE_XTILEDATA) failed with errno %d, %s", e, errno_name(e));
        return 0;
    }
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, (long)GET_XCOMP_PERM, &perm) != 0 ||
        !(perm & (1ul << XTILEDATA))) {
        snprintf(why, cap, "the kernel granted the tile state but ARCH_GET_XCOMP_PERM does not "
                           "show it (mask %#lx)", perm);
        return 0;
    }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & (3u << 17)) != (3u << 17)) {
        snprintf(why, cap, "the OS does not enable the tile state (XCR0 %#x, bits 17 and 18 "
                           "needed)", lo);
        return 0;
    }
    snprintf(why, cap, "AMX-TILE and AMX-BF16, tile state granted");
    return 1;
}

/* LDTILECFG's 64 bytes, palette 1: every tile used 16 rows of 64 bytes,
 * tiles 8-15 (which palette 1 does not have) zero. Constant, so that no
 * store of it can be reordered past the instruction that reads it. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

_Static_assert(sizeof(tile_cfg) == 64, "LDTILECFG reads 64 bytes");

static const tile_cfg tile_config __attribute__((aligned(64))) = {
    1, 0, { 0 }, { 64, 64, 64, 64, 64, 64, 64, 64 }, { 16, 16, 16, 16, 16, 16, 16, 16 }
};

MMA_TILES
static void tiles_start(void)
{
    _tile_loadconfig(&tile_config);
}

/* Back to the init state, so that the thread's context switches save no
 * tile data. */
MMA_TILES
static void tiles_end(void)
{
    _tile_release();
}

/* The block's products on the tiles: two_rows, two_cols say whether the
 * second row or column tile exists (a panel past it is not even read).
 * Loads of the packed panels are written by earlier calls; the barrier
 * keeps any compiler from moving a store past a tile load it cannot see
 * reading memory. */
MMA_TILES
static void block_tiles(const uint32_t *a, const uint32_t *b, int kq, int two_rows,
                        int two_cols, float *acc)
{
    const uint32_t *a1 = a + (size_t)PANEL_A * kq;
    __asm__ volatile("" ::: "memory");
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (two_rows && two_cols) {
        for (int c = 0; c < kq / CHUNK; c++) {
            _tile_loadd(4, a + (size_t)c * 256, 64);
            _tile_loadd(5, a1 + (size_t)c * 256, 64);
            _tile_loadd(6, b + (size_t)c * CHUNK * PANEL_B, PANEL_B * 4);
            _tile_loadd(7, b + (size_t)c * CHUNK * PANEL_B + 16, PANEL_B * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else {
        for (int c = 0; c < kq / CHUNK; c++) {
            _tile_loadd(4, a + (size_t)c * 256, 64);
            _tile_loadd(6, b + (size_t)c * CHUNK * PANEL_B, PANEL_B * 4);
            _tile_dpbf16ps(0, 4, 6);
            if (two_cols) {
                _tile_loadd(7, b + (size_t)c * CHUNK * PANEL_B + 16, PANEL_B * 4);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (two_rows) {
                _tile_loadd(5, a1 + (size_t)c * 256, 64);
                _tile_dpbf16ps(2, 5, 6);
            }
        }
    }
    _tile_stored(0, acc, MMA_TILE * 4);
    _tile_stored(1, acc + 16, MMA_TILE * 4);
    _tile_stored(2, acc + 16 * MMA_TILE, MMA_TILE * 4);
    _tile_stored(3, acc + 16 * MMA_TILE + 16, MMA_TILE * 4);
}

static inline __mmask16 first16(int n)
{
    n = n < 0 ? 0 : n > 16 ? 16 : n;
    return (__mmask16)((1u << n) - 1);
}

/* C's mr x nr corner (= or +=) the block's sums; masked, so nothing past
 * the corner is read or written. */
MMA_VEC
static void add_block(const float *acc, float *c, int ldc, int mr, int nr, int accumulate)
{
    __mmask16 m0 = first16(nr), m1 = first16(nr - 16);
    for (int i = 0; i < mr; i++) {
        float *ci = c + (size_t)i * ldc;
        __m512 v0 = _mm512_loadu_ps(acc + i * MMA_TILE);
        __m512 v1 = _mm512_loadu_ps(acc + i * MMA_TILE + 16);
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}
#else
int train_mma_supported(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "this build has no AMX kernel (x86-64 Linux with gcc 11 or clang 12 "
                           "and later)");
    return 0;
}

static void add_block(const float *acc, float *c, int ldc, int mr, int nr, int accumulate)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] = acc[i * MMA_TILE + j] +
                                     (accumulate ? c[(size_t)i * ldc + j] : 0.0f);
}
#endif

/* A panel from A untransposed: a row's pairs are its values as they lie,
 * 32 at a time, the slice's end and the missing rows zero. */
static void pack_a_rows(uint32_t *dst, const uint16_t *src, int ld, int rows, int kc, int kq)
{
    for (int c = 0; c < kq / CHUNK; c++) {
        int n = kc - 32 * c;
        n = n < 0 ? 0 : n > 32 ? 32 : n;
        for (int m = 0; m < 16; m++) {
            uint32_t *d = dst + (size_t)c * 256 + m * 16;
            int got = m < rows ? n : 0;
            if (got)
                memcpy(d, src + (size_t)m * ld + 32 * c, sizeof(uint16_t) * (size_t)got);
            memset((uint16_t *)d + got, 0, sizeof(uint16_t) * (size_t)(32 - got));
        }
    }
}

/* A's slice (mc x kc at src) into 16-row panels. Transposed, the rows'
 * pairs are packed as matmul_bf16.h packs B (16 wide, into the scratch
 * panel) and each 16 x 16 block of words transposed into place. */
static void pack_a(uint32_t *ap, int ta, const uint16_t *src, int ld, int mc, int kc, int kq)
{
    uint32_t *scratch = ap + (size_t)MMA_MC * KQ_MAX;
    int kp = (kc + 1) / 2;
    for (int ip = 0; ip < mc; ip += PANEL_A) {
        int rows = mc - ip < PANEL_A ? mc - ip : PANEL_A;
        uint32_t *dst = ap + (size_t)ip * kq;
        if (!ta) {
            pack_a_rows(dst, src + (size_t)ip * ld, ld, rows, kc, kq);
            continue;
        }
        train_mmb_pack(scratch, PANEL_A, 0, src + ip, ld, rows, kc);
        memset(scratch + (size_t)kp * PANEL_A, 0, sizeof(uint32_t) * (size_t)(kq - kp) * PANEL_A);
        for (int c = 0; c < kq / CHUNK; c++)
            train_mmb_tr16(dst + (size_t)c * 256, 16, scratch + (size_t)c * 256, 16);
    }
}

/* B's slice (kc x nc at src) into 32-column panels, each zero below its
 * kc rows down to kq. */
static void pack_b(uint32_t *bp, int tb, const uint16_t *src, int ld, int nc, int kc, int kq)
{
    int kp = (kc + 1) / 2;
    for (int jp = 0; jp < nc; jp += PANEL_B) {
        uint32_t *dst = bp + (size_t)jp * kq;
        train_mmb_pack(dst, PANEL_B, tb, tb ? src + (size_t)jp * ld : src + jp, ld,
                       nc - jp < PANEL_B ? nc - jp : PANEL_B, kc);
        memset(dst + (size_t)kp * PANEL_B, 0, sizeof(uint32_t) * (size_t)(kq - kp) * PANEL_B);
    }
}

/* One packed A slice against one packed B slice: every 32 x 32 block. */
static void blocks(const uint32_t *ap, const uint32_t *bp, int mc, int nc, int kq, float *C,
                   int ldc, int accumulate, int emulate)
{
    float acc[MMA_TILE * MMA_TILE] __attribute__((aligned(64)));
    (void)emulate;   /* without the tile code, the plain form is all there is */
    for (int jr = 0; jr < nc; jr += MMA_TILE) {
        int nr = nc - jr < MMA_TILE ? nc - jr : MMA_TILE;
        for (int ir = 0; ir < mc; ir += MMA_TILE) {
            int mr = mc - ir < MMA_TILE ? mc - ir : MMA_TILE;
            const uint32_t *a = ap + (size_t)ir * kq, *b = bp + (size_t)jr * kq;
            float *c = C + (size_t)ir * ldc + jr;
#ifdef MMA_BUILT
            if (!emulate)
                block_tiles(a, b, kq, mr > 16, nr > 16, acc);
            else
#endif
                block_plain(a, b, kq, mr > 16, nr > 16, acc);
            add_block(acc, c, ldc, mr, nr, accumulate);
        }
    }
}

void train_mma_gemm(void *abuf, void *bbuf, int ta, int tb, int M, int N, int K,
                    const uint16_t *A, int lda, const uint16_t *B, int ldb, int accumulate,
                    float *C, int ldc, int emulate)
{
    uint32_t *ap = abuf, *bp = bbuf;
#ifdef MMA_BUILT
    if (!emulate)
        tiles_start();
#endif
    for (int jc = 0; jc < N; jc += MMA_NC) {
        int nc = N - jc < MMA_NC ? N - jc : MMA_NC;
        for (int pc = 0; pc < K; pc += MMA_KC) {
            int kc = K - pc < MMA_KC ? K - pc : MMA_KC;
            int kq = ((kc + 1) / 2 + CHUNK - 1) / CHUNK * CHUNK;
            pack_b(bp, tb, tb ? B + (size_t)jc * ldb + pc : B + (size_t)pc * ldb + jc, ldb, nc,
                   kc, kq);
            for (int ic = 0; ic < M; ic += MMA_MC) {
                int mc = M - ic < MMA_MC ? M - ic : MMA_MC;
                pack_a(ap, ta, ta ? A + (size_t)pc * lda + ic : A + (size_t)ic * lda + pc, lda,
                       mc, kc, kq);
                blocks(ap, bp, mc, nc, kq, C + (size_t)ic * ldc + jc, ldc,
                       pc > 0 || accumulate, emulate);
            }
        }
    }
#ifdef MMA_BUILT
    if (!emulate)
        tiles_end();
#endif
}
