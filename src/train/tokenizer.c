/* Byte-level tokenization: every byte is its own token, so any text,
 * UTF-8 or not, round-trips and the vocabulary is fixed at 256. */
#include "train/tokenizer.h"

size_t weft_bytes_encode(const void *text, size_t n, int32_t *tokens)
{
    const unsigned char *p = text;
    for (size_t i = 0; i < n; i++)
        tokens[i] = p[i];
    return n;
}

size_t weft_bytes_decode(const int32_t *tokens, size_t n, char *text)
{
    for (size_t i = 0; i < n; i++)
        text[i] = tokens[i] >= 0 && tokens[i] < WEFT_BYTE_VOCAB ? (char)(unsigned char)tokens[i] : '?';
    return n;
}
