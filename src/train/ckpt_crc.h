/* CRC-32 (the IEEE polynomial of core/crc32.h, the same values) fast
 * enough for checkpoint files: eight bytes a step through eight tables
 * (slicing by 8), which the caller keeps (8 KiB, made by ckpt_crc_init);
 * and the CRC of two pieces joined from theirs, so a file's CRC follows
 * from its slices' without reading the bytes twice. */
#ifndef WEFT_TRAIN_CKPT_CRC_H
#define WEFT_TRAIN_CKPT_CRC_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t t[8][256];
} ckpt_crc_table;

void ckpt_crc_init(ckpt_crc_table *k);
/* As crc32_update: start with crc = 0, feed the result back in. */
uint32_t ckpt_crc(const ckpt_crc_table *k, uint32_t crc, const void *data, size_t n);
/* The CRC of A then B from A's, B's and B's length in bytes. */
uint32_t ckpt_crc_join(uint32_t a, uint32_t b, uint64_t len_b);

#endif
