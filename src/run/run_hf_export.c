/* --export DIR: the model as a Hugging Face directory (config.json and
 * model.safetensors in transformers' names and layouts), written from the
 * shards: the lead makes the file from the whole model's table, then every
 * rank writes what it owns at its offsets (train/hf_save.h) and nobody
 * holds the whole model. Each element is written once: a pipeline's tied
 * copy by the first stage, a tensor replicated over the tensor group by
 * its rank 0, a replica's parameters by replica 0, experts divided by
 * --ep by the first of each expert's replicas (or at ZeRO-3 each shard by
 * its owner). */
#include "run/run_hf.h"

#include "run/run_pipeline.h"
#include "train/hf_save.h"
#include "train/model.h"
#include "train/moe_ep.h"
#include "train/moe_split.h"

#include <stdlib.h>

/* The worst code of every rank (0: all went well). */
static int agree(weft_run *t, int rc)
{
    int32_t v = rc;
    if (t->job && weft_allreduce(t->job, &v, &v, 1, WEFT_I32, WEFT_MIN) != 0)
        return rc ? rc : WEFT_EIO;
    return v;
}

/* Whole on every tensor rank (LayerNorms, row-parallel biases). */
static int replicated(const weft_model *m, int i)
{
    weft_tensor_info ti;
    weft_model_tensor_info(m, i, &ti);
    return ti.numel == ti.whole_numel;
}

/* Whether this rank writes the divided experts it holds (--ep) below
 * ZeRO 3: the first of their replicas, as a save does. */
static int expert_writer(const weft_run *t)
{
    weft_comm *rep = train_moe_ep_replicas(t->m->ep);
    return !rep || weft_comm_rank(rep) == 0;
}

/* What this rank writes: *skip the tensors another rank has, *r the
 * ranges of the flat buffer it owns (none: *nr 0). Below ZeRO 3 every
 * holder has its parameters whole: replica 0 writes them, and divided
 * experts (each expert rank its own) the first of their replicas; at
 * ZeRO 3 each rank its shards, the experts' shards being over their
 * replicas. */
static int my_share(weft_run *t, unsigned char **skip, hf_range **r, int *nr)
{
    int nt = weft_model_tensor_count(t->m), nb = 1;
    *skip = calloc((size_t)nt + 1, 1);
    if (!*skip)
        return WEFT_ENOMEM;
    int stage3 = weft_zero_stage(t->sync.z) == 3, xw = expert_writer(t), any = 0;
    pipeline_view v = { 0 };
    if (t->pl)
        pipeline_view_of(t->pl, &v);
    int tied = t->pl ? weft_model_tied_tensor(t->m) : -1;
    int replica = t->pl ? v.replica : t->job ? weft_comm_rank(t->job) : 0;
    for (int i = 0; i < nt; i++) {
        int writer = train_moe_split_is_expert(t->m, i) ? xw : replica == 0;
        (*skip)[i] = (i == tied && v.stage != 0) || (v.tp_rank != 0 && replicated(t->m, i)) ||
                     (!stage3 && !writer);
        any |= !(*skip)[i];
    }
    if (stage3)
        nb = weft_zero_bucket_count(t->sync.z);
    *r = calloc((size_t)nb, sizeof **r);
    if (!*r)
        return WEFT_ENOMEM;
    *nr = 0;
    if (stage3) {
        for (int k = 0; k < nb; k++)
            if (weft_zero_owned(t->sync.z, k, &(*r)[*nr].lo, &(*r)[*nr].n) == 0 && (*r)[*nr].n)
                (*nr)++;
    } else if (any) {
        weft_model_params(t->m, &(*r)[0].n);
        *nr = 1;
    }
    return 0;
}

int hf_run_export(weft_run *t)
{
    const char *dir = t->o->export_dir;
    if (!dir[0])
        return 0;
    char err[1024] = "";
    int rc = t->lead ? hf_export_prepare(weft_model_config_of(t->m), dir, err, sizeof err) : 0;
    int all = agree(t, rc);
    if (all != 0)
        return run_fail(t, all, "--export %s: %s", dir,
                        rc ? err : "the first rank could not make the file");
    unsigned char *skip = NULL;
    hf_range *r = NULL;
    int nr = 0;
    rc = my_share(t, &skip, &r, &nr);
    if (rc == 0)
        rc = hf_export_part(t->m, dir, skip, r, nr, err, sizeof err);
    free(skip);
    free(r);
    /* every rank's part or none: a failing rank fails all of them */
    all = agree(t, rc);
    char cerr[1024] = "";
    int crc = t->lead ? hf_export_commit(dir, all != 0, cerr, sizeof cerr) : 0;
    if (all != 0)
        return run_fail(t, all, "--export %s: %s", dir,
                        rc ? (err[0] ? err : weft_strerror(rc))
                           : "another rank could not write its part of model.safetensors");
    if ((all = agree(t, crc)) != 0)
        return run_fail(t, all, "--export %s: %s", dir,
                        crc ? cerr : "the first rank could not rename model.safetensors");
    if (t->lead && !t->o->quiet)
        run_say(t, WEFT_RUN_OUT, "exported %s\n", dir);
    return 0;
}
