/* The work of one ring step of context-parallel attention on one rank
 * (attention_cp.h): a rank's two query chunks against the two chunks of
 * a travelling K/V block, each pair whole, causal on its diagonal or
 * skipped. Forward keeps FlashAttention's running max and sum per query
 * row and rescales the partial output when the max grows; backward
 * recomputes a pair's probabilities from the saved log-sum-exp. The
 * products run on the portable kernel per (batch, head) pair over the
 * model's pool, as attention.c's do; a kv head's query heads run on one
 * thread, in order, so their sums into its dK and dV need no locks.
 *
 * In bf16 (cp_dims.bf16) the products take bf16 operands and sum in
 * fp32, as attention.c's bf16 path does: the travelling block's K and V
 * rounded once a step, a query block's Q and dO and its P and dS as they
 * come; dS^T Q (the keys' gradient) stays fp32 for attention.c's reason,
 * and the online softmax's max, sums, rescaling and log-sum-exps are
 * fp32 throughout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/attention_cp.h"
#include "train/matmul_bf16.h"
#include "train/pool.h"
#include "train/vexp.h"

/* Query rows a block: as attention.c's, so a block's two score rows stay
 * in cache at long chunks. */
enum { QB = 64 };

typedef struct {
    const cp_dims *d;
    mmp *mm;
    float *scr;          /* per thread: two QB x cs blocks */
    int avx2;
    /* forward */
    cp_fwd_state *st;
    /* backward */
    float *dq, *dkv;
    const float *dout, *lse, *delta;
    const float *q, *kv; /* kv NULL when the block came rounded (kv16) */
    int qs, qr, kr;
    /* bf16: the block rounded (kv's layout), and per thread S16 (s16_per)
     * elements: a query block's Q and dO (QB x hs), its P and dS (QB x cs) */
    const uint16_t *kv16;
    uint16_t *scr16;
    mmb_round_fn round;
} cp_job;

static size_t s16_per(const cp_dims *d)
{
    return (size_t)2 * QB * d->hs + (size_t)2 * QB * (d->Tl / 2);
}

/* Thread tid's bf16 scratch: Q, dO, P, dS. */
static void s16_of(const cp_job *j, int tid, uint16_t **q, uint16_t **o, uint16_t **p,
                   uint16_t **s)
{
    size_t qh = (size_t)QB * j->d->hs, pc = (size_t)QB * (j->d->Tl / 2);
    *q = j->scr16 + (size_t)tid * s16_per(j->d);
    *o = *q + qh;
    *p = *o + qh;
    *s = *p + pc;
}

/* dst (rows of cols) = src's rows (stride sld), rounded to bf16. */
static void round_rows(const cp_job *j, uint16_t *dst, const float *src, int sld, int rows,
                       int cols)
{
    for (int r = 0; r < rows; r++)
        j->round(dst + (size_t)r * cols, src + (size_t)r * sld, (size_t)cols);
}

/* C (ldc) = A B^T (beta 0) or A B (beta 1, added): fp32 operands, or with
 * a16 and b16 set their bf16 roundings (rows lda16, ldb16 apart). */
typedef struct {
    const float *f;
    int ld;
    const uint16_t *h;
    int ld16;
} cp_opd;

static void prod(const cp_job *j, int tid, int ta, int tb, int M, int N, int K, cp_opd A,
                 cp_opd B, float beta, float *C, int ldc)
{
    if (A.h && B.h)
        train_mmp_gemm_bf16_on(j->mm, tid, ta, tb, M, N, K, A.h, A.ld16, B.h, B.ld16, beta, C,
                               ldc);
    else
        train_mmp_gemm_on(j->mm, tid, ta, tb, M, N, K, A.f, A.ld, B.f, B.ld, beta, C, ldc);
}

/* The block from element off on, as an operand: fp32, its bf16 form, or
 * both. */
static cp_opd blk(const cp_job *j, size_t off)
{
    int KVW = j->d->NKV * j->d->hs;
    return (cp_opd){ j->kv ? j->kv + off : NULL, KVW, j->kv16 ? j->kv16 + off : NULL, KVW };
}

enum { PAIR_SKIP, PAIR_DIAG, PAIR_FULL };

/* Global chunk of local half a (0, 1) of rank r of C. */
static int chunk_of(int r, int C, int a)
{
    return a == 0 ? r : 2 * C - 1 - r;
}

