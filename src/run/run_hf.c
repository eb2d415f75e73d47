/* --init-from: a Hugging Face directory at the run's start. Loading
 * happens where each rank has just made its part of the model (a stage, a
 * tensor part, or whole, ZeRO not yet sharding it), so every layout reads
 * only what it holds. (--export is run_hf_export.c's.) */
#include "run/run_hf.h"

#include "run/run_paths.h"
#include "train/hf_config.h"

#include <stdio.h>
#include <string.h>

int hf_run_options(weft_run *t, opts *o)
{
    int rc = path_check(t, "--export", o->export_dir, 1, 1);
    if (rc == 0)
        rc = path_check(t, "--init-from", o->init_from, 1, 0);
    if (rc != 0 || !o->init_from[0])
        return rc;
    weft_model_config cfg;
    char err[1024];
    if ((rc = weft_hf_config_read(o->init_from, &cfg, err, sizeof err)) != 0)
        return run_fail(t, rc, "--init-from %s: %s", o->init_from, err);
    if (!(o->set & 1u << O_MODEL) &&
        weft_model_config_format(&cfg, o->r.model, sizeof o->r.model) >= (int)sizeof o->r.model)
        return run_fail(t, WEFT_ECONFIG, "--init-from %s: model spec too long", o->init_from);
    return 0;
}

int hf_run_check(weft_run *t, const weft_model_config *cfg, const char *spec)
{
    const char *dir = t->o->init_from;
    char err[1024], a[512], b[512];
    /* what --export cannot write is refused before the run, not after it */
    int rc = t->o->export_dir[0] ? hf_config_supported(cfg, err, sizeof err) : 0;
    if (rc != 0)
        return run_fail(t, WEFT_ECONFIG, "--export %s: --model %s: %s", t->o->export_dir,
                        spec, err);
    if (!dir[0])
        return 0;
    weft_model_config hc;
    if ((rc = weft_hf_config_read(dir, &hc, err, sizeof err)) != 0)
        return run_fail(t, rc, "--init-from %s: %s", dir, err);
    if (!hf_config_same(cfg, &hc, a, b, sizeof a))
        return run_fail(t, WEFT_ECONFIG,
                        "--model %s (%s) disagrees with --init-from %s, whose config.json "
                        "describes %s: leave --model out, or give that one", spec, a, dir, b);
    return 0;
}

int hf_run_load(weft_run *t)
{
    const char *dir = t->o->init_from;
    if (!dir[0])
        return 0;
    char err[1024];
    int rc = weft_model_load_hf(t->m, dir, err, sizeof err);
    if (rc != 0)
        return run_fail(t, rc, "--init-from %s: %s", dir, err);
    if (!t->o->quiet)
        run_say(t, WEFT_RUN_OUT, "weights from %s\n", dir);
    return 0;
}

