/* --elastic: data-parallel training that outlives a dead rank and takes in
 * new ones (docs/TRAINING.md, "Elastic training").
 *
 * A failed step is abandoned by every survivor: they shrink the job's
 * communicator, agree on the last step that any of them completed, and
 * the first survivor that completed it hands its parameters, optimiser
 * state, step and stream position to the others (a step's all-reduce that
 * returned on one rank had every rank's gradients in it, so its result is
 * a step of the whole job). The global batch stays what it was: the
 * stream of samples is the same for every world size, so the step that
 * failed is taken again over the survivors, and every sample of an epoch
 * is still seen once. Joiners (weftrun --elastic --restarts N) are
 * admitted at a step boundary by weft_comm_grow and get the same hand-over.
 *
 * With --pp/--tp (ZeRO 0) a replica is one tp x pp group, and it is whole
 * or nothing: a death drops the dead rank's replica. Its survivors leave
 * the job; the other replicas shrink the job, build the layout's groups
 * anew over dp - 1 replicas (each keeps its stage and tensor rank, so its
 * part of the model and optimiser) and take the failed step again over
 * the same stream of samples. Each rank keeps its state as of the
 * starts of this step and the one before (a copy a step), and all go back
 * to the first step that failed anywhere: a rank whose update went
 * through before a later collective failed, or that completed the step
 * and was failed by the others' leaving in the next, takes it again with
 * the others. No rank can get further ahead: a step needs every rank of
 * the replica. */
#include "churn.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* One --kill-at entry at a time; NULL at the end, or where one is bad. */
static const char *kill_entry(const char *p, long *rank, long *step, int *recover)
{
    char *end;
    *rank = strtol(p, &end, 10);
    if (end == p || *end != ':')
        return NULL;
    p = end + 1;
    *step = strtol(p, &end, 10);
    if (end == p || *rank < 0 || *step < 0)
        return NULL;
    *recover = strncmp(end, ":recover", 8) == 0;
    end += *recover ? 8 : 0;
    if (*end == ',')
        return end + 1;
    return *end ? NULL : end;
}

int elastic_option(opts *o, const char *key, const char *v)
{
    if (strcmp(key, "kill-at") == 0) {
        long r, s;
        int rec;
        const char *p = v;
        while (p && *p)
            p = kill_entry(p, &r, &s, &rec);
        if (!p || strlen(v) >= sizeof o->kill_at)
            die("--kill-at: want RANK:STEP[:recover][,...], not '%s'", v);
        strcpy(o->kill_at, v);
        return 1;
    }
    if (strcmp(key, "trace-samples") == 0) {
        if (strlen(v) + 16 >= sizeof o->trace)
            die("--trace-samples: path too long");
        strcpy(o->trace, v);
        return 1;
    }
    return 0;
}

/* The test hook: this launch rank dies here, as kill -9 would kill it. */
void kill_point(const trainer *t, long step, int recover)
{
    long r, s;
    int rec;
    const char *p = t->o->kill_at;
    if (t->el.slot < 0)
        return; /* a replacement is not killed again */
    while (p && *p) {
        p = kill_entry(p, &r, &s, &rec);
        if (r == t->el.slot && s == step && rec == recover) {
            fflush(NULL);
            raise(SIGKILL);
        }
    }
}

