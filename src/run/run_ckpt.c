/* weft-train's checkpoints: --resume (the run options and the state they
 * restore), saving, and --inspect. A checkpoint holds the whole run
 * (model, optimiser, rng, data position), never the launch (ranks, ZeRO
 * stage, sync mode), so it resumes on any number of ranks. */
#include "train_tool.h"

#include <string.h>

/* weft-train --inspect CKPT: the records of a checkpoint. */
int ckpt_inspect(const char *path)
{
    weft_ckpt *c;
    path_check("--inspect", path, 0, 0);
    int rc = weft_ckpt_load(&c, path);
    if (rc != 0)
        die("cannot load checkpoint %s: %s", path, weft_strerror(rc));
    printf("%s: checkpoint version %d, %d records, checksums ok\n", path, WEFT_CKPT_VERSION,
           weft_ckpt_count(c));
    for (int i = 0; i < weft_ckpt_count(c); i++) {
        weft_ckpt_entry e;
        weft_ckpt_entry_at(c, i, &e);
        printf("  %-28s ", e.name);
        if (e.kind == WEFT_CKPT_TENSOR) {
            const char *dt = weft_dtype_name(e.dtype);
            printf("%-4s [", dt ? dt : "?");
            for (int d = 0; d < e.ndim; d++)
                printf("%s%lld", d ? ", " : "", (long long)e.shape[d]);
            printf("]\n");
        } else if (e.nbytes == 8 && strncmp(e.name, "model/", 6) != 0 &&
                   (strstr(e.name, "step") || strstr(e.name, "position") ||
                    strstr(e.name, "batch") || strstr(e.name, "seed") ||
                    strstr(e.name, "base") || strstr(e.name, "samples"))) {
            uint64_t v = 0;
            weft_ckpt_get_u64(c, e.name, &v);
            printf("%llu\n", (unsigned long long)v);
        } else {
            const char *p = e.data;
            printf("\"");
            for (size_t k = 0; k < e.nbytes && k < 100; k++)
                putchar(p[k] == '\n' ? ' ' : (p[k] >= 32 && p[k] < 127) ? p[k] : '.');
            printf("%s\"\n", e.nbytes > 100 ? "..." : "");
        }
    }
    weft_ckpt_free(c);
    return 0;
}

weft_ckpt *ckpt_resume(opts *o, long *start_step)
{
    /* the run's outputs too: this is the first place that sees the options */
    path_check("--save", o->save, 0, 1);
    path_check("--metrics", o->metrics, 0, 1);
    path_check("--resume", o->resume, 0, 0);
    if (!o->resume[0])
        return NULL;
    weft_ckpt *ck;
    int rc = weft_ckpt_load(&ck, o->resume);
    if (rc != 0)
        die("cannot load checkpoint %s: %s", o->resume, weft_strerror(rc));
    char args[4096];
    uint64_t s = 0;
    if (weft_ckpt_get_str(ck, "train/args", args, sizeof args) != 0 ||
        weft_ckpt_get_u64(ck, "train/step", &s) != 0)
        die("%s: not a weft-train checkpoint", o->resume);
    /* the saved weights and optimiser state only fit their own shape */
    unsigned fixed = 1u << O_MODEL | 1u << O_OPTIM | 1u << O_MOMENTUM | 1u << O_WD |
                     1u << O_LAYERS | 1u << O_HEADS | 1u << O_DIM;
    if (o->set & fixed)
        fprintf(stderr, "weft-train: warning: the model and optimiser come from %s; "
                        "--model/--optim/--momentum/--weight-decay/--layers/--heads/--dim "
                        "are ignored\n", o->resume);
    run_opts_merge(&o->r, o->set & ~fixed, args);
    *start_step = (long)s;
    return ck;
}

void ckpt_restore_model(weft_ckpt *ck, const char *path, weft_model **m, weft_optim_config *oc,
                        weft_rng *rng)
{
    int rc = weft_ckpt_get_model(ck, m);
    if (rc == 0)
        rc = weft_ckpt_optim_config(ck, oc);
    if (rc == 0)
        rc = weft_ckpt_get_rng(ck, "rng", rng);
    if (rc != 0)
        die("%s: %s", path, weft_strerror(rc));
}

/* The loader continues where the saved run stopped; frees ck. */
void ckpt_restore_data(weft_ckpt *ck, const char *path, weft_loader *l, const data_sets *d)
{
    weft_model_config cfg;
    char source[1200], spec[256];
    if (weft_ckpt_model_config(ck, &cfg) != 0)
        die("%s: no model config", path);
    weft_model_config_format(&cfg, spec, sizeof spec);
    snprintf(source, sizeof source, "%s from %s", spec, path);
    model_check_fit(&cfg, d, source); /* before the first step reads a sample */
    uint64_t pos;
    if (weft_ckpt_get_u64(ck, "data/position", &pos) != 0)
        die("%s: no data position", path);
    weft_loader_seek(l, pos);
    char name[sizeof d->ti.name];
    uint64_t samples;
    if (weft_ckpt_get_str(ck, "data/name", name, sizeof name) == 0 &&
        weft_ckpt_get_u64(ck, "data/samples", &samples) == 0 &&
        (strcmp(name, d->ti.name) != 0 || samples != d->ti.n))
        fprintf(stderr, "weft-train: warning: the checkpoint was trained on %s (%llu "
                        "samples), this run reads %s (%llu)\n",
                name, (unsigned long long)samples, d->ti.name, (unsigned long long)d->ti.n);
    weft_ckpt_free(ck);
}

/* Collective when z spans the job (full sync): a sharded optimiser is
 * gathered to rank 0, which writes. */
void ckpt_save(const trainer *t, long step)
{
    const char *path = t->o->save;
    const run_opts *r = &t->o->r;
    const data_sets *d = t->d;
    weft_zero *z = t->sync.z;
    int rank = t->rank;
    weft_ckpt *c = NULL;
    char args[4096];
    /* a pipeline's stages are assembled into the whole model on the lead */
    weft_optim *whole_opt = NULL;
    weft_model *whole = t->pl ? pipeline_gather(t->pl, t->m, z, &whole_opt) : NULL;
    if (t->pl && !t->lead)
        return;
    int rc = t->pl ? 0 : weft_zero_gather_params(z);
    if (rc == 0 && !t->pl && rank != 0 && t->sync.shared)
        rc = weft_zero_put_optim(z, NULL);
    if (rc != 0)
        die("cannot gather the training state for %s: %s", path, weft_strerror(rc));
    if (rank != 0)
        return;
    run_opts_format(r, args, sizeof args);
    rc = weft_ckpt_new(&c);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "format", "weft-train 1");
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "train/args", args);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "train/step", (uint64_t)step);
    if (rc == 0)
        rc = weft_ckpt_put_model(c, whole ? whole : t->m);
    if (rc == 0)
        rc = whole_opt ? weft_ckpt_put_optim(c, whole_opt) : weft_zero_put_optim(z, c);
    if (rc == 0)
        rc = weft_ckpt_put_rng(c, "rng", &t->rng);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/position", weft_loader_position(t->loader));
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/global_batch", (uint64_t)r->batch);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/seed", r->seed);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "data/name", d->ti.name);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/samples", d->ti.n);
    if (rc == 0)
        rc = weft_ckpt_save(c, path);
    weft_ckpt_free(c);
    weft_model_destroy(whole);
    weft_optim_destroy(whole_opt);
    if (rc != 0)
        die("cannot save checkpoint %s: %s", path, weft_strerror(rc));
}
