/* DiLoCo's outer step in fragments (Streaming DiLoCo), optionally across
 * clusters and compressed. Each fragment keeps its own anchor (theta_old),
 * outer momentum and compressor, since error feedback and PowerSGD's warm
 * start belong to the numbers they compress.
 *
 * Across clusters (hier) the ranks of one cluster hold the same model
 * after their full sync, so the inner reduce-scatter of a hierarchical
 * all-reduce would average identical copies: it is skipped. Rank i of each
 * cluster takes slice i of the pseudo-gradient and reduces it with rank i
 * of the other clusters (one communicator per local index), so every rank
 * is a gateway for 1/L of the data and a cluster sends one copy across in
 * all, the minimum; an all-gather inside puts the slices together. Cluster
 * leaders and a broadcast would send as much per cluster but all of it
 * through one rank's links. PowerSGD is the exception: a slice would cut
 * its matrices, so rank 0 of each cluster reduces the whole fragment and
 * broadcasts it inside.
 *
 * Overlap: a fragment's pseudo-gradient is taken at its step and reduced
 * by a thread on the outer communicator (which nothing else uses) while the
 * inner steps go on; T steps later the outer Nesterov step runs on the
 * result and the fragment becomes mix * local + (1 - mix) * global, the
 * mixing of Streaming DiLoCo (Douillard et al. 2025), which keeps the T
 * steps of local progress in part instead of throwing them away. */
#include "sync_outer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

typedef struct {
    size_t off, len;      /* the fragment in the flat parameters */
    size_t slice, lo, cnt; /* this rank's part: [lo, lo + cnt) of the fragment,
                             padded to slice */
    long phase;           /* its outer step when steps % H == phase */
    long due;             /* steps at which the reduction in flight merges; 0: none */
    long began;           /* steps at which the reduction in flight was taken */
    long synced;          /* steps when every rank last had the same fragment */
    weft_compressor *z;   /* NULL: fp32 all-reduce */
    weft_comm *comm;      /* its reductions' (own when several are in flight at once) */
    int own_comm;
    uint64_t sent;        /* z's bytes when nothing is in flight */
    float *anchor, *vel;  /* len */
    float *d;             /* slice: this rank's part of the pseudo-gradient */
    float *g;             /* hier: the L slices gathered */
    pthread_t th;
    int threaded, rc;
    struct outer_sync *o;
} frag;

struct outer_sync {
    weft_comm *outer, *inner; /* inner NULL: flat */
    int own_outer;
    weft_model *m;
    int L, li;
    int leader;   /* hier with PowerSGD: rank 0 of a cluster carries it all */
    frag *f;
    int nf;
    long period;
    int tau;
    float lr, mu, mix;
    float weight; /* of this rank's pseudo-gradient in the next outer step */
    uint64_t across, inside;
    weft_compress_spec spec;
    int compressed;
    outer_times t;
};

void outer_time(const outer_sync *o, outer_times *t)
{
    static const outer_times none;
    *t = o ? o->t : none;
}

weft_comm *outer_inner_comm(const outer_sync *o)
{
    return o ? o->inner : NULL;
}

void outer_bytes(const outer_sync *o, uint64_t *across, uint64_t *inside)
{
    uint64_t a = o ? o->across : 0;
    for (int i = 0; o && i < o->nf; i++)
        a += o->f[i].sent;
    if (across)
        *across = a;
    if (inside)
        *inside = o ? o->inside : 0;
}

void outer_destroy(outer_sync *o)
{
    if (!o)
        return;
    for (int i = 0; o->f && i < o->nf; i++) {
        frag *f = &o->f[i];
        if (f->threaded)
            pthread_join(f->th, NULL);
        weft_compressor_destroy(f->z);
        if (f->own_comm)
            weft_comm_destroy(f->comm);
        free(f->anchor);
        free(f->vel);
        free(f->d);
        free(f->g);
    }
    free(o->f);
    if (o->inner)
        weft_comm_destroy(o->inner);
    if (o->own_outer)
        weft_comm_destroy(o->outer);
    free(o);
}

