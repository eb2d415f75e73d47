/* --elastic with --sync diloco:H (flat): a joiner comes in without holding
 * the others for the state it needs (docs/TRAINING.md, "Elastic training
 * across clusters").
 *
 * The members grow the job at the boundary of outer step k, as ever, but
 * hand nothing big over there: rank 0 posts the state of step k (anchor
 * theta_k, Nesterov momentum, its inner optimiser state) to each joiner as
 * point-to-point sends, which move on their own while every member goes
 * on training on its own stream, as before the grow. The joiner takes no
 * inner step: it meets the members at every outer step from k+1 on with
 * weight 0, whether its state has come or not, so that nobody waits for
 * the transfer. Its pseudo-gradient is nothing, the members' weigh
 * world/was each, so the mean is theirs; the joiner keeps that mean of
 * each outer step it took without the state. Once the state is in, it
 * replays them in order on theta_k and the momentum (outer_replay, the
 * reduction's own arithmetic) and holds the members' anchor bit for bit.
 * After each outer step every rank says whether the joiners caught up;
 * the first outer step after which they all have admits them: the
 * stream, the batch shares and the lead's report are the new job's from
 * there on. What the grow holds the members for is the grow and a header;
 * a transfer slower than a period costs them one small reduction an
 * outer step until it lands. */
#include "run/run_elastic_late.h"

#include "run/run_churn.h"
#include "run/run_data.h"
#include "run/run_elastic_member.h"
#include "run/run_elastic_shares.h"

#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

#define LATE_TAG 0x4a4f494e /* the state's sends to the joiners */
#define LATE_HEAD 9         /* the grow's header (grow_header) */
/* A joiner keeps the mean pseudo-gradient of each outer step it took
 * without its state, a copy of the parameters each: past this many it
 * fails rather than grow without bound (a link that cannot carry the
 * state in 64 periods is too slow for this job anyway). */
#define LATE_MAX 64

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

/* The header of the grow: step k, the optimiser's count, the outer
 * clock { steps, synced } (h[6], h[7]) and the period (h[8]); rank 0's
 * for everyone. */
static int grow_header(weft_run *t, long k, const int64_t cnt[2], int64_t h[LATE_HEAD])
{
    member_header(t, k, weft_optim_steps(t->opt), h);
    h[6] = cnt[0];
    h[7] = cnt[1];
    h[8] = t->sync.churn->period;
    return weft_broadcast(t->comm, h, LATE_HEAD, WEFT_I64, 0);
}

/* After each outer step while joiners catch up, every rank: whether they
 * all have (members say so), and how many outer steps they replayed. */
static int caught_up(weft_run *t, int mine, long replayed, int *all, long *most)
{
    int64_t v[2] = { !mine, replayed };
    int rc = weft_allreduce(t->comm, v, v, 2, WEFT_I64, WEFT_MAX);
    *all = rc == 0 && v[0] == 0;
    *most = (long)v[1];
    return rc;
}

