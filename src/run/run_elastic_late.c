/* --elastic with --sync diloco:H (flat): a joiner comes in without holding
 * the others for the state it needs (docs/TRAINING.md, "Elastic training
 * across clusters").
 *
 * The members grow the job at the boundary of outer step k, as ever, but
 * hand nothing big over there: rank 0 posts the state of step k (anchor
 * theta_k, Nesterov momentum, its inner optimiser state) to each joiner as
 * point-to-point sends, which move on their own while every member takes
 * the inner steps of the next period on its own stream, as before the
 * grow. The joiner waits for that state alone, takes no inner step, and
 * meets the members at outer step k+1 with weight 0: its pseudo-gradient
 * is nothing, the members' weigh world/was each, so the mean is theirs,
 * and every rank applies the same update to the same anchor and momentum:
 * the joiner ends the outer step with the members' theta_{k+1}, bit for
 * bit. Only there is it admitted: the stream, the batch shares and the
 * lead's report are the new job's from step k+1 on. What the grow holds
 * the members for is the grow and a header; a state transfer slower than
 * a period holds them at outer step k+1 for the rest. */
#include "run/run_elastic_late.h"

#include "run/run_churn.h"
#include "run/run_data.h"
#include "run/run_elastic_member.h"
#include "run/run_elastic_shares.h"

#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

#define LATE_TAG 0x4a4f494e /* the state's sends to the joiners */

int late_wanted(const weft_run *t)
{
    return t->sync.churn && !t->sync.cfg.hier;
}

/* Anchor, momentum and rank 0's inner optimiser state: what a joiner
 * takes (floats). */
static size_t late_count(const weft_run *t)
{
    return churn_floats(&t->sync) +
           (size_t)weft_optim_state_count(t->opt) * t->nparams;
}

/* rank 0: the state of step k to each joiner (ranks was..world-1). */
static int serve(weft_run *t, const float *outer, int was)
{
    elastic_state *e = &t->el;
    size_t no = churn_floats(&t->sync), n = t->nparams, count = late_count(t);
    e->late_buf = malloc(count * sizeof *e->late_buf);
    e->late_req = calloc((size_t)(t->world - was), sizeof *e->late_req);
    if (!e->late_buf || !e->late_req)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    memcpy(e->late_buf, outer, no * sizeof *outer);
    for (int i = 0; i < weft_optim_state_count(t->opt); i++)
        memcpy(e->late_buf + no + (size_t)i * n, weft_optim_state(t->opt, i, NULL),
               n * sizeof *e->late_buf);
    for (int r = was; r < t->world; r++) {
        int rc = weft_isend_tag(t->comm, e->late_buf, count, WEFT_F32, r, LATE_TAG,
                                &e->late_req[e->late_n]);
        if (rc)
            return rc;
        e->late_n++;
    }
    return 0;
}

void late_drop(weft_run *t)
{
    elastic_state *e = &t->el;
    for (int i = 0; i < e->late_n; i++)
        weft_wait(e->late_req[i]); /* at once on a failed communicator */
    free(e->late_req);
    free(e->late_buf);
    e->late_req = NULL;
    e->late_buf = NULL;
    e->late_n = 0;
    e->late_was = 0;
}

/* The header of the grow: step k, the optimiser's count and the outer
 * clock { steps, synced } (h[6], h[7]); rank 0's for everyone. */
static int grow_header(weft_run *t, long k, const int64_t cnt[2], int64_t h[8])
{
    member_header(t, k, weft_optim_steps(t->opt), h);
    h[6] = cnt[0];
    h[7] = cnt[1];
    return weft_broadcast(t->comm, h, 8, WEFT_I64, 0);
}

