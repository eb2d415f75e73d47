/* The clusters' shares of the batch after a membership change.
 *
 * weft-cpn run re-plans when a cluster is lost, goes silent or joins, and
 * writes the new shares by cluster (WEFT_CLUSTER) to PATH.shares beside
 * the parts' progress files ("GEN S0,S1,..."; 0 for a cluster out of the
 * job). The training reads them only at a membership change, where the
 * ranks already meet for a hand-over, so that no step pays a look: the
 * file is written before a joiner is started, and where a loss reaches
 * the survivors before the orchestrator's re-plan (its launcher learns of
 * the end later), the launch's shares over the clusters left, in
 * proportion, are the same rule the orchestrator follows. Rank 0 reads
 * and decides and broadcasts the result, so every rank takes the same
 * shares even while the file is replaced.
 *
 * A re-plan for a link slower than planned keeps the shares and gives a
 * longer outer period, "period=H" after them; the churn mode's outer
 * steps read it (run_sync_churn.c), one look a period on rank 0. */
#include "run/run_elastic_shares.h"

#include "run/run_churn.h"
#include "run/run_shares.h"

#include "core/apportion.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

enum { FROM_NONE = 0, FROM_REPLAN, FROM_LAUNCH };
_Static_assert((int)CHURN_SHARES == (int)SHARES_MAX, "the churn mode keeps a share a cluster");

/* The ranks of each cluster of c (ids < SHARES_MAX), into ranks[]. */
static void cluster_ranks(weft_comm *c, long *ranks)
{
    memset(ranks, 0, SHARES_MAX * sizeof *ranks);
    for (int r = 0, w = weft_comm_size(c); r < w; r++) {
        int k = weft_comm_cluster_of(c, r);
        if (k >= 0 && k < SHARES_MAX)
            ranks[k]++;
    }
}

/* Whether share[0..n) gives every cluster present its ranks at least,
 * none to a cluster absent, and the batch in all. */
static int fits(const long *share, int n, const long *ranks, long batch)
{
    long sum = 0;
    for (int k = 0; k < SHARES_MAX; k++) {
        long x = k < n ? share[k] : 0;
        if ((ranks[k] > 0 && x < ranks[k]) || (ranks[k] == 0 && x != 0))
            return 0;
        sum += x;
    }
    return sum == batch;
}

/* The re-plan's line, "GEN S0,S1,... [period=H]": the shares' count (-1
 * when none), *gen, and *period (0 when it names none). */
static int from_file(const char *base, long *share, long *gen, long *period)
{
    char path[1100], line[1024], list[1000];
    snprintf(path, sizeof path, "%s.shares", base);
    *gen = 0;
    *period = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(line, sizeof line, f) && sscanf(line, "%ld %999s", gen, list) == 2;
    fclose(f);
    const char *at = ok ? strstr(line, " period=") : NULL;
    if (at && (sscanf(at, " period=%ld", period) != 1 || *period < 1 || *period > INT_MAX))
        *period = 0;
    return ok ? shares_parse(list, share) : -1;
}

/* The launch's shares over the clusters present, in proportion, largest
 * remainders first (cpn_replan_shares' rule); their count, -1 when a
 * cluster present has none. */
static int from_launch(const char *given, const long *ranks, long batch, long *share)
{
    long orig[SHARES_MAX];
    double w[SHARES_MAX];
    int n = given[0] ? shares_parse(given, orig) : -1;
    if (n < 1)
        return -1;
    for (int k = 0; k < SHARES_MAX; k++) {
        if (ranks[k] > 0 && (k >= n || orig[k] < 1))
            return -1;
        w[k] = ranks[k] > 0 ? (double)orig[k] : 0;
    }
    apportion(batch, w, SHARES_MAX, share);
    return SHARES_MAX;
}

/* Rank 0's decision: h[0] where from, h[1] the re-plan's number, h[2..]
 * the shares. */
static void decide(const weft_run *t, const long *ranks, int64_t *h)
{
    const opts *o = t->o;
    long share[SHARES_MAX] = { 0 }, gen = 0, period = 0;
    int n = o->progress[0] ? from_file(o->progress, share, &gen, &period) : -1;
    h[0] = FROM_NONE;
    if (n > 0 && fits(share, n, ranks, o->r.batch)) {
        h[0] = FROM_REPLAN;
        h[1] = gen;
    } else {
        memset(share, 0, sizeof share);
        n = from_launch(o->batch_shares, ranks, o->r.batch, share);
        if (n > 0 && fits(share, n, ranks, o->r.batch))
            h[0] = FROM_LAUNCH;
    }
    for (int k = 0; k < SHARES_MAX; k++)
        h[2 + k] = h[0] == FROM_NONE ? 0 : share[k];
}

