/* The compressed ring all-reduce (INTELLECT-1's scheme): a reduce-scatter
 * whose every hop carries the partial sum encoded, each rank decoding it
 * and adding its own part in f32, then an all-gather of the reduced chunks
 * encoded once. The all-gather forwards bytes untouched, and every rank
 * decodes the same bytes of every chunk, so the result is the same bits
 * everywhere. Messages are point-to-point (their own connections, matched
 * per peer and tag, so a send and a receive in flight together never
 * deadlock). */
#include "coll/compress.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    weft_comm *c;
    int p, r, left, right;
    size_t n;
    weft_codec k;
    uint64_t sent;
} ring;

static size_t chunk_len(const ring *g, int j)
{
    return compress_chunk_start(g->n, g->p, j + 1) - compress_chunk_start(g->n, g->p, j);
}

/* One hop: sbuf (sn bytes) to the right, rn bytes from the left into rbuf. */
static int hop(ring *g, const void *sbuf, size_t sn, void *rbuf, size_t rn)
{
    weft_request *q[2];
    int rc = weft_isend_tag(g->c, sbuf, sn, WEFT_U8, g->right, COMPRESS_TAG, &q[0]);
    if (rc)
        return rc;
    if ((rc = weft_irecv_tag(g->c, rbuf, rn, WEFT_U8, g->left, COMPRESS_TAG, &q[1]))) {
        weft_wait(q[0]);
        return rc;
    }
    g->sent += sn;
    return weft_wait_all(q, 2);
}

static int mod(int a, int p)
{
    return ((a % p) + p) % p;
}

static int reduce_scatter(ring *g, float *acc, uint8_t *sbuf, uint8_t *rbuf, float *tmp)
{
    for (int s = 0; s < g->p - 1; s++) {
        int sc = mod(g->r - s, g->p), rcv = mod(g->r - s - 1, g->p);
        size_t sl = chunk_len(g, sc), rl = chunk_len(g, rcv);
        float *a = acc + compress_chunk_start(g->n, g->p, sc);
        float *b = acc + compress_chunk_start(g->n, g->p, rcv);
        weft_codec_encode(g->k, a, sl, sbuf);
        int rc = hop(g, sbuf, weft_codec_bytes(g->k, sl), rbuf, weft_codec_bytes(g->k, rl));
        if (rc)
            return rc;
        weft_codec_decode(g->k, rbuf, rl, tmp);
        for (size_t i = 0; i < rl; i++)
            b[i] += tmp[i];
    }
    return 0;
}

static int all_gather(ring *g, uint8_t *enc, const size_t *off)
{
    for (int s = 0; s < g->p - 1; s++) {
        int sc = mod(g->r + 1 - s, g->p), rcv = mod(g->r - s, g->p);
        int rc = hop(g, enc + off[sc], off[sc + 1] - off[sc], enc + off[rcv],
                     off[rcv + 1] - off[rcv]);
        if (rc)
            return rc;
    }
    return 0;
}

/* The direct variant: rank j owns chunk j; every rank sends each owner its
 * chunk encoded at once, the owner adds the p contributions in rank order
 * in f32, encodes the sum once and sends it to every rank. Two crossings
 * instead of the ring's 2(p - 1), the same bytes per rank, and each
 * contribution quantised once instead of at every hop; but p - 1 messages
 * in flight per rank, so it is for a few ranks on a long link. The owner
 * alone sums its chunk and every rank decodes the owner's bytes, so the
 * result is the same bits everywhere. */
/* To every other rank j: sbuf[soff[j], soff[j + 1]) (soff NULL: sbuf's
 * first slen bytes to each); from each: rbuf[roff[j], roff[j + 1]). */
static int exchange(ring *g, const uint8_t *sbuf, const size_t *soff, size_t slen,
                    uint8_t *rbuf, const size_t *roff, weft_request **q)
{
    int n = 0, rc = 0;
    for (int j = 0; j < g->p && rc == 0; j++) {
        if (j == g->r)
            continue;
        size_t so = soff ? soff[j] : 0, sn = soff ? soff[j + 1] - soff[j] : slen;
        if ((rc = weft_irecv_tag(g->c, rbuf + roff[j], roff[j + 1] - roff[j], WEFT_U8, j,
                                 COMPRESS_TAG, &q[n])) == 0)
            n++;
        if (rc == 0 &&
            (rc = weft_isend_tag(g->c, sbuf + so, sn, WEFT_U8, j, COMPRESS_TAG, &q[n])) == 0) {
            g->sent += sn;
            n++;
        }
    }
    int wrc = weft_wait_all(q, n);
    return rc ? rc : wrc;
}

