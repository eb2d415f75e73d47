/* Each matmul kernel (the portable one at every ISA this CPU has, and
 * OpenBLAS) against a double-precision loop on odd shapes (every M, N, K
 * drawn from 1, 7, 33 and 1023, at most one of them 1023), all transposes,
 * beta 0 and 1, one and two threads; the blockwise attention against a
 * naive one that materialises the T x T matrix; the fused bias + GELU
 * against the two passes it replaces; the FLOP count against the model's
 * own parameter count; the peak's override and per-host cache; auto's
 * choice on a model's own products (fake timers) and its cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "train/flops.h"
#include "train/layers.h"
#include "train/mm_auto.h"
#include "train/mm_choose.h"
#include "train/model.h"
#include "train/peak.h"
#include "weft.h"

static float frand(weft_rng *r)
{
    return 2.0f * weft_rng_uniform(r) - 1.0f;
}

static int gemm_ok(mm_ctx *c, weft_rng *r, int ta, int tb, int M, int N, int K, float beta)
{
    int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C0 = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = frand(r);
    for (size_t i = 0; i < nb; i++) B[i] = frand(r);
    for (size_t i = 0; i < nc; i++) C0[i] = C[i] = frand(r);
    train_mm_gemm(c, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    int ok = 1;
    for (int i = 0; i < M && ok; i++)
        for (int j = 0; j < N && ok; j++) {
            double s = beta * (double)C0[(size_t)i * ldc + j], mag = fabs(s);
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double got = C[(size_t)i * ldc + j];
            ok = fabs(got - s) <= 1e-6 * (K + 1) * (mag + 1e-3);
            if (!ok)
                fprintf(stderr, "  ta=%d tb=%d %dx%dx%d beta=%g at (%d,%d): %g vs %g\n", ta, tb,
                        M, N, K, beta, i, j, got, s);
        }
    free(A); free(B); free(C); free(C0);
    return ok;
}

static void odd_shapes(int backend, const char *isa)
{
    static const int dims[] = { 1, 7, 33, 1023 };
    if (isa)
        setenv("WEFT_MATMUL_ISA", isa, 1);
    for (int th = 1; th <= 2; th++) {
        mm_ctx *c;
        int rc = train_mm_create(&c, th, backend);
        if (rc == WEFT_ENOTSUP)
            break;
        CHECK(rc == 0);
        if (rc)
            break;
        char name[64];
        train_mm_describe(c, name, sizeof name);
        /* a capped ISA the CPU lacks falls back: that kernel is tested by its own case */
        if (isa && !strstr(name, isa)) {
            train_mm_destroy(c);
            break;
        }
        weft_rng r;
        weft_rng_seed(&r, 11);
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (int k = 0; k < 4; k++) {
                    if ((a == 3) + (b == 3) + (k == 3) > 1)
                        continue;
                    for (int t = 0; t < 4; t++)
                        for (int beta = 0; beta < 2; beta++)
                            CHECKF(gemm_ok(c, &r, t & 1, t >> 1, dims[a], dims[b], dims[k],
                                           (float)beta),
                                   "%s, %d threads", name, th);
                }
        train_mm_destroy(c);
    }
    unsetenv("WEFT_MATMUL_ISA");
}

TEST(odd_avx512) { odd_shapes(MM_PORTABLE, "avx512"); }
TEST(odd_avx2) { odd_shapes(MM_PORTABLE, "avx2"); }
TEST(odd_c) { odd_shapes(MM_PORTABLE, "c"); }
TEST(odd_openblas) { odd_shapes(MM_OPENBLAS, NULL); }

/* Naive causal attention in double, with the T x T probabilities kept:
 * out, and dqkv for the incoming gradient dout. */
