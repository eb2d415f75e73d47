/* Reading a plan for weft-cpn run and status: what weft-cpn plan writes
 * (docs/CPN.md, "Plan"), or a plan written by hand. Only what launching
 * needs is read; the rest (rejected plans, cost, carbon) is the planner's
 * account and is left alone. */
#include "cpn/cpn_run_plan.h"

#include "core/json.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t cap, const char *what)
{
    snprintf(err, cap, "%s", what);
    return WEFT_ECONFIG;
}

static int str_of(const json_value *o, const char *key, char *out, size_t cap, int need)
{
    const json_value *v = json_get(o, key);
    if (!v)
        return need ? -1 : 0;
    if (v->type != JSON_STR || v->len >= cap)
        return -1;
    memcpy(out, v->str, v->len + 1);
    return 0;
}

static double num_of(const json_value *o, const char *key, double dflt)
{
    const json_value *v = json_get(o, key);
    return v && v->type == JSON_NUM ? v->num : dflt;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        *len = fread(buf, 1, (size_t)n, f);
        buf[*len] = 0;
    }
    fclose(f);
    return buf;
}

/* The job: model, data, steps, batch, seq and its training arguments. */
static int read_job(const json_value *job, cpn_plan *p, char *err, size_t cap)
{
    long long x;
    if (!job || job->type != JSON_OBJ)
        return fail(err, cap, "the plan has no \"job\" object");
    if (str_of(job, "model", p->model, sizeof p->model, 1) ||
        str_of(job, "data", p->data, sizeof p->data, 1))
        return fail(err, cap, "job: \"model\" and \"data\" must be strings");
    if (json_int(json_get(job, "steps"), 1, 1LL << 40, &x))
        return fail(err, cap, "job: \"steps\" must be a positive integer (weft-cpn run "
                    "takes steps, not tokens)");
    p->steps = (long)x;
    if (json_int(json_get(job, "global_batch"), 1, 1 << 30, &x))
        return fail(err, cap, "job: \"global_batch\" must be a positive integer");
    p->global_batch = (int)x;
    p->seq = json_int(json_get(job, "seq"), 1, 1 << 24, &x) == 0 ? (int)x : 0;
    const json_value *ta = json_get(job, "train_args");
    if (!ta)
        return 0;
    if (ta->type != JSON_ARR || !(p->train_args = calloc(ta->n + 1, sizeof *p->train_args)))
        return fail(err, cap, "job: \"train_args\" must be an array of strings");
    for (size_t i = 0; i < ta->n; i++) {
        if (ta->items[i].type != JSON_STR || !(p->train_args[i] = strdup(ta->items[i].str)))
            return fail(err, cap, "job: \"train_args\" must be an array of strings");
        p->ntrain++;
    }
    return 0;
}

/* "full", "hier", "diloco", "streaming" with H: --sync's word. */
static int read_sync(const json_value *sy, cpn_plan *p, char *err, size_t cap)
{
    char mode[32] = "full";
    long long h = 0, f = 1, tau = -1;
    if (sy && (sy->type != JSON_OBJ || str_of(sy, "mode", mode, sizeof mode, 1)))
        return fail(err, cap, "sync: want an object with a \"mode\" string");
    if (sy && str_of(sy, "compress", p->compress, sizeof p->compress, 0))
        return fail(err, cap, "sync: \"compress\" must be a string");
    if (!strcmp(p->compress, "none"))
        p->compress[0] = 0;
    int outer = !strcmp(mode, "diloco") || !strcmp(mode, "streaming");
    if (outer && json_int(json_get(sy, "H"), 1, 1000000, &h))
        return fail(err, cap, "sync: diloco and streaming need \"H\" (inner steps)");
    if (sy && json_get(sy, "fragments"))
        json_int(json_get(sy, "fragments"), 1, 4096, &f);
    if (sy && json_get(sy, "overlap") && json_int(json_get(sy, "overlap"), 0, h, &tau))
        return fail(err, cap, "sync: \"overlap\" (steps the outer reduction runs beside the "
                    "next inner steps) must be in [0, H]");    /* hier is every step's all-reduce inside each cluster, then across:
     * full sync, whose all-reduce over a job that spans clusters is the
     * hier algorithm (clusters its upper level) where the cost model
     * picks it (docs/WAN.md) */
    p->H = outer ? (int)h : 0;
    if (!strcmp(mode, "full") || !strcmp(mode, "hier"))
        snprintf(p->sync, sizeof p->sync, "full");
    else if (!strcmp(mode, "diloco"))
        snprintf(p->sync, sizeof p->sync, "diloco:%lld", h);
    else if (!strcmp(mode, "streaming") && tau >= 0)
        snprintf(p->sync, sizeof p->sync, "streaming:%lld:%lld:%lld", h, f, tau);
    else if (!strcmp(mode, "streaming"))
        snprintf(p->sync, sizeof p->sync, "streaming:%lld:%lld", h, f);
    else
        return fail(err, cap, "sync: \"mode\" must be full, hier, diloco or streaming");
    return 0;
}

