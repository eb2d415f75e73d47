/* Sizes in bytes as people write them, the one grammar every weft option
 * and WEFT_* variable that takes a size reads:
 *
 *   65536  64K  64KB  64KiB  2M  2MiB  1.5G  1T  0x20000  512B
 *
 * K, M, G and T are powers of 1024 (case does not matter); an "iB" or "B"
 * after them changes nothing, so "64MB" is 64 MiB as well: weft has no
 * decimal sizes to confuse it with. A fraction needs a unit and is rounded
 * down to a whole byte (0.5K is 512); a bare count is whole. */
#ifndef WEFT_CORE_SIZE_H
#define WEFT_CORE_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* What a size looks like, for messages and --help texts. */
#define SIZE_FORM "bytes or a number with K, M, G or T (powers of 1024), e.g. 64M"

/* Reads s into *out. 0, or WEFT_EINVAL when s is no size or lies outside
 * lo..hi; then err (when not NULL) says which, in words that follow a name:
 * "bad size '64Q' (want bytes or ..., e.g. 64M)". */
int size_parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *err, size_t cap);

/* v the shortest exact way: "64M", "1536K", "1000"; returns buf. */
const char *size_text(uint64_t v, char *buf, size_t cap);

#endif
