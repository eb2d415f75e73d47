/* Full sync (--sync full, the default): one weft_zero over the job averages
 * the gradients every step (ZeRO stage 0 is plain data parallelism, 1-3
 * shard the state), so every rank takes the same step. Also the mode of a
 * lone process, with no one to average with. */
#include "run/run_ckpt_sync.h"
#include "run/run_sync.h"
#include "train/ckpt_shard.h"

#include <math.h>

static int full_open(train_sync *s, weft_model *m, const weft_optim_config *oc,
                     const weft_ckpt *ck)
{
    weft_model_params(m, &s->nparams);
    s->shared = s->comm != NULL;
    int rc = sync_zero_open(s, s->comm, m, oc, ck);
    /* one starting point for every rank; a resume's ranks read the same
     * bytes, and a ZeRO rank that read only its own shard completes it */
    if (rc == 0 && s->comm && ckpt_shard_own_params(ck) == CKPT_OWN_PENDING)
        rc = ckpt_shard_zero_finish(s->z, ck);
    else if (rc == 0 && s->comm && !ck)
        rc = weft_zero_broadcast_params(s->z);
    return rc;
}

static void full_describe(const train_sync *s)
{
    if (!s->comm)
        return;
    weft_zero_mem zm;
    weft_zero_memory(s->z, &zm);
    char micro[64] = "";
    if (s->o->accum > 1)
        snprintf(micro, sizeof micro, ", %d micro-steps per step", s->o->accum);
    run_say(s->run, WEFT_RUN_OUT,
            "data parallel: %d ranks, full sync, ZeRO stage %d, %d buckets%s\n"
            "  per rank (rank 0): params %zu B, grads %zu B, optimiser %zu B = %zu B; "
            "ZeRO formula %.0f B; engine work buffers +%zu B\n",
            s->world, s->o->zero, weft_zero_bucket_count(s->z), micro, zm.param_bytes,
            zm.grad_bytes, zm.optim_bytes, zm.param_bytes + zm.grad_bytes + zm.optim_bytes,
            zm.formula_bytes, zm.work_bytes);
}

/* Whether this step's loss and accuracy must be the job's: where the job
 * spans clusters their all-reduce is one more crossing of the WAN a step,
 * so it runs only on the steps the progress line prints (run_report.c's rule)
 * and on every step when a metrics file records them all. In one cluster
 * it is cheap and runs every step. */
static int full_reports(const train_sync *s)
{
    const opts *o = s->o;
    long total = o->r.steps, every;
    if (weft_comm_cluster_count(s->comm) < 2 || o->metrics[0] || total < 0)
        return 1;
    every = o->log_every > 0 ? o->log_every : (total / 20 > 0 ? total / 20 : 1);
    long step = (long)weft_optim_steps(weft_zero_optim(s->z)) + 1;
    return step % every == 0 || step >= total;
}

/* The job's loss and accuracy: queued behind the gradient buckets that
 * backward launched, collected after the optimiser step. On the other
 * steps, this rank's own, as a mean over its samples. */
static int full_launch(train_sync *s, train_step *st)
{
    if (!s->comm)
        return 0;
    if (!full_reports(s)) {
        double scale = st->n > 0 ? (double)st->global_n / st->n : 1;
        st->loss = (float)(st->loss * scale);
        st->correct = (int)lrint(st->correct * scale);
        return 0;
    }
    s->metrics[0] = st->loss;
    s->metrics[1] = (float)st->correct;
    return weft_iallreduce(s->comm, s->metrics, s->metrics, 2, WEFT_F32, WEFT_SUM, &s->mreq);
}

/* The job's loss and accuracy, where they were sent for; rc: the step's. */
static int full_collect(train_sync *s, train_step *st, int rc)
{
    if (!s->mreq)
        return rc;
    int mrc = weft_wait(s->mreq);
    s->mreq = NULL;
    st->loss = s->metrics[0];
    st->correct = (int)lrintf(s->metrics[1]);
    return rc ? rc : mrc;
}

