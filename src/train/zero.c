/* ZeRO: data parallelism with the training state sharded over the ranks.
 *
 * The flat buffer is cut into buckets of whole tensors (as the gradient
 * buckets of plain DP, from the end of the buffer, which backward finishes
 * first), and each bucket is sharded on its own, as FSDP shards each flat
 * parameter: of a bucket of m elements, rank r owns [r*S, r*S + S) with
 * S = m / p, and the last rank also owns the tail of m - p*S < p elements.
 * Reduce-scatter and all-gather then run in place on the engine's own
 * buffers with count S, which needs no padded copy, and the tail, fewer
 * than p floats, is all-reduced / broadcast apart. So any world size works.
 *
 *   stage 0  gradients all-reduced in buckets, overlapping backward; every
 *            rank updates everything.
 *   stage 1  as 0, but each rank keeps optimiser state only for its shards,
 *            updates them, and the parameters are all-gathered.
 *   stage 2  each bucket's gradients are reduce-scattered as soon as
 *            backward has finished them: a rank ends up with the reduced
 *            gradient of its shards only; clipping sums shard norms.
 *   stage 3  parameters too: between steps a rank's only valid copy is its
 *            shards (the rest of the buffer is cleared). Layer by layer
 *            (the default), buckets are the model's blocks: the model's
 *            parameter hook gathers a block's bucket just before forward
 *            or backward reads it, with the next one the last step needed
 *            in flight behind it (the order of needs is recorded, as FSDP
 *            records its forward order), and releases it right after; a
 *            bucket's gradients are released once their reduce-scatter is
 *            done, two buckets behind backward. Otherwise (pipelines, whose
 *            micro-batches would gather each block m times) everything is
 *            gathered before the step's first forward.
 *
 * Under expert parallelism with the experts divided (moe_split.h) the
 * experts' tensors have buckets of their own. At stage 1 each holder
 * updates its experts whole; from stage 2 such a bucket is sharded,
 * reduce-scattered and gathered over the experts' replicas (the ranks that
 * hold the same experts), as DeepSpeed's MoE shards an expert's state over
 * its expert-data-parallel group, and the rest over the engine's group: a
 * rank's part is its share of the replicas' experts plus its share of the
 * rest, each element still owned by exactly one rank of the job.
 *
 * The engine's forward and backward need whole flat buffers, so those stay
 * allocated, but what a rank does not own is handed back to the kernel
 * between steps (madvise MADV_DONTNEED on the whole pages inside it, which
 * then read as zeros): at stages 2-3 the gradient buffer after the update,
 * at stage 3 the other ranks' parameters. What stays resident between
 * steps is then the ZeRO formula's amount (weft_zero_memory measures it
 * with mincore); during forward/backward the full buffers are resident
 * again, as one transient copy of the model. */
#include "train/ckpt_stage.h"
#include "train/model.h"
#include "train/moe_split.h"
#include "train/zero_full.h"
#include "train/zero_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Zeroes [lo, hi) of x, returning its whole pages to the kernel. */
static void release(float *x, size_t lo, size_t hi)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)(x + lo),
              e = (uintptr_t)(x + hi), pa = (a + pg - 1) & ~(pg - 1), pe = e & ~(pg - 1);
    if (hi <= lo)
        return;
    if (pe <= pa || madvise((void *)pa, pe - pa, MADV_DONTNEED) != 0) {
        memset(x + lo, 0, (hi - lo) * sizeof *x);
        return;
    }
    memset((void *)a, 0, pa - a);
    memset((void *)pe, 0, e - pe);
}

/* Bytes of [x, x + n) in resident pages (whole pages counted). */
static size_t resident(const float *x, size_t n)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)x & ~(pg - 1),
              e = ((uintptr_t)(x + n) + pg - 1) & ~(pg - 1);
    size_t np = (e - a) / pg, r = 0;
    unsigned char *v = malloc(np ? np : 1);
    if (!v || mincore((void *)a, e - a, v) != 0) {
        free(v);
        return n * sizeof *x;
    }
    for (size_t i = 0; i < np; i++)
        r += v[i] & 1;
    free(v);
    return r * pg;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int launch_ready(weft_zero *z);

static void on_grads_ready(void *arg, int first, int count)
{
    weft_zero *z = arg;
    if (z->hold)
        return;
    for (int i = first; i < first + count; i++)
        z->b[z->bucket_of[i]].ready++;
    if (!z->err)
        z->err = launch_ready(z); /* backward cannot fail: the step reports it */
}

/* Buckets of whole tensors from the end of the buffer, each at least
 * bucket_bytes unless it is the last. */
