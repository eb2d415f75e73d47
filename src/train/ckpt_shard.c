/* Sharded checkpoints (train/ckpt_shard.h): slices of whole vectors, and a
 * rank's file written as runs of them through a bounded buffer. */
#include "train/ckpt_shard.h"

#include "core/vec.h"
#include "core/crc32.h"
#include "train/data_file.h"
#include "train/part_runs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

int ckpt_slices_add(ckpt_slices *l, uint64_t file, uint64_t vec, uint64_t at, uint64_t len,
                    uint64_t off)
{
    if (len == 0)
        return 0;
    ckpt_slice *s = l->n ? &l->s[l->n - 1] : NULL;
    /* a reader checks a slice whole before it uses any of it: kept short */
    int room = s && (s->count * s->len + len) * 4 <= CKPT_SLICE_MAX_BYTES;
    if (room && s->file == file && s->vec == vec && off == s->off + s->count * s->len * 4) {
        /* one run that goes on in both: longer */
        if (s->count == 1 && at == s->start + s->len) {
            s->len += len;
            return 0;
        }
        /* the same length at a fixed distance: a strided slice */
        if (len == s->len && s->count == 1 && at >= s->start + s->len) {
            s->stride = at - s->start;
            s->count = 2;
            return 0;
        }
        if (len == s->len && s->count > 1 && at == s->start + s->count * s->stride) {
            s->count++;
            return 0;
        }
    }
    int rc = VEC_RESERVE(l->s, l->cap, l->n + 1);
    if (rc)
        return rc;
    l->s[l->n++] = (ckpt_slice){ .file = file, .vec = vec, .start = at, .len = len,
                                 .stride = len, .count = 1, .off = off };
    return 0;
}

void ckpt_slices_free(ckpt_slices *l)
{
    free(l->s);
    memset(l, 0, sizeof *l);
}

int ckpt_slice_overlap(const ckpt_slice *s, uint64_t lo, uint64_t hi, ckpt_overlap_fn fn,
                       void *arg)
{
    if (!s->count || !s->len || hi <= lo || hi <= s->start)
        return 0;
    uint64_t stride = s->count > 1 ? s->stride : s->len;
    /* the first run that ends past lo */
    uint64_t k = 0;
    if (lo > s->start + s->len - 1)
        k = (lo - (s->start + s->len - 1) + stride - 1) / stride;
    for (; k < s->count; k++) {
        uint64_t a = s->start + k * stride, b = a + s->len;
        if (a >= hi)
            break;
        uint64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (y <= x)
            continue;
        int rc = fn(arg, x, s->off + (k * s->len + (x - a)) * 4, y - x);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- a rank's file ---------------------------------------------------- */

typedef struct {
    int fd;
    unsigned char *buf;
    size_t cap, used;
    uint64_t off; /* the file's bytes so far, the buffer's included */
    crc32_tables *k;
    ckpt_slices *out;
    uint64_t file;
    const ckpt_piece *p;
    size_t t_offset;     /* the tensor's in the part's buffers */
    size_t whole_offset; /* the tensor's in the whole vector */
} writer;

/* O_DIRECT takes only whole blocks at block offsets: every buffer but the
 * file's last is one (the buffer is aligned and a multiple of them); the
 * last goes through the page cache, the fd's O_DIRECT cleared, as does
 * everything on a file system that refuses a direct write. */
enum { DIRECT_ALIGN = 4096 };

static void direct_off(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT))
        (void)fcntl(fd, F_SETFL, fl & ~O_DIRECT);
}

