/* The sync modes' per-rank state in a sharded save. In local SGD, DiLoCo
 * and gossip every rank's model and optimiser drift apart between the
 * mode's exchanges, so the save's shard files (the first rank's model)
 * cannot resume them exactly: each rank also writes its own side file,
 * a weft_ckpt of its parameters, optimiser, rng and the mode's counters
 * and buffers, which the save's commit covers as it covers the shards
 * (written before the status reduction, so a save whose manifest exists
 * has them all). The loader of the manifest never reads them. */
#include "run/run_ckpt_sync.h"

#include "coll/compress.h"
#include "train/sync_outer.h"

#include <stdio.h>
#include <string.h>

int ckpt_sync_kind(const train_sync *s)
{
    if (!s->comm)
        return 0;
    if (s->cz)
        return 1;
    if (s->cfg.mode == WEFT_SYNC_FULL)
        return 0;
    if (s->churn || !s->sy || sync_outer_of(s->sy))
        return -1;
    switch (s->cfg.mode) {
    case WEFT_SYNC_LOCAL:
    case WEFT_SYNC_DILOCO:
    case WEFT_SYNC_GOSSIP:
        return 1;
    default:
        return -1;
    }
}

static int job_rank(const weft_run *t)
{
    return t->job ? weft_comm_rank(t->job) : 0;
}

static int job_size(const weft_run *t)
{
    return t->job ? weft_comm_size(t->job) : 1;
}

/* Full sync's compressor: its error feedback and PowerSGD's warm-started
 * Q, this rank's own (the model and optimiser are every rank's alike). */
static int put_compressor(const weft_compressor *z, weft_ckpt *c)
{
    int64_t ne[1] = { (int64_t)z->count }, nq[1] = { (int64_t)z->q_len };
    int rc = weft_ckpt_put_u64(c, "sync/q_ready", (uint64_t)z->q_ready);
    if (rc == 0 && z->err)
        rc = weft_ckpt_put_tensor(c, "sync/error_feedback", WEFT_F32, z->err, 1, ne);
    if (rc == 0 && z->q && z->q_len)
        rc = weft_ckpt_put_tensor(c, "sync/powersgd_q", WEFT_F32, z->q, 1, nq);
    return rc;
}

/* Local SGD, DiLoCo and gossip: the rank's own model, optimiser and the
 * weft_sync's counter and buffers. */
static int put_models(weft_run *t, weft_ckpt *c)
{
    train_sync *s = &t->sync;
    long *steps;
    float *anchor, *vel;
    size_t n;
    weft_model_params(t->m, &n);
    sync_state(s->sy, &steps, &anchor, &vel);
    int64_t shape[1] = { (int64_t)n };
    int rc = weft_ckpt_put_u64(c, "sync/steps", (uint64_t)*steps);
    if (rc == 0)
        rc = weft_ckpt_put_model(c, t->m);
    if (rc == 0)
        rc = weft_zero_put_optim(s->z, c); /* this rank's alone: nothing collective */
    if (rc == 0 && anchor)
        rc = weft_ckpt_put_tensor(c, "sync/anchor", WEFT_F32, anchor, 1, shape);
    if (rc == 0 && vel)
        rc = weft_ckpt_put_tensor(c, "sync/velocity", WEFT_F32, vel, 1, shape);
    return rc;
}

static int put_state(weft_run *t, weft_ckpt *c, int jr, long step)
{
    int rc = weft_ckpt_put_str(c, "sync/mode", t->o->sync);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "sync/compress", t->o->compress);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "sync/world", (uint64_t)job_size(t));
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "sync/rank", (uint64_t)jr);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "train/step", (uint64_t)step);
    if (rc == 0)
        rc = weft_ckpt_put_rng(c, "rng", &t->rng);
    if (rc == 0)
        rc = t->sync.cz ? put_compressor(t->sync.cz, c) : put_models(t, c);
    return rc;
}

int ckpt_sync_save(weft_run *t, const char *save, int jr, long step, char *why, size_t cap)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/sync-%05d.wckpt", save, jr);
    weft_ckpt *c = NULL;
    int rc = weft_ckpt_new(&c);
    if (rc == 0)
        rc = put_state(t, c, jr, step);
    if (rc == 0)
        rc = weft_ckpt_save(c, path);
    weft_ckpt_free(c);
    if (rc)
        snprintf(why, cap, "writing %s: %s", path, weft_strerror(rc));
    return rc;
}

/* The save --resume names: its latest's, or the directory itself. */
static void save_dir(const char *resume, char *out, size_t cap)
{
    char latest[4200], name[256] = "";
    snprintf(latest, sizeof latest, "%s/latest", resume);
    FILE *f = fopen(latest, "r");
    if (f) {
        if (!fgets(name, sizeof name, f))
            name[0] = 0;
        fclose(f);
        name[strcspn(name, "\r\n")] = 0;
    }
    if (name[0])
        snprintf(out, cap, "%s/%s", resume, name);
    else
        snprintf(out, cap, "%s", resume);
}

