/* Sizes as include/weft.h offers them: core/size.h's one grammar, for
 * programs that read sizes from their own command lines. */
#include "core/size.h"
#include "weft.h"

int weft_size_parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *why,
                    size_t cap)
{
    if (!s || !out)
        return WEFT_EINVAL;
    return size_parse(s, lo, hi, out, why, cap);
}

const char *weft_size_text(uint64_t v, char *buf, size_t cap)
{
    return buf && cap ? size_text(v, buf, cap) : "";
}
