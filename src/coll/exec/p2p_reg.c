/* Registered memory for point-to-point: the registry and the receiver's
 * mappings (coll/exec/p2p_reg.h). */
#include "coll/exec/p2p_reg.h"

#include "core/peer_map.h"

#include "weft.h"

#include <errno.h>
#include <pthread.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *base;
    size_t len;
    int fd;            /* -1: malloc'd (under P2P_REG_MIN) */
    uint32_t ino;
    uint64_t gen;
} reg_region;

typedef struct {
    char *map;         /* NULL: a free slot */
    size_t len;
    int pid, fd;
    int rw;            /* mapped writable: a receiver's region its sender copies into */
    uint64_t gen;
    uint64_t used;     /* the cache's clock when last used: the oldest goes first */
} reg_mapping;

struct p2p_reg {
    pthread_mutex_t mu;
    reg_region *r;
    int n, cap;
    uint64_t gen;
    int size;
    reg_mapping *peer; /* size * P2P_REG_CACHE */
    uint64_t clock;
    size_t stream_min; /* payloads from this size on bypass the caches in p2p_reg_copy; 0: none */
};

/* The last-level cache's size as the kernel reports it, 0 when unknown.
 * Not sysconf: on the 2-vCPU EPYC guest the C library reports a 320 MiB
 * L3 where the kernel says 32 MiB (and so never streams a copy). */
static size_t llc_bytes(void)
{
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[80], unit = 0;
        int level = 0, ok;
        unsigned long v = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!ok || level < best_level || !(f = fopen(path, "r")))
            continue;
        ok = fscanf(f, "%lu%c", &v, &unit) >= 1;
        fclose(f);
        size_t b = (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1u << 20 : 1u);
        if (ok && (level > best_level || b > best)) {
            best = b;
            best_level = level;
        }
    }
    return best;
}

p2p_reg *p2p_reg_new(int size)
{
    p2p_reg *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->peer = calloc((size_t)size * P2P_REG_CACHE, sizeof *g->peer);
    if (!g->peer) {
        free(g);
        return NULL;
    }
    g->size = size;
    /* from half the cache on, source and destination together no longer
     * fit it: the copy's stores only evict what the next copy reads */
    g->stream_min = llc_bytes() / 2;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

void p2p_reg_stream_from(p2p_reg *g, size_t bytes) { g->stream_min = bytes; }

void p2p_reg_copy(const p2p_reg *g, void *dst, const void *src, size_t n, uint64_t len)
{
#if defined(__x86_64__)
    if (g->stream_min && len >= g->stream_min && n >= 4096) {
        char *d = dst;
        const char *s = src;
        size_t head = (size_t)(-(uintptr_t)d & 63); /* to the destination's line */
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        for (; n >= 64; d += 64, s += 64, n -= 64) {
            const __m128i *in = (const __m128i *)(const void *)s;
            __m128i *out = (__m128i *)(void *)d;
            __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1);
            __m128i c = _mm_loadu_si128(in + 2), e = _mm_loadu_si128(in + 3);
            _mm_stream_si128(out, a);
            _mm_stream_si128(out + 1, b);
            _mm_stream_si128(out + 2, c);
            _mm_stream_si128(out + 3, e);
        }
        _mm_sfence(); /* the streamed lines are out before the acknowledgement */
        memcpy(d, s, n);
        return;
    }
#endif
    memcpy(dst, src, n);
}

static void region_drop(reg_region *x)
{
    if (x->fd < 0) {
        free(x->base);
        return;
    }
    munmap(x->base, x->len);
    close(x->fd);
}

static void mapping_drop(reg_mapping *m)
{
    if (m->map)
        munmap((void *)m->map, m->len);
    memset(m, 0, sizeof *m);
}

void p2p_reg_free_all(p2p_reg *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        region_drop(&g->r[i]);
    for (int i = 0; i < g->size * P2P_REG_CACHE; i++)
        mapping_drop(&g->peer[i]);
    pthread_mutex_destroy(&g->mu);
    free(g->r);
    free(g->peer);
    free(g);
}

/* len bytes of fd mapped shared at a P2P_REG_ALIGN boundary: reserve
 * len + ALIGN of address space, put the file at the aligned address
 * inside, give the slack back. */
static char *map_aligned(int fd, size_t len)
{
    size_t span = len + P2P_REG_ALIGN;
    char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)res + P2P_REG_ALIGN - 1) & ~(uintptr_t)(P2P_REG_ALIGN - 1);
    char *at = (char *)a;
    if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(res, span);
        return NULL;
    }
    if (at > res)
        munmap(res, (size_t)(at - res));
    if (at + len < res + span)
        munmap(at + len, (size_t)(res + span - (at + len)));
    /* transparent huge pages where shmem allows them: fewer faults, and
     * fewer TLB misses in the receiver's copy; refused is no error */
    (void)madvise(at, len, MADV_HUGEPAGE);
    return at;
}

