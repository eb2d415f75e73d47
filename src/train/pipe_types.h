/* The data of a pipeline schedule (train/pipe_sched.h): actions, lists of
 * them and the spec a schedule is built from, apart from the functions,
 * so that the generators (train/pipe_gen.h) can share the types without
 * the builder that calls them. */
#ifndef TRAIN_PIPE_TYPES_H
#define TRAIN_PIPE_TYPES_H

#include <stdint.h>

typedef enum {
    PIPE_FWD = 1,       /* forward of (chunk, mb); stashes its activations */
    PIPE_BWD,           /* full backward: input and weight gradients */
    PIPE_BWD_I,         /* backward for the input only (zero-bubble B) */
    PIPE_BWD_W,         /* backward for the weights only (zero-bubble W) */
    PIPE_SEND_ACT,      /* chunk's output of mb to the next chunk's rank */
    PIPE_RECV_ACT,      /* chunk's input of mb from the previous chunk's rank */
    PIPE_SEND_GRAD,     /* chunk's input gradient of mb to the previous chunk's rank */
    PIPE_RECV_GRAD,     /* chunk's output gradient of mb from the next chunk's rank */
} pipe_op;

typedef struct {
    uint8_t op;         /* pipe_op */
    int16_t chunk;      /* global chunk index 0 .. p*v-1 */
    int32_t mb;         /* micro-batch 0 .. m-1 */
    int32_t peer;       /* send/recv: the other rank; -1 for compute */
} pipe_action;

typedef enum { PIPE_GPIPE = 1, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZB } pipe_kind;

typedef struct {
    int kind;           /* pipe_kind */
    int p;              /* ranks in the pipeline, >= 1 */
    int m;              /* micro-batches per step, >= 1 */
    int v;              /* chunks per rank: 1, or >= 2 for interleaved */
} pipe_spec;

typedef struct {
    pipe_action *a;
    int n, cap;
} pipe_list;

#endif
