/* Job intents and link matrices from JSON. */
#include "cpn/cpn_job.h"

#include "core/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double num_or(const json_value *o, const char *key, double dflt)
{
    const json_value *v = o ? json_get(o, key) : NULL;
    return v && v->type == JSON_NUM ? v->num : dflt;
}

static int read_qos(const json_value *q, cpn_job_model *m, char *err, size_t errlen)
{
    m->deadline_s = num_or(q, "deadline_s", 0);
    m->budget = num_or(q, "budget", 0);
    m->carbon_cap_g = num_or(q, "carbon_cap_g", 0);
    m->min_clusters = (int)num_or(q, "min_clusters", 0);
    m->max_clusters = (int)num_or(q, "max_clusters", 0);
    m->fixed_h = (int)num_or(q, "H", 0);
    const json_value *h = q ? json_get(q, "H") : NULL;
    if (h && h->type == JSON_STR) { /* "30s": an outer period in seconds */
        char *end;
        m->period_s = strtod(h->str, &end);
        if (end == h->str || strcmp(end, "s") || !(m->period_s > 0)) {
            snprintf(err, errlen, "offset %zu: qos.H is a number of steps or seconds (\"30s\")",
                     h->offset);
            return WEFT_EINVAL;
        }
    }
    m->max_compress = 1;
    const json_value *o = q ? json_get(q, "objective") : NULL;
    const json_value *c = q ? json_get(q, "compress") : NULL;
    if (o && (o->type != JSON_STR || (strcmp(o->str, "time") && strcmp(o->str, "cost") &&
                                      strcmp(o->str, "carbon")))) {
        snprintf(err, errlen, "offset %zu: qos.objective is time, cost or carbon", o->offset);
        return WEFT_EINVAL;
    }
    m->objective = !o ? CPN_OBJ_TIME : !strcmp(o->str, "cost") ? CPN_OBJ_COST
                                   : !strcmp(o->str, "carbon") ? CPN_OBJ_CARBON : CPN_OBJ_TIME;
    if (c && (c->type != JSON_STR || (strcmp(c->str, "none") && strcmp(c->str, "bf16") &&
                                      strcmp(c->str, "int8")))) {
        snprintf(err, errlen, "offset %zu: qos.compress (the most allowed) is none, bf16 or "
                 "int8", c->offset);
        return WEFT_EINVAL;
    }
    if (c)
        m->max_compress = !strcmp(c->str, "int8") ? 2 : !strcmp(c->str, "bf16") ? 1 : 0;
    return 0;
}

/* The model's FLOPs a sample and its gradient's bytes. */
static int read_model(const json_value *root, cpn_job *j, char *err, size_t errlen)
{
    const json_value *model = json_get(root, "model");
    if (!model || model->type != JSON_STR ||
        weft_model_config_parse(model->str, &j->model) != 0) {
        snprintf(err, errlen, "\"model\": want a --model spec (gpt:..., llama:..., mlp:...)");
        return WEFT_EINVAL;
    }
    j->seq = (int)num_or(root, "seq", 0);
    int seq = j->model.type == WEFT_MODEL_MLP ? 1 : j->seq > 0 ? j->seq : j->model.ctx;
    j->m.seq = seq;
    weft_model_config_format(&j->model, j->m.model, sizeof j->m.model);
    double f1 = 0;
    if (weft_model_flops(&j->model, 1, seq, &j->m.flops_per_sample) ||
        weft_model_flops(&j->model, 1, 1, &f1)) {
        snprintf(err, errlen, "\"model\": its FLOPs cannot be counted");
        return WEFT_EINVAL;
    }
    /* six FLOPs a parameter a token (the attention's share at one token
     * is small): the parameters, whose fp32 gradient is all-reduced */
    j->m.grad_bytes = f1 / 6 * 4;
    long long b = 0;
    if (json_int(json_get(root, "global_batch"), 1, 1 << 30, &b)) {
        snprintf(err, errlen, "\"global_batch\": want an integer >= 1");
        return WEFT_EINVAL;
    }
    j->m.global_batch = (int)b;
    double steps = num_or(root, "steps", 0), tokens = num_or(root, "tokens", 0);
    if (steps <= 0 && tokens > 0)
        steps = ceil(tokens / ((double)b * seq));
    if (steps < 1) {
        snprintf(err, errlen, "want \"steps\" or \"tokens\" > 0");
        return WEFT_EINVAL;
    }
    j->m.steps = (long)steps;
    return 0;
}

int cpn_job_parse(const char *text, size_t len, cpn_job *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_value *root = NULL;
    int rc = json_parse(text, len, &root, err, errlen);
    if (rc)
        return rc;
    const json_value *schema = json_get(root, "schema");
    if (root->type != JSON_OBJ ||
        (schema && (schema->type != JSON_STR || strcmp(schema->str, "weft-cpn-job/1")))) {
        snprintf(err, errlen, "the job is a JSON object of schema weft-cpn-job/1");
        rc = WEFT_EINVAL;
    }
    if (!rc)
        rc = read_model(root, out, err, errlen);
    if (!rc)
        rc = read_qos(json_get(root, "qos"), &out->m, err, errlen);
    json_free(root);
    out->m.now = (double)time(NULL);
    if (!rc && !(out->text = strndup(text, len)))
        rc = WEFT_ENOMEM;
    if (rc)
        cpn_job_free(out);
    return rc;
}

void cpn_job_free(cpn_job *j)
{
    free(j->text);
    j->text = NULL;
}

int cpn_links_parse(const char *text, size_t len, cpn_link **links, int *n, char *err,
                    size_t errlen)
{
    json_value *root = NULL;
    *links = NULL;
    *n = 0;
    int rc = json_parse(text, len, &root, err, errlen);
    if (rc)
        return rc;
    const json_value *ls = json_get(root, "links");
    if (!ls || ls->type != JSON_ARR) {
        snprintf(err, errlen, "a link matrix has \"links\": [...] (weft-cpn-links/1)");
        json_free(root);
        return WEFT_EINVAL;
    }
    size_t count = ls->n;
    cpn_link *v = calloc(count ? count : 1, sizeof *v);
    for (size_t i = 0; v && !rc && i < ls->n; i++) {
        const json_value *l = &ls->items[i], *f = json_get(l, "from"), *t = json_get(l, "to");
        v[i].bandwidth_bps = num_or(l, "bandwidth_bps", 0);
        v[i].rtt_ms = num_or(l, "rtt_ms", 0);
        v[i].loss = num_or(l, "loss", 0);
        if (!f || !t || f->type != JSON_STR || t->type != JSON_STR || v[i].bandwidth_bps <= 0) {
            snprintf(err, errlen, "offset %zu: a link needs \"from\", \"to\" and "
                     "\"bandwidth_bps\" > 0", l->offset);
            rc = WEFT_EINVAL;
            break;
        }
        snprintf(v[i].from, sizeof v[i].from, "%s", f->str);
        snprintf(v[i].to, sizeof v[i].to, "%s", t->str);
    }
    json_free(root);
    if (!v)
        return WEFT_ENOMEM;
    if (rc) {
        free(v);
        return rc;
    }
    *links = v;
    *n = (int)count;
    return 0;
}
