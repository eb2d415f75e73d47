/* --elastic with --sync diloco:H or hier:full/diloco:H: DiLoCo whose outer
 * state (anchor, Nesterov momentum, the step clock) belongs to the run,
 * so that a membership change can carry it to an outer_sync over the new
 * job (run_elastic_churn.c). The outer step is sync_outer.c's with one
 * fragment, blocking, which is diloco:H bit for bit; hier adds the full
 * sync inside each cluster (a weft_zero over the cluster, ZeRO 0).
 *
 * The period may change while the job runs: weft-cpn run re-plans a link
 * slower than planned with a longer one (run_elastic_shares.c reads it).
 * So this mode, not the outer_sync, keeps the clock: the outer_sync is
 * made with a period of one step and called only where an outer step
 * falls. After each outer step rank 0 reads the re-plan's period and
 * broadcasts it, and every rank takes it from that step on: the ranks
 * meet there anyway, so they all change at the same outer step, which a
 * look of each rank's own at the file could not promise (a rank that
 * changed one step apart would pair its outer all-reduce with another
 * collective). The period's clock rides with the anchors in a membership
 * change's hand-over, so a joiner or survivor keeps the job's. */
#include "run/run_churn.h"

#include "run/run_ckpt_sync.h"
#include "run/run_elastic_member.h"
#include "run/run_elastic_shares.h"
#include "run/run_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The period's clock after the anchors and momenta in the hand-over's
 * floats: period, outer steps, the step the period took effect at, as
 * int32 bit patterns (the hand-over only copies them: broadcasts and
 * sends, no arithmetic). */
enum { CLOCK_FLOATS = 3 };
_Static_assert(sizeof(int32_t) == sizeof(float), "a clock value fills one float");

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
    shares_launch(ch, s->o);
    int rc = whole_clusters(s);
    /* each call of the outer_sync is an outer step: the clock is ours */
    weft_sync_config one = s->cfg;
    one.period = 1;
    /* One starting point at the launch. A change brings each rank's own
     * back, and flat joiners take the state in the background
     * (run_elastic_late.c), so no change waits for this broadcast there;
     * hier's joiners still take rank 0's parameters from it. */
    int launch = !s->run || (!s->run->el.keep && !s->run->joined); /* a change keeps first */
    if (rc == 0 && (launch || s->cfg.hier))
        rc = weft_broadcast(s->comm, p, n, WEFT_F32, 0);
    if (rc == 0)
        rc = outer_create(&ch->outer, s->comm, m, &one);
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

/* After an outer step, every rank: the period and the batch shares from
 * here on, rank 0's look at the re-plan broadcast (--progress: weft-cpn
 * run's channel; without it nobody re-plans and nothing is asked). A
 * broadcast that fails is the step's failure; the survivors then agree
 * on the root's clock. shares: 0 in a membership change's outer step,
 * whose hand-over takes them (shares_change). */
static int period_agree(train_sync *s, int shares)
{
    struct sync_churn *ch = s->churn;
    int64_t h[SHARES_LOOK] = { 0 };
    if (!s->o->progress[0])
        return 0;
    if (weft_comm_rank(s->comm) == 0)
        shares_look(s, h);
    if (!shares)
        h[2] = 0;
    int rc = weft_broadcast(s->comm, h, SHARES_LOOK, WEFT_I64, 0);
    if (rc == 0 && h[0] >= 1 && h[0] != ch->period) {
        if (weft_comm_rank(s->comm) == 0)
            run_say(s->run, WEFT_RUN_OUT, "elastic: step %ld: outer period %lld from here on, "
                    "%d before (re-plan %lld)\n", ch->steps, (long long)h[0], ch->period,
                    (long long)h[1]);
        ch->period = (int)h[0];
        ch->since = ch->steps;
    }
    return rc ? rc : shares_take(s, h);
}

/* The outer step just taken: the clock moves on, the period (and in a
 * step of the loop, shares) agreed. */
static int outer_taken(train_sync *s, int shares)
{
    struct sync_churn *ch = s->churn;
    ch->from = ch->steps;
    ch->outers++;
    return period_agree(s, shares);
}

static int churn_step(train_sync *s, train_step *st, float lr)
{
    struct sync_churn *ch = s->churn;
    int rc = sync_optim_step(s, lr, &st->gnorm);
    if (rc == 0 && ++ch->steps == ch->from + ch->period &&
        (rc = outer_after_step(ch->outer, ch->steps)) == 0)
        rc = outer_taken(s, 1);
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
    /* every rank's own count: where the period changed, the ranks must
     * have changed it at one step (the line is the same on each) */
    if (rc == 0 && s->churn->since > 0)
        run_say(s->run, WEFT_RUN_OUT, "elastic: rank %d: %ld outer steps in the loop, "
                "period %d from step %ld\n", weft_comm_rank(s->comm), s->churn->outers,
                s->churn->period, s->churn->since);
    if (rc == 0 && s->churn->shares_taken > 0) {
        char list[SHARES_MAX * 8] = "";
        size_t len = 0;
        for (int k = 0; k < SHARES_MAX && len < sizeof list; k++)
            if (s->churn->share[k] > 0)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%d:%ld",
                                        len ? "," : "", k, s->churn->share[k]);
        run_say(s->run, WEFT_RUN_OUT, "elastic: rank %d: batch shares re-planned %d time(s) "
                "while running, the last from step %ld (re-plan %ld): %s; outer weight %.3g\n",
                weft_comm_rank(s->comm), s->churn->shares_taken, s->churn->shares_step,
                s->churn->shares_gen, list, s->cfg.weight);
    }
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
    return 2 * n + CLOCK_FLOATS;
}

void churn_export(const train_sync *s, float *buf, int64_t cnt[2])
{
    const struct sync_churn *ch = s->churn;
    size_t n;
    long synced;
    weft_model_params(ch->m, &n);
    outer_export(ch->outer, buf, buf + n, &synced);
    int32_t clock[CLOCK_FLOATS] = { ch->period, (int32_t)ch->outers, (int32_t)ch->since };
    memcpy(buf + 2 * n, clock, sizeof clock);
    cnt[0] = ch->steps;
    cnt[1] = synced;
}

void churn_import(train_sync *s, const float *buf, const int64_t cnt[2])
{
    struct sync_churn *ch = s->churn;
    size_t n;
    int32_t clock[CLOCK_FLOATS];
    weft_model_params(ch->m, &n);
    outer_import(ch->outer, buf, buf + n, (long)cnt[1]);
    memcpy(clock, buf + 2 * n, sizeof clock);
    ch->period = clock[0] > 0 ? clock[0] : ch->period;
    ch->outers = clock[1];
    ch->since = clock[2];
    ch->steps = (long)cnt[0];
    ch->from = (long)cnt[1]; /* the last outer step taken */
}

int churn_boundary(const train_sync *s)
{
    const struct sync_churn *ch = s->churn;
    return ch->steps == ch->from || ch->steps == ch->from + ch->period;
}

int churn_outer_next(const train_sync *s)
{
    return s->churn->steps + 1 == s->churn->from + s->churn->period;
}

long churn_outers(const train_sync *s)
{
    return s->churn->outers;
}

int churn_outer_now(train_sync *s, float weight)
{
    outer_weigh(s->churn->outer, weight);
    int rc = outer_finish(s->churn->outer, s->churn->steps);
    outer_weigh(s->churn->outer, 1);
    return rc ? rc : outer_taken(s, 0);
}

void churn_abort(train_sync *s)
{
    if (s->churn)
        outer_abort(s->churn->outer);
}
