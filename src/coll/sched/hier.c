/* Two-level (hierarchical) schedules, for links inside a host that are much
 * faster than the links between hosts.
 *
 * All-reduce splits the data into M slices, M the most ranks any host has.
 * On a host of L ranks, local rank i (ranks in ascending order) owns the
 * contiguous slices j with floor(j*L/M) == i, so every local rank owns at
 * least one slice and the slices of a host are shared out as evenly as L
 * allows. Three phases:
 *   1. ring reduce-scatter inside each host: each rank ends with its
 *      host's sum of the slices it owns;
 *   2. for every slice, a ring all-reduce among its owners, one per host,
 *      all these rings running at once, so every rank of every host drives
 *      its own share of the inter-host traffic;
 *   3. ring all-gather inside each host.
 * A message goes as up to HIER_MAX_SEGS segments in a pipeline, so that
 * the links inside and between hosts work at the same time; a large one
 * as a wavefront of small segments (hier_allreduce_pipelined).
 * Each rank sends 2(H-1)/H of its slices between hosts (H hosts): the whole
 * host sends 2(H-1)/H of the data once over its uplink, not once per rank.
 * When the ranks span clusters (sched_params.cluster) the upper level is
 * the cluster instead of the host, so the WAN carries that least, and the
 * message goes in one segment (hier_allreduce).
 *
 * Broadcast and reduce use one pipelined tree: a binary tree over the host
 * leaders (the root standing for its own host) and, from each leader, a
 * chain through the other ranks of its host, so data crosses each host
 * boundary once.
 *
 * Every element is reduced in one place and copied from there, so all ranks
 * end with bit-identical results. One host (or no host information), or an
 * all-reduce with one rank per host on up to RING_PIPE_MAX_RANKS hosts: the
 * ring schedules. */
#include "coll/sched/two_level.h"

#include "coll/sched/ring.h"
#include "coll/sched/tree.h"
#include "coll/sched/util.h"

#include <stdlib.h>

typedef struct {
    int H;       /* hosts */
    int h, L, li;/* this rank's host, its rank count, this rank's index on it */
    int M;       /* slices: the most ranks on one host */
    int *start;  /* H+1 entries: host g's ranks are rank[start[g] .. start[g+1]) */
    int *rank;   /* ranks grouped by host, ascending within a host */
    int *of;     /* host of every rank */
} hmap;

static void hmap_free(hmap *m) { free(m->start); }

/* Host indices are renumbered in order of first appearance, so any values
 * in [0, p) work. */
static int hmap_build(hmap *m, const sched_params *p)
{
    int P = p->nranks;
    m->start = malloc(((size_t)P + 1 + (size_t)P + 2 * (size_t)P) * sizeof(int));
    if (!m->start)
        return WEFT_ENOMEM;
    m->rank = m->start + P + 1;
    int *id = m->rank + P, *of = id + P; /* raw host -> compact; rank -> compact */
    m->of = of;
    for (int i = 0; i < P; i++)
        id[i] = -1;
    m->H = 0;
    for (int r = 0; r < P; r++) {
        /* across clusters the slow level is the WAN: group by cluster */
        int raw = p->cluster ? p->cluster[r] : p->host ? p->host[r] : 0;
        if (raw < 0 || raw >= P) {
            hmap_free(m);
            return WEFT_EINVAL;
        }
        if (id[raw] < 0)
            id[raw] = m->H++;
        of[r] = id[raw];
    }
    for (int g = 0; g <= m->H; g++)
        m->start[g] = 0;
    for (int r = 0; r < P; r++)
        m->start[of[r] + 1]++;
    m->M = 0;
    for (int g = 0; g < m->H; g++) {
        if (m->start[g + 1] > m->M)
            m->M = m->start[g + 1];
        m->start[g + 1] += m->start[g];
    }
    for (int g = 0; g < m->H; g++) /* id[] now: next free slot per host */
        id[g] = m->start[g];
    for (int r = 0; r < P; r++) /* ascending ranks per host */
        m->rank[id[of[r]]++] = r;
    m->h = of[p->rank];
    m->L = m->start[m->h + 1] - m->start[m->h];
    for (m->li = 0; m->rank[m->start[m->h] + m->li] != p->rank; m->li++)
        ;
    return 0;
}

static int hsize(const hmap *m, int g) { return m->start[g + 1] - m->start[g]; }
static int member(const hmap *m, int g, int i) { return m->rank[m->start[g] + i]; }

