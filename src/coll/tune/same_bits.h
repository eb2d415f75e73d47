/* Which algorithms give a collective the same bits. A floating-point
 * reduction's result depends on the order its terms are combined in, and
 * most algorithms have an order of their own (the ring starts each chunk
 * at another rank, recursive doubling pairs ranks by distance, direct
 * starts each slice at its owner). When auto times candidates and keeps
 * the fastest, the bits of every later call follow whichever won on the
 * clock; so unless WEFT_AUTO_FASTEST=1, a trial runs only candidates that
 * give the model's pick's bits (coll/tune/tuner.c). docs/TUNING.md,
 * "Reproducible results", states the guarantee and its limits. */
#ifndef WEFT_COLL_SAME_BITS_H
#define WEFT_COLL_SAME_BITS_H

#include "weft.h"

#include <stdint.h>

/* 1 when algorithms a and b give every rank the same bits for collective
 * kind on nranks ranks, for every call of up to most bytes (count *
 * element size, as the tuner takes it), whatever the dtype, op and data
 * (NaN payloads aside); 0 when they may differ. Only reductions can
 * differ: the other collectives move bytes unchanged. Conservative: 0
 * unless known. */
int tune_same_bits(weft_algo a, weft_algo b, weft_coll_kind kind, int nranks, uint64_t most);

#endif
