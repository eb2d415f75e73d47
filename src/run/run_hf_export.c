/* --export DIR: the model as a Hugging Face directory (config.json and
 * model.safetensors in transformers' names and layouts). */
#include "run/run_hf.h"

#include "run/run_pipeline.h"

/* Collective: the whole model on the lead, as a checkpoint gathers it
 * (ZeRO-3's shards, a pipeline's stages and tensor parts), written there
 * tensor by tensor. */
int hf_run_export(weft_run *t)
{
    const char *dir = t->o->export_dir;
    if (!dir[0])
        return 0;
    int rc = weft_zero_gather_params(t->sync.z);
    if (rc != 0)
        return run_fail(t, rc, "--export: gathering parameters: %s", weft_strerror(rc));
    weft_model *whole = NULL;
    if (t->pl && (rc = pipeline_gather(t->pl, t->m, t->sync.z, NULL, &whole)) != 0)
        return rc;
    char err[1024];
    if (t->lead && (rc = weft_model_save_hf(whole ? whole : t->m, dir, err, sizeof err)) != 0)
        rc = run_fail(t, rc, "--export %s: %s", dir, err);
    weft_model_destroy(whole);
    if (rc == 0 && t->lead && !t->o->quiet)
        run_say(t, WEFT_RUN_OUT, "exported %s\n", dir);
    return rc;
}
