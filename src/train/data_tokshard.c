/* Token shards. Layout, all little-endian:
 *   0  char[8] "WEFTTOKS"
 *   8  u32 version (1)
 *  12  u32 header size (64)
 *  16  u32 vocabulary size
 *  20  u32 bytes per token (1, 2 or 4: the smallest that holds vocab - 1)
 *  24  u64 token count
 *  32  u32 CRC-32 of the token bytes
 *  36  u32 CRC-32 of header bytes 0..35
 *  40  zero up to 64
 *  64  tokens */
#include "core/crc32.h"
#include "train/data_file.h"
#include "weft.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER = 64 };
static const char MAGIC[8] = { 'W', 'E', 'F', 'T', 'T', 'O', 'K', 'S' };

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int width_for(uint32_t vocab)
{
    return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
}

int weft_tokshard_write(const char *path, const int32_t *tokens, size_t n, uint32_t vocab)
{
    if (!path || (!tokens && n) || vocab == 0 || vocab > INT32_MAX)
        return WEFT_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab)
            return WEFT_EINVAL;
    int w = width_for(vocab);
    unsigned char hdr[HEADER] = { 0 };
    memcpy(hdr, MAGIC, 8);
    put32(hdr + 8, WEFT_TOKSHARD_VERSION);
    put32(hdr + 12, HEADER);
    put32(hdr + 16, vocab);
    put32(hdr + 20, (uint32_t)w);
    put32(hdr + 24, (uint32_t)n);
    put32(hdr + 28, (uint32_t)((uint64_t)n >> 32));
    int fd = train_open_regular(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return fd < 0 ? fd : WEFT_EIO;
    }
    /* Tokens go out in blocks; the CRC runs over exactly the bytes written. */
    unsigned char buf[4096 * 4];
    uint32_t crc = 0;
    int rc = fseek(f, HEADER, SEEK_SET) == 0 ? 0 : WEFT_EIO;
    for (size_t i = 0; rc == 0 && i < n;) {
        size_t k = 0;
        for (; i < n && k + 4 <= sizeof buf; i++)
            for (int b = 0; b < w; b++)
                buf[k++] = (unsigned char)((uint32_t)tokens[i] >> (8 * b));
        crc = crc32_update(crc, buf, k);
        if (fwrite(buf, 1, k, f) != k)
            rc = WEFT_EIO;
    }
    put32(hdr + 32, crc);
    put32(hdr + 36, crc32_update(0, hdr, 36));
    if (rc == 0 && (fseek(f, 0, SEEK_SET) != 0 || fwrite(hdr, 1, HEADER, f) != HEADER))
        rc = WEFT_EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = WEFT_EIO;
    if (rc != 0)
        remove(path);
    return rc;
}

int weft_tokshard_read(const char *path, int32_t **tokens, size_t *n, uint32_t *vocab)
{
    if (!path || !tokens || !n)
        return WEFT_EINVAL;
    *tokens = NULL;
    *n = 0;
    int fd = train_open_regular(path, O_RDONLY, 0);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return fd < 0 ? fd : WEFT_EIO;
    }
    struct stat st;
    uint64_t size = fstat(fd, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
    unsigned char hdr[HEADER];
    int rc = fread(hdr, 1, HEADER, f) == HEADER ? 0 : WEFT_EIO;
    if (rc == 0 && (memcmp(hdr, MAGIC, 8) != 0 || get32(hdr + 36) != crc32_update(0, hdr, 36)))
        rc = WEFT_EIO;
    if (rc == 0 && (get32(hdr + 8) != WEFT_TOKSHARD_VERSION || get32(hdr + 12) != HEADER))
        rc = WEFT_EIO;
    uint32_t v = rc == 0 ? get32(hdr + 16) : 0;
    int w = rc == 0 ? (int)get32(hdr + 20) : 0;
    uint64_t count = rc == 0 ? (uint64_t)get32(hdr + 24) | (uint64_t)get32(hdr + 28) << 32 : 0;
    if (rc == 0 && (v == 0 || v > INT32_MAX || w != width_for(v) || count > SIZE_MAX / 4 ||
                    count != (size - HEADER) / (uint64_t)w))
        rc = WEFT_EIO;
    int32_t *t = NULL;
    if (rc == 0 && !(t = malloc(count ? count * sizeof *t : 1)))
        rc = WEFT_ENOMEM;
    unsigned char buf[4096 * 4];
    uint32_t crc = 0;
    for (uint64_t i = 0; rc == 0 && i < count;) {
        size_t want = (size_t)((count - i) * (uint64_t)w < sizeof buf ? (count - i) * (uint64_t)w
                                                                      : sizeof buf / 4 * (size_t)w);
        if (fread(buf, 1, want, f) != want) {
            rc = WEFT_EIO;
            break;
        }
        crc = crc32_update(crc, buf, want);
        for (size_t k = 0; k < want; k += (size_t)w, i++) {
            uint32_t x = 0;
            for (int b = 0; b < w; b++)
                x |= (uint32_t)buf[k + (size_t)b] << (8 * b);
            if (x >= v)
                rc = WEFT_EIO;
            t[i] = (int32_t)x;
        }
    }
    if (rc == 0 && (crc != get32(hdr + 32) || fgetc(f) != EOF))
        rc = WEFT_EIO;
    fclose(f);
    if (rc != 0) {
        free(t);
        return rc;
    }
    *tokens = t;
    *n = (size_t)count;
    if (vocab)
        *vocab = v;
    return 0;
}
