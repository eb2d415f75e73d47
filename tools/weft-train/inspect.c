/* --inspect CKPT: a checkpoint's records, one a line, over the public
 * weft_ckpt API; a sharded checkpoint's directory as the one file it
 * stands for (its save named by latest), its layout among the records,
 * then each tensor's slices: which file holds which elements.
 * Tensors show a hash of their bytes, so two checkpoints' parameters can
 * be compared from the listings. */
#include "train.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

/* A FIFO or a device would block the loader or read as garbage: refused
 * by name before it is opened. */
static void check_regular(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return;
    mode_t m = st.st_mode;
    die("--inspect %s: it is %s, not a regular file or a checkpoint directory", path,
        S_ISFIFO(m)   ? "a FIFO"
        : S_ISCHR(m)  ? "a character device"
        : S_ISBLK(m)  ? "a block device"
        : S_ISSOCK(m) ? "a socket"
        : S_ISDIR(m)  ? "a directory"
                      : "something else");
}

/* Eight-byte records whose names say they count something print as numbers. */
static int is_count(const weft_ckpt_entry *e)
{
    static const char *const words[] = { "step", "position", "batch", "seed", "base", "samples" };
    if (e->nbytes != 8 || strncmp(e->name, "model/", 6) == 0)
        return 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(e->name, words[i]))
            return 1;
    return 0;
}

/* FNV-1a, 64 bits: a fingerprint of a tensor's bytes, not a checksum. */
static uint64_t fingerprint(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int inspect_ckpt(const char *path)
{
    weft_ckpt *c;
    check_regular(path);
    int rc = weft_ckpt_load(&c, path);
    if (rc != 0)
        die("cannot load checkpoint %s: %s", path, weft_strerror(rc));
    printf("%s: checkpoint version %d, %d records, checksums ok\n", path, WEFT_CKPT_VERSION,
           weft_ckpt_count(c));
    for (int i = 0; i < weft_ckpt_count(c); i++) {
        weft_ckpt_entry e;
        weft_ckpt_entry_at(c, i, &e);
        printf("  %-28s ", e.name);
        if (e.kind == WEFT_CKPT_TENSOR) {
            const char *dt = weft_dtype_name(e.dtype);
            printf("%-4s [", dt ? dt : "?");
            for (int d = 0; d < e.ndim; d++)
                printf("%s%lld", d ? ", " : "", (long long)e.shape[d]);
            printf("] %016llx\n", (unsigned long long)fingerprint(e.data, e.nbytes));
        } else if (is_count(&e)) {
            uint64_t v = 0;
            weft_ckpt_get_u64(c, e.name, &v);
            printf("%llu\n", (unsigned long long)v);
        } else {
            const char *p = e.data;
            printf("\"");
            for (size_t k = 0; k < e.nbytes && k < 100; k++)
                putchar(p[k] == '\n' ? ' ' : (p[k] >= 32 && p[k] < 127) ? p[k] : '.');
            printf("%s\"\n", e.nbytes > 100 ? "..." : "");
        }
    }
    weft_ckpt_free(c);
    struct stat st;
    /* a directory: where its tensors lie as well */
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && (rc = weft_ckpt_shard_list(path, stdout)))
        die("cannot list the slices of %s: %s", path, weft_strerror(rc));
    return 0;
}
