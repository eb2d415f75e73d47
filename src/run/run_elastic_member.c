/* The parts of a membership change that every recovery shares, the
 * data-parallel and pipeline ones (run_elastic.c) and the churn mode's
 * (run_elastic_churn.c): the training state carried from one communicator
 * to the next, the header the members agree on, the survivors' rounds and
 * the lead's report of the change. */
#include "run/run_elastic_member.h"

#include "run/run_data.h"
#include "run/run_elastic_hooks.h"
#include "run/run_pipeline.h"
#include "run/run_report.h"
#include "run/run_sync.h"

#include "core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- leaving one communicator and entering the next ---------------------- */

/* Kept while the training state is rebuilt: full_open's broadcast from
 * rank 0 would overwrite the parameters. */
int member_keep_state(weft_run *t)
{
    elastic_state *e = &t->el;
    size_t n = t->nparams;
    int ns = weft_optim_state_count(t->opt);
    float *k = realloc(e->keep, (size_t)(ns + 1) * n * sizeof *k);
    if (!k)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    e->keep = k;
    memcpy(k, weft_model_params(t->m, &n), n * sizeof *k);
    for (int i = 0; i < ns; i++)
        memcpy(k + (size_t)(i + 1) * n, weft_optim_state(t->opt, i, NULL), n * sizeof *k);
    e->keep_steps = weft_optim_steps(t->opt);
    return 0;
}

static void restore_state(weft_run *t)
{
    elastic_state *e = &t->el;
    size_t n = t->nparams;
    int ns = weft_optim_state_count(t->opt);
    memcpy(weft_model_params(t->m, &n), e->keep, n * sizeof *e->keep);
    for (int i = 0; i < ns; i++)
        memcpy(weft_optim_state(t->opt, i, NULL), e->keep + (size_t)(i + 1) * n,
               n * sizeof *e->keep);
    weft_optim_set_steps(t->opt, e->keep_steps);
}

void member_leave_comm(weft_run *t)
{
    if (t->sync.mreq) {
        weft_wait(t->sync.mreq); /* fails at once on a failed communicator */
        t->sync.mreq = NULL;
    }
    sync_close(&t->sync);
    t->opt = NULL;
    weft_comm_destroy(t->comm); /* a failed one reports it again: nothing to do */
    t->comm = t->job = NULL;
}

/* A failure of the returned code is the communicator's (a death: another
 * round of the recovery) unless the run has failed (run_fail), which no
 * round mends. */
int member_enter_comm(weft_run *t, weft_comm *c, weft_comm *job)
{
    t->comm = c;
    t->job = job;
    t->rank = c ? weft_comm_rank(c) : 0;
    t->world = c ? weft_comm_size(c) : 1;
    int rc = sync_pick(&t->sync, t, t->o, c);
    if (rc)
        return rc;
    rc = sync_open(&t->sync, t->m, &t->el.keep_oc, NULL);
    if (!t->sync.z)
        return run_fail(t, rc ? rc : WEFT_ENOMEM, "elastic: the training state over %d ranks: %s",
                        t->world, weft_strerror(rc));
    if (t->sync.comm != c) { /* the churn mode waited for a cluster's other ranks */
        t->comm = t->job = t->sync.comm;
        t->rank = weft_comm_rank(t->comm);
        t->world = weft_comm_size(t->comm);
    }
    t->opt = weft_zero_optim(t->sync.z);
    if (t->o->zero == 0)
        restore_state(t); /* stages 1-3: weft_zero_import, after the hand-over */
    if (t->pl) {
        int arc = pipeline_attach(t->pl, t->m, t->sync.z);
        if (arc)
            return arc;
    }
    return rc;
}

/* ---- what the members agree on ------------------------------------------- */

/* --accum for this many ranks: a rank's micro-batch stays what it was at
 * the launch (the global batch stays put), so memory per micro-step does
 * too; at most as many micro-steps as leave every one a sample. */
static int accum_for(const elastic_state *e, int world, int batch)
{
    long a = ((long)e->accum0 * e->world0 + world - 1) / world;
    if (a < e->accum0)
        a = e->accum0;
    if (a * world > batch)
        a = batch / world;
    return a < 1 ? 1 : (int)a;
}

void member_header(const weft_run *t, long k, int64_t opt_steps, int64_t h[6])
{
    const elastic_state *e = &t->el;
    h[0] = k;
    h[1] = opt_steps;
    h[2] = (int64_t)(e->pos_base + (uint64_t)(k - e->step_base) * (uint64_t)t->o->r.batch);
    h[3] = e->world0;
    h[4] = e->accum0;
    h[5] = e->view + 1;
}