/* Fragments of equal size, cut where the count falls rather than at
 * tensor boundaries: one tensor may hold most of a small model. */
static int cut(outer_sync *o, size_t n)
{
    if ((size_t)o->nf > n)
        return WEFT_EINVAL;
    for (int k = 0; k < o->nf; k++) {
        o->f[k].off = n * (size_t)k / (size_t)o->nf;
        o->f[k].len = n * (size_t)(k + 1) / (size_t)o->nf - o->f[k].off;
    }
    return 0;
}

/* PowerSGD: the 2-D tensors lying wholly in this rank's slice. */
static int add_matrices(outer_sync *o, frag *f)
{
    size_t lo = f->off + f->lo, hi = lo + f->cnt;
    for (int t = 0, nt = weft_model_tensor_count(o->m); t < nt; t++) {
        weft_tensor_info ti;
        int rc = weft_model_tensor_info(o->m, t, &ti);
        if (rc)
            return rc;
        if (ti.ndim == 2 && ti.offset >= lo && ti.offset + ti.numel <= hi &&
            (rc = weft_compressor_add_matrix(f->z, ti.offset - lo, ti.shape[0], ti.shape[1])))
            return rc;
    }
    return 0;
}

static int frag_open(outer_sync *o, frag *f, const weft_sync_config *cfg, const float *p)
{
    size_t L = (size_t)o->L;
    f->o = o;
    f->slice = o->leader ? f->len : (f->len + L - 1) / L;
    f->lo = o->leader ? 0 : f->slice * (size_t)o->li;
    f->cnt = f->lo >= f->len ? 0 : f->len - f->lo < f->slice ? f->len - f->lo : f->slice;
    if (o->leader && o->li)
        f->cnt = 0;
    if (!(f->anchor = malloc(f->len * sizeof(float))) || !(f->vel = calloc(f->len, sizeof(float))) ||
        !(f->d = calloc(f->slice, sizeof(float))) ||
        (o->inner && !o->leader && !(f->g = malloc(f->slice * L * sizeof(float)))))
        return WEFT_ENOMEM;
    memcpy(f->anchor, p + f->off, f->len * sizeof(float));
    f->comm = o->outer;
    /* T > H/F: the next fragment's reduction starts before this one's
     * lands, and two collectives may not share a communicator */
    int rc = 0;
    if (o->tau > o->period / o->nf) {
        if ((rc = weft_comm_split(o->outer, 0, weft_comm_rank(o->outer), &f->comm)))
            return rc;
        f->own_comm = 1;
    }
    if (!cfg->compressed || !f->cnt || weft_comm_size(o->outer) < 2)
        return 0;
    rc = weft_compressor_create(&f->z, f->comm, &cfg->compress, f->cnt);
    return rc ? rc : add_matrices(o, f);
}

/* Every member of an outer communicator must hold the same slice. */
static int split_clusters(outer_sync *o, weft_comm *c)
{
    int me = weft_comm_rank(c), rc;
    if ((rc = weft_comm_split(c, weft_comm_cluster_of(c, me), me, &o->inner)))
        return rc;
    o->L = weft_comm_size(o->inner);
    o->li = weft_comm_rank(o->inner);
    int32_t sz[2] = { o->L, -o->L };
    if ((rc = weft_allreduce(c, sz, sz, 2, WEFT_I32, WEFT_MAX)))
        return rc;
    if (sz[0] != -sz[1])
        return WEFT_ENOTSUP;
    o->own_outer = 1;
    return weft_comm_split(c, o->li, me, &o->outer);
}

