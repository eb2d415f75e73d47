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
    if ((rc = reduce_scatter(&g, recv, sbuf, rbuf, tmp)))
        goto out;
    int own = mod(r + 1, p);
    float *mine = recv + compress_chunk_start(count, p, own);
    size_t ml = chunk_len(&g, own);
    if (op == WEFT_AVG)
        for (size_t i = 0; i < ml; i++)
            mine[i] /= (float)p;
    weft_codec_encode(k, mine, ml, enc + off[own]);
    if ((rc = all_gather(&g, enc, off)))
        goto out;
    for (int j = 0; j < p; j++)
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
