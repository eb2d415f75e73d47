/* All-reduce over clusters with the least wide-area traffic: a
 * reduce-scatter inside each cluster leaves each rank one slice of its
 * cluster's sum; the ranks holding the same slice in every cluster (one per
 * cluster: the slice's gateways) all-reduce it across the WAN, in a codec
 * if asked; an all-gather inside each cluster spreads the result. Every
 * rank is a gateway for 1/L of the data (L ranks a cluster), so the WAN
 * part runs on all of them at once and each sends 2(C-1)/C of its slice,
 * the least an all-reduce over C parties can send. */
#include "coll/compress.h"

#include <stdlib.h>
#include <string.h>

struct weft_cluster_comm {
    weft_comm *world, *inner, *across; /* inner: my cluster; across: my slice's gateways */
    int clusters, per_cluster;
};

int weft_cluster_comm_create(weft_cluster_comm **out, weft_comm *c)
{
    int p = weft_comm_size(c), r = weft_comm_rank(c), rc;
    if (!out || p < 1 || r < 0)
        return WEFT_EINVAL;
    *out = NULL;
    /* every cluster as many ranks, or the slices do not line up */
    int C = weft_comm_cluster_count(c), mine = weft_comm_cluster_of(c, r), index = 0, per = 0;
    for (int q = 0; q < p; q++) {
        if (weft_comm_cluster_of(c, q) != mine)
            continue;
        index += q < r;
        per++;
    }
    for (int q = 0; q < p && per * C == p; q++) {
        int n = 0;
        for (int j = 0; j < p; j++)
            n += weft_comm_cluster_of(c, j) == weft_comm_cluster_of(c, q);
        if (n != per)
            return WEFT_ENOTSUP;
    }
    if (per * C != p)
        return WEFT_ENOTSUP;
    weft_cluster_comm *h = calloc(1, sizeof *h);
    if (!h)
        return WEFT_ENOMEM;
    h->world = c;
    h->clusters = C;
    h->per_cluster = per;
    if ((rc = weft_comm_split(c, mine, r, &h->inner)) ||
        (rc = weft_comm_split(c, index, mine, &h->across))) {
        weft_cluster_comm_destroy(h);
        return rc;
    }
    *out = h;
    return 0;
}

void weft_cluster_comm_destroy(weft_cluster_comm *h)
{
    if (!h)
        return;
    weft_comm_destroy(h->across);
    weft_comm_destroy(h->inner);
    free(h);
}

int weft_cluster_allreduce(weft_cluster_comm *h, const float *send, float *recv, size_t count,
                           weft_op op, weft_codec k, uint64_t *bytes)
{
    if (!h || (count && (!send || !recv)) || (op != WEFT_SUM && op != WEFT_AVG) ||
        !weft_codec_name(k))
        return WEFT_EINVAL;
    size_t L = (size_t)h->per_cluster, slice = (count + L - 1) / L;
    float *pad = calloc(slice * L + 1, sizeof *pad), *part = malloc((slice + 1) * sizeof *part);
    int rc;
    if (!pad || !part) {
        free(pad);
        free(part);
        return WEFT_ENOMEM;
    }
    if (count)
        memcpy(pad, send, count * sizeof *pad);
    rc = weft_reduce_scatter(h->inner, pad, part, slice, WEFT_F32, WEFT_SUM);
    if (!rc)
        rc = weft_allreduce_codec(h->across, part, part, slice, WEFT_SUM, k, bytes);
    if (!rc && op == WEFT_AVG)
        for (size_t i = 0; i < slice; i++)
            part[i] /= (float)weft_comm_size(h->world);
    if (!rc)
        rc = weft_allgather(h->inner, part, pad, slice, WEFT_F32);
    if (!rc && count)
        memcpy(recv, pad, count * sizeof *recv);
    free(pad);
    free(part);
    return rc;
}
