/* ZeRO shards that outlive their rank. At every step boundary each rank
 * sends its shards (parameters and optimiser state, stages 1-3) to the
 * next rank of the ring and keeps the previous rank's; two generations
 * are kept because a rank that died can leave the survivors one step
 * apart (one finished the step's exchanges, another did not), and they
 * then go back to the older one. After a failure each survivor writes its
 * own shards, and those of a dead previous rank, into a whole-state
 * buffer that an all-reduce over the survivors completes; a new weft_zero
 * of any world size takes its shards from there. */
#include "train/zero_impl.h"

#include <stdlib.h>
#include <string.h>

struct weft_zero_replicas {
    int world, rank, nb, nstate;
    size_t n;            /* floats of the flat buffer */
    size_t *lo, *len;    /* per bucket */
    size_t cnt[2];       /* floats of one state: this rank's shards, the previous rank's */
    float *buf[2][2];    /* [generation slot][own, previous rank's] */
    int64_t gen[2], steps[2];
};

/* Bucket k's part owned by rank q: its count, and its offset in *off. */
static size_t part(const weft_zero_replicas *r, int k, int q, size_t *off)
{
    size_t S = r->len[k] / (size_t)r->world, tail = r->len[k] - S * (size_t)r->world;
    *off = r->lo[k] + S * (size_t)q;
    return S + (q == r->world - 1 ? tail : 0);
}

static size_t shard_count(const weft_zero_replicas *r, int q)
{
    size_t c = 0, off;
    for (int k = 0; k < r->nb; k++)
        c += part(r, k, q, &off);
    return c;
}

static int prev_rank(const weft_zero_replicas *r, int q)
{
    return (q + r->world - 1) % r->world;
}

void weft_zero_replicas_free(weft_zero_replicas *r)
{
    if (!r)
        return;
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < 2; j++)
            free(r->buf[s][j]);
    free(r->lo);
    free(r->len);
    free(r);
}

void train_zero_replicas_drop(weft_zero *z)
{
    weft_zero_replicas_free(z->rep);
    z->rep = NULL;
}

static int replicas_new(const weft_zero *z, weft_zero_replicas **out)
{
    weft_zero_replicas *r = calloc(1, sizeof *r);
    if (!r)
        return WEFT_ENOMEM;
    r->world = z->world;
    r->rank = z->rank;
    r->nb = z->nb;
    r->n = z->n;
    r->nstate = weft_optim_state_count(weft_zero_optim((weft_zero *)z));
    r->gen[0] = r->gen[1] = -1;
    r->lo = malloc((size_t)z->nb * sizeof *r->lo);
    r->len = malloc((size_t)z->nb * sizeof *r->len);
    int ok = r->lo && r->len;
    for (int k = 0; ok && k < z->nb; k++) {
        r->lo[k] = z->b[k].lo;
        r->len[k] = z->b[k].n;
    }
    if (ok) {
        r->cnt[0] = shard_count(r, r->rank);
        r->cnt[1] = shard_count(r, prev_rank(r, r->rank));
    }
    for (int s = 0; ok && s < 2; s++)
        for (int j = 0; ok && j < 2; j++)
            ok = (r->buf[s][j] = malloc(((size_t)r->nstate + 1) * r->cnt[j] * sizeof(float) + 1)) !=
                 NULL;
    if (!ok) {
        weft_zero_replicas_free(r);
        return WEFT_ENOMEM;
    }
    *out = r;
    return 0;
}

/* This rank's shards, state by state (parameters first), bucket by bucket. */
static void pack(weft_zero *z, float *dst)
{
    float *p = weft_model_params(z->model, NULL);
    for (int v = 0; v <= z->rep->nstate; v++)
        for (int k = 0; k < z->nb; k++) {
            const zbucket *b = &z->b[k];
            if (!b->mcnt)
                continue;
            const float *src = v == 0 ? p + b->mlo : weft_optim_state(b->opt, v - 1, NULL);
            memcpy(dst, src, b->mcnt * sizeof *dst);
            dst += b->mcnt;
        }
}