static void naive_attention(double *out, double *dqkv, const float *qkv, const float *dout,
                            int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    double *p = malloc(sizeof(double) * T * T), *dp = malloc(sizeof(double) * T * T);
    memset(dqkv, 0, sizeof(double) * B * T * C3);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *x = qkv + (size_t)b * T * C3;
            double *dx = dqkv + (size_t)b * T * C3;
#define Q(t, i) x[(size_t)(t) * C3 + h * hs + (i)]
#define K(t, i) x[(size_t)(t) * C3 + C + h * hs + (i)]
#define V(t, i) x[(size_t)(t) * C3 + 2 * C + h * hs + (i)]
            for (int t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++)
                        s += (double)Q(t, i) * K(u, i);
                    p[t * T + u] = s / sqrt((double)hs);
                    mx = p[t * T + u] > mx ? p[t * T + u] : mx;
                }
                for (int u = 0; u <= t; u++)
                    sum += (p[t * T + u] = exp(p[t * T + u] - mx));
                for (int u = 0; u <= t; u++)
                    p[t * T + u] /= sum;
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++)
                        o += p[t * T + u] * V(u, i);
                    out[((size_t)b * T + t) * C + h * hs + i] = o;
                }
            }
            for (int t = 0; t < T; t++) {
                const float *g = dout + ((size_t)b * T + t) * C + h * hs;
                double dot = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++) {
                        s += (double)g[i] * V(u, i);
                        dx[(size_t)u * C3 + 2 * C + h * hs + i] += p[t * T + u] * g[i];
                    }
                    dp[t * T + u] = s;
                    dot += s * p[t * T + u];
                }
                for (int u = 0; u <= t; u++) {
                    double ds = p[t * T + u] * (dp[t * T + u] - dot) / sqrt((double)hs);
                    for (int i = 0; i < hs; i++) {
                        dx[(size_t)t * C3 + h * hs + i] += ds * K(u, i);
                        dx[(size_t)u * C3 + C + h * hs + i] += ds * Q(t, i);
                    }
                }
            }
#undef Q
#undef K
#undef V
        }
    free(p);
    free(dp);
}

static int close_to(const float *got, const double *want, size_t n, double tol)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(want[i]) > mx ? fabs(want[i]) : mx;
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > tol * (mx + 1e-30) + tol * fabs(want[i])) {
            fprintf(stderr, "  element %zu: %g vs %g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

TEST(attention_vs_naive)
{
    static const int cases[][4] = { { 2, 1, 12, 3 }, { 2, 7, 12, 3 }, { 1, 33, 66, 2 },
                                    { 3, 33, 8, 1 }, { 1, 130, 64, 4 },
                                    { 1, 300, 32, 2 } };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int B = cases[ci][0], T = cases[ci][1], C = cases[ci][2], NH = cases[ci][3];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
        /* the scratch the header promises is enough: 2*B*NH*T, or B*NH*T at T = 1 */
        size_t natt = (size_t)B * NH * T * (T >= 2 ? 2 : 1);
        float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4);
        float *att = malloc(natt * 4), *datt = malloc(natt * 2 * 4), *dqkv = malloc(nq * 4);
        double *rout = malloc(no * 8), *rdqkv = malloc(nq * 8);
        weft_rng r;
        weft_rng_seed(&r, 5 + ci);
        for (size_t i = 0; i < nq; i++) qkv[i] = 2.0f * frand(&r);
        for (size_t i = 0; i < no; i++) dout[i] = frand(&r);
        mm_ctx *mm;
        CHECK(train_mm_create(&mm, 2, MM_PORTABLE) == 0);
        train_attention_forward(mm, out, att, qkv, B, T, C, NH);
        train_attention_backward(mm, dqkv, datt, dout, qkv, att, B, T, C, NH);
        naive_attention(rout, rdqkv, qkv, dout, B, T, C, NH);
        CHECKF(close_to(out, rout, no, 1e-5), "attention out B=%d T=%d C=%d NH=%d", B, T, C, NH);
        CHECKF(close_to(dqkv, rdqkv, nq, 1e-4), "attention dqkv B=%d T=%d C=%d NH=%d", B, T, C,
               NH);
        train_mm_destroy(mm);
        free(qkv); free(out); free(dout); free(att); free(datt); free(dqkv);
        free(rout); free(rdqkv);
    }
}

