/* All-to-all with per-peer counts by single copy (direct.h): each rank
 * publishes where its send buffer is and, for every peer, the bytes it
 * sends that peer and their offset; each rank then reads, from every
 * peer, that pair and the block it names, straight into its receive
 * buffer. Every byte crosses memory once, and no rank needs the others'
 * counts beforehand: the pair each one reads is the exchange of counts,
 * 16 bytes a peer, and a pair that disagrees with what the reader expects
 * fails the call on every rank with both ranks and sizes named.
 *
 * The steps are direct.c's: the descriptor exchange, the reads, and the
 * status exchange after which nobody reads another's buffers any more. */
#include "coll/local/direct_av.h"

#include "coll/coll_sched.h"
#include "coll/local/direct_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const void *send;
    void *recv;
    const size_t *sc, *sd, *rc, *rd;
} av_args;

/* Bytes [*lo, *hi) hold every non-empty block of counts n at offsets o. */
static void span(const size_t *n, const size_t *o, int P, size_t es, size_t *lo, size_t *hi)
{
    *lo = SIZE_MAX;
    *hi = 0;
    for (int q = 0; q < P; q++) {
        if (!n[q])
            continue;
        *lo = o[q] * es < *lo ? o[q] * es : *lo;
        *hi = (o[q] + n[q]) * es > *hi ? (o[q] + n[q]) * es : *hi;
    }
}

/* This rank's pair to each peer, where the peers read them. */
static int publish_pairs(weft_comm *c, struct direct_state *d, const av_args *v, size_t es)
{
    int P = c->size;
    if (!d->pairs && !(d->pairs = malloc(2 * (size_t)P * sizeof *d->pairs)))
        return comm_fail(c, WEFT_ENOMEM, "alltoallv: out of memory");
    for (int q = 0; q < P; q++) {
        d->pairs[2 * q] = (uint64_t)(v->sc[q] * es);
        d->pairs[2 * q + 1] = (uint64_t)(v->sd[q] * es);
    }
    return 0;
}

/* From each peer in turn (from r + 1, so that the peers are read evenly)
 * its pair for this rank, then its block. dst stands for the receive
 * buffer from byte base on. */
static int read_blocks(weft_comm *c, struct direct_state *d, const av_args *v, size_t es,
                       char *dst, size_t base, const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    for (int k = 1; k < P && d->bad_peer < 0; k++) {
        int q = (r + k) % P;
        uint64_t pair[2] = { 0, 0 }, want = (uint64_t)(v->rc[q] * es);
        if ((rc = direct_pull(c, d, q, pair, d->peers[q].aux + 16 * (uint64_t)r, sizeof pair,
                              fp)))
            return rc;
        if (d->bad_peer >= 0)
            break;
        if (pair[0] != want) {
            d->bad_peer = q;
            d->bad_errno = EMSGSIZE;
            d->bad_sent = pair[0];
            d->bad_want = want;
            break;
        }
        if (want && (rc = direct_pull(c, d, q, dst + (v->rd[q] * es - base),
                                      d->peers[q].send + pair[1], (size_t)want, fp)))
            return rc;
    }
    return 0;
}

int direct_alltoallv(weft_comm *c, const void *send, void *recv, weft_dtype t,
                     const size_t *const n[4], const frame_hdr *fp)
{
    struct direct_state *d = NULL;
    int P = c->size, r = c->rank, rc;
    size_t es = weft_dtype_size(t), slo, shi, rlo, rhi;
    const av_args a = { send, recv, n[0], n[1], n[2], n[3] }, *v = &a;
    if ((rc = direct_state_get(c, &d)) || (rc = publish_pairs(c, d, v, es)))
        return rc;
    d->bad_peer = -1;
    d->bad_errno = 0;
    d->bad_sent = d->bad_want = 0;
    span(v->sc, v->sd, P, es, &slo, &shi);
    span(v->rc, v->rd, P, es, &rlo, &rhi);
    /* the others read the send buffer until the last step: blocks that
     * land inside it wait in scratch */
    const char *sv = v->send;
    char *rv = v->recv, *dst = rv;
    int late = slo < shi && rlo < rhi && sv + slo < rv + rhi && rv + rlo < sv + shi;
    size_t base = 0;
    if (late) {
        if ((rc = coll_scratch(c, &d->scratch, &d->scratch_cap, rhi - rlo)))
            return rc;
        dst = d->scratch;
        base = rlo;
    }
    desc mine = { .pid = (int32_t)getpid(),
                  .send = (uint64_t)(uintptr_t)v->send,
                  .recv = (uint64_t)(uintptr_t)v->recv,
                  .aux = (uint64_t)(uintptr_t)d->pairs,
                  .cookie_addr = (uint64_t)(uintptr_t)&d->cookie,
                  .cookie = d->cookie };
    if ((rc = direct_exchange(c, d, &mine, fp, 0)) || (rc = direct_agree(c, d, &mine, fp)))
        return rc < 0 ? rc : DIRECT_AGAIN;
    if ((rc = read_blocks(c, d, v, es, dst, base, fp)))
        return rc;
    if (v->sc[r] && d->bad_peer < 0)
        memmove(dst + (v->rd[r] * es - base), sv + v->sd[r] * es, v->sc[r] * es);
    /* nothing of the input is written before this: a withdrawn permission
     * lets the schedule run the call again */
    if ((rc = direct_settle(c, d, NULL, fp, 2, 1)))
        return rc;
    for (int q = 0; late && q < P; q++)
        if (v->rc[q])
            memcpy(rv + v->rd[q] * es, dst + (v->rd[q] * es - base), v->rc[q] * es);
    return 0;
}
