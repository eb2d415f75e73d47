/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) — the checksum of
 * zip, gzip and PNG, so files can be checked with standard tools. */
#ifndef WEFT_CORE_CRC32_H
#define WEFT_CORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Start with crc = 0; feed the result back in to checksum data in pieces. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

/* The same values eight bytes a step (slicing by 8), for bulk data such as
 * checkpoint files: the eight tables (8 KiB) are the caller's, made once
 * by crc32_tables_init. */
typedef struct {
    uint32_t t[8][256];
} crc32_tables;

void crc32_tables_init(crc32_tables *k);
uint32_t crc32_update_fast(const crc32_tables *k, uint32_t crc, const void *data, size_t n);
/* The CRC of A then B from A's, B's and B's length in bytes, so a whole's
 * CRC follows from its pieces' without reading the bytes twice. */
uint32_t crc32_combine(uint32_t a, uint32_t b, uint64_t len_b);

#endif
