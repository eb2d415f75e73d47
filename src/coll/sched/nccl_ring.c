/* NCCL's rings as a schedule (see nccl.h): several node-aware rings, each
 * a reduce-scatter and an all-gather over its share of the data. */
#include "coll/sched/nccl.h"
#include "coll/sched/util.h"

/* Ring position of rank r in channel c, and the rank at a position. */
static int ring_pos(int r, int c, const sched_nccl *o, int p)
{
    int k = o->ranks_per_node, node = r / k, base = node * k;
    int kn = p - base < k ? p - base : k, h = sched_nccl_head(c, o->channels, kn);
    int loc = r - base;
    return base + (loc - (h + 1) + 2 * kn) % kn;
}

static int ring_rank(int pos, int c, const sched_nccl *o, int p)
{
    int k = o->ranks_per_node, base = pos / k * k;
    int kn = p - base < k ? p - base : k, h = sched_nccl_head(c, o->channels, kn);
    return base + (pos - base + h + 1) % kn;
}

int sched_nccl_ring(weft_sched *s, const sched_params *p, const sched_nccl *o)
{
    int P = p->nranks, nch = o->channels;
    uint64_t es = p->esize, n = p->count * es;
    if (p->kind != WEFT_COLL_ALLREDUCE)
        return WEFT_ENOTSUP;
    if (nch < 1 || o->ranks_per_node < 1)
        return WEFT_EINVAL;
    /* every later op works in SB_RECV; the same copy on every rank keeps
     * the schedules identical up to a shift */
    sched_copy(s, SB_RECV, 0, p->inplace ? SB_RECV : SB_SEND, 0, n);
    sched_end_round(s);
    if (P == 1)
        return 0;
    int q[64], nx[64], pv[64];
    if (nch > 64)
        return WEFT_EINVAL;
    for (int c = 0; c < nch; c++) {
        q[c] = ring_pos(p->rank, c, o, P);
        nx[c] = ring_rank((q[c] + 1) % P, c, o, P);
        pv[c] = ring_rank((q[c] + P - 1) % P, c, o, P);
    }
    /* step k < P-1: reduce-scatter; then all-gather. Channel c owns
     * elements [block_start(count, nch, c), +block_len) and splits them
     * into P blocks by ring position. */
    for (int k = 0; k < 2 * (P - 1); k++) {
        for (int c = 0; c < nch; c++) {
            uint64_t c0 = block_start(p->count, nch, c), cn = block_len(p->count, nch, c);
            int ag = k >= P - 1, kk = ag ? k - (P - 1) : k;
            int sb = ag ? (q[c] + 1 - kk + 2 * P) % P : (q[c] - kk + 2 * P) % P;
            int rb = ag ? (q[c] - kk + 2 * P) % P : (q[c] - kk - 1 + 2 * P) % P;
            uint64_t so = (c0 + block_start(cn, P, sb)) * es, sl = block_len(cn, P, sb) * es;
            uint64_t ro = (c0 + block_start(cn, P, rb)) * es, rl = block_len(cn, P, rb) * es;
            sched_send(s, nx[c], SB_RECV, so, sl);
            if (ag)
                sched_recv(s, pv[c], SB_RECV, ro, rl);
            else
                sched_recv_reduce(s, pv[c], SB_RECV, ro, SB_RECV, ro, rl);
        }
        sched_end_round(s);
    }
    return 0;
}
