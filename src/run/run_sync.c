/* The sync modes behind one interface: the table from --sync to a mode
 * (sync_table.h), the calls of its hooks, and what every mode shares (a
 * weft_zero takes every optimiser step, over the job or over this rank
 * alone). */
#include "run/run_sync.h"

#include "run/run_churn.h"
#include "run/run_shares.h"
#include "run/sync_table.h"

#include "core/clock.h"

#include <stdlib.h>
#include <string.h>

#define X(ops, modes, when) extern const sync_ops ops;
RUN_SYNC_MODES(X)
#undef X

static const struct {
    const sync_ops *ops;
    unsigned modes, when;
} table[] = {
#define X(ops, modes, when) { &ops, modes, when },
    RUN_SYNC_MODES(X)
#undef X
};

const sync_ops *sync_mode_of(const opts *o, const weft_sync_config *cfg)
{
    unsigned have = (cfg->hier ? SYNC_W_HIER : 0) | (o->compress[0] ? SYNC_W_COMPRESS : 0) |
                    (o->elastic ? SYNC_W_ELASTIC : 0);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if ((table[i].modes & (1u << cfg->mode)) && !(table[i].when & ~have))
            return table[i].ops;
    return &sync_full; /* every weft_sync_mode has a line */
}

int sync_check(weft_run *t, const opts *o, weft_comm *comm)
{
    weft_sync_config cfg;
    weft_sync_parse(o->sync, &cfg); /* the configuration checked it */
    const sync_ops *mode = sync_mode_of(o, &cfg);
    return mode->check ? mode->check(o, &cfg, comm, t) : 0;
}

int sync_pick(train_sync *s, weft_run *t, opts *o, weft_comm *comm)
{
    memset(s, 0, sizeof *s);
    s->run = t;
    weft_sync_parse(o->sync, &s->cfg); /* the configuration checked it */
    if (o->outer_lr > 0)
        s->cfg.outer_lr = (float)o->outer_lr;
    if (o->outer_momentum >= 0)
        s->cfg.outer_momentum = (float)o->outer_momentum;
    const sync_ops *mode = sync_mode_of(o, &s->cfg);
    int rc = mode->check ? mode->check(o, &s->cfg, comm, t) : 0;
    if (rc)
        return rc;
    if (o->compress[0]) {
        weft_compress_parse(o->compress, &s->cfg.compress); /* the configuration checked it */
        s->cfg.compressed = mode->outer_compress;
    }
    if (!mode->zero && o->zero)
        return run_fail(t, WEFT_ECONFIG,
                        "--zero shards a full-sync run; --sync %s keeps whole models per rank",
                        o->sync);
    if (!mode->accum && o->accum > 1)
        return run_fail(t, WEFT_ECONFIG, "--accum with --sync %s is not supported", o->sync);
    if (mode->defaults)
        mode->defaults(o);
    s->ops = comm ? mode : &sync_full;
    s->o = o;
    s->comm = comm;
    s->world = comm ? weft_comm_size(comm) : 1;
    return 0;
}

/* The WAN emulator counts a byte when its pump puts it on the wire, a
 * delay after the owner wrote it: a rank reading its count may not yet
 * find what it sent last. After a barrier every byte sent before it has
 * arrived, so each reading is the same in every run. */
static int wan_read(train_sync *s, uint64_t *sent)
{
    int rc = weft_comm_cluster_count(s->comm) > 1 ? weft_barrier(s->comm) : 0;
    if (rc == 0)
        rc = weft_comm_wan_bytes(s->comm, sent);
    return rc;
}

int sync_open(train_sync *s, weft_model *m, const weft_optim_config *oc, const weft_ckpt *ck)
{
    int rc = shares_open(s); /* before the mode reads its period and weight */
    if (rc == 0)
        rc = s->ops->open(s, m, oc, ck);
    if (rc == 0 && s->comm)
        rc = wan_read(s, &s->wan0);
    return rc;
}

/* c NULL: this rank's own optimiser, whole (the checkpoint's state
 * whatever stage wrote it). */
int sync_zero_open(train_sync *s, weft_comm *c, weft_model *m, const weft_optim_config *oc,
                   const weft_ckpt *ck)
{
    const opts *o = s->o;
    int rc = weft_zero_create(&s->z, c, m, oc, o->zero,
                              (size_t)(o->bucket_mb > 0 ? o->bucket_mb * 1048576 : 0));
    if (rc == 0 && ck)
        rc = weft_zero_load_optim(s->z, ck);
    return rc;
}

void sync_describe(const train_sync *s)
{
    if (s->ops->describe)
        s->ops->describe(s);
}

int sync_begin(train_sync *s, int *skip)
{
    *skip = 0;
    return s->ops->begin ? s->ops->begin(s, skip) : 0;
}

int sync_launch(train_sync *s, train_step *st)
{
    shares_pace(s);
    return s->ops->launch ? s->ops->launch(s, st) : 0;
}

int sync_step(train_sync *s, train_step *st, float lr)
{
    double t0 = clock_now();
    int rc = s->ops->step(s, st, lr);
    s->step_s += clock_now() - t0;
    if (rc == 0)
        shares_progress(s, st);
    return rc;
}

/* The step on the gradient buffer as it stands; gnorm gets the norm
 * before clipping when --clip is on. */
int sync_optim_step(train_sync *s, float lr, float *gnorm)
{
    double clip = s->o->r.clip, t0 = clock_now();
    int rc = weft_zero_step(s->z, lr, (float)clip, clip > 0 ? gnorm : NULL);
    s->optim_s += clock_now() - t0;
    return rc;
}

int sync_drain(train_sync *s, const weft_lr_schedule *lr)
{
    return s->ops->drain ? s->ops->drain(s, lr) : 0;
}

/* The means over the ranks of what went where (collective). */
int sync_count_bytes(train_sync *s)
{
    uint64_t wan = 0, across = 0, inside = 0;
    if (!s->comm)
        return 0;
    int rc = wan_read(s, &wan);
    if (rc != 0)
        return rc;
    wan -= wan < s->wan0 ? wan : s->wan0;
    if (s->sy)
        weft_sync_bytes_split(s->sy, &across, &inside);
    else if (s->churn)
        outer_bytes(s->churn->outer, &across, &inside);
    else
        across = sync_bytes(s);
    double v[3] = { (double)wan, (double)across, (double)inside };
    rc = weft_allreduce(s->comm, v, v, 3, WEFT_F64, WEFT_AVG);
    s->wan_mean = v[0];
    s->across_mean = v[1];
    s->inside_mean = v[2];
    return rc;
}

int sync_finish(train_sync *s)
{
    return s->ops->finish ? s->ops->finish(s) : 0;
}

void sync_summary(const train_sync *s)
{
    if (s->ops->summary)
        s->ops->summary(s);
}

uint64_t sync_bytes(const train_sync *s)
{
    return s->ops->bytes(s);
}

/* Again on a closed mode: nothing (a rank that left closed it as it went). */
void sync_close(train_sync *s)
{
    weft_compressor_destroy(s->cz);
    weft_sync_destroy(s->sy);
    weft_zero_destroy(s->z);
    if (s->churn) /* after the optimiser, whose communicator it holds */
        outer_destroy(s->churn->outer);
    free(s->churn);
    s->cz = NULL;
    s->sy = NULL;
    s->z = NULL;
    s->churn = NULL;
}