int outer_create(outer_sync **out, weft_comm *c, weft_model *m, const weft_sync_config *cfg)
{
    size_t n;
    const float *p = weft_model_params(m, &n);
    int rc = 0;
    outer_sync *o = calloc(1, sizeof *o);
    *out = NULL;
    if (!o)
        return WEFT_ENOMEM;
    o->m = m;
    o->nf = cfg->fragments > 0 ? cfg->fragments : 1;
    o->period = cfg->period;
    o->tau = cfg->overlap;
    o->lr = cfg->outer_lr;
    o->mu = cfg->outer_momentum;
    o->mix = cfg->mix;
    o->weight = cfg->weight > 0 ? cfg->weight : 1; /* uneven shares: tokens seen */
    o->spec = cfg->compress;
    o->compressed = cfg->compressed;
    o->outer = c;
    o->L = 1;
    o->leader = cfg->hier && cfg->compressed && cfg->compress.kind == WEFT_COMPRESS_POWERSGD;
    if (cfg->hier)
        rc = split_clusters(o, c);
    else if (o->tau > 0 && (rc = weft_comm_split(c, 0, weft_comm_rank(c), &o->outer)) == 0)
        o->own_outer = 1; /* the background thread's own */
    if (rc == 0 && !(o->f = calloc((size_t)o->nf, sizeof *o->f)))
        rc = WEFT_ENOMEM;
    if (rc == 0)
        rc = cut(o, n);
    for (int k = 0; rc == 0 && k < o->nf; k++) {
        o->f[k].phase = (long)((k + 1) * o->period / o->nf) % o->period;
        rc = frag_open(o, &o->f[k], cfg, p);
    }
    if (rc) {
        outer_destroy(o);
        return rc;
    }
    *out = o;
    return 0;
}

static int reduce(frag *f)
{
    outer_sync *o = f->o;
    if (!f->cnt || weft_comm_size(o->outer) < 2)
        return 0;
    if (f->z)
        return weft_compressor_allreduce(f->z, f->d, WEFT_AVG);
    return weft_allreduce(f->comm, f->d, f->d, f->cnt, WEFT_F32, WEFT_AVG);
}

static void *reduce_thread(void *arg)
{
    frag *f = arg;
    f->rc = reduce(f);
    return NULL;
}

/* The outer step on the reduced pseudo-gradient d (torch.optim.SGD with
 * nesterov=True, as diloco:H): one loop for the reduction's step and a
 * replay's (outer_replay), so that both round alike. */
static void nesterov(const outer_sync *o, frag *f, const float *d, float *x, int mixed)
{
    float mu = o->mu, lr = o->lr, *v = f->vel, *a = f->anchor;
    for (size_t i = 0; i < f->len; i++) {
        v[i] = mu * v[i] + d[i];
        a[i] -= lr * (d[i] + mu * v[i]);
        x[i] = mixed ? o->mix * x[i] + (1 - o->mix) * a[i] : a[i];
    }
}

static int merge_timed(outer_sync *o, frag *f, float *p, int mixed)
{
    const float *d = f->d;
    uint64_t raw;
    if (f->z) /* the reduction is over: its bytes may be read */
        weft_compressor_bytes(f->z, &f->sent, &raw);
    float *x = p + f->off;
    if (o->inner && o->leader) {
        int rc = weft_broadcast(o->inner, f->d, f->len, WEFT_F32, 0);
        if (rc)
            return rc;
        o->inside += o->li ? 0 : (uint64_t)(o->L - 1) * f->len * sizeof(float);
    } else if (o->inner) {
        int rc = weft_allgather(o->inner, f->d, f->g, f->slice, WEFT_F32);
        if (rc)
            return rc;
        o->inside += (uint64_t)(o->L - 1) * f->slice * sizeof(float);
        d = f->g;
    }
    nesterov(o, f, d, x, mixed);
    return 0;
}

static int merge(outer_sync *o, frag *f, float *p, int mixed)
{
    double t0 = clock_now();
    int rc = merge_timed(o, f, p, mixed);
    o->t.apply_s += clock_now() - t0;
    return rc;
}

/* Blocking: the time the inner steps stand still for the WAN. */
static int reduce_blocking(outer_sync *o, frag *f)
{
    double t0 = clock_now();
    int rc = reduce(f);
    o->t.wait_s += clock_now() - t0;
    return rc;
}

/* This rank's slice of the fragment's pseudo-gradient, weighed. */
static void pseudo_gradient(outer_sync *o, frag *f, const float *p)
{
    for (size_t k = 0; k < f->cnt; k++)
        f->d[k] = f->anchor[f->lo + k] - p[f->off + f->lo + k];
    for (size_t k = 0; o->weight != 1 && k < f->cnt; k++)
        f->d[k] *= o->weight;
    if (!f->z && weft_comm_size(o->outer) > 1)
        o->across += f->cnt * sizeof(float); /* here, not in the thread */
}

