/* --elastic across clusters (--sync diloco:H, hier:full/diloco:H; docs/WAN.md,
 * "Churn: a cluster lost and rejoined").
 *
 * Between outer steps the clusters do not talk, so a cluster that dies or
 * is cut off mid-outer-step is found by the next outer all-reduce (hier:
 * on the communicator of each local index). Every survivor leaves the
 * step there, shrinks the job and goes on without restart: its own
 * parameters and inner optimiser state, the outer state that every rank
 * shares (anchor, Nesterov momentum, the step clock) carried over to an
 * outer step over the new job. A rank whose outer all-reduce returned had
 * every rank's pseudo-gradient in it, so when one did, its result stands
 * and it hands it to the others; else the outer step is taken again over
 * the ranks present, whose mean divides by the ranks (hier: clusters)
 * there, not by the launch's: the lost cluster's inner steps since the
 * last outer step are dropped, and its part of the global batch goes to
 * the survivors from the next step on. hier keeps whole clusters: the
 * survivors of a cluster that lost only some of its ranks leave the job
 * as failed ranks (ELASTIC_REJOIN: the process ends with status
 * ELASTIC_REJOIN_STATUS), so that weftrun --restarts starts the cluster
 * again whole.
 *
 * A restarted cluster (weftrun --restarts) is admitted by the grow at the
 * next outer-step boundary, the only steps where the members grow, and
 * there every member holds the anchor: the joiners take rank 0's
 * parameters, outer state, optimiser step count and inner optimiser state,
 * so the cluster goes on from the job's state. */
#include "run/run_elastic_churn.h"

#include "run/run_churn.h"
#include "run/run_elastic_late.h"
#include "run/run_elastic_member.h"
#include "run/run_elastic_shares.h"
#include "run/run_sync.h"

#include "core/clock.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Whether cluster k has a rank in c. */
static int has_cluster(weft_comm *c, int k)
{
    for (int r = 0, n = c ? weft_comm_size(c) : 0; r < n; r++)
        if (weft_comm_cluster_of(c, r) == k)
            return 1;
    return 0;
}

/* At an outer-step boundary (members) or on joining: rank 0's header,
 * outer state and step clock for every rank, and for the joiners its
 * inner optimiser state. The parameters need nothing: churn_open
 * broadcast rank 0's, and every member holds the anchor here. */
static int boundary_hand_over(weft_run *t, int joiner, long k, const int64_t cnt[2],
                              float *outer, long *step)
{
    int64_t h[8];
    size_t n;
    weft_model_params(t->m, &n);
    member_header(t, k, weft_optim_steps(t->opt), h);
    h[6] = cnt[0];
    h[7] = cnt[1];
    int rc = weft_broadcast(t->comm, h, 8, WEFT_I64, 0);
    if (rc == 0)
        rc = weft_broadcast(t->comm, outer, churn_floats(&t->sync), WEFT_F32, 0);
    float *spare = joiner || t->rank == 0 ? NULL : malloc(n * sizeof *spare);
    if (rc == 0 && !joiner && t->rank != 0 && !spare)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < weft_optim_state_count(t->opt); i++)
        rc = weft_broadcast(t->comm, spare ? spare : weft_optim_state(t->opt, i, NULL), n,
                            WEFT_F32, 0);
    free(spare);
    if (rc)
        return rc;
    weft_optim_set_steps(t->opt, h[1]);
    churn_import(&t->sync, outer, h + 6);
    rc = member_apply_header(t, h, step);
    return rc ? rc : shares_change(t, *step);
}

static int outer_buf(weft_run *t, float **out)
{
    *out = malloc(churn_floats(&t->sync) * sizeof **out);
    return *out ? 0 : run_fail(t, WEFT_ENOMEM, "out of memory");
}

int churn_grow_hand_over(weft_run *t, weft_comm *g, long *step)
{
    if (late_wanted(t))
        return late_grow(t, g, step);
    float *outer;
    int64_t cnt[2];
    int rc = outer_buf(t, &outer);
    if (rc)
        return rc;
    churn_export(&t->sync, outer, cnt);
    if ((rc = member_keep_state(t))) {
        free(outer);
        return rc;
    }
    member_leave_comm(t);
    rc = member_enter_comm(t, g, g);
    if (rc == 0)
        rc = boundary_hand_over(t, 0, *step, cnt, outer, step);
    free(outer);
    return rc;
}

