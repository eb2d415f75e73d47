/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) — the checksum of
 * zip, gzip and PNG, so files can be checked with standard tools. */
#ifndef WEFT_CORE_CRC32_H
#define WEFT_CORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Start with crc = 0; feed the result back in to checksum data in pieces. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

/* The same values for bulk data such as checkpoint files: by carry-less
 * multiplication (crc32_clmul.c) where the CPU has it, else eight bytes a
 * step (slicing by 8). The eight tables (8 KiB) and the folding constants
 * are the caller's, made once by crc32_tables_init; clmul says which way
 * crc32_update_fast goes (a test may clear it to compare the two). */
typedef struct {
    uint32_t t[8][256];
    uint64_t fold[4]; /* x^575, x^511, x^191, x^127 mod P, times x, reflected */
    int clmul;
} crc32_tables;

void crc32_tables_init(crc32_tables *k);
uint32_t crc32_update_fast(const crc32_tables *k, uint32_t crc, const void *data, size_t n);
/* The CRC of A then B from A's, B's and B's length in bytes, so a whole's
 * CRC follows from its pieces' without reading the bytes twice. */
uint32_t crc32_combine(uint32_t a, uint32_t b, uint64_t len_b);

/* The carry-less kernel (crc32_clmul.c): 1 where this CPU runs it; the
 * values of crc32_update for fold = crc32_tables' constants. */
int crc32_clmul_supported(void);
uint32_t crc32_clmul(const uint64_t fold[4], uint32_t crc, const void *data, size_t n);

#endif