static int make_buckets(weft_zero *z, size_t bucket_bytes)
{
    int nt = weft_model_tensor_count(z->model);
    if (nt <= 0)
        return WEFT_EINVAL;
    z->b = calloc((size_t)nt, sizeof *z->b);
    z->bucket_of = calloc((size_t)nt, sizeof *z->bucket_of);
    if (!z->b || !z->bucket_of)
        return WEFT_ENOMEM;
    for (int i = nt - 1; i >= 0; i--) {
        weft_tensor_info ti;
        weft_model_tensor_info(z->model, i, &ti);
        zbucket *cur = &z->b[z->nb];
        cur->n += ti.numel;
        cur->lo = ti.offset;
        cur->ntensors++;
        z->bucket_of[i] = z->nb;
        weft_comm *g = NULL, *pg = NULL;
        float sc = 1.0f, psc;
        cur->experts = train_moe_grad_group(z->model, i, &g, &sc);
        cur->comm = cur->experts ? g : z->comm;
        cur->gscale = cur->experts ? sc : 1.0f;
        int close = cur->n * sizeof(float) >= bucket_bytes;
        int other = i > 0 && train_moe_grad_group(z->model, i - 1, &pg, &psc) != cur->experts;
        if (z->stage == 3 && i > 0) { /* one bucket per block */
            weft_tensor_info prev;
            weft_model_tensor_info(z->model, i - 1, &prev);
            close = prev.block != ti.block;
        }
        if ((close || other) && i > 0)
            z->nb++;
    }
    if (z->b[z->nb].ntensors)
        z->nb++;
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        /* stage 1: each holder of divided experts updates them whole (weft_dp
         * reduces them over their replicas); from stage 2 they are sharded
         * over those replicas, as DeepSpeed shards an expert's state over
         * its expert-data-parallel group */
        if (b->experts && z->stage < 2)
            b->comm = NULL;
        b->world = b->comm ? weft_comm_size(b->comm) : 1;
        b->rank = b->comm ? weft_comm_rank(b->comm) : 0;
        b->S = b->n / (size_t)b->world;
        b->tail = b->n - b->S * (size_t)b->world;
        b->mlo = b->lo + b->S * (size_t)b->rank;
        b->mcnt = b->S + (b->rank == b->world - 1 ? b->tail : 0);
        if (b->world == 1) /* nothing to gather: not sharded */
            b->S = b->tail = 0;
    }
    return 0;
}

/* ---- stage 3 layer by layer ---- */

int train_zero_gather_launch(weft_zero *z, zbucket *b)
{
    float *p = weft_model_params(z->model, NULL);
    int rc = 0;
    if (b->S)
        rc = weft_iallgather(b->comm, p + b->lo + b->S * (size_t)b->rank, p + b->lo, b->S,
                             WEFT_F32, &b->greq[0]);
    if (rc == 0 && b->tail)
        rc = weft_ibroadcast(b->comm, p + b->lo + b->S * (size_t)b->world, b->tail, WEFT_F32,
                             b->world - 1, &b->greq[1]);
    b->state = PARAMS_INFLIGHT;
    return rc;
}

/* Inside forward or backward this is their time, not weft_zero_step's. */
static int gather_wait(zbucket *b)
{
    int rc = 0;
    for (int j = 0; j < 2; j++)
        if (b->greq[j]) {
            int r = weft_wait(b->greq[j]);
            rc = rc ? rc : r;
            b->greq[j] = NULL;
        }
    b->state = PARAMS_PRESENT;
    return rc;
}

/* What of bucket b's part of x is another rank's, back to the kernel. */
static void release_others(float *x, const zbucket *b)
{
    release(x, b->lo, b->mlo);
    release(x, b->mlo + b->mcnt, b->lo + b->n);
}

static void measure_peak(weft_zero *z)
{
    float *p = weft_model_params(z->model, NULL), *g = weft_model_grads(z->model, NULL);
    size_t r = resident(p, z->n) + resident(g, z->n);
    if (r > z->peak)
        z->peak = r;
}

/* The bucket the last step needed after the one just needed (k), or -1;
 * the same on every rank, as every rank runs the same passes. */
static int next_needed(weft_zero *z, int k)
{
    int *o = z->order[1], n = z->olen[1];
    for (int i = z->opos; i < n; i++)
        if (o[i] == k) {
            z->opos = i + 1;
            return i + 1 < n ? o[i + 1] : -1;
        }
    return -1;
}

static int record_need(weft_zero *z, int k)
{
    if (z->olen[0] == z->ocap) {
        int cap = z->ocap ? 2 * z->ocap : 64, *a = realloc(z->order[0], sizeof *a * (size_t)cap),
            *b = a ? realloc(z->order[1], sizeof *b * (size_t)cap) : NULL;
        if (a)
            z->order[0] = a;
        if (!b)
            return WEFT_ENOMEM;
        z->order[1] = b;
        z->ocap = cap;
    }
    z->order[0][z->olen[0]++] = k;
    return 0;
}

