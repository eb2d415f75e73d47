/* Single copy from peers' registered memory (weft_mem_alloc) for the
 * direct all-to-all-v: a reader maps the memfd behind a peer's send
 * buffer once and then copies blocks out of it with memcpy, where
 * process_vm_readv, which pins the peer's pages one at a time on every
 * call, ran at a quarter of memcpy's rate (docs/BENCHMARKS.md, "Experts:
 * the dispatch's movement"). The mappings are the collective stream's
 * own, apart from the point-to-point engine's (which another thread
 * drives), and live until the communicator ends. */
#ifndef WEFT_COLL_DIRECT_MAP_H
#define WEFT_COLL_DIRECT_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct direct_maps direct_maps;

/* What a rank publishes of its send buffer's region: key, the memfd's
 * number (low 32 bits) and the low 32 bits of its inode (high), checked
 * after the fd is taken so that a reused slot maps nothing wrong; gen,
 * the region's generation in that process (0: not in a region); off,
 * where the send buffer's byte 0 falls in the region (modulo 2^64: the
 * buffer may start before it, its blocks for the peers do not). */
typedef struct {
    uint64_t key, gen, off;
} direct_region;

/* Where len bytes at offset off of peer q's region (process pid) lie in
 * this process, mapping the region on first use (*m made then, for a
 * communicator of size ranks). 0 with *src set; otherwise the peer's
 * blocks are to be read another way (why says why: pidfd_getfd refused,
 * another file, out of range, out of memory). */
int direct_map_src(direct_maps **m, int size, int q, int32_t pid, const direct_region *g,
                   uint64_t off, uint64_t len, const char **src, char *why, size_t whylen);
/* Unmap everything (NULL: nothing). */
void direct_map_free(direct_maps *m);

#endif
