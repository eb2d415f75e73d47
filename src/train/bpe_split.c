/* GPT-2's pre-tokenizer: the text is cut into pieces by the pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * and each piece is merged alone. This is that pattern by hand over UTF-8,
 * alternative by alternative, with the same leftmost-first choice a
 * backtracking regex engine makes. Contractions are lower case only, the
 * optional leading character is U+0020 alone, and a run of white space
 * before a non-space gives its last character to what follows (that is
 * \s+(?!\S): " world" keeps its space). A byte that is not part of valid
 * UTF-8 (stray continuation, overlong form, surrogate, beyond U+10FFFF)
 * counts as one character of the punctuation class, so any bytes encode
 * and decode back; valid text never meets that case. */
#include "train/bpe.h"

/* The class of the character at s[i] and its length in bytes. */
static int char_at(const weft_bpe *b, const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *len = 1;
        return b->bmp_class[c];
    }
    size_t k;
    uint32_t cp, lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3, cp = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4, cp = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        *len = 1;
        return BPE_OTHER;
    }
    if (i + k > n || s[i + 1] < lo || s[i + 1] > hi) {
        *len = 1;
        return BPE_OTHER;
    }
    for (size_t j = 1; j < k; j++) {
        if (j > 1 && (s[i + j] & 0xC0) != 0x80) {
            *len = 1;
            return BPE_OTHER;
        }
        cp = cp << 6 | (s[i + j] & 0x3F);
    }
    *len = k;
    return bpe_class_of(b, cp);
}

static size_t contraction(const unsigned char *s, size_t n, size_t i)
{
    if (i + 1 >= n)
        return 0;
    unsigned char d = s[i + 1];
    if (d == 's' || d == 't' || d == 'm' || d == 'd')
        return 2;
    if (i + 2 < n && ((d == 'r' && s[i + 2] == 'e') || (d == 'v' && s[i + 2] == 'e') ||
                      (d == 'l' && s[i + 2] == 'l')))
        return 3;
    return 0;
}

size_t bpe_split_next(const weft_bpe *b, const unsigned char *s, size_t n, size_t i)
{
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i);
        if (k)
            return i + k;
    }
    size_t len, j = i;
    int cls = char_at(b, s, n, i, &len);
    if (s[i] == ' ' && i + 1 < n) {
        size_t len2;
        int next = char_at(b, s, n, i + 1, &len2);
        if (next != BPE_SPACE) { /* " ?X+": the space leads the run */
            cls = next;
            j = i + 1;
            len = len2;
        }
    }
    if (cls != BPE_SPACE) {
        j += len;
        while (j < n && char_at(b, s, n, j, &len) == cls)
            j += len;
        return j;
    }
    size_t last = i;
    j = i + len;
    while (j < n && char_at(b, s, n, j, &len) == BPE_SPACE) {
        last = j;
        j += len;
    }
    if (j == n || last == i)
        return j;
    return last; /* \s+(?!\S): the last space goes with the next piece */
}
