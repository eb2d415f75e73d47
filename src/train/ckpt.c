#include "train/ckpt.h"

#include "core/crc32.h"
#include "core/vec.h"
#include "train/ckpt_shard.h"
#include "train/data_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint tensors are written in host order, which must be little-endian"
#endif

typedef struct {
    char *name;
    weft_ckpt_kind kind;
    weft_dtype dtype;
    int ndim;
    int64_t shape[WEFT_CKPT_MAX_DIM];
    void *data;
    size_t nbytes;
} entry;

struct weft_ckpt {
    entry *e;
    int n, cap;
};

static const char HEAD_MAGIC[8] = { 'W', 'E', 'F', 'T', 'C', 'K', 'P', 'T' };
static const char TAIL_MAGIC[8] = { 'W', 'E', 'F', 'T', 'E', 'N', 'D', 0 };

/* Local so the container needs nothing beyond this file and crc32. */
static size_t dtype_bytes(weft_dtype t)
{
    static const size_t size[WEFT_DTYPE_COUNT] = { 4, 8, 2, 2, 1, 1, 4, 8 };
    return (unsigned)t < WEFT_DTYPE_COUNT ? size[t] : 0;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int weft_ckpt_new(weft_ckpt **out)
{
    if (!out)
        return WEFT_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : WEFT_ENOMEM;
}

void weft_ckpt_free(weft_ckpt *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].name);
        free(c->e[i].data);
    }
    free(c->e);
    free(c);
}

static entry *lookup(const weft_ckpt *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->e[i].name, name) == 0)
            return &c->e[i];
    return NULL;
}

/* Adds (or replaces) a record, taking ownership of data. */
static int add(weft_ckpt *c, const char *name, weft_ckpt_kind kind, weft_dtype t, void *data,
               size_t nbytes, int ndim, const int64_t *shape)
{
    entry *e = lookup(c, name);
    if (!e) {
        int rc = VEC_RESERVE(c->e, c->cap, (size_t)c->n + 1);
        if (rc)
            return rc;
        char *nm = strdup(name);
        if (!nm)
            return WEFT_ENOMEM;
        e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->name = nm;
    } else {
        free(e->data);
    }
    e->kind = kind;
    e->dtype = t;
    e->data = data;
    e->nbytes = nbytes;
    e->ndim = ndim;
    memset(e->shape, 0, sizeof e->shape);
    for (int i = 0; i < ndim; i++)
        e->shape[i] = shape[i];
    return 0;
}

static int name_ok(const char *name)
{
    return name && *name && strlen(name) < CKPT_MAX_NAME;
}

static int put_copy(weft_ckpt *c, const char *name, weft_ckpt_kind kind, weft_dtype t,
                    const void *data, size_t nbytes, int ndim, const int64_t *shape)
{
    void *copy = malloc(nbytes ? nbytes : 1);
    if (!copy)
        return WEFT_ENOMEM;
    if (nbytes)
        memcpy(copy, data, nbytes);
    int rc = add(c, name, kind, t, copy, nbytes, ndim, shape);
    if (rc != 0)
        free(copy);
    return rc;
}

int weft_ckpt_put_tensor(weft_ckpt *c, const char *name, weft_dtype t, const void *data,
                         int ndim, const int64_t *shape)
{
    if (!c || !name_ok(name) || !dtype_bytes(t) || ndim < 0 || ndim > WEFT_CKPT_MAX_DIM ||
        (ndim && !shape))
        return WEFT_EINVAL;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && numel > UINT64_MAX / 16 / (uint64_t)shape[i]))
            return WEFT_EINVAL;
        numel *= (uint64_t)shape[i];
    }
    size_t nbytes = (size_t)(numel * dtype_bytes(t));
    if (nbytes && !data)
        return WEFT_EINVAL;
    return put_copy(c, name, WEFT_CKPT_TENSOR, t, data, nbytes, ndim, shape);
}

