/* Choosing by predicted time. Predictions walk schedules, so a selector
 * remembers its choices per size bucket; the bucket, not the exact size,
 * is what gets costed, which keeps the choice a function of the inputs
 * alone. */
#include "coll/tune/tuner.h"
#include "coll/algo.h"
#include "coll/tune/same_bits.h"
#include "coll/tune/trial.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SIM 256 /* ranks run together; above, a few walked alone */
#define NBUCKETS 496 /* 16 exact sizes, then 8 per octave up to 2^64 */
#define NESIZE 4     /* element sizes 1, 2, 4, 8 */

struct coll_tuner {
    cost_params c;
    int nranks, nhosts;
    int32_t *host;
    int32_t *cluster; /* NULL: one cluster */
    uint8_t *cache; /* [kind][esize class][bucket]: algo + 1, 0 when unknown */
    int measure;    /* WEFT_AUTOTUNE: try close candidates before settling */
    int fastest;    /* WEFT_AUTO_FASTEST: try them even where bits differ */
    trial *trials;  /* one per bucket that went on trial, settled or not */
    int ntrials, cap_trials;
};

#define ON_TRIAL 0xff /* cache mark: the bucket's trial is under way */

static unsigned bucket_of(uint64_t bytes, uint64_t *lower)
{
    if (bytes < 16) {
        *lower = bytes;
        return (unsigned)bytes;
    }
    int e = 63 - __builtin_clzll(bytes);
    uint64_t m = (bytes >> (e - 3)) & 7;
    *lower = (8 + m) << (e - 3);
    return 16u + (unsigned)(e - 4) * 8u + (unsigned)m;
}

/* The largest size in bytes' bucket. */
static uint64_t bucket_hi(uint64_t bytes)
{
    uint64_t lower;
    bucket_of(bytes, &lower);
    if (bytes < 16)
        return bytes;
    int e = 63 - __builtin_clzll(bytes);
    return lower + ((uint64_t)1 << (e - 3)) - 1;
}

static int esize_class(uint32_t esize)
{
    switch (esize) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    case 8: return 3;
    default: return -1;
    }
}

int coll_tuner_create_with(coll_tuner **out, int nranks, const int32_t *host,
                           const cost_params *c)
{
    *out = NULL;
    if (nranks < 1 || !c)
        return WEFT_EINVAL;
    coll_tuner *t = calloc(1, sizeof *t);
    if (!t)
        return WEFT_ENOMEM;
    t->c = *c;
    t->nranks = nranks;
    t->nhosts = 1;
    t->cache = calloc((size_t)WEFT_COLL_KIND_COUNT * NESIZE * NBUCKETS, 1);
    if (host)
        t->host = malloc((size_t)nranks * sizeof *t->host);
    if (!t->cache || (host && !t->host)) {
        coll_tuner_destroy(t);
        return WEFT_ENOMEM;
    }
    if (host) {
        int nh = 0;
        for (int r = 0; r < nranks; r++) {
            if (host[r] < 0 || host[r] >= nranks) {
                coll_tuner_destroy(t);
                return WEFT_EINVAL;
            }
            t->host[r] = host[r];
            if (host[r] + 1 > nh)
                nh = host[r] + 1;
        }
        t->nhosts = nh;
    }
    *out = t;
    return 0;
}

static int create(coll_tuner **out, int nranks, const int32_t *host, const cost_params *c,
                  int measure, int fastest)
{
    int rc = coll_tuner_create_with(out, nranks, host, c);
    if (!rc) {
        (*out)->measure = measure;
        (*out)->fastest = fastest;
    }
    return rc;
}

int coll_tuner_create_for(coll_tuner **out, const param_set *p, int nranks,
                          const int32_t *host, char *err, size_t cap)
{
    cost_params c;
    int rc = cost_from_params(&c, p, nranks, err, cap);
    *out = NULL;
    return rc ? rc : create(out, nranks, host, &c, p->autotune, p->auto_fastest);
}

int coll_tuner_create(coll_tuner **out, int nranks, const int32_t *host, char *err,
                      size_t cap)
{
    cost_params c;
    int measure = 1, fastest = 0, rc = cost_from_env(&c, err, cap);
    *out = NULL;
    if (!rc)
        rc = param_read_int(PARAM_autotune, &measure, err, cap);
    if (!rc)
        rc = param_read_int(PARAM_auto_fastest, &fastest, err, cap);
    return rc ? rc : create(out, nranks, host, &c, measure, fastest);
}