TEST(bias_gelu_fused)
{
    int rows = 37, n = 1030;
    size_t len = (size_t)rows * n;
    float *x = malloc(len * 4), *y = malloc(len * 4), *a = malloc(len * 4), *b = malloc(len * 4);
    float *bias = malloc(n * 4);
    weft_rng r;
    weft_rng_seed(&r, 3);
    for (size_t i = 0; i < len; i++) x[i] = y[i] = 3.0f * frand(&r);
    for (int i = 0; i < n; i++) bias[i] = frand(&r);
    for (int t = 0; t < rows; t++)
        for (int i = 0; i < n; i++)
            x[(size_t)t * n + i] += bias[i];
    train_gelu_forward(NULL, a, x, len);
    pool *pl;
    CHECK(train_pool_create(&pl, 2) == 0);
    train_bias_gelu_forward(pl, b, y, bias, rows, n);
    CHECK(memcmp(a, b, len * 4) == 0);
    CHECK(memcmp(x, y, len * 4) == 0);
    train_pool_destroy(pl);
    free(x); free(y); free(a); free(b); free(bias);
}

TEST(flops_count)
{
    static const char *const specs[] = { "mlp:784-512-512-10", "mlp:12-16-10-5:gelu",
                                         "gpt:vocab=23,ctx=8,layers=2,heads=2,dim=16",
                                         "gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512" };
    for (int i = 0; i < 4; i++) {
        weft_model_config cfg;
        weft_model *m;
        CHECK(weft_model_config_parse(specs[i], &cfg) == 0);
        CHECK(weft_model_create(&m, &cfg, 1) == 0);
        size_t n;
        weft_model_params(m, &n);
        CHECKF(train_model_param_count(&cfg) == (double)n, "%s: %.0f vs %zu", specs[i],
               train_model_param_count(&cfg), n);
        weft_model_destroy(m);
    }
    weft_model_config g;
    CHECK(weft_model_config_parse("gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512", &g) == 0);
    double N = train_model_param_count(&g), tokens = 4.0 * 128;
    CHECK(train_model_flops(&g, 4, 128) == tokens * (6 * N + 12.0 * 4 * 128 * 512));
    /* a shorter sequence counts its own length */
    CHECK(train_model_flops(&g, 4, 64) == 4.0 * 64 * (6 * N + 12.0 * 4 * 64 * 512));
}

TEST(peak_cache)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/weft-test-peak-%ld", (long)getpid());
    unlink(path);
    setenv("WEFT_PEAK_FILE", path, 1);
    unsetenv("WEFT_PEAK_GFLOPS");
    train_peak a, b;
    CHECK(train_peak_get(&a) == 0);
    CHECK(a.gflops > 0 && a.port_gflops > 0);
    /* the peak is the faster kernel's; the kernel is the faster mix's */
    CHECK(a.gflops == (a.blas_gflops > a.port_gflops ? a.blas_gflops : a.port_gflops));
    CHECK(a.best == (a.blas_mix > a.port_mix ? MM_OPENBLAS : MM_PORTABLE));
    CHECK(a.port_mix > 0 && a.port_mix <= a.port_gflops && a.blas_mix <= a.blas_gflops);
    CHECK(a.blas_gflops > 0 || a.best == MM_PORTABLE);
    CHECKF(strstr(a.source, "measured now") != NULL, "%s", a.source);
    CHECK(access(path, R_OK) == 0);
    /* a second look takes the file, so every model of the host agrees */
    CHECK(train_peak_get(&b) == 0);
    CHECKF(strstr(b.source, "kept in") && !strstr(b.source, "now"), "%s", b.source);
    CHECK(b.best == a.best && fabs(b.gflops - a.gflops) < 0.01);
    CHECK(strcmp(b.port_name, a.port_name) == 0 && strcmp(b.blas_name, a.blas_name) == 0);
    /* a line of the first probe's (no version, too short a measurement)
     * is measured again, not believed */
    char pn[32], bn[48];
    snprintf(pn, sizeof pn, "%s", a.port_name);
    snprintf(bn, sizeof bn, "%s", a.blas_name[0] ? a.blas_name : "-");
    for (char *s = pn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    for (char *s = bn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "port=1.00 blas=2.00 port_kernel=%s blas_kernel=%s\n", pn, bn);
    fclose(f);
    CHECK(train_peak_get(&b) == 0);
    CHECKF(strstr(b.source, "measured now") != NULL, "%s", b.source);
    /* a new measurement may choose the other kernel when the two are close */
    a = b;
    setenv("WEFT_PEAK_GFLOPS", "123.5", 1);
    CHECK(train_peak_get(&b) == 0);
    CHECK(b.gflops == 123.5 && b.best == a.best);
    setenv("WEFT_PEAK_GFLOPS", "fast", 1);
    CHECK(train_peak_get(&b) == WEFT_ECONFIG);
    unsetenv("WEFT_PEAK_GFLOPS");
    /* WEFT_MATMUL=auto follows the measured choice */
    mm_ctx *c;
    CHECK(train_mm_create(&c, 1, MM_AUTO) == 0);
    CHECK(strcmp(train_mm_name(c), a.best == MM_OPENBLAS ? "openblas" : "portable") == 0);
    train_mm_destroy(c);
    unlink(path);
    unsetenv("WEFT_PEAK_FILE");
}