void elastic_check(const opts *o, weft_comm *comm)
{
    if (!o->elastic)
        return;
    if (o->ps)
        die("--elastic is data parallel; --mode ps has its own recovery");
    if (o->layout_auto)
        die("--elastic with --layout auto is not supported: give --pp/--tp (ZeRO 0)");
    int g = (o->pp > 1 ? o->pp : 1) * (o->tp > 1 ? o->tp : 1);
    if (g > 1 && o->zero > 0)
        die("--elastic with --pp/--tp takes --zero 0: ZeRO %d shards the state over the "
            "replicas, and a replica lost would take its shards with it", o->zero);
    if (g > 1 && comm && weft_comm_size(comm) / g < 2)
        die("--elastic with --tp %d --pp %d needs 2 replicas at least (%d ranks): a death "
            "in the only one leaves nothing to go on with", o->tp > 1 ? o->tp : 1,
            o->pp > 1 ? o->pp : 1, weft_comm_size(comm));
    weft_sync_config sc;
    weft_sync_parse(o->sync, &sc); /* parse_args checked it */
    if (sc.mode == WEFT_SYNC_STREAMING)
        die("--elastic with --sync %s is not supported: a fragment's outer reduction in "
            "flight when a cluster is lost would have to be undone; take diloco:H or "
            "hier:full/diloco:H", o->sync);
    if (sc.mode != WEFT_SYNC_FULL && sc.mode != WEFT_SYNC_DILOCO)
        die("--elastic takes --sync full, diloco:H or hier:full/diloco:H, not --sync %s",
            o->sync);
    if (sc.mode == WEFT_SYNC_DILOCO && o->compress[0])
        die("--elastic with --sync %s takes no --compress: the compressor's error feedback "
            "is not carried over a membership change", o->sync);
    if (sc.mode == WEFT_SYNC_DILOCO && o->zero)
        die("--elastic with --sync %s takes --zero 0", o->sync);
    if (comm && weft_comm_size(comm) > o->r.batch)
        die("--elastic: %d ranks cannot share a batch of %d", weft_comm_size(comm), o->r.batch);
}

/* ---- the sample trace (--trace-samples) ---------------------------------- */

void elastic_trace(trainer *t, long step, const weft_batch *b)
{
    trace_slot *sl = &t->el.tr;
    if (!t->el.trace || (t->pl && !pipeline_traces(t->pl)))
        return;
    uint64_t *ids = realloc(sl->ids, (size_t)(b->n > 0 ? b->n : 1) * sizeof *ids);
    if (!ids)
        die("out of memory");
    sl->ids = ids;
    memcpy(ids, b->index, (size_t)b->n * sizeof *ids);
    sl->n = b->n;
    sl->step = step;
}

/* Lines "step id view": a step taken again after ZeRO 1-3 went back to it
 * is there twice, and its later view is the one that counts. */
void elastic_commit(trainer *t, long next)
{
    elastic_state *e = &t->el;
    trace_slot *sl = &e->tr;
    if (!e->trace || sl->step < 0)
        return;
    if (sl->step < next)
        for (int i = 0; i < sl->n; i++)
            fprintf(e->trace, "%ld %llu %lld\n", sl->step, (unsigned long long)sl->ids[i],
                    (long long)e->view);
    fflush(e->trace);
    sl->step = -1;
}

/* ---- leaving one communicator and entering the next ---------------------- */

/* Parameters and optimiser state, kept while the training state is rebuilt
 * (full_open's broadcast from rank 0 would overwrite the parameters). */
void keep_state(trainer *t)
{
    elastic_state *e = &t->el;
    size_t n = t->nparams;
    int ns = weft_optim_state_count(t->opt);
    float *k = realloc(e->keep, (size_t)(ns + 1) * n * sizeof *k);
    if (!k)
        die("out of memory");
    e->keep = k;
    memcpy(k, weft_model_params(t->m, &n), n * sizeof *k);
    for (int i = 0; i < ns; i++)
        memcpy(k + (size_t)(i + 1) * n, weft_optim_state(t->opt, i, NULL), n * sizeof *k);
    e->keep_steps = weft_optim_steps(t->opt);
}

/* The kept state and the one before change places: back to the start of
 * the step before (after keep_step). */
static void back_one(elastic_state *e)
{
    float *k = e->keep;
    int64_t steps = e->keep_steps;
    e->keep = e->prev;
    e->keep_steps = e->prev_steps;
    e->prev = k;
    e->prev_steps = steps;
}

/* --pp/--tp at a step's start: the starts of this step and the one
 * before are kept (ranks may fail a step apart). */
static void keep_step(trainer *t)
{
    back_one(&t->el);
    keep_state(t);
}

static void restore_state(trainer *t)
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

/* Ends the training state on the communicator in use and destroys it. */
void leave_comm(trainer *t)
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

/* The training state over c (the data-parallel group of the job), with
 * the kept state restored. */