/* Over the world as it is now. */
int member_apply_header(weft_run *t, const int64_t h[6], long *step)
{
    elastic_state *e = &t->el;
    e->step_base = (long)h[0];
    e->pos_base = (uint64_t)h[2];
    e->world0 = (int)h[3];
    e->accum0 = (int)h[4];
    e->view = h[5];
    if (!t->pl) /* a pipeline raised its micro-batches instead */
        t->o->accum = accum_for(e, t->world, t->o->r.batch);
    weft_loader_free(t->loader);
    t->loader = NULL;
    int rc = data_loader(t, &t->o->r, t->d, t->rank, t->world, t->o->accum, "ranks",
                         &t->loader);
    if (rc)
        return rc;
    weft_loader_seek(t->loader, e->pos_base);
    elastic_commit(t, e->step_base);
    *step = e->step_base;
    return 0;
}

/* ---- the survivors and the report of the change -------------------------- */

int member_params_same(weft_comm *c, weft_model *m, uint64_t *hash, int *same)
{
    size_t n;
    const unsigned char *p = (const unsigned char *)weft_model_params(m, &n);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    int64_t v[2] = { (int64_t)(h >> 1), -(int64_t)(h >> 1) };
    int rc = weft_allreduce(c, v, v, 2, WEFT_I64, WEFT_MAX);
    *hash = h;
    *same = rc == 0 && v[0] == -v[1] && (uint64_t)v[0] == h >> 1;
    return rc;
}

int member_params_agree(weft_run *t, uint64_t *hash, int *same)
{
    return member_params_same(t->comm, t->m, hash, same);
}

int member_take_lead(weft_run *t)
{
    if (weft_comm_rank(t->job) != 0 || t->lead)
        return 0;
    t->lead = 1;
    t->o->quiet = t->el.quiet0;
    t->pg.quiet = t->o->quiet;
    if (t->o->metrics[0])
        return csv_open(t, t->o->metrics, 1, &t->pg.csv);
    return 0;
}

void member_report_change(weft_run *t, long step, const char *kind, const char *what, double took)
{
    if (!t->lead)
        return;
    char line[512];
    snprintf(line, sizeof line, "%s; %d ranks now, %d micro-%s a step; %s in %.3f s", what,
             weft_comm_size(t->job), t->pl ? pipeline_micro(t->pl) : t->o->accum,
             t->pl ? "batch(es)" : "step(s)", strcmp(kind, "grow") ? "recovered" : "admitted",
             took);
    /* --quiet too: it changes the job */
    run_say(t, WEFT_RUN_OUT, "elastic: step %ld: %s\n", step, line);
    csv_event(t->pg.csv, step, (double)t->el.pos_base / (double)t->d->ti.n, kind,
              clock_now() - t->pg.start, line);
}

size_t member_gone_ranks(char *what, size_t cap, const int *olds, int n, int was, const char *why,
                  long failed_at)
{
    size_t len = (size_t)snprintf(what, cap, n == was ? "no rank" : "rank(s)");
    for (int q = 0, k = 0; q < was; q++) {
        if (k < n && olds[k] == q) {
            k++;
            continue;
        }
        if (len < cap)
            len += (size_t)snprintf(what + len, cap - len, " %d", q);
    }
    if (len < cap)
        len += (size_t)snprintf(what + len, cap - len, " of %d gone (%s at step %ld)", was, why,
                                failed_at);
    return len < cap ? len : cap;
}

int member_count_idle(weft_run *t, int lost_none, long failed_at, const char *why)
{
    elastic_state *e = &t->el;
    e->idle_fails = lost_none && e->idle_step == failed_at ? e->idle_fails + 1 : 0;
    e->idle_step = failed_at;
    if (e->idle_fails >= 3)
        return run_fail(t, WEFT_ETIMEDOUT,
                        "elastic: step %ld failed %d times with every rank alive (%s)",
                        failed_at, e->idle_fails + 1, why);
    return 0;
}

/* A death during the round fails its allgather: another round. */
int member_shrink_round(weft_run *t, weft_comm **w, long failed_at, int old, int *olds, int *n,
                 int *round)
{
    weft_comm *s;
    int rc = weft_comm_shrink(*w, &s);
    if (rc)
        return run_fail(t, rc, "elastic: step %ld: no agreement on the survivors (%s): %s",
                        failed_at, weft_strerror(rc), weft_comm_error(*w));
    weft_comm_destroy(*w);
    *w = s;
    kill_point(t, failed_at, 1);
    *n = weft_comm_size(s);
    *round = weft_allgather(s, &old, olds, 1, WEFT_I32);
    return 0;
}

void member_joined_clusters(const weft_run *t, int was, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int r = was; r < t->world; r++) {
        int k = weft_comm_cluster_of(t->comm, r), seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = weft_comm_cluster_of(t->comm, q) == k;
        if (!seen && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%scluster %d", len ? ", " : "", k);
    }
    if (len && len < cap)
        snprintf(buf + len, cap - len, " rejoined; ");
}
