/* bf16 matrix products (train_mm_gemm_bf16) on each kernel the CPU has:
 * AMX tiles (WEFT_MATMUL_ISA=amx) and the AVX512-BF16 one
 * (WEFT_MATMUL_ISA=avx512bf16), each skipped, and said, where the CPU or
 * OS lacks it, and widening to fp32 (WEFT_MATMUL_ISA=avx512, which widens
 * on any CPU). The AMX path's packing and blocking also run here with the
 * tiles' products done in plain C (train_mma_gemm's emulate), so they are
 * checked on a CPU without AMX too; and WEFT_MATMUL_ISA=amx must be
 * refused, saying why, where the tiles cannot be used. Each is checked against an fp64 product of
 * the same bf16-rounded operands for every transpose case, every size
 * 1..67 of each side (the others drawn at random), a few shapes past the
 * blocks (k 256 or 512, rows 120, columns 1024), beta 0 and 1, leading
 * dimensions wider than the matrix and operands at odd addresses; 1 and 2
 * threads must give the same bits. Then a small GPT trained in bf16 on each kernel, and the
 * peak cache's bf16 entry.
 *
 * Error bound, per element: every path forms each product of two bf16
 * values exactly in fp32 (8-bit significands, 16-bit product) and rounds
 * only its fp32 sums: at most one rounding per k (an FMA, or a VDPBF16PS
 * or TDPBF16PS pair's additions), one per block of k (256 deep, or 512
 * for the bf16 kernels) when the block's sum is added to C, and one for
 * beta C. With
 * n = K + K / 256 + 2 such roundings of relative size u = 2^-24,
 * |C - exact| <= gamma_n (sum_k |a_ik b_kj| + |beta c_ij|),
 * gamma_n = n u / (1 - n u) (the classical bound for recursive summation).
 * Inputs are kept away from subnormals, which VDPBF16PS flushes to zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/half.h"
#include "test.h"
#include "train/matmul_amx.h"
#include "train/matmul_bf16.h"
#include "train/mm_auto.h"
#include "train/peak.h"
#include "weft.h"

static int thin(void)
{
    const char *s = getenv("TEST_SCALE");
    return s && atoi(s) >= 10;
}

/* bf16 in [-1, -1/64] U [1/64, 1]: no subnormal, and magnitudes that
 * differ (so cancellation and the bound's sum are exercised) */
static uint16_t brand(weft_rng *r)
{
    float v = 2.0f * weft_rng_uniform(r) - 1.0f;
    if (fabsf(v) < 1.0f / 64)
        v = v < 0 ? -1.0f / 64 : 1.0f / 64;
    return f32_to_bf16(v);
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, off;
    float beta;
    uint16_t *A, *B;   /* off elements past the allocation's start */
    float *C0;
} problem;

static void make(problem *p, weft_rng *r, int ta, int tb, int M, int N, int K, float beta)
{
    /* wider leading dimensions, some odd, and now and then an odd start,
     * so that pairs of bf16 are not 4-byte aligned */
    int pad = (int)weft_rng_below(r, 4);
    *p = (problem){ ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + (pad ^ 1), N + 3,
                    (int)weft_rng_below(r, 2), beta, NULL, NULL, NULL };
    size_t na = (size_t)(ta ? K : M) * p->lda + 1, nb = (size_t)(tb ? N : K) * p->ldb + 1;
    size_t nc = (size_t)M * p->ldc;
    p->A = malloc(na * 2);
    p->B = malloc(nb * 2);
    p->C0 = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        p->A[i] = brand(r);
    for (size_t i = 0; i < nb; i++)
        p->B[i] = brand(r);
    for (size_t i = 0; i < nc; i++)
        p->C0[i] = 2.0f * weft_rng_uniform(r) - 1.0f;
}

static void unmake(problem *p)
{
    free(p->A);
    free(p->B);
    free(p->C0);
}

/* C = the product on c; a fresh copy of C0 each call. */
static float *run(mm_ctx *c, const problem *p)
{
    size_t nc = (size_t)p->M * p->ldc;
    float *C = malloc(nc * 4);
    memcpy(C, p->C0, nc * 4);
    train_mm_gemm_bf16(c, p->ta, p->tb, p->M, p->N, p->K, p->A + p->off, p->lda, p->B + p->off,
                       p->ldb, p->beta, C, p->ldc);
    return C;
}

