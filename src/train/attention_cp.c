/* Context-parallel attention as a ring over point-to-point messages
 * (attention_cp.h). Forward: C steps; at step s a rank holds the K/V
 * block of rank r - s, posts the receive of the next block from its
 * predecessor and the send of this one to its successor, computes on it
 * (attention_cp_block.c) and only then waits, so the transfer runs under
 * the products. Backward: the same ring for K/V, and beside it the
 * blocks' dK/dV: a rank adds its part for the block it holds to the sum
 * that came from its predecessor (computed on the same block one step
 * before) and passes it on; after C steps the sum of every rank's part
 * reaches the block's owner. Messages of one (peer, tag) keep their
 * order, so two tags carry the two streams. In bf16 the K/V blocks
 * travel rounded to bf16, as the products take them (half the bytes);
 * the dK/dV sums stay fp32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/attention_cp.h"

enum { TAG_KV = 0x63700, TAG_DKV = 0x63701 };

struct attn_cp {
    weft_comm *g;
    int C, r;
    float *buf[2];       /* the K/V block held and the one arriving */
    float *part, *acc;   /* backward: this rank's dK/dV part, and the arriving sum */
    size_t cap;          /* floats of each buffer */
    int bf16;            /* bf16 products (train_attn_cp_set_bf16) */
    uint64_t steps, bytes;
};

int train_attn_cp_open(attn_cp **out, weft_comm *group)
{
    *out = NULL;
    if (!group)
        return WEFT_EINVAL;
    attn_cp *cp = calloc(1, sizeof *cp);
    if (!cp)
        return WEFT_ENOMEM;
    cp->g = group;
    cp->C = weft_comm_size(group);
    cp->r = weft_comm_rank(group);
    *out = cp;
    return 0;
}

void train_attn_cp_free(attn_cp *cp)
{
    if (!cp)
        return;
    weft_comm_destroy(cp->g);
    free(cp->buf[0]);
    free(cp->buf[1]);
    free(cp->part);
    free(cp->acc);
    free(cp);
}

void train_attn_cp_set_bf16(attn_cp *cp, int on)
{
    if (cp)
        cp->bf16 = on != 0;
}

int train_attn_cp_size(const attn_cp *cp)
{
    return cp ? cp->C : 1;
}

int train_attn_cp_rank(const attn_cp *cp)
{
    return cp ? cp->r : 0;
}

void train_cp_embedding_forward(int r, int cp, float *out, const int32_t *tok, const float *wte,
                                const float *wpe, int B, int Tl, int C)
{
    for (int bt = 0; bt < B * Tl; bt++) {
        const float *te = wte + (size_t)tok[bt] * C;
        const float *pe = wpe + (size_t)train_cp_pos(r, cp, Tl, bt % Tl) * C;
        float *o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++)
            o[i] = te[i] + pe[i];
    }
}

void train_cp_embedding_backward(int r, int cp, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tok, int B, int Tl, int C)
{
    for (int bt = 0; bt < B * Tl; bt++) {
        float *te = dwte + (size_t)tok[bt] * C;
        float *pe = dwpe + (size_t)train_cp_pos(r, cp, Tl, bt % Tl) * C;
        const float *d = dout + (size_t)bt * C;
        for (int i = 0; i < C; i++) {
            te[i] += d[i];
            pe[i] += d[i];
        }
    }
}

void train_cp_rope_tables(int r, int cp, float *cos_t, float *sin_t, int Tl, int hs,
                          float theta)
{
    int half = hs / 2;
    for (int i = 0; i < half; i++) {
        /* the same arithmetic as train_rope_tables, so the same bits */
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
        for (int t = 0; t < Tl; t++) {
            float f = (float)train_cp_pos(r, cp, Tl, t) * inv;
            cos_t[(size_t)t * half + i] = cosf(f);
            sin_t[(size_t)t * half + i] = sinf(f);
        }
    }
}

/* Buffers of n floats each (kept from call to call). */
static int reserve(attn_cp *cp, size_t n)
{
    if (n <= cp->cap)
        return 0;
    float **b[] = { &cp->buf[0], &cp->buf[1], &cp->part, &cp->acc };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        free(*b[i]);
        *b[i] = malloc(sizeof(float) * n);
    }
    if (!cp->buf[0] || !cp->buf[1] || !cp->part || !cp->acc) {
        cp->cap = 0;
        return WEFT_ENOMEM;
    }
    cp->cap = n;
    return 0;
}

/* The next block's receive and this one's send, posted before the work
 * on this one: n elements, bf16 (the block rounded) or fp32. */