/* First slice owned by local index i on a host of L ranks. */
static int slice_lo(const hmap *m, int L, int i) { return (int)(((long)i * m->M + L - 1) / L); }

static int owner(const hmap *m, int g, int j)
{
    return member(m, g, (int)((long)j * hsize(m, g) / m->M));
}

/* A segment of the data: elements [base, base+count). Large all-reduces
 * run as several segments in a pipeline, each split into M slices. */
typedef struct {
    uint64_t base, count;
} hseg;

/* Byte offset of slice j of a segment (j = M: its end). */
static uint64_t sbyte(const hmap *m, const sched_params *p, const hseg *g, int j)
{
    return (g->base + block_start(g->count, m->M, j)) * p->esize;
}

/* Byte range of the slices owned by local index i of this rank's host. */
static void lblock(const hmap *m, const sched_params *p, const hseg *g, int i, uint64_t *off,
                   uint64_t *len)
{
    i = ((i % m->L) + m->L) % m->L;
    *off = sbyte(m, p, g, slice_lo(m, m->L, i));
    *len = sbyte(m, p, g, slice_lo(m, m->L, i + 1)) - *off;
}

/* Sub-block b of H of slice j: byte offset and length. */
static void sub(const hmap *m, const sched_params *p, const hseg *g, int j, int b,
                uint64_t *off, uint64_t *len)
{
    uint64_t cnt = block_len(g->count, m->M, j);
    *off = sbyte(m, p, g, j) + block_start(cnt, m->H, b) * p->esize;
    *len = block_len(cnt, m->H, b) * p->esize;
}

/* Stage 1, step k < L-1: ring reduce-scatter inside the host; step k folds
 * block li-k-2 in, so block li is complete after L-1 steps. */
static void intra_rs(weft_sched *s, const sched_params *p, const hmap *m, const hseg *g, int k)
{
    int L = m->L, li = m->li;
    uint64_t o, l;
    lblock(m, p, g, li - k - 1, &o, &l);
    if (l)
        sched_send(s, member(m, m->h, (li + 1) % L), k == 0 ? SB_SEND : SB_RECV, o, l);
    lblock(m, p, g, li - k - 2, &o, &l);
    if (l)
        sched_recv_reduce(s, member(m, m->h, (li + L - 1) % L), SB_RECV, o, SB_SEND, o, l);
}

/* Stage 2, step k < 2(H-1): one ring all-reduce per owned slice among its
 * owners, in host order. */
static void inter(weft_sched *s, const sched_params *p, const hmap *m, const hseg *g, int k)
{
    int H = m->H, h = m->h, L = m->L;
    int src = L > 1 ? SB_RECV : SB_SEND; /* the host's partial sums */
    int rs = k < H - 1, kk = rs ? k : k - (H - 1);
    int sb = rs ? ring_peer(h, -kk, H) : ring_peer(h, 1 - kk, H);
    int rb = rs ? ring_peer(h, -kk - 1, H) : ring_peer(h, -kk, H);
    uint64_t o, l;
    for (int j = slice_lo(m, L, m->li); j < slice_lo(m, L, m->li + 1); j++) {
        sub(m, p, g, j, sb, &o, &l);
        if (l)
            sched_send(s, owner(m, ring_peer(h, 1, H), j), k == 0 ? src : SB_RECV, o, l);
        sub(m, p, g, j, rb, &o, &l);
        if (l && rs)
            sched_recv_reduce(s, owner(m, ring_peer(h, -1, H), j), SB_RECV, o, src, o, l);
        else if (l)
            sched_recv(s, owner(m, ring_peer(h, -1, H), j), SB_RECV, o, l);
    }
}

/* Stage 3, step k < L-1: ring all-gather inside the host. */
static void intra_ag(weft_sched *s, const sched_params *p, const hmap *m, const hseg *g, int k)
{
    int L = m->L, li = m->li;
    uint64_t o, l;
    lblock(m, p, g, li - k, &o, &l);
    if (l)
        sched_send(s, member(m, m->h, (li + 1) % L), SB_RECV, o, l);
    lblock(m, p, g, li - k - 1, &o, &l);
    if (l)
        sched_recv(s, member(m, m->h, (li + L - 1) % L), SB_RECV, o, l);
}

#define HIER_MAX_SEGS 8
#define HIER_WAN_SEG (64u << 20)
#define HIER_WAN_SEGS 4

