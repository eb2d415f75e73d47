/* Compressed gradient collectives: the codecs (compress_codec.c), the ring
 * all-reduce that re-quantises every partial sum (compress_ring.c), top-k
 * with error feedback over all-gather (compress_topk.c), PowerSGD over two
 * all-reduces (compress_powersgd.c) and the handle that holds their state
 * (compress.c). Only f32 gradients: compression is for the gradient path. */
#ifndef WEFT_COLL_COMPRESS_H
#define WEFT_COLL_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Elements sharing one fp32 scale in int8/int4: small enough that one
 * outlier spoils few neighbours, large enough that the scale costs 1.6%
 * (int8) or 3% (int4) of the bytes. */
#define COMPRESS_BLOCK 256

/* Point-to-point tag of the compressed ring's messages. */
#define COMPRESS_TAG WEFT_TAG_MAX

/* Start of chunk j of n elements cut into p chunks (the first n % p one
 * longer), as the ring cuts them. */
static inline size_t compress_chunk_start(size_t n, int p, int j)
{
    size_t q = n / (size_t)p, rem = n % (size_t)p, uj = (size_t)j;
    return uj * q + (uj < rem ? uj : rem);
}

/* Bytes rank r of p sends in a ring all-reduce of n elements of size bytes
 * each: every chunk but one in the reduce-scatter, every chunk but another
 * in the all-gather. */
static inline uint64_t compress_ring_bytes(int p, int r, size_t n, size_t size)
{
    if (p < 2)
        return 0;
    size_t a = (size_t)((r + 1) % p), b = (size_t)((r + 2) % p);
    size_t la = compress_chunk_start(n, p, (int)a + 1) - compress_chunk_start(n, p, (int)a);
    size_t lb = compress_chunk_start(n, p, (int)b + 1) - compress_chunk_start(n, p, (int)b);
    return (uint64_t)(2 * n - la - lb) * size;
}

struct weft_compressor {
    weft_comm *comm;
    weft_compress_spec spec;
    size_t count;
    float *err;            /* error feedback (top-k, PowerSGD), count floats */
    uint64_t sent, raw;    /* bytes sent, and what fp32 would have sent */
    /* PowerSGD */
    struct compress_matrix *mat;
    int nmat, mat_cap;
    float *q;              /* every matrix's Q (n x r), warm-started */
    size_t q_len;
    int q_ready;
};

typedef struct compress_matrix {
    size_t offset;
    int rows, cols;
    int low_rank;          /* (rows + cols) r well below rows cols */
    size_t q_off;          /* its Q in q */
} compress_matrix;

int compress_topk_run(weft_compressor *z, float *buf, weft_op op);
int compress_powersgd_run(weft_compressor *z, float *buf, weft_op op);

#endif
