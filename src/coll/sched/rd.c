/* Recursive doubling all-reduce: log2(p) rounds, in round k each rank
 * exchanges its whole partial result with the rank whose (renumbered) index
 * differs in bit k. Few rounds, but every round moves all the data, so it
 * suits small messages. When p is not a power of two, the first 2*rem ranks
 * (rem = p - 2^floor(log2 p)) pair up: the even one hands its data to the
 * odd one, sits out, and gets the result back at the end. Each exchange
 * computes op(mine, theirs) on one side and op(theirs, mine) on the other,
 * which are the same for the commutative ops weft has, so every rank ends
 * with bit-identical results. */
#include "coll/sched/tree.h"
#include "coll/sched/util.h"

static int rd_allreduce(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    int own = p->inplace ? SB_RECV : SB_SEND;
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return 0;
    }
    if (n == 0)
        return 0;
    int pw = 1;
    while (pw * 2 <= P)
        pw *= 2;
    int rem = P - pw, vr;
    if (r < 2 * rem) {
        if (r % 2 == 0) { /* folded out: hand over, wait for the result */
            sched_send(s, r + 1, own, 0, n);
            sched_end_round(s);
            sched_recv(s, r + 1, SB_RECV, 0, n);
            sched_end_round(s);
            return 0;
        }
        sched_recv_reduce(s, r - 1, SB_RECV, 0, own, 0, n);
        sched_end_round(s);
        vr = r / 2;
    } else {
        sched_copy(s, SB_RECV, 0, own, 0, n);
        vr = r - rem;
    }
    /* the partial result alternates between SB_RECV and SB_TMP, so the
     * send of one round never races the reduction that writes the next */
    int cur = SB_RECV;
    sched_need_tmp(s, n);
    for (int mask = 1; mask < pw; mask <<= 1) {
        int vp = vr ^ mask;
        int peer = vp < rem ? 2 * vp + 1 : vp + rem;
        int nxt = cur == SB_RECV ? SB_TMP : SB_RECV;
        sched_send(s, peer, cur, 0, n);
        sched_recv_reduce(s, peer, nxt, 0, cur, 0, n);
        sched_end_round(s);
        cur = nxt;
    }
    if (cur != SB_RECV)
        sched_copy(s, SB_RECV, 0, SB_TMP, 0, n);
    if (r < 2 * rem)
        sched_send(s, r - 1, SB_RECV, 0, n);
    return 0;
}

int sched_rd(weft_sched *s, const sched_params *p)
{
    switch (p->kind) {
    case WEFT_COLL_ALLREDUCE: return rd_allreduce(s, p);
    default: return WEFT_ENOTSUP;
    }
}