static int bucket_need(weft_zero *z, int k)
{
    zbucket *b = &z->b[k];
    int rc = record_need(z, k), next = next_needed(z, k);
    if (rc == 0 && b->state == PARAMS_RELEASED)
        rc = train_zero_gather_launch(z, b);
    /* the next block's gather runs while this one computes */
    if (rc == 0 && next >= 0 && z->b[next].state == PARAMS_RELEASED)
        rc = train_zero_gather_launch(z, &z->b[next]);
    if (rc == 0 && b->state == PARAMS_INFLIGHT) {
        rc = gather_wait(b);
        measure_peak(z);
    }
    b->refs++;
    return rc;
}

static void bucket_done(weft_zero *z, int k)
{
    zbucket *b = &z->b[k];
    if (b->refs > 0 && --b->refs == 0 && b->state == PARAMS_PRESENT) {
        release_others(weft_model_params(z->model, NULL), b);
        b->state = PARAMS_RELEASED;
    }
}

static int on_params(void *arg, int first, int count, int need)
{
    weft_zero *z = arg;
    int rc = 0, prev = -1;
    if (!z->layerwise || z->gathered)
        return 0;
    for (int i = first; i < first + count && rc == 0; i++) {
        int k = z->bucket_of[i];
        if (k == prev)
            continue;
        prev = k;
        if (need)
            rc = bucket_need(z, k);
        else
            bucket_done(z, k);
    }
    return rc;
}

/* A step begins: what is not ours goes (a whole gather for eval or a
 * checkpoint included), and the needs are recorded anew. */
static int layerwise_begin(weft_zero *z)
{
    float *p = weft_model_params(z->model, NULL);
    int rc = 0;
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        if (b->state == PARAMS_INFLIGHT) {
            int r = gather_wait(b);
            rc = rc ? rc : r;
        }
        release_others(p, b);
        b->state = PARAMS_RELEASED;
        b->refs = 0;
    }
    z->gathered = 0;
    return rc;
}

static void layerwise_end_step(weft_zero *z)
{
    int *t = z->order[1];
    z->order[1] = z->order[0];
    z->olen[1] = z->olen[0];
    z->order[0] = t;
    z->olen[0] = 0;
    z->opos = 0;
}

int weft_zero_owned(const weft_zero *z, int k, size_t *lo, size_t *n)
{
    if (!z || k < 0 || k >= weft_zero_bucket_count(z) || !lo || !n)
        return WEFT_EINVAL;
    int whole = z->stage < 3 || !z->comm || z->world == 1;
    if (z->stage == 0) {
        *lo = 0;
        *n = k == 0 ? z->n : 0; /* its buckets are plain DP's, over one buffer */
    } else {
        *lo = whole ? z->b[k].lo : z->b[k].mlo;
        *n = whole ? z->b[k].n : z->b[k].mcnt;
    }
    return 0;
}

int weft_zero_set_layerwise(weft_zero *z, int on)
{
    if (!z)
        return WEFT_EINVAL;
    z->layerwise = on && z->stage == 3 && z->comm && z->world > 1;
    return 0;
}

int weft_zero_create(weft_zero **out, weft_comm *c, weft_model *m, const weft_optim_config *oc,
                     int stage, size_t bucket_bytes)
{
    weft_zero *z;
    int rc = 0;
    if (!out || !m || !oc || stage < 0 || stage > 3)
        return WEFT_EINVAL;
    *out = NULL;
    if (!(z = calloc(1, sizeof *z)))
        return WEFT_ENOMEM;
    z->comm = c;
    z->model = m;
    z->stage = stage;
    z->rank = c ? weft_comm_rank(c) : 0;
    z->world = c ? weft_comm_size(c) : 1;
    weft_model_params(m, &z->n);
    z->scale = 1.0f;
    z->gathered = 1;
    if (bucket_bytes == 0)
        bucket_bytes = WEFT_DP_DEFAULT_BUCKET;
    if (stage == 0) {
        rc = weft_optim_create(&z->opt, oc, 0, z->n);
        if (rc == 0)
            rc = weft_optim_set_threads(z->opt, weft_model_threads(m));
    } else {
        rc = make_buckets(z, bucket_bytes);
        for (int k = 0; rc == 0 && k < z->nb; k++)
            if (z->b[k].mcnt)
                if ((rc = weft_optim_create(&z->b[k].opt, oc, z->b[k].mlo, z->b[k].mcnt)) == 0)
                    rc = weft_optim_set_threads(z->b[k].opt, weft_model_threads(m));
    }
    /* a rank owning nothing (every bucket smaller than the world) would
     * have no optimiser to count steps with */
    if (rc == 0 && !weft_zero_optim(z))
        rc = WEFT_EINVAL;
    if (rc == 0 && c && stage <= 1)
        rc = weft_dp_create(&z->dp, c, m, bucket_bytes);
    if (rc == 0 && stage >= 2)
        rc = weft_model_set_grad_hook(m, on_grads_ready, z);
    if (rc == 0 && stage == 3) {
        weft_zero_set_layerwise(z, 1);
        rc = weft_model_set_param_hook(m, on_params, z);
    }
    if (rc) {
        weft_zero_destroy(z);
        return rc;
    }
    *out = z;
    return 0;
}

