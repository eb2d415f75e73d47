/* Where each element of a tensor lives: a tensor of count floats is cut
 * into nchunks nearly equal chunks (sizes differ by at most one), chunk j
 * of tensor key on server (key + j) mod k. Large tensors get enough chunks
 * to keep each under chunk_max; a tensor of at least k*chunk_min elements
 * is spread over every server, so no server holds a hot spot. */
#ifndef WEFT_PS_SHARD_H
#define WEFT_PS_SHARD_H

#include <stddef.h>
#include <stdint.h>

size_t ps_shard_nchunks(size_t count, int nservers, size_t chunk_min, size_t chunk_max);
/* Elements [*off, *off + *n) of the tensor form chunk j. */
void ps_shard_chunk(size_t count, size_t nchunks, size_t j, size_t *off, size_t *n);
int ps_shard_server(uint32_t key, size_t j, int nservers);

#endif
