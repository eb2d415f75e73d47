/* Rabenseifner's schedules. All-reduce is a reduce-scatter by recursive
 * halving (round k exchanges half of what is left with the rank at distance
 * p/2^(k+1), so each rank ends with 1/p of the result) followed by an
 * all-gather by recursive doubling (the same exchanges backwards, each
 * doubling what a rank holds). 2 log2 p rounds, like recursive doubling,
 * but only 2(p-1)/p of the data leaves each rank, like the ring.
 *
 * When p is not a power of two, let pw be the largest power of two below p
 * and rem = p - pw: among the first 2*rem ranks each even one hands its data
 * to the odd one after it and sits out; the odd one answers for both in the
 * pw-rank exchange and hands the result back at the end.
 *
 * Every element is reduced in exactly one place (the rank that keeps it in
 * a halving round) and copied from there, so every rank gets bit-identical
 * results whatever the dtype. */
#include "coll/sched/two_level.h"
#include "coll/sched/util.h"

/* This rank's place among the pw ranks of the exchange. */
typedef struct {
    int P, pw, rem;
    int q;        /* position: rank - base, mod p */
    int base;     /* rank at position 0 */
    int vr;       /* virtual rank, or -1 when folded out */
    int per_rank; /* 1: data is p blocks of `blk` bytes (reduce-scatter,
                     all-gather); 0: `count` elements split into pw blocks */
    uint64_t count, esize, blk;
} fold;

/* rooted: positions rotate so that the root is virtual rank 0. */
static fold fold_of(const sched_params *p, int per_rank, int rooted)
{
    fold f = { .P = p->nranks, .pw = 1, .per_rank = per_rank, .count = p->count,
               .esize = p->esize, .blk = p->count * p->esize };
    while (f.pw * 2 <= f.P)
        f.pw *= 2;
    f.rem = f.P - f.pw;
    f.base = rooted ? ring_peer(p->root, f.rem > 0 ? -1 : 0, f.P) : 0;
    f.q = ring_peer(p->rank, -f.base, f.P);
    if (f.q < 2 * f.rem)
        f.vr = f.q % 2 ? f.q / 2 : -1;
    else
        f.vr = f.q - f.rem;
    return f;
}

static int real_of(const fold *f, int q) { return ring_peer(q, f->base, f->P); }

static int fold_rank(const fold *f, int vr)
{
    return real_of(f, vr < f->rem ? 2 * vr + 1 : vr + f->rem);
}

/* Byte offset where virtual block v starts (v = pw: the end). With per-rank
 * blocks, virtual rank v answers for real blocks 2v and 2v+1 (v < rem) or
 * block v+rem, so a window of virtual blocks is a contiguous byte range. */
static uint64_t vbyte(const fold *f, int v)
{
    if (f->per_rank)
        return (uint64_t)(v < f->rem ? 2 * v : v + f->rem) * f->blk;
    return block_start(f->count, f->pw, v) * f->esize;
}

/* Recursive halving over the partial result in `cur` (own data in round
 * one, `acc` afterwards); what this rank keeps is reduced into `acc` at the
 * same offsets. The last round writes into fin_buf at offset - fin_base
 * instead when fin_buf >= 0. */
static void halving(weft_sched *s, const fold *f, int cur, int acc, int fin_buf,
                   uint64_t fin_base)
{
    int vr = f->vr;
    for (int mask = f->pw / 2; mask >= 1; mask /= 2) {
        int peer = fold_rank(f, vr ^ mask);
        int lo = vr & ~(2 * mask - 1);
        int keep = vr & mask ? lo + mask : lo, give = vr & mask ? lo : lo + mask;
        uint64_t ko = vbyte(f, keep), kl = vbyte(f, keep + mask) - ko;
        uint64_t go = vbyte(f, give), gl = vbyte(f, give + mask) - go;
        int dst = acc;
        uint64_t doff = ko;
        if (mask == 1 && fin_buf >= 0) {
            dst = fin_buf;
            doff = ko - fin_base;
        }
        if (gl)
            sched_send(s, peer, cur, go, gl);
        if (kl)
            sched_recv_reduce(s, peer, dst, doff, cur, ko, kl);
        sched_end_round(s);
        cur = dst;
    }
}