/* C against the fp64 product of the same bf16 values, within the bound
 * above; the padding past N untouched. */
static int right(const problem *p, const float *C, const char *what)
{
    const uint16_t *A = p->A + p->off, *B = p->B + p->off;
    double n = p->K + p->K / 256 + 2, u = ldexp(1.0, -24), gamma = n * u / (1 - n * u);
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->ldc; j++) {
            size_t at = (size_t)i * p->ldc + j;
            if (j >= p->N) {
                if (C[at] != p->C0[at])
                    return 0;
                continue;
            }
            double s = p->beta * (double)p->C0[at], mag = fabs(s);
            for (int k = 0; k < p->K; k++) {
                double a = bf16_to_f32(p->ta ? A[(size_t)k * p->lda + i] : A[(size_t)i * p->lda + k]);
                double b = bf16_to_f32(p->tb ? B[(size_t)j * p->ldb + k] : B[(size_t)k * p->ldb + j]);
                s += a * b;
                mag += fabs(a * b);
            }
            if (!(fabs(C[at] - s) <= gamma * mag)) {
                fprintf(stderr, "  %s ta=%d tb=%d %dx%dx%d beta=%g at (%d,%d): %.9g vs %.9g "
                        "(bound %.3g)\n", what, p->ta, p->tb, p->M, p->N, p->K, p->beta, i, j,
                        C[at], s, gamma * mag);
                return 0;
            }
        }
    return 1;
}

/* The kernel WEFT_MATMUL_ISA=isa gives, on 1 and 2 threads; 0 (and a
 * line saying so) when the CPU lacks it. */
static int open_pair(const char *isa, mm_ctx *c[2])
{
    setenv("WEFT_MATMUL_ISA", isa, 1);
    setenv("WEFT_DEBUG", "ERROR", 1);
    int rc = train_mm_create(&c[0], 1, MM_PORTABLE);
    char why[256];
    if (rc == WEFT_ECONFIG && !strcmp(isa, "amx")) {
        train_mma_supported(why, sizeof why);
        printf("skipped: no AMX (%s); the tiles' path is not run\n", why);
        unsetenv("WEFT_MATMUL_ISA");
        return 0;
    }
    if (rc == WEFT_ECONFIG && !strcmp(isa, "avx512bf16")) {
        printf("skip: this CPU has no AVX512-BF16; its kernel is not tested\n");
        unsetenv("WEFT_MATMUL_ISA");
        return 0;
    }
    CHECK(rc == 0);
    CHECK(rc || train_mm_create(&c[1], 2, MM_PORTABLE) == 0);
    unsetenv("WEFT_MATMUL_ISA");
    char name[64];
    train_mm_describe(c[0], name, sizeof name);
    /* the name says which kernel bf16 operands get */
    CHECKF(!strcmp(isa, "avx512bf16") == (strstr(name, "bf16 avx512bf16") != NULL), "%s: %s",
           isa, name);
    CHECKF(!strcmp(isa, "amx") == (strstr(name, "bf16 amx") != NULL), "%s: %s", isa, name);
    return rc == 0;
}

/* One problem on both thread counts: right, and the same bits. */
static int both(mm_ctx *c[2], weft_rng *r, int ta, int tb, int M, int N, int K, float beta,
                const char *isa)
{
    problem p;
    make(&p, r, ta, tb, M, N, K, beta);
    float *c1 = run(c[0], &p), *c2 = run(c[1], &p);
    int ok = right(&p, c1, isa);
    if (ok && memcmp(c1, c2, (size_t)M * p.ldc * 4) != 0) {
        fprintf(stderr, "  %s ta=%d tb=%d %dx%dx%d: 1 and 2 threads differ\n", isa, ta, tb, M,
                N, K);
        ok = 0;
    }
    free(c1);
    free(c2);
    unmake(&p);
    return ok;
}

/* Every size 1..67 as M, as N and as K, the other two drawn from 1..67,
 * in every transpose case; beta alternates. */
