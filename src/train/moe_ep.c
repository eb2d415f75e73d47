/* Expert parallelism (moe_ep.h). A layer's dispatch, as Megatron's
 * all-to-all dispatcher: every rank's per-expert row counts and its
 * capacity are all-gathered over the expert group first (E+1 integers a
 * rank), so every rank knows every message's size before any row moves,
 * and a rank whose figures disagree (another capacity, a count past it) is
 * named by every rank of the group at once, which all fail the same
 * collective instead of waiting on a message that never comes. The rows
 * then go with all-to-all-v (a rank or an expert with no rows sends and
 * receives empty blocks), are regrouped by expert in source order (the
 * group's token order: source rank, then its token order) and run; the
 * outputs go back the same way.
 *
 * What is sent leaves from memory of weft_mem_alloc on the group: on one
 * host the all-to-all-v then has each rank copy its blocks once, with
 * memcpy, out of the senders' pages (coll/local/direct_av.c), where the
 * shared-memory ring took two copies or one at process_vm_readv's rate.
 * The layer gathers its rows, and writes its output gradients, straight
 * into it (train_moe_ep_send_rows); the outputs and input gradients are
 * regrouped straight into it. The buffers stay from step to step, so
 * their pages fault in once. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "train/moe_ep.h"
#include "train/moe_experts.h"

/* The capacity an evaluation announces: none. */
#define EVAL_CAP (INT32_MAX - 1)

/* What one layer's forward received, for its backward: one per record
 * (a layer in a slot; recomputation reuses it). */
typedef struct {
    const float *key;        /* the record's logits */
    int32_t *cnt;            /* [size*(E+1)]: each source's capacity, then its rows per expert */
    int32_t *start;          /* [El+1]: this rank's experts' rows, expert-major */
    float *xe, *gu, *h;      /* received rows: inputs [D], gate|up [2F], SwiGLU [F] */
    size_t rows, room;       /* rows received; rows allocated */
} ep_rec;

struct moe_ep {
    weft_comm *g;
    weft_comm *rep;          /* the ranks holding the same experts (train_moe_split) */
    int eval;                /* forward only, no capacity (train_moe_ep_set_eval) */
    int local;               /* the expert weights hold this rank's experts only */
    int size, rank, first, E, El;
    float skew;
    int lie;
    ep_rec *rec;
    int nrec, caprec;
    float *stage, *back;     /* rows source-major: as received, and to send */
    float *dy, *dh, *dgu;    /* backward's expert-major scratch */
    size_t room;             /* rows in each of those */
    float *out;              /* the rows or output gradients the layer sends */
    size_t out_room;         /* floats in out */
    size_t *sc, *sd, *rc, *rd;
    int32_t *hdr;
    moe_ep_count n;
};

int train_moe_ep_open(moe_ep **out, weft_comm *group, int experts, int first, float skew,
                      int lie)
{
    if (!out || experts < 1)
        return WEFT_EINVAL;
    moe_ep *p = calloc(1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    p->g = group;
    p->size = group ? weft_comm_size(group) : 1;
    p->rank = group ? weft_comm_rank(group) : 0;
    p->first = first;
    p->E = experts;
    p->El = experts / p->size;
    p->skew = skew;
    p->lie = lie;
    size_t G = (size_t)p->size;
    p->sc = calloc(4 * G, sizeof(size_t));
    p->hdr = calloc((size_t)experts + 1, sizeof(int32_t));
    if (!p->sc || !p->hdr || experts % p->size) {
        int rc = experts % p->size ? WEFT_EINVAL : WEFT_ENOMEM;
        p->g = NULL; /* the caller keeps its group on failure */
        train_moe_ep_free(p);
        return rc;
    }
    p->sd = p->sc + G;
    p->rc = p->sd + G;
    p->rd = p->rc + G;
    *out = p;
    return 0;
}

void train_moe_ep_free(moe_ep *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nrec; i++) {
        ep_rec *r = &p->rec[i];
        free(r->cnt);
        free(r->xe);
        free(r->gu);
        free(r->h);
    }
    free(p->rec);
    if (p->g) {
        weft_mem_free(p->g, p->stage);
        weft_mem_free(p->g, p->back);
        weft_mem_free(p->g, p->dy);
        weft_mem_free(p->g, p->out);
    }
    free(p->dh);
    free(p->dgu);
    free(p->sc);
    free(p->hdr);
    if (p->g)
        weft_comm_destroy(p->g);
    if (p->rep)
        weft_comm_destroy(p->rep);
    free(p);
}

