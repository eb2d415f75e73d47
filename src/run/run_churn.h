/* Elastic training across clusters: --elastic with --sync diloco:H or
 * hier:full/diloco:H. run_sync_churn.c is the sync mode (the outer step on
 * an outer_sync the run holds, so that its state outlives a membership
 * change); run_elastic_churn.c drops a cluster lost mid-outer-step and
 * admits a restarted one at an outer-step boundary. This header is the
 * mode's: its state and what the membership change asks of it. */
#ifndef WEFT_RUN_RUN_CHURN_H
#define WEFT_RUN_RUN_CHURN_H

#include "run/run_int.h"

#include "train/sync_outer.h"

/* the clusters a share is kept for: run_shares.h's SHARES_MAX, which
 * run_elastic_shares.c checks it against (run_shares.c includes this
 * header, so this one does not include that) */
enum { CHURN_SHARES = 64 };

struct sync_churn {
    outer_sync *outer;
    long steps;  /* inner steps since the launch: the outer steps' clock */
    int period;  /* H now: the launch's until weft-cpn run re-plans it */
    long from;   /* the step of the last outer step (the period's start) */
    long outers; /* outer steps taken, the launch's and the joiners' alike */
    long since;  /* the step the period now took effect at (0: the launch's) */
    /* the batch shares held (run_elastic_shares.c): by cluster (all 0: an
     * even split), the re-plan they came from (0: the launch's), and
     * those a re-plan changed at an outer step, the last at shares_step */
    long share[CHURN_SHARES], shares_gen, shares_step;
    int shares_taken;
    weft_model *m;
};

/* DiLoCo's inner optimiser (run_sync_params.c) */
void sync_diloco_defaults(opts *o);

/* The outer state that a membership change carries: anchors, momenta and
 * the period's clock (churn_floats of them) and the counters cnt =
 * { steps, synced }. */
size_t churn_floats(const train_sync *s);
void churn_export(const train_sync *s, float *buf, int64_t cnt[2]);
void churn_import(train_sync *s, const float *buf, const int64_t cnt[2]);
/* Whether the next step starts an outer period (joiners come in there),
 * or this one's outer step is due and was not taken (it failed). */
int churn_boundary(const train_sync *s);
/* --progress: whether the next step ends with an outer step, and how many
 * have been taken. */
int churn_outer_next(const train_sync *s);
long churn_outers(const train_sync *s);
/* This step's outer step, over the ranks present now (after a shrink; a
 * joiner at weight 0), this rank's pseudo-gradient weighed (outer_weigh),
 * and the period agreed after it, as after every outer step. */
int churn_outer_now(train_sync *s, float weight);
/* Aborts the mode's own communicators before the state is closed. */
void churn_abort(train_sync *s);
/* hier: the ranks of a cluster (the most of any cluster in c); 0 flat. */
int churn_cluster_size(const train_sync *s, weft_comm *c);

#endif
