#include "transport/shm.h"

#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x5746544du /* "MTFW" at the head of a segment */
/* a peer's ring must be one WEFT_SHM_RING could make (core/param_table.h) */
#define SHM_RING_MIN (64u << 10)
#define SHM_RING_MAX (1u << 30)

_Static_assert(sizeof(shm_hello) == 88, "shm_hello is a wire layout");
_Static_assert(sizeof(shm_ctl) <= SHM_DATA_OFF, "shm_ctl fits before the data");

uint64_t shm_ring_bytes(const param_set *p)
{
    /* the table bounds it (64 KiB .. 1 GiB); offsets in the ring are
     * 8-byte aligned */
    return (uint64_t)p->shm_ring & ~(uint64_t)7;
}

uint64_t shm_ring_fit(uint64_t want, const int32_t *host, int size, int rank)
{
    uint64_t peers = 0, fair;
    for (int i = 0; host && i < size; i++)
        peers += i != rank && host[i] == host[rank];
    if (!peers)
        return want;
    /* whole pages: the segment is a page of control and the ring */
    fair = SHM_RANK_BUDGET / peers & ~(uint64_t)4095;
    if (fair < SHM_RING_MIN)
        fair = SHM_RING_MIN;
    return want < fair ? want : fair;
}

static int sys_err(char *err, size_t errlen, const char *what, const char *name, int e)
{
    size_t n;
    snprintf(err, errlen, "%s %s: %s", what, name, strerror(e));
    n = strlen(err);
    if (e == ENOSPC && n + 1 < errlen)
        snprintf(err + n, errlen - n, " (/dev/shm is full: see df /dev/shm)");
    else
        sock_limit_note(e, err, errlen); /* out of descriptors, or memory */
    return WEFT_ESYS;
}

int shm_segment_create(const char *name, size_t len, void **map, char *err, size_t errlen)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* left by a dead process that had this one's pid */
        shm_unlink(name);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return sys_err(err, errlen, "shm_open", name, errno);
    int e = ftruncate(fd, (off_t)len) ? errno : posix_fallocate(fd, 0, (off_t)len);
    void *m = e ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!e && m == MAP_FAILED)
        e = errno;
    close(fd);
    if (e) {
        shm_unlink(name);
        return sys_err(err, errlen, "sizing shared segment", name, e);
    }
    *map = m;
    return 0;
}

int shm_segment_open(const char *name, size_t len, int unlink, void **map, char *err,
                     size_t errlen)
{
    struct stat sb;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return sys_err(err, errlen, "shm_open", name, errno);
    if (unlink)
        shm_unlink(name);
    if (fstat(fd, &sb) || (uint64_t)sb.st_size != len) {
        close(fd);
        snprintf(err, errlen, "shared segment %s has the wrong size", name);
        return WEFT_EPROTO;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return sys_err(err, errlen, "mmap", name, e);
    *map = m;
    return 0;
}

int shm_ring_create(shm_ring *r, uint64_t comm_id, int src, int dst, uint64_t bytes,
                    shm_hello *hello, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "/weft-%016llx-%d-%d-%ld", (unsigned long long)comm_id,
             src, dst, (long)getpid());
    size_t len = SHM_DATA_OFF + bytes;
    void *m;
    int rc = shm_segment_create(r->name, len, &m, err, errlen);
    if (rc) {
        r->name[0] = 0;
        return rc;
    }
    r->ctl = m;
    r->data = (char *)m + SHM_DATA_OFF;
    r->bytes = bytes;
    r->map_len = len;
    r->ctl->magic = SHM_MAGIC;
    r->ctl->version = SHM_VERSION;
    r->ctl->bytes = bytes;
    memset(hello, 0, sizeof *hello);
    hello->magic = SHM_HELLO_MAGIC;
    hello->version = SHM_VERSION;
    hello->mode = SHM_MODE_RING;
    hello->bytes = bytes;
    memcpy(hello->name, r->name, sizeof hello->name);
    return 0;
}

