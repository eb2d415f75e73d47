/* Context-parallel attention's block kernels (attention_cp.h) against
 * plain attention (layers.h) on the whole sequence: C virtual ranks each
 * take their zig-zag rows (chunks r and 2C-1-r of 2C), meet every rank's
 * K/V block in the ring's order, and merge with the online softmax; their
 * outputs, log-sum-exps, dQ and the dK/dV summed for each block's owner
 * equal plain attention's at the rows' global positions to 1e-5 of the
 * largest. C 1, 2, 3 and 4 (so every chunk pair is whole, diagonal or
 * skipped), grouped-query heads, chunks of 1, ragged sizes and chunks
 * of several 64-row query blocks. The
 * positions are a permutation, and the embedding and rotary tables at
 * them are the whole sequence's rows, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/attention_cp.h"
#include "train/attention_prec.h"
#include "train/layers.h"
#include "train/layers_llama.h"
#include "weft.h"

static weft_rng rng;

static float *randv(size_t n)
{
    float *v = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        v[i] = 2.0f * weft_rng_uniform(&rng) - 1.0f;
    return v;
}

static float maxabs(const float *v, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    return m;
}

/* rows of width w of the whole [B, T] into rank r's [B, Tl] (dir 1) or back */
static void gather(float *loc, float *whole, int B, int T, int C, int r, int w, int dir)
{
    int Tl = T / C;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            float *l = loc + ((size_t)b * Tl + t) * w;
            float *g = whole + ((size_t)b * T + train_cp_pos(r, C, Tl, t)) * w;
            if (dir)
                memcpy(l, g, sizeof(float) * w);
            else
                memcpy(g, l, sizeof(float) * w);
        }
}

static float max_err(const float *a, const float *b, size_t n)
{
    float e = 0;
    for (size_t i = 0; i < n; i++)
        e = fabsf(a[i] - b[i]) > e ? fabsf(a[i] - b[i]) : e;
    return e;
}

/* One shape: the ring simulated over C ranks in one process; bf16: its
 * products in bf16 against plain attention's bf16 path, to tol of the
 * largest (the two round different probabilities: the ring's are not yet
 * normalised), and each row's delta from its own ring (train_cp_bwd_delta_step). */