static int ring_post(attn_cp *cp, const void *cur, void *next, size_t n, int bf16,
                     weft_request **rq)
{
    int prev = (cp->r + cp->C - 1) % cp->C, succ = (cp->r + 1) % cp->C;
    weft_dtype t = bf16 ? WEFT_BF16 : WEFT_F32;
    int rc = weft_irecv_tag(cp->g, next, n, t, prev, TAG_KV, &rq[0]);
    if (rc == 0)
        rc = weft_isend_tag(cp->g, cur, n, t, succ, TAG_KV, &rq[1]);
    cp->bytes += rc == 0 ? (bf16 ? sizeof(uint16_t) : sizeof(float)) * n : 0;
    return rc;
}

static int ring_wait(weft_request **rq, int rc)
{
    for (int i = 0; i < 2; i++)
        if (rq[i]) {
            int r = weft_wait(rq[i]);
            rc = rc ? rc : r;
            rq[i] = NULL;
        }
    return rc;
}

/* A pass's work: forward, backward's delta (bf16) or its gradients. */
enum { WORK_FWD, WORK_DELTA, WORK_BWD };
typedef struct {
    int kind;
    mm_ctx *mm;
    const cp_dims *d;
    const float *q;
    int qs;
    const float *dout, *lse;
    float *delta, *dq;
    cp_fwd_state *st;
    size_t n; /* floats of a K/V block */
} ring_work;

static int ring_pass(attn_cp *cp, const ring_work *w, const float *k, const float *v, int ks,
                     int vs);

static int check_dims(const attn_cp *cp, int B, int Tl, int NH, int NKV, int hs)
{
    if (!cp || B < 1 || Tl < 2 || Tl % 2 || NH < 1 || NKV < 1 || NH % NKV || hs < 1)
        return WEFT_EINVAL;
    return 0;
}

int train_attn_cp_forward(attn_cp *cp, mm_ctx *mm, float *out, float *att, const float *q,
                          const float *k, const float *v, int qs, int ks, int vs, int B, int Tl,
                          int NH, int NKV, int hs)
{
    int rc = check_dims(cp, B, Tl, NH, NKV, hs);
    cp_dims d = { B, Tl, NH, NKV, hs, cp ? cp->C : 1, cp ? cp->bf16 : 0 };
    size_t n = (size_t)2 * B * Tl * NKV * hs;
    if (rc || (rc = reserve(cp, n)) != 0)
        return rc;
    cp_fwd_state st = { out, att, att + (size_t)B * NH * Tl };
    train_cp_fwd_begin(&d, &st);
    ring_work w = { WORK_FWD, mm, &d, q, qs, NULL, NULL, NULL, NULL, &st, n };
    rc = ring_pass(cp, &w, k, v, ks, vs);
    if (rc == 0)
        train_cp_fwd_finish(&d, &st);
    return rc;
}

/* Backward step s on the block of rank kr: this rank's part, plus the sum
 * from the predecessor (step s > 0), passed on to the successor. */
static int bwd_step(attn_cp *cp, mm_ctx *mm, const cp_dims *d, int s, float *dq, int qs,
                    const float *q, const float *dout, const float *lse, const float *delta,
                    const float *kv, const uint16_t *kv16, size_t n)
{
    int prev = (cp->r + cp->C - 1) % cp->C, succ = (cp->r + 1) % cp->C, rc = 0;
    int kr = (cp->r - s + cp->C) % cp->C;
    weft_request *in = NULL, *outq = NULL;
    if (s > 0)
        rc = weft_irecv_tag(cp->g, cp->acc, n, WEFT_F32, prev, TAG_DKV, &in);
    memset(cp->part, 0, sizeof(float) * n);
    if (rc == 0)
        rc = train_cp_bwd_step16(mm, d, dq, qs, cp->part, q, dout, lse, delta, kv, kv16, cp->r,
                                 kr);
    if (in) {
        int r = weft_wait(in);
        rc = rc ? rc : r;
    }
    if (rc == 0 && s > 0)
        for (size_t i = 0; i < n; i++)
            cp->part[i] += cp->acc[i];
    if (rc == 0 && cp->C > 1)
        rc = weft_isend_tag(cp->g, cp->part, n, WEFT_F32, succ, TAG_DKV, &outq);
    if (outq) {
        int r = weft_wait(outq);
        rc = rc ? rc : r;
    }
    cp->bytes += rc == 0 ? sizeof(float) * n : 0;
    return rc;
}

/* One step's work on the block of rank r - s (cur: fp32, or in bf16 the
 * block rounded). */