int enter_comm(trainer *t, weft_comm *c, weft_comm *job)
{
    t->comm = c;
    t->job = job;
    t->rank = c ? weft_comm_rank(c) : 0;
    t->world = c ? weft_comm_size(c) : 1;
    sync_pick(&t->sync, t->o, c);
    int rc = sync_open(&t->sync, t->m, &t->el.keep_oc, NULL);
    if (!t->sync.z)
        die("elastic: the training state over %d ranks: %s", t->world, weft_strerror(rc));
    if (t->sync.comm != c) { /* the churn mode waited for a cluster's other ranks */
        t->comm = t->job = t->sync.comm;
        t->rank = weft_comm_rank(t->comm);
        t->world = weft_comm_size(t->comm);
    }
    t->opt = weft_zero_optim(t->sync.z);
    if (t->o->zero == 0)
        restore_state(t); /* stages 1-3: weft_zero_import, after the hand-over */
    if (t->pl)
        pipeline_attach(t->pl, t->m, t->sync.z);
    return rc;
}

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

/* What the members agree on besides the state: step k, the optimiser's
 * step count, the stream position of step k, the launch's shape, and the
 * number of the membership view that starts (the trace's). */
void header(const trainer *t, long k, int64_t opt_steps, int64_t h[6])
{
    const elastic_state *e = &t->el;
    h[0] = k;
    h[1] = opt_steps;
    h[2] = (int64_t)(e->pos_base + (uint64_t)(k - e->step_base) * (uint64_t)t->o->r.batch);
    h[3] = e->world0;
    h[4] = e->accum0;
    h[5] = e->view + 1;
}

/* Each rank's part of the stream from step h[0] on, over the world as it is now. */
void apply_header(trainer *t, const int64_t h[6], long *step)
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
    t->loader = data_loader(&t->o->r, t->d, t->rank, t->world, t->o->accum, "ranks");
    weft_loader_seek(t->loader, e->pos_base);
    elastic_commit(t, e->step_base);
    *step = e->step_base;
}

/* Every member takes the state of the first one that completed the most
 * steps (done: steps this rank completed; -1: a joiner). Sets *step. */
static int hand_over(trainer *t, long done, long *step)
{
    weft_comm *c = t->comm;
    int64_t most = done;
    int rc, root, me;
    if ((rc = weft_allreduce(c, &most, &most, 1, WEFT_I64, WEFT_MAX)))
        return rc;
    me = done == most ? t->rank : INT_MAX;
    if ((rc = weft_allreduce(c, &me, &root, 1, WEFT_I32, WEFT_MIN)))
        return rc;
    int64_t h[6];
    header(t, most, weft_optim_steps(t->opt), h);
    if ((rc = weft_broadcast(c, h, 6, WEFT_I64, root)))
        return rc;
    size_t n;
    float *p = weft_model_params(t->m, &n);
    if ((rc = weft_broadcast(c, p, n, WEFT_F32, root)))
        return rc;
    for (int i = 0; i < weft_optim_state_count(t->opt); i++)
        if ((rc = weft_broadcast(c, weft_optim_state(t->opt, i, NULL), n, WEFT_F32, root)))
            return rc;
    weft_optim_set_steps(t->opt, h[1]);
    apply_header(t, h, step);
    return 0;
}

/* ZeRO 1-3: full holds this rank's part of the whole state (zeros
 * elsewhere; a joiner's is all zeros), h (rank 0's counts) the step it is
 * of. The sum over the new world is the whole state; each rank keeps its
 * new shards of it, and replicates them at once (the next failure finds
 * copies in the new layout). */
static int reshard(trainer *t, int64_t h[6], float *full, long *step)
{
    int rc = weft_broadcast(t->comm, h, 6, WEFT_I64, 0);
    if (rc == 0)
        rc = weft_allreduce(t->comm, full, full, weft_zero_full_count(t->sync.z), WEFT_F32,
                            WEFT_SUM);
    if (rc == 0)
        rc = weft_zero_import(t->sync.z, full, h[1]);
    if (rc == 0)
        rc = weft_zero_replicate(t->sync.z, h[0]);
    if (rc)
        return rc;
    t->el.gen = h[0];
    apply_header(t, h, step);
    return 0;
}