void coll_tuner_destroy(coll_tuner *t)
{
    if (!t)
        return;
    free(t->cache);
    free(t->host);
    free(t->cluster);
    free(t->trials);
    free(t);
}

const cost_params *coll_tuner_params(const coll_tuner *t) { return &t->c; }

int coll_tuner_set_clusters(coll_tuner *t, const int32_t *cluster, double alpha_wan,
                            double beta_wan)
{
    int spans = 0;
    for (int r = 1; cluster && r < t->nranks; r++)
        spans |= cluster[r] != cluster[0];
    free(t->cluster);
    t->cluster = NULL;
    memset(t->cache, 0, (size_t)WEFT_COLL_KIND_COUNT * NESIZE * NBUCKETS);
    if (t->c.alpha_wan < 0)
        t->c.alpha_wan = alpha_wan;
    if (t->c.beta_wan < 0)
        t->c.beta_wan = beta_wan;
    if (!spans)
        return 0;
    if (!(t->cluster = malloc((size_t)t->nranks * sizeof *t->cluster)))
        return WEFT_ENOMEM;
    memcpy(t->cluster, cluster, (size_t)t->nranks * sizeof *t->cluster);
    return 0;
}

static int collective(weft_coll_kind kind)
{
    return kind > WEFT_COLL_RECV && kind < WEFT_COLL_KIND_COUNT;
}

/* An algorithm predicted more than this many times the best is neither
 * chosen nor tried (trial_policy's widest ratio is 8): when a cheap lower
 * bound already says so, its full costing, which runs every rank's
 * schedule (naive's are P^2 messages: 70 ms of every rank's first call at
 * 256 ranks), is skipped. Choices are those of costing everything. */
#define PRUNE_RATIO 8.0

/* Costs the bucket's lower end (whole elements, at least one). prune:
 * leave out (secs -1) algorithms that cannot be chosen or tried. */
static weft_algo choose(const cost_params *c, const cost_layout *l, weft_coll_kind kind, uint64_t bytes, uint32_t esize,
                        double secs[WEFT_ALGO_COUNT], int *failed, int prune)
{
    uint64_t lower;
    weft_algo best = WEFT_ALGO_RING;
    double best_t = -1, low[WEFT_ALGO_COUNT];
    if (esize == 0)
        esize = 1;
    bucket_of(bytes, &lower);
    lower -= lower % esize;
    if (bytes && !lower)
        lower = esize;
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
        secs[a] = low[a] = -1;
    if (!collective(kind) || l->nranks < 2)
        return best;
    /* those with a price of their own first (cheap), then those with a
     * schedule in order of their lower bounds, so that a best is known
     * before the dearest come up */
    int order[WEFT_ALGO_COUNT], n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++) {
            const coll_algo *e = coll_algo_of((weft_algo)a);
            if (!coll_algo_does((weft_algo)a, kind) ||
                ((e->flags & COLL_ACROSS_HOSTS) && (!l->host || l->nhosts < 2)) ||
                (pass == 0) != (e->price != NULL))
                continue;
            if (pass == 1 && prune &&
                cost_floor(c, l, (weft_algo)a, kind, lower, esize, MAX_SIM, &low[a]))
                low[a] = -1;
            int i = n++;
            while (i > 0 && low[order[i - 1]] > low[a])
                i--;
            memmove(order + i + 1, order + i, (size_t)(n - 1 - i) * sizeof *order);
            order[i] = a;
        }
    for (int j = 0; j < n; j++) {
        int a = order[j];
        const coll_algo *e = coll_algo_of((weft_algo)a);
        double t;
        if (prune && best_t >= 0 && low[a] > PRUNE_RATIO * best_t)
            continue;
        int rc = e->price ? e->price(c, l, kind, lower, esize, &t)
                          : cost_predict(c, l, (weft_algo)a, kind, lower, esize, MAX_SIM, &t);
        if (rc) {
            if (rc != WEFT_ENOTSUP && failed)
                *failed = 1;
            continue;
        }
        secs[a] = t;
        if (best_t < 0 || t < best_t)
            best_t = t;
    }
    /* in algorithm order, so that ties go as they always have */
    best_t = -1;
    for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++)
        if (secs[a] >= 0 && (best_t < 0 || secs[a] < best_t)) {
            best_t = secs[a];
            best = (weft_algo)a;
        }
    return best;
}