static int ring_step(attn_cp *cp, const ring_work *w, int s, const void *cur)
{
    int kr = (cp->r - s + cp->C) % cp->C;
    const float *kv = w->d->bf16 ? NULL : cur;
    const uint16_t *kv16 = w->d->bf16 ? cur : NULL;
    if (w->kind == WORK_FWD)
        return kv16 ? train_cp_fwd_step16(w->mm, w->d, w->st, w->q, w->qs, kv16, cp->r, kr)
                    : train_cp_fwd_step(w->mm, w->d, w->st, w->q, w->qs, kv, cp->r, kr);
    if (w->kind == WORK_DELTA)
        return train_cp_bwd_delta_step16(w->mm, w->d, w->delta, w->q, w->qs, w->dout, w->lse,
                                         kv, kv16, cp->r, kr);
    return bwd_step(cp, w->mm, w->d, s, w->dq, w->qs, w->q, w->dout, w->lse, w->delta, kv,
                    kv16, w->n);
}

/* Once around the ring: this rank's K/V block packed (in bf16 rounded,
 * so that half the bytes travel: the products would round it anyway),
 * then C steps, each posting the next block's transfer before its work
 * on the current one and waiting for it after. */
static int ring_pass(attn_cp *cp, const ring_work *w, const float *k, const float *v, int ks,
                     int vs)
{
    int rc = 0, bf16 = w->d->bf16;
    if (bf16) /* the buffers hold n floats: room for n bf16 */
        train_cp_pack16(w->mm, w->d, (uint16_t *)(void *)cp->buf[0], k, v, ks, vs);
    else
        train_cp_pack(w->d, cp->buf[0], k, v, ks, vs);
    for (int s = 0; s < cp->C && rc == 0; s++) {
        weft_request *rq[2] = { NULL, NULL };
        void *cur = cp->buf[s % 2];
        if (s + 1 < cp->C)
            rc = ring_post(cp, cur, cp->buf[(s + 1) % 2], w->n, bf16, rq);
        if (rc == 0)
            rc = ring_step(cp, w, s, cur);
        rc = ring_wait(rq, rc);
        cp->steps++;
    }
    return rc;
}

int train_attn_cp_backward(attn_cp *cp, mm_ctx *mm, float *dq, float *dk, float *dv,
                           float *datt, const float *dout, const float *q, const float *k,
                           const float *v, const float *out, const float *att, int qs, int ks,
                           int vs, int B, int Tl, int NH, int NKV, int hs)
{
    int rc = check_dims(cp, B, Tl, NH, NKV, hs);
    cp_dims d = { B, Tl, NH, NKV, hs, cp ? cp->C : 1, cp ? cp->bf16 : 0 };
    size_t n = (size_t)2 * B * Tl * NKV * hs;
    if (rc || (rc = reserve(cp, n)) != 0)
        return rc;
    ring_work w = { WORK_DELTA, mm, &d, q, qs, dout, att, datt, dq, NULL, n };
    /* bf16: each row's delta = the sum over every key of P dP, from a
     * ring of K/V of its own (the output it would come from is not kept
     * in fp32) */
    if (d.bf16) {
        memset(datt, 0, sizeof(float) * (size_t)B * NH * Tl);
        rc = ring_pass(cp, &w, k, v, ks, vs);
    } else {
        train_cp_bwd_delta(&d, datt, dout, out);
    }
    for (size_t r = 0; r < (size_t)B * Tl; r++)
        memset(dq + r * qs, 0, sizeof(float) * (size_t)NH * hs);
    w.kind = WORK_BWD;
    if (rc == 0)
        rc = ring_pass(cp, &w, k, v, ks, vs);
    /* the sum over every rank's queries of this rank's own block */
    int prev = (cp->r + cp->C - 1) % cp->C;
    if (rc == 0 && cp->C > 1)
        rc = weft_recv_tag(cp->g, cp->acc, n, WEFT_F32, prev, TAG_DKV);
    if (rc == 0)
        train_cp_unpack(&d, dk, dv, ks, vs, cp->C > 1 ? cp->acc : cp->part);
    return rc;
}

int train_attn_cp_sum(attn_cp *cp, int *v)
{
    if (!cp || cp->C == 1)
        return 0;
    int32_t x = *v;
    int rc = weft_allreduce(cp->g, &x, &x, 1, WEFT_I32, WEFT_SUM);
    if (rc == 0)
        *v = x;
    return rc;
}

void train_attn_cp_counters(const attn_cp *cp, uint64_t *steps, uint64_t *bytes,
                            uint64_t *buffers)
{
    *steps = cp ? cp->steps : 0;
    *bytes = cp ? cp->bytes : 0;
    *buffers = cp ? 4 * sizeof(float) * cp->cap : 0;
}