int weft_ckpt_put_blob(weft_ckpt *c, const char *name, const void *data, size_t n)
{
    if (!c || !name_ok(name) || (n && !data))
        return WEFT_EINVAL;
    return put_copy(c, name, WEFT_CKPT_BLOB, WEFT_U8, data, n, 0, NULL);
}

int weft_ckpt_put_u64(weft_ckpt *c, const char *name, uint64_t v)
{
    unsigned char b[8];
    put64(b, v);
    return weft_ckpt_put_blob(c, name, b, 8);
}

int weft_ckpt_put_str(weft_ckpt *c, const char *name, const char *s)
{
    if (!s)
        return WEFT_EINVAL;
    return weft_ckpt_put_blob(c, name, s, strlen(s));
}

static void fill(const entry *x, weft_ckpt_entry *e)
{
    memset(e, 0, sizeof *e);
    e->name = x->name;
    e->kind = x->kind;
    e->dtype = x->dtype;
    e->ndim = x->ndim;
    memcpy(e->shape, x->shape, sizeof e->shape);
    e->data = x->data;
    e->nbytes = x->nbytes;
}

int weft_ckpt_find(const weft_ckpt *c, const char *name, weft_ckpt_entry *e)
{
    if (!c || !name || !e)
        return WEFT_EINVAL;
    const entry *x = lookup(c, name);
    if (!x)
        return WEFT_EIO;
    fill(x, e);
    return 0;
}

int weft_ckpt_get_u64(const weft_ckpt *c, const char *name, uint64_t *v)
{
    weft_ckpt_entry e;
    int rc = weft_ckpt_find(c, name, &e);
    if (rc != 0)
        return rc;
    if (e.kind != WEFT_CKPT_BLOB || e.nbytes != 8 || !v)
        return WEFT_EIO;
    *v = get64(e.data);
    return 0;
}

int weft_ckpt_get_str(const weft_ckpt *c, const char *name, char *buf, size_t cap)
{
    weft_ckpt_entry e;
    int rc = weft_ckpt_find(c, name, &e);
    if (rc != 0)
        return rc;
    if (e.kind != WEFT_CKPT_BLOB || !buf)
        return WEFT_EIO;
    if (e.nbytes >= cap)
        return WEFT_EINVAL;
    memcpy(buf, e.data, e.nbytes);
    buf[e.nbytes] = 0;
    return 0;
}

int weft_ckpt_get_f32(const weft_ckpt *c, const char *name, float *dst, size_t count)
{
    weft_ckpt_entry e;
    int rc = weft_ckpt_find(c, name, &e);
    if (rc != 0)
        return rc;
    if (e.kind != WEFT_CKPT_TENSOR || e.dtype != WEFT_F32 || e.nbytes != count * sizeof(float) ||
        (count && !dst))
        return WEFT_EIO;
    if (count)
        memcpy(dst, e.data, e.nbytes);
    return 0;
}

int weft_ckpt_count(const weft_ckpt *c)
{
    return c ? c->n : 0;
}

int weft_ckpt_entry_at(const weft_ckpt *c, int i, weft_ckpt_entry *e)
{
    if (!c || !e || i < 0 || i >= c->n)
        return WEFT_EINVAL;
    fill(&c->e[i], e);
    return 0;
}

/* ---- file I/O ----------------------------------------------------------- */

static const unsigned char zeros[CKPT_ALIGN];

static size_t pad_after(uint64_t off)
{
    return (size_t)((CKPT_ALIGN - off % CKPT_ALIGN) % CKPT_ALIGN);
}

static int write_all(FILE *f, const void *p, size_t n, uint64_t *off)
{
    if (n && fwrite(p, 1, n, f) != n)
        return WEFT_EIO;
    *off += n;
    return 0;
}

