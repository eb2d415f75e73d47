/* weft-train's sync modes behind one interface: the table from --sync to a
 * mode, the calls of its hooks, and what every mode shares (a weft_zero
 * takes every optimiser step, over the job or over this rank alone). */
#include "churn.h"

#include <stdlib.h>
#include <string.h>

/* One line per weft_sync_mode. */
static const sync_ops *const modes[] = {
    [WEFT_SYNC_FULL] = &sync_full,     [WEFT_SYNC_LOCAL] = &sync_average,
    [WEFT_SYNC_DILOCO] = &sync_diloco, [WEFT_SYNC_GOSSIP] = &sync_average,
    [WEFT_SYNC_STALE] = &sync_stale,   [WEFT_SYNC_BACKUP] = &sync_backup,
    [WEFT_SYNC_STREAMING] = &sync_diloco,
};

void sync_pick(train_sync *s, opts *o, weft_comm *comm)
{
    memset(s, 0, sizeof *s);
    weft_sync_parse(o->sync, &s->cfg); /* parse_args checked it */
    if (o->outer_lr > 0)
        s->cfg.outer_lr = (float)o->outer_lr;
    if (o->outer_momentum >= 0)
        s->cfg.outer_momentum = (float)o->outer_momentum;
    const sync_ops *mode = s->cfg.hier ? &sync_hier : modes[s->cfg.mode];
    if (o->compress[0]) {
        int outer = s->cfg.mode == WEFT_SYNC_DILOCO || s->cfg.mode == WEFT_SYNC_STREAMING;
        if (s->cfg.mode == WEFT_SYNC_FULL)
            mode = &sync_full_compress;
        else if (!outer)
            die("--compress: full sync, diloco, streaming or hier, not --sync %s", o->sync);
        weft_compress_parse(o->compress, &s->cfg.compress); /* parse_args checked it */
        s->cfg.compressed = outer;
    }
    if (o->elastic && s->cfg.mode == WEFT_SYNC_DILOCO)
        mode = &sync_churn; /* elastic_check refused the rest */
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
    int rc = s->ops->open(s, m, oc, ck);
    if (rc == 0 && s->comm)
        weft_comm_wan_bytes(s->comm, &s->wan0);
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
    return s->ops->launch ? s->ops->launch(s, st) : 0;
}

int sync_step(train_sync *s, train_step *st, float lr)
{
    double t0 = now_s();
    int rc = s->ops->step(s, st, lr);
    s->step_s += now_s() - t0;
    return rc;
}

/* The step on the gradient buffer as it stands; gnorm gets the norm
 * before clipping when --clip is on. */
int sync_optim_step(train_sync *s, float lr, float *gnorm)
{
    double clip = s->o->r.clip, t0 = now_s();
    int rc = weft_zero_step(s->z, lr, (float)clip, clip > 0 ? gnorm : NULL);
    s->optim_s += now_s() - t0;
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
    weft_comm_wan_bytes(s->comm, &wan);
    wan -= wan < s->wan0 ? wan : s->wan0;
    if (s->sy)
        weft_sync_bytes_split(s->sy, &across, &inside);
    else if (s->churn)
        outer_bytes(s->churn->outer, &across, &inside);
    else
        across = sync_bytes(s);
    double v[3] = { (double)wan, (double)across, (double)inside };
    int rc = weft_allreduce(s->comm, v, v, 3, WEFT_F64, WEFT_AVG);
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

void sync_close(train_sync *s)
{
    weft_compressor_destroy(s->cz);
    weft_sync_destroy(s->sy);
    weft_zero_destroy(s->z);
    if (s->churn) /* after the optimiser, whose communicator it holds */
        outer_destroy(s->churn->outer);
    free(s->churn);
    s->churn = NULL;
}
