/* The parameter-server pattern as a schedule, so the simulator can put it
 * side by side with the collectives: ranks 0..S-1 are also servers, each
 * owning one shard. In step t every rank pushes chunk t of every shard to
 * its server, each server sums the chunk t-1 it received from everyone and
 * sends it back, and every rank pulls chunk t-1 of every shard. With one
 * server that server's link carries everything, which is the bottleneck
 * the collectives were invented to remove. */
#include "sim/sim.h"
#include "coll/sched/util.h"

int sim_sched_ps(weft_sched *s, const sched_params *p, int S)
{
    int P = p->nranks, r = p->rank;
    uint64_t es = p->esize, C = chunk_bytes_of(p);
    if (p->kind != WEFT_COLL_ALLREDUCE)
        return WEFT_ENOTSUP;
    if (S < 1)
        S = 1;
    if (S > P)
        S = P;
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, p->count * es);
        return 0;
    }
    uint64_t K = 0; /* chunks of the largest shard */
    for (int j = 0; j < S; j++) {
        uint64_t l = block_len(p->count, S, j) * es;
        if ((l + C - 1) / C > K)
            K = (l + C - 1) / C;
    }
    if (r < S)
        sched_need_tmp(s, (uint64_t)P * C);
    for (uint64_t t = 0; t <= K; t++) {
        for (int j = 0; j < S; j++) {
            uint64_t base = block_start(p->count, S, j) * es;
            uint64_t len = block_len(p->count, S, j) * es;
            uint64_t o0 = (t - 1) * C, o1 = t * C;
            uint64_t l0 = t >= 1 && o0 < len ? (len - o0 < C ? len - o0 : C) : 0;
            uint64_t l1 = o1 < len ? (len - o1 < C ? len - o1 : C) : 0;
            if (j == r) {
                if (l0) { /* sum chunk t-1: own part, then the others in rank order */
                    sched_copy(s, SB_RECV, base + o0, SB_SEND, base + o0, l0);
                    for (int w = 0; w < P; w++)
                        if (w != r)
                            sched_reduce(s, SB_RECV, base + o0, SB_TMP, (uint64_t)w * C, l0);
                    for (int w = 0; w < P; w++)
                        if (w != r)
                            sched_send(s, w, SB_RECV, base + o0, l0);
                }
                if (l1)
                    for (int w = 0; w < P; w++)
                        if (w != r)
                            sched_recv(s, w, SB_TMP, (uint64_t)w * C, l1);
            } else {
                if (l1)
                    sched_send(s, j, SB_SEND, base + o1, l1);
                if (l0)
                    sched_recv(s, j, SB_RECV, base + o0, l0);
            }
        }
        sched_end_round(s);
    }
    return 0;
}