static int pair_kind(const cp_job *j, int a, int c)
{
    int qc = chunk_of(j->qr, j->d->C, a), kc = chunk_of(j->kr, j->d->C, c);
    return kc < qc ? PAIR_FULL : kc == qc ? PAIR_DIAG : PAIR_SKIP;
}

int train_cp_pos(int r, int C, int Tl, int t)
{
    int cs = Tl / 2;
    return t < cs ? r * cs + t : chunk_of(r, C, 1) * cs + (t - cs);
}

static float row_exp(const cp_job *j, float *row, int n, float a, float b)
{
    return vexp_row(row, n, a, b, j->avx2);
}

/* Query chunk a of head h against key chunk c of the block (kind k), in
 * blocks of QB query rows: on the diagonal a block reads only the keys up
 * to its last row. */
static void fwd_pair(const cp_job *j, int tid, int b, int h, int a, int c, int k)
{
    const cp_dims *d = j->d;
    int cs = d->Tl / 2, hs = d->hs, KVW = d->NKV * hs, OW = d->NH * hs;
    int g = h / (d->NH / d->NKV);
    float scale = 1.0f / sqrtf((float)hs), *S = j->scr + (size_t)tid * 2 * QB * cs;
    const float *qp = j->q + ((size_t)b * d->Tl + (size_t)a * cs) * j->qs + (size_t)h * hs;
    size_t ko = ((size_t)b * d->Tl + (size_t)c * cs) * KVW + (size_t)g * hs;
    size_t vo = ko + (size_t)d->B * d->Tl * KVW;
    float *op = j->st->out + ((size_t)b * d->Tl + (size_t)a * cs) * OW + (size_t)h * hs;
    size_t ro = ((size_t)b * d->NH + h) * d->Tl + (size_t)a * cs;
    uint16_t *q16 = NULL, *o16 = NULL, *p16 = NULL, *s16 = NULL;
    if (j->kv16)
        s16_of(j, tid, &q16, &o16, &p16, &s16);
    for (int i0 = 0; i0 < cs; i0 += QB) {
        int m = cs - i0 < QB ? cs - i0 : QB, nk = k == PAIR_DIAG ? i0 + m : cs;
        float *mx = j->st->mx + ro + i0, *sm = j->st->sum + ro + i0;
        const float *qb = qp + (size_t)i0 * j->qs;
        if (q16)
            round_rows(j, q16, qb, j->qs, m, hs);
        prod(j, tid, 0, 1, m, nk, hs, (cp_opd){ qb, j->qs, q16, hs }, blk(j, ko), 0.0f, S, nk);
        for (int i = 0; i < m; i++) {
            float *row = S + (size_t)i * nk, *o = op + (size_t)(i0 + i) * OW;
            int n = k == PAIR_DIAG ? i0 + i + 1 : nk;
            float bm = -INFINITY;
            for (int t = 0; t < n; t++)
                bm = row[t] > bm ? row[t] : bm;
            /* scale > 0: the scaled row's largest is the raw one's, scaled */
            float m_new = bm * scale > mx[i] ? bm * scale : mx[i];
            float corr = expf(mx[i] - m_new), s = row_exp(j, row, n, scale, m_new);
            for (int t = n; t < nk; t++)
                row[t] = 0.0f;
            sm[i] = sm[i] * corr + s;
            mx[i] = m_new;
            for (int e = 0; e < hs; e++)
                o[e] *= corr;
        }
        /* P unnormalised (each at most 1): the sums rescale in fp32 */
        if (p16)
            round_rows(j, p16, S, nk, m, nk);
        prod(j, tid, 0, 0, m, hs, nk, (cp_opd){ S, nk, p16, nk }, blk(j, vo), 1.0f,
             op + (size_t)i0 * OW, OW);
    }
}

/* fn on every chunk pair that is not skipped, of this thread's share of
 * the (batch, head) pairs: each query row's state is one thread's. */
typedef void (*pair_fn)(const cp_job *j, int tid, int b, int h, int a, int c, int k);

static void head_pairs(const cp_job *j, int tid, int nt, pair_fn fn)
{
    int lo, hi;
    train_pool_split(j->d->B * j->d->NH, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 2; c++) {
                int k = pair_kind(j, a, c);
                if (k != PAIR_SKIP)
                    fn(j, tid, i / j->d->NH, i % j->d->NH, a, c, k);
            }
}

