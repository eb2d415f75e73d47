/* The run's checkpoints: --resume (the run options and the state they
 * restore) and saving; --export, which gathers the model as saving does. A checkpoint holds the whole run (model, optimiser,
 * rng, data position), never the launch (ranks, ZeRO stage, sync mode), so
 * it resumes on any number of ranks. */
#include "run/run_ckpt.h"

#include "run/run_ckpt_shard.h"
#include "run/run_config.h"
#include "run/run_memory.h"
#include "run/run_ep.h"
#include "run/run_model.h"
#include "run/run_paths.h"
#include "run/run_pipeline.h"
#include "core/clock.h"
#include "train/ckpt_shard.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every element of every saved vector is in some slice, else the error
 * names the first tensor that lacks one. Only this failure builds the whole
 * model (for the tensor names). */
static int ckpt_covered(weft_run *t, weft_ckpt *ck, const char *path)
{
    weft_model_config cfg;
    weft_optim_config oc;
    weft_optim *opt = NULL;
    weft_model *whole = NULL;
    uint64_t n = ckpt_shard_extent(ck);
    int rc = weft_ckpt_model_config(ck, &cfg);
    if (rc == 0)
        rc = weft_ckpt_optim_config(ck, &oc);
    if (rc == 0)
        rc = weft_optim_create(&opt, &oc, 0, 0);
    uint64_t at = 0;
    const char *vec = "param";
    int missing = rc == 0 ? ckpt_shard_missing(ck, vec, 0, n, &at) : 0;
    for (int i = 0; rc == 0 && !missing && i < weft_optim_state_count(opt); i++) {
        weft_optim_state(opt, i, &vec);
        missing = ckpt_shard_missing(ck, vec, 0, n, &at);
    }
    char name[256] = "?";
    if (rc == 0 && missing && weft_model_create(&whole, &cfg, 0) == 0)
        for (int i = 0; i < weft_model_tensor_count(whole); i++) {
            weft_tensor_info ti;
            if (weft_model_tensor_info(whole, i, &ti) == 0 && at >= ti.whole_offset &&
                at < ti.whole_offset + ti.whole_numel)
                snprintf(name, sizeof name, "%s", ti.name);
        }
    if (rc == 0 && missing)
        rc = run_fail(t, WEFT_EIO, "cannot load checkpoint %s: %s/%s (element %llu of the "
                      "whole vector) is in none of its files", path, vec, name,
                      (unsigned long long)at);
    weft_model_destroy(whole);
    weft_optim_destroy(opt);
    return rc;
}

/* The value of key=VALUE in a layout line into buf ("" when absent). */
static void layout_field(const char *line, const char *key, char *buf, size_t cap)
{
    size_t k = strlen(key);
    buf[0] = 0;
    for (const char *p = line; p && *p; p = strchr(p, ' '), p = p ? p + 1 : NULL)
        if (strncmp(p, key, k) == 0 && p[k] == '=') {
            size_t n = strcspn(p + k + 1, " ");
            snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p + k + 1);
            return;
        }
}

/* A sharded save records the sync mode (with its period) and the
 * compressor it ran with: a resume with others warns, since each rank's
 * state of the mode (DiLoCo's outer momentum, error feedback) does not
 * carry over, and goes on from the saved parameters and optimiser. */
static void ckpt_check_sync(weft_run *t, const opts *o, const weft_ckpt *ck)
{
    char layout[512], sync[80], cz[80];
    if (weft_ckpt_get_str(ck, "shard/layout", layout, sizeof layout) != 0)
        return;
    layout_field(layout, "sync", sync, sizeof sync);
    layout_field(layout, "compress", cz, sizeof cz);
    const char *now = o->sync[0] ? o->sync : "full", *now_cz = o->compress[0] ? o->compress
                                                                                : "none";
    /* saves from before the compressor was recorded: the mode alone */
    if (sync[0] && (strcmp(sync, now) != 0 || (cz[0] && strcmp(cz, now_cz) != 0)))
        run_say(t, WEFT_RUN_WARN,
                "warning: %s was saved with --sync %s --compress %s, this run has --sync %s "
                "--compress %s: the sync mode's per-rank state starts afresh from the "
                "saved parameters and optimiser\n",
                o->resume, sync, cz[0] ? cz : "?", now, now_cz);
}

