/* A checkpoint file's long runs read past the page cache (train/ckpt_shard.h).
 * The runs a reader will read are queued in the order it reads them; two
 * helper threads read them ahead, O_DIRECT, a whole aligned window at a
 * time into a few reused buffers, and the reader copies from those into
 * place, taking the CRCs as it goes. On this kind of disk several large
 * direct requests in flight per rank keep it busier than the page cache's
 * read-ahead does, and the bytes land once in the process's memory rather
 * than first in fresh page-cache pages. A run the page cache already holds
 * whole (a load right after a save) is left to it: a direct read would go
 * to the disk again. Whatever is not queued, or read out of the queue's
 * order, is read through the page cache as before. */
#include "train/ckpt_shard.h"

#include "train/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* WINDOW: one direct request; SLOTS: the windows read ahead at most (the
 * bound on the memory this costs a reader); HELPERS: the requests in
 * flight. Four ranks resuming at once on the 2-core Xeon guest (129 MB,
 * interleaved runs, medians of 14): 1 MiB windows, 8 slots and one helper
 * took 0.086 s, 2 MiB, 4 and two 0.100 s; four dd's of its files at once
 * read fastest with 512 KiB-1 MiB blocks too (55-68 ms, 78-84 with 4
 * MiB). One process alone read the same in either way. */
enum { ALIGN = 4096, WINDOW = 1 << 20, SLOTS = 8, HELPERS = 1 };

enum { FREE, READING, READY };

typedef struct {
    int state, rc;
    uint64_t file, lo;       /* the window: the file's aligned bytes from lo */
    uint64_t ulo, uhi, used; /* the bytes of it queued, and those copied out */
    unsigned char *buf;
} slot;

typedef struct {
    uint64_t file, off, end;
} run;

struct ckpt_direct {
    size_t nfiles;
    int *fd;                /* per file: -1 unopened, -2 refused, else O_DIRECT */
    unsigned char *refused; /* per file: a direct read refused after its open */
    pthread_mutex_t mu;
    pthread_cond_t work; /* a helper waits for a queued run and a free slot */
    pthread_cond_t done; /* the reader waits for a window being read */
    pthread_t th[HELPERS];
    int nth, stop;
    run *q;
    size_t qn, qcap, qi; /* runs queued; the next window is run qi's from qat */
    uint64_t qat;
    slot s[SLOTS];
    uint64_t bytes; /* copied out, by the reader */
};

int ckpt_direct_open(ckpt_direct **out, size_t nfiles)
{
    *out = NULL;
    ckpt_direct *d = calloc(1, sizeof *d);
    if (!d)
        return WEFT_ENOMEM;
    d->nfiles = nfiles;
    d->fd = malloc((nfiles + 1) * sizeof *d->fd);
    d->refused = calloc(nfiles + 1, 1);
    if (!d->fd || !d->refused || pthread_mutex_init(&d->mu, NULL) != 0) {
        free(d->fd);
        free(d->refused);
        free(d);
        return WEFT_ENOMEM;
    }
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->done, NULL);
    for (size_t i = 0; i < nfiles; i++)
        d->fd[i] = -1;
    *out = d;
    return 0;
}

void ckpt_direct_close(ckpt_direct *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->work);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < d->nth; i++)
        pthread_join(d->th[i], NULL);
    for (size_t i = 0; i < d->nfiles; i++)
        if (d->fd[i] >= 0)
            close(d->fd[i]);
    for (int i = 0; i < SLOTS; i++)
        free(d->s[i].buf);
    pthread_cond_destroy(&d->work);
    pthread_cond_destroy(&d->done);
    pthread_mutex_destroy(&d->mu);
    free(d->q);
    free(d->refused);
    free(d->fd);
    free(d);
}

int ckpt_direct_able(ckpt_direct *d, uint64_t f, const char *path)
{
    if (!d || f >= d->nfiles)
        return 0;
    if (d->fd[f] == -1) {
        int dfd = train_open_regular(path, O_RDONLY | O_DIRECT, 0);
        /* a file system without direct reads: the page cache for all */
        d->fd[f] = dfd >= 0 ? dfd : -2;
    }
    return d->fd[f] >= 0 && !d->refused[f];
}

/* 1 if every page of bytes [off, off + n) of fd is in the page cache. */
static int cached(int fd, uint64_t off, uint64_t n)
{
    uint64_t a = off / ALIGN * ALIGN, len = off + n - a;
    size_t pages = (size_t)((len + ALIGN - 1) / ALIGN);
    unsigned char *vec = malloc(pages);
    void *map = vec ? mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, (off_t)a) : MAP_FAILED;
    int all = 0;
    if (map != MAP_FAILED) {
        all = mincore(map, (size_t)len, vec) == 0;
        for (size_t i = 0; all && i < pages; i++)
            all = vec[i] & 1;
        munmap(map, (size_t)len);
    }
    free(vec);
    return all;
}

/* The window [lo, lo + n) of file f into buf: 0, 1 where the file system
 * refuses direct reads after all, or WEFT_EIO. The last block of a file is
 * asked for whole: the bytes past its end come back as a short read. */
static int read_window(int fd, unsigned char *buf, uint64_t lo, uint64_t n)
{
    size_t ask = (size_t)((n + ALIGN - 1) / ALIGN * ALIGN), got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, ask - got, (off_t)(lo + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EINVAL && got == 0)
            return 1;
        if (k <= 0)
            return WEFT_EIO;
        got += (size_t)k;
    }
    return 0;
}

