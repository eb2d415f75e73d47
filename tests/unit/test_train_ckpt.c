/* Checkpoint container: round trip, replacement, and rejection of every
 * corrupted or truncated file. */
#include "test.h"
#include "weft.h"
#include "core/crc32.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[256];

static long file_size(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static unsigned char *slurp(const char *p, long *n)
{
    *n = file_size(p);
    unsigned char *b = malloc((size_t)*n);
    FILE *f = fopen(p, "rb");
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n)
        *n = -1;
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
}

static weft_ckpt *make(void)
{
    weft_ckpt *c;
    if (weft_ckpt_new(&c) != 0)
        return NULL;
    float w[6] = { 1, -2, 3.5f, 1e-30f, -0.0f, 7 };
    int64_t shape[2] = { 2, 3 };
    weft_ckpt_put_tensor(c, "param/w", WEFT_F32, w, 2, shape);
    int64_t bshape[1] = { 5 };
    uint16_t half[5] = { 1, 2, 3, 4, 0xffff };
    weft_ckpt_put_tensor(c, "param/half", WEFT_BF16, half, 1, bshape);
    weft_ckpt_put_str(c, "config", "mlp:784-512-10");
    weft_ckpt_put_u64(c, "data/position", 0x0123456789abcdefull);
    weft_ckpt_put_blob(c, "empty", NULL, 0);
    return c;
}

TEST(round_trip)
{
    weft_ckpt *c = make();
    CHECK(c && weft_ckpt_count(c) == 5);
    CHECK(weft_ckpt_save(c, path) == 0);
    weft_ckpt *r = NULL;
    CHECK(weft_ckpt_load(&r, path) == 0);
    CHECK(weft_ckpt_count(r) == 5);
    float w[6];
    CHECK(weft_ckpt_get_f32(r, "param/w", w, 6) == 0);
    CHECK(w[2] == 3.5f && w[3] == 1e-30f && w[5] == 7);
    CHECK(weft_ckpt_get_f32(r, "param/w", w, 5) == WEFT_EIO);  /* count mismatch */
    CHECK(weft_ckpt_get_f32(r, "param/half", w, 5) == WEFT_EIO); /* not f32 */
    CHECK(weft_ckpt_get_f32(r, "param/none", w, 6) == WEFT_EIO);
    weft_ckpt_entry e;
    CHECK(weft_ckpt_find(r, "param/half", &e) == 0);
    CHECK(e.kind == WEFT_CKPT_TENSOR && e.dtype == WEFT_BF16 && e.ndim == 1 && e.shape[0] == 5 &&
          e.nbytes == 10 && ((const uint16_t *)e.data)[4] == 0xffff);
    CHECK(weft_ckpt_find(r, "param/w", &e) == 0 && e.ndim == 2 && e.shape[0] == 2 &&
          e.shape[1] == 3);
    char s[64];
    CHECK(weft_ckpt_get_str(r, "config", s, sizeof s) == 0 && strcmp(s, "mlp:784-512-10") == 0);
    CHECK(weft_ckpt_get_str(r, "config", s, 5) == WEFT_EINVAL);
    uint64_t v;
    CHECK(weft_ckpt_get_u64(r, "data/position", &v) == 0 && v == 0x0123456789abcdefull);
    CHECK(weft_ckpt_get_u64(r, "config", &v) == WEFT_EIO);
    CHECK(weft_ckpt_find(r, "empty", &e) == 0 && e.nbytes == 0 && e.kind == WEFT_CKPT_BLOB);
    int order = 1;
    const char *names[5] = { "param/w", "param/half", "config", "data/position", "empty" };
    for (int i = 0; i < 5; i++)
        order &= weft_ckpt_entry_at(r, i, &e) == 0 && strcmp(e.name, names[i]) == 0;
    CHECK(order);
    CHECK(weft_ckpt_entry_at(r, 5, &e) == WEFT_EINVAL);

    /* replacing a record keeps one copy with the new contents */
    CHECK(weft_ckpt_put_u64(r, "data/position", 9) == 0);
    CHECK(weft_ckpt_count(r) == 5 && weft_ckpt_get_u64(r, "data/position", &v) == 0 && v == 9);

    /* data is 64-byte aligned in the file: the f32 tensor's bytes sit there */
    long n;
    unsigned char *b = slurp(path, &n);
    int aligned = 0;
    for (long off = 0; off + 24 <= n; off += 64)
        aligned |= memcmp(b + off, w, 24) == 0;
    CHECK(aligned);
    free(b);
    weft_ckpt_free(r);
    weft_ckpt_free(c);
}