weft_algo coll_tuner_predict(const coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                             uint32_t esize, double secs[WEFT_ALGO_COUNT])
{
    cost_layout l = { t->nranks, t->host, t->nhosts, t->cluster };
    return choose(&t->c, &l, kind, bytes, esize, secs, NULL, 0);
}

/* The cache slot of (kind, element size class, bytes' bucket). */
static size_t slot_of(weft_coll_kind kind, int ec, uint64_t bytes, uint64_t *lower)
{
    return ((size_t)kind * NESIZE + (size_t)ec) * NBUCKETS + bucket_of(bytes, lower);
}

static int trial_of(const coll_tuner *t, size_t key)
{
    int i = 0;
    while (i < t->ntrials - 1 && t->trials[i].key != key)
        i++;
    return i;
}

weft_algo coll_tuner_select(coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                            uint32_t esize)
{
    double secs[WEFT_ALGO_COUNT];
    uint64_t lower;
    int ec = esize_class(esize);
    if (!collective(kind) || t->nranks < 2)
        return WEFT_ALGO_RING;
    size_t i = slot_of(kind, ec < 0 ? 0 : ec, bytes, &lower);
    if (ec >= 0 && t->cache[i] == ON_TRIAL)
        return t->trials[trial_of(t, i)].model;
    if (ec >= 0 && t->cache[i])
        return (weft_algo)(t->cache[i] - 1);
    cost_layout l = { t->nranks, t->host, t->nhosts, t->cluster };
    int failed = 0;
    weft_algo a = choose(&t->c, &l, kind, bytes, esize, secs, &failed, 1);
    /* a failed prediction (no memory) is not remembered: it may differ */
    if (ec >= 0 && !failed)
        t->cache[i] = (uint8_t)(a + 1);
    return a;
}

/* How far above the best prediction a candidate may be predicted and still
 * be tried: the model's misses seen here were up to 5x where one call
 * costs microseconds and about 2x where it costs milliseconds. Every
 * candidate gets TRIAL_MAX_ROUNDS timed calls: with two, one call that
 * found the cores free while the other candidate's two did not settled a
 * 64 MiB all-reduce on an algorithm twice as slow. */
static void trial_policy(double best, double *ratio, int *rounds)
{
    *ratio = best < 1e-3 ? 8.0 : 3.0;
    *rounds = TRIAL_MAX_ROUNDS;
}

weft_algo coll_tuner_pick(coll_tuner *t, weft_coll_kind kind, uint64_t bytes, uint32_t esize,
                          int *ticket)
{
    double secs[WEFT_ALGO_COUNT], pred[TRIAL_MAX_CAND], ratio;
    weft_algo cand[TRIAL_MAX_CAND];
    uint64_t lower;
    int rounds, ec = esize_class(esize);
    *ticket = -1;
    if (!t->measure || ec < 0 || !collective(kind) || t->nranks < 2)
        return coll_tuner_select(t, kind, bytes, esize);
    size_t i = slot_of(kind, ec, bytes, &lower);
    if (t->cache[i] == ON_TRIAL) {
        *ticket = trial_of(t, i);
        return trial_turn(&t->trials[*ticket]);
    }
    if (t->cache[i])
        return (weft_algo)(t->cache[i] - 1);
    cost_layout l = { t->nranks, t->host, t->nhosts, t->cluster };
    int failed = 0;
    weft_algo a = choose(&t->c, &l, kind, bytes, esize, secs, &failed, 1);
    if (failed)
        return a;
    trial_policy(secs[a], &ratio, &rounds);
    /* Which candidate wins depends on the clock; unless told to prefer
     * the fastest, only those with the model's pick's bits may win, so
     * that a job gives the same bits run after run. */
    for (int k = 0; k < WEFT_ALGO_COUNT && !t->fastest; k++)
        if (secs[k] >= 0 && !tune_same_bits((weft_algo)k, a, kind, t->nranks, bucket_hi(bytes)))
            secs[k] = -1;
    int n = trial_candidates(secs, ratio, cand, pred);
    if (n >= 2 && t->ntrials == t->cap_trials) {
        int cap = t->cap_trials ? 2 * t->cap_trials : 16;
        trial *g = realloc(t->trials, (size_t)cap * sizeof *g);
        if (g) {
            t->trials = g;
            t->cap_trials = cap;
        }
    }
    if (n < 2 || t->ntrials == t->cap_trials) { /* nothing to try, or no memory to try it */
        t->cache[i] = (uint8_t)(a + 1);
        return a;
    }
    *ticket = t->ntrials++;
    trial_init(&t->trials[*ticket], i, lower ? lower : bytes, cand, pred, n, rounds);
    t->cache[i] = ON_TRIAL;
    return trial_turn(&t->trials[*ticket]);
}

