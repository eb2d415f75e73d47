/* --elastic with --sync diloco:H or hier:full/diloco:H: DiLoCo whose outer
 * state (anchor, Nesterov momentum, the step clock) belongs to the run,
 * so that a membership change can carry it to an outer_sync over the new
 * job (run_elastic_churn.c). The outer step is sync_outer.c's with one
 * fragment, blocking, which is diloco:H bit for bit; hier adds the full
 * sync inside each cluster (a weft_zero over the cluster, ZeRO 0). */
#include "run/run_churn.h"

#include "run/run_ckpt_sync.h"
#include "run/run_elastic_member.h"
#include "run/run_sync.h"

#include <stdlib.h>
#include <string.h>

/* hier: the ranks of each cluster of c counted into n[] (ids < cap). */
static int cluster_counts(weft_comm *c, int *n, int cap)
{
    int most = 0;
    memset(n, 0, (size_t)cap * sizeof *n);
    for (int r = 0, w = weft_comm_size(c); r < w; r++) {
        int k = weft_comm_cluster_of(c, r);
        if (k >= 0 && k < cap && ++n[k] > most)
            most = n[k];
    }
    return most;
}

int churn_cluster_size(const train_sync *s, weft_comm *c)
{
    int n[256];
    return s->cfg.hier && c ? cluster_counts(c, n, 256) : 0;
}

/* hier needs whole clusters: a restarted cluster whose ranks came to a
 * grow apart (some admitted, the rest still starting) waits here for the
 * rest, every rank of the grown job alike (members in their hand-over,
 * joiners in their set-up), before the clusters are split. */
static int whole_clusters(train_sync *s)
{
    int n[256];
    while (s->cfg.hier) {
        int most = cluster_counts(s->comm, n, 256), want = 0, rc;
        for (int k = 0; k < 256; k++)
            want += n[k] ? most - n[k] : 0;
        if (want == 0)
            return 0;
        weft_comm *g = NULL;
        if ((rc = weft_comm_grow(s->comm, want, &g)) || !g)
            return rc ? rc : WEFT_ETIMEDOUT;
        weft_comm_destroy(s->comm);
        s->comm = g;
        s->world = weft_comm_size(g);
    }
    return 0;
}

/* What a membership change cannot carry. */
static int churn_check(const opts *o, const weft_sync_config *cfg, weft_comm *comm,
                       weft_run *t)
{
    (void)cfg;
    (void)comm;
    if (o->compress[0])
        return run_fail(t, WEFT_ENOTSUP,
                        "--elastic with --sync %s takes no --compress: the compressor's error "
                        "feedback is not carried over a membership change", o->sync);
    if (o->zero)
        return run_fail(t, WEFT_ECONFIG, "--elastic with --sync %s takes --zero 0", o->sync);
    return 0;
}

static int churn_open(train_sync *s, weft_model *m, const weft_optim_config *oc,
                      const weft_ckpt *ck)
{
    struct sync_churn *ch = calloc(1, sizeof *ch);
    size_t n;
    float *p = weft_model_params(m, &n);
    if (!ch)
        return WEFT_ENOMEM;
    s->churn = ch;
    ch->period = s->cfg.period;
    ch->m = m;
    int rc = whole_clusters(s);
    /* One starting point at the launch. A change brings each rank's own
     * back, and flat joiners take the state in the background
     * (run_elastic_late.c), so no change waits for this broadcast there;
     * hier's joiners still take rank 0's parameters from it. */
    int launch = !s->run || (!s->run->el.keep && !s->run->joined); /* a change keeps first */
    if (rc == 0 && (launch || s->cfg.hier))
        rc = weft_broadcast(s->comm, p, n, WEFT_F32, 0);
    if (rc == 0)
        rc = outer_create(&ch->outer, s->comm, m, &s->cfg);
    if (rc == 0)
        rc = sync_zero_open(s, outer_inner_comm(ch->outer), m, oc, ck);
    if (rc == 0)
        rc = ckpt_sync_restore(s, ck); /* a warning: the outer state is not saved */
    return rc;
}

static void churn_describe(const train_sync *s)
{
    if (s->cfg.hier)
        run_say(s->run, WEFT_RUN_OUT,
                "data parallel: %d ranks in %d clusters of %d, sync %s, elastic (a cluster "
                "lost is dropped at the outer step)\n", s->world,
                weft_comm_cluster_count(s->comm), churn_cluster_size(s, s->comm), s->o->sync);
    else
        run_say(s->run, WEFT_RUN_OUT,
                "data parallel: %d ranks, sync %s, elastic (a rank or cluster lost is dropped "
                "at the outer step)\n", s->world, s->o->sync);
}

static int churn_step(train_sync *s, train_step *st, float lr)
{
    int rc = sync_optim_step(s, lr, &st->gnorm);
    if (rc == 0)
        rc = outer_after_step(s->churn->outer, ++s->churn->steps);
    return rc;
}

/* Every rank ends with one model; rank 0 says whether it is (a rejoined
 * cluster must end where the others do). */
static int churn_finish(train_sync *s)
{
    uint64_t h = 0;
    int same = 0, rc = outer_finish(s->churn->outer, s->churn->steps);
    if (rc == 0)
        rc = member_params_same(s->comm, s->churn->m, &h, &same);
    if (rc == 0 && weft_comm_rank(s->comm) == 0)
        run_say(s->run, WEFT_RUN_OUT,
                "elastic: the end: parameters %s on every rank of %d (hash %016llx)\n",
                same ? "bit-identical" : "DIFFER", s->world, (unsigned long long)h);
    return rc;
}

static uint64_t churn_bytes(const train_sync *s)
{
    uint64_t a = 0, i = 0;
    outer_bytes(s->churn ? s->churn->outer : NULL, &a, &i);
    return a + i;
}

const sync_ops sync_churn = {
    .accum = 1, .outer_compress = 1, .check = churn_check, .defaults = sync_diloco_defaults,
    .open = churn_open, .describe = churn_describe, .step = churn_step,
    .finish = churn_finish, .bytes = churn_bytes,
};

size_t churn_floats(const train_sync *s)
{
    size_t n;
    weft_model_params(s->churn->m, &n);
    return 2 * n;
}

void churn_export(const train_sync *s, float *buf, int64_t cnt[2])
{
    long synced;
    outer_export(s->churn->outer, buf, buf + churn_floats(s) / 2, &synced);
    cnt[0] = s->churn->steps;
    cnt[1] = synced;
}

void churn_import(train_sync *s, const float *buf, const int64_t cnt[2])
{
    outer_import(s->churn->outer, buf, buf + churn_floats(s) / 2, (long)cnt[1]);
    s->churn->steps = (long)cnt[0];
}

int churn_boundary(const train_sync *s)
{
    return s->churn->steps % s->churn->period == 0;
}

int churn_outer_now(train_sync *s, float weight)
{
    outer_weigh(s->churn->outer, weight);
    int rc = outer_finish(s->churn->outer, s->churn->steps);
    outer_weigh(s->churn->outer, 1);
    return rc;
}

void churn_abort(train_sync *s)
{
    if (s->churn)
        outer_abort(s->churn->outer);
}
