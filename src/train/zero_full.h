/* A ZeRO engine's optimiser state over a rank's whole flat buffer
 * (zero.c), for a save that assembles the model itself (the divided
 * experts' under --ep, run_ep_save.c). */
#ifndef WEFT_TRAIN_ZERO_FULL_H
#define WEFT_TRAIN_ZERO_FULL_H

#include "weft.h"

/* Collective over z's group: rank 0 gets *out, a new optimiser over
 * [0, n) of its flat buffer with every shard's state (the other ranks
 * NULL). Buckets of divided experts are rank 0's own at stage 1; at
 * stages 2-3, sharded over their replicas, those of rank 0's experts are
 * gathered from its replicas, the others' left zero (each first holder
 * takes its own with train_zero_gather_range). */
int train_zero_full_optim(weft_zero *z, weft_optim **out);

/* Collective over the ranks [off, off + n) of the flat buffer is sharded
 * over (a range inside one bucket; at stage 0 or where not sharded, this
 * rank alone): the first of them gets optimiser state i of the range in
 * dst (may be NULL: the shards are taken and dropped). For a save that
 * assembles divided experts sharded over their replicas (ZeRO 2-3), one
 * tensor at a time, so no rank holds more than a tensor's extra. */
int train_zero_gather_range(weft_zero *z, int i, size_t off, size_t n, float *dst);

/* State i of element off of this rank's flat buffer when this rank holds
 * it (stage 0, or its shard, or a divided experts' bucket), else NULL. */
float *train_zero_state_at(weft_zero *z, int i, size_t off);

#endif