/* At the layout a sharded save was made in (the job's size, tp, pp and
 * ZeRO stage alike) a rank reads its own file, but for the edges of its
 * part of the parameters: the disk is asked for it now, so that it reads
 * while the run sets up and makes its model, before the first pread. */
static void ckpt_prefetch_own(weft_run *t, const opts *o, const weft_ckpt *ck)
{
    char layout[512], v[32], name[64];
    int jw = t->job ? weft_comm_size(t->job) : 1, jr = t->job ? weft_comm_rank(t->job) : 0;
    int want[4] = { jw, o->tp > 1 ? o->tp : 1, o->pp > 1 ? o->pp : 1, o->zero };
    const char *keys[4] = { "world", "tp", "pp", "zero" };
    if (o->layout_auto || weft_ckpt_get_str(ck, "shard/layout", layout, sizeof layout) != 0)
        return;
    for (int k = 0; k < 4; k++) {
        layout_field(layout, keys[k], v, sizeof v);
        if (!v[0] || atoi(v) != want[k])
            return;
    }
    snprintf(name, sizeof name, "rank-%05d.bin", jr);
    ckpt_shard_prefetch_file(ck, name);
}

int ckpt_resume(weft_run *t, opts *o, long *start_step, weft_ckpt **out)
{
    *out = NULL;
    /* the run's outputs too: this is the first place that sees the options */
    int rc = ckpt_sharded(o->save) ? 0 : path_check(t, "--save", o->save, 0, 1);
    if (rc == 0)
        rc = path_check(t, "--metrics", o->metrics, 0, 1);
    if (rc == 0)
        rc = path_check(t, "--resume", o->resume, 1, 0);
    if (rc != 0 || !o->resume[0])
        return rc;
    weft_ckpt *ck = NULL;
    struct stat st;
    double t0 = clock_now();
    int dir = stat(o->resume, &st) == 0 && S_ISDIR(st.st_mode);
    /* a directory's manifest alone: each rank reads the slices it holds */
    rc = dir ? ckpt_shard_open_records(o->resume, &ck) : weft_ckpt_load(&ck, o->resume);
    /* the disk starts on this rank's file before the coverage check's
     * passes over the slice table: a checkpoint that fails it has only
     * cost a read-ahead */
    if (rc == 0 && dir)
        ckpt_prefetch_own(t, o, ck);
    if (rc == 0 && dir && (rc = ckpt_covered(t, ck, o->resume)) != 0)
        weft_ckpt_free(ck);
    if (rc == 0 && dir)
        ckpt_shard_phase(ck, CKPT_PH_OPEN, clock_now() - t0);
    if (rc != 0 && t->code)
        return rc; /* the coverage check said why */
    if (rc != 0 && dir)
        return run_fail(t, rc, "cannot load checkpoint %s: %s (a sharded checkpoint directory "
                        "holds latest and the save it names, with its manifest)",
                        o->resume, weft_strerror(rc));
    if (rc != 0)
        return run_fail(t, rc, "cannot load checkpoint %s: %s", o->resume, weft_strerror(rc));
    char args[4096];
    uint64_t s = 0;
    if (weft_ckpt_get_str(ck, "train/args", args, sizeof args) != 0 ||
        weft_ckpt_get_u64(ck, "train/step", &s) != 0) {
        weft_ckpt_free(ck);
        return run_fail(t, WEFT_EIO, "%s: not a weft-train checkpoint", o->resume);
    }
    /* the saved weights and optimiser state only fit their own shape */
    unsigned fixed = 1u << O_MODEL | 1u << O_OPTIM | 1u << O_MOMENTUM | 1u << O_WD |
                     1u << O_LAYERS | 1u << O_HEADS | 1u << O_DIM;
    if (o->set & fixed)
        run_say(t, WEFT_RUN_WARN,
                "warning: the model and optimiser come from %s; "
                "--model/--optim/--momentum/--weight-decay/--layers/--heads/--dim "
                "are ignored\n", o->resume);
    rc = run_opts_merge(t, &o->r, o->set & ~fixed, args);
    if (rc != 0) {
        weft_ckpt_free(ck);
        return rc;
    }
    ckpt_check_sync(t, o, ck);
    *start_step = (long)s;
    *out = ck;
    return 0;
}

/* Full sync with ZeRO 1-3 over a data-parallel group (no pipeline, tensor,
 * context or expert split, not elastic): each rank reads only what it
 * owns, its parameters with its optimiser state (ckpt_shard_zero_finish
 * completes them in full_open), rather than a part of the whole model
 * that the group all-gathers before ZeRO shards it. */
