/* Naive schedules: every rank sends its whole contribution straight to
 * every rank that needs it, all at once. The bandwidth-wasting baseline:
 * per-rank traffic grows linearly with p. Reductions are done in rank order
 * 0, 1, ..., p-1 so that every rank gets bit-identical floating-point sums. */
#include "coll/sched/naive.h"

#include "coll/sched/util.h"


/* Reduce chunk [off, off+len) of every rank's SB_SEND into SB_RECV of the
 * ranks in `dest` (all ranks when dest < 0). Chunked so the p receive
 * slots in SB_TMP stay small. */
static void naive_reduce_to(weft_sched *s, const sched_params *p, int dest)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    int recv_here = dest < 0 || dest == r;
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (recv_here)
        sched_need_tmp(s, (uint64_t)P * C);
    uint64_t prev_off = 0, prev_len = 0;
    for (uint64_t off = 0; off < n || prev_len; off += C) {
        uint64_t len = off < n ? (n - off < C ? n - off : C) : 0;
        if (recv_here && prev_len) { /* fold the previous chunk in rank order */
            sched_copy(s, SB_RECV, prev_off, SB_TMP, 0, prev_len);
            for (int j = 1; j < P; j++)
                sched_reduce(s, SB_RECV, prev_off, SB_TMP, (uint64_t)j * C, prev_len);
        }
        if (len) {
            if (recv_here)
                sched_copy(s, SB_TMP, (uint64_t)r * C, SB_SEND, off, len);
            for (int j = 0; j < P; j++) {
                if (j == r)
                    continue;
                if (dest < 0 || dest == j)
                    sched_send(s, j, SB_SEND, off, len);
                if (recv_here)
                    sched_recv(s, j, SB_TMP, (uint64_t)j * C, len);
            }
        }
        sched_end_round(s);
        prev_off = off;
        prev_len = len;
    }
}

static void naive_reduce_scatter(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    if (n == 0)
        return;
    sched_need_tmp(s, (uint64_t)P * n);
    sched_copy(s, SB_TMP, (uint64_t)r * n, SB_SEND, (uint64_t)r * n, n);
    for (int j = 0; j < P; j++) {
        if (j == r)
            continue;
        sched_send(s, j, SB_SEND, (uint64_t)j * n, n);
        sched_recv(s, j, SB_TMP, (uint64_t)j * n, n);
    }
    sched_end_round(s);
    sched_copy(s, SB_RECV, 0, SB_TMP, 0, n);
    for (int j = 1; j < P; j++)
        sched_reduce(s, SB_RECV, 0, SB_TMP, (uint64_t)j * n, n);
}

static void naive_broadcast(weft_sched *s, const sched_params *p)
{
    uint64_t n = p->count * p->esize;
    if (n == 0)
        return;
    for (int j = 0; j < p->nranks; j++) {
        if (p->rank == p->root && j != p->root)
            sched_send(s, j, SB_RECV, 0, n);
    }
    if (p->rank != p->root)
        sched_recv(s, p->root, SB_RECV, 0, n);
}

static void naive_allgather(weft_sched *s, const sched_params *p, int root)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    if (root < 0 || root == r)
        sched_copy(s, SB_RECV, (uint64_t)r * n, SB_SEND, 0, n);
    if (n == 0)
        return;
    for (int j = 0; j < P; j++) {
        if (j == r)
            continue;
        if (root < 0 || root == j)
            sched_send(s, j, SB_SEND, 0, n);
        if (root < 0 || root == r)
            sched_recv(s, j, SB_RECV, (uint64_t)j * n, n);
    }
}

static void naive_scatter(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    if (r == p->root)
        sched_copy(s, SB_RECV, 0, SB_SEND, (uint64_t)r * n, n);
    if (n == 0)
        return;
    if (r != p->root) {
        sched_recv(s, p->root, SB_RECV, 0, n);
        return;
    }
    for (int j = 0; j < P; j++)
        if (j != r)
            sched_send(s, j, SB_SEND, (uint64_t)j * n, n);
}

static void naive_alltoall(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    if (n == 0)
        return;
    int src = alltoall_begin(s, p);
    for (int j = 0; j < P; j++) {
        if (j == r)
            continue;
        sched_send(s, j, src, (uint64_t)j * n, n);
        sched_recv(s, j, SB_RECV, (uint64_t)j * n, n);
    }
}

static void naive_barrier(weft_sched *s, const sched_params *p)
{
    for (int j = 0; j < p->nranks; j++) {
        if (j == p->rank)
            continue;
        sched_send(s, j, SB_RECV, 0, 0);
        sched_recv(s, j, SB_RECV, 0, 0);
    }
}

int sched_naive(weft_sched *s, const sched_params *p)
{
    switch (p->kind) {
    case WEFT_COLL_ALLREDUCE: naive_reduce_to(s, p, -1); break;
    case WEFT_COLL_REDUCE: naive_reduce_to(s, p, p->root); break;
    case WEFT_COLL_REDUCE_SCATTER: naive_reduce_scatter(s, p); break;
    case WEFT_COLL_BROADCAST: naive_broadcast(s, p); break;
    case WEFT_COLL_ALLGATHER: naive_allgather(s, p, -1); break;
    case WEFT_COLL_GATHER: naive_allgather(s, p, p->root); break;
    case WEFT_COLL_SCATTER: naive_scatter(s, p); break;
    case WEFT_COLL_ALLTOALL: naive_alltoall(s, p); break;
    case WEFT_COLL_BARRIER: naive_barrier(s, p); break;
    default: return WEFT_ENOTSUP;
    }
    return 0;
}