/* A large all-reduce runs as a wavefront instead: segments small enough
 * that a sub-block crossing between hosts is HIER_PIPE_CHUNK, and in
 * round t step k of the S = 2(M-1) + 2(H-1) steps of a segment (M-1 of
 * the reduce-scatter inside the host, 2(H-1) of the ring between hosts,
 * M-1 of the all-gather inside the host) works on segment t-k. As in the
 * ring's wavefront (sched_ring.c), a chunk reduced in one round leaves in
 * the next while it is still in the cache, and every link, inside hosts
 * and between them, is busy in every round; sending megabytes at once
 * queues them in the sockets and has them copied through memory. Every
 * rank of a host drives its own slices' traffic between hosts. */
#define HIER_PIPE_CHUNK (64u << 10) /* of 32, 64, 128, 256 KiB the best on a veth pair */
#define HIER_PIPE_MIN_CHUNKS 4u     /* from a single segment's sub-block of 4 chunks */
#define HIER_PIPE_MAX_WORK 65536u   /* segments times steps; beyond, segments grow */

/* Segments of the wavefront; 0: do not pipeline. Every rank computes the
 * same from the same map. The bound keeps a schedule's ops (a few per
 * step and segment) to about a hundred thousand however many hosts. */
static uint64_t hier_pipe_segs(const hmap *m, const sched_params *p)
{
    uint64_t n = p->count * p->esize, per = (uint64_t)m->M * (uint64_t)m->H;
    uint64_t C = p->chunk_bytes ? chunk_bytes_of(p) : HIER_PIPE_CHUNK;
    uint64_t steps = 2 * (uint64_t)(m->M - 1) + 2 * (uint64_t)(m->H - 1);
    if (n / per < HIER_PIPE_MIN_CHUNKS * C)
        return 0;
    uint64_t g = n / (per * C);
    if (g * steps > HIER_PIPE_MAX_WORK)
        g = HIER_PIPE_MAX_WORK / steps;
    if (g > p->count / per)
        g = p->count / per;
    return g > 1 ? g : 0;
}

static void hier_allreduce_pipelined(weft_sched *s, const sched_params *p, const hmap *m,
                                     uint64_t nseg)
{
    int A = m->M - 1, B = 2 * (m->H - 1), S = 2 * A + B;
    /* segments of whole units of M*H elements (the rest to the last), so
     * that each splits into equal slices and sub-blocks where the count
     * allows */
    uint64_t unit = (uint64_t)m->M * (uint64_t)m->H, units = p->count / unit;
    /* Segments are disjoint, so a round's ops never touch the same bytes;
     * each segment goes through the steps it would go through alone, in
     * the same order, so what makes one segment right in place makes all
     * right; and both ends of a link list a round's steps in the same
     * order, so each pair's messages stay in order. */
    for (uint64_t t = 0; t < nseg + (uint64_t)S - 1; t++) {
        /* latest step first, as the ring does: its data came in last round */
        for (int k = S - 1; k >= 0; k--) {
            if (t < (uint64_t)k || t - (uint64_t)k >= nseg)
                continue;
            uint64_t gi = t - (uint64_t)k;
            hseg g = { block_start(units, (int)nseg, (int)gi) * unit,
                       block_len(units, (int)nseg, (int)gi) * unit };
            if (gi == nseg - 1)
                g.count = p->count - g.base;
            if (k < A) {
                if (k < m->L - 1)
                    intra_rs(s, p, m, &g, k);
            } else if (k < A + B) {
                inter(s, p, m, &g, k - A);
            } else if (k - A - B < m->L - 1) {
                intra_ag(s, p, m, &g, k - A - B);
            }
        }
        sched_end_round(s);
    }
}

/* The three stages of segment g run in superstep g, g+1 and g+2, each
 * superstep W = max(M-1, 2(H-1)) rounds, the same on every rank: while
 * one segment crosses between hosts, the next is reduced and the previous
 * gathered inside them, so both kinds of link stay busy. Every op meets
 * its peer's op in the same round, which keeps the schedule free of
 * deadlock under any transport, and both sides list a round's ops in the
 * same order (stage 1, 2, 3), which keeps each pair's messages in order. */