static int write_file(const weft_ckpt *c, FILE *f)
{
    unsigned char h[CKPT_RECORD];
    uint64_t off = 0;
    memset(h, 0, CKPT_HEADER);
    memcpy(h, HEAD_MAGIC, 8);
    put32(h + 8, WEFT_CKPT_VERSION);
    put32(h + 12, 0);
    put64(h + 16, (uint64_t)c->n);
    put32(h + 28, crc32_update(0, h, 28));
    int rc = write_all(f, h, CKPT_HEADER, &off);
    for (int i = 0; rc == 0 && i < c->n; i++) {
        const entry *e = &c->e[i];
        size_t nl = strlen(e->name);
        memset(h, 0, sizeof h);
        put32(h, (uint32_t)e->kind);
        put32(h + 4, (uint32_t)e->dtype);
        put32(h + 8, (uint32_t)nl);
        put32(h + 12, (uint32_t)e->ndim);
        for (int d = 0; d < WEFT_CKPT_MAX_DIM; d++)
            put64(h + 16 + 8 * d, (uint64_t)e->shape[d]);
        put64(h + 80, (uint64_t)e->nbytes);
        put32(h + 88, crc32_update(crc32_update(0, e->name, nl), e->data, e->nbytes));
        put32(h + 92, crc32_update(0, h, 92));
        rc = write_all(f, h, CKPT_RECORD, &off);
        if (rc == 0)
            rc = write_all(f, e->name, nl, &off);
        if (rc == 0)
            rc = write_all(f, zeros, pad_after(off), &off);
        if (rc == 0)
            rc = write_all(f, e->data, e->nbytes, &off);
    }
    memset(h, 0, CKPT_TRAILER);
    memcpy(h, TAIL_MAGIC, 8);
    put64(h + 8, (uint64_t)c->n);
    put32(h + 20, crc32_update(0, h, 20));
    if (rc == 0)
        rc = write_all(f, h, CKPT_TRAILER, &off);
    return rc;
}

/* A save killed half way (kill -9 during --save-every) leaves its
 * path.tmp.PID behind, the size of a checkpoint. Those of pids that no
 * longer run on this host go; a live pid's may be a save in progress and
 * stays, and so does anything not named exactly so. */
