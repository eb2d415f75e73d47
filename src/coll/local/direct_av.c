/* All-to-all with per-peer counts by single copy (direct.h): each rank
 * tells every peer where its send buffer is and the bytes it sends that
 * peer with their offset; each rank then reads, from every peer, the
 * block so named, straight into its receive buffer. Every byte crosses
 * memory once, and no rank needs the others' counts beforehand: the
 * pairs are the exchange of counts, 16 bytes a peer, and a pair that
 * disagrees with what the reader expects fails the call on every rank
 * with both ranks and sizes named.
 *
 * A call is two notices a peer each way: the descriptor (with, up to
 * DIRECT_MESH_MAX ranks, the pair for that peer: "my send buffer is
 * ready"), and the status after the reads ("I am done reading yours",
 * direct_settle), after which nobody reads another's buffers any more.
 * Beyond DIRECT_MESH_MAX the descriptors go round in log2 P rounds, and
 * each rank reads its pairs out of the peers' memory instead, one
 * process_vm_readv a peer (about 3 us each on this VM: more than the
 * 16 bytes' worth of a message, so not done where a message can carry
 * them).
 *
 * Where a rank's blocks for its peers lie in one region of weft_mem_alloc
 * (a memfd), its descriptor names the region, and each peer maps it once
 * (direct_map.h) and copies the blocks out with memcpy; other blocks are
 * read with process_vm_readv, several times slower a byte. */
#include "coll/local/direct_av.h"

#include "coll/coll_sched.h"
#include "coll/exec/exec.h"
#include "coll/exec/p2p.h"
#include "coll/exec/p2p_reg.h"
#include "coll/local/direct_int.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const void *send;
    void *recv;
    const size_t *sc, *sd, *rc, *rd;
} av_args;

/* A region's gen for a rank that sends its peers nothing: none to map,
 * and nothing keeps single copy from the others */
#define AV_NOTHING UINT64_MAX
/* Under auto, calls after a look that found some rank's blocks outside
 * registered memory before the next look (a look costs a round of
 * descriptors before the schedule runs) */
#define AV_RELOOK 64

/* Bytes [*lo, *hi) hold every non-empty block of counts n at offsets o
 * (but rank skip's; -1: none skipped). */
