/* ZeRO's engine state, shared by zero.c (the steps) and zero_elastic.c
 * (the shard replicas that outlive a rank). Internal to train/. */
#ifndef WEFT_TRAIN_ZERO_IMPL_H
#define WEFT_TRAIN_ZERO_IMPL_H

#include "weft.h"

typedef struct {
    size_t lo, n;          /* elements of the flat buffer */
    size_t S, tail;        /* per-rank count; the last rank's extra */
    size_t mlo, mcnt;      /* this rank's part: [mlo, mlo + mcnt) */
    int ntensors, ready;
    weft_optim *opt;       /* state for this rank's part (stages 1-3); NULL if empty */
    weft_request *req[2];  /* reduce-scatter, tail all-reduce */
    int refs, state;       /* stage 3 layer by layer: readers, PARAMS_* */
    weft_request *greq[2]; /* its parameters' all-gather, tail broadcast */
    int experts;           /* divided experts' tensors (moe_split.h): whole at stage 1,
                            * sharded over their replicas at stages 2-3 */
    weft_comm *comm;       /* what the bucket is sharded and reduced over: the engine's
                            * group, or the experts' replicas; NULL: not sharded */
    int world, rank;       /* in comm (1 and 0 without) */
    float gscale;          /* the replicas' share of the average (1 for the others) */
} zbucket;

enum { PARAMS_RELEASED, PARAMS_INFLIGHT, PARAMS_PRESENT };

struct weft_zero {
    weft_comm *comm;       /* NULL: one process */
    weft_model *model;
    weft_optim *opt;       /* stage 0: state for [0, n) */
    weft_dp *dp;           /* stages 0 and 1: bucketed all-reduce */
    zbucket *b;
    int nb, *bucket_of;    /* tensor index -> bucket */
    int next_launch;       /* stages 2-3: first bucket not yet launched */
    int err;               /* a launch that failed inside backward */
    int stage, rank, world;
    size_t n;
    float scale;           /* weight of the accumulated gradient */
    int hold;              /* a non-final micro-step: launch nothing */
    int prev_micro;        /* samples in the previous micro-step, 0 at a step's start */
    int gathered;          /* stage 3: the full parameter buffer is valid */
    double wait_s;         /* time weft_zero_step spent waiting on communication */
    weft_comm *norm_comm[2]; /* the norm also sums over these (stages, tensor ranks) */
    unsigned char *skip;   /* per tensor: another rank counts it (a tied copy, a replica) */
    int layerwise;         /* stage 3: gather and release block by block */
    int *order[2];         /* buckets in the order needed: this step's, the last one's */
    int olen[2], ocap, opos;
    int rs_released;       /* buckets below this had their gradients released */
    size_t peak;           /* most bytes of the two flat buffers resident during a step */
    weft_zero_replicas *rep; /* stages 1-3 under --elastic: the shards' copies */
};

/* The replicas' part of weft_zero_destroy. */
void train_zero_replicas_drop(weft_zero *z);

/* Starts bucket b's parameter gather (its shards all-gathered in place,
 * the last rank's tail broadcast) and marks it in flight. */
int train_zero_gather_launch(weft_zero *z, zbucket *b);

#endif
