/* Ring schedules. All-reduce is ring reduce-scatter followed by ring
 * all-gather, so each rank sends 2(p-1)/p of the data whatever p is. Rooted
 * collectives run along the ring as a chain, pipelined in chunks so that every
 * link is busy at once. Every generator reads its input only from SB_SEND and
 * writes only SB_RECV/SB_TMP, and never reads an SB_SEND range after writing
 * the same SB_RECV range, so they stay correct when the caller passes the same
 * buffer for both (in place). */
#include "coll/sched/ring.h"

#include "coll/sched/util.h"

#include <stdlib.h>

/* One reduce-scatter step k: send block r-k, fold block r-k-1 into SB_RECV;
 * after p-1 steps block r+1 is fully reduced here. */
static void ring_rs_step(weft_sched *s, const sched_params *p, int k)
{
    int P = p->nranks, r = p->rank;
    uint64_t es = p->esize, n = p->count;
    int sb = ring_peer(r, -k, P), rb = ring_peer(r, -k - 1, P);
    uint64_t so = block_start(n, P, sb) * es, sl = block_len(n, P, sb) * es;
    uint64_t ro = block_start(n, P, rb) * es, rl = block_len(n, P, rb) * es;
    if (sl)
        sched_send(s, ring_peer(r, 1, P), k == 0 ? SB_SEND : SB_RECV, so, sl);
    if (rl)
        sched_recv_reduce(s, ring_peer(r, -1, P), SB_RECV, ro, SB_SEND, ro, rl);
    sched_end_round(s);
}

