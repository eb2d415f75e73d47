/* Attention's bf16 products (attention_prec.h) against a double-precision
 * loop on the unrounded inputs: close (within bf16's rounding), and not
 * the fp32 path's bits, so the bf16 products did run. On the CPU's bf16
 * kernel where it has one, always on the widening path (WEFT_MATMUL_ISA
 * below avx512bf16) and on the plain loop (no matmul context); the kernel
 * and the widening agree closely with each other. Grouped-query heads in
 * bf16 near their fp32 result. Shapes cross the query block (64 rows) and
 * the head sizes are ragged. The keys' gradient sums to zero over the
 * positions (to fp32 rounding), as the exact one does. The rounding the products' operands go
 * through (train_mmb_rounder) gives half_f32_to_bf16's bits for every
 * normal, zero, infinite and NaN input at every length 0-70. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "core/half.h"
#include "train/attention_prec.h"
#include "train/matmul_bf16.h"
#include "train/mm_auto.h"
#include "weft.h"

static int test_scale(void)
{
    const char *s = getenv("TEST_SCALE");
    return s ? atoi(s) : 1;
}

static float frand(weft_rng *r)
{
    return 2.0f * weft_rng_uniform(r) - 1.0f;
}

/* The double-precision reference's one (batch, head): out and its
 * gradients, the T x T probabilities kept in p and dp. */
typedef struct {
    const float *x, *dout;
    double *out, *dx, *p, *dp;
    int T, C, hs;
} ref_head;

static void ref_fwd(const ref_head *r, int h)
{
    int T = r->T, C = r->C, hs = r->hs, C3 = 3 * C;
    for (int t = 0; t < T; t++) {
        double mx = -1e300, sum = 0;
        double *p = r->p + (size_t)t * T;
        for (int u = 0; u <= t; u++) {
            double s = 0;
            for (int i = 0; i < hs; i++)
                s += (double)r->x[(size_t)t * C3 + h * hs + i] *
                     r->x[(size_t)u * C3 + C + h * hs + i];
            p[u] = s / sqrt((double)hs);
            mx = p[u] > mx ? p[u] : mx;
        }
        for (int u = 0; u <= t; u++)
            sum += (p[u] = exp(p[u] - mx));
        for (int i = 0; i < hs; i++) {
            double o = 0;
            for (int u = 0; u <= t; u++)
                o += p[u] / sum * r->x[(size_t)u * C3 + 2 * C + h * hs + i];
            r->out[(size_t)t * C + h * hs + i] = o;
        }
        for (int u = 0; u <= t; u++)
            p[u] /= sum;
    }
}

static void ref_bwd(const ref_head *r, int h)
{
    int T = r->T, C = r->C, hs = r->hs, C3 = 3 * C;
    for (int t = 0; t < T; t++) {
        const float *g = r->dout + (size_t)t * C + h * hs;
        double dot = 0, *p = r->p + (size_t)t * T, *dp = r->dp + (size_t)t * T;
        for (int u = 0; u <= t; u++) {
            double s = 0;
            for (int i = 0; i < hs; i++) {
                s += (double)g[i] * r->x[(size_t)u * C3 + 2 * C + h * hs + i];
                r->dx[(size_t)u * C3 + 2 * C + h * hs + i] += p[u] * g[i];
            }
            dp[u] = s;
            dot += s * p[u];
        }
        for (int u = 0; u <= t; u++) {
            double ds = p[u] * (dp[u] - dot) / sqrt((double)hs);
            for (int i = 0; i < hs; i++) {
                r->dx[(size_t)t * C3 + h * hs + i] += ds * r->x[(size_t)u * C3 + C + h * hs + i];
                r->dx[(size_t)u * C3 + C + h * hs + i] += ds * r->x[(size_t)t * C3 + h * hs + i];
            }
        }
    }
}

static void reference(double *out, double *dqkv, const float *qkv, const float *dout, int B,
                      int T, int C, int NH)
{
    double *p = malloc(sizeof(double) * T * T), *dp = malloc(sizeof(double) * T * T);
    memset(dqkv, 0, sizeof(double) * B * T * 3 * C);
    for (int b = 0; b < B; b++) {
        ref_head r = { qkv + (size_t)b * T * 3 * C, dout + (size_t)b * T * C,
                       out + (size_t)b * T * C, dqkv + (size_t)b * T * 3 * C, p, dp, T, C,
                       C / NH };
        for (int h = 0; h < NH; h++) {
            ref_fwd(&r, h);
            ref_bwd(&r, h);
        }
    }
    free(p);
    free(dp);
}

/* Largest |got - want| over the largest |want|. */
static double rel_err(const float *got, const double *want, size_t n)
{
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fabs(want[i]) > mx ? fabs(want[i]) : mx;
        err = fabs(got[i] - want[i]) > err ? fabs(got[i] - want[i]) : err;
    }
    return err / (mx + 1e-30);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
        err = fabs(a[i] - b[i]) > err ? fabs(a[i] - b[i]) : err;
    }
    return err / (mx + 1e-30);
}