static void fwd_worker(void *v, int tid, int nt)
{
    head_pairs(v, tid, nt, fwd_pair);
}

/* Scratch of two QB x cs blocks a thread (and in bf16 the block rounded
 * and the threads' bf16 scratch), then fn over the pool. */
static int run(mm_ctx *mm, pool_fn fn, cp_job *j)
{
    const cp_dims *d = j->d;
    pool *pl = train_mm_pool(mm);
    size_t cs = (size_t)d->Tl / 2, nt = (size_t)train_pool_size(pl);
    size_t nkv = (size_t)2 * d->B * d->Tl * d->NKV * d->hs;
    j->mm = train_mm_portable(mm);
#ifdef VEXP_X86
    j->avx2 = vexp_have_avx2();
#endif
    j->scr = malloc(sizeof(float) * 2 * QB * cs * nt);
    uint16_t *kv16 = NULL;
    if (d->bf16) { /* the block itself when it came rounded */
        kv16 = j->kv16 ? NULL : malloc(sizeof(uint16_t) * nkv);
        j->scr16 = malloc(sizeof(uint16_t) * s16_per(d) * nt);
        j->round = train_mm_rounder(mm);
    }
    int rc = !j->scr || (d->bf16 && ((!kv16 && !j->kv16) || !j->scr16)) ? WEFT_ENOMEM : 0;
    if (rc == 0 && kv16 && !j->kv16) {
        j->round(kv16, j->kv, nkv);
        j->kv16 = kv16;
    }
    if (rc == 0)
        train_pool_run(pl, fn, j);
    free(kv16);
    free(j->scr16);
    free(j->scr);
    return rc;
}

void train_cp_fwd_begin(const cp_dims *d, cp_fwd_state *st)
{
    size_t rows = (size_t)d->B * d->NH * d->Tl;
    memset(st->out, 0, sizeof(float) * (size_t)d->B * d->Tl * d->NH * d->hs);
    for (size_t i = 0; i < rows; i++) {
        st->mx[i] = -INFINITY;
        st->sum[i] = 0.0f;
    }
}

int train_cp_fwd_step(mm_ctx *mm, const cp_dims *d, cp_fwd_state *st, const float *q, int qs,
                      const float *kv, int qr, int kr)
{
    cp_job j = { .d = d, .st = st, .q = q, .kv = kv, .qs = qs, .qr = qr, .kr = kr };
    return run(mm, fwd_worker, &j);
}

int train_cp_fwd_step16(mm_ctx *mm, const cp_dims *d, cp_fwd_state *st, const float *q,
                        int qs, const uint16_t *kv16, int qr, int kr)
{
    cp_job j = { .d = d, .st = st, .q = q, .kv16 = kv16, .qs = qs, .qr = qr, .kr = kr };
    return d->bf16 ? run(mm, fwd_worker, &j) : WEFT_EINVAL;
}

void train_cp_fwd_finish(const cp_dims *d, cp_fwd_state *st)
{
    int OW = d->NH * d->hs;
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->NH; h++)
            for (int t = 0; t < d->Tl; t++) {
                size_t ro = ((size_t)b * d->NH + h) * d->Tl + t;
                float *o = st->out + ((size_t)b * d->Tl + t) * OW + (size_t)h * d->hs;
                float inv = 1.0f / st->sum[ro];
                for (int e = 0; e < d->hs; e++)
                    o[e] *= inv;
                st->mx[ro] += logf(st->sum[ro]);
            }
}

void train_cp_bwd_delta(const cp_dims *d, float *delta, const float *dout, const float *out)
{
    int OW = d->NH * d->hs;
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->NH; h++)
            for (int t = 0; t < d->Tl; t++) {
                size_t off = ((size_t)b * d->Tl + t) * OW + (size_t)h * d->hs;
                float s = 0.0f;
                for (int e = 0; e < d->hs; e++)
                    s += dout[off + e] * out[off + e];
                delta[((size_t)b * d->NH + h) * d->Tl + t] = s;
            }
}

/* A query block's raw scores P = Q K^T and the probabilities' gradient
 * dP = dO V^T against the block's keys (m x nk each); in bf16 its Q and
 * dO rounded into q16 and o16 first (o16 kept for dV's product). */