/* One all-gather step k: forward block r+1-k, receive block r-k. */
static void ring_ag_step(weft_sched *s, const sched_params *p, int k)
{
    int P = p->nranks, r = p->rank;
    uint64_t es = p->esize, n = p->count;
    int sb = ring_peer(r, 1 - k, P), rb = ring_peer(r, -k, P);
    uint64_t so = block_start(n, P, sb) * es, sl = block_len(n, P, sb) * es;
    uint64_t ro = block_start(n, P, rb) * es, rl = block_len(n, P, rb) * es;
    if (sl)
        sched_send(s, ring_peer(r, 1, P), SB_RECV, so, sl);
    if (rl)
        sched_recv(s, ring_peer(r, -1, P), SB_RECV, ro, rl);
    sched_end_round(s);
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* A large all-reduce over ranks on separate hosts: each block in m
 * chunks, and step k of the 2(p-1) ring steps works on chunk t-k in round
 * t, a wavefront. A chunk reduced in one round leaves in the next, while
 * it is still in the cache, and only about two chunks each way wait in the
 * sockets, so the receiver copies packets the kernel has just written. Whole blocks of
 * megabytes go through memory instead: queued in the sockets, reduced into
 * memory and read back for the next step; memory, not the link, is what
 * a socket copy of large buffers runs out of. Both directions of every
 * link stay busy throughout. The price: a round waits for its chunks, so
 * a link whose round trip is long next to a chunk's transfer time is not
 * kept full. */
#define RING_PIPE_CHUNK (64u << 10) /* the best of 16 KiB .. 1 MiB on a veth pair */
#define RING_PIPE_MIN (256u << 10)  /* block bytes from which to pipeline */
#define RING_PIPE_MAX_CHUNKS 8192u  /* per block; beyond, chunks grow */

static uint64_t ring_pipe_chunks(const sched_params *p)
{
    int P = p->nranks;
    uint64_t C = p->chunk_bytes ? chunk_bytes_of(p) : RING_PIPE_CHUNK;
    uint64_t most = block_len(p->count, P, 0) * p->esize; /* block 0 is a largest */
    if (P < 2 || P > RING_PIPE_MAX_RANKS || !p->host || most < RING_PIPE_MIN || most < 2 * C)
        return 0;
    /* One rank per host. Several ranks of a host share its cores, and
     * rounds that wait on each other in small steps then cost a switch
     * each (4 ranks on two 2-core namespaces ran slower so); those jobs
     * have the hierarchical algorithm. Every rank asks the same question
     * of the same table, so all cut alike. */
    for (int i = 0; i < P; i++)
        for (int k = i + 1; k < P; k++)
            if (p->host[i] == p->host[k])
                return 0;
    uint64_t m = (most + C - 1) / C;
    return m < RING_PIPE_MAX_CHUNKS ? m : RING_PIPE_MAX_CHUNKS;
}

/* Chunk j of m of block b, in bytes; every rank cuts every block alike. */
static void ring_chunk(const sched_params *p, int b, uint64_t j, uint64_t m, uint64_t *off,
                       uint64_t *len)
{
    uint64_t bs = block_start(p->count, p->nranks, b), bl = block_len(p->count, p->nranks, b);
    uint64_t lo = bl * j / m, hi = bl * (j + 1) / m;
    *off = (bs + lo) * p->esize;
    *len = (hi - lo) * p->esize;
}

static void ring_allreduce_pipelined(weft_sched *s, const sched_params *p, uint64_t m)
{
    int P = p->nranks, r = p->rank, steps = 2 * (P - 1);
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    for (uint64_t t = 0; t < m + (uint64_t)steps - 1; t++) {
        /* latest step first: its chunk is the one reduced in the last round
         * (step 0 reads the caller's input, which is not in the cache) */
        for (int k = steps - 1; k >= 0; k--) {
            if (t < (uint64_t)k || t - (uint64_t)k >= m)
                continue;
            uint64_t j = t - (uint64_t)k, so, sl, ro, rl;
            if (k < P - 1) {
                ring_chunk(p, ring_peer(r, -k, P), j, m, &so, &sl);
                ring_chunk(p, ring_peer(r, -k - 1, P), j, m, &ro, &rl);
                if (sl)
                    sched_send(s, next, k == 0 ? SB_SEND : SB_RECV, so, sl);
                if (rl)
                    sched_recv_reduce(s, prev, SB_RECV, ro, SB_SEND, ro, rl);
            } else {
                int g = k - (P - 1);
                ring_chunk(p, ring_peer(r, 1 - g, P), j, m, &so, &sl);
                ring_chunk(p, ring_peer(r, -g, P), j, m, &ro, &rl);
                if (sl)
                    sched_send(s, next, SB_RECV, so, sl);
                if (rl)
                    sched_recv(s, prev, SB_RECV, ro, rl);
            }
        }
        sched_end_round(s);
    }
}

/* In-place all-reduce on SB_RECV after an optional copy from SB_SEND. */
static void ring_allreduce(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count;
    int *ks = NULL, nk = 0;
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n * p->esize);
        return;
    }
    /* With fewer elements than ranks only blocks 0..n-1 are non-empty, so
     * only the steps that touch them do anything: list those steps instead
     * of walking all p-1 (the simulator builds 24,576 of these). The
     * rounds are exactly the ones the full walk would keep. */
    if (n < (uint64_t)P && (ks = malloc(4 * (size_t)n * sizeof *ks)) != NULL) {
        for (int b = 0; b < (int)n; b++) {
            ks[nk++] = ring_peer(r, -b, P);     /* rs: sends block b */
            ks[nk++] = ring_peer(r, -b - 1, P); /* rs: folds block b */
        }
        qsort(ks, (size_t)nk, sizeof *ks, cmp_int);
        for (int i = 0; i < nk; i++)
            if (ks[i] < P - 1 && (i == 0 || ks[i] != ks[i - 1]))
                ring_rs_step(s, p, ks[i]);
        nk = 0;
        for (int b = 0; b < (int)n; b++) {
            ks[nk++] = ring_peer(r, 1 - b, P);  /* ag: forwards block b */
            ks[nk++] = ring_peer(r, -b, P);     /* ag: receives block b */
        }
        qsort(ks, (size_t)nk, sizeof *ks, cmp_int);
        for (int i = 0; i < nk; i++)
            if (ks[i] < P - 1 && (i == 0 || ks[i] != ks[i - 1]))
                ring_ag_step(s, p, ks[i]);
        free(ks);
        return;
    }
    uint64_t m = ring_pipe_chunks(p);
    if (m) {
        ring_allreduce_pipelined(s, p, m);
        return;
    }
    for (int k = 0; k < P - 1; k++)
        ring_rs_step(s, p, k);
    for (int k = 0; k < P - 1; k++)
        ring_ag_step(s, p, k);
}

