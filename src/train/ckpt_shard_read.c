/* Reading part of a sharded checkpoint (train/ckpt_shard.h): the manifest
 * alone is loaded, and a rank preads the runs of the slices that meet the
 * elements it holds, never a whole file or vector. A file's CRC would need
 * the whole file, so each slice carries its own: a slice is checked once,
 * streamed through a bounded buffer, before anything of it is used. Saves
 * without slice CRCs are read unchecked. */
#include "train/ckpt_shard.h"

#include "core/clock.h"
#include "core/crc32.h"
#include "train/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* DIRECT_RUN: the most bytes of consecutive slices read in one go;
 * CRC_CHUNK: the bytes of one pread there, checked while still in the
 * cache (a quarter of a Zen 4 core's L2) */
enum { CHECK_BUF = 1 << 20, MAX_VECTORS = 16, ERROR_CAP = 1024, DIRECT_RUN = 8 << 20,
       CRC_CHUNK = 256 << 10 };

struct ckpt_shard_reader {
    const weft_ckpt *c;
    char dir[4200];
    char *files;         /* the file names, one a line, terminated */
    char *vectors;       /* the vector names likewise */
    const int64_t *info; /* per file: bytes, CRC-32 */
    const int64_t *sl;
    size_t nfiles, nslices;
    int fields;
    int *fd;                /* per file, -1 until opened */
    unsigned char *checked; /* per slice: the manifest's record, or own */
    unsigned char *own;
    unsigned char *buf;
    crc32_tables *k;
    ckpt_direct *d;      /* the long runs' direct reads */
    int buf_slice;       /* the slice buf holds whole since its check, or -1 */
    uint64_t bytes;
    double read_s, crc_s; /* in the preads, in the CRCs */
    char *error;         /* the manifest's "shard/error" record, or NULL */
    size_t error_cap;
    char tensor[160];    /* what the reads are for, for an error's account */
    int vec;             /* the vector being read */
};

int ckpt_shard_lazy(const weft_ckpt *c)
{
    weft_ckpt_entry e;
    return c && weft_ckpt_find(c, "shard/dir", &e) == 0 &&
           weft_ckpt_find(c, "shard/slices", &e) == 0;
}

/* The process's CPU seconds so far, all its threads: the load's cost
 * apart from what the other processes on the host take of the wall time */
static double process_cpu(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0 ? ts.tv_sec + 1e-9 * ts.tv_nsec
                                                             : 0.0;
}

/* Of those, the seconds in the kernel (page faults, copies between
 * processes, the reads' set-up), all threads */
static double process_sys(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_stime.tv_sec + 1e-6 * ru.ru_stime.tv_usec
                                            : 0.0;
}

int ckpt_shard_open_records(const char *dir, weft_ckpt **out)
{
    char at[4200], path[4400], fmt[64];
    double start[1] = { clock_now() }, cpu[1] = { process_cpu() }, sys[1] = { process_sys() };
    *out = NULL;
    int rc = ckpt_shard_resolve(dir, at, sizeof at);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/manifest", at);
    weft_ckpt *c = NULL;
    if ((rc = weft_ckpt_load(&c, path)) != 0)
        return rc;
    if (weft_ckpt_get_str(c, "shard/format", fmt, sizeof fmt) != 0 ||
        strcmp(fmt, "weft-shards 1") != 0)
        rc = WEFT_EIO;
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "shard/dir", at);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "shard/bytes_read", 0);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "shard/bytes_need", 0);
    if (rc == 0) /* of bytes_read, those read past the page cache */
        rc = weft_ckpt_put_u64(c, "shard/bytes_direct", 0);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "shard/own_params", 0);
    int64_t one = 1;
    if (rc == 0)
        rc = weft_ckpt_put_tensor(c, "shard/t0", WEFT_F64, start, 1, &one);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(c, "shard/cpu0", WEFT_F64, cpu, 1, &one);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(c, "shard/sys0", WEFT_F64, sys, 1, &one);
    double none_s[CKPT_PHASES] = { 0 };
    int64_t phases = CKPT_PHASES;
    if (rc == 0)
        rc = weft_ckpt_put_tensor(c, "shard/phase_s", WEFT_F64, none_s, 1, &phases);
    /* the first failed read's account (ckpt_shard_error), a string kept
     * zero-terminated in a fixed blob that the readers write in place */
    char none_yet[ERROR_CAP] = { 0 };
    if (rc == 0)
        rc = weft_ckpt_put_blob(c, "shard/error", none_yet, sizeof none_yet);
    weft_ckpt_entry sl;
    if (rc == 0 && (weft_ckpt_find(c, "shard/slices", &sl) != 0 || sl.ndim != 2))
        rc = WEFT_EIO;
    /* which slices' CRCs were checked, for all the readers of this load:
     * each is checked once however many ranges of it are read */
    unsigned char *none = rc == 0 ? calloc((size_t)sl.shape[0] + 1, 1) : NULL;
    int64_t n = rc == 0 ? sl.shape[0] : 0;
    if (rc == 0)
        rc = none ? weft_ckpt_put_tensor(c, "shard/checked", WEFT_U8, none, 1, &n) : WEFT_ENOMEM;
    free(none);
    if (rc != 0) {
        weft_ckpt_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static char *blob_copy(const weft_ckpt_entry *e)
{
    if (e->kind != WEFT_CKPT_BLOB || memchr(e->data, 0, e->nbytes))
        return NULL;
    char *s = calloc(1, e->nbytes + 1);
    if (s)
        memcpy(s, e->data, e->nbytes);
    return s;
}

static int reader_records(ckpt_shard_reader *r)
{
    weft_ckpt_entry f, v, info, sl;
    if (weft_ckpt_get_str(r->c, "shard/dir", r->dir, sizeof r->dir) != 0 ||
        weft_ckpt_find(r->c, "shard/files", &f) != 0 ||
        weft_ckpt_find(r->c, "shard/vectors", &v) != 0 ||
        weft_ckpt_find(r->c, "shard/file_info", &info) != 0 ||
        weft_ckpt_find(r->c, "shard/slices", &sl) != 0)
        return WEFT_EIO;
    if (info.dtype != WEFT_I64 || info.ndim != 2 || info.shape[1] != 2 ||
        sl.dtype != WEFT_I64 || sl.ndim != 2 ||
        (sl.shape[1] != CKPT_SLICE_FIELDS && sl.shape[1] != CKPT_SLICE_FIELDS_V1))
        return WEFT_EIO;
    r->files = blob_copy(&f);
    r->vectors = blob_copy(&v);
    if (!r->files || !r->vectors)
        return WEFT_EIO;
    r->info = info.data;
    r->nfiles = (size_t)info.shape[0];
    r->sl = sl.data;
    r->nslices = (size_t)sl.shape[0];
    r->fields = (int)sl.shape[1];
    r->fd = malloc((r->nfiles + 1) * sizeof *r->fd);
    weft_ckpt_entry ck;
    /* the record is this load's own (ckpt_shard_open_records made it) */
    if (weft_ckpt_find(r->c, "shard/checked", &ck) == 0 && ck.nbytes == r->nslices)
        r->checked = (unsigned char *)ck.data;
    else if ((r->own = calloc(r->nslices + 1, 1)) != NULL)
        r->checked = r->own;
    weft_ckpt_entry er;
    /* the record is this load's own likewise */
    if (weft_ckpt_find(r->c, "shard/error", &er) == 0 && er.nbytes >= 2 &&
        er.kind == WEFT_CKPT_BLOB) {
        r->error = (char *)er.data;
        r->error_cap = er.nbytes;
    }
    r->buf = malloc(CHECK_BUF);
    r->k = malloc(sizeof *r->k);
    r->buf_slice = -1;
    if (!r->fd || !r->checked || !r->buf || !r->k || ckpt_direct_open(&r->d, r->nfiles) != 0)
        return WEFT_ENOMEM;
    crc32_tables_init(r->k);
    for (size_t i = 0; i < r->nfiles; i++)
        r->fd[i] = -1;
    return 0;
}

/* v added to record name of c (a u64 that this load made). */
static void add_u64(const weft_ckpt *c, const char *name, uint64_t v)
{
    weft_ckpt_entry e;
    uint64_t was;
    if (weft_ckpt_find(c, name, &e) != 0 || e.nbytes != sizeof was)
        return;
    memcpy(&was, e.data, sizeof was);
    was += v;
    memcpy((void *)e.data, &was, sizeof was);
}

void ckpt_shard_need(const weft_ckpt *c, uint64_t bytes)
{
    add_u64(c, "shard/bytes_need", bytes);
}

void ckpt_shard_own_params_set(const weft_ckpt *c, int state)
{
    int now = ckpt_shard_own_params(c);
    if (state > now)
        add_u64(c, "shard/own_params", (uint64_t)(state - now));
}

int ckpt_shard_own_params(const weft_ckpt *c)
{
    uint64_t v = 0;
    return c && weft_ckpt_get_u64(c, "shard/own_params", &v) == 0 ? (int)v : 0;
}

/* The f64 record name of c, or NAN where it has none. */
static double record_f64(const weft_ckpt *c, const char *name)
{
    weft_ckpt_entry e;
    double v;
    if (!c || weft_ckpt_find(c, name, &e) != 0 || e.dtype != WEFT_F64 || e.nbytes != sizeof v)
        return NAN;
    memcpy(&v, e.data, sizeof v);
    return v;
}

double ckpt_shard_since_open(const weft_ckpt *c)
{
    double t0 = record_f64(c, "shard/t0");
    return isnan(t0) ? 0 : clock_now() - t0;
}

double ckpt_shard_cpu_since_open(const weft_ckpt *c)
{
    double c0 = record_f64(c, "shard/cpu0");
    return isnan(c0) ? 0 : process_cpu() - c0;
}

double ckpt_shard_sys_since_open(const weft_ckpt *c)
{
    double s0 = record_f64(c, "shard/sys0");
    return isnan(s0) ? 0 : process_sys() - s0;
}

void ckpt_shard_phase(const weft_ckpt *c, int ph, double s)
{
    weft_ckpt_entry e;
    double was;
    /* the record is this load's own likewise */
    if (!c || ph < 0 || ph >= CKPT_PHASES || weft_ckpt_find(c, "shard/phase_s", &e) != 0 ||
        e.dtype != WEFT_F64 || e.nbytes != CKPT_PHASES * sizeof was)
        return;
    double *at = (double *)e.data + ph;
    memcpy(&was, at, sizeof was);
    was += s;
    memcpy(at, &was, sizeof was);
}

int ckpt_shard_phases(const weft_ckpt *c, double s[CKPT_PHASES])
{
    weft_ckpt_entry e;
    memset(s, 0, CKPT_PHASES * sizeof *s);
    if (!c || weft_ckpt_find(c, "shard/phase_s", &e) != 0 || e.dtype != WEFT_F64 ||
        e.nbytes != CKPT_PHASES * sizeof *s)
        return WEFT_EINVAL;
    memcpy(s, e.data, CKPT_PHASES * sizeof *s);
    return 0;
}

int ckpt_shard_reader_open(const weft_ckpt *c, ckpt_shard_reader **out)
{
    *out = NULL;
    ckpt_shard_reader *r = calloc(1, sizeof *r);
    if (!r)
        return WEFT_ENOMEM;
    r->c = c;
    int rc = reader_records(r);
    if (rc != 0) {
        r->nfiles = 0; /* none opened yet */
        ckpt_shard_reader_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

int ckpt_shard_reader_vector(const ckpt_shard_reader *r, const char *name)
{
    char v[64];
    for (int k = 0; k < MAX_VECTORS && ckpt_shard_line(r->vectors, k, v, sizeof v) == 0; k++)
        if (strcmp(v, name) == 0)
            return k;
    return -1;
}

void ckpt_shard_reader_close(ckpt_shard_reader *r)
{
    if (!r)
        return;
    /* the records are this reading's own (ckpt_shard_open_records made them) */
    add_u64(r->c, "shard/bytes_read", r->bytes);
    add_u64(r->c, "shard/bytes_direct", ckpt_direct_bytes(r->d));
    ckpt_shard_phase(r->c, CKPT_PH_READ, r->read_s);
    ckpt_shard_phase(r->c, CKPT_PH_CRC, r->crc_s);
    for (size_t i = 0; r->fd && i < r->nfiles; i++)
        if (r->fd[i] >= 0)
            close(r->fd[i]);
    free(r->fd);
    ckpt_direct_close(r->d);
    free(r->own);
    free(r->buf);
    free(r->k);
    free(r->files);
    free(r->vectors);
    free(r);
}

void ckpt_shard_reader_name(ckpt_shard_reader *r, const char *tensor)
{
    snprintf(r->tensor, sizeof r->tensor, "%s", tensor ? tensor : "");
}

int ckpt_shard_error(const weft_ckpt *c, char *buf, size_t cap)
{
    weft_ckpt_entry e;
    if (cap)
        buf[0] = 0;
    if (!c || weft_ckpt_find(c, "shard/error", &e) != 0 || e.kind != WEFT_CKPT_BLOB ||
        e.nbytes < 2 || !((const char *)e.data)[0])
        return 0;
    snprintf(buf, cap, "%.*s", (int)e.nbytes, (const char *)e.data);
    return 1;
}

/* File f's path into buf. */
static void file_path(const ckpt_shard_reader *r, uint64_t f, char *buf, size_t cap)
{
    char name[256] = "?";
    if (f < r->nfiles)
        ckpt_shard_line(r->files, (int)f, name, sizeof name);
    snprintf(buf, cap, "%s/%s", r->dir, name);
}

/* Keeps the first failure's account (file, then what, then the tensor the
 * reads were for) and returns rc. */
static int fail(ckpt_shard_reader *r, int rc, uint64_t f, const char *fmt, ...)
{
    if (!r->error || r->error[0])
        return rc;
    char path[4600], what[512], vec[64] = "?";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    file_path(r, f, path, sizeof path);
    ckpt_shard_line(r->vectors, r->vec, vec, sizeof vec);
    if (r->tensor[0])
        snprintf(r->error, r->error_cap, "%.400s: %.400s, reading tensor %s/%.100s", path, what, vec,
                 r->tensor);
    else
        snprintf(r->error, r->error_cap, "%.400s: %.400s, reading vector %s", path, what, vec);
    return rc;
}

static int file_fd(ckpt_shard_reader *r, uint64_t f, int *fd)
{
    if (f >= r->nfiles)
        return fail(r, WEFT_EIO, f, "file %llu of %zu named by a slice",
                    (unsigned long long)f, r->nfiles);
    if (r->fd[f] < 0) {
        char path[4600];
        file_path(r, f, path, sizeof path);
        int d = train_open_regular(path, O_RDONLY, 0);
        if (d < 0)
            return fail(r, d, f, "cannot open: %s", strerror(errno));
        struct stat st;
        /* a file cut short or grown is not the one the manifest describes */
        if (fstat(d, &st) != 0 || (uint64_t)st.st_size != (uint64_t)r->info[2 * f]) {
            close(d);
            return fail(r, WEFT_EIO, f, "%lld bytes, the manifest says %lld",
                        (long long)st.st_size, (long long)r->info[2 * f]);
        }
        /* a rank reads its runs of a file in file order: a wider read-ahead */
        (void)posix_fadvise(d, 0, 0, POSIX_FADV_SEQUENTIAL);
        r->fd[f] = d;
    }
    *fd = r->fd[f];
    return 0;
}

static ckpt_slice slice_at(const ckpt_shard_reader *r, size_t k)
{
    const int64_t *q = r->sl + (size_t)r->fields * k;
    ckpt_slice s = { (uint64_t)q[0], (uint64_t)q[1], (uint64_t)q[2], (uint64_t)q[3],
                     (uint64_t)q[4], (uint64_t)q[5], (uint64_t)q[6], 0 };
    if (r->fields == CKPT_SLICE_FIELDS)
        s.crc = (uint64_t)q[7];
    return s;
}

static int crc_failed(ckpt_shard_reader *r, size_t k, const ckpt_slice *s, uint32_t crc)
{
    return fail(r, WEFT_EIO, s->file,
                "slice %zu (bytes %llu to %llu, whole elements from %llu) fails its CRC "
                "(%08x, the manifest says %08x)",
                k, (unsigned long long)s->off,
                (unsigned long long)(s->off + s->count * s->len * sizeof(float)),
                (unsigned long long)s->start, crc, (unsigned)s->crc);
}

/* n bytes of file f (open as fd) from off into dst: from what was read
 * ahead past the page cache, else a pread. */
static int fetch(ckpt_shard_reader *r, uint64_t f, int fd, void *dst, size_t n, uint64_t off)
{
    unsigned char *at = dst;
    while (n) {
        size_t done = 0;
        int rc = ckpt_direct_copy(r->d, f, off, n, at, &done);
        if (rc == 1)
            return train_pread_all(fd, at, n, off);
        if (rc)
            return rc;
        at += done;
        off += done;
        n -= done;
    }
    return 0;
}

/* Slice k's bytes against its CRC, once. */
static int check_slice(ckpt_shard_reader *r, size_t k, const ckpt_slice *s, int fd)
{
    if (r->checked[k] || r->fields != CKPT_SLICE_FIELDS)
        return 0;
    uint64_t left = s->count * s->len * sizeof(float), off = s->off;
    if (off + left > (uint64_t)r->info[2 * s->file])
        return fail(r, WEFT_EIO, s->file, "slice %zu ends at byte %llu, past the file's end",
                    k, (unsigned long long)(off + left));
    uint32_t crc = 0;
    /* a slice that fits is then in buf whole, and its reads copy from it */
    int whole = left <= CHECK_BUF;
    r->buf_slice = -1;
    while (left) {
        size_t n = left < CHECK_BUF ? (size_t)left : CHECK_BUF;
        double t0 = clock_now();
        int rc = fetch(r, s->file, fd, r->buf, n, off);
        double t1 = clock_now();
        r->read_s += t1 - t0;
        if (rc)
            return fail(r, rc, s->file, "short read at byte %llu of slice %zu",
                        (unsigned long long)off, k);
        crc = crc32_update_fast(r->k, crc, r->buf, n);
        r->crc_s += clock_now() - t1;
        r->bytes += n;
        off += n;
        left -= n;
    }
    if (crc != (uint32_t)s->crc)
        return crc_failed(r, k, s, crc);
    r->checked[k] = 1;
    if (whole)
        r->buf_slice = (int)k;
    return 0;
}

/* Slice k, one run wholly inside whole elements [lo, hi) and not yet
 * checked: read straight into its place. */
static int direct_ok(const ckpt_shard_reader *r, size_t k, const ckpt_slice *s, uint64_t lo,
                     uint64_t hi)
{
    return !r->checked[k] && r->fields == CKPT_SLICE_FIELDS && s->count == 1 &&
           s->start >= lo && s->start + s->len <= hi;
}

/* The last slice of the direct run from slice k: those after it that go on
 * where it ends, both in the file and in the vector, join it (one pread). */
static size_t direct_end(const ckpt_shard_reader *r, size_t k, const ckpt_slice *s, uint64_t lo,
                         uint64_t hi)
{
    uint64_t bytes = s->len * sizeof(float), off = s->off + bytes, at = s->start + s->len;
    size_t j = k;
    while (j + 1 < r->nslices) {
        ckpt_slice t = slice_at(r, j + 1);
        if (t.file != s->file || t.vec != s->vec || t.off != off || t.start != at ||
            !direct_ok(r, j + 1, &t, lo, hi) || bytes + t.len * sizeof(float) > DIRECT_RUN)
            break;
        bytes += t.len * sizeof(float);
        off += t.len * sizeof(float);
        at += t.len;
        j++;
    }
    return j;
}

/* Slices k..j (one run each, consecutive in the file and the vector) read
 * into dst, CRC_CHUNK bytes at a time, each chunk added to its slice's CRC
 * as it comes in (a copy from what was read ahead past the page cache, else
 * a pread); *got: the elements read. */
static int read_checked(ckpt_shard_reader *r, size_t k, size_t j, const ckpt_slice *s, int fd,
                        float *dst, uint64_t *got)
{
    ckpt_slice last = slice_at(r, j);
    size_t bytes = (size_t)(last.off + last.len * sizeof(float) - s->off);
    if (s->off + bytes > (uint64_t)r->info[2 * s->file])
        return fail(r, WEFT_EIO, s->file, "slice %zu ends at byte %llu, past the file's end",
                    j, (unsigned long long)(s->off + bytes));
    unsigned char *at = (unsigned char *)dst;
    uint64_t off = s->off;
    /* in chunks that the cache still holds when the CRC reads them back:
     * a CRC after one long pread would read its bytes from memory again */
    for (size_t i = k; i <= j; i++) {
        ckpt_slice t = slice_at(r, i);
        size_t left = (size_t)t.len * sizeof(float);
        uint32_t crc = 0;
        while (left) {
            size_t n = left < CRC_CHUNK ? left : CRC_CHUNK;
            double t0 = clock_now();
            int rc = fetch(r, s->file, fd, at, n, off);
            double t1 = clock_now();
            r->read_s += t1 - t0;
            if (rc)
                return fail(r, rc, s->file, "short read at byte %llu of slice %zu",
                            (unsigned long long)off, i);
            crc = crc32_update_fast(r->k, crc, at, n);
            r->crc_s += clock_now() - t1;
            r->bytes += n;
            at += n;
            off += n;
            left -= n;
        }
        if (crc != (uint32_t)t.crc)
            return crc_failed(r, i, &t, crc);
        r->checked[i] = 1;
    }
    *got = bytes / sizeof(float);
    return 0;
}

typedef struct {
    uint64_t found;
} count;

static int count_run(void *arg, uint64_t at, uint64_t off, uint64_t len)
{
    (void)at;
    (void)off;
    ((count *)arg)->found += len;
    return 0;
}

typedef struct {
    ckpt_shard_reader *r;
    int fd;
    uint64_t file, lo, found;
    float *dst;
    const unsigned char *from; /* the slice's bytes, from file byte base, or NULL */
    uint64_t base;
} want;

static int get_run(void *arg, uint64_t at, uint64_t off, uint64_t len)
{
    want *w = arg;
    if (w->from) {
        memcpy(w->dst + (at - w->lo), w->from + (off - w->base), (size_t)len * sizeof(float));
        w->found += len;
        return 0;
    }
    double t0 = clock_now();
    int rc = train_pread_all(w->fd, w->dst + (at - w->lo), (size_t)len * sizeof(float), off);
    w->r->read_s += clock_now() - t0;
    w->r->bytes += len * sizeof(float);
    w->found += len;
    if (rc)
        return fail(w->r, rc, w->file, "short read of %llu bytes at byte %llu",
                    (unsigned long long)(len * sizeof(float)), (unsigned long long)off);
    return 0;
}

int ckpt_shard_read(ckpt_shard_reader *r, int vec, uint64_t lo, uint64_t n, float *dst)
{
    want w = { .r = r, .lo = lo, .dst = dst };
    int rc = vec < 0 ? WEFT_EIO : 0;
    r->vec = vec;
    for (size_t k = 0; rc == 0 && k < r->nslices && n; k++) {
        ckpt_slice s = slice_at(r, k);
        uint64_t stride = s.count > 1 ? s.stride : s.len;
        if (s.vec != (uint64_t)vec || !s.count || s.start >= lo + n ||
            s.start + (s.count - 1) * stride + s.len <= lo)
            continue;
        count meets = { 0 };
        /* a strided slice whose runs all fall in gaps of the range: not read */
        ckpt_slice_overlap(&s, lo, lo + n, count_run, &meets);
        if (!meets.found)
            continue;
        w.file = s.file;
        if ((rc = file_fd(r, s.file, &w.fd)) != 0)
            break;
        /* runs wholly wanted: read into their place and checked there */
        if (direct_ok(r, k, &s, lo, lo + n)) {
            size_t j = direct_end(r, k, &s, lo, lo + n);
            uint64_t got = 0;
            rc = read_checked(r, k, j, &s, w.fd, dst + (s.start - lo), &got);
            w.found += got;
            k = j;
            continue;
        }
        if ((rc = check_slice(r, k, &s, w.fd)) != 0)
            break;
        w.from = r->buf_slice == (int)k ? r->buf : NULL;
        w.base = s.off;
        rc = ckpt_slice_overlap(&s, lo, lo + n, get_run, &w);
    }
    /* each element once: a gap or an overlap is a broken checkpoint */
    if (rc == 0 && w.found != n && r->error && !r->error[0])
        snprintf(r->error, r->error_cap, "%.400s: the slices hold %llu of whole elements [%llu, "
                 "%llu) of vector %d, not each once%s%.*s", r->dir, (unsigned long long)w.found,
                 (unsigned long long)lo, (unsigned long long)(lo + n), vec,
                 r->tensor[0] ? ", reading tensor " : "", (int)100, r->tensor);
    if (rc == 0 && w.found != n)
        rc = WEFT_EIO;
    return rc;
}

/* Slice k may be read past the page cache (read_checked): advice to read
 * it ahead would have the disk read it twice. */
static int past_cache(ckpt_shard_reader *r, size_t k, const ckpt_slice *s, uint64_t lo,
                      uint64_t hi)
{
    char path[4600];
    /* read once: straight into place, or whole into buf for its check and
     * copied from there (a longer slice's runs would be read again after
     * its check, and then from the page cache) */
    if (!direct_ok(r, k, s, lo, hi) &&
        (r->checked[k] || r->fields != CKPT_SLICE_FIELDS ||
         s->count * s->len * sizeof(float) > CHECK_BUF))
        return 0;
    file_path(r, s->file, path, sizeof path);
    return ckpt_direct_able(r->d, s->file, path);
}

void ckpt_shard_prefetch(ckpt_shard_reader *r, int vec, uint64_t lo, uint64_t n)
{
    /* one request per stretch of consecutive slices in a file: read ahead
     * past the page cache where all of it may be, else advice to the page
     * cache; a file that cannot be opened is left to the read, whose
     * account names the tensor */
    char *error = r->error, path[4600];
    r->error = NULL;
    int fd = -1, past = 0;
    uint64_t a = 0, b = 0, file = 0;
    for (size_t k = 0; vec >= 0 && k <= r->nslices; k++) {
        ckpt_slice s = k < r->nslices ? slice_at(r, k) : (ckpt_slice){ .count = 0 };
        uint64_t stride = s.count > 1 ? s.stride : s.len;
        int meets = k < r->nslices && s.vec == (uint64_t)vec && s.count && s.start < lo + n &&
                    s.start + (s.count - 1) * stride + s.len > lo;
        int f = -1;
        if (meets && file_fd(r, s.file, &f) != 0)
            break;
        int p = meets && past_cache(r, k, &s, lo, lo + n);
        uint64_t end = s.off + s.count * s.len * sizeof(float);
        if (meets && f == fd && s.off == b && p == past) {
            b = end;
            continue;
        }
        if (fd >= 0 && past)
            file_path(r, file, path, sizeof path);
        if (fd >= 0 && !(past && ckpt_direct_ahead(r->d, file, path, fd, a, b - a)))
            (void)posix_fadvise(fd, (off_t)a, (off_t)(b - a), POSIX_FADV_WILLNEED);
        fd = meets ? f : -1;
        past = p;
        file = s.file;
        a = s.off;
        b = end;
    }
    r->error = error;
}

void ckpt_shard_prefetch_file(const weft_ckpt *c, const char *name)
{
    ckpt_shard_reader *r;
    if (ckpt_shard_reader_open(c, &r) != 0)
        return;
    char *error = r->error, line[256];
    r->error = NULL; /* no account: a read that needs the file gives it */
    for (size_t f = 0; f < r->nfiles && ckpt_shard_line(r->files, (int)f, line, sizeof line) == 0;
         f++) {
        int fd;
        char path[4600];
        file_path(r, f, path, sizeof path);
        /* the disk goes on reading once the file is closed; a file read
         * past the page cache is read from the disk once, then */
        if (strcmp(line, name) == 0 && file_fd(r, f, &fd) == 0 &&
            !ckpt_direct_able(r->d, f, path))
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    }
    r->error = error;
    ckpt_shard_reader_close(r);
}

int ckpt_shard_missing(const weft_ckpt *c, const char *vec, uint64_t lo, uint64_t n,
                       uint64_t *first)
{
    ckpt_shard_reader *r;
    *first = lo;
    int rc = ckpt_shard_reader_open(c, &r);
    if (rc)
        return rc;
    int v = ckpt_shard_reader_vector(r, vec);
    /* halving to the first gap: each probe a pass over the slice table */
    uint64_t a = lo, b = lo + n;
    while (v >= 0 && b > a) {
        count all = { 0 }, half = { 0 };
        uint64_t mid = a + (b - a + 1) / 2;
        for (size_t k = 0; k < r->nslices; k++) {
            ckpt_slice s = slice_at(r, k);
            if (s.vec != (uint64_t)v)
                continue;
            ckpt_slice_overlap(&s, a, b, count_run, &all);
            ckpt_slice_overlap(&s, a, mid, count_run, &half);
        }
        if (all.found == b - a)
            break; /* nothing missing in [a, b) */
        if (b - a == 1) {
            *first = a;
            rc = 1;
            break;
        }
        if (half.found != mid - a)
            b = mid;
        else
            a = mid;
    }
    if (v < 0)
        rc = 1;
    ckpt_shard_reader_close(r);
    return rc;
}

uint64_t ckpt_shard_extent(const weft_ckpt *c)
{
    ckpt_shard_reader *r;
    uint64_t end = 0;
    if (ckpt_shard_reader_open(c, &r) != 0)
        return 0;
    int v = ckpt_shard_reader_vector(r, "param");
    for (size_t k = 0; v >= 0 && k < r->nslices; k++) {
        ckpt_slice s = slice_at(r, k);
        uint64_t stride = s.count > 1 ? s.stride : s.len;
        if (s.vec == (uint64_t)v && s.count && s.start + (s.count - 1) * stride + s.len > end)
            end = s.start + (s.count - 1) * stride + s.len;
    }
    ckpt_shard_reader_close(r);
    return end;
}