typedef struct {
    int B, T, C, NH;
    size_t nq, no, natt;
    float *qkv, *dout;
} att_case;

/* One forward and backward at the given precision; mm NULL: plain loops. */
static void run_att(const att_case *c, mm_ctx *mm, int bf16, float *out, float *dqkv)
{
    float *att = malloc(c->natt * 4), *datt = malloc(c->natt * 4);
    train_attention_forward_prec(mm, bf16, out, att, c->qkv, c->B, c->T, c->C, c->NH);
    train_attention_backward_prec(mm, bf16, dqkv, datt, c->dout, c->qkv, att, c->B, c->T, c->C,
                                  c->NH);
    free(att);
    free(datt);
}

/* The keys' gradient summed over positions, per batch row and channel,
 * over the largest |element|: zero in exact arithmetic (each row of dS
 * sums to zero), and so it must stay near fp32 rounding in bf16 too (a
 * key bias's gradient). */
static double key_sum(const float *dqkv, int B, int T, int C)
{
    double worst = 0, mx = 0;
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++)
        mx = fabs(dqkv[i]) > mx ? fabs(dqkv[i]) : mx;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double sum = 0;
            for (int t = 0; t < T; t++)
                sum += dqkv[((size_t)b * T + t) * 3 * C + C + c];
            worst = fabs(sum) > worst ? fabs(sum) : worst;
        }
    return worst / (mx + 1e-30);
}

/* The bf16 result on the kernel WEFT_MATMUL_ISA allows (isa NULL: the
 * best); its kernel's name in kern. */
static int run_isa(const att_case *c, const char *isa, float *out, float *dqkv, char *kern,
                   size_t cap)
{
    if (isa)
        setenv("WEFT_MATMUL_ISA", isa, 1);
    mm_ctx *mm;
    int rc = train_mm_create(&mm, 2, MM_PORTABLE);
    unsetenv("WEFT_MATMUL_ISA");
    if (rc)
        return rc;
    train_mm_describe(mm, kern, cap);
    run_att(c, mm, 1, out, dqkv);
    train_mm_destroy(mm);
    return 0;
}

TEST(bf16_attention_near_reference)
{
    static const int cases[][4] = { { 1, 1, 12, 3 }, { 2, 7, 12, 3 }, { 1, 65, 66, 2 },
                                    { 2, 33, 40, 4 }, { 1, 130, 64, 2 } };
    int n = test_scale() >= 10 ? 3 : (int)(sizeof cases / sizeof *cases);
    for (int ci = 0; ci < n; ci++) {
        att_case c = { cases[ci][0], cases[ci][1], cases[ci][2], cases[ci][3], 0, 0, 0, 0, 0 };
        c.nq = (size_t)c.B * c.T * 3 * c.C;
        c.no = (size_t)c.B * c.T * c.C;
        c.natt = (size_t)c.B * c.NH * c.T * 2;
        c.qkv = malloc(c.nq * 4);
        c.dout = malloc(c.no * 4);
        weft_rng r;
        weft_rng_seed(&r, 11 + ci);
        for (size_t i = 0; i < c.nq; i++) c.qkv[i] = 2.0f * frand(&r);
        for (size_t i = 0; i < c.no; i++) c.dout[i] = frand(&r);
        double *rout = malloc(c.no * 8), *rdq = malloc(c.nq * 8);
        reference(rout, rdq, c.qkv, c.dout, c.B, c.T, c.C, c.NH);
        float *o32 = malloc(c.no * 4), *d32 = malloc(c.nq * 4);
        float *ok = malloc(c.no * 4), *dk = malloc(c.nq * 4);
        float *ow = malloc(c.no * 4), *dw = malloc(c.nq * 4);
        float *on = malloc(c.no * 4), *dn = malloc(c.nq * 4);
        char kern[96], wide[96];
        mm_ctx *mm;
        CHECK(train_mm_create(&mm, 2, MM_PORTABLE) == 0);
        run_att(&c, mm, 0, o32, d32);
        train_mm_destroy(mm);
        CHECK(run_isa(&c, NULL, ok, dk, kern, sizeof kern) == 0);
        CHECK(run_isa(&c, "avx512", ow, dw, wide, sizeof wide) == 0);
        run_att(&c, NULL, 1, on, dn);
        if (ci == 0)
            printf("  bf16 on \"%s\"; widened on \"%s\"%s\n", kern, wide,
                   strstr(kern, "bf16") ? "" : " (this CPU has no bf16 kernel: both widen)");
        /* fp32 within its rounding; bf16 within bf16's, and not fp32's bits */
        CHECKF(rel_err(o32, rout, c.no) < 1e-5 && rel_err(d32, rdq, c.nq) < 1e-4,
               "fp32 B=%d T=%d C=%d NH=%d", c.B, c.T, c.C, c.NH);
        const float *outs[3] = { ok, ow, on }, *ds[3] = { dk, dw, dn };
        for (int k = 0; k < 3; k++) {
            double eo = rel_err(outs[k], rout, c.no), ed = rel_err(ds[k], rdq, c.nq);
            CHECKF(eo < 1e-2 && ed < 1e-2, "bf16 path %d B=%d T=%d C=%d NH=%d: %g %g", k, c.B,
                   c.T, c.C, c.NH, eo, ed);
            CHECKF(memcmp(outs[k], o32, c.no * 4) != 0 && memcmp(ds[k], d32, c.nq * 4) != 0,
                   "bf16 path %d gave fp32's bits", k);
            CHECKF(key_sum(ds[k], c.B, c.T, c.C) < 1e-5 * c.T, "bf16 path %d: key sums %g", k,
                   key_sum(ds[k], c.B, c.T, c.C));
        }
        /* the same rounded operands: only the sums' order differs */
        CHECKF(rel_diff(ok, ow, c.no) < 1e-3 && rel_diff(dk, dw, c.nq) < 1e-3 &&
               rel_diff(on, ow, c.no) < 1e-3 && rel_diff(dn, dw, c.nq) < 1e-3,
               "kernel, widening and loop B=%d T=%d", c.B, c.T);
        free(c.qkv); free(c.dout); free(rout); free(rdq); free(o32); free(d32);
        free(ok); free(dk); free(ow); free(dw); free(on); free(dn);
    }
}