static void ring_case_prec(int B, int C, int cs, int NH, int NKV, int hs, int bf16)
{
    float tol = bf16 ? 1e-2f : 1e-5f;
    int T = 2 * C * cs, Tl = T / C, QW = NH * hs, KW = NKV * hs;
    size_t nq = (size_t)B * T * QW, nk = (size_t)B * T * KW;
    float *q = randv(nq), *k = randv(nk), *v = randv(nk), *dout = randv(nq);
    float *out = calloc(nq, 4), *att = calloc((size_t)2 * B * NH * T, 4);
    float *dq = calloc(nq, 4), *dk = calloc(nk, 4), *dv = calloc(nk, 4);
    float *datt = calloc((size_t)2 * B * NH * T, 4);
    train_attention_gqa_forward_prec(NULL, bf16, out, att, q, k, v, QW, KW, KW, B, T, NH, NKV,
                                     hs);
    train_attention_gqa_backward_prec(NULL, bf16, dq, dk, dv, datt, dout, q, k, v, att, QW, KW,
                                      KW, B, T, NH, NKV, hs);
    cp_dims d = { B, Tl, NH, NKV, hs, C, bf16 };
    size_t lq = (size_t)B * Tl * QW, lk = (size_t)B * Tl * KW, lr = (size_t)B * NH * Tl;
    float *kv = malloc(sizeof(float) * 2 * lk * C), *dkv = calloc(2 * lk * C, 4);
    float *lqv = malloc(sizeof(float) * lq * C), *ldo = malloc(sizeof(float) * lq * C);
    float *lo = malloc(sizeof(float) * lq * C), *mx = malloc(sizeof(float) * lr * C);
    float *sum = malloc(sizeof(float) * lr * C), *ldq = calloc(lq * C, 4);
    float *tk = malloc(sizeof(float) * lk), *tv = malloc(sizeof(float) * lk);
    float *cq = calloc(nq, 4), *cout = calloc(nq, 4), *ck = calloc(nk, 4), *cv = calloc(nk, 4);
    for (int r = 0; r < C; r++) {
        gather(tk, k, B, T, C, r, KW, 1);
        gather(tv, v, B, T, C, r, KW, 1);
        train_cp_pack(&d, kv + 2 * lk * r, tk, tv, KW, KW);
        gather(lqv + lq * r, q, B, T, C, r, QW, 1);
        gather(ldo + lq * r, dout, B, T, C, r, QW, 1);
    }
    int rc = 0;
    for (int r = 0; r < C; r++) {
        cp_fwd_state st = { lo + lq * r, mx + lr * r, sum + lr * r };
        train_cp_fwd_begin(&d, &st);
        for (int s = 0; s < C; s++) {
            int src = (r - s + C) % C;
            rc |= train_cp_fwd_step(NULL, &d, &st, lqv + lq * r, QW, kv + 2 * lk * src, r, src);
        }
        train_cp_fwd_finish(&d, &st);
        gather(lo + lq * r, cout, B, T, C, r, QW, 0);
        /* the log-sum-exps at their global rows */
        for (int bh = 0; bh < B * NH; bh++)
            for (int t = 0; t < Tl; t++) {
                float want = att[(size_t)bh * T + train_cp_pos(r, C, Tl, t)];
                float got = st.mx[(size_t)bh * Tl + t];
                if (fabsf(want - got) > tol * (1 + fabsf(want)))
                    rc |= 1;
            }
    }
    CHECK(rc == 0);
    CHECKF(max_err(cout, out, nq) <= tol * maxabs(out, nq), "C %d cs %d out %g", C, cs,
           (double)max_err(cout, out, nq));
    if (bf16) { /* the products did round: off fp32's by far more than fp32's own 1e-5 */
        float *o32 = calloc(nq, 4), *a32 = calloc((size_t)2 * B * NH * T, 4);
        train_attention_gqa_forward(NULL, o32, a32, q, k, v, QW, KW, KW, B, T, NH, NKV, hs);
        CHECKF(max_err(cout, o32, nq) > 1e-4f * maxabs(o32, nq), "C %d: off fp32 by %g", C,
               (double)max_err(cout, o32, nq));
        free(o32);
        free(a32);
    }
    for (int r = 0; r < C; r++) {
        float *delta = sum + lr * r; /* the forward's sums are done with */
        if (bf16) {
            memset(delta, 0, sizeof(float) * lr);
            for (int s = 0; s < C; s++) {
                int src = (r - s + C) % C;
                rc |= train_cp_bwd_delta_step(NULL, &d, delta, lqv + lq * r, QW, ldo + lq * r,
                                              mx + lr * r, kv + 2 * lk * src, r, src);
            }
        } else {
            train_cp_bwd_delta(&d, delta, ldo + lq * r, lo + lq * r);
        }
        for (int s = 0; s < C; s++) {
            int src = (r - s + C) % C;
            rc |= train_cp_bwd_step(NULL, &d, ldq + lq * r, QW, dkv + 2 * lk * src, lqv + lq * r,
                                    ldo + lq * r, mx + lr * r, delta, kv + 2 * lk * src, r, src);
        }
    }
    for (int r = 0; r < C; r++) {
        gather(ldq + lq * r, cq, B, T, C, r, QW, 0);
        train_cp_unpack(&d, tk, tv, KW, KW, dkv + 2 * lk * r);
        gather(tk, ck, B, T, C, r, KW, 0);
        gather(tv, cv, B, T, C, r, KW, 0);
    }
    CHECK(rc == 0);
    CHECKF(max_err(cq, dq, nq) <= tol * maxabs(dq, nq), "C %d dq %g", C,
           (double)max_err(cq, dq, nq));
    CHECKF(max_err(ck, dk, nk) <= tol * maxabs(dk, nk), "C %d dk %g", C,
           (double)max_err(ck, dk, nk));
    CHECKF(max_err(cv, dv, nk) <= tol * maxabs(dv, nk), "C %d dv %g", C,
           (double)max_err(cv, dv, nk));
    float *frees[] = { q, k, v, dout, out, att, dq, dk, dv, datt, kv, dkv, lqv, ldo, lo, mx,
                       sum, ldq, tk, tv, cq, cout, ck, cv };
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        free(frees[i]);
}