void train_moe_ep_set_eval(moe_ep *p, int on)
{
    if (p)
        p->eval = on != 0;
}

int train_moe_ep_eval(const moe_ep *p)
{
    return p ? p->eval : 0;
}

void train_moe_ep_set_split(moe_ep *p, weft_comm *replicas)
{
    p->local = 1;
    p->rep = replicas;
}

weft_comm *train_moe_ep_replicas(const moe_ep *p)
{
    return p ? p->rep : NULL;
}

weft_comm *train_moe_ep_group(const moe_ep *p)
{
    return p ? p->g : NULL;
}

int train_moe_ep_allreduce(moe_ep *p, double *v)
{
    return p && p->g ? weft_allreduce(p->g, v, v, 1, WEFT_F64, WEFT_SUM) : 0;
}

int train_moe_ep_size(const moe_ep *p)
{
    return p ? p->size : 1;
}

void train_moe_ep_skew(const moe_ep *p, float *logits, int N, int E)
{
    if (!p || p->skew == 0.0f)
        return;
    for (int t = 0; t < N; t++) {
        logits[(size_t)t * E] += p->skew;
        if (E > 1)
            logits[(size_t)t * E + 1] += 0.5f * p->skew;
    }
}

void train_moe_ep_counters(const moe_ep *p, moe_ep_count *out)
{
    static const moe_ep_count none;
    *out = p ? p->n : none;
}

void train_moe_ep_copied(moe_ep *p, size_t bytes)
{
    if (p)
        p->n.copied += bytes;
}

/* n floats at *buf, grown (contents dropped) when short; at least one so
 * that an empty block still has an address. */
static int room(float **buf, size_t n)
{
    float *b = realloc(*buf, sizeof(float) * (n ? n : 1));
    if (!b)
        return WEFT_ENOMEM;
    *buf = b;
    return 0;
}

/* The same, a buffer sent from: weft_mem_alloc's on the group. */
static int sent_room(moe_ep *p, float **buf, size_t n)
{
    void *b = NULL;
    int rc = weft_mem_free(p->g, *buf);
    *buf = NULL;
    if (rc || (rc = weft_mem_alloc(p->g, sizeof(float) * (n ? n : 1), &b)) != 0)
        return rc;
    *buf = b;
    return 0;
}

/* Rows to make room for when n do not fit: half as many again, as the
 * rows a rank takes move from step to step with the routing, and each
 * new region is a new mapping for every peer */
static size_t ahead(size_t n) { return n + n / 2; }

static int scratch(moe_ep *p, size_t rows, const moe_dims *d)
{
    if (rows <= p->room && p->stage)
        return 0;
    size_t D = (size_t)d->D, F = (size_t)d->F;
    rows = ahead(rows);
    int rc = sent_room(p, &p->stage, rows * D);
    rc = rc ? rc : sent_room(p, &p->back, rows * D);
    rc = rc ? rc : sent_room(p, &p->dy, rows * D);
    rc = rc ? rc : room(&p->dh, rows * F);
    rc = rc ? rc : room(&p->dgu, rows * 2 * F);
    if (rc == 0)
        p->room = rows;
    return rc;
}

float *train_moe_ep_send_rows(moe_ep *p, size_t n, size_t w, int *rc)
{
    *rc = 0;
    if ((n * w > p->out_room || !p->out) && (*rc = sent_room(p, &p->out, ahead(n) * w)) == 0)
        p->out_room = ahead(n) * w;
    return *rc ? NULL : p->out;
}

/* The record of a (found, or added empty). */
static ep_rec *record(moe_ep *p, const moe_acts *a)
{
    for (int i = 0; i < p->nrec; i++)
        if (p->rec[i].key == a->logits)
            return &p->rec[i];
    if (p->nrec == p->caprec) {
        int cap = p->caprec ? 2 * p->caprec : 8;
        ep_rec *r = realloc(p->rec, sizeof *r * (size_t)cap);
        if (!r)
            return NULL;
        p->rec = r;
        p->caprec = cap;
    }
    ep_rec *r = &p->rec[p->nrec];
    memset(r, 0, sizeof *r);
    size_t n = (size_t)p->size * (size_t)(p->E + 1) + (size_t)p->El + 1;
    if (!(r->cnt = calloc(n, sizeof(int32_t))))
        return NULL;
    r->start = r->cnt + (size_t)p->size * (size_t)(p->E + 1);
    r->key = a->logits;
    p->nrec++;
    return r;
}