void weft_zero_destroy(weft_zero *z)
{
    if (!z)
        return;
    free(z->skip);
    train_zero_replicas_drop(z);
    weft_dp_destroy(z->dp);
    if (z->stage >= 2)
        weft_model_set_grad_hook(z->model, NULL, NULL);
    if (z->stage == 3)
        weft_model_set_param_hook(z->model, NULL, NULL);
    free(z->order[0]);
    free(z->order[1]);
    for (int k = 0; z->b && k < z->nb; k++) {
        for (int j = 0; j < 2; j++) {
            if (z->b[k].req[j])
                weft_wait(z->b[k].req[j]);
            if (z->b[k].greq[j])
                weft_wait(z->b[k].greq[j]);
        }
        weft_optim_destroy(z->b[k].opt);
    }
    free(z->b);
    free(z->bucket_of);
    weft_optim_destroy(z->opt);
    free(z);
}

weft_optim *weft_zero_optim(weft_zero *z)
{
    if (!z)
        return NULL;
    for (int k = 0; !z->opt && k < z->nb; k++)
        if (z->b[k].opt)
            return z->b[k].opt;
    return z->opt;
}

int weft_zero_stage(const weft_zero *z) { return z ? z->stage : WEFT_EINVAL; }

int weft_zero_launched(const weft_zero *z)
{
    if (!z)
        return WEFT_EINVAL;
    if (z->dp)
        return weft_dp_launched(z->dp);
    return z->stage >= 2 ? z->next_launch : 0;
}
int weft_zero_bucket_count(const weft_zero *z)
{
    if (!z)
        return WEFT_EINVAL;
    return z->stage == 0 ? (z->dp ? weft_dp_bucket_count(z->dp) : 1) : z->nb;
}

int weft_zero_broadcast_params(weft_zero *z)
{
    float *p;
    size_t n;
    if (!z)
        return WEFT_EINVAL;
    if (!z->comm)
        return 0;
    int rc = train_moe_broadcast(z->model, z->comm);
    if (rc)
        return rc < 0 ? rc : 0;
    p = weft_model_params(z->model, &n);
    return weft_broadcast(z->comm, p, n, WEFT_F32, 0);
}

/* Every rank's shards (and the tails) back into every rank's full buffer;
 * all buckets in flight at once. */
static int gather_params(weft_zero *z)
{
    int rc = 0;
    if (!z->comm || z->world == 1)
        return 0;
    for (int k = 0; rc == 0 && k < z->nb; k++)
        rc = train_zero_gather_launch(z, &z->b[k]);
    for (int k = 0; k < z->nb; k++) {
        int w = gather_wait(&z->b[k]);
        rc = rc ? rc : w;
    }
    return rc;
}

int weft_zero_gather_params(weft_zero *z)
{
    int rc;
    if (!z)
        return WEFT_EINVAL;
    if (z->gathered)
        return 0;
    rc = gather_params(z);
    if (rc == 0)
        z->gathered = 1;
    return rc;
}

int weft_zero_micro(weft_zero *z, int n, int global_n, int last)
{
    size_t gn;
    float *g;
    int rc;
    if (!z || n <= 0 || global_n <= 0)
        return WEFT_EINVAL;
    g = weft_model_grads(z->model, &gn);
    if (z->prev_micro == 0) {
        double t0 = now();
        rc = z->layerwise ? layerwise_begin(z) : weft_zero_gather_params(z);
        z->wait_s += now() - t0;
        if (rc)
            return rc;
        z->peak = 0;
        /* zeroes that take no memory: a sharded gradient is resident only
         * while backward writes it */
        if (z->stage >= 2)
            release(g, 0, gn);
        else if ((rc = weft_model_zero_grad(z->model)))
            return rc;
    } else if (z->prev_micro != n) {
        /* Backward adds each micro-step's mean gradient with weight one. Keep
         * the buffer as sum_j (n_j / n) * mean_j for the current n, so that one
         * factor n_last / n_local at the end weights every micro-step by its
         * sample count. */
        weft_scale(g, gn, (float)z->prev_micro / (float)n);
    }
    z->prev_micro = n;
    /* mean over n samples -> weight in the mean over global_n, times p for
     * the average over ranks */
    z->scale = (float)((double)z->world * n / global_n);
    z->hold = !last;
    if (z->dp) {
        if ((rc = weft_dp_hold(z->dp, !last)))
            return rc;
        if (last && (rc = weft_dp_set_share(z->dp, n, global_n)))
            return rc;
    }
    return 0;
}

