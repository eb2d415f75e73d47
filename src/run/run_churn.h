/* Elastic training across clusters: --elastic with --sync diloco:H or
 * hier:full/diloco:H. sync_churn.c is the sync mode (the outer step on an
 * outer_sync the tool holds, so that its state outlives a membership
 * change); elastic_churn.c drops a cluster lost mid-outer-step and admits
 * a restarted one at an outer-step boundary. The part of elastic.c that
 * elastic_churn.c shares is declared here too. */
#ifndef WEFT_TRAIN_CHURN_H
#define WEFT_TRAIN_CHURN_H

#include "train_tool.h"

#include "train/sync_outer.h"

struct sync_churn {
    outer_sync *outer;
    long steps;  /* inner steps since the launch: the outer steps' clock */
    int period;  /* H */
    weft_model *m;
};

/* The exit status of the survivors of a hier cluster that lost a rank
 * (EX_TEMPFAIL: a launcher may start them again). */
#define CHURN_LEAVE 75

extern const sync_ops sync_churn;
/* DiLoCo's inner optimiser (sync_params.c) */
void sync_diloco_defaults(opts *o);

/* The outer state that a membership change carries: anchors and momenta
 * (churn_floats of them) and the counters cnt = { steps, synced }. */
size_t churn_floats(const train_sync *s);
void churn_export(const train_sync *s, float *buf, int64_t cnt[2]);
void churn_import(train_sync *s, const float *buf, const int64_t cnt[2]);
/* Whether the next step starts an outer period (joiners come in there). */
int churn_boundary(const train_sync *s);
/* This step's outer step, over the ranks present now (after a shrink),
 * this rank's pseudo-gradient weighed (outer_weigh). */
int churn_outer_now(train_sync *s, float weight);
/* Aborts the mode's own communicators before the state is closed. */
void churn_abort(train_sync *s);
/* hier: the ranks of a cluster (the most of any cluster in c); 0 flat. */
int churn_cluster_size(const train_sync *s, weft_comm *c);

/* elastic_churn.c, called by elastic.c in the churn mode */
int churn_recover(trainer *t, long *step, int rc);
int churn_grow_hand_over(trainer *t, weft_comm *g, long *step);
int churn_join(trainer *t, long *step);
/* "cluster(s) 1 rejoined; " for ranks was.. of the grown job from clusters it lacked */
void churn_joined(const trainer *t, int was, char *buf, size_t cap);

/* elastic.c's, for elastic_churn.c */
void kill_point(const trainer *t, long step, int recover);
void keep_state(trainer *t);
void leave_comm(trainer *t);
int enter_comm(trainer *t, weft_comm *c, weft_comm *job);
void header(const trainer *t, long k, int64_t opt_steps, int64_t h[6]);
void apply_header(trainer *t, const int64_t h[6], long *step);
int params_agree(trainer *t, uint64_t *hash, int *same);
int params_same(weft_comm *c, weft_model *m, uint64_t *hash, int *same);
void take_lead(trainer *t);
void report_change(trainer *t, long step, const char *kind, const char *what, double took);
size_t gone_ranks(char *what, size_t cap, const int *olds, int n, int was, const char *why,
                  long failed_at);
int shrink_round(trainer *t, weft_comm **w, long failed_at, int old, int *olds, int *n);
void count_idle(elastic_state *e, int lost_none, long failed_at, const char *why);

#endif