int late_grow(weft_run *t, weft_comm *g, long *step)
{
    elastic_state *e = &t->el;
    double t0 = clock_now();
    float *outer = malloc(churn_floats(&t->sync) * sizeof *outer);
    float w = t->sync.cfg.weight > 0 ? t->sync.cfg.weight : 1;
    int64_t cnt[2], h[8];
    int was = t->world, rc;
    weft_loader *mine = t->loader;
    if (!outer)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    churn_export(&t->sync, outer, cnt);
    /* The stream of the period to come is this rank's as it stands: the
     * new job's set-up remakes a loader (batch shares), a spare one. */
    t->loader = NULL;
    rc = member_keep_state(t);
    if (rc == 0)
        rc = data_loader(t, &t->o->r, t->d, t->rank, t->world, t->o->accum, "ranks", &t->loader);
    if (rc == 0) {
        weft_loader_seek(t->loader, weft_loader_position(mine));
        member_leave_comm(t);
        rc = member_enter_comm(t, g, g);
    }
    weft_loader_free(t->loader);
    t->loader = mine;
    if (rc == 0) {
        churn_import(&t->sync, outer, cnt);
        /* outer step k+1: the members' mean, the joiners' weight 0 */
        t->sync.cfg.weight = w * (float)t->world / (float)was;
        outer_weigh(t->sync.churn->outer, t->sync.cfg.weight);
        rc = grow_header(t, *step, cnt, h);
    }
    if (rc == 0 && t->rank == 0)
        rc = serve(t, outer, was);
    free(outer);
    if (rc == 0) {
        weft_loader_seek(t->loader, e->pos_base + (uint64_t)(*step - e->step_base) *
                                                      (uint64_t)t->o->r.batch);
        e->late_was = was;
        e->late_s = clock_now() - t0;
    }
    return rc;
}

/* Every rank of the grown job after outer step k+1: the new job's header,
 * stream and shares from step *step on. */
static int admitted(weft_run *t, long *step)
{
    int64_t h[8], cnt[2];
    float *outer = malloc(churn_floats(&t->sync) * sizeof *outer);
    if (!outer)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    churn_export(&t->sync, outer, cnt);
    free(outer);
    int rc = grow_header(t, *step, cnt, h);
    if (rc)
        return rc;
    weft_optim_set_steps(t->opt, h[1]);
    t->sync.churn->steps = (long)h[6];
    rc = member_apply_header(t, h, step);
    return rc ? rc : shares_change(t, *step);
}

int late_admit(weft_run *t, long *step)
{
    elastic_state *e = &t->el;
    double t0 = clock_now();
    int was = e->late_was, same = 0;
    uint64_t h = 0;
    /* The grow made the outer step anew: its one outer step so far is
     * k+1's, and its seconds blocked are what k+1 held this rank, the
     * joiner's take-up of the state included where it outlasted the
     * period. */
    outer_times ot = { 0, 0, 0 };
    outer_time(t->sync.churn->outer, &ot);
    int rc = admitted(t, step);
    if (rc == 0)
        rc = member_params_agree(t, &h, &same);
    late_drop(t); /* the joiners have the state: the sends are done */
    if (rc)
        return rc;
    char what[360], cl[64] = "";
    member_joined_clusters(t, was, cl, sizeof cl);
    snprintf(what, sizeof what, "%s%d rank(s) joined as rank %d..%d; parameters %s "
             "(hash %016llx); the state of the outer step before taken in the background, "
             "this outer step at weight 0; the grow held the others %.3f s, this outer "
             "step %.3f s", cl, t->world - was, was, t->world - 1,
             same ? "bit-identical on every rank" : "DIFFER between ranks",
             (unsigned long long)h, e->late_s, ot.wait_s);
    member_report_change(t, *step, "grow", what, e->late_s + clock_now() - t0);
    return 0;
}

int late_join(weft_run *t, long *step)
{
    int64_t h[8];
    size_t no = churn_floats(&t->sync), n = t->nparams, count = late_count(t);
    float *buf = malloc(count * sizeof *buf);
    weft_request *req = NULL;
    if (!buf)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    int rc = grow_header(t, -1, (int64_t[2]){ 0, 0 }, h);
    if (rc == 0)
        rc = weft_irecv_tag(t->comm, buf, count, WEFT_F32, 0, LATE_TAG, &req);
    if (rc == 0)
        rc = weft_wait(req); /* this rank alone waits: the members step on */
    if (rc == 0) {
        memcpy(weft_model_params(t->m, &n), buf, n * sizeof *buf); /* theta_k */
        for (int i = 0; i < weft_optim_state_count(t->opt); i++)
            memcpy(weft_optim_state(t->opt, i, NULL), buf + no + (size_t)i * n,
                   n * sizeof *buf);
        weft_optim_set_steps(t->opt, h[1]);
        churn_import(&t->sync, buf, h + 6);
        /* the members' clock at outer step k+1, where this rank weighs 0 */
        t->sync.churn->steps = (long)h[6] + t->sync.churn->period;
        rc = churn_outer_now(&t->sync, 0.0f);
    }
    free(buf);
    return rc ? rc : admitted(t, step);
}