static int wait_reduced(zbucket *b)
{
    int rc = 0;
    for (int j = 0; j < 2; j++)
        if (b->req[j]) {
            int r = weft_wait(b->req[j]);
            rc = rc ? rc : r;
            b->req[j] = NULL;
        }
    return rc;
}

/* Layer by layer: buckets below upto have their reduced shards; what
 * else backward wrote of them goes back to the kernel. */
static int release_reduced(weft_zero *z, int upto)
{
    float *g = weft_model_grads(z->model, NULL);
    int rc = 0;
    for (; rc == 0 && z->rs_released < upto; z->rs_released++) {
        zbucket *b = &z->b[z->rs_released];
        rc = wait_reduced(b);
        release_others(g, b);
    }
    return rc;
}

/* Stages 2-3: reduce-scatter each complete bucket, in bucket order (the
 * same on every rank), weighting it first. */
static int launch_ready(weft_zero *z)
{
    size_t n;
    float *g = weft_model_grads(z->model, &n);
    while (z->next_launch < z->nb) {
        zbucket *b = &z->b[z->next_launch];
        int rc = 0;
        if (b->ready < b->ntensors)
            break;
        float sc = z->scale * b->gscale;
        if (sc != 1.0f)
            weft_scale(g + b->lo, b->n, sc);
        if (b->S)
            rc = weft_ireduce_scatter(b->comm, g + b->lo, g + b->lo + b->S * (size_t)b->rank,
                                      b->S, WEFT_F32, WEFT_AVG, &b->req[0]);
        if (rc == 0 && b->tail) {
            float *t = g + b->lo + b->S * (size_t)b->world;
            rc = weft_iallreduce(b->comm, t, t, b->tail, WEFT_F32, WEFT_AVG, &b->req[1]);
        }
        if (rc)
            return rc;
        z->next_launch++;
        if (z->layerwise && (rc = release_reduced(z, z->next_launch - 2)))
            return rc;
    }
    return 0;
}

static int reduce_scatter_grads(weft_zero *z)
{
    int rc = z->err;
    z->err = 0;
    for (int k = 0; k < z->nb; k++)
        z->b[k].ready = z->b[k].ntensors; /* whatever was not announced is final now */
    if (rc == 0)
        rc = launch_ready(z);
    for (int k = 0; k < z->nb; k++) {
        int r = wait_reduced(&z->b[k]);
        rc = rc ? rc : r;
        z->b[k].ready = 0;
    }
    z->next_launch = 0;
    z->rs_released = 0;
    return rc;
}

int weft_zero_set_norm_group(weft_zero *z, weft_comm *const *comms, int ncomms,
                             const unsigned char *skip)
{
    if (!z || ncomms < 0 || ncomms > 2 || (ncomms && !comms))
        return WEFT_EINVAL;
    int nt = weft_model_tensor_count(z->model);
    unsigned char *s = NULL;
    if (skip && !(s = malloc((size_t)(nt ? nt : 1))))
        return WEFT_ENOMEM;
    if (s)
        memcpy(s, skip, (size_t)nt);
    free(z->skip);
    z->skip = s;
    z->norm_comm[0] = ncomms > 0 ? comms[0] : NULL;
    z->norm_comm[1] = ncomms > 1 ? comms[1] : NULL;
    return 0;
}

/* Squares of g[lo, lo + n) but for the tensors another rank counts. */
static double sumsq_owned(const weft_zero *z, const float *g, size_t lo, size_t n)
{
    if (!z->skip)
        return weft_sumsq(g + lo, n);
    double ss = 0;
    for (int i = 0; i < weft_model_tensor_count(z->model); i++) {
        weft_tensor_info t;
        weft_model_tensor_info(z->model, i, &t);
        size_t a = t.offset > lo ? t.offset : lo;
        size_t e = t.offset + t.numel < lo + n ? t.offset + t.numel : lo + n;
        if (e > a && !z->skip[i])
            ss += weft_sumsq(g + a, e - a);
    }
    return ss;
}

/* The squares summed over the norm's other groups. */
static int sum_groups(weft_zero *z, double *ss)
{
    for (int k = 0; k < 2; k++)
        if (z->norm_comm[k]) {
            int rc = weft_allreduce(z->norm_comm[k], ss, ss, 1, WEFT_F64, WEFT_SUM);
            if (rc)
                return rc;
        }
    return 0;
}