TEST(bf16_gqa_near_fp32)
{
    int B = 2, T = 70, NH = 4, NKV = 2, hs = 24, A = NH * hs, KV = NKV * hs;
    size_t nq = (size_t)B * T * A, nk = (size_t)B * T * KV, natt = (size_t)B * NH * T * 2;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *dout = malloc(nq * 4);
    float *o[2], *dq[2], *dk[2], *dv[2];
    float *att = malloc(natt * 4), *datt = malloc(natt * 4);
    weft_rng r;
    weft_rng_seed(&r, 7);
    for (size_t i = 0; i < nq; i++) { q[i] = 2.0f * frand(&r); dout[i] = frand(&r); }
    for (size_t i = 0; i < nk; i++) { k[i] = 2.0f * frand(&r); v[i] = frand(&r); }
    mm_ctx *mm;
    CHECK(train_mm_create(&mm, 2, MM_PORTABLE) == 0);
    for (int p = 0; p < 2; p++) {
        o[p] = malloc(nq * 4); dq[p] = malloc(nq * 4);
        dk[p] = malloc(nk * 4); dv[p] = malloc(nk * 4);
        train_attention_gqa_forward_prec(mm, p, o[p], att, q, k, v, A, KV, KV, B, T, NH, NKV, hs);
        train_attention_gqa_backward_prec(mm, p, dq[p], dk[p], dv[p], datt, dout, q, k, v, att, A,
                                          KV, KV, B, T, NH, NKV, hs);
    }
    CHECK(rel_diff(o[1], o[0], nq) < 1e-2 && rel_diff(dq[1], dq[0], nq) < 1e-2);
    CHECK(rel_diff(dk[1], dk[0], nk) < 1e-2 && rel_diff(dv[1], dv[0], nk) < 1e-2);
    CHECK(memcmp(o[1], o[0], nq * 4) != 0);
    train_mm_destroy(mm);
    for (int p = 0; p < 2; p++) {
        free(o[p]); free(dq[p]); free(dk[p]); free(dv[p]);
    }
    free(q); free(k); free(v); free(dout); free(att); free(datt);
}

TEST(rounder_as_half)
{
    enum { N = 70 };
    float x[N];
    uint16_t a[N + 1], b[N + 1];
    weft_rng r;
    weft_rng_seed(&r, 3);
    mmb_round_fn round = train_mmb_rounder();
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) {
            /* every binade of the normals, and halfway cases (low 16 bits 0x8000) */
            uint32_t u = (uint32_t)(weft_rng_uniform(&r) * 4294967295.0);
            u = (u & 0x807fffffu) | ((1u + (uint32_t)(weft_rng_uniform(&r) * 253.0)) << 23);
            if (i % 7 == 3)
                u = (u & 0xffff0000u) | 0x8000u;
            x[i] = half_bits_f32(u);
        }
        x[0] = 0.0f;
        x[1] = -0.0f;
        x[2] = INFINITY;
        x[3] = -INFINITY;
        x[4] = NAN;
        x[5] = 3.3895313892515355e38f;   /* rounds up to infinity */
        for (int n = 0; n <= N; n++) {
            memset(a, 0xaa, sizeof a);
            memset(b, 0xaa, sizeof b);
            round(a, x, (size_t)n);
            half_f32_to_bf16(b, x, (size_t)n);
            CHECKF(memcmp(a, b, sizeof a) == 0, "length %d", n);   /* nothing past n */
        }
    }
}