/* SB_SEND holds p blocks of count elements; this rank's reduced block r goes
 * to SB_RECV. Partial sums travel through two alternating SB_TMP slots. */
static void ring_reduce_scatter(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (n == 0)
        return;
    sched_need_tmp(s, 2 * n);
    for (int k = 0; k < P - 1; k++) {
        int sb = ring_peer(r, -k - 1, P), rb = ring_peer(r, -k - 2, P);
        if (k == 0)
            sched_send(s, next, SB_SEND, (uint64_t)sb * n, n);
        else
            sched_send(s, next, SB_TMP, (uint64_t)((k - 1) % 2) * n, n);
        if (k == P - 2)
            sched_recv_reduce(s, prev, SB_RECV, 0, SB_SEND, (uint64_t)rb * n, n);
        else
            sched_recv_reduce(s, prev, SB_TMP, (uint64_t)(k % 2) * n, SB_SEND,
                              (uint64_t)rb * n, n);
        sched_end_round(s);
    }
}

static void ring_allgather(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    sched_copy(s, SB_RECV, (uint64_t)r * n, SB_SEND, 0, n);
    if (n == 0)
        return;
    for (int k = 0; k < P - 1; k++) {
        sched_send(s, next, SB_RECV, (uint64_t)ring_peer(r, -k, P) * n, n);
        sched_recv(s, prev, SB_RECV, (uint64_t)ring_peer(r, -k - 1, P) * n, n);
        sched_end_round(s);
    }
}

/* Chain root -> root+1 -> ... -> root-1, chunk c leaving position i in
 * round c+i: all links carry a chunk at once once the pipe is full. */
static void ring_broadcast(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    uint64_t nchunks = (n + C - 1) / C;
    int pos = ring_peer(r, -p->root, P);
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    if (P == 1 || n == 0)
        return;
    for (uint64_t t = 0; t < nchunks + (uint64_t)P - 2; t++) {
        if (pos > 0 && t + 1 >= (uint64_t)pos && t + 1 - (uint64_t)pos < nchunks) {
            uint64_t c = t + 1 - (uint64_t)pos, off = c * C;
            sched_recv(s, prev, SB_RECV, off, n - off < C ? n - off : C);
        }
        if (pos < P - 1 && t >= (uint64_t)pos && t - (uint64_t)pos < nchunks) {
            uint64_t c = t - (uint64_t)pos, off = c * C;
            sched_send(s, next, SB_RECV, off, n - off < C ? n - off : C);
        }
        sched_end_round(s);
    }
}

/* Chain root+1 -> root+2 -> ... -> root, pipelined in chunks; partial
 * results wait in two alternating SB_TMP chunk slots on the way. */
static void ring_reduce(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    uint64_t nchunks = (n + C - 1) / C;
    int pos = ring_peer(r, -p->root - 1, P); /* root is position P-1 */
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return;
    }
    if (n == 0)
        return;
    if (pos > 0 && pos < P - 1)
        sched_need_tmp(s, 2 * C);
    for (uint64_t t = 0; t < nchunks + (uint64_t)P - 2; t++) {
        if (pos > 0 && t + 1 >= (uint64_t)pos && t + 1 - (uint64_t)pos < nchunks) {
            uint64_t c = t + 1 - (uint64_t)pos, off = c * C;
            uint64_t len = n - off < C ? n - off : C;
            if (pos == P - 1)
                sched_recv_reduce(s, prev, SB_RECV, off, SB_SEND, off, len);
            else
                sched_recv_reduce(s, prev, SB_TMP, (c % 2) * C, SB_SEND, off, len);
        }
        if (pos < P - 1 && t >= (uint64_t)pos && t - (uint64_t)pos < nchunks) {
            uint64_t c = t - (uint64_t)pos, off = c * C;
            uint64_t len = n - off < C ? n - off : C;
            if (pos == 0)
                sched_send(s, next, SB_SEND, off, len);
            else
                sched_send(s, next, SB_TMP, (c % 2) * C, len);
        }
        sched_end_round(s);
    }
}

/* Chain root+1 -> ... -> root-1 -> root. In round t position k forwards
 * the block of position k-t; relayed blocks wait in two SB_TMP slots. */
