/* CRC-32 (core/crc32.h): the bulk path (carry-less multiplication where
 * the CPU has it) gives the byte table's values for every length and
 * alignment, fed whole or in pieces, and so does the slicing-by-8 path
 * it falls back to; two pieces' CRCs join into the whole's. */
#include "test.h"
#include "core/crc32.h"

#include <stdint.h>
#include <stdlib.h>

static void fill(unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}

/* Known values, so both paths are checked against the standard and not
 * only against each other. */
TEST(known)
{
    crc32_tables k;
    crc32_tables_init(&k);
    CHECK(crc32_update(0, "123456789", 9) == 0xcbf43926u);
    unsigned char z[4096] = { 0 };
    uint32_t want = crc32_update(0, z, sizeof z);
    for (int clmul = 0; clmul < 2; clmul++) {
        k.clmul = clmul && crc32_clmul_supported();
        CHECK(crc32_update_fast(&k, 0, "123456789", 9) == 0xcbf43926u);
        CHECK(crc32_update_fast(&k, 0, z, sizeof z) == want);
    }
    printf("      bulk path: %s\n", crc32_clmul_supported() ? "carry-less multiply" : "tables");
}

/* Random lengths (many past the 64-byte fold) at every alignment of a
 * 16-byte block, and random starting CRCs. */
TEST(paths_agree)
{
    enum { N = 5000 };
    unsigned char *buf = malloc(N + 16);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill(buf, N + 16, 99);
    crc32_tables k;
    crc32_tables_init(&k);
    uint32_t x = 7;
    const char *scale = getenv("TEST_SCALE");
    int bad = 0, rounds = scale && atoi(scale) >= 10 ? 300 : 3000;
    for (int i = 0; i < rounds; i++) {
        x = x * 1103515245u + 12345u;
        size_t at = (x >> 8) % 16, n = (x >> 12) % N;
        if (i < 200)
            n = (size_t)i; /* every short length, and the edges of a fold */
        uint32_t start = x ^ 0x5a5a5a5au, want = crc32_update(start, buf + at, n);
        k.clmul = crc32_clmul_supported();
        bad += crc32_update_fast(&k, start, buf + at, n) != want;
        k.clmul = 0;
        bad += crc32_update_fast(&k, start, buf + at, n) != want;
        /* in two pieces, as a writer feeds a slice's runs */
        size_t cut = n ? (x >> 3) % n : 0;
        k.clmul = crc32_clmul_supported();
        bad += crc32_update_fast(&k, crc32_update_fast(&k, start, buf + at, cut), buf + at + cut,
                                 n - cut) != want;
    }
    CHECK(bad == 0);
    free(buf);
}

TEST(combine)
{
    unsigned char buf[1100];
    fill(buf, sizeof buf, 12345);
    int bad = 0;
    for (size_t cut = 0; cut <= sizeof buf; cut += 37)
        bad += crc32_combine(crc32_update(0, buf, cut), crc32_update(0, buf + cut, sizeof buf - cut),
                             sizeof buf - cut) != crc32_update(0, buf, sizeof buf);
    CHECK(bad == 0);
    CHECK(crc32_combine(0, 0xdeadbeefu, 7) == 0xdeadbeefu);
}
