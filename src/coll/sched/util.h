/* Arithmetic shared by the schedule generators. */
#ifndef WEFT_COLL_SCHED_UTIL_H
#define WEFT_COLL_SCHED_UTIL_H

#include "coll/sched/plan.h"

/* Ranks on a ring, wrapped into [0, p). */
static inline int ring_peer(int r, int d, int p)
{
    return (int)(((long)r + d % p + p) % p);
}

/* Block b of count elements split as evenly as possible into p blocks:
 * the first count % p blocks get one element more. Result in elements. */
static inline uint64_t block_start(uint64_t count, int p, int b)
{
    uint64_t q = count / (uint64_t)p, rem = count % (uint64_t)p;
    return (uint64_t)b * q + ((uint64_t)b < rem ? (uint64_t)b : rem);
}

static inline uint64_t block_len(uint64_t count, int p, int b)
{
    return block_start(count, p, b + 1) - block_start(count, p, b);
}

/* The most ranks, one per host, whose ring all-reduce sched_ring.c
 * pipelines as a wavefront of chunks (a round holds 2(p-1) sends, checked
 * pairwise); sched_hier.c hands such jobs to it. */
#define RING_PIPE_MAX_RANKS 8

static inline uint64_t chunk_bytes_of(const sched_params *p)
{
    uint64_t c = p->chunk_bytes ? p->chunk_bytes : SCHED_DEFAULT_CHUNK;
    c -= c % p->esize;
    return c ? c : p->esize;
}

/* All-to-all's first steps, shared by its algorithms: in place, received
 * blocks would overwrite blocks not yet sent, so the input is copied to
 * SB_TMP first; then this rank's own block is copied. Returns the buffer to
 * send from. */
static inline int alltoall_begin(weft_sched *s, const sched_params *p)
{
    uint64_t n = p->count * p->esize, all = (uint64_t)p->nranks * n;
    int src = SB_SEND;
    if (p->inplace && p->nranks > 1) {
        sched_need_tmp(s, all);
        sched_copy(s, SB_TMP, 0, SB_RECV, 0, all);
        src = SB_TMP;
    }
    sched_copy(s, SB_RECV, (uint64_t)p->rank * n, src, (uint64_t)p->rank * n, n);
    return src;
}

#endif
