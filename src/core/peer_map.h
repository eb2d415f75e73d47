/* A same-host peer's shared memory, mapped by the descriptor the peer
 * holds it under (a memfd from weft_mem_alloc): point-to-point's and the
 * direct all-to-all-v's single copy both read a sender's pages so. */
#ifndef WEFT_CORE_PEER_MAP_H
#define WEFT_CORE_PEER_MAP_H

#include <stddef.h>
#include <stdint.h>

/* The regular file that process pid holds as descriptor slot, which must
 * be inode ino, mapped read-only whole into *at (*len bytes). 0, or
 * WEFT_EPEER (the process is gone), WEFT_EPROTO (that descriptor is not
 * the file named), WEFT_ESYS, each with why. pidfd_getfd asks the same
 * permission as process_vm_readv. */
int peer_map(int32_t pid, int slot, uint32_t ino, int write, char **at, size_t *len, char *why,
             size_t whylen);

#endif