/* This rank's side file of the save, if written at this layout (its step
 * the manifest's); NULL otherwise. */
static weft_ckpt *own_file(const train_sync *s, const weft_ckpt *ck)
{
    const weft_run *t = s->run;
    char dir[4300], path[4400], mode[sizeof t->o->sync], cz[sizeof t->o->compress];
    save_dir(t->o->resume, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/sync-%05d.wckpt", dir, job_rank(t));
    weft_ckpt *c = NULL;
    uint64_t world, rank, step, at;
    if (weft_ckpt_load(&c, path) != 0)
        return NULL;
    if (weft_ckpt_get_str(c, "sync/mode", mode, sizeof mode) != 0 ||
        weft_ckpt_get_str(c, "sync/compress", cz, sizeof cz) != 0 ||
        weft_ckpt_get_u64(c, "sync/world", &world) != 0 ||
        weft_ckpt_get_u64(c, "sync/rank", &rank) != 0 ||
        weft_ckpt_get_u64(c, "train/step", &step) != 0 ||
        weft_ckpt_get_u64(ck, "train/step", &at) != 0 || strcmp(mode, t->o->sync) != 0 ||
        strcmp(cz, t->o->compress) != 0 || world != (uint64_t)job_size(t) ||
        rank != (uint64_t)job_rank(t) || step != at) {
        weft_ckpt_free(c);
        return NULL;
    }
    return c;
}

static int get_compressor(weft_compressor *z, const weft_ckpt *c)
{
    uint64_t ready = 0;
    int rc = weft_ckpt_get_u64(c, "sync/q_ready", &ready);
    if (rc == 0 && z->err)
        rc = weft_ckpt_get_f32(c, "sync/error_feedback", z->err, z->count);
    if (rc == 0 && z->q && z->q_len)
        rc = weft_ckpt_get_f32(c, "sync/powersgd_q", z->q, z->q_len);
    if (rc == 0)
        z->q_ready = (int)ready;
    return rc;
}

static int get_models(train_sync *s, const weft_ckpt *c)
{
    weft_run *t = s->run;
    long *steps;
    float *anchor, *vel;
    size_t n;
    uint64_t v = 0;
    weft_model_params(t->m, &n);
    sync_state(s->sy, &steps, &anchor, &vel);
    int rc = weft_ckpt_get_params(c, t->m);
    if (rc == 0)
        rc = weft_zero_load_optim(s->z, c);
    if (rc == 0)
        rc = weft_ckpt_get_u64(c, "sync/steps", &v);
    if (rc == 0 && anchor)
        rc = weft_ckpt_get_f32(c, "sync/anchor", anchor, n);
    if (rc == 0 && vel)
        rc = weft_ckpt_get_f32(c, "sync/velocity", vel, n);
    if (rc == 0)
        *steps = (long)v;
    return rc;
}

static int get_state(train_sync *s, const weft_ckpt *c)
{
    int rc = weft_ckpt_get_rng(c, "rng", &s->run->rng);
    if (rc == 0)
        rc = s->cz ? get_compressor(s->cz, c) : get_models(s, c);
    return rc;
}

/* Lead only: the warning that the mode's state starts afresh. */
static void warn_afresh(const train_sync *s, const char *why)
{
    const weft_run *t = s->run;
    if (t->lead)
        run_say(t, WEFT_RUN_WARN,
                "warning: %s holds no %s %s state for %d ranks (%s): the sync mode's "
                "per-rank state starts afresh from the loaded parameters, so the run "
                "does not continue exactly\n",
                t->o->resume, s->cz ? "--compress" : "--sync",
                s->cz ? t->o->compress : t->o->sync, job_size(t), why);
}

int ckpt_sync_restore(train_sync *s, const weft_ckpt *ck)
{
    weft_run *t = s->run;
    int kind = ck ? ckpt_sync_kind(s) : 0;
    if (kind < 0) /* the same on every rank: nothing to agree on */
        warn_afresh(s, "this mode's state is not saved");
    if (kind <= 0)
        return 0;
    weft_ckpt *c = own_file(s, ck);
    /* all ranks or none: a mix would start some ranks afresh */
    int32_t mine = c != NULL, all = mine;
    int rc = weft_allreduce(s->comm, &mine, &all, 1, WEFT_I32, WEFT_MIN);
    if (rc == 0 && all)
        rc = get_state(s, c);
    weft_ckpt_free(c);
    if (rc)
        return run_fail(t, rc, "%s: this rank's sync state: %s", t->o->resume,
                        weft_strerror(rc));
    if (!all)
        warn_afresh(s, "saved at another layout, or not a sharded save");
    return 0;
}