/* Every source's figures against the others': the same capacity as the
 * group's rank 0, and no count past it or below zero. Every rank holds
 * the same table, so every rank finds the same fault. */
static int check_counts(const moe_ep *p, const int32_t *cnt, const moe_dims *d)
{
    int E = p->E, cap0 = cnt[0];
    for (int s = 0; s < p->size; s++) {
        const int32_t *c = cnt + (size_t)s * (E + 1);
        if (c[0] != cap0) {
            log_msg(LOG_ERROR, LOG_ERROR, p->first + p->rank,
                    "experts: data-parallel ranks %d and %d disagree on the expert capacity "
                    "(%d and %d tokens an expert for %d tokens): every rank must compute it "
                    "from the same global figures", p->first, p->first + s, cap0, c[0], d->N);
            return WEFT_EMISMATCH;
        }
        for (int e = 0; e < E; e++)
            if (c[1 + e] < 0 || c[1 + e] > c[0]) {
                log_msg(LOG_ERROR, LOG_ERROR, p->first + p->rank,
                        "experts: data-parallel rank %d sends %d tokens to expert %d, past the "
                        "capacity %d that rank %d holds too", p->first + s, c[1 + e], e, c[0],
                        p->first);
                return WEFT_EMISMATCH;
            }
    }
    return 0;
}

/* The all-to-all-v's counts and displacements (floats of width w a row):
 * to each rank its experts' rows of ours (a->start), from each source its
 * rows for our experts (the table). Returns the rows received. */
static size_t plan(moe_ep *p, const int32_t *start, const int32_t *cnt, size_t w)
{
    int El = p->El, E = p->E;
    size_t in = 0;
    for (int j = 0; j < p->size; j++) {
        p->sd[j] = (size_t)start[j * El] * w;
        p->sc[j] = (size_t)(start[(j + 1) * El] - start[j * El]) * w;
        size_t rows = 0;
        for (int e = 0; e < El; e++)
            rows += (size_t)cnt[(size_t)j * (E + 1) + 1 + (size_t)p->rank * El + e];
        p->rd[j] = in * w;
        p->rc[j] = rows * w;
        in += rows;
    }
    return in;
}

/* Rows between source-major (src: from each source its rows for our
 * experts, expert by expert) and expert-major (each expert's rows, source
 * by source); back: the other way. */
static void regroup(moe_ep *p, const ep_rec *r, const float *src, float *dst, size_t w,
                    int back)
{
    int El = p->El, E = p->E;
    size_t at = 0;
    for (int s = 0; s < p->size; s++) {
        const int32_t *c = r->cnt + (size_t)s * (E + 1) + 1 + (size_t)p->rank * El;
        for (int e = 0; e < El; e++) {
            size_t before = 0; /* this expert's rows of earlier sources */
            for (int q = 0; q < s; q++)
                before += (size_t)r->cnt[(size_t)q * (E + 1) + 1 + (size_t)p->rank * El + e];
            size_t n = (size_t)c[e] * w, x = ((size_t)r->start[e] + before) * w;
            if (back)
                memcpy(dst + at, src + x, sizeof(float) * n);
            else
                memcpy(dst + x, src + at, sizeof(float) * n);
            at += n;
        }
    }
    p->n.copied += sizeof(float) * at;
}

static int exchange(moe_ep *p, const float *send, float *recv, int reverse)
{
    double t0 = clock_now();
    int rc = reverse ? weft_alltoallv(p->g, send, p->rc, p->rd, recv, p->sc, p->sd, WEFT_F32)
                     : weft_alltoallv(p->g, send, p->sc, p->sd, recv, p->rc, p->rd, WEFT_F32);
    p->n.seconds += clock_now() - t0;
    for (int j = 0; j < p->size; j++)
        if (j != p->rank)
            p->n.bytes += sizeof(float) * (reverse ? p->rc[j] : p->sc[j]);
    return rc;
}

