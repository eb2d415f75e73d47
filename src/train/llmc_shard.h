/* llm.c token shards (llmc_shard.c): the header, checked against the file,
 * and positioned reads of tokens for datasets that stream. */
#ifndef WEFT_TRAIN_LLMC_SHARD_H
#define WEFT_TRAIN_LLMC_SHARD_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

/* The header of the shard open on fd (size: the file's bytes), checked:
 * known magic, the version that goes with it, count * width + header ==
 * size. On failure err says what is wrong (without the path). */
int llmc_header_fd(int fd, weft_llmc_header *h, char *err, size_t errlen);

/* Tokens [first, first + n) of a shard of token_bytes-wide tokens, with
 * pread (safe from several threads on one fd). */
int llmc_read_tokens(int fd, int token_bytes, uint64_t first, size_t n, int32_t *out);

/* 1 if path is a regular file that starts with an llm.c shard's magic (the
 * rest unchecked: a broken shard is still told apart from other formats). */
int llmc_is_shard(const char *path);

#endif
