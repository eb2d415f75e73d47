/* A ZeRO engine's optimiser state over a rank's whole flat buffer
 * (zero.c), for a save that assembles the model itself (the divided
 * experts' under --ep, run_ep_save.c). */
#ifndef WEFT_TRAIN_ZERO_FULL_H
#define WEFT_TRAIN_ZERO_FULL_H

#include "weft.h"

/* Collective over z's group: rank 0 gets *out, a new optimiser over
 * [0, n) of its flat buffer with every shard's state (the other ranks
 * NULL). Buckets of divided experts are rank 0's own at stage 1; at
 * stages 2-3, sharded over their replicas, they are not gathered here
 * (WEFT_ENOTSUP). */
int train_zero_full_optim(weft_zero *z, weft_optim **out);

/* State i of element off of this rank's flat buffer when this rank holds
 * it (stage 0, or its shard, or a divided experts' bucket), else NULL. */
float *train_zero_state_at(weft_zero *z, int i, size_t off);

#endif
