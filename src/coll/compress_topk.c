/* Top-k sparsification with error feedback (as in Deep Gradient
 * Compression, without its momentum correction, which belongs to the
 * optimiser): each rank adds the error it kept to the new gradient, sends
 * the k entries of largest magnitude as (index, value) pairs and keeps the
 * rest for next time. Ranks choose different indices, so the pairs travel
 * an all-gather, not a reduction; every rank then adds all of them up in
 * rank order, which makes the sum the same bits everywhere. */
#include "coll/compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t index;
    float value;
} topk_pair;

/* The k-th largest of a[0..n) (1 <= k <= n, no NaN), reordering a:
 * quickselect with a middle pivot and a three-way partition, so equal
 * values never make it quadratic and no random numbers are needed. */
static float kth_largest(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n, want = k - 1;
    while (hi - lo > 1) {
        float pv = a[lo + (hi - lo) / 2], t;
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (a[i] > pv) {
                t = a[lt], a[lt++] = a[i], a[i++] = t;
            } else if (a[i] < pv) {
                t = a[--gt], a[gt] = a[i], a[i] = t;
            } else
                i++;
        }
        if (want < lt)
            hi = lt;
        else if (want >= gt)
            lo = gt;
        else
            return pv;
    }
    return a[lo];
}

/* A NaN is sent, not kept as error forever. */
static float magnitude(float x)
{
    float a = fabsf(x);
    return a == a ? a : INFINITY;
}

/* Picks this rank's k pairs from acc (gradient plus error) and leaves the
 * rest of acc in err. Entries above the threshold all go; ties at it are
 * taken in index order, so the choice does not depend on the selection's
 * reordering. */
static void select_pairs(const float *acc, size_t n, size_t k, float *mag, topk_pair *out,
                         float *err)
{
    for (size_t i = 0; i < n; i++)
        mag[i] = magnitude(acc[i]);
    float t = kth_largest(mag, n, k);
    size_t above = 0, got = 0;
    for (size_t i = 0; i < n; i++)
        above += magnitude(acc[i]) > t;
    size_t ties = k - above;
    for (size_t i = 0; i < n; i++) {
        float a = magnitude(acc[i]);
        int take = a > t || (a == t && ties > 0);
        if (take && !(a > t))
            ties--;
        if (take && got < k) {
            out[got++] = (topk_pair){ (uint32_t)i, acc[i] };
            err[i] = 0;
        } else
            err[i] = acc[i];
    }
}

int compress_topk_run(weft_compressor *z, float *buf, weft_op op)
{
    weft_comm *c = z->comm;
    int p = weft_comm_size(c), r = weft_comm_rank(c), rc;
    size_t n = z->count, k = z->spec.k ? z->spec.k : (size_t)ceil(z->spec.ratio * (double)n);
    k = k > n ? n : k < 1 ? 1 : k;
    if (n > UINT32_MAX)
        return WEFT_EINVAL;
    float *acc = malloc(n * sizeof *acc), *mag = malloc(n * sizeof *mag);
    topk_pair *all = malloc((size_t)p * k * sizeof *all);
    if (!acc || !mag || !all) {
        rc = WEFT_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        acc[i] = buf[i] + z->err[i];
    select_pairs(acc, n, k, mag, all + (size_t)r * k, z->err);
    weft_coll_args a = { .kind = WEFT_COLL_ALLGATHER, .send = all + (size_t)r * k,
                         .recv = all, .count = k * sizeof *all, .dtype = WEFT_U8,
                         .algo = WEFT_ALGO_RING };
    if (p > 1 && (rc = weft_collective(c, &a)))
        goto out;
    /* a ring all-gather: every rank forwards p - 1 blocks */
    z->sent += (uint64_t)(p - 1) * k * sizeof *all;
    z->raw += compress_ring_bytes(p, r, n, sizeof(float));
    memset(buf, 0, n * sizeof *buf);
    for (size_t j = 0; j < (size_t)p * k; j++)
        if (all[j].index < n)
            buf[all[j].index] += all[j].value;
    if (op == WEFT_AVG)
        for (size_t i = 0; i < n; i++)
            buf[i] /= (float)p;
    rc = 0;
out:
    free(acc);
    free(mag);
    free(all);
    return rc;
}