/* A whole-state buffer of zeros for reshard. */
static float *full_new(const trainer *t)
{
    float *f = calloc(weft_zero_full_count(t->sync.z), sizeof *f);
    if (!f)
        die("out of memory");
    return f;
}

/* After a join: whether every rank's parameters are bit-identical (a
 * hash of their bytes compared over c); *hash: this rank's. */
int params_same(weft_comm *c, weft_model *m, uint64_t *hash, int *same)
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

int params_agree(trainer *t, uint64_t *hash, int *same)
{
    return params_same(t->comm, t->m, hash, same);
}

/* Rank 0 of a new world speaks for the job from here on. */
void take_lead(trainer *t)
{
    if (weft_comm_rank(t->job) != 0 || t->lead)
        return;
    t->lead = 1;
    t->o->quiet = t->el.quiet0;
    t->pg.quiet = t->o->quiet;
    if (t->o->metrics[0])
        t->pg.csv = csv_open(t->o->metrics, 1);
}

void report_change(trainer *t, long step, const char *kind, const char *what, double took)
{
    if (!t->lead)
        return;
    char line[512];
    snprintf(line, sizeof line, "%s; %d ranks now, %d micro-%s a step; %s in %.3f s", what,
             weft_comm_size(t->job), t->pl ? pipeline_micro(t->pl) : t->o->accum,
             t->pl ? "batch(es)" : "step(s)", strcmp(kind, "grow") ? "recovered" : "admitted", took);
    printf("elastic: step %ld: %s\n", step, line); /* --quiet too: it changes the job */
    fflush(stdout);
    csv_event(t->pg.csv, step, (double)t->el.pos_base / (double)t->d->ti.n, kind,
              now_s() - t->pg.start, line);
}

/* ---- the entry points ---------------------------------------------------- */

void elastic_open(trainer *t, long *step, int quiet, int joined)
{
    elastic_state *e = &t->el;
    const char *slot = getenv("WEFT_RANK");
    int rc = 0;
    memset(e, 0, sizeof *e);
    e->slot = joined ? -1 : t->job ? weft_comm_rank(t->job) : 0;
    e->world0 = t->world;
    e->accum0 = t->o->accum;
    e->quiet0 = quiet;
    e->step_base = t->start_step;
    e->pos_base = weft_loader_position(t->loader);
    e->tr.step = -1;
    e->idle_step = -1;
    e->gen = t->start_step;
    if (!t->o->elastic || !t->job)
        return;
    e->keep_oc = *weft_optim_config_of(t->opt);
    if (t->o->trace[0]) {
        char path[sizeof t->o->trace + 32];
        snprintf(path, sizeof path, "%s.%s", t->o->trace, slot ? slot : "0");
        if (!(e->trace = fopen(path, "a")))
            die("--trace-samples: cannot write %s", path);
    }
    if (!joined) { /* the first copies of the shards (ZeRO 1-3) */
        if ((rc = weft_zero_replicate(t->sync.z, e->gen)))
            die("elastic: the first shard replicas: %s: %s", weft_strerror(rc),
                weft_comm_error(t->comm));
        return;
    }
    /* the members are in their grow's hand-over, after the same sync_open */
    uint64_t h;
    int same;
    if (t->sync.churn) {
        rc = churn_join(t, step);
    } else if (t->o->zero == 0) {
        keep_state(t);
        rc = hand_over(t, -1, step);
    } else {
        int64_t hd[6] = { 0 };
        float *full = full_new(t);
        rc = reshard(t, hd, full, step);
        free(full);
    }
    if (rc == 0)
        rc = params_agree(t, &h, &same);
    if (rc)
        die("elastic: joining: %s: %s", weft_strerror(rc), weft_comm_error(t->comm));
    e->joined_now = 1;
    if (!t->o->quiet)
        printf("elastic: joined as rank %d of %d at step %ld\n", t->rank, t->world, *step);
}

/* ZeRO 1-3: the shards' copies out of the training state, which may go. */
static weft_zero_replicas *take_replicas(trainer *t)
{
    weft_zero_replicas *r = NULL;
    if (t->o->zero > 0)
        weft_zero_take_replicas(t->sync.z, &r);
    return r;
}

/* Members at a boundary: every one has completed step *step, so each
 * gives its own shards of that step. */