/* Seconds per run from a table (shape index x kernel), counting calls. */
typedef struct {
    double t[4][2];
    const mm_shapes *sh;
    int calls, seen[4][2];
} fake_timer;

static double fake_time(void *arg, int backend, const mm_shape *s)
{
    fake_timer *f = arg;
    f->calls++;
    int i = (int)(s - f->sh->s), o = backend == MM_OPENBLAS;
    /* a slow first run of each, as a cold cache gives: best-of drops it */
    double slow = f->seen[i][o]++ ? 1.0 : 10.0;
    return slow * f->t[i][o];
}

TEST(mm_choose_fake)
{
    mm_shapes sh = { 0 };
    train_mm_shapes_add(&sh, 0, 1, 64, 96, 32, 0);
    train_mm_shapes_add(&sh, 1, 0, 96, 32, 64, 1);
    for (int i = 0; i < 3; i++)
        train_mm_shapes_add(&sh, 1, 0, 96, 32, 64, 1);
    train_mm_shapes_add(&sh, 0, 1, 64, 96, 32, 1);   /* beta differs: another shape */
    CHECK(sh.n == 3 && sh.s[0].count == 1 && sh.s[1].count == 4 && sh.s[2].count == 1);
    CHECK(train_mm_shapes_flops(&sh) == 6 * 2.0 * 64 * 96 * 32);
    /* per run the portable kernel wins two shapes of three, but OpenBLAS
     * wins the one a step runs four times: the step total decides */
    fake_timer f = { { { 1.0, 2.0 }, { 2.0, 1.0 }, { 1.0, 1.5 } }, &sh, 0, { { 0 } } };
    mm_choice c;
    train_mm_choose(&sh, MM_AUTO, 1, 3, fake_time, &f, &c);
    CHECK(f.calls == 3 * 2 * 3);
    CHECKF(c.backend == MM_OPENBLAS && c.port_s == 1 + 8 + 1 && c.blas_s == 2 + 4 + 1.5,
           "%d %g %g", c.backend, c.port_s, c.blas_s);
    CHECK(c.split_s == 1 + 4 + 1 && c.shapes == 3);
    /* each product on its faster kernel saves 20% here: a mixed choice */
    CHECK(c.mixed && c.route.n == 3);
    CHECK(train_mm_choice_route(&c, 0, 1, 64, 96, 32, 0) == MM_PORTABLE);
    CHECK(train_mm_choice_route(&c, 1, 0, 96, 32, 64, 1) == MM_OPENBLAS);
    CHECK(train_mm_choice_route(&c, 0, 1, 64, 96, 32, 1) == MM_PORTABLE);
    CHECK(train_mm_choice_route(&c, 0, 0, 64, 96, 32, 1) == MM_OPENBLAS);   /* unseen */
    f.t[1][1] = 2.5;   /* now portable: 10 against 13.5 */
    f.calls = 0;
    train_mm_choose(&sh, MM_AUTO, 1, 2, fake_time, &f, &c);
    CHECK(c.backend == MM_PORTABLE && f.calls == 2 * 2 * 3 && !c.mixed);
    /* a split that saves under MM_MIXED_GAIN is not taken */
    f.t[1][1] = 1.99;
    train_mm_choose(&sh, MM_AUTO, 1, 2, fake_time, &f, &c);
    CHECKF(c.backend == MM_PORTABLE && !c.mixed && c.split_s < c.port_s, "%g %g", c.split_s,
           c.port_s);
    f.t[1][1] = 2.0;   /* a tie goes to the portable kernel */
    f.t[0][1] = f.t[2][1] = 1.0;
    f.calls = 0;
    train_mm_choose(&sh, MM_AUTO, 1, 2, fake_time, &f, &c);
    CHECKF(c.backend == MM_PORTABLE && c.port_s == c.blas_s, "%g %g", c.port_s, c.blas_s);
    /* told (WEFT_MATMUL, weft_model_set_matmul), or only one kernel: untimed */
    f.calls = 0;
    train_mm_choose(&sh, MM_OPENBLAS, 1, 3, fake_time, &f, &c);
    CHECK(c.backend == MM_OPENBLAS && f.calls == 0);
    train_mm_choose(&sh, MM_PORTABLE, 1, 3, fake_time, &f, &c);
    CHECK(c.backend == MM_PORTABLE && f.calls == 0);
    train_mm_choose(&sh, MM_AUTO, 0, 3, fake_time, &f, &c);
    CHECK(c.backend == MM_PORTABLE && f.calls == 0);
}