int churn_join(weft_run *t, long *step)
{
    if (t->sync.comm != t->comm) { /* churn_open waited for the cluster's other ranks */
        t->comm = t->job = t->sync.comm;
        t->rank = weft_comm_rank(t->comm);
        t->world = weft_comm_size(t->comm);
    }
    if (late_wanted(t))
        return late_join(t, step);
    float *outer;
    int64_t cnt[2] = { 0, 0 };
    int rc = outer_buf(t, &outer);
    if (rc)
        return rc;
    rc = boundary_hand_over(t, 1, -1, cnt, outer, step);
    free(outer);
    return rc;
}

/* After the shrink: the survivors agree on the outer state (see the top).
 * next: the step to go on from; cnt: this rank's { steps, synced }. A
 * rank that failed earlier, in the grow at the period's start (another
 * saw its broadcast through), took none of the period's inner steps: it
 * is left out of the outer step, which is the mean over the ranks that
 * took them (*behind: how many did not), and goes on from the others'
 * step and learning-rate schedule. */
static int resume(weft_run *t, float *outer, const int64_t cnt[2], long next, long *step,
                  int *behind)
{
    train_sync *s = &t->sync;
    int64_t most = cnt[1], h[8];
    int me, root, rc;
    size_t n;
    float *p = weft_model_params(t->m, &n);
    if ((rc = weft_allreduce(t->comm, &most, &most, 1, WEFT_I64, WEFT_MAX)))
        return rc;
    me = cnt[1] == most ? t->rank : INT_MAX;
    if ((rc = weft_allreduce(t->comm, &me, &root, 1, WEFT_I32, WEFT_MIN)))
        return rc;
    member_header(t, next, weft_optim_steps(t->opt), h);
    h[6] = cnt[0];
    h[7] = cnt[1];
    if ((rc = weft_broadcast(t->comm, h, 8, WEFT_I64, root)) ||
        (rc = weft_broadcast(t->comm, outer, churn_floats(s), WEFT_F32, root)))
        return rc;
    churn_import(s, outer, h + 6);
    int32_t took = cnt[0] == h[6], tookn = 1;
    if (h[7] == h[6]) { /* the outer step went through on root: its result */
        memcpy(p, outer, n * sizeof *p);
    } else if (churn_boundary(s)) { /* the outer step of the ranks present, taken again */
        if ((rc = weft_allreduce(t->comm, &took, &tookn, 1, WEFT_I32, WEFT_SUM)) ||
            (rc = churn_outer_now(s, took ? (float)t->world / (float)tookn : 0.0f)))
            return rc;
        *behind = t->world - tookn;
    }
    if (!took)
        weft_optim_set_steps(t->opt, h[1]);
    rc = member_apply_header(t, h, step);
    return rc ? rc : shares_change(t, *step);
}

/* hier: a cluster that lost a rank leaves whole (*whole = 0 here); the
 * whole ones split off a job of themselves, *w. */
static int keep_whole(weft_comm **w, int L, int *whole)
{
    int me = weft_comm_rank(*w), k = weft_comm_cluster_of(*w, me), mates = 0;
    for (int r = 0, n = weft_comm_size(*w); r < n; r++)
        mates += weft_comm_cluster_of(*w, r) == k;
    *whole = mates == L;
    weft_comm *mine = NULL;
    int rc = weft_comm_split(*w, *whole ? 0 : -1, me, &mine);
    if (rc)
        return rc;
    weft_comm_destroy(*w); /* the leavers take part in its last barrier */
    *w = mine;
    return 0;
}

/* "rank(s) 2 3 of 6 gone (...); cluster(s) 1 dropped; the outer step over
 * 2 cluster(s)": what the lead reports. */