int weft_zero_step(weft_zero *z, float lr, float clip, float *norm)
{
    size_t n;
    float *p, *g;
    int rc = 0;
    if (!z)
        return WEFT_EINVAL;
    p = weft_model_params(z->model, &n);
    g = weft_model_grads(z->model, &n);
    z->prev_micro = 0;
    z->hold = 0;
    double t0 = now();
    if (z->stage <= 1) {
        if (z->dp)
            rc = weft_dp_sync_grads(z->dp);
        else if (z->scale != 1.0f)
            weft_scale(g, n, z->scale);
        z->wait_s += now() - t0;
        if (rc)
            return rc;
        if (clip > 0 || norm) {
            double ss = sumsq_owned(z, g, 0, n);
            if ((rc = train_moe_sumsq_experts(z->model, g, &ss)) || (rc = sum_groups(z, &ss)))
                return rc;
            if (norm)
                *norm = (float)sqrt(ss);
            if (clip > 0)
                weft_scale(g, n, weft_clip_scale(sqrt(ss), clip));
        }
    } else {
        if (z->layerwise)
            measure_peak(z);
        rc = reduce_scatter_grads(z);
        z->wait_s += now() - t0;
        if (rc)
            return rc;
        if (clip > 0 || norm) {
            /* tails are reduced on every rank; the last rank counts them */
            double ss = 0;
            for (int k = 0; k < z->nb; k++)
                ss += sumsq_owned(z, g, z->b[k].mlo, z->b[k].mcnt);
            if (z->comm && z->world > 1 &&
                (rc = weft_allreduce(z->comm, &ss, &ss, 1, WEFT_F64, WEFT_SUM)))
                return rc;
            if ((rc = sum_groups(z, &ss)))
                return rc;
            if (norm)
                *norm = (float)sqrt(ss);
            if (clip > 0) {
                float f = weft_clip_scale(sqrt(ss), clip);
                for (int k = 0; k < z->nb; k++)
                    weft_scale(g + z->b[k].mlo, z->b[k].mcnt, f);
            }
        }
    }
    if (z->stage == 0)
        return weft_optim_step(z->opt, p, g, lr);
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        if (!b->opt)
            continue;
        if ((rc = weft_optim_update(b->opt, p + b->mlo, g + b->mlo, b->mlo, b->mcnt, lr)) ||
            (rc = weft_optim_advance(b->opt)))
            return rc;
    }
    if (z->stage >= 2) /* the reduced shards are spent; the rest was never ours */
        release(g, 0, n);
    if (z->stage <= 2) {
        t0 = now();
        rc = gather_params(z);
        z->wait_s += now() - t0;
        return rc;
    }
    if (z->layerwise) {
        rc = layerwise_begin(z);
        layerwise_end_step(z);
        return rc;
    }
    if (z->world > 1) {
        /* other ranks' parameters are theirs until the next gather: clearing
         * them makes any use of a stale copy show */
        for (int k = 0; k < z->nb; k++)
            release_others(p, &z->b[k]);
        z->gathered = 0;
    }
    return 0;
}

double weft_zero_wait_s(const weft_zero *z) { return z ? z->wait_s : 0; }

/* The largest k buckets' elements. */
static size_t largest(const weft_zero *z, int k)
{
    size_t top[4] = { 0 }, sum = 0;
    for (int b = 0; b < z->nb; b++) {
        size_t v = z->b[b].n;
        for (int j = 0; j < k; j++)
            if (v > top[j]) {
                size_t t = top[j];
                top[j] = v;
                v = t;
            }
    }
    for (int j = 0; j < k; j++)
        sum += top[j];
    return sum;
}

static size_t layerwise_bound(const weft_zero *z)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return 4 * (largest(z, 3) + largest(z, 4)) + 2 * 2 * pg * (size_t)z->nb;
}