int coll_tuner_timed(const coll_tuner *t, int ticket)
{
    const trial *tr = &t->trials[ticket];
    return !tr->settled && tr->calls >= tr->ncand;
}

int coll_tuner_record(coll_tuner *t, int ticket, uint64_t bytes, double secs,
                      double mine[TRIAL_MAX_CAND])
{
    trial *tr = &t->trials[ticket];
    if (!trial_record(tr, bytes, secs))
        return 0;
    memcpy(mine, tr->best, (size_t)tr->ncand * sizeof *mine);
    return tr->ncand;
}

weft_algo coll_tuner_settle(coll_tuner *t, int ticket, const double *agreed)
{
    trial *tr = &t->trials[ticket];
    weft_algo a = trial_settle(tr, agreed);
    t->cache[tr->key] = (uint8_t)(a + 1);
    return a;
}

void coll_tuner_log_trial(const coll_tuner *t, int ticket, int loglevel, int rank)
{
    const trial *tr = &t->trials[ticket];
    char line[512];
    size_t k = 0;
    if (rank != 0 || (loglevel & 0xff) < LOG_INFO || !((loglevel >> 8) & LOG_SUB_TUNING))
        return;
    weft_coll_kind kind = (weft_coll_kind)(tr->key / (NESIZE * NBUCKETS));
    for (int i = 0; i < tr->ncand && k < sizeof line; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "%s%s %.1f us (model %.1f)",
                              i ? ", " : "", weft_algo_name(tr->cand[i]), tr->agreed[i] * 1e6,
                              tr->pred[i] * 1e6);
    log_sub(loglevel, LOG_INFO, LOG_SUB_TUNING, rank, "%s %llu bytes measured: %s -> %s%s",
            weft_coll_name(kind), (unsigned long long)tr->lower, line,
            weft_algo_name(tr->chosen), tr->chosen == tr->model ? "" : " (not the model's pick)");
}

void coll_tuner_print(const coll_tuner *t, weft_coll_kind kind, uint64_t max_bytes, FILE *f)
{
    double secs[WEFT_ALGO_COUNT];
    fprintf(f, "# predicted %s time (us), %d ranks on %d host%s%s\n# %10s",
            weft_coll_name(kind), t->nranks, t->nhosts, t->nhosts == 1 ? "" : "s",
            t->cluster ? ", several clusters" : "", "size");
    for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++)
        fprintf(f, " %12s", weft_algo_name((weft_algo)a));
    fprintf(f, " %12s\n", "auto");
    for (uint64_t b = 8; b <= max_bytes; b *= 4) {
        weft_algo a = coll_tuner_predict(t, kind, b, 1, secs);
        fprintf(f, "  %10llu", (unsigned long long)b);
        for (int k = WEFT_ALGO_NAIVE; k < WEFT_ALGO_COUNT; k++) {
            if (secs[k] < 0)
                fprintf(f, " %12s", "-");
            else
                fprintf(f, " %12.1f", secs[k] * 1e6);
        }
        fprintf(f, " %12s\n", weft_algo_name(a));
    }
}

void coll_tuner_log(const coll_tuner *t, int loglevel, int rank)
{
    char line[512];
    if (!t || rank != 0 || (loglevel & 0xff) < LOG_INFO || !((loglevel >> 8) & LOG_SUB_TUNING))
        return;
    cost_format(&t->c, line, sizeof line);
    log_sub(loglevel, LOG_INFO, LOG_SUB_TUNING, rank, "cost model: %s", line);
    for (int k = WEFT_COLL_BROADCAST; k < WEFT_COLL_KIND_COUNT; k++)
        coll_tuner_print(t, (weft_coll_kind)k, (uint64_t)64 << 20, stderr);
    fflush(stderr);
}
