/* A membership change's parts (run_elastic_member.c) that the recoveries
 * of run_elastic.c and of the churn mode (run_elastic_churn.c) share. */
#ifndef WEFT_RUN_RUN_ELASTIC_MEMBER_H
#define WEFT_RUN_RUN_ELASTIC_MEMBER_H

#include "run/run_int.h"

/* Parameters and optimiser state, kept while the training state is rebuilt. */
int member_keep_state(weft_run *t);
/* Ends the training state on the communicator in use and destroys it. */
void member_leave_comm(weft_run *t);
/* The training state over c (the data-parallel group of job), with the
 * kept state restored. */
int member_enter_comm(weft_run *t, weft_comm *c, weft_comm *job);
/* What the members agree on besides the state: step k, the optimiser's
 * step count, the stream position of step k, the launch's shape, and the
 * number of the membership view that starts. */
void member_header(const weft_run *t, long k, int64_t opt_steps, int64_t h[6]);
/* Each rank's part of the stream from step h[0] on; *step = h[0]. */
int member_apply_header(weft_run *t, const int64_t h[6], long *step);
/* Whether every rank's parameters are bit-identical (a hash of their
 * bytes compared over c); *hash: this rank's. */
int member_params_agree(weft_run *t, uint64_t *hash, int *same);
int member_params_same(weft_comm *c, weft_model *m, uint64_t *hash, int *same);
/* Rank 0 of a new world speaks for the job from here on. */
int member_take_lead(weft_run *t);
void member_report_change(weft_run *t, long step, const char *kind, const char *what, double took);
/* "rank(s) 1 3 of 4 gone (why at step k)": the length written. */
size_t member_gone_ranks(char *what, size_t cap, const int *olds, int n, int was, const char *why,
                  long failed_at);
/* A round of a recovery: the survivors of *w agree on who is left, *w
 * becomes their communicator of *n and olds their ranks before the
 * failure. Returns < 0 when they cannot agree (the run fails); *round:
 * the round's own failure (a death during it: another round). */
int member_shrink_round(weft_run *t, weft_comm **w, long failed_at, int old, int *olds, int *n,
                 int *round);
/* A failure that took nobody must not repeat for ever at one step: < 0
 * on the third in a row. */
int member_count_idle(weft_run *t, int lost_none, long failed_at, const char *why);

/* "cluster K, ... rejoined; " for the clusters of ranks was.. that no
 * lower rank shares (empty when none): a report's words for a grow. */
void member_joined_clusters(const weft_run *t, int was, char *buf, size_t cap);

#endif