/* The group's rows per expert of this call, for the counters. */
static void count_rows(moe_ep *p, const int32_t *cnt)
{
    int64_t mx = 0, all = 0;
    for (int e = 0; e < p->E; e++) {
        int64_t n = 0;
        for (int s = 0; s < p->size; s++)
            n += cnt[(size_t)s * (p->E + 1) + 1 + e];
        mx = n > mx ? n : mx;
        all += n;
    }
    p->n.rows_max += mx;
    p->n.rows += all;
    p->n.calls++;
}

static int grow_record(ep_rec *r, size_t rows, const moe_dims *d)
{
    if (rows <= r->room && r->xe)
        return 0;
    size_t D = (size_t)d->D, F = (size_t)d->F;
    int rc = room(&r->xe, rows * D);
    rc = rc ? rc : room(&r->gu, rows * 2 * F);
    rc = rc ? rc : room(&r->h, rows * F);
    if (rc == 0)
        r->room = rows;
    return rc;
}

int train_moe_ep_forward(moe_ep *p, mm_ctx *mm, const moe_dims *d, moe_acts *a,
                         const float *xe, const float *wgu, const float *wd)
{
    int E = p->E, El = p->El, rc;
    size_t D = (size_t)d->D;
    ep_rec *r = record(p, a);
    if (!r)
        return WEFT_ENOMEM;
    /* an evaluation keeps every row: no capacity to agree on (each rank's
     * micro-batch may be shorter at the end of the set) */
    p->hdr[0] = (p->eval ? EVAL_CAP : d->cap) + (p->lie ? 1 : 0);
    for (int e = 0; e < E; e++)
        p->hdr[1 + e] = a->start[e + 1] - a->start[e];
    if ((rc = weft_allgather(p->g, p->hdr, r->cnt, (size_t)E + 1, WEFT_I32)) != 0)
        return rc;
    if ((rc = check_counts(p, r->cnt, d)) != 0)
        return rc;
    count_rows(p, r->cnt);
    r->rows = plan(p, a->start, r->cnt, D);
    /* this rank's experts' rows, expert-major, source by source */
    r->start[0] = 0;
    for (int e = 0; e < El; e++) {
        int32_t n = 0;
        for (int s = 0; s < p->size; s++)
            n += r->cnt[(size_t)s * (E + 1) + 1 + (size_t)p->rank * El + e];
        r->start[e + 1] = r->start[e] + n;
    }
    if ((rc = grow_record(r, r->rows, d)) != 0 || (rc = scratch(p, r->rows, d)) != 0)
        return rc;
    /* one expert a rank: the rows arrive expert-major already, and leave
     * from where the expert wrote them */
    int one = El == 1;
    if ((rc = exchange(p, xe, one ? r->xe : p->stage, 0)) != 0)
        return rc;
    if (!one)
        regroup(p, r, p->stage, r->xe, D, 0);
    train_moe_experts_forward(mm, d, p->local ? 0 : p->rank * El, El, r->start, r->xe, r->gu,
                              r->h, p->dy, wgu, wd);
    if (!one)
        regroup(p, r, p->dy, p->back, D, 1);
    return exchange(p, one ? p->dy : p->back, a->ye, 1);
}

int train_moe_ep_backward(moe_ep *p, mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                          moe_scratch *s, const float *dye, float *dwgu, float *dwd,
                          const float *wgu, const float *wd)
{
    size_t D = (size_t)d->D;
    ep_rec *r = record(p, a);
    if (!r || !r->xe)
        return r ? WEFT_EINVAL : WEFT_ENOMEM; /* backward without its forward */
    plan(p, a->start, r->cnt, D);
    int one = p->El == 1; /* as forward: no regrouping */
    int rc = scratch(p, r->rows, d);
    rc = rc ? rc : exchange(p, dye, one ? p->dy : p->stage, 0);
    if (rc)
        return rc;
    if (!one)
        regroup(p, r, p->stage, p->dy, D, 0);
    /* the input gradients land in stage (free again) */
    train_moe_experts_backward(mm, d, p->local ? 0 : p->rank * p->El, p->El, r->start, p->dy,
                               r->xe, r->gu, r->h, p->dh, p->dgu, p->stage, dwgu, dwd, wgu, wd);
    if (!one)
        regroup(p, r, p->stage, p->back, D, 1);
    return exchange(p, one ? p->stage : p->back, s->dxe, 1);
}
