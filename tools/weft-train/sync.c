/* weft-train's sync modes behind one interface: the table from --sync to a
 * mode, the calls of its hooks, and what every mode shares (a weft_zero
 * takes every optimiser step, over the job or over this rank alone). */
#include "train_tool.h"

#include <string.h>

/* One line per weft_sync_mode. */
static const sync_ops *const modes[] = {
    [WEFT_SYNC_FULL] = &sync_full,     [WEFT_SYNC_LOCAL] = &sync_average,
    [WEFT_SYNC_DILOCO] = &sync_diloco, [WEFT_SYNC_GOSSIP] = &sync_average,
    [WEFT_SYNC_STALE] = &sync_stale,   [WEFT_SYNC_BACKUP] = &sync_backup,
};

void sync_pick(train_sync *s, opts *o, weft_comm *comm)
{
    memset(s, 0, sizeof *s);
    weft_sync_parse(o->sync, &s->cfg); /* parse_args checked it */
    const sync_ops *mode = modes[s->cfg.mode];
    if (!mode->zero && o->zero)
        die("--zero shards a full-sync run; --sync %s keeps whole models per rank", o->sync);
    if (!mode->accum && o->accum > 1)
        die("--accum with --sync %s is not supported", o->sync);
    if (mode->defaults)
        mode->defaults(o);
    s->ops = comm ? mode : &sync_full;
    s->o = o;
    s->comm = comm;
    s->world = comm ? weft_comm_size(comm) : 1;
}

int sync_open(train_sync *s, weft_model *m, const weft_optim_config *oc, const weft_ckpt *ck)
{
    return s->ops->open(s, m, oc, ck);
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
    return s->ops->launch ? s->ops->launch(s, st) : 0;
}

int sync_step(train_sync *s, train_step *st, float lr)
{
    return s->ops->step(s, st, lr);
}

/* The step on the gradient buffer as it stands; gnorm gets the norm
 * before clipping when --clip is on. */
int sync_optim_step(train_sync *s, float lr, float *gnorm)
{
    double clip = s->o->r.clip;
    return weft_zero_step(s->z, lr, (float)clip, clip > 0 ? gnorm : NULL);
}

int sync_drain(train_sync *s, const weft_lr_schedule *lr)
{
    return s->ops->drain ? s->ops->drain(s, lr) : 0;
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

void sync_close(train_sync *s)
{
    weft_sync_destroy(s->sy);
    weft_zero_destroy(s->z);
}