static void sweep(const char *isa)
{
    mm_ctx *c[2];
    if (!open_pair(isa, c))
        return;
    weft_rng r;
    weft_rng_seed(&r, 5);
    int step = thin() ? 5 : 1, bad = 0, n = 0;
    for (int t = 0; t < 4; t++)
        for (int v = 1; v <= 67; v += step)
            for (int side = 0; side < 3; side++) {
                int d[3];
                for (int i = 0; i < 3; i++)
                    d[i] = i == side ? v : 1 + (int)weft_rng_below(&r, 67);
                bad += !both(c, &r, t & 1, t >> 1, d[0], d[1], d[2], (float)(n++ & 1), isa);
            }
    CHECKF(bad == 0, "%s: %d of %d small products wrong", isa, bad, n);
    train_mm_destroy(c[0]);
    train_mm_destroy(c[1]);
}

/* Past every block: K over several KC, M over MC, N over NC; threads
 * split rows or columns of C. */
static void large(const char *isa)
{
    static const int shapes[][3] = { { 300, 257, 513 }, { 64, 1100, 260 }, { 517, 200, 1030 },
                                     { 129, 96, 2048 } };
    mm_ctx *c[2];
    if (!open_pair(isa, c))
        return;
    weft_rng r;
    weft_rng_seed(&r, 9);
    int ns = thin() ? 1 : 4;
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < 4; t++)
            CHECKF(both(c, &r, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                        (float)((s + t) & 1), isa),
                   "%s %dx%dx%d ta=%d tb=%d", isa, shapes[s][0], shapes[s][1], shapes[s][2],
                   t & 1, t >> 1);
    train_mm_destroy(c[0]);
    train_mm_destroy(c[1]);
}

TEST(sweep_amx) { sweep("amx"); }
TEST(large_amx) { large("amx"); }
TEST(sweep_avx512bf16) { sweep("avx512bf16"); }
TEST(sweep_widening) { sweep("avx512"); }
TEST(large_avx512bf16) { large("avx512bf16"); }
TEST(large_widening) { large("avx512"); }

/* The AMX path's packing and blocking with the tiles' products in plain
 * C: every size 1..67 on each side (past a tile's 16 and a block's 32),
 * and one shape past each of its slices (rows 128, columns 1024, k 512),
 * every transpose case, beta 0 and 1. */
static int emulated(void *abuf, void *bbuf, weft_rng *r, int ta, int tb, int M, int N, int K,
                    float beta)
{
    problem p;
    make(&p, r, ta, tb, M, N, K, beta);
    size_t nc = (size_t)M * p.ldc;
    float *C = malloc(nc * 4);
    memcpy(C, p.C0, nc * 4);
    train_mma_gemm(abuf, bbuf, ta, tb, M, N, K, p.A + p.off, p.lda, p.B + p.off, p.ldb,
                   beta != 0.0f, C, p.ldc, 1);
    int ok = right(&p, C, "amx (emulated)");
    free(C);
    unmake(&p);
    return ok;
}

TEST(amx_layout_emulated)
{
    if (!train_mmb_supported()) {
        printf("skip: no AVX512-BF16 for the AMX path's packing; its layout is not tested\n");
        return;
    }
    void *abuf = aligned_alloc(64, train_mma_abytes()), *bbuf = aligned_alloc(64, train_mma_bbytes());
    CHECK(abuf && bbuf);
    weft_rng r;
    weft_rng_seed(&r, 11);
    int step = thin() ? 5 : 1, bad = 0, n = 0;
    for (int t = 0; abuf && bbuf && t < 4; t++) {
        for (int v = 1; v <= 67; v += step)
            for (int side = 0; side < 3; side++) {
                int d[3];
                for (int i = 0; i < 3; i++)
                    d[i] = i == side ? v : 1 + (int)weft_rng_below(&r, 67);
                bad += !emulated(abuf, bbuf, &r, t & 1, t >> 1, d[0], d[1], d[2],
                                 (float)(n++ & 1));
            }
        if (!thin() || t == 1)
            CHECKF(emulated(abuf, bbuf, &r, t & 1, t >> 1, MMA_MC + 3, MMA_NC + 7, MMA_KC + 3,
                            (float)(t & 1)),
                   "amx (emulated) past the slices, ta=%d tb=%d", t & 1, t >> 1);
    }
    CHECKF(bad == 0, "amx (emulated): %d of %d small products wrong", bad, n);
    free(abuf);
    free(bbuf);
}