int weft_zero_memory(const weft_zero *z, weft_zero_mem *m)
{
    const weft_optim_config *oc;
    weft_optim *o;
    size_t part = 0;
    if (!z || !m)
        return WEFT_EINVAL;
    o = weft_zero_optim((weft_zero *)z);
    memset(m, 0, sizeof *m);
    m->stage = z->stage;
    m->world = z->world;
    m->n = z->n;
    m->buckets = z->stage ? z->nb : 1;
    for (int k = 0; k < z->nb; k++)
        part += z->b[k].mcnt;
    if (z->stage == 0)
        part = z->n;
    m->shard = part;
    oc = o ? weft_optim_config_of(o) : NULL;
    m->state_bytes_per_param = o ? 4 * weft_optim_state_count(o) : 0;
    if (oc && oc->kind == WEFT_OPTIM_SGD && oc->momentum == 0)
        m->state_bytes_per_param = 0;
    size_t full = z->n;
    m->param_bytes = 4 * (z->stage >= 3 ? part : full);
    m->grad_bytes = 4 * (z->stage >= 2 ? part : full);
    m->optim_bytes = (size_t)m->state_bytes_per_param * (z->stage >= 1 ? part : full);
    double psi = (double)z->n, K = m->state_bytes_per_param, N = z->world;
    double f;
    switch (z->stage) {
    case 0: f = (4 + 4 + K) * psi; break;
    case 1: f = (4 + 4) * psi + K * psi / N; break;
    case 2: f = 4 * psi + (4 + K) * psi / N; break;
    default: f = (4 + 4 + K) * psi / N; break;
    }
    /* divided experts' buckets: sharded over their replicas alone (whole
     * at stage 1) */
    double per = z->stage == 1 ? K : z->stage == 2 ? 4 + K : 8 + K;
    for (int k = 0; z->stage >= 1 && k < z->nb; k++)
        if (z->b[k].experts)
            f += per * (double)z->b[k].n * (1.0 / z->b[k].world - 1.0 / N);
    m->formula_bytes = f;
    /* the engine's forward/backward need the whole flat buffers */
    m->work_bytes = 4 * (full - (z->stage >= 3 ? part : full)) +
                    4 * (full - (z->stage >= 2 ? part : full));
    m->layerwise = z->layerwise;
    if (z->layerwise)
        m->work_bytes = layerwise_bound(z);
    float *pp = weft_model_params(z->model, NULL), *gg = weft_model_grads(z->model, NULL);
    m->resident_bytes = resident(pp, z->n) + resident(gg, z->n) + m->optim_bytes;
    m->peak_bytes = z->peak ? z->peak + m->optim_bytes : 0;
    return 0;
}

/* One state buffer of bucket b: S from every rank into [lo, lo + p*S) of
 * full on root 0, the tail from the last rank. */
/* State i of bucket b to rank 0 of the group it is sharded over (the
 * engine's, or its experts' replicas), into full + b->lo there. */
static int gather_state(const zbucket *b, int i, float *full)
{
    float *mine = b->opt ? weft_optim_state(b->opt, i, NULL) : NULL;
    int rc = 0;
    if (b->S)
        rc = weft_gather(b->comm, mine, full ? full + b->lo : NULL, b->S, WEFT_F32, 0);
    if (rc || !b->tail)
        return rc;
    if (b->rank == b->world - 1)
        return weft_send(b->comm, mine + b->S, b->tail, WEFT_F32, 0);
    if (b->rank != 0)
        return 0;
    float *t = malloc(b->tail * sizeof *t);
    if (!t)
        return WEFT_ENOMEM;
    rc = weft_recv(b->comm, t, b->tail, WEFT_F32, b->world - 1);
    if (rc == 0 && full)
        memcpy(full + b->lo + b->S * (size_t)b->world, t, b->tail * sizeof *t);
    free(t);
    return rc;
}

int weft_zero_put_optim(weft_zero *z, weft_ckpt *ck)
{
    weft_optim *full = NULL, *any;
    int rc = 0, nstate;
    if (!z || (z->rank == 0 && !ck))
        return WEFT_EINVAL;
    if (z->stage == 0 || !z->comm || z->world == 1) {
        if (z->rank != 0)
            return 0;
        if (z->stage == 0)
            return weft_ckpt_put_optim(ck, z->opt);
    }
    any = weft_zero_optim(z); /* every rank has one (weft_zero_create) */
    nstate = weft_optim_state_count(any);
    if (z->rank == 0) {
        rc = weft_optim_create(&full, weft_optim_config_of(any), 0, z->n);
        if (rc == 0)
            rc = weft_optim_set_steps(full, weft_optim_steps(any));
    }
    /* every rank takes part in the collectives even if rank 0 failed above:
     * a lone failure must not leave the others waiting */
    for (int i = 0; i < nstate; i++)
        for (int k = 0; k < z->nb; k++) {
            float *dst = full ? weft_optim_state(full, i, NULL) : NULL;
            int r = z->comm && z->world > 1 ? gather_state(&z->b[k], i, dst) : 0;
            if (r == 0 && (!z->comm || z->world == 1) && dst)
                memcpy(dst + z->b[k].lo, weft_optim_state(z->b[k].opt, i, NULL),
                       z->b[k].n * sizeof *dst);
            if (r && !rc)
                rc = r;
        }
    if (rc == 0 && z->rank == 0)
        rc = weft_ckpt_put_optim(ck, full);
    weft_optim_destroy(full);
    return rc;
}

int weft_zero_load_optim(weft_zero *z, const weft_ckpt *ck)
{
    weft_optim *o;
    int rc;
    if (!z || !ck)
        return WEFT_EINVAL;
    if (z->stage == 0) {
        if ((rc = train_ckpt_get_optim_stage(ck, z->model, 0, z->n, &o)))
            return rc;
        weft_optim_destroy(z->opt);
        z->opt = o;
        return 0;
    }
    for (int k = 0; k < z->nb; k++) {
        zbucket *b = &z->b[k];
        if (!b->mcnt)
            continue;
        if ((rc = train_ckpt_get_optim_stage(ck, z->model, b->mlo, b->mcnt, &o)))
            return rc;
        weft_optim_destroy(b->opt);
        b->opt = o;
    }
    return 0;
}