static int full_step(train_sync *s, train_step *st, float lr)
{
    int rc = sync_optim_step(s, lr, &st->gnorm);
    if (s->comm)
        s->grad_bytes += s->nparams * sizeof(float);
    return full_collect(s, st, rc);
}

/* What ZeRO returned to the kernel between steps. */
static void full_summary(const train_sync *s)
{
    if (!s->comm)
        return;
    weft_zero_mem zm;
    weft_zero_memory(s->z, &zm);
    run_say(s->run, WEFT_RUN_OUT,
            "between steps (rank 0): params + grads + optimiser resident %zu B; "
            "ZeRO formula %.0f B\n", zm.resident_bytes, zm.formula_bytes);
    if (zm.layerwise)
        run_say(s->run, WEFT_RUN_OUT,
                "during a step (rank 0, layer by layer): at most %zu B resident; the bound is "
                "the shards + %zu B\n", zm.peak_bytes, zm.work_bytes);
}

static uint64_t full_bytes(const train_sync *s)
{
    return s->grad_bytes;
}

const sync_ops sync_full = {
    .weigh_global = 1, .zero = 1, .accum = 1,
    .open = full_open, .describe = full_describe, .launch = full_launch, .step = full_step,
    .summary = full_summary, .bytes = full_bytes,
};

/* ---- full sync with compressed gradients (--compress) ---------------------
 * A weft_zero over this rank alone holds the optimiser; after backward the
 * gradients (weighed by this rank's share of the global batch, so that
 * their sum is the batch mean) go through a weft_compressor, which leaves
 * the same bits on every rank, so every rank takes the same step. PowerSGD
 * gets every 2-D tensor as a matrix (it compresses the ones worth it). */

static int compress_open(train_sync *s, weft_model *m, const weft_optim_config *oc,
                         const weft_ckpt *ck)
{
    weft_compress_spec cs;
    float *p = weft_model_params(m, &s->nparams);
    int rc = sync_zero_open(s, NULL, m, oc, ck);
    s->cz_model = m;
    if (rc == 0)
        rc = weft_broadcast(s->comm, p, s->nparams, WEFT_F32, 0);
    if (rc == 0)
        rc = weft_compress_parse(s->o->compress, &cs);
    if (rc == 0)
        rc = weft_compressor_create(&s->cz, s->comm, &cs, s->nparams);
    for (int i = 0, nt = weft_model_tensor_count(m); rc == 0 && i < nt; i++) {
        weft_tensor_info ti;
        if ((rc = weft_model_tensor_info(m, i, &ti)) == 0 && ti.ndim == 2)
            rc = weft_compressor_add_matrix(s->cz, ti.offset, ti.shape[0], ti.shape[1]);
    }
    if (rc == 0)
        rc = ckpt_sync_restore(s, ck); /* each rank's error feedback, where the save has it */
    return rc;
}

static void compress_describe(const train_sync *s)
{
    run_say(s->run, WEFT_RUN_OUT, "data parallel: %d ranks, full sync, gradients compressed %s\n",
            s->world, s->o->compress);
}

static int compress_step(train_sync *s, train_step *st, float lr)
{
    size_t n;
    float *g = weft_model_grads(s->cz_model, &n);
    int rc = weft_compressor_allreduce(s->cz, g, WEFT_SUM);
    if (rc == 0)
        rc = full_launch(s, st);
    if (rc == 0)
        rc = sync_optim_step(s, lr, &st->gnorm);
    return full_collect(s, st, rc);
}

static uint64_t compress_bytes(const train_sync *s)
{
    uint64_t sent = 0, raw = 0;
    if (s->cz)
        weft_compressor_bytes(s->cz, &sent, &raw);
    return sent;
}

const sync_ops sync_full_compress = {
    .weigh_global = 1,
    .open = compress_open, .describe = compress_describe, .step = compress_step,
    .bytes = compress_bytes,
};