int p2p_reg_alloc(p2p_reg *g, size_t bytes, void **out, char *err, size_t errlen)
{
    reg_region x = { .fd = -1 };
    *out = NULL;
    if (bytes < P2P_REG_MIN) {
        x.len = bytes;
        if (posix_memalign((void **)&x.base, 64, bytes)) {
            snprintf(err, errlen, "out of memory for %zu bytes", bytes);
            return WEFT_ENOMEM;
        }
    } else {
        struct stat st;
        if (bytes > SIZE_MAX - 2 * (size_t)P2P_REG_ALIGN) {
            snprintf(err, errlen, "%zu bytes cannot be mapped", bytes);
            return WEFT_ENOMEM;
        }
        x.len = (bytes + P2P_REG_ALIGN - 1) & ~(size_t)(P2P_REG_ALIGN - 1);
        x.fd = memfd_create("weft-mem", MFD_CLOEXEC);
        if (x.fd < 0 || ftruncate(x.fd, (off_t)x.len) || fstat(x.fd, &st) ||
            !(x.base = map_aligned(x.fd, x.len))) {
            snprintf(err, errlen, "cannot make a shared region of %zu bytes: %s", x.len,
                     strerror(errno));
            if (x.fd >= 0)
                close(x.fd);
            return WEFT_ESYS;
        }
        x.ino = (uint32_t)st.st_ino;
    }
    pthread_mutex_lock(&g->mu);
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 8;
        reg_region *r = realloc(g->r, (size_t)cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&g->mu);
            region_drop(&x);
            snprintf(err, errlen, "out of memory for the registry");
            return WEFT_ENOMEM;
        }
        g->r = r;
        g->cap = cap;
    }
    x.gen = ++g->gen;
    g->r[g->n++] = x;
    pthread_mutex_unlock(&g->mu);
    *out = x.base;
    return 0;
}

int p2p_reg_release(p2p_reg *g, void *p)
{
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++)
        if (g->r[i].base == p) {
            reg_region x = g->r[i];
            g->r[i] = g->r[--g->n];
            pthread_mutex_unlock(&g->mu);
            region_drop(&x);
            return 0;
        }
    pthread_mutex_unlock(&g->mu);
    return WEFT_EINVAL;
}

int p2p_reg_find(p2p_reg *g, const void *buf, uint64_t len, int pid, shm_cma_desc *d)
{
    const char *b = buf;
    int found = 0;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n && !found; i++) {
        const reg_region *x = &g->r[i];
        if (x->fd < 0 || b < x->base || b >= x->base + x->len ||
            len > (uint64_t)(x->base + x->len - b))
            continue;
        memset(d, 0, sizeof *d);
        d->cma = P2P_REG_DESC;
        d->pid = pid;
        d->addr = (uint64_t)(b - x->base);
        d->cookie = x->gen;
        d->cookie_addr = (uint64_t)(uint32_t)x->fd | (uint64_t)x->ino << 32;
        found = 1;
    }
    pthread_mutex_unlock(&g->mu);
    return found;
}

/* Peer q's region as d names it, mapped now into m (writable: rw). */
static int map_peer(reg_mapping *m, const shm_cma_desc *d, int rw, char *why, size_t whylen)
{
    int slot = (int)(uint32_t)d->cookie_addr;
    int rc = peer_map(d->pid, slot, (uint32_t)(d->cookie_addr >> 32), rw, &m->map, &m->len,
                      why, whylen);
    if (rc)
        return rc;
    m->pid = d->pid;
    m->fd = slot;
    m->gen = d->cookie;
    m->rw = rw;
    return 0;
}

/* Where len bytes of peer q's region at d lie here, mapped (writable
 * where rw asks) on first use. */
static int peer_bytes(p2p_reg *g, int q, const shm_cma_desc *d, uint64_t len, int rw,
                      char **at, char *why, size_t whylen)
{
    reg_mapping *c = &g->peer[(size_t)q * P2P_REG_CACHE], *m = NULL, *old = c;
    int slot = (int)(uint32_t)d->cookie_addr;
    for (int i = 0; i < P2P_REG_CACHE && !m; i++) {
        if (c[i].map && c[i].fd == slot) {
            if (c[i].gen != d->cookie || c[i].pid != d->pid)
                mapping_drop(&c[i]); /* freed there, and the slot reused */
            else if (c[i].rw || !rw)
                m = &c[i];
        }
    }
    if (!m) {
        for (int i = 0; i < P2P_REG_CACHE; i++)
            if (!c[i].map || c[i].used < old->used)
                old = &c[i];
        for (int i = 0; i < P2P_REG_CACHE; i++)
            if (!c[i].map)
                old = &c[i];
        mapping_drop(old);
        int rc = map_peer(old, d, rw, why, whylen);
        if (rc)
            return rc;
        m = old;
    }
    if (d->addr > m->len || len > m->len - d->addr) {
        snprintf(why, whylen, "%llu bytes at %llu lie outside its region of %zu",
                 (unsigned long long)len, (unsigned long long)d->addr, m->len);
        return WEFT_EPROTO;
    }
    m->used = ++g->clock;
    *at = m->map + d->addr;
    return 0;
}

int p2p_reg_src(p2p_reg *g, int q, const shm_cma_desc *d, uint64_t len, const char **src,
                char *why, size_t whylen)
{
    char *at = NULL;
    int rc = peer_bytes(g, q, d, len, 0, &at, why, whylen);
    *src = at;
    return rc;
}

int p2p_reg_dst(p2p_reg *g, int q, const shm_cma_desc *d, uint64_t len, char **dst, char *why,
                size_t whylen)
{
    return peer_bytes(g, q, d, len, 1, dst, why, whylen);
}

void p2p_reg_forget(p2p_reg *g, int q)
{
    for (int i = 0; i < P2P_REG_CACHE; i++)
        mapping_drop(&g->peer[(size_t)q * P2P_REG_CACHE + i]);
}