/* The reduce-scatter, this rank's chunk encoded once, the all-gather. */
static int ring_run(ring *g, float *recv, weft_op op, uint8_t *sbuf, uint8_t *rbuf, float *tmp,
                    uint8_t *enc, const size_t *off)
{
    int rc = reduce_scatter(g, recv, sbuf, rbuf, tmp);
    if (rc)
        return rc;
    int own = mod(g->r + 1, g->p);
    float *mine = recv + compress_chunk_start(g->n, g->p, own);
    size_t ml = chunk_len(g, own);
    if (op == WEFT_AVG)
        for (size_t i = 0; i < ml; i++)
            mine[i] /= (float)g->p;
    weft_codec_encode(g->k, mine, ml, enc + off[own]);
    return all_gather(g, enc, off);
}

/* Every rank in a cluster of its own (the WAN part of a hierarchical
 * reduction, or DiLoCo's outer step across clusters): each crossing costs
 * the WAN's delay, which the ring pays 2(p - 1) times. A few ranks only:
 * each has p - 1 messages in flight. */
#define COMPRESS_DIRECT_MAX 8

static int direct_pays(const weft_comm *c, int p)
{
    return p > 2 && p <= COMPRESS_DIRECT_MAX && weft_comm_cluster_count(c) == p;
}

/* enc: every chunk's encoding at off[j] (the all-gather's layout). */
static int direct(ring *g, float *recv, weft_op op, uint8_t *enc, const size_t *off)
{
    int p = g->p, r = g->r, rc = 0;
    size_t ml = chunk_len(g, r), mb = weft_codec_bytes(g->k, ml);
    size_t *moff = malloc((size_t)(p + 1) * sizeof *moff);
    uint8_t *in = malloc(mb * (size_t)p + 1);
    float *tmp = malloc((ml + 1) * sizeof *tmp), *sum = calloc(ml + 1, sizeof *sum);
    weft_request **q = malloc(2 * (size_t)p * sizeof *q);
    if (!moff || !in || !tmp || !sum || !q) {
        rc = WEFT_ENOMEM;
        goto out;
    }
    for (int j = 0; j <= p; j++)
        moff[j] = (size_t)j * mb;
    for (int j = 0; j < p; j++)
        if (j != r)
            weft_codec_encode(g->k, recv + compress_chunk_start(g->n, p, j), chunk_len(g, j),
                              enc + off[j]);
    if ((rc = exchange(g, enc, off, 0, in, moff, q)))
        goto out;
    const float *mine = recv + compress_chunk_start(g->n, p, r);
    for (int j = 0; j < p; j++) {
        const float *x = mine;
        if (j != r) {
            weft_codec_decode(g->k, in + moff[j], ml, tmp);
            x = tmp;
        }
        for (size_t i = 0; i < ml; i++)
            sum[i] += x[i];
    }
    for (size_t i = 0; op == WEFT_AVG && i < ml; i++)
        sum[i] /= (float)p;
    weft_codec_encode(g->k, sum, ml, enc + off[r]);
    memcpy(in, enc + off[r], mb); /* enc's other slots receive */
    rc = exchange(g, in, NULL, mb, enc, off, q);
out:
    free(moff);
    free(in);
    free(tmp);
    free(sum);
    free(q);
    return rc;
}

int weft_allreduce_codec(weft_comm *c, const float *send, float *recv, size_t count,
                         weft_op op, weft_codec k, uint64_t *bytes)
{
    int p = weft_comm_size(c), r = weft_comm_rank(c), rc = 0;
    if (p < 1 || r < 0 || (count && (!send || !recv)) || (op != WEFT_SUM && op != WEFT_AVG) ||
        !weft_codec_name(k))
        return WEFT_EINVAL;
    if (send != recv && count)
        memmove(recv, send, count * sizeof *recv);
    if (p == 1 || !count)
        return 0;
    ring g = { .c = c, .p = p, .r = r, .left = mod(r - 1, p), .right = mod(r + 1, p),
               .n = count, .k = k };
    size_t big = chunk_len(&g, 0), *off = malloc((size_t)(p + 1) * sizeof *off);
    uint8_t *sbuf = malloc(weft_codec_bytes(k, big)), *rbuf = malloc(weft_codec_bytes(k, big));
    float *tmp = malloc(big * sizeof *tmp);
    uint8_t *enc = NULL;
    if (off) {
        off[0] = 0;
        for (int j = 0; j < p; j++)
            off[j + 1] = off[j] + weft_codec_bytes(k, chunk_len(&g, j));
        enc = malloc(off[p]);
    }
    if (!off || !sbuf || !rbuf || !tmp || !enc) {
        rc = WEFT_ENOMEM;
        goto out;
    }
    rc = direct_pays(c, p) ? direct(&g, recv, op, enc, off) : ring_run(&g, recv, op, sbuf, rbuf,
                                                                       tmp, enc, off);
    for (int j = 0; rc == 0 && j < p; j++)
        weft_codec_decode(k, enc + off[j], chunk_len(&g, j),
                          recv + compress_chunk_start(count, p, j));
out:
    if (bytes)
        *bytes += g.sent;
    free(off);
    free(sbuf);
    free(rbuf);
    free(tmp);
    free(enc);
    return rc;
}