/* A free slot for the next queued window, claimed, or NULL. */
static slot *claim(ckpt_direct *d)
{
    if (d->qi >= d->qn)
        return NULL;
    slot *s = NULL;
    for (int i = 0; i < SLOTS && !s; i++)
        if (d->s[i].state == FREE)
            s = &d->s[i];
    if (!s)
        return NULL;
    const run *r = &d->q[d->qi];
    uint64_t at = d->qat > r->off ? d->qat : r->off, lo = at / ALIGN * ALIGN;
    uint64_t hi = lo + WINDOW < r->end ? lo + WINDOW : r->end;
    *s = (slot){ .state = READING, .file = r->file, .lo = lo, .ulo = at, .uhi = hi,
                 .buf = s->buf };
    d->qat = hi;
    if (hi >= r->end) {
        d->qi++;
        d->qat = 0;
    }
    return s;
}

/* Slot s, claimed, read (d->mu held, let go during the read). */
static void load(ckpt_direct *d, slot *s)
{
    int fd = d->fd[s->file];
    pthread_mutex_unlock(&d->mu);
    int rc = 1; /* no buffer: the page cache, as where refused */
    if (!s->buf) {
        void *w = NULL;
        if (posix_memalign(&w, ALIGN, WINDOW) == 0)
            s->buf = w;
    }
    if (s->buf)
        rc = read_window(fd, s->buf, s->lo, s->uhi - s->lo);
    pthread_mutex_lock(&d->mu);
    s->rc = rc;
    s->state = READY;
    pthread_cond_broadcast(&d->done);
}

static void *helper(void *arg)
{
    ckpt_direct *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        slot *s = claim(d);
        if (s)
            load(d, s);
        else
            pthread_cond_wait(&d->work, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* 1 if the next window to claim holds byte off of file f. */
static int next_holds(const ckpt_direct *d, uint64_t f, uint64_t off)
{
    if (d->qi >= d->qn || d->q[d->qi].file != f)
        return 0;
    const run *r = &d->q[d->qi];
    uint64_t at = d->qat > r->off ? d->qat : r->off, lo = at / ALIGN * ALIGN;
    uint64_t hi = lo + WINDOW < r->end ? lo + WINDOW : r->end;
    return at <= off && off < hi;
}

int ckpt_direct_ahead(ckpt_direct *d, uint64_t f, const char *path, int fd, uint64_t off,
                      uint64_t n)
{
    if (!ckpt_direct_able(d, f, path) || cached(fd, off, n))
        return 0;
    pthread_mutex_lock(&d->mu);
    int ok = 1;
    /* asked for again (a slice that holds several tensors, each asking):
     * queued once */
    for (size_t i = 0; i < d->qn; i++)
        if (d->q[i].file == f && d->q[i].off <= off && off + n <= d->q[i].end) {
            pthread_mutex_unlock(&d->mu);
            return 1;
        }
    run *last = d->qn > d->qi ? &d->q[d->qn - 1] : NULL;
    /* a run that goes on from the last one queued (the next tensor's) joins
     * it: the windows then span both */
    if (last && last->file == f && last->end == off) {
        last->end = off + n;
        pthread_mutex_unlock(&d->mu);
        return 1;
    }
    if (d->qn == d->qcap) {
        size_t cap = d->qcap ? 2 * d->qcap : 16;
        run *q = realloc(d->q, cap * sizeof *q);
        ok = q != NULL;
        if (ok) {
            d->q = q;
            d->qcap = cap;
        }
    }
    if (ok)
        d->q[d->qn++] = (run){ .file = f, .off = off, .end = off + n };
    /* the helpers start with the first run */
    while (ok && d->nth < HELPERS && pthread_create(&d->th[d->nth], NULL, helper, d) == 0)
        d->nth++;
    ok = ok && d->nth > 0;
    if (ok)
        pthread_cond_broadcast(&d->work);
    else if (d->qn && d->q[d->qn - 1].file == f && d->q[d->qn - 1].off == off)
        d->qn--; /* no helper to read it: the page cache's */
    pthread_mutex_unlock(&d->mu);
    return ok;
}

int ckpt_direct_copy(ckpt_direct *d, uint64_t f, uint64_t off, size_t n, void *dst,
                     size_t *done)
{
    *done = 0;
    if (!d || !d->nth)
        return 1;
    pthread_mutex_lock(&d->mu);
    slot *s = NULL;
    for (;;) {
        s = NULL;
        for (int i = 0; i < SLOTS && !s; i++)
            if (d->s[i].state != FREE && d->s[i].file == f && d->s[i].ulo <= off &&
                off < d->s[i].uhi)
                s = &d->s[i];
        if (s && s->state == READY)
            break;
        if (s) {
            pthread_cond_wait(&d->done, &d->mu);
            continue;
        }
        /* the helpers have not come to it yet (not yet run, on a busy
         * host): the reader reads it itself, as they would */
        if (next_holds(d, f, off) && (s = claim(d)) != NULL)
            load(d, s);
        break;
    }
    int rc = !s ? 1 : s->rc;
    if (rc != 0 && s) {
        /* refused: this window's bytes from the page cache, and no more
         * runs of this file queued; a failed read fails the load */
        d->refused[f] = rc == 1;
        s->state = FREE;
        pthread_cond_broadcast(&d->work);
    }
    pthread_mutex_unlock(&d->mu);
    if (rc != 0)
        return rc;
    /* the slot is the reader's until it gives it back below */
    size_t k = s->uhi - off < n ? (size_t)(s->uhi - off) : n;
    memcpy(dst, s->buf + (off - s->lo), k);
    *done = k;
    d->bytes += k;
    pthread_mutex_lock(&d->mu);
    s->used += k;
    if (s->used >= s->uhi - s->ulo) {
        s->state = FREE;
        pthread_cond_broadcast(&d->work);
    }
    pthread_mutex_unlock(&d->mu);
    return 0;
}

uint64_t ckpt_direct_bytes(const ckpt_direct *d)
{
    return d ? d->bytes : 0;
}