static void hier_allreduce(weft_sched *s, const sched_params *p, const hmap *m)
{
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    /* Across clusters every round that crosses waits a one-way delay, of
     * milliseconds on a real WAN: no wavefront of small segments. Each
     * further segment adds 2(C-1) delays and hides the phases inside the
     * clusters behind the crossing, which pays only where a segment's
     * crossing takes far longer than a delay: segments of at least
     * HIER_WAN_SEG bytes (chunk_bytes when set), at most HIER_WAN_SEGS. */
    uint64_t nseg = p->cluster ? 0 : hier_pipe_segs(m, p);
    if (nseg) {
        hier_allreduce_pipelined(s, p, m, nseg);
        return;
    }
    nseg = n / (p->cluster ? (p->chunk_bytes ? p->chunk_bytes : HIER_WAN_SEG)
                           : 2 * (uint64_t)m->M * C);
    if (p->cluster && nseg > HIER_WAN_SEGS)
        nseg = HIER_WAN_SEGS;
    if (nseg > HIER_MAX_SEGS)
        nseg = HIER_MAX_SEGS;
    if (nseg > p->count)
        nseg = p->count;
    if (nseg < 1)
        nseg = 1;
    int W = m->M - 1 > 2 * (m->H - 1) ? m->M - 1 : 2 * (m->H - 1);
    for (uint64_t ss = 0; ss < nseg + 2; ss++)
        for (int i = 0; i < W; i++) {
            for (int st = 0; st < 3; st++) {
                if (ss < (uint64_t)st || ss - (uint64_t)st >= nseg)
                    continue;
                uint64_t gi = ss - (uint64_t)st;
                hseg g = { block_start(p->count, (int)nseg, (int)gi),
                           block_len(p->count, (int)nseg, (int)gi) };
                if (st == 0 && i < m->L - 1)
                    intra_rs(s, p, m, &g, i);
                else if (st == 1 && i < 2 * (m->H - 1))
                    inter(s, p, m, &g, i);
                else if (st == 2 && i < m->L - 1)
                    intra_ag(s, p, m, &g, i);
            }
            sched_end_round(s);
        }
}

/* One rank's place in the broadcast/reduce tree. */
typedef struct {
    int parent, child[3], nchild, depth, maxdepth;
} hnode;

/* The root leads its host, the lowest rank every other. */
static int host_lead(const hmap *m, int g, int root)
{
    return g == m->of[root] ? root : member(m, g, 0);
}

/* k-th rank of host g's chain: its leader, then the others ascending. */
static int chain_at(const hmap *m, int g, int lead, int k)
{
    if (k == 0)
        return lead;
    for (int i = 0; i < hsize(m, g); i++) {
        int q = member(m, g, i);
        if (q != lead && --k == 0)
            return q;
    }
    return -1;
}

/* The leaders form the in-order binary tree of coll/sched/tree.h over the
 * hosts, rotated so that the root's host is at its top; from each leader a
 * chain runs through the other ranks of its host. Depth: about 2 log2 H
 * hops between hosts plus L-1 inside one. maxdepth is a bound every rank
 * computes alike (the tree is at most 2 log2 H + 1 deep). */
static void hier_tree(const hmap *m, int rank, int root, hnode *n)
{
    int H = m->H, h = m->h, g0 = m->of[root], L = m->L;
    int shift = sched_tree_root(H);
    int tp = (ring_peer(h, -g0, H) + shift) % H; /* this host's tree position */
    int lead = host_lead(m, h, root), lli = 0, lg = 0, par, l, r;
    while (member(m, h, lli) != lead)
        lli++;
    int idx = rank == lead ? 0 : m->li < lli ? m->li + 1 : m->li;
    while ((1 << lg) <= H)
        lg++;
    n->depth = sched_tree_depth(tp, H) + idx;
    n->maxdepth = 2 * lg + 1 + m->M;
    n->nchild = 0;
    n->parent = -1;
    if (idx > 0) {
        n->parent = chain_at(m, h, lead, idx - 1);
    } else {
        if ((par = sched_tree_parent(tp, H)) >= 0)
            n->parent = host_lead(m, ring_peer(par - shift, g0, H), root);
        sched_tree_children(tp, H, &l, &r);
        if (l >= 0)
            n->child[n->nchild++] = host_lead(m, ring_peer(l - shift, g0, H), root);
        if (r >= 0)
            n->child[n->nchild++] = host_lead(m, ring_peer(r - shift, g0, H), root);
    }
    if (idx + 1 < L)
        n->child[n->nchild++] = chain_at(m, h, lead, idx + 1);
}

static uint64_t clen(uint64_t n, uint64_t C, uint64_t c)
{
    return n - c * C < C ? n - c * C : C;
}