/* A peak cache line naming this process's kernels, so an auto model
 * does not run the peak probe. */
static void fake_peak(const char *path)
{
    mm_ctx *c;
    char pn[32], bn[48];
    CHECK(train_mm_create(&c, 1, MM_PORTABLE) == 0);
    train_mm_describe(c, pn, sizeof pn);
    train_mm_destroy(c);
    const char *core = train_mm_blas_core();
    snprintf(bn, sizeof bn, "%s%s", core ? "openblas_" : "-", core ? core : "");
    for (char *s = pn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "v2 port=50 blas=%d port_mix=50 blas_mix=%d port_kernel=%s blas_kernel=%s\n",
            core ? 60 : 0, core ? 60 : 0, pn, bn);
    fclose(f);
}

static const mm_choice *one_step(weft_model *m, int B, int T)
{
    int32_t tok[4 * 64], nxt[4 * 64];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7) % 30;
        nxt[i] = (i * 11 + 3) % 30;
    }
    CHECK(weft_model_forward(m, tok, nxt, B, T, NULL) == 0);
    CHECK(weft_model_backward(m) == 0);
    return train_mm_choice(m->mm);
}

TEST(mm_choice_cache)
{
    char path[64], mpath[80];
    snprintf(path, sizeof path, "/tmp/weft-test-mmc-%ld", (long)getpid());
    snprintf(mpath, sizeof mpath, "%s.matmul", path);
    unlink(mpath);
    setenv("WEFT_PEAK_FILE", path, 1);
    unsetenv("WEFT_MATMUL");
    fake_peak(path);
    /* the store and load round trip, by key and kernels */
    mm_choice a = { .backend = MM_OPENBLAS, .port_s = 2e-3, .blas_s = 1.5e-3, .split_s = 1.4e-3,
                    .flops = 3.25e7, .shapes = 7 }, b;
    CHECK(train_mm_choice_load(42, "k one", &b) == -1);
    CHECK(train_mm_choice_store(42, "k one", &a) == 0 && strstr(a.source, mpath));
    a.backend = MM_PORTABLE;
    CHECK(train_mm_choice_store(43, "k one", &a) == 0);
    CHECK(train_mm_choice_load(42, "k one", &b) == 0);
    CHECKF(b.backend == MM_OPENBLAS && fabs(b.port_s - 2e-3) < 1e-9 && b.shapes == 7 &&
               fabs(b.flops - 3.25e7) < 1.0 && strstr(b.source, "kept in"), "%s", b.source);
    CHECK(train_mm_choice_load(43, "k one", &b) == 0 && b.backend == MM_PORTABLE);
    CHECK(train_mm_choice_load(42, "k two", &b) == -1);
    /* a store replaces its key's line */
    a.backend = MM_PORTABLE;
    CHECK(train_mm_choice_store(42, "k one", &a) == 0);
    CHECK(train_mm_choice_load(42, "k one", &b) == 0 && b.backend == MM_PORTABLE && !b.mixed);
    /* a mixed choice keeps each product's kernel */
    a.mixed = 1;
    a.route.n = 0;
    train_mm_shapes_add(&a.route, 0, 1, 512, 2048, 512, 0);
    train_mm_shapes_add(&a.route, 1, 0, 2048, 512, 512, 1);
    a.route.s[1].pick = MM_OPENBLAS;
    CHECK(train_mm_choice_store(44, "k one", &a) == 0);
    CHECK(train_mm_choice_load(44, "k one", &b) == 0 && b.mixed && b.route.n == 2);
    CHECK(train_mm_choice_route(&b, 0, 1, 512, 2048, 512, 0) == MM_PORTABLE);
    CHECK(train_mm_choice_route(&b, 1, 0, 2048, 512, 512, 1) == MM_OPENBLAS);
    CHECK(train_mm_choice_load(42, "k one", &b) == 0 && !b.mixed);
    unlink(mpath);

    /* a step of about 0.16 GFLOP of products: timed */
    weft_model_config cfg, tiny;
    CHECK(weft_model_config_parse("gpt:vocab=64,ctx=64,layers=1,heads=2,dim=128", &cfg) == 0);
    CHECK(weft_model_config_parse("gpt:vocab=30,ctx=16,layers=1,heads=2,dim=32", &tiny) == 0);
    weft_model *m, *m2, *m3;
    CHECK(weft_model_create(&m, &cfg, 1) == 0 && weft_model_set_threads(m, 1) == 0);
    const mm_choice *c = one_step(m, 2, 64);
    if (train_mm_blas_core()) {
        /* every linear layer's three products, the logits' too */
        CHECKF(c && strstr(c->source, "measured now") && c->shapes >= 8, "%s",
               c ? c->source : "none");
        CHECK(strcmp(weft_model_matmul_name(m), c->backend == MM_OPENBLAS ? "openblas"
                                                                          : "portable") == 0);
        /* the same model and batch takes the file's choice at its first forward */
        CHECK(weft_model_create(&m2, &cfg, 1) == 0 && weft_model_set_threads(m2, 1) == 0);
        const mm_choice *c2 = one_step(m2, 2, 64);
        CHECKF(c2 && strstr(c2->source, "kept in") && c2->backend == c->backend, "%s",
               c2 ? c2->source : "none");
        weft_model_destroy(m2);
        /* another batch is another signature */
        CHECK(weft_model_create(&m2, &cfg, 1) == 0 && weft_model_set_threads(m2, 1) == 0);
        c2 = one_step(m2, 4, 64);
        CHECKF(c2 && strstr(c2->source, "measured now"), "%s", c2 ? c2->source : "none");
        weft_model_destroy(m2);
        /* a tiny model keeps the probe's kernel untimed, so that models of
         * one family (a pipeline stage, the whole) run the same one */
        CHECK(weft_model_create(&m2, &tiny, 1) == 0);
        c2 = one_step(m2, 2, 16);
        CHECKF(c2 && strstr(c2->source, "untimed") && c2->port_s == 0 &&
                   strcmp(weft_model_matmul_name(m2), "openblas") == 0,
               "%s", c2 ? c2->source : "none");
        weft_model_destroy(m2);
    } else {
        CHECK(c == NULL && strcmp(weft_model_matmul_name(m), "portable") == 0);
    }
    /* WEFT_MATMUL is taken as told, untimed */
    setenv("WEFT_MATMUL", "portable", 1);
    CHECK(weft_model_create(&m3, &cfg, 1) == 0);
    CHECK(one_step(m3, 2, 64) == NULL && strcmp(weft_model_matmul_name(m3), "portable") == 0);
    weft_model_destroy(m3);
    unsetenv("WEFT_MATMUL");
    weft_model_destroy(m);
    unlink(mpath);
    unlink(path);
    unsetenv("WEFT_PEAK_FILE");
}