static int grow_hand_over(trainer *t, weft_comm *g, long *step)
{
    if (t->sync.churn)
        return churn_grow_hand_over(t, g, step);
    if (t->o->zero == 0) {
        keep_state(t);
        leave_comm(t);
        int rc = enter_comm(t, g, g);
        return rc ? rc : hand_over(t, *step, step);
    }
    weft_zero_replicas *r = take_replicas(t);
    int64_t h[6], steps = 0;
    unsigned char *gone = calloc((size_t)t->world, 1);
    float *full = full_new(t);
    if (!gone)
        die("out of memory");
    if (!r || weft_zero_replicas_export(r, t->el.gen, gone, full, &steps))
        die("elastic: step %ld: no shard copies of step %lld to hand over", *step,
            (long long)t->el.gen);
    header(t, *step, steps, h);
    weft_zero_replicas_free(r);
    free(gone);
    leave_comm(t);
    int rc = enter_comm(t, g, g);
    if (rc == 0)
        rc = reshard(t, h, full, step);
    free(full);
    return rc;
}

int elastic_boundary(trainer *t, long *step)
{
    elastic_state *e = &t->el;
    if (!t->o->elastic || !t->job)
        return 0;
    e->opt_steps0 = weft_optim_steps(t->opt);
    if (t->pl) { /* no joiners (elastic_open) */
        keep_step(t); /* the step may have to be taken again from here */
        kill_point(t, *step, 0);
        return 0;
    }
    if (e->joined_now) { /* its members' grow is behind them */
        e->joined_now = 0;
        kill_point(t, *step, 0);
        return 0;
    }
    if (t->sync.churn && !churn_boundary(&t->sync)) { /* joiners wait for the outer step */
        kill_point(t, *step, 0);
        return 0;
    }
    double t0 = now_s();
    weft_comm *g = NULL;
    int rc = weft_comm_grow(t->comm, 0, &g), was = t->world;
    if (rc == 0 && g) {
        uint64_t h = 0;
        int same = 0;
        rc = grow_hand_over(t, g, step);
        if (rc && t->o->zero > 0)
            die("elastic: step %ld: a rank failed while others joined (%s); with --zero %d "
                "the shards cannot be recovered from there: resume from the last checkpoint",
                *step, weft_strerror(rc), t->o->zero);
        if (rc == 0)
            rc = params_agree(t, &h, &same);
        if (rc == 0) {
            char what[256], cl[64] = "";
            if (t->sync.churn)
                churn_joined(t, was, cl, sizeof cl);
            snprintf(what, sizeof what, "%s%d rank(s) joined as rank %d..%d; parameters %s "
                     "(hash %016llx)", cl, t->world - was, was, t->world - 1,
                     same ? "bit-identical on every rank" : "DIFFER between ranks",
                     (unsigned long long)h);
            report_change(t, *step, "grow", what, now_s() - t0);
        }
    }
    if (rc) {
        /* the others may have seen it in the step: every survivor starts
         * the step again at its boundary, with a grow */
        if (!elastic_recover(t, step, rc))
            die("elastic: step %ld: %s", *step, weft_strerror(rc));
        return 2;
    }
    kill_point(t, *step, 0);
    return g != NULL;
}

int elastic_step_done(trainer *t, long step)
{
    int rc = 0;
    if (t->o->elastic && t->comm && t->o->zero > 0) {
        if ((rc = weft_zero_replicate(t->sync.z, step + 1)))
            return rc;
        t->el.gen = step + 1;
    }
    elastic_commit(t, step + 1);
    return 0;
}

/* ZeRO 1-3 after a shrink: the survivors go back to the last step that
 * all of them completed (the copies of the step after it may be missing
 * on some), and rebuild the whole state from their shards and the dead
 * ranks' copies. */
