/* MM_AUTO: the faster of the two matmul kernels on the model's own
 * products (train/mm_choose.h), the portable one when OpenBLAS is not
 * built in. */
#ifndef TRAIN_MM_AUTO_H
#define TRAIN_MM_AUTO_H

#include <stdint.h>

#include "train/matmul.h"
#include "train/mm_shapes.h"

/* backend MM_AUTO, MM_PORTABLE or MM_OPENBLAS (WEFT_ENOTSUP without
 * OpenBLAS); MM_AUTO starts on the peak probe's kernel (train/peak.h). */
int train_mm_create(mm_ctx **out, int threads, int backend);

/* A model calls begin at each forward with a key that determines its
 * products' shapes (config, batch, sequence, its part of the model): a
 * choice cached for the key is taken at once; else the products are
 * recorded, on the peak probe's kernel, until settle (after the first
 * backward) times them on both kernels and takes the faster. Both do
 * nothing once chosen, or for a model told its kernel. */
void train_mm_begin(mm_ctx *c, uint64_t key);
void train_mm_settle(mm_ctx *c);
/* The choice, NULL when none was made on the model's products. */
const mm_choice *train_mm_choice(const mm_ctx *c);
/* 1 while MM_AUTO still runs the peak probe's kernel (train_mm_name's)
 * before settle decides. */
int train_mm_provisional(const mm_ctx *c);

#endif