static void pair_scores(const cp_job *j, int tid, const float *qp, const float *dop,
                        size_t ko, size_t vo, int m, int nk, uint16_t *q16, uint16_t *o16,
                        float *P, float *dP)
{
    int hs = j->d->hs, OW = j->d->NH * hs;
    if (q16) {
        round_rows(j, q16, qp, j->qs, m, hs);
        round_rows(j, o16, dop, OW, m, hs);
    }
    prod(j, tid, 0, 1, m, nk, hs, (cp_opd){ qp, j->qs, q16, hs }, blk(j, ko), 0.0f, P, nk);
    prod(j, tid, 0, 1, m, nk, hs, (cp_opd){ dop, OW, o16, hs }, blk(j, vo), 0.0f, dP, nk);
}

/* Query chunk a of head h against key chunk c: its part of dQ, and of
 * the block's dK and dV, in blocks of QB query rows; or, in the delta
 * pass (no dkv), of each row's delta alone: the sum over the chunk's keys
 * of P dP, added into the rows j->dq points to then. */
static void bwd_pair(const cp_job *j, int tid, int b, int h, int a, int c, int k)
{
    const cp_dims *d = j->d;
    int cs = d->Tl / 2, hs = d->hs, KVW = d->NKV * hs, OW = d->NH * hs;
    int g = h / (d->NH / d->NKV);
    float scale = 1.0f / sqrtf((float)hs);
    float *P = j->scr + (size_t)tid * 2 * QB * cs, *dP = P + (size_t)QB * cs;
    size_t qrow = (size_t)b * d->Tl + (size_t)a * cs, krow = (size_t)b * d->Tl + (size_t)c * cs;
    size_t half = (size_t)d->B * d->Tl * KVW;
    size_t ko = krow * KVW + (size_t)g * hs, vo = ko + half;
    float *dkp = j->dkv ? j->dkv + ko : NULL;
    float *dvp = dkp ? dkp + half : NULL;
    size_t ro = ((size_t)b * d->NH + h) * d->Tl + (size_t)a * cs;
    uint16_t *q16 = NULL, *o16 = NULL, *p16 = NULL, *s16 = NULL;
    if (j->kv16)
        s16_of(j, tid, &q16, &o16, &p16, &s16);
    for (int i0 = 0; i0 < cs; i0 += QB) {
        int m = cs - i0 < QB ? cs - i0 : QB, nk = k == PAIR_DIAG ? i0 + m : cs;
        const float *qp = j->q + (qrow + i0) * j->qs + (size_t)h * hs;
        const float *dop = j->dout + (qrow + i0) * OW + (size_t)h * hs;
        const float *lse = j->lse + ro + i0;
        pair_scores(j, tid, qp, dop, ko, vo, m, nk, q16, o16, P, dP);
        if (!dkp) {
            for (int i = 0; i < m; i++) {
                float *p = P + (size_t)i * nk, *dp = dP + (size_t)i * nk, sum = 0.0f;
                int n = k == PAIR_DIAG ? i0 + i + 1 : nk;
                row_exp(j, p, n, scale, lse[i]);
                for (int t = 0; t < n; t++)
                    sum += p[t] * dp[t];
                j->dq[ro + i0 + i] += sum;
            }
            continue;
        }
        float *dqp = j->dq + (qrow + i0) * j->qs + (size_t)h * hs;
        const float *delta = j->delta + ro + i0;
        for (int i = 0; i < m; i++) {
            float *p = P + (size_t)i * nk, *dp = dP + (size_t)i * nk;
            int n = k == PAIR_DIAG ? i0 + i + 1 : nk;
            row_exp(j, p, n, scale, lse[i]);
            /* through the softmax, and the scale of q.k */
            for (int t = 0; t < n; t++)
                dp[t] = p[t] * (dp[t] - delta[i]) * scale;
            for (int t = n; t < nk; t++)
                p[t] = dp[t] = 0.0f;
        }
        if (p16) {
            round_rows(j, p16, P, nk, m, nk);
            round_rows(j, s16, dP, nk, m, nk);
        }
        /* dV += P^T dO, dQ += dS K, dK += dS^T Q (fp32: see the top) */
        prod(j, tid, 1, 0, nk, hs, m, (cp_opd){ P, nk, p16, nk }, (cp_opd){ dop, OW, o16, hs },
             1.0f, dvp, KVW);
        prod(j, tid, 0, 0, m, hs, nk, (cp_opd){ dP, nk, s16, nk }, blk(j, ko), 1.0f, dqp,
             j->qs);
        train_mmp_gemm_on(j->mm, tid, 1, 0, nk, hs, m, dP, nk, qp, j->qs, 1.0f, dkp, KVW);
    }
}