static void ring_case(int B, int C, int cs, int NH, int NKV, int hs)
{
    ring_case_prec(B, C, cs, NH, NKV, hs, 0);
}

TEST(ring_equals_plain_attention)
{
    weft_rng_seed(&rng, 7);
    ring_case(2, 1, 6, 4, 2, 8);
    ring_case(2, 2, 5, 4, 2, 8);
    ring_case(1, 2, 1, 2, 2, 4);     /* chunks of one row */
    ring_case(2, 3, 4, 4, 1, 6);
    ring_case(1, 4, 9, 4, 4, 16);
    if (!getenv("TEST_SCALE") || atoi(getenv("TEST_SCALE")) <= 1) {
        ring_case(2, 4, 40, 4, 2, 32); /* blocks past the kernel's tiles */
        ring_case(1, 2, 150, 2, 1, 16); /* chunks of several 64-row query blocks */
    }
}

/* bf16: plain attention's bf16 path within 1e-2 of the largest, and
 * rounded (off fp32's output by more than 1e-4) */
TEST(ring_bf16_equals_plain_bf16)
{
    weft_rng_seed(&rng, 11);
    ring_case_prec(2, 2, 5, 4, 2, 8, 1);
    ring_case_prec(1, 3, 70, 4, 1, 16, 1); /* chunks past a 64-row query block */
}

TEST(zigzag_positions)
{
    for (int C = 1; C <= 4; C++) {
        int T = 2 * C * 3, Tl = T / C, seen[64] = { 0 }, ok = 1;
        for (int r = 0; r < C; r++)
            for (int t = 0; t < Tl; t++)
                seen[train_cp_pos(r, C, Tl, t)]++;
        for (int p = 0; p < T; p++)
            ok &= seen[p] == 1;
        CHECKF(ok, "C %d: not a permutation", C);
        /* rank r's halves are chunks r and 2C-1-r */
        CHECK(train_cp_pos(C - 1, C, Tl, 0) == (C - 1) * 3);
        CHECK(train_cp_pos(0, C, Tl, Tl - 1) == T - 1);
    }
}

TEST(positions_tables_at_global_rows)
{
    int T = 24, hs = 8, V = 11, Cm = 6;
    float *cw = malloc(sizeof(float) * T * hs / 2), *sw = malloc(sizeof(float) * T * hs / 2);
    train_rope_tables(cw, sw, T, hs, 10000.0f);
    float *wte = randv((size_t)V * Cm), *wpe = randv((size_t)T * Cm);
    int32_t tok[24], tl[24];
    for (int t = 0; t < T; t++)
        tok[t] = (t * 7) % V;
    float *ew = malloc(sizeof(float) * T * Cm);
    train_embedding_forward(ew, tok, wte, wpe, 1, T, Cm);
    for (int C = 2; C <= 3; C++) {
        int Tl = T / C;
        for (int r = 0; r < C; r++) {
            float cl[96], sl[96], el[144];
            int ok = 1;
            for (int t = 0; t < Tl; t++)
                tl[t] = tok[train_cp_pos(r, C, Tl, t)];
            train_cp_rope_tables(r, C, cl, sl, Tl, hs, 10000.0f);
            train_cp_embedding_forward(r, C, el, tl, wte, wpe, 1, Tl, Cm);
            for (int t = 0; t < Tl; t++) {
                size_t p = (size_t)train_cp_pos(r, C, Tl, t);
                ok &= !memcmp(cl + t * hs / 2, cw + p * hs / 2, sizeof(float) * hs / 2);
                ok &= !memcmp(sl + t * hs / 2, sw + p * hs / 2, sizeof(float) * hs / 2);
                ok &= !memcmp(el + t * Cm, ew + p * Cm, sizeof(float) * Cm);
            }
            CHECKF(ok, "rank %d of %d: tables differ from the whole sequence's rows", r, C);
        }
    }
    free(cw);
    free(sw);
    free(wte);
    free(wpe);
    free(ew);
}
