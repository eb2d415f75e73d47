/* Registered memory for point-to-point (weft_mem_alloc): a communicator's
 * regions, each a memfd mapped shared, so that a rank of the same host
 * can map the very pages a send names and copy out of them once, in user
 * space. process_vm_readv also copies once, but the kernel pins the
 * sender's pages one at a time and moved only a quarter of memcpy's rate
 * here (docs/BENCHMARKS.md, "Small messages"); a mapping costs that once
 * per region, not once per message.
 *
 * The sender side is the registry (alloc, free, find). The receiver side
 * is a cache of peers' regions it mapped: it takes the memfd from the
 * sender with pidfd_getfd (the permission process_vm_readv needs), maps
 * it read-only once (writable where a sender shares the copy into a
 * receiver's region: p2p_reg_dst), and keeps it until the sender's descriptor names
 * another generation in the same fd slot (the region was freed and the
 * slot reused), the cache is full, the peer fails or the engine ends.
 * Both sides lock the registry's own mutex: alloc and free come from the
 * caller's threads, find and map from whoever drives the engine. */
#ifndef WEFT_COLL_EXEC_P2P_REG_H
#define WEFT_COLL_EXEC_P2P_REG_H

#include "transport/shm.h"

#include <stddef.h>
#include <stdint.h>

/* shm_cma_desc.cma of a message whose payload lies in a registered
 * region: pid is the sender, addr the offset in the region, cookie its
 * generation, cookie_addr its memfd's number (low 32 bits) and the low 32
 * bits of its inode (high: which file the fd must be, checked after
 * pidfd_getfd, so a reused pid or slot reads nothing wrong). */
#define P2P_REG_DESC 2u

/* Allocations under this go to malloc: too small to be worth an fd and a
 * mapping, and below SHM_CMA_MIN, where no descriptor is sent anyway. */
#define P2P_REG_MIN SHM_CMA_MIN
#define P2P_REG_ALIGN (2u << 20) /* huge-page aligned, as memory registration wants */
#define P2P_REG_CACHE 8          /* peers' regions kept mapped per peer */

typedef struct p2p_reg p2p_reg;

/* An empty registry for a communicator of size ranks; NULL: no memory. */
p2p_reg *p2p_reg_new(int size);
/* Unmap and close everything: regions left allocated and peers' mappings. */
void p2p_reg_free_all(p2p_reg *g);

/* bytes (> 0) of memory: from P2P_REG_MIN on a memfd region, else
 * malloc'd; both recorded. 0, WEFT_ENOMEM or WEFT_ESYS (err says why). */
int p2p_reg_alloc(p2p_reg *g, size_t bytes, void **out, char *err, size_t errlen);
/* Release what p2p_reg_alloc gave. WEFT_EINVAL when p is not one. */
int p2p_reg_release(p2p_reg *g, void *p);
/* Sender: does [buf, buf + len) lie wholly in one region? Then fill d
 * (pid: the sender's) and return 1. */
int p2p_reg_find(p2p_reg *g, const void *buf, uint64_t len, int pid, shm_cma_desc *d);

/* Receiver: where the payload of len bytes that peer q's descriptor d
 * names lies in this process (mapping the region on first use). 0 with
 * *src set; WEFT_EPEER when the sender process is gone; otherwise
 * WEFT_ESYS or WEFT_EPROTO with why filled (pidfd_getfd refused, another
 * file, out of range). */
int p2p_reg_src(p2p_reg *g, int q, const shm_cma_desc *d, uint64_t len, const char **src,
                char *why, size_t whylen);
/* Sender sharing a single copy (shm_share_*): where the receiver's
 * destination that peer q's offer d names lies in this process, mapped
 * writable on first use; returns as p2p_reg_src. */
int p2p_reg_dst(p2p_reg *g, int q, const shm_cma_desc *d, uint64_t len, char **dst, char *why,
                size_t whylen);
/* Receiver: n bytes of a payload of len out of a peer's region. From
 * half the last-level cache (sysfs) on, with non-temporal stores on
 * x86-64: the C library's own threshold follows the cache size it reads,
 * 320 MiB on the 2-vCPU EPYC guest against the kernel's 32 MiB, and a
 * 16 MiB registered message there moved ~15% more streamed
 * (docs/BENCHMARKS.md, "Small messages"); below, and elsewhere, memcpy. */
void p2p_reg_copy(const p2p_reg *g, void *dst, const void *src, size_t n, uint64_t len);
/* Payloads from bytes on stream (0: none); a test's, to reach the
 * streamed copy on any machine. */
void p2p_reg_stream_from(p2p_reg *g, size_t bytes);
/* Peer q failed: unmap its regions. */
void p2p_reg_forget(p2p_reg *g, int q);

#endif