static int start(outer_sync *o, frag *f, float *p, long steps, int tau)
{
    double t0 = clock_now();
    pseudo_gradient(o, f, p);
    if (tau == 0) {
        o->t.post_s += clock_now() - t0;
        int rc = reduce_blocking(o, f);
        if (rc == 0 && (rc = merge(o, f, p, 0)) == 0)
            f->synced = steps;
        return rc;
    }
    f->due = steps + tau;
    f->began = steps;
    f->rc = 0;
    f->threaded = pthread_create(&f->th, NULL, reduce_thread, f) == 0;
    o->t.post_s += clock_now() - t0;
    if (!f->threaded)
        f->rc = reduce_blocking(o, f); /* no thread to be had: the same result, late */
    return 0;
}

/* mixed 0: no inner step since the pseudo-gradient was taken, so the
 * result is the blocking outer step's and every rank has the fragment. */
static int land(outer_sync *o, frag *f, float *p, int mixed)
{
    double t0 = clock_now();
    if (f->threaded)
        pthread_join(f->th, NULL);
    o->t.wait_s += clock_now() - t0;
    f->threaded = 0;
    f->due = 0;
    return f->rc ? f->rc : merge(o, f, p, mixed);
}

int outer_after_step(outer_sync *o, long steps)
{
    size_t n;
    float *p = weft_model_params(o->m, &n);
    int rc = 0;
    for (int k = 0; rc == 0 && k < o->nf; k++)
        if (o->f[k].due == steps)
            rc = land(o, &o->f[k], p, 1);
    for (int k = 0; rc == 0 && k < o->nf; k++)
        if (steps % o->period == o->f[k].phase)
            rc = start(o, &o->f[k], p, steps, o->tau);
    return rc;
}

/* The last outer step of the fragments in ns (n of them) as one
 * reduction: the bytes of one per fragment, the crossings of one. Only
 * where nothing rides from one call to the next (fp32 or a codec: no error
 * feedback or warm start to keep per fragment). */
static int finish_together(outer_sync *o, frag **ns, int n, float *p, long steps)
{
    size_t total = 0, at = 0;
    double t0 = clock_now();
    for (int i = 0; i < n; i++) {
        pseudo_gradient(o, ns[i], p);
        total += ns[i]->cnt;
    }
    float *cat = malloc((total ? total : 1) * sizeof(float));
    weft_compressor *z = NULL;
    int rc = cat ? 0 : WEFT_ENOMEM;
    for (int i = 0; rc == 0 && i < n; at += ns[i]->cnt, i++)
        memcpy(cat + at, ns[i]->d, ns[i]->cnt * sizeof(float));
    o->t.post_s += clock_now() - t0;
    t0 = clock_now();
    if (rc == 0 && total && weft_comm_size(o->outer) > 1) {
        if (!o->compressed)
            rc = weft_allreduce(o->outer, cat, cat, total, WEFT_F32, WEFT_AVG);
        else if ((rc = weft_compressor_create(&z, o->outer, &o->spec, total)) == 0 &&
                 (rc = weft_compressor_allreduce(z, cat, WEFT_AVG)) == 0) {
            uint64_t sent, raw;
            weft_compressor_bytes(z, &sent, &raw);
            o->across += sent;
        }
    }
    o->t.wait_s += clock_now() - t0;
    weft_compressor_destroy(z);
    at = 0;
    for (int i = 0; rc == 0 && i < n; at += ns[i]->cnt, i++) {
        memcpy(ns[i]->d, cat + at, ns[i]->cnt * sizeof(float));
        if ((rc = merge(o, ns[i], p, 0)) == 0)
            ns[i]->synced = steps;
    }
    free(cat);
    return rc;
}

/* A fragment whose reduction was taken at the last step: its result is
 * the blocking outer step's, so it lands after the others' final reduction
 * when it has a communicator of its own, both crossing the WAN at once. */
