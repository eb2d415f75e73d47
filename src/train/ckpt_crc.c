/* Checkpoint CRCs (train/ckpt_crc.h). */
#include "train/ckpt_crc.h"

#include <string.h>

enum { POLY = 0xedb88320u };

void ckpt_crc_init(ckpt_crc_table *k)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        k->t[0][b] = c;
    }
    /* t[j][b]: byte b followed by j zero bytes */
    for (int j = 1; j < 8; j++)
        for (int b = 0; b < 256; b++)
            k->t[j][b] = (k->t[j - 1][b] >> 8) ^ k->t[0][k->t[j - 1][b] & 0xff];
}

uint32_t ckpt_crc(const ckpt_crc_table *k, uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4); /* the files are little-endian, as are the hosts */
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = k->t[7][lo & 0xff] ^ k->t[6][(lo >> 8) & 0xff] ^ k->t[5][(lo >> 16) & 0xff] ^
            k->t[4][lo >> 24] ^ k->t[3][hi & 0xff] ^ k->t[2][(hi >> 8) & 0xff] ^
            k->t[1][(hi >> 16) & 0xff] ^ k->t[0][hi >> 24];
    }
    while (n--)
        c = k->t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* A 32 x 32 matrix over GF(2) (column i: the image of bit i) applied to v. */
static uint32_t apply(const uint32_t m[32], uint32_t v)
{
    uint32_t out = 0;
    for (int i = 0; v; i++, v >>= 1)
        if (v & 1)
            out ^= m[i];
    return out;
}

static void square(uint32_t out[32], const uint32_t m[32])
{
    for (int i = 0; i < 32; i++)
        out[i] = apply(m, m[i]);
}

uint32_t ckpt_crc_join(uint32_t a, uint32_t b, uint64_t len_b)
{
    /* A's CRC register carried through len_b zero bytes, then xor B's: the
     * pre- and post-inversions cancel between the two. The operator for
     * one zero bit, squared to 2, 4, 8 bits and on by powers of two. */
    uint32_t one[32], two[32], *m = one, *sq = two;
    m[0] = POLY;
    for (int i = 1; i < 32; i++)
        m[i] = 1u << (i - 1);
    for (int k = 0; k < 3; k++) {
        square(sq, m);
        uint32_t *x = m;
        m = sq;
        sq = x;
    }
    /* m: one zero byte */
    while (len_b) {
        if (len_b & 1)
            a = apply(m, a);
        len_b >>= 1;
        if (len_b) {
            square(sq, m);
            uint32_t *x = m;
            m = sq;
            sq = x;
        }
    }
    return a ^ b;
}