static void span(const size_t *n, const size_t *o, int P, int skip, size_t es, size_t *lo,
                 size_t *hi)
{
    *lo = SIZE_MAX;
    *hi = 0;
    for (int q = 0; q < P; q++) {
        if (!n[q] || q == skip)
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

/* The region of weft_mem_alloc that this rank's blocks for its peers lie
 * in, into g (gen 0: none; AV_NOTHING: no such blocks). */
static void find_region(weft_comm *c, const av_args *v, size_t es, direct_region *g)
{
    size_t lo, hi;
    shm_cma_desc cd;
    *g = (direct_region){ 0, 0, 0 };
    span(v->sc, v->sd, c->size, c->rank, es, &lo, &hi);
    if (lo >= hi)
        g->gen = AV_NOTHING;
    else if (c->p2p &&
             p2p_reg_find(p2p_registry(c->p2p), (const char *)v->send + lo, hi - lo, 0, &cd))
        *g = (direct_region){ cd.cookie_addr, cd.cookie, cd.addr - (uint64_t)lo };
}

/* want bytes of peer q at offset off of its send buffer into dst: out of
 * its mapped region where it named one, else (or where the mapping is
 * refused) with process_vm_readv. */
static int read_block(weft_comm *c, struct direct_state *d, int q, char *dst, uint64_t off,
                      size_t want, const frame_hdr *fp)
{
    const desc *x = &d->peers[q];
    const char *src;
    char why[160];
    if (x->reg.gen && x->reg.gen != AV_NOTHING) {
        if (!direct_map_src(&d->maps, c->size, q, x->pid, &x->reg, x->reg.off + off, want, &src,
                            why, sizeof why)) {
            memcpy(dst, src, want);
            return 0;
        }
        log_msg(c->loglevel, LOG_DEBUG, c->rank,
                "alltoallv: rank %d's registered memory read with process_vm_readv: %s", q, why);
    }
    return direct_pull(c, d, q, dst, x->send + off, want, fp);
}

/* From each peer in turn (from r + 1, so that the peers are read evenly)
 * its pair for this rank (come with its descriptor, or else read out of
 * its memory), then its block. dst stands for the receive buffer from
 * byte base on. */
static int read_blocks(weft_comm *c, struct direct_state *d, const av_args *v, size_t es,
                       char *dst, size_t base, const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    for (int k = 1; k < P && d->bad_peer < 0; k++) {
        int q = (r + k) % P;
        uint64_t pair[2] = { 0, 0 }, want = (uint64_t)(v->rc[q] * es);
        if (d->mesh)
            memcpy(pair, d->av_in[q].pair, sizeof pair);
        else if ((rc = direct_pull(c, d, q, pair, d->peers[q].aux + 16 * (uint64_t)r,
                                   sizeof pair, fp)))
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
        if (want && (rc = read_block(c, d, q, dst + (v->rd[q] * es - base), pair[1],
                                     (size_t)want, fp)))
            return rc;
    }
    return 0;
}

/* The call's first step: every rank's descriptor into d->peers. Up to
 * DIRECT_MESH_MAX ranks each peer gets its own message, the descriptor
 * with this rank's pair for it (one message a peer, as the descriptors
 * alone); beyond, the descriptors go round as for the other
 * collectives and the pairs are read where they lie. */
static int av_exchange(weft_comm *c, struct direct_state *d, desc *mine, const frame_hdr *fp)
{
    int P = c->size, r = c->rank;
    if (!d->mesh)
        return direct_exchange(c, d, mine, fp, 0);
    if (!d->av_out) { /* made whole or not at all, so that a later call tries again */
        av_hello *out = calloc((size_t)P, sizeof *out), *in = calloc((size_t)P, sizeof *in);
        for (int q = 0; q < P; q++) {
            if (q == r)
                continue;
            sched_send(&d->avx, q, SB_SEND, (uint64_t)q * sizeof(av_hello), sizeof(av_hello));
            sched_recv(&d->avx, q, SB_RECV, (uint64_t)q * sizeof(av_hello), sizeof(av_hello));
        }
        sched_end_round(&d->avx);
        if (!out || !in || d->avx.err) {
            free(out);
            free(in);
            sched_free(&d->avx);
            return comm_fail(c, WEFT_ENOMEM, "alltoallv: out of memory");
        }
        d->av_out = out;
        d->av_in = in;
    }
    for (int q = 0; q < P; q++)
        d->av_out[q] = (av_hello){ *mine, { d->pairs[2 * q], d->pairs[2 * q + 1] } };
    char *bufs[SB_COUNT] = { (char *)d->av_out, (char *)d->av_in, (char *)&d->zero };
    frame_hdr h = direct_step_fp(fp, 0);
    int rc = exec_run(c, &d->avx, bufs, &h);
    if (rc)
        return rc;
    for (int q = 0; q < P; q++)
        d->peers[q] = q == r ? *mine : d->av_in[q].d;
    return 0;
}

/* Under auto: does every rank's descriptor name a region? Every rank saw
 * the same descriptors, so every rank answers alike, and remembers it
 * for direct_av_auto. */
static int all_registered(struct direct_state *d, int P)
{
    d->av_reg = 1;
    d->av_since = 0;
    for (int q = 0; q < P; q++)
        if (!d->peers[q].reg.gen)
            d->av_reg = -1;
    return d->av_reg > 0;
}

int direct_av_auto(weft_comm *c)
{
    struct direct_state *d = c->direct;
    if (!d || d->av_reg >= 0)
        return 1;
    return ++d->av_since >= AV_RELOOK;
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
    span(v->sc, v->sd, P, -1, es, &slo, &shi);
    span(v->rc, v->rd, P, -1, es, &rlo, &rhi);
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
    desc mine = { .pid = d->pid,
                  .send = (uint64_t)(uintptr_t)v->send,
                  .recv = (uint64_t)(uintptr_t)v->recv,
                  .aux = (uint64_t)(uintptr_t)d->pairs,
                  .cookie_addr = (uint64_t)(uintptr_t)&d->cookie,
                  .cookie = d->cookie };
    find_region(c, v, es, &mine.reg);
    /* this rank's own block first: it needs no peer, and copied while
     * the peers come to the call (and their descriptors come in) it
     * takes the place of the wait for them. Its destination is this
     * rank's alone (no peer reads a receive buffer or scratch), and a
     * schedule that runs the call instead copies the same bytes again. */
    if (v->sc[r])
        memmove(dst + (v->rd[r] * es - base), sv + v->sd[r] * es, v->sc[r] * es);
    if ((rc = av_exchange(c, d, &mine, fp)) || (rc = direct_agree(c, d, &mine, fp)))
        return rc < 0 ? rc : DIRECT_AGAIN;
    if (c->algo != WEFT_ALGO_DIRECT && !all_registered(d, P))
        return DIRECT_AGAIN;
    if ((rc = read_blocks(c, d, v, es, dst, base, fp)))
        return rc;
    /* nothing of the input is written before this: a withdrawn permission
     * lets the schedule run the call again */
    if ((rc = direct_settle(c, d, NULL, fp, 2, 1)))
        return rc;
    for (int q = 0; late && q < P; q++)
        if (v->rc[q])
            memcpy(rv + v->rd[q] * es, dst + (v->rd[q] * es - base), v->rc[q] * es);
    return 0;
}