static int lands_last(const outer_sync *o, const frag *f, long steps)
{
    return f->began == steps && f->comm != o->outer;
}

static int land_exact(outer_sync *o, frag *f, float *p, long steps)
{
    int exact = f->began == steps, rc = land(o, f, p, !exact);
    if (rc == 0 && exact)
        f->synced = steps;
    return rc;
}

int outer_finish(outer_sync *o, long steps)
{
    size_t n;
    float *p = weft_model_params(o->m, &n);
    int rc = 0, left = 0;
    for (int k = 0; k < o->nf; k++)
        if (o->f[k].due && !lands_last(o, &o->f[k], steps)) {
            int r = land_exact(o, &o->f[k], p, steps);
            rc = rc ? rc : r;
        }
    frag **ns = rc ? NULL : malloc((size_t)o->nf * sizeof *ns);
    for (int k = 0; rc == 0 && ns && k < o->nf; k++)
        if (o->f[k].synced != steps && !o->f[k].due)
            ns[left++] = &o->f[k];
    int together = left > 1 && !o->leader &&
                   (!o->compressed || o->spec.kind == WEFT_COMPRESS_CODEC);
    if (rc == 0 && !ns)
        rc = WEFT_ENOMEM;
    if (rc == 0 && together)
        rc = finish_together(o, ns, left, p, steps);
    for (int i = 0; rc == 0 && !together && i < left; i++)
        rc = start(o, ns[i], p, steps, 0);
    free(ns);
    /* joined even after a failure: no thread outlives the call */
    for (int k = 0; k < o->nf; k++)
        if (o->f[k].due) {
            int r = land_exact(o, &o->f[k], p, steps);
            rc = rc ? rc : r;
        }
    return rc;
}

void outer_export(const outer_sync *o, float *anchor, float *vel, long *synced)
{
    *synced = o->nf ? o->f[0].synced : 0;
    for (int k = 0; k < o->nf; k++) {
        const frag *f = &o->f[k];
        memcpy(anchor + f->off, f->anchor, f->len * sizeof(float));
        memcpy(vel + f->off, f->vel, f->len * sizeof(float));
        if (f->synced < *synced)
            *synced = f->synced;
    }
}

void outer_import(outer_sync *o, const float *anchor, const float *vel, long synced)
{
    for (int k = 0; k < o->nf; k++) {
        frag *f = &o->f[k];
        memcpy(f->anchor, anchor + f->off, f->len * sizeof(float));
        memcpy(f->vel, vel + f->off, f->len * sizeof(float));
        f->synced = synced;
    }
}

/* Flat only: there every rank reduces whole fragments, so d is the mean
 * itself (hier's d is a slice, PowerSGD's not the mean's numbers). */
static int replayable(const outer_sync *o)
{
    return o->inner || o->compressed ? WEFT_ENOTSUP : 0;
}

int outer_delta(const outer_sync *o, float *d)
{
    int rc = replayable(o);
    for (int k = 0; rc == 0 && k < o->nf; k++)
        memcpy(d + o->f[k].off, o->f[k].d, o->f[k].len * sizeof(float));
    return rc;
}

int outer_replay(outer_sync *o, const float *d, long synced)
{
    size_t n;
    float *p = weft_model_params(o->m, &n);
    int rc = replayable(o);
    for (int k = 0; rc == 0 && k < o->nf; k++) {
        frag *f = &o->f[k];
        if (f->due)
            return WEFT_EINVAL; /* a reduction in flight: not a blocking outer step */
        nesterov(o, f, d + f->off, p + f->off, 0);
        f->synced = synced;
    }
    return rc;
}

void outer_weigh(outer_sync *o, float w)
{
    o->weight = w;
}

void outer_abort(outer_sync *o)
{
    if (!o)
        return;
    if (o->inner)
        weft_comm_abort(o->inner);
    if (o->own_outer)
        weft_comm_abort(o->outer);
    for (int k = 0; o->f && k < o->nf; k++)
        if (o->f[k].own_comm)
            weft_comm_abort(o->f[k].comm);
}