static int own_shard_load(const weft_run *t)
{
    const opts *o = t->o;
    /* the modes of sync_table.h: full sync without --compress or --elastic
     * is sync_full, whose open completes the load */
    return t->sync.cfg.mode == WEFT_SYNC_FULL && !o->compress[0] && !o->elastic && t->comm &&
           weft_comm_size(t->comm) > 1 && o->zero >= 1 && !t->pl && o->ep <= 1 && o->cp <= 1;
}

int ckpt_restore_model(weft_run *t, weft_ckpt *ck, const char *path, weft_model **m,
                       weft_optim_config *oc, weft_rng *rng)
{
    int rc;
    if (ckpt_shard_lazy(ck)) {
        weft_model_config cfg;
        *m = NULL;
        double t0 = clock_now();
        int own = own_shard_load(t);
        rc = weft_ckpt_model_config(ck, &cfg);
        weft_block_range all = {0, rc == 0 ? weft_model_block_count(&cfg) : 0};
        if (rc == 0 && own)
            rc = ckpt_shard_zero_model(&cfg, m);
        else if (rc == 0) /* the load writes every parameter: no random start */
            rc = weft_model_create_stage(m, &cfg, 0, &all, 1, WEFT_STAGE_NO_INIT);
        ckpt_shard_phase(ck, CKPT_PH_INIT, clock_now() - t0);
        if (rc == 0 && own)
            ckpt_shard_own_params_set(ck, CKPT_OWN_PENDING);
        /* else every rank of the job holds the whole model: each reads its
         * part of the parameters from the files and the ranks all-gather */
        else if (rc == 0)
            rc = ckpt_shard_get_params_group(ck, *m, t->comm);
        if (rc != 0) {
            weft_model_destroy(*m);
            *m = NULL;
        }
    } else {
        rc = weft_ckpt_get_model(ck, m);
    }
    if (rc == 0)
        rc = weft_ckpt_optim_config(ck, oc);
    if (rc == 0)
        rc = weft_ckpt_get_rng(ck, "rng", rng);
    if (rc != 0)
        return run_fail(t, rc, "%s: %s", path, weft_strerror(rc));
    return 0;
}

void ckpt_explain(weft_run *t, const weft_ckpt *ck)
{
    char why[1024];
    size_t n = strlen(t->err);
    /* the error so far says which step of the set-up failed, this why */
    if (t->code && ckpt_shard_error(ck, why, sizeof why) && !strstr(t->err, why))
        snprintf(t->err + n, sizeof t->err - n, "%s(%s)", n ? " " : "", why);
}