static void unpack(const weft_zero_replicas *r, int q, const float *src, float *full)
{
    for (int v = 0; v <= r->nstate; v++)
        for (int k = 0; k < r->nb; k++) {
            size_t off, c = part(r, k, q, &off);
            memcpy(full + (size_t)v * r->n + off, src, c * sizeof *src);
            src += c;
        }
}

int weft_zero_replicate(weft_zero *z, int64_t gen)
{
    int rc;
    if (!z || gen < 0)
        return WEFT_EINVAL;
    if (z->stage == 0 || !z->comm || z->world < 2)
        return 0; /* stage 0: every rank holds everything */
    if (!z->rep && (rc = replicas_new(z, &z->rep)))
        return rc;
    weft_zero_replicas *r = z->rep;
    int s = (int)(gen & 1), next = (z->rank + 1) % z->world;
    weft_request *rq[2] = { NULL, NULL };
    r->gen[s] = -1; /* the slot held gen - 2, which nobody needs now */
    pack(z, r->buf[s][0]);
    size_t mine = ((size_t)r->nstate + 1) * r->cnt[0], theirs = ((size_t)r->nstate + 1) * r->cnt[1];
    rc = theirs ? weft_irecv(z->comm, r->buf[s][1], theirs, WEFT_F32, prev_rank(r, z->rank), &rq[0])
                : 0;
    if (rc == 0 && mine)
        rc = weft_isend(z->comm, r->buf[s][0], mine, WEFT_F32, next, &rq[1]);
    for (int j = 0; j < 2; j++)
        if (rq[j]) {
            int w = weft_wait(rq[j]);
            rc = rc ? rc : w;
        }
    if (rc == 0) {
        r->gen[s] = gen;
        r->steps[s] = weft_optim_steps(weft_zero_optim(z));
    }
    return rc;
}

int weft_zero_take_replicas(weft_zero *z, weft_zero_replicas **out)
{
    if (!z || !out)
        return WEFT_EINVAL;
    *out = z->rep;
    z->rep = NULL;
    return 0;
}

int weft_zero_replicas_world(const weft_zero_replicas *r)
{
    return r ? r->world : WEFT_EINVAL;
}

int weft_zero_replicas_export(const weft_zero_replicas *r, int64_t gen, const unsigned char *gone,
                              float *full, int64_t *steps)
{
    if (!r || !gone || !full || gen < 0 || gone[r->rank])
        return WEFT_EINVAL;
    int s = r->gen[0] == gen ? 0 : r->gen[1] == gen ? 1 : -1;
    if (s < 0)
        return WEFT_EINVAL;
    /* rank q's only copy beside its own is on q + 1 */
    for (int q = 0; q < r->world; q++)
        if (gone[q] && gone[(q + 1) % r->world])
            return WEFT_ENOTSUP;
    unpack(r, r->rank, r->buf[s][0], full);
    int p = prev_rank(r, r->rank);
    if (gone[p])
        unpack(r, p, r->buf[s][1], full);
    if (steps)
        *steps = r->steps[s];
    return 0;
}

size_t weft_zero_full_count(const weft_zero *z)
{
    if (!z)
        return 0;
    return z->n * (1 + (size_t)weft_optim_state_count(weft_zero_optim((weft_zero *)z)));
}

int weft_zero_import(weft_zero *z, const float *full, int64_t steps)
{
    if (!z || !full)
        return WEFT_EINVAL;
    float *p = weft_model_params(z->model, NULL);
    memcpy(p, full, z->n * sizeof *p);
    int ns = weft_optim_state_count(weft_zero_optim(z));
    if (z->stage == 0) {
        for (int i = 0; i < ns; i++)
            memcpy(weft_optim_state(z->opt, i, NULL), full + (size_t)(i + 1) * z->n,
                   z->n * sizeof *p);
        return weft_optim_set_steps(z->opt, steps);
    }
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        if (!b->opt)
            continue;
        for (int i = 0; i < ns; i++)
            memcpy(weft_optim_state(b->opt, i, NULL), full + (size_t)(i + 1) * z->n + b->mlo,
                   b->mcnt * sizeof *p);
        int rc = weft_optim_set_steps(b->opt, steps);
        if (rc)
            return rc;
    }
    z->gathered = 1; /* the whole buffer is valid until the step releases it */
    return 0;
}