/* Where the tiles cannot be used, WEFT_MATMUL_ISA=amx is an error that
 * says why (and nothing ran a tile instruction, or this process would
 * have died of SIGILL); where they can, it is taken and named. */
static void create_amx(void *out)
{
    mm_ctx *c = NULL;
    *(int *)out = train_mm_create(&c, 1, MM_PORTABLE);
    train_mm_destroy(c);
}

TEST(amx_refused)
{
    char why[256], err[1024] = "";
    int ok = train_mma_supported(why, sizeof why), rc = -1;
    setenv("WEFT_MATMUL_ISA", "amx", 1);
    setenv("WEFT_DEBUG", "ERROR", 1);
    char path[] = "/tmp/weft-test-amx-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    create_amx(&rc);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, err, sizeof err - 1, 0);
    err[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    unsetenv("WEFT_MATMUL_ISA");
    if (ok) {
        CHECKF(rc == 0, "AMX present (%s) but WEFT_MATMUL_ISA=amx gave %d: %s", why, rc, err);
        printf("AMX present: %s\n", why);
        return;
    }
    CHECKF(rc == WEFT_ECONFIG, "WEFT_MATMUL_ISA=amx without AMX gave %d", rc);
    CHECKF(strstr(err, "WEFT_MATMUL_ISA=amx") && strstr(err, why), "said: %s (why: %s)", err, why);
    CHECKF(strstr(why, "CPUID") || strstr(why, "errno") || strstr(why, "XCR0") ||
               strstr(why, "AVX") || strstr(why, "build"),
           "%s", why);
    printf("WEFT_MATMUL_ISA=amx refused here: %s", err);
}

/* Losses of a small GPT trained steps steps in bf16 on one kernel. */
static int train_losses(const char *isa, int steps, float *loss)
{
    setenv("WEFT_MATMUL_ISA", isa, 1);
    setenv("WEFT_MATMUL", "portable", 1);
    weft_model_config cfg;
    weft_model *m = NULL;
    weft_optim *o = NULL;
    int rc = weft_model_config_parse("gpt:vocab=64,ctx=32,layers=2,heads=4,dim=64", &cfg);
    if (!rc)
        rc = weft_model_create(&m, &cfg, 3);
    if (!rc)
        rc = weft_model_set_threads(m, 1);
    if (!rc)
        rc = weft_model_set_precision(m, WEFT_PREC_BF16);
    unsetenv("WEFT_MATMUL_ISA");
    unsetenv("WEFT_MATMUL");
    size_t n = 0;
    float *w = m ? weft_model_params(m, &n) : NULL, *g = m ? weft_model_grads(m, NULL) : NULL;
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    if (!rc)
        rc = weft_optim_create(&o, &oc, 0, n);
    enum { B = 4, T = 32 };
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < steps && !rc; s++) {
        /* a learnable rule: the next token follows from the current */
        for (int i = 0; i < B * T; i++) {
            x[i] = (i * 7 + s * 13) % 64;
            y[i] = (x[i] * 5 + 1) % 64;
        }
        if (!(rc = weft_model_zero_grad(m)) && !(rc = weft_model_forward(m, x, y, B, T, &loss[s])) &&
            !(rc = weft_model_backward(m)))
            rc = weft_optim_step(o, w, g, 3e-3f);
    }
    weft_optim_destroy(o);
    weft_model_destroy(m);
    return rc;
}

/* The same model and data on the bf16 kernel and widened: each product
 * differs only in the order of its fp32 sums, but a result that moves by
 * one fp32 ulp can round to a neighbouring bf16 (2^-8 apart) where it is
 * stored as the next layer's operand, so the two runs drift apart a
 * little from step to step. Measured on Zen 5: at most 2.7e-5 apart
 * (relative) over 12 steps, the loss falling from 4.21 to 2.50; allowed:
 * 1e-3, and 1e-4 at the first step (same weights, so only the rounding
 * of activations differs). A kernel that drops one pair of k per block
 * moved the losses 7e-3 apart, and one that drops a packed word 4e-2. */