static void describe(const weft_run *t, const int *olds, int n, int was, const int *cl0,
                     const char *why, long failed_at, int behind, char *what, size_t cap)
{
    size_t len = member_gone_ranks(what, cap, olds, n, was, why, failed_at);
    int dropped = 0;
    for (int q = 0; q < was; q++) {
        int first = 1;
        for (int r = 0; r < q && first; r++)
            first = cl0[r] != cl0[q];
        if (!first || has_cluster(t->comm, cl0[q]) || len >= cap)
            continue;
        len += (size_t)snprintf(what + len, cap - len, "%s %d", dropped++ ? "," : "; cluster",
                                cl0[q]);
    }
    if (len < cap)
        len += (size_t)snprintf(what + len, cap - len, "%s; outer steps over %d cluster(s)",
                                dropped ? " dropped" : "", weft_comm_cluster_count(t->comm));
    if (behind && len < cap)
        snprintf(what + len, cap - len, " (this one without %d rank(s) that failed at the "
                 "period's start)", behind);
}

/* The survivors of the shrink, rounds until one sees no death; hier: only
 * whole clusters (*whole = 0: this rank's is not). t->comm becomes theirs. */
static int churn_survivors(weft_run *t, long failed_at, int L, int *olds, int *n, int *whole,
                           int rc)
{
    weft_comm *w = t->comm;
    int old = t->rank, frc = 0;
    while (rc && frc == 0) { /* a death during the recovery: shrink what it left */
        frc = member_shrink_round(t, &w, failed_at, old, olds, n, &rc);
        if (frc == 0 && rc == 0 && L)
            rc = keep_whole(&w, L, whole);
    }
    t->comm = t->job = w;
    return frc;
}

/* The state the survivors carry: this rank's own and the outer state. */
static int churn_leave_step(weft_run *t, float **outer, int64_t cnt[2])
{
    int rc = outer_buf(t, outer);
    if (rc)
        return rc;
    churn_export(&t->sync, *outer, cnt);
    if ((rc = member_keep_state(t)))
        return rc;
    /* peers still in one of the mode's communicators fail at once */
    churn_abort(&t->sync);
    sync_close(&t->sync);
    t->opt = NULL;
    return 0;
}

int churn_recover(weft_run *t, long *step, int rc)
{
    elastic_state *e = &t->el;
    double t0 = clock_now();
    long failed_at = *step, next = *step + (weft_optim_steps(t->opt) > e->opt_steps0);
    int was = t->world, old = t->rank, L = churn_cluster_size(&t->sync, t->comm), whole = 1;
    int n = was, behind = 0, frc;
    char why[160];
    snprintf(why, sizeof why, "%s", weft_strerror(rc));
    int *olds = calloc((size_t)was, sizeof *olds), *cl0 = calloc((size_t)was, sizeof *cl0);
    float *outer = NULL;
    int64_t cnt[2];
    if (!olds || !cl0) {
        free(olds);
        free(cl0);
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    }
    for (int r = 0; r < was; r++)
        cl0[r] = weft_comm_cluster_of(t->comm, r);
    late_drop(t); /* joiners catching up fail with the step: a launcher starts them again */
    frc = churn_leave_step(t, &outer, cnt);
    if (frc == 0)
        frc = churn_survivors(t, failed_at, L, olds, &n, &whole, rc);
    if (frc == 0 && !whole) {
        /* as a failure, so that a launcher that restarts the dead
         * (weftrun --restarts) restarts the cluster whole */
        run_say(t, WEFT_RUN_OUT,
                "elastic: rank %d leaves: its cluster %d lost rank(s) (step %ld, %s); exit "
                "status %d, to be started again with them\n", old, cl0[old], failed_at, why,
                ELASTIC_REJOIN_STATUS);
        frc = ELASTIC_REJOIN;
    }
    if (frc == 0 && (rc = member_enter_comm(t, t->comm, t->comm)) == 0)
        rc = resume(t, outer, cnt, next, step, &behind);
    if (frc == 0 && rc)
        frc = run_fail(t, rc, "elastic: step %ld: a rank failed while the survivors took up the "
                       "outer step (%s): %s", failed_at, weft_strerror(rc),
                       weft_comm_error(t->comm));
    if (frc == 0)
        frc = member_take_lead(t);
    if (frc == 0)
        frc = member_count_idle(t, n == was, failed_at, why);
    if (frc == 0) {
        char what[320];
        describe(t, olds, n, was, cl0, why, failed_at, behind, what, sizeof what);
        member_report_change(t, *step, "shrink", what, clock_now() - t0);
    }
    free(olds);
    free(cl0);
    free(outer);
    return frc ? frc : ELASTIC_AGAIN;
}
