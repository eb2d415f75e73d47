/* Checkpoint container; the API is weft_ckpt_* in weft.h. File layout
 * (little-endian):
 *
 *   header, 32 bytes: "WEFTCKPT", u32 version, u32 flags (0), u64 record
 *     count, u32 0, u32 CRC-32 of bytes 0..27
 *   per record: a 96-byte record header — u32 kind, u32 dtype, u32 name
 *     length, u32 ndim, u64 shape[8], u64 data bytes, u32 CRC-32 of name and
 *     data, u32 CRC-32 of bytes 0..91 — then the name, zeros up to the next
 *     multiple of 64 in the file (so data could be mapped in place), the data
 *   trailer, 24 bytes: "WEFTEND\0", u64 record count, u32 0, u32 CRC-32 of
 *     bytes 0..19 of the trailer
 *
 * A reader rejects any CRC mismatch, a missing trailer (truncation) and
 * versions it does not know. */
#ifndef WEFT_TRAIN_CKPT_H
#define WEFT_TRAIN_CKPT_H
#include "weft.h"

enum { CKPT_HEADER = 32, CKPT_RECORD = 96, CKPT_TRAILER = 24, CKPT_ALIGN = 64,
       CKPT_MAX_NAME = 4096 };

/* The records of a model's config (model/spec, model/config) and of an
 * optimiser's (optim/config, optim/steps) without their tensors: what a
 * sharded checkpoint's manifest holds (train/ckpt_shard.h). */
int train_ckpt_put_config(weft_ckpt *c, const weft_model_config *cfg);
int train_ckpt_put_optim_config(weft_ckpt *c, const weft_optim_config *oc, int64_t steps);

#endif