static void ring_gather(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank, root = p->root;
    uint64_t n = p->count * p->esize;
    int k = ring_peer(r, -root, P); /* position; the root is 0 (== P) */
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    if (k == 0)
        sched_copy(s, SB_RECV, (uint64_t)root * n, SB_SEND, 0, n);
    if (P == 1 || n == 0)
        return;
    if (k > 1)
        sched_need_tmp(s, 2 * n);
    for (int t = 0; t < P - 1; t++) {
        if (k == 0) {
            int src = ring_peer(root, P - 1 - t, P);
            sched_recv(s, prev, SB_RECV, (uint64_t)src * n, n);
        } else {
            if (k - 1 - t >= 1) /* block of position k-1-t from prev */
                sched_recv(s, prev, SB_TMP, (uint64_t)(t % 2) * n, n);
            if (k - t >= 1) {
                if (t == 0)
                    sched_send(s, next, SB_SEND, 0, n);
                else
                    sched_send(s, next, SB_TMP, (uint64_t)((t - 1) % 2) * n, n);
            }
        }
        sched_end_round(s);
    }
}

/* Chain root -> root+1 -> ... -> root-1; the root sends the farthest
 * block first, each hop forwards what is not its own. */
static void ring_scatter(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank, root = p->root;
    uint64_t n = p->count * p->esize;
    int k = ring_peer(r, -root, P);
    int next = ring_peer(r, 1, P), prev = ring_peer(r, -1, P);
    if (k == 0)
        sched_copy(s, SB_RECV, 0, SB_SEND, (uint64_t)root * n, n);
    if (P == 1 || n == 0)
        return;
    if (k > 0 && k < P - 1)
        sched_need_tmp(s, 2 * n);
    for (int t = 0; t < P - 1; t++) {
        if (k == 0) {
            int dst = ring_peer(root, P - 1 - t, P);
            sched_send(s, next, SB_SEND, (uint64_t)dst * n, n);
        } else {
            int dest = P - 2 - t + k; /* position whose block arrives now */
            if (t >= k - 1 && dest >= k) {
                if (dest == k)
                    sched_recv(s, prev, SB_RECV, 0, n);
                else
                    sched_recv(s, prev, SB_TMP, (uint64_t)(t % 2) * n, n);
            }
            if (t >= k && P - 1 - t + k > k)
                sched_send(s, next, SB_TMP, (uint64_t)((t - 1) % 2) * n, n);
        }
        sched_end_round(s);
    }
}

/* Pairwise exchange: in step k send to r+k and receive from r-k. */
static void ring_alltoall(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t n = p->count * p->esize;
    if (n == 0)
        return;
    int src = alltoall_begin(s, p);
    for (int k = 1; k < P; k++) {
        int to = ring_peer(r, k, P), from = ring_peer(r, -k, P);
        sched_send(s, to, src, (uint64_t)to * n, n);
        sched_recv(s, from, SB_RECV, (uint64_t)from * n, n);
        sched_end_round(s);
    }
}

/* Dissemination barrier: ceil(log2 p) rounds of empty messages. */
void sched_barrier_dissemination(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    for (int d = 1; d < P; d *= 2) {
        sched_send(s, ring_peer(r, d, P), SB_RECV, 0, 0);
        sched_recv(s, ring_peer(r, -d, P), SB_RECV, 0, 0);
        sched_end_round(s);
    }
}

int sched_ring(weft_sched *s, const sched_params *p)
{
    switch (p->kind) {
    case WEFT_COLL_ALLREDUCE: ring_allreduce(s, p); break;
    case WEFT_COLL_REDUCE_SCATTER: ring_reduce_scatter(s, p); break;
    case WEFT_COLL_ALLGATHER: ring_allgather(s, p); break;
    case WEFT_COLL_BROADCAST: ring_broadcast(s, p); break;
    case WEFT_COLL_REDUCE: ring_reduce(s, p); break;
    case WEFT_COLL_GATHER: ring_gather(s, p); break;
    case WEFT_COLL_SCATTER: ring_scatter(s, p); break;
    case WEFT_COLL_ALLTOALL: ring_alltoall(s, p); break;
    case WEFT_COLL_BARRIER: sched_barrier_dissemination(s, p); break;
    default: return WEFT_ENOTSUP;
    }
    return 0;
}
