/* Character classes for GPT-2's pre-tokenizer, and its byte-to-character
 * map.
 *
 * The classes are data: make runs src/train/bpe_unicode.awk over Debian's
 * /usr/share/unicode/UnicodeData.txt (package unicode-data) and writes the
 * table into the build folder, which this file includes. At build time
 * rather than run time so that the library needs no file of Unicode's to
 * encode, and the table is the one the tests ran against. Without
 * UnicodeData.txt the table has ASCII alone: every character beyond ASCII
 * then counts as punctuation, so non-ASCII letters, digits and spaces
 * split into other pieces than tiktoken's (the tokens still decode to the
 * same bytes); bpe_classes_full() says which table this is. */
#include "train/bpe.h"

#include <stdlib.h>

#include "bpe_unicode_table.h" /* in the build folder: make writes it */

static int range_class(uint32_t cp)
{
    size_t lo = 0, hi = BPE_UNI_RANGES;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < bpe_uni_ranges[mid][0])
            hi = mid;
        else if (cp > bpe_uni_ranges[mid][1])
            lo = mid + 1;
        else
            return (int)bpe_uni_ranges[mid][2];
    }
    return BPE_OTHER;
}

/* Plane 0 holds nearly all text, so its classes are a flat array (64 KiB);
 * the planes above are looked up in the ranges. */
int bpe_classes_init(weft_bpe *b)
{
    b->bmp_class = calloc(0x10000, 1);
    if (!b->bmp_class)
        return WEFT_ENOMEM;
    for (size_t r = 0; r < BPE_UNI_RANGES && bpe_uni_ranges[r][0] < 0x10000; r++) {
        uint32_t hi = bpe_uni_ranges[r][1] < 0xFFFF ? bpe_uni_ranges[r][1] : 0xFFFF;
        for (uint32_t cp = bpe_uni_ranges[r][0]; cp <= hi; cp++)
            b->bmp_class[cp] = (uint8_t)bpe_uni_ranges[r][2];
    }
    return 0;
}

int bpe_class_of(const weft_bpe *b, uint32_t cp)
{
    return cp < 0x10000 ? b->bmp_class[cp] : range_class(cp);
}

int bpe_classes_full(void)
{
    return BPE_UNI_FULL;
}

/* GPT-2 spells every byte as a printable character so that its files are
 * text: the printable Latin-1 bytes (! to ~, ¡ to ¬, ® to ÿ) stand for
 * themselves, the other 68 for U+0100 onwards in byte order. */
static int printable(unsigned c)
{
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
}

uint32_t bpe_byte_char(unsigned char byte)
{
    if (printable(byte))
        return byte;
    uint32_t k = 0;
    for (unsigned c = 0; c < byte; c++)
        k += !printable(c);
    return 256 + k;
}