int late_grow(weft_run *t, weft_comm *g, long *step)
{
    elastic_state *e = &t->el;
    double t0 = clock_now();
    float *outer = malloc(churn_floats(&t->sync) * sizeof *outer);
    float w = t->sync.cfg.weight > 0 ? t->sync.cfg.weight : 1;
    int64_t cnt[2], h[LATE_HEAD];
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
        /* the outer steps until the joiners are admitted: the members'
         * mean, the joiners' weight 0 */
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

/* Every rank of the grown job after the outer step that found the joiners
 * caught up: the new job's header, stream and shares from step *step on. */
static int admitted(weft_run *t, long *step)
{
    int64_t h[LATE_HEAD], cnt[2];
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

int late_admit(weft_run *t, long *step, int *in)
{
    elastic_state *e = &t->el;
    double t0 = clock_now();
    int was = e->late_was, same = 0, all = 0;
    long m = 0;
    uint64_t h = 0;
    *in = 0;
    int rc = caught_up(t, 1, 0, &all, &m);
    if (rc || !all)
        return rc; /* the members go on; nobody waited for the state */
    /* The grow made the outer step anew: its outer steps so far are the
     * ones since the grow, and its seconds blocked what they held this
     * rank, a joiner's take-up of the state included where it made one
     * late to an outer step. */
    outer_times ot = { 0, 0, 0 };
    outer_time(t->sync.churn->outer, &ot);
    rc = admitted(t, step);
    if (rc == 0)
        rc = member_params_agree(t, &h, &same);
    late_drop(t); /* the joiners have the state: the sends are done */
    if (rc)
        return rc;
    *in = 1;
    char what[400], cl[64] = "";
    member_joined_clusters(t, was, cl, sizeof cl);
    snprintf(what, sizeof what, "%s%d rank(s) joined as rank %d..%d; parameters %s "
             "(hash %016llx); the state of the outer step before the grow taken in the "
             "background, %ld outer step(s) at weight 0 replayed on it; the grow held the "
             "others %.3f s, the %ld outer step(s) since %.3f s in all", cl, t->world - was, was,
             t->world - 1, same ? "bit-identical on every rank" : "DIFFER between ranks",
             (unsigned long long)h, m, e->late_s, m, ot.wait_s);
    member_report_change(t, *step, "grow", what, e->late_s + clock_now() - t0);
    return 0;
}

/* A test's hook: WEFT_TEST_JOIN_DELAY_OUTERS=N makes a joiner look at its
 * state only after N outer steps at weight 0, and then wait for it, so a
 * test sees replays whatever the machine's speed. */
static int delay_outers(void)
{
    const char *v = getenv("WEFT_TEST_JOIN_DELAY_OUTERS");
    int n = v ? atoi(v) : 0;
    return n > 0 ? n : 0;
}

/* The joiner's outer steps without the state: the mean of each, in order. */
typedef struct {
    float *d;
    long m;
} late_log;

static int log_outer(weft_run *t, late_log *lg)
{
    size_t n = t->nparams;
    float *d = realloc(lg->d, (size_t)(lg->m + 1) * n * sizeof *d);
    if (!d)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    lg->d = d;
    int rc = outer_delta(t->sync.churn->outer, d + (size_t)lg->m * n);
    if (rc == 0)
        lg->m++;
    return rc;
}

/* The state of step k came: taken in, the outer steps since replayed on
 * it. The clock stays as the outer steps here kept it (the members' from
 * the header on), but for the outer count, the state's plus the replays,
 * and the period's start, the state's unless it changed since. */
static int catch_up(weft_run *t, const float *buf, const int64_t *h, const late_log *lg,
                    long since0)
{
    struct sync_churn *ch = t->sync.churn;
    size_t no = churn_floats(&t->sync), n = t->nparams;
    long steps = ch->steps, from = ch->from, since = ch->since;
    int period = ch->period;
    for (int i = 0; i < weft_optim_state_count(t->opt); i++)
        memcpy(weft_optim_state(t->opt, i, NULL), buf + no + (size_t)i * n, n * sizeof *buf);
    churn_import(&t->sync, buf, h + 6);
    memcpy(weft_model_params(t->m, &n), buf, n * sizeof *buf); /* theta_k */
    ch->outers += lg->m;
    if (since != since0)
        ch->since = since;
    ch->steps = steps;
    ch->from = from;
    ch->period = period;
    int rc = 0;
    for (long i = 0; rc == 0 && i < lg->m; i++)
        rc = outer_replay(ch->outer, lg->d + (size_t)i * n, from);
    return rc;
}

int late_join(weft_run *t, long *step)
{
    struct sync_churn *ch = t->sync.churn;
    int64_t h[LATE_HEAD];
    size_t count = late_count(t);
    float *buf = malloc(count * sizeof *buf);
    weft_request *req = NULL;
    late_log lg = { NULL, 0 };
    long since0 = ch->since, most = 0;
    int delay = delay_outers(), got = 0, all = 0;
    double t0 = clock_now();
    if (!buf)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    int rc = grow_header(t, -1, (int64_t[2]){ 0, 0 }, h);
    if (rc == 0)
        rc = weft_irecv_tag(t->comm, buf, count, WEFT_F32, 0, LATE_TAG, &req);
    if (rc == 0) { /* the members' clock at the grow */
        ch->steps = ch->from = (long)h[6];
        ch->period = (int)h[8];
    }
    while (rc == 0 && !all) {
        if (ch->steps + ch->period > t->end)
            break; /* the run ends first: see below */
        ch->steps += ch->period;
        if ((rc = churn_outer_now(&t->sync, 0.0f)) || (!got && (rc = log_outer(t, &lg))))
            break;
        /* only here does this rank look at its state: nobody waits for it */
        if (!got && lg.m >= delay) {
            int done = 1;
            rc = delay ? weft_wait(req) : weft_test(req, &done);
            req = done ? NULL : req; /* released */
            got = done && rc == 0;
            if (got)
                rc = catch_up(t, buf, h, &lg, since0);
        }
        if (rc || ch->steps >= t->end)
            break; /* the run's end: nobody asks */
        if ((rc = caught_up(t, got, lg.m, &all, &most)) == 0 && !all && !got &&
            lg.m >= LATE_MAX) {
            run_fail(t, WEFT_ETIMEDOUT, "elastic: joining: the state of step %lld had not "
                     "come after %d outer steps at weight 0 (a link too slow for it): "
                     "giving up", (long long)h[6], LATE_MAX);
            weft_comm_abort(t->comm); /* the members drop it at their next collective */
            rc = WEFT_ETIMEDOUT;
        }
    }
    if (rc && req)
        weft_wait(req); /* at once on a failed communicator: buf is free after */
    if (rc == 0 && !got) { /* the run ended first: its final outer step needs the state */
        rc = weft_wait(req);
        if (rc == 0)
            rc = catch_up(t, buf, h, &lg, since0);
    }
    free(buf);
    free(lg.d);
    if (rc == 0)
        run_say(t, WEFT_RUN_OUT, "elastic: rank %d: the state of step %lld taken after %ld "
                "outer step(s) at weight 0, which it replayed, %.3f s after the grow\n",
                t->rank, (long long)h[6], lg.m, clock_now() - t0);
    if (rc || all)
        return rc ? rc : admitted(t, step);
    ch->steps = t->end; /* no admission: the members are in their finish */
    *step = t->end;
    return 0;
}