int cpn_part_read(const json_value *v, cpn_part *pt, char *err, size_t cap)
{
    long long x;
    const json_value *hosts = json_get(v, "hosts");
    if (v->type != JSON_OBJ || str_of(v, "cluster", pt->cluster, sizeof pt->cluster, 1))
        return fail(err, cap, "parts: each needs a \"cluster\" name");
    snprintf(pt->launcher, sizeof pt->launcher, "local");
    if (str_of(v, "launcher", pt->launcher, sizeof pt->launcher, 0) ||
        (strcmp(pt->launcher, "local") && strcmp(pt->launcher, "slurm") &&
         strcmp(pt->launcher, "ssh")))
        return fail(err, cap, "parts: \"launcher\" must be local, slurm or ssh");
    if (str_of(v, "slurm_conf", pt->slurm_conf, sizeof pt->slurm_conf, 0) ||
        (!strcmp(pt->launcher, "slurm") && !pt->slurm_conf[0]))
        return fail(err, cap, "parts: a slurm part needs \"slurm_conf\"");
    if (hosts && hosts->type == JSON_ARR && hosts->n > 0 && hosts->items[0].type == JSON_STR)
        snprintf(pt->host, sizeof pt->host, "%s", hosts->items[0].str);
    if (!strcmp(pt->launcher, "ssh") && !pt->host[0])
        return fail(err, cap, "parts: an ssh part needs \"hosts\"");
    if (json_int(json_get(v, "ranks"), 1, 65536, &x))
        return fail(err, cap, "parts: \"ranks\" must be a positive integer");
    pt->ranks = (int)x;
    if (json_int(json_get(v, "batch"), 1, 1 << 30, &x))
        return fail(err, cap, "parts: \"batch\" (the part's samples of a batch) must be a "
                    "positive integer");
    pt->batch = (int)x;
    pt->speed = num_of(v, "speed", 1);
    if (!(pt->speed > 0 && pt->speed <= 1))
        return fail(err, cap, "parts: \"speed\" must be in (0, 1]");
    return 0;
}

static int read_plan(const json_value *root, cpn_plan *p, char *err, size_t cap)
{
    char schema[64] = "";
    if (root->type != JSON_OBJ || str_of(root, "schema", schema, sizeof schema, 1) ||
        strcmp(schema, "weft-cpn-plan/1"))
        return fail(err, cap, "not a plan: want \"schema\": \"weft-cpn-plan/1\"");
    int rc = read_job(json_get(root, "job"), p, err, cap);
    if (rc == 0)
        rc = read_sync(json_get(root, "sync"), p, err, cap);
    const json_value *parts = json_get(root, "parts");
    if (rc == 0 && (!parts || parts->type != JSON_ARR || parts->n < 1))
        return fail(err, cap, "the plan has no \"parts\"");
    /* room for the clusters that may join the run (weft-cpn run --clusters) */
    p->cap = (int)parts->n + CPN_RUN_JOINERS;
    if (rc == 0 && !(p->parts = calloc((size_t)p->cap, sizeof *p->parts)))
        return WEFT_ENOMEM;
    long sum = 0;
    for (size_t i = 0; rc == 0 && i < parts->n; i++) {
        rc = cpn_part_read(&parts->items[i], &p->parts[i], err, cap);
        sum += p->parts[i].batch;
        p->nparts++;
    }
    p->nlaunch = p->nparts;
    if (rc == 0 && sum != p->global_batch) {
        snprintf(err, cap, "the parts' batches add up to %ld, not the job's global_batch %d",
                 sum, p->global_batch);
        return WEFT_ECONFIG;
    }
    const json_value *pr = json_get(root, "predicted");
    p->step_s = num_of(pr, "step_s", 0);
    p->total_s = num_of(pr, "total_s", 0);
    p->wan_s = num_of(pr, "wan_s", 0);
    return rc;
}

int cpn_plan_read(const char *path, cpn_plan *p, char *err, size_t cap)
{
    size_t len = 0;
    char why[256];
    memset(p, 0, sizeof *p);
    char *text = slurp(path, &len);
    if (!text) {
        snprintf(err, cap, "%s: cannot read it", path);
        return WEFT_EIO;
    }
    json_value *root = NULL;
    int rc = json_parse(text, len, &root, why, sizeof why);
    free(text);
    if (rc) {
        snprintf(err, cap, "%s: %s", path, why);
        return rc;
    }
    rc = read_plan(root, p, why, sizeof why);
    json_free(root);
    if (rc)
        snprintf(err, cap, "%s: %s", path, why);
    return rc;
}

void cpn_plan_free(cpn_plan *p)
{
    for (int i = 0; i < p->ntrain; i++)
        free(p->train_args[i]);
    free(p->train_args);
    free(p->parts);
    memset(p, 0, sizeof *p);
}
