/* The pipeline's timed replay with ranks that share cores: where a node
 * holds more ranks than cores, a rank computes at cores / (ranks computing
 * now) of a core, so a pipeline's compute slows while its stages overlap
 * and speeds up again in its bubbles (processor sharing, as the kernel's
 * fair scheduler gives out a core). train/pipe_check.c's replay takes
 * every rank to own a core; this one walks the same action lists. */
#ifndef WEFT_SIM_PIPE_SHARE_H
#define WEFT_SIM_PIPE_SHARE_H

#include "train/pipe_sched.h"

typedef struct {
    /* per global chunk, one micro-batch: work in seconds of a core of
     * its own (slowed by the sharing), and waits that hold no core (a
     * tensor-parallel collective's latency) */
    const double *fwd, *bwd_i, *bwd_w;
    const double *fwd_wait, *bwd_i_wait, *bwd_w_wait; /* NULL: none */
    const double *out_bytes;  /* each chunk's output: what crosses its cut */
    double latency, bandwidth; /* the stage link: seconds, bytes a second */
    double cores;             /* cores of the node; <= 0: a core a rank */
    double replicas;          /* ranks running each pipeline rank's list at
                                 the same time on the node (tp x dp copies) */
} pipe_share_costs;

/* Replays s's lists: r->step, and r->busy (seconds of work a rank, at a
 * core of its own), r->bubble and r->peak_stash as pipe_sched_replay's.
 * WEFT_EINVAL on a deadlock or bad arguments, WEFT_ENOMEM. */
int pipe_share_replay(const pipe_sched *s, const pipe_share_costs *c, pipe_result *r);

#endif