/* Pipelined: a rank at depth d receives chunk c in step c+d-1 and passes
 * it on in step c+d. */
static void hier_broadcast(weft_sched *s, const sched_params *p, const hmap *m)
{
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p), nch = (n + C - 1) / C;
    hnode t;
    hier_tree(m, p->rank, p->root, &t);
    for (uint64_t st = 0; st < nch + (uint64_t)t.maxdepth; st++) {
        int64_t b = (int64_t)st - t.depth + 1, c = b - 1;
        if (t.parent >= 0 && b >= 0 && (uint64_t)b < nch)
            sched_recv(s, t.parent, SB_RECV, (uint64_t)b * C, clen(n, C, (uint64_t)b));
        if (c >= 0 && (uint64_t)c < nch)
            for (int i = 0; i < t.nchild; i++)
                sched_send(s, t.child[i], SB_RECV, (uint64_t)c * C, clen(n, C, (uint64_t)c));
        sched_end_round(s);
    }
}

/* Pipelined the other way: a rank at depth d sends chunk c up in step
 * c+D-d (D >= every depth), having taken it in from its children the step
 * before: the first child's part is reduced as it arrives, the others wait
 * in SB_TMP slots and are folded in when the next step starts. Partial sums
 * of ranks other than the root alternate between two SB_TMP slots (their
 * SB_RECV may be absent). */
static void hier_reduce(weft_sched *s, const sched_params *p, const hmap *m)
{
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p), nch = (n + C - 1) / C;
    int own = p->inplace ? SB_RECV : SB_SEND;
    hnode t;
    hier_tree(m, p->rank, p->root, &t);
    int root = t.parent < 0;
    int acc = root ? SB_RECV : SB_TMP;
    uint64_t y = root ? 0 : 2 * C; /* slots of children 1 and 2 */
    if (t.nchild > 0)
        sched_need_tmp(s, y + (uint64_t)(t.nchild - 1) * C);
#define ACC_OFF(c) (root ? (c) * C : ((c) % 2) * C)
    for (uint64_t st = 0; st < nch + (uint64_t)t.maxdepth + 1; st++) {
        int64_t a = (int64_t)st - (t.maxdepth - t.depth), b = a + 1;
        if (a >= 0 && (uint64_t)a < nch) {
            uint64_t ua = (uint64_t)a, len = clen(n, C, ua);
            for (int i = 1; i < t.nchild; i++)
                sched_reduce(s, acc, ACC_OFF(ua), SB_TMP, y + (uint64_t)(i - 1) * C, len);
            if (!root)
                sched_send(s, t.parent, t.nchild ? acc : own,
                           t.nchild ? ACC_OFF(ua) : ua * C, len);
        }
        if (t.nchild > 0 && b >= 0 && (uint64_t)b < nch) {
            uint64_t ub = (uint64_t)b, len = clen(n, C, ub);
            sched_recv_reduce(s, t.child[0], acc, ACC_OFF(ub), own, ub * C, len);
            for (int i = 1; i < t.nchild; i++)
                sched_recv(s, t.child[i], SB_TMP, y + (uint64_t)(i - 1) * C, len);
        }
        sched_end_round(s);
    }
#undef ACC_OFF
}

int sched_hier(weft_sched *s, const sched_params *p)
{
    hmap m;
    int rc;
    uint64_t n = p->count * p->esize;
    if (p->kind != WEFT_COLL_ALLREDUCE && p->kind != WEFT_COLL_BROADCAST &&
        p->kind != WEFT_COLL_REDUCE)
        return WEFT_ENOTSUP;
    if ((rc = hmap_build(&m, p)))
        return rc;
    /* One host; or one rank per host, where the ring's all-reduce is this
     * one's and pipelines large messages itself, so that auto sees one
     * algorithm, not two alike */
    if (m.H == 1 || (m.M == 1 && p->kind == WEFT_COLL_ALLREDUCE && m.H <= RING_PIPE_MAX_RANKS)) {
        hmap_free(&m);
        return sched_ring(s, p);
    }
    if (p->nranks > 1 && n > 0) {
        switch (p->kind) {
        case WEFT_COLL_ALLREDUCE: hier_allreduce(s, p, &m); break;
        case WEFT_COLL_BROADCAST: hier_broadcast(s, p, &m); break;
        default: hier_reduce(s, p, &m); break;
        }
    }
    hmap_free(&m);
    return 0;
}