int ckpt_restore_data(weft_run *t, weft_ckpt *ck, const char *path, weft_loader *l,
                      const data_sets *d)
{
    weft_model_config cfg;
    char source[1200], spec[256];
    if (weft_ckpt_model_config(ck, &cfg) != 0)
        return run_fail(t, WEFT_EIO, "%s: no model config", path);
    weft_model_config_format(&cfg, spec, sizeof spec);
    snprintf(source, sizeof source, "%s from %s", spec, path);
    int rc = model_check_fit(t, &cfg, d, source); /* before the first step reads a sample */
    if (rc != 0)
        return rc;
    /* a model left untouched for its owners' shards that no mode completed */
    if (ckpt_shard_own_params(ck) == CKPT_OWN_PENDING)
        return run_fail(t, WEFT_EINVAL, "%s: the ZeRO shards' load was not completed", path);
    weft_ckpt_entry info;
    uint64_t got = 0, all = 0, need = 0, direct = 0;
    double ph[CKPT_PHASES];
    /* by now every read of the files is done: what this rank's share cost,
     * from the manifest's opening to the optimiser's state in place */
    if (ckpt_shard_lazy(ck) && weft_ckpt_get_u64(ck, "shard/bytes_read", &got) == 0 &&
        weft_ckpt_find(ck, "shard/file_info", &info) == 0 && info.dtype == WEFT_I64 &&
        ckpt_shard_phases(ck, ph) == 0) {
        const int64_t *fi = info.data;
        for (size_t f = 0; f < info.nbytes / (2 * sizeof *fi); f++)
            all += (uint64_t)fi[2 * f];
        weft_ckpt_get_u64(ck, "shard/bytes_need", &need);
        weft_ckpt_get_u64(ck, "shard/bytes_direct", &direct);
        /* the window: from the manifest's opening to now, with the state
         * in place; the rest is what the run did between (the data-parallel
         * set-up, waits for the other ranks) */
        ph[CKPT_PH_LOAD] = ckpt_shard_since_open(ck);
        double rest = ph[CKPT_PH_LOAD] - ph[CKPT_PH_OPEN] - ph[CKPT_PH_INIT] -
                      ph[CKPT_PH_READ] - ph[CKPT_PH_CRC] - ph[CKPT_PH_GATHER];
        run_say(t, WEFT_RUN_NOTE, "resume: rank %d read %llu of the checkpoint's %llu bytes "
                "(its share %llu) in %.3f s: manifest %.3f, model and optimiser made %.3f, "
                "reads %.3f, CRCs %.3f, all-gather %.3f, the rest %.3f; CPU %.3f s (system %.3f); "
                "%llu bytes of them past the page cache\n",
                t->job ? weft_comm_rank(t->job) : 0, (unsigned long long)got,
                (unsigned long long)all, (unsigned long long)need, ph[CKPT_PH_LOAD],
                ph[CKPT_PH_OPEN], ph[CKPT_PH_INIT], ph[CKPT_PH_READ], ph[CKPT_PH_CRC],
                ph[CKPT_PH_GATHER], rest > 0 ? rest : 0.0, ckpt_shard_cpu_since_open(ck),
                ckpt_shard_sys_since_open(ck),
                (unsigned long long)direct);
    }
    char layout[512], view[32];
    /* --elastic: the membership changes go on counting from the saved
     * run's (elastic_open keeps the count), so later saves record the
     * whole history */
    if (t->o->elastic && weft_ckpt_get_str(ck, "shard/layout", layout, sizeof layout) == 0) {
        layout_field(layout, "elastic", view, sizeof view);
        t->el.view = view[0] ? strtoll(view, NULL, 10) : 0;
    }
    uint64_t pos;
    if (weft_ckpt_get_u64(ck, "data/position", &pos) != 0)
        return run_fail(t, WEFT_EIO, "%s: no data position", path);
    weft_loader_seek(l, pos);
    char name[sizeof d->ti.name];
    uint64_t samples;
    if (weft_ckpt_get_str(ck, "data/name", name, sizeof name) == 0 &&
        weft_ckpt_get_u64(ck, "data/samples", &samples) == 0 &&
        (strcmp(name, d->ti.name) != 0 || samples != d->ti.n))
        run_say(t, WEFT_RUN_WARN,
                "warning: the checkpoint was trained on %s (%llu samples), this "
                "run reads %s (%llu)\n",
                name, (unsigned long long)samples, d->ti.name, (unsigned long long)d->ti.n);
    return 0;
}

/* The stream position of the data the run has trained on: a batch loaded
 * ahead for the next step (while the gradients travelled) is not yet
 * consumed, so a save between steps (weft_run_save) leaves it out. */
static uint64_t consumed(const weft_run *t)
{
    uint64_t pos = weft_loader_position(t->loader);
    uint64_t ahead = t->prefetched ? (uint64_t)t->b.global_n : 0;
    return pos - (ahead < pos ? ahead : pos);
}

/* The run's own records (no model or optimiser tensors): the arguments,
 * the step, the rng and the data position. */
