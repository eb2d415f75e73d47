/* The matmul context's fields, shared by the kernels' dispatch
 * (matmul.c) and MM_AUTO's choice on the model's own products
 * (mm_auto.c); no other file looks inside. */
#ifndef TRAIN_MM_CTX_H
#define TRAIN_MM_CTX_H

#include <stdint.h>

#include "train/matmul_bf16.h"
#include "train/mm_shapes.h"
#include "train/pool.h"

struct mm_ctx {
    int backend;   /* MM_PORTABLE or MM_OPENBLAS */
    int threads;
    pool *pl;
    struct mmp *port; /* matmul.h's mmp */
    /* MM_AUTO: the peak probe's kernel runs until the model's own products
     * have been seen (rec) and timed (train_mm_settle) */
    int deciding;
    uint64_t key;
    mm_shapes *rec;
    mm_choice choice;
    int chosen;   /* choice is filled */
    double attn_s;   /* attention's wall seconds on this context, summed */
    mmb_round_fn round16;   /* train_mmb_rounder's choice, asked once */
};

#endif
