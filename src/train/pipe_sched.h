/* Pipeline schedules as data: for each rank of a pipeline, the ordered list
 * of what it does in one training step. One generator per schedule builds
 * the lists; a checker proves a list set complete and free of deadlock; a
 * timed replay of the same lists predicts step time, bubble and stash
 * (weft-sim pipeline, and the --pp-partition cost model).
 *
 * The model is cut into p*v chunks (virtual stages) of contiguous blocks;
 * rank r holds chunks r, r+p, r+2p, ... (v per rank; v = 1 except for the
 * interleaved schedule). Chunk c's activation goes to the rank holding
 * chunk c+1 and its input gradient to the rank holding chunk c-1.
 *
 * Executor semantics the checker assumes (and pipe_exec keeps):
 *  - SEND_* posts a non-blocking send and never waits (the receiver's
 *    engine buffers it);
 *  - RECV_* posts a non-blocking receive; the first compute action that
 *    needs its data waits for it;
 *  - every message of one step has its own tag (pipe_tag), so sends and
 *    receives match whatever order the engine sees them in. */
#ifndef TRAIN_PIPE_SCHED_H
#define TRAIN_PIPE_SCHED_H

#include <stddef.h>

#include "train/pipe_types.h"

typedef struct {
    pipe_spec spec;
    pipe_list *rank;    /* [p] */
} pipe_sched;

/* "gpipe", "1f1b", "interleaved:V" (V >= 2), "zb"; p and m are the
 * caller's. Returns 0 or WEFT_EINVAL. */
int pipe_spec_parse(const char *name, int p, int m, pipe_spec *out);
/* The name back, as pipe_spec_parse reads it. */
void pipe_spec_name(const pipe_spec *s, char *buf, size_t len);

/* Builds every rank's list. WEFT_EINVAL for a spec the schedule cannot
 * take (the interleaved one needs m to be a multiple of p, as Megatron's). */
int pipe_sched_build(pipe_sched *s, const pipe_spec *spec);
void pipe_sched_free(pipe_sched *s);

/* The rank holding a chunk, and the tag of a message (unique in a step). */
int pipe_chunk_rank(const pipe_spec *s, int chunk);
int pipe_tag(const pipe_spec *s, int op, int chunk, int mb);

/* Proves the lists complete (each chunk's forward and backward of every
 * micro-batch exactly once on its rank, backward after forward, W after
 * B, every receive matched by one send and every input received before
 * it is used) and free of deadlock under the executor's semantics.
 * Returns 0, or WEFT_EINVAL with the first fault in why. */
int pipe_sched_check(const pipe_sched *s, char *why, size_t len);

/* Costs of one micro-batch for the timed replay, per global chunk. */
typedef struct {
    const double *fwd, *bwd_i, *bwd_w;  /* seconds; BWD costs bwd_i + bwd_w */
    const double *act_bytes;            /* bytes sent forward (and back) at each chunk's output */
    double latency, bandwidth;          /* link: seconds, bytes per second */
} pipe_costs;

typedef struct {
    double step;        /* seconds: the step, from the first start to the last end */
    double *busy;       /* [p] seconds of compute per rank */
    double *bubble;     /* [p] idle fraction (step - busy) / step per rank */
    int *peak_stash;    /* [p] most micro-batches stashed at once per rank
                           (forward done, backward not yet complete) */
} pipe_result;

/* Replays the lists with those costs; r's arrays have p entries and are
 * the caller's. Returns WEFT_EINVAL on a deadlock (pipe_sched_check
 * first). */
int pipe_sched_replay(const pipe_sched *s, const pipe_costs *c, pipe_result *r);

/* Writes a reason into why (when given) and returns WEFT_EINVAL: the one
 * way the pipeline code reports a refusal. */
int pipe_fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "FWD", "SEND_ACT", ...; "?" for anything else. */
const char *pipe_op_name(int op);
/* The most micro-batches each global chunk stashes at once (forward done,
 * backward not complete), from the lists' order alone: peak has p*v
 * entries. For the partition's memory cap, which is per chunk. Returns 0
 * or WEFT_EINVAL (lists that pipe_sched_check refuses). */
int pipe_sched_chunk_stash(const pipe_sched *s, int *peak);

#endif
