/* The mixture-of-experts layer's records (moe.h, moe_ep.h, moe_experts.h
 * share them): its sizes, its forward record, backward's scratch, what a
 * forward counted. */
#ifndef TRAIN_MOE_TYPES_H
#define TRAIN_MOE_TYPES_H

#include <stdint.h>

typedef struct moe_ep moe_ep;

typedef struct {
    int N, D, E, K, F;  /* tokens, model width, experts, picked per token, expert width */
    int cap;            /* tokens an expert takes at most (N: none dropped) */
    int sigmoid;        /* scores: 0 softmax, 1 sigmoid */
    float aux, z;       /* the balancing losses' weights */
    moe_ep *ep;         /* expert parallelism (moe_ep.h); NULL: every expert here */
    int gelu;           /* experts: 0 SwiGLU (gate|up [2F,D], down [D,F]), 1 GELU (the
                         * GPT's: fc [F,D], proj stored hidden-major [F,D]) */
} moe_dims;

/* One layer's forward record, kept for backward. Rows of the gathered
 * buffers are grouped by expert (expert e's from start[e]), each group in
 * token order. */
typedef struct {
    float *logits, *score;   /* [N,E]: router logits; softmax or sigmoid */
    int32_t *sel;            /* [N,K]: experts picked, best first */
    int32_t *row;            /* [N,K]: its gathered row, -1 when dropped */
    float *gate;             /* [N,K]: combine weights */
    int32_t *start;          /* [E+1] */
    int32_t *picks;          /* [E]: tokens that picked each expert (before capacity) */
    int32_t *tok;            /* [N*K]: gathered row -> token */
    float *xe, *gu, *h, *ye; /* gathered rows: input [D], gate|up [2F] (GELU: fc [F] of
                              * them), SwiGLU or GELU [F], output [D] */
} moe_acts;


/* Backward's scratch, shared by the layers. */
typedef struct {
    float *dye, *dh, *dgu, *dxe; /* gathered rows */
    float *dsc, *dg;             /* [N,E] score gradients, [N,K] gate gradients */
} moe_scratch;

/* What one forward counted. */
typedef struct {
    int64_t routed, dropped;  /* token-expert pairs picked, and of them past capacity */
    double aux, z;                      /* the unweighted losses */
} moe_count;

#endif
