/* llm.c token shards: the writer, and the header reader every use of a
 * shard goes through. Layout in include/weft.h. */
#include "train/llmc_shard.h"
#include "core/errmsg.h"

#include "train/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HDR = WEFT_LLMC_HEADER_BYTES, BUF = 1 << 16 };

struct weft_llmc_writer {
    int fd, width, rc; /* rc: the first failed write, kept to close */
    uint64_t count;
    size_t used;
    char *path;
    unsigned char buf[BUF];
};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int32_t get32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static int flush(weft_llmc_writer *w)
{
    off_t at = (off_t)(HDR + (w->count * (uint64_t)w->width - w->used));
    if (w->rc == 0 && w->used)
        w->rc = train_pwrite_all(w->fd, w->buf, w->used, (uint64_t)at);
    w->used = 0;
    return w->rc;
}

int weft_llmc_writer_open(weft_llmc_writer **out, const char *path, int token_bytes)
{
    if (!out || !path || (token_bytes != 2 && token_bytes != 4))
        return WEFT_EINVAL;
    *out = NULL;
    weft_llmc_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return WEFT_ENOMEM;
    }
    w->width = token_bytes;
    w->fd = train_open_regular(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    /* the header's place, magic 0 until close */
    unsigned char zero[HDR] = { 0 };
    int rc = w->fd < 0 ? w->fd : train_pwrite_all(w->fd, zero, HDR, 0);
    if (rc != 0) {
        if (w->fd >= 0) {
            close(w->fd);
            remove(path);
        }
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int weft_llmc_writer_put(weft_llmc_writer *w, const int32_t *tokens, size_t n)
{
    if (!w || (!tokens && n))
        return WEFT_EINVAL;
    if (w->rc != 0)
        return w->rc;
    uint32_t max = w->width == 2 ? 0xffffu : (uint32_t)INT32_MAX;
    if (n > (uint64_t)INT32_MAX - w->count)
        return WEFT_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] > max)
            return WEFT_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (w->used + 4 > BUF && flush(w) != 0)
            return w->rc;
        for (int b = 0; b < w->width; b++)
            w->buf[w->used++] = (unsigned char)((uint32_t)tokens[i] >> (8 * b));
        w->count++;
    }
    return 0;
}

int weft_llmc_writer_close(weft_llmc_writer *w)
{
    if (!w)
        return WEFT_EINVAL;
    int rc = flush(w);
    unsigned char hdr[12];
    put32(hdr, w->width == 2 ? WEFT_LLMC_MAGIC_GPT2 : WEFT_LLMC_MAGIC_LLAMA3);
    put32(hdr + 4, w->width == 2 ? 1 : 7);
    put32(hdr + 8, (uint32_t)w->count);
    /* the tokens reach the file before the magic that vouches for them */
    if (rc == 0 && fsync(w->fd) != 0)
        rc = WEFT_EIO;
    if (rc == 0)
        rc = train_pwrite_all(w->fd, hdr, sizeof hdr, 0);
    if (close(w->fd) != 0 && rc == 0)
        rc = WEFT_EIO;
    if (rc != 0)
        remove(w->path);
    free(w->path);
    free(w);
    return rc;
}

int llmc_header_fd(int fd, weft_llmc_header *h, char *err, size_t errlen)
{
    struct stat st;
    unsigned char hdr[12];
    memset(h, 0, sizeof *h);
    if (err && errlen)
        err[0] = 0;
    if (fstat(fd, &st) != 0)
        return errmsg(err, errlen, WEFT_EIO, "cannot stat: %s", strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    if (size < HDR)
        return errmsg(err, errlen, WEFT_EIO,
                      "%llu bytes, shorter than the %d-byte header of an llm.c shard",
                      (unsigned long long)size, HDR);
    if (train_pread_all(fd, hdr, sizeof hdr, 0) != 0)
        return errmsg(err, errlen, WEFT_EIO, "cannot read the header");
    int32_t magic = get32(hdr), version = get32(hdr + 4), count = get32(hdr + 8);
    int width = magic == WEFT_LLMC_MAGIC_GPT2 ? 2 : magic == WEFT_LLMC_MAGIC_LLAMA3 ? 4 : 0;
    if (!width)
        return errmsg(err, errlen, WEFT_EIO,
                      "magic %ld is not an llm.c token shard's (%d: GPT-2, %d: Llama 3)%s",
                      (long)magic, WEFT_LLMC_MAGIC_GPT2, WEFT_LLMC_MAGIC_LLAMA3,
                      magic == 0 ? "; a writer that never closed leaves 0" : "");
    int want = width == 2 ? 1 : 7;
    if (version != want)
        return errmsg(err, errlen, WEFT_EIO,
                      "version %ld with magic %ld: llm.c's %s shards are version %d",
                      (long)version, (long)magic, width == 2 ? "GPT-2" : "Llama 3", want);
    if (count < 0)
        return errmsg(err, errlen, WEFT_EIO, "negative token count %ld in the header", (long)count);
    uint64_t need = (uint64_t)count * (uint64_t)width, have = size - HDR;
    if (need != have)
        return errmsg(err, errlen, WEFT_EIO,
                      "the header counts %ld tokens (%llu bytes of %d) but the file holds %llu "
                      "bytes after it (%s)", (long)count, (unsigned long long)need, width,
                      (unsigned long long)have, have < need ? "truncated?" : "trailing bytes");
    h->magic = magic;
    h->version = version;
    h->token_bytes = width;
    h->count = (uint64_t)count;
    return 0;
}

int weft_llmc_header_read(const char *path, weft_llmc_header *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!path || !out)
        return WEFT_EINVAL;
    int fd = train_open_regular(path, O_RDONLY, 0);
    if (fd < 0) {
        memset(out, 0, sizeof *out);
        errmsg(err, errlen, WEFT_EIO, "%s",
               fd == WEFT_EINVAL ? "not a regular file" : strerror(errno));
        return fd;
    }
    int rc = llmc_header_fd(fd, out, err, errlen);
    close(fd);
    return rc;
}

int llmc_read_tokens(int fd, int token_bytes, uint64_t first, size_t n, int32_t *out)
{
    /* read into the tail of out, widen from the front: no second buffer */
    size_t bytes = n * (size_t)token_bytes;
    unsigned char *raw = (unsigned char *)out + (n * sizeof *out - bytes);
    int rc = train_pread_all(fd, raw, bytes, HDR + first * (uint64_t)token_bytes);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = raw + i * (size_t)token_bytes;
        uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
        if (token_bytes == 4)
            v |= (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        out[i] = (int32_t)v;
    }
    return 0;
}

int llmc_is_shard(const char *path)
{
    int fd = train_open_regular(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    unsigned char m[4];
    int32_t magic = train_pread_all(fd, m, sizeof m, 0) == 0 ? get32(m) : 0;
    close(fd);
    return magic == WEFT_LLMC_MAGIC_GPT2 || magic == WEFT_LLMC_MAGIC_LLAMA3;
}
