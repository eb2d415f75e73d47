/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) — the checksum of
 * zip, gzip and PNG, so files can be checked with standard tools. */
#ifndef WEFT_CORE_CRC32_H
#define WEFT_CORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Start with crc = 0; feed the result back in to checksum data in pieces. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

#endif