static int flush(writer *w)
{
    if (!w->used)
        return 0;
    uint64_t at = w->off - w->used;
    if ((at | w->used) % DIRECT_ALIGN)
        direct_off(w->fd);
    errno = 0;
    int rc = train_pwrite_all(w->fd, w->buf, w->used, at);
    if (rc && errno == EINVAL) {
        direct_off(w->fd);
        rc = train_pwrite_all(w->fd, w->buf, w->used, at);
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* the disk starts on these bytes now, while the next buffer is filled,
     * rather than all at the closing fsync; a hint, so its failure is not */
    if (rc == 0)
        (void)sync_file_range(w->fd, (off_t)at, (off_t)w->used, SYNC_FILE_RANGE_WRITE);
#endif
    w->used = 0;
    return rc;
}

/* At most a slice's length of one run: its own slice (or the end of the
 * last one), its bytes into that slice's CRC. */
static int put_piece(writer *w, size_t e, size_t at, size_t len)
{
    int rc = ckpt_slices_add(w->out, w->file, (uint64_t)w->p->vec, w->whole_offset + at, len,
                             w->off);
    const unsigned char *src = (const unsigned char *)(w->p->src + (w->t_offset + e - w->p->lo));
    size_t bytes = len * sizeof(float);
    while (rc == 0 && bytes) {
        size_t k = w->cap - w->used < bytes ? w->cap - w->used : bytes;
        memcpy(w->buf + w->used, src, k);
        /* the run is the last slice's end, whether it began or extended it */
        w->out->s[w->out->n - 1].crc =
            crc32_update_fast(w->k, (uint32_t)w->out->s[w->out->n - 1].crc, src, k);
        w->used += k;
        w->off += k;
        src += k;
        bytes -= k;
        if (w->used == w->cap)
            rc = flush(w);
    }
    return rc;
}

static int put_run(void *arg, size_t e, size_t at, size_t len)
{
    writer *w = arg;
    size_t most = CKPT_SLICE_MAX_BYTES / sizeof(float);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < len; k += most)
        rc = put_piece(w, e + k, at + k, len - k < most ? len - k : most);
    return rc;
}

int ckpt_shard_write(int fd, const weft_model *m, const ckpt_piece *p, int np,
                     const unsigned char *skip, uint64_t file, size_t buf_bytes,
                     ckpt_slices *out, uint64_t *bytes, uint32_t *crc)
{
    writer w = { .fd = fd, .cap = buf_bytes ? buf_bytes : 1 << 20, .out = out, .file = file };
    size_t first = out->n;
    void *aligned = NULL;
    w.cap = (w.cap + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    if (posix_memalign(&aligned, DIRECT_ALIGN, w.cap) == 0)
        w.buf = aligned;
    w.k = malloc(sizeof *w.k);
    if (!w.buf || !w.k) {
        free(w.buf);
        free(w.k);
        return WEFT_ENOMEM;
    }
    crc32_tables_init(w.k);
    int rc = 0, nt = weft_model_tensor_count(m);
    for (int k = 0; rc == 0 && k < np; k++) {
        w.p = &p[k];
        size_t lo = p[k].lo, hi = p[k].lo + p[k].n;
        for (int i = 0; rc == 0 && i < nt; i++) {
            weft_tensor_info ti;
            if ((rc = weft_model_tensor_info(m, i, &ti)) != 0)
                break;
            size_t a = ti.offset > lo ? ti.offset : lo;
            size_t b = ti.offset + ti.numel < hi ? ti.offset + ti.numel : hi;
            if (b <= a || (skip && skip[i]))
                continue;
            w.t_offset = ti.offset;
            w.whole_offset = ti.whole_offset;
            rc = train_part_runs(m, i, a - ti.offset, b - ti.offset, put_run, &w);
        }
    }
    if (rc == 0)
        rc = flush(&w);
    /* the file is its slices in order: its CRC follows from theirs */
    uint32_t whole = 0;
    for (size_t k = first; k < out->n; k++)
        whole = crc32_combine(whole, (uint32_t)out->s[k].crc,
                              out->s[k].count * out->s[k].len * sizeof(float));
    free(w.buf);
    free(w.k);
    *bytes = w.off;
    *crc = whole;
    return rc;
}

/* Line k of text (lines end in \n or the end) into buf; 0 if it is there. */
int ckpt_shard_line(const char *text, int k, char *buf, size_t cap)
{
    for (; k > 0 && text; k--) {
        text = strchr(text, '\n');
        text = text ? text + 1 : NULL;
    }
    if (!text || !*text)
        return WEFT_EIO;
    size_t n = strcspn(text, "\n");
    if (n >= cap)
        return WEFT_EIO;
    memcpy(buf, text, n);
    buf[n] = 0;
    return 0;
}