int train_zero_full_optim(weft_zero *z, weft_optim **out)
{
    weft_optim *any = weft_zero_optim(z), *full = NULL;
    int rc = 0, nstate = weft_optim_state_count(any);
    *out = NULL;
    if (z->rank == 0) {
        rc = weft_optim_create(&full, weft_optim_config_of(any), 0, z->n);
        if (rc == 0)
            rc = weft_optim_set_steps(full, weft_optim_steps(any));
    }
    /* every rank takes part in the gathers even if rank 0 failed above */
    for (int i = 0; i < nstate; i++) {
        float *dst = full ? weft_optim_state(full, i, NULL) : NULL;
        if (z->stage == 0) {
            if (dst)
                memcpy(dst, weft_optim_state(z->opt, i, NULL), z->n * sizeof *dst);
            continue;
        }
        for (int k = 0; k < z->nb; k++) {
            const zbucket *b = &z->b[k];
            int r = 0;
            if (b->experts && b->world > 1) {
                /* sharded over the replicas: those of rank 0's experts
                 * gather them, the others' are train_zero_gather_range's */
                if (z->model->ep_rank == 0)
                    r = gather_state(b, i, dst);
            } else if (b->experts || !z->comm || z->world == 1) {
                if (dst && b->opt)
                    memcpy(dst + b->lo, weft_optim_state(b->opt, i, NULL), b->n * sizeof *dst);
            } else {
                r = gather_state(b, i, dst);
            }
            rc = rc ? rc : r;
        }
    }
    if (rc)
        weft_optim_destroy(full);
    else
        *out = full;
    return rc;
}

float *train_zero_state_at(weft_zero *z, int i, size_t off)
{
    if (z->stage == 0)
        return off < z->n ? weft_optim_state(z->opt, i, NULL) + off : NULL;
    for (int k = 0; k < z->nb; k++) {
        const zbucket *b = &z->b[k];
        if (b->opt && off >= b->mlo && off < b->mlo + b->mcnt)
            return weft_optim_state(b->opt, i, NULL) + (off - b->mlo);
    }
    return NULL;
}

/* The members' shards of [lo, hi) of b: member r holds [b->lo + S r,
 * + S) (the last the tail too); *a and *e its part of [lo, hi). */
static void part_of(const zbucket *b, int r, size_t lo, size_t hi, size_t *a, size_t *e)
{
    size_t from = b->lo + b->S * (size_t)r;
    size_t to = from + b->S + (r == b->world - 1 ? b->tail : 0);
    *a = from > lo ? from : lo;
    *e = to < hi ? to : hi;
    if (*e < *a)
        *e = *a;
}

int train_zero_gather_range(weft_zero *z, int i, size_t off, size_t n, float *dst)
{
    const zbucket *b = NULL;
    for (int k = 0; z->stage > 0 && k < z->nb && !b; k++)
        if (off >= z->b[k].lo && off + n <= z->b[k].lo + z->b[k].n)
            b = &z->b[k];
    if (!b) { /* stage 0, or a range not in one bucket */
        const float *s = train_zero_state_at(z, i, off);
        if (!s || (z->stage > 0))
            return WEFT_EINVAL;
        if (dst)
            memcpy(dst, s, n * sizeof *dst);
        return 0;
    }
    const float *mine = b->opt ? weft_optim_state(b->opt, i, NULL) : NULL;
    if (b->world == 1 || !b->comm) { /* whole here */
        if (dst && mine)
            memcpy(dst, mine + (off - b->mlo), n * sizeof *dst);
        return mine ? 0 : WEFT_EINVAL;
    }
    size_t a, e;
    if (b->rank != 0) {
        part_of(b, b->rank, off, off + n, &a, &e);
        return e > a ? weft_send(b->comm, mine + (a - b->mlo), e - a, WEFT_F32, 0) : 0;
    }
    int rc = 0;
    for (int r = 0; r < b->world; r++) {
        part_of(b, r, off, off + n, &a, &e);
        if (e == a)
            continue;
        int x = 0;
        if (r == 0 && dst)
            memcpy(dst + (a - off), mine + (a - b->mlo), (e - a) * sizeof *dst);
        else if (r > 0 && dst)
            x = weft_recv(b->comm, dst + (a - off), e - a, WEFT_F32, r);
        else if (r > 0) { /* no buffer: the sender is still taken */
            float *sink = malloc((e - a) * sizeof *sink);
            x = sink ? weft_recv(b->comm, sink, e - a, WEFT_F32, r) : WEFT_ENOMEM;
            free(sink);
        }
        rc = rc ? rc : x;
    }
    return rc;
}