int shm_hello_check(const shm_hello *h, const char **why)
{
    *why = NULL;
    if (h->magic != SHM_HELLO_MAGIC)
        *why = "bad magic in the shared-memory hello";
    else if (h->version != SHM_VERSION)
        *why = "unknown shared-memory hello version";
    else if (h->mode != SHM_MODE_TCP && h->mode != SHM_MODE_RING)
        *why = "unknown shared-memory mode";
    else if (h->mode == SHM_MODE_RING &&
             (h->bytes < SHM_RING_MIN || h->bytes > SHM_RING_MAX || h->bytes % 8))
        *why = "bad shared-memory ring size";
    else if (h->mode == SHM_MODE_RING &&
             (!memchr(h->name, 0, sizeof h->name) || strncmp(h->name, "/weft-", 6) ||
              strchr(h->name + 1, '/')))
        *why = "bad shared-memory segment name";
    return *why ? WEFT_EPROTO : 0;
}

void shm_unlink_to(uint64_t comm_id, int dst)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char prefix[32], name[300];
    snprintf(prefix, sizeof prefix, "weft-%016llx-", (unsigned long long)comm_id);
    while (d && (e = readdir(d))) {
        int src, to, used = 0;
        long pid;
        if (strncmp(e->d_name, prefix, strlen(prefix)) ||
            sscanf(e->d_name + strlen(prefix), "%d-%d-%ld%n", &src, &to, &pid, &used) != 3 ||
            e->d_name[strlen(prefix) + (size_t)used] || to != dst)
            continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        shm_unlink(name);
    }
    if (d)
        closedir(d);
}

int shm_ring_attach(shm_ring *r, const shm_hello *h, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    size_t len = SHM_DATA_OFF + h->bytes;
    void *m;
    /* unlinked at once: both sides have it now (or the sender is gone) */
    int rc = shm_segment_open(h->name, len, 1, &m, err, errlen);
    if (rc)
        return rc;
    shm_ctl *ctl = m;
    if (ctl->magic != SHM_MAGIC || ctl->version != SHM_VERSION || ctl->bytes != h->bytes) {
        munmap(m, len);
        snprintf(err, errlen, "shared segment %s is not a weft ring", h->name);
        return WEFT_EPROTO;
    }
    atomic_store(&ctl->attached, 1);
    r->ctl = ctl;
    r->data = (char *)m + SHM_DATA_OFF;
    r->bytes = h->bytes;
    r->map_len = len;
    return 0;
}

void shm_links_free(shm_link *l, int n)
{
    for (int i = 0; l && i < n; i++) {
        shm_ring_close(&l[i].ring);
        free(l[i].stage);
    }
    free(l);
}

void shm_ring_unlink(shm_ring *r)
{
    if (r->name[0] && r->ctl && !atomic_load(&r->ctl->attached))
        shm_unlink(r->name);
    r->name[0] = 0;
}

void shm_ring_close(shm_ring *r)
{
    if (r->ctl)
        munmap(r->ctl, r->map_len);
    memset(r, 0, sizeof *r);
}

/* The receiver is told about new bytes (and the sender about room) only
 * when it said it sleeps. Each side stores (position, or its flag) and
 * then loads (the other's flag, or position) with sequential consistency,
 * so at least one of them sees the other's store: a sleeper that missed
 * the new bytes gets the doorbell. */
static int must_ring(_Atomic uint32_t *asleep)
{
    return atomic_load_explicit(asleep, memory_order_seq_cst) &&
           atomic_exchange_explicit(asleep, 0, memory_order_relaxed);
}

/* The sender loads the receiver's head only when the room it last saw
 * is short: each load takes the line from the receiver's cache (a
 * transfer between cores in every message's path), and makes the
 * receiver's next store to it fetch it back. */
size_t shm_ring_put(shm_ring *r, const void *src, size_t n)
{
    uint64_t room = r->bytes - (r->pos - r->seen);
    if (n > room) {
        r->seen = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
        room = r->bytes - (r->pos - r->seen);
    }
    if (n > room)
        n = (size_t)room;
    if (!n)
        return 0;
    uint64_t at = r->pos % r->bytes, first = r->bytes - at;
    if (first >= n) {
        memcpy(r->data + at, src, n);
    } else {
        memcpy(r->data + at, src, (size_t)first);
        memcpy(r->data, (const char *)src + first, n - (size_t)first);
    }
    r->pos += n;
    return n;
}