TEST(bad_args)
{
    weft_ckpt *c;
    CHECK(weft_ckpt_new(&c) == 0);
    float x = 1;
    int64_t shape[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    CHECK(weft_ckpt_put_tensor(c, "", WEFT_F32, &x, 1, shape) == WEFT_EINVAL);
    CHECK(weft_ckpt_put_tensor(c, "x", WEFT_F32, &x, 9, shape) == WEFT_EINVAL);
    CHECK(weft_ckpt_put_tensor(c, "x", (weft_dtype)99, &x, 1, shape) == WEFT_EINVAL);
    CHECK(weft_ckpt_put_tensor(c, "x", WEFT_F32, NULL, 1, shape) == WEFT_EINVAL);
    CHECK(weft_ckpt_put_tensor(c, "scalar", WEFT_F32, &x, 0, NULL) == 0);
    CHECK(weft_ckpt_save(c, "/nonexistent-dir/x.ckpt") == WEFT_EIO);
    weft_ckpt *r;
    CHECK(weft_ckpt_load(&r, "/nonexistent-dir/x.ckpt") == WEFT_EIO);
    weft_ckpt_free(c);
}

TEST(corruption)
{
    weft_ckpt *c = make();
    weft_ckpt_save(c, path);
    weft_ckpt_free(c);
    long n;
    unsigned char *good = slurp(path, &n);
    CHECK(n > 0);
    if (n <= 0) {
        free(good);
        return;
    }
    /* flip one bit anywhere that is not padding: the load must fail */
    int undetected = 0, tried = 0;
    unsigned char *bad = malloc((size_t)n);
    for (long off = 0; off < n; off++) {
        memcpy(bad, good, (size_t)n);
        bad[off] ^= 0x10;
        spit(path, bad, n);
        weft_ckpt *r = NULL;
        int rc = weft_ckpt_load(&r, path);
        if (rc == 0) {
            undetected++;
            weft_ckpt_free(r);
        } else {
            CHECK(rc == WEFT_EIO && r == NULL);
        }
        tried++;
    }
    CHECKF(undetected == 0, "%d of %d bit flips went unnoticed", undetected, tried);
    /* every truncation fails */
    int truncated_ok = 0;
    for (long len = 0; len < n; len += 7) {
        spit(path, good, len);
        weft_ckpt *r = NULL;
        truncated_ok += weft_ckpt_load(&r, path) == 0;
        weft_ckpt_free(r);
    }
    CHECK(truncated_ok == 0);
    /* trailing garbage fails */
    memcpy(bad, good, (size_t)n);
    spit(path, bad, n);
    FILE *f = fopen(path, "ab");
    fputc('x', f);
    fclose(f);
    weft_ckpt *r = NULL;
    CHECK(weft_ckpt_load(&r, path) == WEFT_EIO);
    /* a future version is refused even with a valid header checksum */
    memcpy(bad, good, (size_t)n);
    bad[8] = WEFT_CKPT_VERSION + 1;
    uint32_t crc = crc32_update(0, bad, 28);
    for (int i = 0; i < 4; i++)
        bad[28 + i] = (unsigned char)(crc >> (8 * i));
    spit(path, bad, n);
    CHECK(weft_ckpt_load(&r, path) == WEFT_EIO);
    spit(path, good, n);
    CHECK(weft_ckpt_load(&r, path) == 0);
    weft_ckpt_free(r);
    free(bad);
    free(good);
}

static void remove_path(void)
{
    remove(path);
}

TEST_INIT
{
    snprintf(path, sizeof path, "/tmp/weft-test-ckpt-%ld.ckpt", (long)getpid());
    atexit(remove_path);
}