static void bwd_worker(void *v, int tid, int nt)
{
    const cp_job *j = v;
    const cp_dims *d = j->d;
    int lo, hi, per = d->NH / d->NKV;
    train_pool_split(d->B * d->NKV, 1, tid, nt, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        int b = i / d->NKV, g = i % d->NKV;
        for (int h = g * per; h < (g + 1) * per; h++)
            for (int a = 0; a < 2; a++)
                for (int c = 0; c < 2; c++) {
                    int k = pair_kind(j, a, c);
                    if (k != PAIR_SKIP)
                        bwd_pair(j, tid, b, h, a, c, k);
                }
    }
}

int train_cp_bwd_delta_step(mm_ctx *mm, const cp_dims *d, float *delta, const float *q, int qs,
                            const float *dout, const float *lse, const float *kv, int qr, int kr)
{
    return train_cp_bwd_delta_step16(mm, d, delta, q, qs, dout, lse, kv, NULL, qr, kr);
}

int train_cp_bwd_delta_step16(mm_ctx *mm, const cp_dims *d, float *delta, const float *q,
                              int qs, const float *dout, const float *lse, const float *kv,
                              const uint16_t *kv16, int qr, int kr)
{
    cp_job j = { .d = d, .dq = delta, .dout = dout, .lse = lse, .q = q, .kv = kv, .kv16 = kv16,
                 .qs = qs, .qr = qr, .kr = kr };
    return (kv16 && !d->bf16) || (!kv == !kv16) ? WEFT_EINVAL : run(mm, bwd_worker, &j);
}

int train_cp_bwd_step(mm_ctx *mm, const cp_dims *d, float *dq, int qs, float *dkv,
                      const float *q, const float *dout, const float *lse, const float *delta,
                      const float *kv, int qr, int kr)
{
    return train_cp_bwd_step16(mm, d, dq, qs, dkv, q, dout, lse, delta, kv, NULL, qr, kr);
}

int train_cp_bwd_step16(mm_ctx *mm, const cp_dims *d, float *dq, int qs, float *dkv,
                        const float *q, const float *dout, const float *lse, const float *delta,
                        const float *kv, const uint16_t *kv16, int qr, int kr)
{
    cp_job j = { .d = d, .dq = dq, .dkv = dkv, .dout = dout, .lse = lse, .delta = delta,
                 .q = q, .kv = kv, .kv16 = kv16, .qs = qs, .qr = qr, .kr = kr };
    return (kv16 && !d->bf16) || (!kv == !kv16) ? WEFT_EINVAL : run(mm, bwd_worker, &j);
}

void train_cp_pack(const cp_dims *d, float *kv, const float *k, const float *v, int ks, int vs)
{
    size_t rows = (size_t)d->B * d->Tl, KVW = (size_t)d->NKV * d->hs;
    for (size_t r = 0; r < rows; r++) {
        memcpy(kv + r * KVW, k + r * ks, sizeof(float) * KVW);
        memcpy(kv + (rows + r) * KVW, v + r * vs, sizeof(float) * KVW);
    }
}

void train_cp_pack16(mm_ctx *mm, const cp_dims *d, uint16_t *kv16, const float *k,
                     const float *v, int ks, int vs)
{
    mmb_round_fn round = train_mm_rounder(mm);
    size_t rows = (size_t)d->B * d->Tl, KVW = (size_t)d->NKV * d->hs;
    for (size_t r = 0; r < rows; r++) {
        round(kv16 + r * KVW, k + r * ks, KVW);
        round(kv16 + (rows + r) * KVW, v + r * vs, KVW);
    }
}

void train_cp_unpack(const cp_dims *d, float *dk, float *dv, int ks, int vs, const float *dkv)
{
    size_t rows = (size_t)d->B * d->Tl, KVW = (size_t)d->NKV * d->hs;
    for (size_t r = 0; r < rows; r++) {
        memcpy(dk + r * ks, dkv + r * KVW, sizeof(float) * KVW);
        memcpy(dv + r * vs, dkv + (rows + r) * KVW, sizeof(float) * KVW);
    }
}
