/* --elastic (run_elastic.c): data-parallel training that outlives a dead
 * rank and takes in new ones; with --pp/--tp a replica lost is dropped.
 *
 * The step loop asks elastic_boundary before each step and
 * elastic_recover after a failed one; both answer with an elastic_outcome
 * or a negative WEFT_E* code (the run cannot go on; run_fail has recorded
 * why). */
#ifndef WEFT_RUN_RUN_ELASTIC_H
#define WEFT_RUN_RUN_ELASTIC_H

#include "run/run_int.h"

typedef enum {
    ELASTIC_NONE = 0,  /* boundary: nothing changed, take the step. recover: not
                        * elastic, the step's failure stands (run_step_failed) */
    ELASTIC_RELOAD = 1, /* boundary: joiners came in: the step's batch is loaded
                        * again (the ranks' parts changed), then the step is taken */
    ELASTIC_AGAIN = 2,  /* a failure was recovered from: no step was taken; the
                        * loop goes on from *step, its batch loaded again
                        * (WEFT_RUN_RECOVERED) */
    ELASTIC_LEFT = 3,   /* recover: this rank's replica is broken and it left the
                        * job (training state closed, t->job NULL); the others
                        * finish the run (WEFT_RUN_LEFT) */
    ELASTIC_REJOIN = 4  /* hier across clusters: this rank's cluster lost a rank,
                        * so this one left too, as a failed rank: the process
                        * ends with status ELASTIC_REJOIN_STATUS (EX_TEMPFAIL)
                        * for a launcher that restarts the cluster whole
                        * (weftrun --restarts). Either function may return it. */
} elastic_outcome;

#define ELASTIC_REJOIN_STATUS 75

/* --kill-at and --trace-samples, the test hooks: 1 taken, 0 not one of
 * them, WEFT_EINVAL with the message in err. */
int elastic_option(opts *o, const char *key, const char *v, char *err, size_t cap);
/* Refuses what a membership change cannot carry (the sync mode's own
 * refusals included); nothing without --elastic. */
int elastic_check(weft_run *t, const opts *o, weft_comm *comm);
/* After the run's set-up: a joiner takes the members' state here (*step:
 * where it goes on from); quiet: as configured. */
int elastic_open(weft_run *t, long *step, int quiet, int joined);
/* Before each step: admits waiting joiners. ELASTIC_NONE, ELASTIC_RELOAD,
 * ELASTIC_AGAIN (a failure there, recovered from: the step starts again
 * from *step), ELASTIC_REJOIN, or < 0. */
int elastic_boundary(weft_run *t, long *step);
/* After a failed step (rc its code): ELASTIC_NONE (not elastic),
 * ELASTIC_AGAIN (the survivors go on from *step), ELASTIC_LEFT,
 * ELASTIC_REJOIN, or < 0. */
int elastic_recover(weft_run *t, long *step, int rc);
/* A step's samples as they are committed (--trace-samples). */
int elastic_trace(weft_run *t, long step, const weft_batch *b);
/* The traced step is written when next lies past it, else dropped. */
void elastic_commit(weft_run *t, long next);
/* After a step that went through: ZeRO 1-3 copy their shards (a failure
 * there is the step's: elastic_recover next), and the traced step is
 * written. */
int elastic_step_done(weft_run *t, long step);
void elastic_close(weft_run *t);

/* ---- shared with run_elastic_churn.c ------------------------------------ */

/* The test hook: this launch rank dies here, as kill -9 would kill it. */
void kill_point(const weft_run *t, long step, int recover);
/* Parameters and optimiser state, kept while the training state is rebuilt. */
int keep_state(weft_run *t);
/* Ends the training state on the communicator in use and destroys it. */
void leave_comm(weft_run *t);
/* The training state over c (the data-parallel group of job), with the
 * kept state restored. */
int enter_comm(weft_run *t, weft_comm *c, weft_comm *job);
/* What the members agree on besides the state: step k, the optimiser's
 * step count, the stream position of step k, the launch's shape, and the
 * number of the membership view that starts. */
void header(const weft_run *t, long k, int64_t opt_steps, int64_t h[6]);
/* Each rank's part of the stream from step h[0] on; *step = h[0]. */
int apply_header(weft_run *t, const int64_t h[6], long *step);
/* Whether every rank's parameters are bit-identical (a hash of their
 * bytes compared over c); *hash: this rank's. */
int params_agree(weft_run *t, uint64_t *hash, int *same);
int params_same(weft_comm *c, weft_model *m, uint64_t *hash, int *same);
/* Rank 0 of a new world speaks for the job from here on. */
int take_lead(weft_run *t);
void report_change(weft_run *t, long step, const char *kind, const char *what, double took);
/* "rank(s) 1 3 of 4 gone (why at step k)": the length written. */
size_t gone_ranks(char *what, size_t cap, const int *olds, int n, int was, const char *why,
                  long failed_at);
/* A round of a recovery: the survivors of *w agree on who is left, *w
 * becomes their communicator of *n and olds their ranks before the
 * failure. Returns < 0 when they cannot agree (the run fails); *round:
 * the round's own failure (a death during it: another round). */
int shrink_round(weft_run *t, weft_comm **w, long failed_at, int old, int *olds, int *n,
                 int *round);
/* A failure that took nobody must not repeat for ever at one step: < 0
 * on the third in a row. */
int count_idle(weft_run *t, int lost_none, long failed_at, const char *why);

#endif