static int recover_shards(trainer *t, const weft_zero_replicas *r, long done,
                          const int *olds, long *step)
{
    int64_t k = done, steps = 0, h[6];
    int rc = weft_allreduce(t->comm, &k, &k, 1, WEFT_I64, WEFT_MIN), was;
    if (rc)
        return rc;
    was = weft_zero_replicas_world(r);
    unsigned char *gone = malloc((size_t)was);
    float *full = full_new(t);
    if (!gone)
        die("out of memory");
    memset(gone, 1, (size_t)was);
    for (int i = 0; i < t->world; i++)
        gone[olds[i]] = 0;
    rc = weft_zero_replicas_export(r, k, gone, full, &steps);
    if (rc == WEFT_ENOTSUP)
        die("elastic: two neighbouring ranks died together and took both copies of a ZeRO-%d "
            "shard with them: resume from the last checkpoint (--save/--resume)", t->o->zero);
    if (rc)
        die("elastic: no shard copies of step %lld here", (long long)k);
    header(t, (long)k, steps, h);
    rc = reshard(t, h, full, step);
    free(full);
    free(gone);
    return rc;
}

/* "rank(s) 1 3 of 4 gone (why at step k)": the old ranks of was not
 * among the n survivors' olds (ascending); the length written. */
size_t gone_ranks(char *what, size_t cap, const int *olds, int n, int was, const char *why,
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

/* A failure that took nobody (a mismatch, a timeout) must not repeat for
 * ever at one step. */
void count_idle(elastic_state *e, int lost_none, long failed_at, const char *why)
{
    e->idle_fails = lost_none && e->idle_step == failed_at ? e->idle_fails + 1 : 0;
    e->idle_step = failed_at;
    if (e->idle_fails >= 3)
        die("elastic: step %ld failed %d times with every rank alive (%s)", failed_at,
            e->idle_fails + 1, why);
}

/* --pp/--tp: the training state leaves the failed step and its groups;
 * every peer still blocked in one of them fails at once. The state kept
 * is the step's start (elastic_boundary). */
static void leave_layout(trainer *t)
{
    pipeline_abort(t->pl);
    if (t->sync.mreq) {
        weft_wait(t->sync.mreq);
        t->sync.mreq = NULL;
    }
    sync_close(&t->sync);
    t->opt = NULL;
    pipeline_abandon(t->pl);
    t->comm = NULL;
}

/* A round of a recovery: the survivors of *w agree on who is left (a
 * death during it is the next round's failure), *w becomes their
 * communicator of *n, and olds their ranks before the failure. */
int shrink_round(trainer *t, weft_comm **w, long failed_at, int old, int *olds, int *n)
{
    weft_comm *s;
    int rc = weft_comm_shrink(*w, &s);
    if (rc)
        die("elastic: step %ld: no agreement on the survivors (%s): %s", failed_at,
            weft_strerror(rc), weft_comm_error(*w));
    weft_comm_destroy(*w);
    *w = s;
    kill_point(t, failed_at, 1);
    *n = weft_comm_size(s);
    return weft_allgather(s, &old, olds, 1, WEFT_I32);
}

/* --pp/--tp: the survivors of a broken replica leave the job; the whole
 * replicas go on from the failed step over a layout of themselves. */
static int layout_recover(trainer *t, long *step, int rc)
{
    elastic_state *e = &t->el;
    double t0 = now_s();
    long failed_at = *step;
    int was = weft_comm_size(t->job), old = weft_comm_rank(t->job), lost = -1, wholes = 0;
    int n = was, whole = 0;
    char why[160];
    snprintf(why, sizeof why, "%s", weft_strerror(rc));
    int *olds = calloc((size_t)was, sizeof *olds);
    if (!olds)
        die("out of memory");
    leave_layout(t);
    weft_comm *w = t->job, *mine = NULL;
    while (rc) { /* a death during the recovery: shrink what it left */
        rc = shrink_round(t, &w, failed_at, old, olds, &n);
        t->job = w;
        if (rc == 0) {
            whole = pipeline_whole(t->pl, olds, n, &lost, &wholes);
            if (wholes == 0)
                die("elastic: step %ld: every replica lost a rank (%s); none is whole to go "
                    "on with: resume from the last checkpoint (--save/--resume)", failed_at,
                    why);
            rc = weft_comm_split(w, whole ? 0 : -1, 0, &mine);
        }
    }
    weft_comm_destroy(w); /* the leavers take part in its last barrier */
    t->job = mine;
    if (!whole) { /* the job goes on without this rank: nothing of it is lost */
        printf("elastic: rank %d leaves: its replica lost rank %d (step %ld, %s)\n", old, lost,
               failed_at, why);
        fflush(stdout);
        if (t->pg.csv)
            fclose(t->pg.csv);
        t->pg.csv = NULL;
        free(olds);
        return 3;
    }
    /* every rank goes back to the start of the first failed step: its own
     * (also where its update went through before a later collective
     * failed), or the one before, when a rank that completed the step was
     * failed by the others' leaving in the next */
    int64_t span[2] = { failed_at, -failed_at };
    rc = weft_allreduce(mine, span, span, 2, WEFT_I64, WEFT_MAX);
    long first = (long)-span[1];
    if (rc == 0 && span[0] - first > 1)
        die("elastic: step %ld: ranks failed in steps %ld and %lld: resume from the last "
            "checkpoint (--save/--resume)", failed_at, first, (long long)span[0]);
    if (rc == 0 && failed_at > first)
        back_one(e);
    if (rc == 0 && (rc = pipeline_reopen(t->pl, t->o, mine, &t->m)) == 0)
        rc = enter_comm(t, pipeline_dp_comm(t->pl), mine);
    if (rc == 0 && t->comm)
        rc = hand_over(t, first, step); /* the replicas' states: bit-identical */
    else if (rc == 0) {
        int64_t h[6];
        header(t, first, weft_optim_steps(t->opt), h);
        apply_header(t, h, step);
    }
    if (rc)
        die("elastic: step %ld: a rank failed while the layout was rebuilt (%s): %s", failed_at,
            weft_strerror(rc), weft_comm_error(mine));
    take_lead(t);
    count_idle(e, n == was, failed_at, why);
    char what[256];
    int left = n - weft_comm_size(mine);
    size_t len = gone_ranks(what, sizeof what, olds, n, was, why, failed_at);
    if (len < sizeof what)
        snprintf(what + len, sizeof what - len, ", %d left with their replica(s)", left);
    report_change(t, *step, "shrink", what, now_s() - t0);
    free(olds);
    return 1;
}

int elastic_recover(trainer *t, long *step, int rc)
{
    elastic_state *e = &t->el;
    if (!t->o->elastic || !t->job)
        return 0;
    if (t->pl)
        return layout_recover(t, step, rc);
    if (t->sync.churn)
        return churn_recover(t, step, rc);
    double t0 = now_s();
    long failed_at = *step, done = *step + (weft_optim_steps(t->opt) > e->opt_steps0);
    int was = t->world, old_rank = t->rank;
    char why[160];
    snprintf(why, sizeof why, "%s", weft_strerror(rc));
    /* who is gone, in the ranks of the world before the failure */
    int *olds = calloc((size_t)was, sizeof *olds);
    if (!olds)
        die("out of memory");
    weft_zero_replicas *r = take_replicas(t);
    if (t->o->zero == 0)
        keep_state(t);
    else
        done = (long)e->gen; /* a step counts once its shards are copied */
    while (rc) { /* a death during the recovery: shrink what it left */
        weft_comm *s;
        int src = weft_comm_shrink(t->comm, &s);
        if (src)
            die("elastic: step %ld: no agreement on the survivors (%s): %s", failed_at,
                weft_strerror(src), weft_comm_error(t->comm));
        leave_comm(t);
        kill_point(t, failed_at, 1);
        rc = enter_comm(t, s, s);
        if (rc == 0)
            rc = weft_allgather(t->comm, &old_rank, olds, 1, WEFT_I32);
        if (rc == 0)
            rc = r ? recover_shards(t, r, done, olds, step) : hand_over(t, done, step);
    }
    weft_zero_replicas_free(r);
    take_lead(t);
    count_idle(e, t->world == was, failed_at, why);
    char what[256];
    gone_ranks(what, sizeof what, olds, t->world, was, why, failed_at);
    report_change(t, *step, "shrink", what, now_s() - t0);
    free(olds);
    return 1;
}

void elastic_close(trainer *t)
{
    elastic_state *e = &t->el;
    if (e->trace)
        fclose(e->trace);
    free(e->tr.ids);
    free(e->keep);
    free(e->prev);
    memset(e, 0, sizeof *e);
}