/* Recursive doubling over SB_RECV: each round swaps the window of virtual
 * blocks held so far with the partner's, which is the same size. */
static void doubling(weft_sched *s, const fold *f)
{
    int vr = f->vr;
    for (int mask = 1; mask < f->pw; mask *= 2) {
        int vp = vr ^ mask, peer = fold_rank(f, vp);
        int mine = vr & ~(mask - 1), theirs = vp & ~(mask - 1);
        uint64_t mo = vbyte(f, mine), ml = vbyte(f, mine + mask) - mo;
        uint64_t to = vbyte(f, theirs), tl = vbyte(f, theirs + mask) - to;
        if (ml)
            sched_send(s, peer, SB_RECV, mo, ml);
        if (tl)
            sched_recv(s, peer, SB_RECV, to, tl);
        sched_end_round(s);
    }
}

static void rab_allreduce(weft_sched *s, const sched_params *p)
{
    int r = p->rank;
    uint64_t n = p->count * p->esize;
    int own = p->inplace ? SB_RECV : SB_SEND;
    fold f = fold_of(p, 0, 0);
    if (f.P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (n == 0)
        return;
    if (f.vr < 0) { /* folded out: hand over, wait for the result */
        sched_send(s, r + 1, own, 0, n);
        sched_end_round(s);
        sched_recv(s, r + 1, SB_RECV, 0, n);
        sched_end_round(s);
        return;
    }
    if (r < 2 * f.rem) {
        sched_recv_reduce(s, r - 1, SB_RECV, 0, own, 0, n);
        sched_end_round(s);
        own = SB_RECV;
    }
    halving(s, &f, own, SB_RECV, -1, 0);
    doubling(s, &f);
    if (r < 2 * f.rem) {
        sched_send(s, r - 1, SB_RECV, 0, n);
        sched_end_round(s);
    }
}

/* SB_SEND holds p blocks of count elements; block r, reduced, goes to
 * SB_RECV. The caller may place SB_RECV on block r of SB_SEND, so partial
 * sums live in SB_TMP (laid out as SB_SEND) and SB_RECV is written only by
 * the op that last reads block r. */
static void rab_reduce_scatter(weft_sched *s, const sched_params *p)
{
    int r = p->rank;
    uint64_t n = p->count * p->esize, all = (uint64_t)p->nranks * n;
    fold f = fold_of(p, 1, 0);
    if (f.P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (n == 0)
        return;
    if (f.vr < 0) {
        sched_send(s, r + 1, SB_SEND, 0, all);
        sched_end_round(s);
        sched_recv(s, r + 1, SB_RECV, 0, n);
        sched_end_round(s);
        return;
    }
    sched_need_tmp(s, all);
    int cur = SB_SEND;
    if (r < 2 * f.rem) {
        sched_recv_reduce(s, r - 1, SB_TMP, 0, SB_SEND, 0, all);
        sched_end_round(s);
        cur = SB_TMP;
        /* the result is blocks r-1 and r: it stays in SB_TMP */
        halving(s, &f, cur, SB_TMP, -1, 0);
        sched_copy(s, SB_RECV, 0, SB_TMP, (uint64_t)r * n, n);
        sched_send(s, r - 1, SB_TMP, (uint64_t)(r - 1) * n, n);
        sched_end_round(s);
        return;
    }
    halving(s, &f, cur, SB_TMP, SB_RECV, (uint64_t)r * n);
}

/* SB_RECV gets p blocks of count elements, block j from rank j; SB_SEND
 * may be block r of SB_RECV itself. */
static void rab_allgather(weft_sched *s, const sched_params *p)
{
    int r = p->rank;
    uint64_t n = p->count * p->esize, all = (uint64_t)p->nranks * n;
    fold f = fold_of(p, 1, 0);
    if (f.P == 1 || n == 0) {
        sched_copy(s, SB_RECV, (uint64_t)r * n, SB_SEND, 0, n);
        return;
    }
    if (f.vr < 0) { /* its own block comes back with the rest */
        sched_send(s, r + 1, SB_SEND, 0, n);
        sched_end_round(s);
        sched_recv(s, r + 1, SB_RECV, 0, all);
        sched_end_round(s);
        return;
    }
    sched_copy(s, SB_RECV, (uint64_t)r * n, SB_SEND, 0, n);
    if (r < 2 * f.rem) {
        sched_recv(s, r - 1, SB_RECV, (uint64_t)(r - 1) * n, n);
        sched_end_round(s);
    }
    doubling(s, &f);
    if (r < 2 * f.rem) {
        sched_send(s, r - 1, SB_RECV, 0, all);
        sched_end_round(s);
    }
}

/* Reduce: recursive halving, then the blocks travel back up a binomial
 * tree to the root (Rabenseifner's reduce). Positions are rotated so that
 * the root is virtual rank 0; partial sums of other ranks live in SB_TMP,
 * since their SB_RECV may be absent. */
static void rab_reduce(weft_sched *s, const sched_params *p)
{
    uint64_t n = p->count * p->esize;
    int own = p->inplace ? SB_RECV : SB_SEND, root = p->rank == p->root;
    fold f = fold_of(p, 0, 1);
    if (f.P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (n == 0)
        return;
    if (f.vr < 0) {
        sched_send(s, real_of(&f, f.q + 1), own, 0, n);
        return;
    }
    int acc = root ? SB_RECV : SB_TMP, cur = own;
    if (!root)
        sched_need_tmp(s, n);
    if (f.q < 2 * f.rem) {
        sched_recv_reduce(s, real_of(&f, f.q - 1), acc, 0, own, 0, n);
        sched_end_round(s);
        cur = acc;
    }
    halving(s, &f, cur, acc, -1, 0);
    /* binomial gather: at distance mask, the ranks with that bit set hand
     * the window of 'mask' blocks they hold to the one below them */
    int vr = f.vr;
    for (int mask = 1; mask < f.pw; mask *= 2) {
        if ((vr & (2 * mask - 1)) == mask) {
            uint64_t o = vbyte(&f, vr), l = vbyte(&f, vr + mask) - o;
            if (l)
                sched_send(s, fold_rank(&f, vr - mask), acc, o, l);
            sched_end_round(s);
            break;
        }
        uint64_t o = vbyte(&f, vr + mask), l = vbyte(&f, vr + 2 * mask) - o;
        if (l)
            sched_recv(s, fold_rank(&f, vr + mask), acc, o, l);
        sched_end_round(s);
    }
}

/* Broadcast: a binomial scatter of the root's blocks, then the recursive
 * doubling all-gather (van de Geijn's broadcast). Folded-out ranks get the
 * whole message from their partner at the end. */
static void rab_broadcast(weft_sched *s, const sched_params *p)
{
    uint64_t n = p->count * p->esize;
    fold f = fold_of(p, 0, 1);
    if (f.P == 1 || n == 0)
        return;
    if (f.vr < 0) {
        sched_recv(s, real_of(&f, f.q + 1), SB_RECV, 0, n);
        return;
    }
    int vr = f.vr;
    for (int mask = f.pw / 2; mask >= 1; mask /= 2) {
        int low = vr & (2 * mask - 1);
        if (low == 0) {
            uint64_t o = vbyte(&f, vr + mask), l = vbyte(&f, vr + 2 * mask) - o;
            if (l)
                sched_send(s, fold_rank(&f, vr + mask), SB_RECV, o, l);
        } else if (low == mask) {
            uint64_t o = vbyte(&f, vr), l = vbyte(&f, vr + mask) - o;
            if (l)
                sched_recv(s, fold_rank(&f, vr - mask), SB_RECV, o, l);
        }
        sched_end_round(s);
    }
    doubling(s, &f);
    if (f.q < 2 * f.rem) {
        sched_send(s, real_of(&f, f.q - 1), SB_RECV, 0, n);
        sched_end_round(s);
    }
}

int sched_rabenseifner(weft_sched *s, const sched_params *p)
{
    switch (p->kind) {
    case WEFT_COLL_ALLREDUCE: rab_allreduce(s, p); break;
    case WEFT_COLL_REDUCE_SCATTER: rab_reduce_scatter(s, p); break;
    case WEFT_COLL_ALLGATHER: rab_allgather(s, p); break;
    case WEFT_COLL_REDUCE: rab_reduce(s, p); break;
    case WEFT_COLL_BROADCAST: rab_broadcast(s, p); break;
    default: return WEFT_ENOTSUP;
    }
    return 0;
}
