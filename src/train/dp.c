/* Data parallelism: every rank holds the whole model, computes gradients on
 * its share of the global batch, and the gradients are averaged with
 * all-reduce. Gradients go in buckets of contiguous tensors, taken from the
 * end of the flat buffer because backward finishes the last layers first;
 * each bucket's all-reduce is launched (non-blocking) as soon as all of its
 * tensors are final and earlier buckets have been launched, so that on
 * every rank buckets start in the same order while backward still runs.
 * Under expert parallelism with the experts divided (moe_split.h), the
 * expert tensors go in buckets of their own, reduced over the ranks that
 * hold the same experts. */
#include "weft.h"

#include "train/moe_split.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t lo, n;          /* element range in the flat gradient buffer */
    int ntensors, ready;
    weft_request *req;
    weft_comm *group;      /* experts' replicas; NULL: the data-parallel group */
    float scale;           /* the group's share of the average (1 without) */
} bucket;

struct weft_dp {
    weft_comm *comm;
    weft_model *model;
    bucket *b;
    int nb;
    int *bucket_of;        /* tensor index -> bucket */
    int next_launch;       /* first bucket not yet launched */
    float scale;           /* applied to each bucket before it is averaged */
    int err;               /* a launch that failed inside backward */
    int hold;              /* accumulating micro-steps: launch nothing */
};

static int launch_ready(weft_dp *d);

/* Backward announces final gradients here, from the end of the tensor
 * table towards its start. */
static void on_grads_ready(void *arg, int first, int count)
{
    weft_dp *d = arg;
    if (d->hold)
        return; /* a non-final micro-step: gradients keep accumulating locally */
    for (int i = first; i < first + count; i++)
        d->b[d->bucket_of[i]].ready++;
    if (!d->err)
        d->err = launch_ready(d); /* backward cannot fail: sync_grads reports it */
}

int weft_dp_create(weft_dp **out, weft_comm *c, weft_model *m, size_t bucket_bytes)
{
    weft_dp *d;
    int nt;
    if (!out || !c || !m)
        return WEFT_EINVAL;
    *out = NULL;
    if (bucket_bytes == 0)
        bucket_bytes = WEFT_DP_DEFAULT_BUCKET;
    nt = weft_model_tensor_count(m);
    if (nt <= 0)
        return WEFT_EINVAL;
    if (!(d = calloc(1, sizeof *d)))
        return WEFT_ENOMEM;
    d->comm = c;
    d->model = m;
    d->scale = 1.0f;
    d->b = calloc((size_t)nt, sizeof *d->b);
    d->bucket_of = calloc((size_t)nt, sizeof *d->bucket_of);
    if (!d->b || !d->bucket_of) {
        weft_dp_destroy(d);
        return WEFT_ENOMEM;
    }
    /* Walk tensors from the last one; close a bucket once it is big enough,
     * or where the reduction's group changes. */
    for (int i = nt - 1; i >= 0; i--) {
        weft_tensor_info ti;
        weft_model_tensor_info(m, i, &ti);
        bucket *cur = &d->b[d->nb];
        weft_comm *g = NULL, *pg = NULL;
        float sc = 1.0f, psc;
        train_moe_grad_group(m, i, &g, &sc);
        /* tensors are contiguous and walked downwards: extend to the left */
        cur->n += ti.numel;
        cur->lo = ti.offset;
        cur->ntensors++;
        cur->group = g;
        cur->scale = sc;
        d->bucket_of[i] = d->nb;
        int other = i > 0 && train_moe_grad_group(m, i - 1, &pg, &psc) != (g != NULL);
        if ((cur->n * sizeof(float) >= bucket_bytes || other) && i > 0)
            d->nb++;
    }
    if (d->b[d->nb].ntensors)
        d->nb++;
    weft_model_set_grad_hook(m, on_grads_ready, d);
    *out = d;
    return 0;
}

void weft_dp_destroy(weft_dp *d)
{
    if (!d)
        return;
    weft_model_set_grad_hook(d->model, NULL, NULL);
    for (int i = 0; i < d->nb; i++)
        if (d->b[i].req)
            weft_wait(d->b[i].req);
    free(d->b);
    free(d->bucket_of);
    free(d);
}

int weft_dp_bucket_count(const weft_dp *d) { return d ? d->nb : WEFT_EINVAL; }

int weft_dp_broadcast_params(weft_dp *d)
{
    size_t n;
    float *p;
    if (!d)
        return WEFT_EINVAL;
    int rc = train_moe_broadcast(d->model, d->comm);
    if (rc)
        return rc < 0 ? rc : 0;
    p = weft_model_params(d->model, &n);
    return weft_broadcast(d->comm, p, n, WEFT_F32, 0);
}

static int launch_ready(weft_dp *d)
{
    size_t n;
    float *g = weft_model_grads(d->model, &n);
    while (d->next_launch < d->nb) {
        bucket *b = &d->b[d->next_launch];
        if (b->ready < b->ntensors)
            break;
        float sc = d->scale * b->scale;
        if (sc != 1.0f)
            for (size_t i = 0; i < b->n; i++)
                g[b->lo + i] *= sc;
        int rc = weft_iallreduce(b->group ? b->group : d->comm, g + b->lo, g + b->lo, b->n,
                                 WEFT_F32, WEFT_AVG, &b->req);
        if (rc)
            return rc;
        d->next_launch++;
    }
    return 0;
}

int weft_dp_grad_ready(weft_dp *d, int tensor)
{
    if (!d || tensor < 0 || tensor >= weft_model_tensor_count(d->model))
        return WEFT_EINVAL;
    if (d->hold)
        return 0;
    d->b[d->bucket_of[tensor]].ready++;
    return launch_ready(d);
}

int weft_dp_sync_grads(weft_dp *d)
{
    int rc = 0;
    if (!d)
        return WEFT_EINVAL;
    /* whatever backward did not announce is final now */
    for (int i = 0; i < d->nb; i++)
        d->b[i].ready = d->b[i].ntensors;
    rc = d->err ? d->err : launch_ready(d);
    d->err = 0;
    for (int i = 0; i < d->nb; i++) {
        if (d->b[i].req) {
            int r = weft_wait(d->b[i].req);
            if (r && !rc)
                rc = r;
            d->b[i].req = NULL;
        }
        d->b[i].ready = 0;
    }
    d->next_launch = 0;
    return rc;
}

int weft_dp_hold(weft_dp *d, int hold)
{
    if (!d)
        return WEFT_EINVAL;
    d->hold = hold != 0;
    return 0;
}

int weft_dp_launched(const weft_dp *d)
{
    return d ? d->next_launch : WEFT_EINVAL;
}

int weft_dp_set_share(weft_dp *d, int n, int global_n)
{
    if (!d || n < 0 || global_n <= 0)
        return WEFT_EINVAL;
    /* mean over n local samples -> its weight in the mean over global_n:
     * averaging over p ranks divides by p, so multiply by p * n / global_n */
    d->scale = (float)((double)weft_comm_size(d->comm) * n / global_n);
    return 0;
}

int weft_dp_average(weft_dp *d, float *vals, int n)
{
    if (!d || (!vals && n))
        return WEFT_EINVAL;
    return weft_allreduce(d->comm, vals, vals, (size_t)n, WEFT_F32, WEFT_AVG);
}