/* share[0..SHARES_MAX) as "16,8" (to the last cluster with a share). */
static void share_list(const long *share, char *out, size_t cap)
{
    int last = 0;
    size_t len = 0;
    out[0] = 0;
    for (int k = 0; k < SHARES_MAX; k++)
        last = share[k] > 0 ? k + 1 : last;
    for (int k = 0; k < last && len < cap; k++)
        len += (size_t)snprintf(out + len, cap - len, "%s%ld", k ? "," : "", share[k]);
}

/* Every rank: its loader over share[] (by cluster), the outer step's
 * sample weights, and the churn mode's record of the shares held (gen:
 * the re-plan's number, 0 the launch's). */
static int take(weft_run *t, const long *share, long gen, long step)
{
    int last = 0, n = 0;
    for (int k = 0; k < SHARES_MAX; k++)
        last = share[k] > 0 ? k + 1 : last;
    int rc = shares_loader_over(&t->sync, t->comm, share, last, &n);
    if (rc == 0 && t->sync.churn) { /* the sample-weighted outer mean */
        struct sync_churn *ch = t->sync.churn;
        rc = shares_weigh(&t->sync, n);
        memcpy(ch->share, share, sizeof ch->share);
        ch->shares_gen = gen;
        ch->shares_step = step;
    }
    return rc;
}

int shares_change(weft_run *t, long step)
{
    const opts *o = t->o;
    if (!t->comm || t->pl || (!o->batch_shares[0] && !o->progress[0]))
        return 0;
    long ranks[SHARES_MAX], share[SHARES_MAX];
    int64_t h[2 + SHARES_MAX];
    cluster_ranks(t->comm, ranks);
    if (weft_comm_rank(t->comm) == 0)
        decide(t, ranks, h);
    int rc = weft_broadcast(t->comm, h, 2 + SHARES_MAX, WEFT_I64, 0);
    if (rc || h[0] == FROM_NONE)
        return rc;
    for (int k = 0; k < SHARES_MAX; k++)
        share[k] = (long)h[2 + k];
    rc = take(t, share, h[0] == FROM_REPLAN ? (long)h[1] : 0, 0);
    if (rc || weft_comm_rank(t->comm) != 0)
        return rc;
    char list[SHARES_MAX * 8];
    share_list(share, list, sizeof list);
    if (h[0] == FROM_REPLAN)
        run_say(t, WEFT_RUN_OUT, "elastic: step %ld: batch shares by cluster %s (re-plan %lld); "
                "this rank's outer weight %.3g\n", step, list, (long long)h[1],
                t->sync.cfg.weight);
    else
        run_say(t, WEFT_RUN_OUT, "elastic: step %ld: batch shares by cluster %s (the launch's, "
                "over the clusters left); this rank's outer weight %.3g\n", step, list,
                t->sync.cfg.weight);
    return 0;
}

void shares_launch(struct sync_churn *ch, const opts *o)
{
    memset(ch->share, 0, sizeof ch->share);
    if (o->batch_shares[0] && shares_parse(o->batch_shares, ch->share) < 1)
        memset(ch->share, 0, sizeof ch->share);
}

void shares_look(const train_sync *s, int64_t *h)
{
    const weft_run *t = s->run;
    const struct sync_churn *ch = s->churn;
    long share[SHARES_MAX] = { 0 }, ranks[SHARES_MAX], gen = 0, period = 0;
    int n = from_file(s->o->progress, share, &gen, &period);
    memset(h, 0, SHARES_LOOK * sizeof *h);
    h[0] = period;
    h[1] = gen;
    /* Shares the job does not hold yet, for the clusters present: a
     * re-plan for a cluster that joins or was lost fits only after the
     * membership change, which takes it (shares_change); nor while
     * joiners grown in catch up, whose admission takes the shares. */
    if (n < 1 || gen <= ch->shares_gen || t->el.late_was)
        return;
    cluster_ranks(s->comm, ranks);
    if (!fits(share, n, ranks, s->o->r.batch))
        return;
    h[2] = memcmp(share, ch->share, sizeof share) ? 1 : 2; /* 2: the same, a new number */
    for (int k = 0; k < SHARES_MAX; k++)
        h[3 + k] = share[k];
}

int shares_take(train_sync *s, const int64_t *h)
{
    weft_run *t = s->run;
    struct sync_churn *ch = s->churn;
    long share[SHARES_MAX];
    if (h[2] == 0)
        return 0;
    if (h[2] == 2) {
        ch->shares_gen = (long)h[1];
        return 0;
    }
    for (int k = 0; k < SHARES_MAX; k++)
        share[k] = (long)h[3 + k];
    int rc = take(t, share, (long)h[1], ch->steps);
    if (rc)
        return rc;
    ch->shares_taken++;
    if (weft_comm_rank(s->comm) == 0) {
        char list[SHARES_MAX * 8];
        share_list(share, list, sizeof list);
        run_say(t, WEFT_RUN_OUT, "elastic: step %ld: batch shares by cluster %s from here on "
                "(re-plan %lld, the same clusters); this rank's outer weight %.3g\n", ch->steps,
                list, (long long)h[1], s->cfg.weight);
    }
    return 0;
}