int shm_ring_flush(shm_ring *r)
{
    atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_seq_cst);
    return must_ring(&r->ctl->reader_asleep);
}

void shm_ring_end_msg(shm_ring *r)
{
    r->pos = (r->pos + 7) & ~(uint64_t)7;
}

size_t shm_ring_peek(const shm_ring *r, const char **p, size_t max)
{
    uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
    if (tail <= r->pos)
        return 0;
    uint64_t n = tail - r->pos, at = r->pos % r->bytes;
    if (n > r->bytes - at)
        n = r->bytes - at;
    if (n > max)
        n = max;
    *p = r->data + at;
    return (size_t)n;
}

void shm_ring_consume(shm_ring *r, size_t n, int *ring)
{
    r->pos += n;
    atomic_store_explicit(&r->ctl->head, r->pos, memory_order_seq_cst);
    *ring = must_ring(&r->ctl->writer_asleep);
}

void shm_ring_end_msg_read(shm_ring *r)
{
    r->pos = (r->pos + 7) & ~(uint64_t)7;
}

size_t shm_ring_read(shm_ring *r, void *dst, size_t n, int *ring)
{
    size_t got = 0;
    *ring = 0;
    while (got < n) {
        const char *p;
        size_t k = shm_ring_peek(r, &p, n - got);
        if (!k)
            break;
        memcpy((char *)dst + got, p, k);
        got += k;
        r->pos += k;
    }
    if (got) {
        atomic_store_explicit(&r->ctl->head, r->pos, memory_order_seq_cst);
        *ring = must_ring(&r->ctl->writer_asleep);
    }
    return got;
}

int shm_ring_can_write(const shm_ring *r)
{
    return r->pos - atomic_load_explicit(&r->ctl->head, memory_order_acquire) < r->bytes;
}

int shm_ring_can_read(const shm_ring *r)
{
    return atomic_load_explicit(&r->ctl->tail, memory_order_acquire) > r->pos;
}

int shm_ring_can_move(const shm_ring *r, int writer)
{
    if (writer == 2)
        return atomic_load_explicit(&r->ctl->cma_acks, memory_order_seq_cst) >= r->cma_sent;
    return writer ? shm_ring_can_write(r) : shm_ring_can_read(r);
}

int shm_ring_sleep(shm_ring *r, int writer)
{
    _Atomic uint32_t *f = writer ? &r->ctl->writer_asleep : &r->ctl->reader_asleep;
    atomic_store_explicit(f, 1, memory_order_seq_cst);
    int can = writer == 2 ? shm_ring_can_move(r, 2)
              : writer    ? r->pos - atomic_load_explicit(&r->ctl->head, memory_order_seq_cst) < r->bytes
                          : atomic_load_explicit(&r->ctl->tail, memory_order_seq_cst) > r->pos;
    if (can) {
        atomic_store_explicit(f, 0, memory_order_relaxed);
        return 0;
    }
    return 1;
}

void shm_ring_wake(shm_ring *r, int writer)
{
    atomic_store_explicit(writer ? &r->ctl->writer_asleep : &r->ctl->reader_asleep, 0,
                          memory_order_relaxed);
}

int shm_cma_acked(const shm_ring *r, int *refused)
{
    if (atomic_load_explicit(&r->ctl->cma_acks, memory_order_acquire) < r->cma_sent)
        return 0;
    *refused = (int)atomic_load_explicit(&r->ctl->cma_refused, memory_order_relaxed);
    return 1;
}

int shm_cma_ack(shm_ring *r, int refused)
{
    atomic_store_explicit(&r->ctl->cma_refused, (uint32_t)refused, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->ctl->cma_acks, 1, memory_order_seq_cst);
    return must_ring(&r->ctl->writer_asleep);
}

