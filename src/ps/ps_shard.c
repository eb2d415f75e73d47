#include "ps/ps_shard.h"

size_t ps_shard_nchunks(size_t count, int nservers, size_t chunk_min, size_t chunk_max)
{
    size_t by_max, by_min, k = nservers > 0 ? (size_t)nservers : 1;
    if (count == 0)
        return 0;
    if (chunk_min < 1)
        chunk_min = 1;
    if (chunk_max < chunk_min)
        chunk_max = chunk_min;
    by_max = (count + chunk_max - 1) / chunk_max;
    by_min = (count + chunk_min - 1) / chunk_min;
    if (by_min > k)
        by_min = k;
    return by_max > by_min ? by_max : by_min;
}

void ps_shard_chunk(size_t count, size_t nchunks, size_t j, size_t *off, size_t *n)
{
    /* floor(j*count/nchunks) without overflowing for any size_t count */
    size_t q = count / nchunks, r = count % nchunks;
    size_t lo = j * q + (j * r) / nchunks, hi = (j + 1) * q + ((j + 1) * r) / nchunks;
    *off = lo;
    *n = hi - lo;
}

int ps_shard_server(uint32_t key, size_t j, int nservers)
{
    return (int)(((uint64_t)key + j) % (uint64_t)nservers);
}