/* The optimiser's update split over threads, and in pieces at odd
 * offsets, gives the bits of one pass, for both rules and a length that
 * is no multiple of anything. */
TEST(optim_threads_bits)
{
    enum { N = 200003 };
    float *p[2], *g = malloc(N * sizeof(float));
    weft_rng r;
    weft_rng_seed(&r, 5);
    for (int i = 0; i < N; i++)
        g[i] = frand(&r);
    for (int kind = 0; kind < 2; kind++) {
        weft_optim_config oc;
        weft_optim_config_default(&oc, kind ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
        oc.weight_decay = 0.1f;
        for (int t = 0; t < 2; t++) {
            setenv("WEFT_THREADS", t ? "3" : "1", 1);
            p[t] = malloc(N * sizeof(float));
            for (int i = 0; i < N; i++)
                p[t][i] = 0.5f - (float)(i % 101) * 0.01f;
            weft_optim *o;
            CHECK(weft_optim_create(&o, &oc, 0, N) == 0);
            /* the second run in pieces at odd offsets, so elements fall
             * to the plain tail loop that the first ran eight-wide */
            for (int s = 0; s < 3; s++)
                CHECK(t ? weft_optim_update(o, p[t], g, 0, 3, 1e-2f) == 0 &&
                              weft_optim_update(o, p[t] + 3, g + 3, 3, N - 3, 1e-2f) == 0 &&
                              weft_optim_advance(o) == 0
                        : weft_optim_step(o, p[t], g, 1e-2f) == 0);
            /* a shard's update in pieces too */
            CHECK(weft_optim_update(o, p[t] + 1000, g + 1000, 1000, N - 2000, 1e-2f) == 0);
            weft_optim_destroy(o);
        }
        CHECKF(memcmp(p[0], p[1], N * sizeof(float)) == 0, "kind %d: threads changed bits", kind);
        free(p[0]);
        free(p[1]);
    }
    unsetenv("WEFT_THREADS");
    free(g);
}

/* weft_optim_set_threads overrides WEFT_THREADS (as weft_model_set_threads
 * does for the matmuls), and the split it asks for gives the same bits. */
TEST(optim_set_threads)
{
    enum { N = 150001 };
    float *p[2], *g = malloc(N * sizeof(float));
    weft_rng r;
    weft_rng_seed(&r, 9);
    for (int i = 0; i < N; i++)
        g[i] = frand(&r);
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    setenv("WEFT_THREADS", "1", 1);
    for (int t = 0; t < 2; t++) {
        p[t] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            p[t][i] = 0.25f - (float)(i % 37) * 0.01f;
        weft_optim *o;
        CHECK(weft_optim_create(&o, &oc, 0, N) == 0);
        CHECK(weft_optim_threads(o) == 1);
        CHECK(weft_optim_set_threads(o, -1) == WEFT_EINVAL && weft_optim_threads(o) == 1);
        CHECK(weft_optim_set_threads(o, t ? 2 : 1) == 0);
        for (int s = 0; s < 3; s++)
            CHECK(weft_optim_step(o, p[t], g, 1e-2f) == 0);
        CHECKF(weft_optim_threads(o) == (t ? 2 : 1), "asked %d, got %d", t ? 2 : 1,
               weft_optim_threads(o));
        /* 0 goes back to the environment's count */
        CHECK(weft_optim_set_threads(o, 0) == 0 && weft_optim_threads(o) == 1);
        weft_optim_destroy(o);
    }
    CHECKF(memcmp(p[0], p[1], N * sizeof(float)) == 0, "two threads changed bits");
    CHECK(weft_optim_set_threads(NULL, 1) == WEFT_EINVAL && weft_optim_threads(NULL) == 0);
    unsetenv("WEFT_THREADS");
    free(p[0]);
    free(p[1]);
    free(g);
}