void shm_share_offer(shm_ring *r, const shm_cma_desc *dst, uint64_t len)
{
    shm_share *s = &r->ctl->share;
    s->dst = *dst;
    s->len = len;
    atomic_store_explicit(&s->next, 0, memory_order_relaxed);
    atomic_store_explicit(&s->done, 0, memory_order_relaxed);
    /* this copy is the one after those acknowledged */
    uint64_t seq = atomic_load_explicit(&r->ctl->cma_acks, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->seq, seq, memory_order_release);
}

int shm_share_offered(const shm_ring *r, shm_cma_desc *dst, uint64_t *len)
{
    const shm_share *s = &r->ctl->share;
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != r->cma_sent)
        return 0;
    *dst = s->dst;
    *len = s->len;
    return atomic_load_explicit(&s->next, memory_order_relaxed) * SHM_SHARE_CHUNK < *len;
}

uint64_t shm_share_claim(shm_ring *r, uint64_t len, uint64_t *off)
{
    uint64_t c = atomic_fetch_add_explicit(&r->ctl->share.next, 1, memory_order_relaxed);
    if (c >= (len + SHM_SHARE_CHUNK - 1) / SHM_SHARE_CHUNK)
        return 0;
    *off = c * SHM_SHARE_CHUNK;
    return len - *off < SHM_SHARE_CHUNK ? len - *off : SHM_SHARE_CHUNK;
}

int shm_share_done(shm_ring *r, uint64_t n)
{
    atomic_fetch_add_explicit(&r->ctl->share.done, n, memory_order_seq_cst);
    return must_ring(&r->ctl->reader_asleep);
}

uint64_t shm_share_copied(const shm_ring *r)
{
    return atomic_load_explicit(&r->ctl->share.done, memory_order_acquire);
}

int shm_share_sleep(shm_ring *r, uint64_t want)
{
    atomic_store_explicit(&r->ctl->reader_asleep, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&r->ctl->share.done, memory_order_seq_cst) >= want) {
        atomic_store_explicit(&r->ctl->reader_asleep, 0, memory_order_relaxed);
        return 0;
    }
    return 1;
}

void shm_share_end(shm_ring *r)
{
    atomic_store_explicit(&r->ctl->share.seq, 0, memory_order_relaxed);
}

long shm_cma_read(int pid, void *dst, uint64_t addr, size_t n)
{
    struct iovec l = { dst, n }, rm = { (void *)(uintptr_t)addr, n };
    for (;;) {
        ssize_t k = process_vm_readv((pid_t)pid, &l, 1, &rm, 1, 0);
        if (k >= 0)
            return (long)k;
        if (errno != EINTR)
            return -errno;
    }
}

/* The creator's pid in a weft segment's name, or 0: rings are
 * weft-ID-SRC-DST-PID, flat boards weft-ID-flat-PID[-pipe]; a calls board
 * (weft-ID-calls-HOST-TOKEN) names no process. */
static long name_pid(const char *name)
{
    unsigned long long id;
    int src, dst, used = 0;
    long pid;
    if (sscanf(name, "weft-%16llx-%d-%d-%ld%n", &id, &src, &dst, &pid, &used) == 4 &&
        !name[used])
        return pid;
    used = 0;
    if (sscanf(name, "weft-%16llx-flat-%ld%n", &id, &pid, &used) == 2 &&
        (!name[used] || !strcmp(name + used, "-pipe")))
        return pid;
    return 0;
}

void shm_reap_orphans(int min_age_s)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    long long now = clock_wall_s();
    while (d && (e = readdir(d))) {
        char full[300];
        struct stat sb;
        long pid = name_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid() || !(kill((pid_t)pid, 0) && errno == ESRCH))
            continue;
        snprintf(full, sizeof full, "/dev/shm/%s", e->d_name);
        /* an age: where /dev/shm is shared with another pid namespace,
         * kill can say ESRCH of a live creator, whose peers map and remove
         * a working segment's name within moments */
        if (stat(full, &sb) || (min_age_s > 0 && now - sb.st_ctime < min_age_s))
            continue;
        shm_unlink(full + strlen("/dev/shm"));
    }
    if (d)
        closedir(d);
}