static void gpt_losses(const char *isa)
{
    enum { STEPS = 12 };
    float a[STEPS], b[STEPS];
    int steps = thin() ? 4 : STEPS;
    setenv("WEFT_DEBUG", "ERROR", 1);
    int rc = train_losses(isa, steps, a);
    if (rc == WEFT_ECONFIG) {
        printf("skip: this CPU has no %s; the GPT is not compared across kernels\n", isa);
        return;
    }
    CHECK(rc == 0);
    CHECK(train_losses("avx512", steps, b) == 0);
    double worst = 0.0;
    for (int s = 0; s < steps; s++) {
        double d = fabs((double)a[s] - b[s]) / fabs((double)b[s]);
        worst = d > worst ? d : worst;
        CHECKF(d <= (s == 0 ? 1e-4 : 1e-3), "step %d: %.6f on %s, %.6f widened", s, a[s], isa,
               b[s]);
    }
    CHECKF(a[steps - 1] < a[0], "loss %.4f -> %.4f", a[0], a[steps - 1]);
    printf("GPT losses, %s vs widened: at most %.2g apart (relative) over %d steps, "
           "%.4f -> %.4f\n", isa, worst, steps, a[0], a[steps - 1]);
}

TEST(gpt_losses) { gpt_losses("avx512bf16"); }
TEST(gpt_losses_amx) { gpt_losses("amx"); }

/* The peak cache: a line from before bf16 had a rate of its own keeps
 * its fp32 figures and gets the bf16 one measured and added; the next
 * look takes it from the file. */
TEST(peak_cache_bf16)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/weft-test-peak16-%ld", (long)getpid());
    setenv("WEFT_PEAK_FILE", path, 1);
    unsetenv("WEFT_PEAK_GFLOPS");
    unsetenv("WEFT_MATMUL_ISA");
    mm_ctx *c;
    CHECK(train_mm_create(&c, 1, MM_PORTABLE) == 0);
    char pn[64], bn[64];
    train_mm_describe(c, pn, sizeof pn);
    pn[strcspn(pn, ",")] = 0;
    const char *native = train_mmp_isa_bf16(train_mm_portable(c));
    train_mm_destroy(c);
    const char *core = train_mm_blas_core();
    snprintf(bn, sizeof bn, "%s%s", core ? "openblas_" : "-", core ? core : "");
    for (char *s = pn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "v2 port=50 blas=%d port_mix=40 blas_mix=%d port_kernel=%s blas_kernel=%s\n",
            core ? 30 : 0, core ? 20 : 0, pn, bn);
    fclose(f);
    train_peak a, b;
    CHECK(train_peak_get(&a) == 0);
    CHECKF(a.port_gflops == 50 && a.port_mix == 40 && a.bf16_gflops > 0, "%g %g %g",
           a.port_gflops, a.port_mix, a.bf16_gflops);
    CHECKF(strstr(a.bf16_name, native ? native : "widened") != NULL, "%s", a.bf16_name);
    CHECKF(strstr(a.source, "bf16 now") != NULL, "%s", a.source);
    CHECK(train_peak_get(&b) == 0);
    CHECKF(b.port_gflops == 50 && fabs(b.bf16_gflops - a.bf16_gflops) < 0.01 &&
               !strcmp(b.bf16_name, a.bf16_name) && !strstr(b.source, "now"),
           "%g %s", b.bf16_gflops, b.source);
    const char *k;
    CHECK(train_peak_for(&b, 1, &k) == b.bf16_gflops && k == b.bf16_name);
    CHECK(train_peak_for(&b, 0, &k) == b.gflops && strstr(k, "bf16") == NULL);
    /* the public form gives the same */
    double g;
    char name[64];
    CHECK(weft_matmul_peak_bf16(0, &g, name, sizeof name) == 0);
    CHECK(fabs(g - a.bf16_gflops) < 0.01 && !strcmp(name, a.bf16_name));
    unlink(path);
    unsetenv("WEFT_PEAK_FILE");
}