static int ckpt_records(weft_run *t, long step, weft_ckpt **out)
{
    const run_opts *r = &t->o->r;
    const data_sets *d = t->d;
    weft_ckpt *c = NULL;
    char args[4096];
    run_opts_format(r, args, sizeof args);
    int rc = weft_ckpt_new(&c);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "format", "weft-train 1");
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "train/args", args);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "train/step", (uint64_t)step);
    if (rc == 0)
        rc = weft_ckpt_put_rng(c, "rng", &t->rng);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/position", consumed(t));
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/global_batch", (uint64_t)r->batch);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/seed", r->seed);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "data/name", d->ti.name);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/samples", d->ti.n);
    if (rc != 0) {
        weft_ckpt_free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

/* Rank 0's checkpoint of the state as gathered (whole, whole_opt: the
 * pipeline's assembly; NULL otherwise). */
static int ckpt_write(weft_run *t, const char *path, long step, weft_model *whole,
                      weft_optim *whole_opt)
{
    weft_zero *z = t->sync.z;
    weft_ckpt *c = NULL;
    int rc = ckpt_records(t, step, &c);
    if (rc == 0)
        rc = weft_ckpt_put_model(c, whole ? whole : t->m);
    if (rc == 0)
        rc = whole_opt ? weft_ckpt_put_optim(c, whole_opt) : weft_zero_put_optim(z, c);
    if (rc == 0)
        rc = weft_ckpt_save(c, path);
    weft_ckpt_free(c);
    if (rc != 0)
        return run_fail(t, rc, "cannot save checkpoint %s: %s", path, weft_strerror(rc));
    return 0;
}

/* A sharded save: every rank writes its own part, nothing is gathered. */
static int ckpt_save_sharded(weft_run *t, const char *path, long step, int async)
{
    weft_ckpt *rec = NULL;
    int lead = !t->job || weft_comm_rank(t->job) == 0;
    int rc = lead ? ckpt_records(t, step, &rec) : 0;
    if (rc != 0) /* the others are in the save's collectives: this one fails there */
        run_fail(t, rc, "cannot save checkpoint %s: %s", path, weft_strerror(rc));
    rc = ckpt_shard_save(t, path, step, rec, async);
    char what[64];
    snprintf(what, sizeof what, "the save of step %ld", step);
    /* under --mem-limit the save is synchronous: its buffers are behind it */
    return rc ? rc : memory_check_peak(t, what);
}

int ckpt_save_every(weft_run *t, const char *path, long step)
{
    return ckpt_sharded(path) ? ckpt_save_sharded(t, path, step, 1) : ckpt_save(t, path, step);
}

void ckpt_figures(const weft_run *t)
{
    ckpt_figures_t f;
    ckpt_shard_figures(t, &f);
    if (t->o->quiet)
        return;
    if (f.saves[0])
        run_say(t, WEFT_RUN_OUT,
                "checkpoints: %d written in the loop's time, %.3f s and %.1f MB each "
                "(%.1f MB/s all ranks together)\n",
                f.saves[0], f.save_s[0] / f.saves[0], f.bytes[0] / 1e6 / f.saves[0],
                f.save_s[0] > 0 ? f.bytes[0] / 1e6 / f.save_s[0] : 0.0);
    if (f.saves[1])
        run_say(t, WEFT_RUN_OUT,
                "checkpoints: %d written in the background, %.3f s and %.1f MB each "
                "(file and commit); the loop stalled %.3f s each (%.1f%%)\n",
                f.saves[1], f.save_s[1] / f.saves[1], f.bytes[1] / 1e6 / f.saves[1],
                f.stall_s / f.saves[1], f.save_s[1] > 0 ? 100 * f.stall_s / f.save_s[1] : 0.0);
}

/* Collective when z spans the job (full sync): a sharded optimiser is
 * gathered to rank 0, which writes; a sharded save (ckpt_sharded) is
 * collective over the job and gathers nothing. */
int ckpt_save(weft_run *t, const char *path, long step)
{
    if (ckpt_sharded(path))
        return ckpt_save_sharded(t, path, step, 0);
    int rc = ckpt_shard_wait(t); /* a sharded save in flight commits first */
    if (rc != 0)
        return rc;
    weft_zero *z = t->sync.z;
    /* a pipeline's stages are assembled into the whole model on the lead */
    weft_optim *whole_opt = NULL;
    weft_model *whole = NULL;
    rc = t->pl ? pipeline_gather(t->pl, t->m, z, &whole_opt, &whole) : 0;
    if (rc != 0 || (t->pl && !t->lead))
        return rc;
    if (!t->pl)
        rc = weft_zero_gather_params(z);
    /* experts divided over ranks (--ep): rank 0 assembles the whole model
     * (under a pipeline pipeline_gather took each from its replica) */
    int ep = rc == 0 && !t->pl ? run_ep_gather(t, &whole_opt, &whole) : 0;
    rc = ep < 0 ? ep : rc;
    if (rc == 0 && !t->pl && !ep && t->rank != 0 && t->sync.shared)
        rc = weft_zero_put_optim(z, NULL);
    if (rc != 0)
        rc = run_fail(t, rc, "cannot gather the training state for %s: %s", path,
                      weft_strerror(rc));
    if (rc == 0 && t->rank == 0)
        rc = ckpt_write(t, path, step, whole, whole_opt);
    weft_model_destroy(whole);
    weft_optim_destroy(whole_opt);
    return rc;
}
