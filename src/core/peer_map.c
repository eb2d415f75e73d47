/* A peer's memfd mapped through its pidfd (core/peer_map.h). */
#include "core/peer_map.h"

#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Linux 5.3 and 5.6; the numbers are the same on every architecture
 * since 5.1's table unification, older C libraries may lack the names. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int peer_map(int32_t pid, int slot, uint32_t ino, int write, char **at, size_t *len, char *why,
             size_t whylen)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0) {
        int e = errno;
        snprintf(why, whylen, "pidfd_open(%d): %s", (int)pid, strerror(e));
        return e == ESRCH ? WEFT_EPEER : WEFT_ESYS;
    }
    int fd = (int)syscall(SYS_pidfd_getfd, pfd, slot, 0);
    int e = errno;
    close(pfd);
    if (fd < 0) {
        snprintf(why, whylen, "pidfd_getfd(%d, fd %d): %s", (int)pid, slot, strerror(e));
        return e == ESRCH ? WEFT_EPEER : WEFT_ESYS;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint32_t)st.st_ino != ino) {
        close(fd);
        snprintf(why, whylen, "fd %d of process %d is not the region it names", slot, (int)pid);
        return WEFT_EPROTO;
    }
    /* MAP_POPULATE: the page tables are filled here, once, not by faults
     * in the middle of each first copy */
    void *map = mmap(NULL, (size_t)st.st_size, write ? PROT_READ | PROT_WRITE : PROT_READ,
                     MAP_SHARED | MAP_POPULATE, fd, 0);
    e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(why, whylen, "mmap of %lld bytes: %s", (long long)st.st_size, strerror(e));
        return WEFT_ESYS;
    }
    *at = map;
    *len = (size_t)st.st_size;
    return 0;
}