static void remove_stale_tmp(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                     : strndup(path, (size_t)(slash - path));
    size_t plen = strlen(base) + 5;
    char *prefix = malloc(plen + 1);
    DIR *d = dir && prefix ? opendir(dir) : NULL;
    if (d) {
        snprintf(prefix, plen + 1, "%s.tmp.", base);
        struct dirent *e;
        while ((e = readdir(d))) {
            const char *digits = e->d_name + plen;
            if (strncmp(e->d_name, prefix, plen) != 0 || !*digits ||
                strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9)
                continue;
            long pid = strtol(digits, NULL, 10);
            if (pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
                unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    free(prefix);
    free(dir);
}

int weft_ckpt_save(const weft_ckpt *c, const char *path)
{
    if (!c || !path || !*path)
        return WEFT_EINVAL;
    /* rename would replace a FIFO or fail on a directory only after the
     * whole file is written: refused before */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return WEFT_EINVAL;
    remove_stale_tmp(path);
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp)
        return WEFT_ENOMEM;
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    int fd = train_open_regular(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        free(tmp);
        return fd < 0 ? fd : WEFT_EIO;
    }
    int rc = write_file(c, f);
    if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = WEFT_EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = WEFT_EIO;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = WEFT_EIO;
    if (rc != 0)
        remove(tmp);
    free(tmp);
    return rc;
}

static int read_exact(FILE *f, void *p, size_t n, uint64_t *off)
{
    if (n && fread(p, 1, n, f) != n)
        return WEFT_EIO;
    *off += n;
    return 0;
}

static int read_record(weft_ckpt *c, FILE *f, uint64_t *off, uint64_t file_size)
{
    unsigned char h[CKPT_RECORD], pad[CKPT_ALIGN];
    if (read_exact(f, h, CKPT_RECORD, off) != 0 || get32(h + 92) != crc32_update(0, h, 92))
        return WEFT_EIO;
    uint32_t kind = get32(h), dtype = get32(h + 4), nl = get32(h + 8), ndim = get32(h + 12);
    uint64_t nbytes = get64(h + 80);
    int64_t shape[WEFT_CKPT_MAX_DIM];
    for (int d = 0; d < WEFT_CKPT_MAX_DIM; d++)
        shape[d] = (int64_t)get64(h + 16 + 8 * d);
    if ((kind != WEFT_CKPT_TENSOR && kind != WEFT_CKPT_BLOB) || nl == 0 || nl >= CKPT_MAX_NAME ||
        ndim > WEFT_CKPT_MAX_DIM || nbytes > file_size)
        return WEFT_EIO;
    if (kind == WEFT_CKPT_TENSOR) {
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (shape[d] < 0 || (shape[d] && numel > file_size / (uint64_t)shape[d]))
                return WEFT_EIO;
            numel *= (uint64_t)shape[d];
        }
        if (!dtype_bytes((weft_dtype)dtype) || numel * dtype_bytes((weft_dtype)dtype) != nbytes)
            return WEFT_EIO;
    } else if (dtype != WEFT_U8 || ndim != 0) {
        return WEFT_EIO;
    }
    char name[CKPT_MAX_NAME];
    if (read_exact(f, name, nl, off) != 0 || memchr(name, 0, nl))
        return WEFT_EIO;
    name[nl] = 0;
    if (lookup(c, name))
        return WEFT_EIO;
    size_t np = pad_after(*off);
    if (read_exact(f, pad, np, off) != 0 || memcmp(pad, zeros, np) != 0)
        return WEFT_EIO;
    void *data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!data)
        return WEFT_ENOMEM;
    if (read_exact(f, data, (size_t)nbytes, off) != 0 ||
        get32(h + 88) != crc32_update(crc32_update(0, name, nl), data, (size_t)nbytes)) {
        free(data);
        return WEFT_EIO;
    }
    int rc = add(c, name, (weft_ckpt_kind)kind, (weft_dtype)dtype, data, (size_t)nbytes,
                 (int)ndim, shape);
    if (rc != 0)
        free(data);
    return rc;
}

int weft_ckpt_load(weft_ckpt **out, const char *path)
{
    if (!out || !path)
        return WEFT_EINVAL;
    *out = NULL;
    /* a sharded checkpoint's directory reads as the one file would */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ckpt_shard_load_whole(path, out);
    int fd = train_open_regular(path, O_RDONLY, 0);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return fd < 0 ? fd : WEFT_EIO;
    }
    uint64_t size = 0, off = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long s = ftell(f);
        size = s > 0 ? (uint64_t)s : 0;
    }
    rewind(f);
    weft_ckpt *c = NULL;
    unsigned char h[CKPT_HEADER];
    int rc = weft_ckpt_new(&c);
    if (rc == 0 && (read_exact(f, h, CKPT_HEADER, &off) != 0 || memcmp(h, HEAD_MAGIC, 8) != 0 ||
                    get32(h + 28) != crc32_update(0, h, 28) ||
                    get32(h + 8) != WEFT_CKPT_VERSION))
        rc = WEFT_EIO;
    uint64_t n = rc == 0 ? get64(h + 16) : 0;
    if (rc == 0 && n > size / CKPT_RECORD)
        rc = WEFT_EIO;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        rc = read_record(c, f, &off, size);
    unsigned char t[CKPT_TRAILER];
    if (rc == 0 && (read_exact(f, t, CKPT_TRAILER, &off) != 0 || memcmp(t, TAIL_MAGIC, 8) != 0 ||
                    get32(t + 20) != crc32_update(0, t, 20) || get64(t + 8) != n ||
                    fgetc(f) != EOF))
        rc = WEFT_EIO;
    fclose(f);
    if (rc != 0) {
        weft_ckpt_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
