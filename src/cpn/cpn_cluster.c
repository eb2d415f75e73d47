/* Cluster descriptions in and out of JSON. */
#include "cpn/cpn_cluster.h"

#include "core/json.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cpn_cluster_free(cpn_cluster *c)
{
    if (!c)
        return;
    free(c->hosts);
    c->hosts = NULL;
    c->nhosts = 0;
}

const cpn_metric *cpn_metric_find(const cpn_cluster *c, const char *name)
{
    for (int i = 0; i < c->nmetrics; i++)
        if (!strcmp(c->metrics[i].name, name))
            return &c->metrics[i];
    return NULL;
}

double cpn_metric_value(const cpn_cluster *c, const char *name, double dflt)
{
    const cpn_metric *m = cpn_metric_find(c, name);
    return m && !m->text[0] ? m->value : dflt;
}

int cpn_metric_set(cpn_cluster *c, const cpn_metric *m)
{
    for (int i = 0; i < c->nmetrics; i++)
        if (!strcmp(c->metrics[i].name, m->name)) {
            c->metrics[i] = *m;
            return 0;
        }
    if (c->nmetrics >= CPN_MAX_METRICS)
        return WEFT_EINVAL;
    c->metrics[c->nmetrics++] = *m;
    return 0;
}

int cpn_cluster_cores(const cpn_cluster *c)
{
    int n = 0;
    for (int i = 0; i < c->nhosts; i++)
        n += c->hosts[i].cores;
    return n;
}

void cpn_iso_now(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void copy_str(char *dst, size_t cap, const json_value *v)
{
    if (v && v->type == JSON_STR)
        snprintf(dst, cap, "%s", v->str);
}

static int read_metric(const char *name, const json_value *v, cpn_metric *m, char *err,
                       size_t errlen)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    const json_value *val = v->type == JSON_OBJ ? json_get(v, "value") : NULL;
    if (!val || (val->type != JSON_NUM && val->type != JSON_STR)) {
        snprintf(err, errlen, "metric %s: no \"value\" (a number or a string)", name);
        return WEFT_EINVAL;
    }
    if (val->type == JSON_NUM)
        m->value = val->num;
    else
        copy_str(m->text, sizeof m->text, val);
    copy_str(m->unit, sizeof m->unit, json_get(v, "unit"));
    snprintf(m->source, sizeof m->source, "declared");
    copy_str(m->source, sizeof m->source, json_get(v, "source"));
    copy_str(m->statistic, sizeof m->statistic, json_get(v, "statistic"));
    copy_str(m->at, sizeof m->at, json_get(v, "at"));
    return 0;
}

static int read_hosts(const json_value *hs, cpn_cluster *c, char *err, size_t errlen)
{
    if (!hs || hs->type != JSON_ARR || hs->n == 0) {
        snprintf(err, errlen, "cluster %s: \"hosts\" must be a non-empty array", c->name);
        return WEFT_EINVAL;
    }
    c->hosts = calloc(hs->n, sizeof *c->hosts);
    if (!c->hosts)
        return WEFT_ENOMEM;
    c->nhosts = (int)hs->n;
    for (size_t i = 0; i < hs->n; i++) {
        const json_value *h = &hs->items[i];
        long long cores = 0;
        if (h->type != JSON_OBJ || json_int(json_get(h, "cores"), 1, 1 << 20, &cores)) {
            snprintf(err, errlen, "cluster %s: host %zu needs \"cores\" >= 1", c->name, i);
            return WEFT_EINVAL;
        }
        c->hosts[i].cores = (int)cores;
        copy_str(c->hosts[i].name, sizeof c->hosts[i].name, json_get(h, "name"));
        copy_str(c->hosts[i].addr, sizeof c->hosts[i].addr, json_get(h, "addr"));
        const json_value *mem = json_get(h, "mem_bytes");
        c->hosts[i].mem_bytes = mem && mem->type == JSON_NUM ? mem->num : 0;
    }
    return 0;
}

int cpn_cluster_from_json(const void *obj, cpn_cluster *out, char *err, size_t errlen)
{
    const json_value *v = obj;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < CPN_L1_N; i++)
        out->l1[i] = -1;
    const json_value *name = v->type == JSON_OBJ ? json_get(v, "name") : NULL;
    if (!name || name->type != JSON_STR || !name->str[0] || name->len >= CPN_NAME_CAP) {
        snprintf(err, errlen, "offset %zu: a cluster needs a \"name\" (a short string)",
                 v->offset);
        return WEFT_EINVAL;
    }
    const json_value *schema = json_get(v, "schema");
    if (schema && (schema->type != JSON_STR || strcmp(schema->str, "weft-cpn-cluster/1"))) {
        snprintf(err, errlen, "cluster %s: schema is not weft-cpn-cluster/1", name->str);
        return WEFT_EINVAL;
    }
    copy_str(out->name, sizeof out->name, name);
    snprintf(out->launcher, sizeof out->launcher, "local");
    copy_str(out->launcher, sizeof out->launcher, json_get(v, "launcher"));
    copy_str(out->slurm_conf, sizeof out->slurm_conf, json_get(v, "slurm_conf"));
    int rc = read_hosts(json_get(v, "hosts"), out, err, errlen);
    const json_value *cal = json_get(v, "calibrated_for");
    if (cal && cal->type == JSON_OBJ) {
        copy_str(out->calib_model, sizeof out->calib_model, json_get(cal, "model"));
        const json_value *seq = json_get(cal, "seq");
        out->calib_seq = seq && seq->type == JSON_NUM ? (int)seq->num : 0;
    }
    const json_value *ms = json_get(v, "metrics");
    for (size_t i = 0; !rc && ms && ms->type == JSON_OBJ && i < ms->n; i++) {
        cpn_metric m;
        rc = read_metric(ms->keys[i], &ms->items[i], &m, err, errlen);
        if (!rc && cpn_metric_set(out, &m)) {
            snprintf(err, errlen, "cluster %s: more than %d metrics", out->name,
                     CPN_MAX_METRICS);
            rc = WEFT_EINVAL;
        }
    }
    if (rc) {
        cpn_cluster_free(out);
        return rc;
    }
    cpn_cluster_score(out);
    return 0;
}

int cpn_clusters_parse(const char *text, size_t len, cpn_cluster **out, int *n, char *err,
                       size_t errlen)
{
    json_value *root = NULL;
    *out = NULL;
    *n = 0;
    int rc = json_parse(text, len, &root, err, errlen);
    if (rc)
        return rc;
    size_t count = root->type == JSON_ARR ? root->n : 1;
    cpn_cluster *cs = calloc(count ? count : 1, sizeof *cs);
    if (!cs) {
        json_free(root);
        return WEFT_ENOMEM;
    }
    for (size_t i = 0; !rc && i < count; i++) {
        const json_value *v = root->type == JSON_ARR ? &root->items[i] : root;
        rc = cpn_cluster_from_json(v, &cs[i], err, errlen);
        for (size_t j = 0; !rc && j < i; j++)
            if (!strcmp(cs[j].name, cs[i].name)) {
                snprintf(err, errlen, "two clusters called %s", cs[i].name);
                rc = WEFT_EINVAL;
            }
        if (!rc)
            *n = (int)i + 1;
    }
    json_free(root);
    if (rc) {
        for (int i = 0; i < *n; i++)
            cpn_cluster_free(&cs[i]);
        free(cs);
        *n = 0;
        return rc;
    }
    *out = cs;
    return 0;
}

static void write_metric(cpn_jo *w, const cpn_metric *m)
{
    cpn_jo_obj(w, m->name);
    if (m->text[0])
        cpn_jo_str(w, "value", m->text);
    else
        cpn_jo_num(w, "value", m->value);
    if (m->unit[0])
        cpn_jo_str(w, "unit", m->unit);
    cpn_jo_str(w, "source", m->source[0] ? m->source : "declared");
    if (m->statistic[0])
        cpn_jo_str(w, "statistic", m->statistic);
    if (m->at[0])
        cpn_jo_str(w, "at", m->at);
    cpn_jo_end(w);
}

static const char *const l1_names[CPN_L1_N] = { "compute", "network", "price", "carbon" };

void cpn_cluster_write(cpn_jo *w, const char *key, const cpn_cluster *c)
{
    cpn_jo_obj(w, key);
    cpn_jo_str(w, "schema", "weft-cpn-cluster/1");
    cpn_jo_str(w, "name", c->name);
    cpn_jo_str(w, "launcher", c->launcher[0] ? c->launcher : "local");
    if (c->slurm_conf[0])
        cpn_jo_str(w, "slurm_conf", c->slurm_conf);
    cpn_jo_arr(w, "hosts");
    for (int i = 0; i < c->nhosts; i++) {
        cpn_jo_obj(w, NULL);
        cpn_jo_str(w, "name", c->hosts[i].name);
        cpn_jo_str(w, "addr", c->hosts[i].addr);
        cpn_jo_int(w, "cores", c->hosts[i].cores);
        cpn_jo_num(w, "mem_bytes", c->hosts[i].mem_bytes);
        cpn_jo_end(w);
    }
    cpn_jo_end(w);
    if (c->calib_model[0]) {
        cpn_jo_obj(w, "calibrated_for");
        cpn_jo_str(w, "model", c->calib_model);
        cpn_jo_int(w, "seq", c->calib_seq);
        cpn_jo_end(w);
    }
    cpn_jo_obj(w, "metrics");
    for (int i = 0; i < c->nmetrics; i++)
        write_metric(w, &c->metrics[i]);
    cpn_jo_end(w);
    cpn_jo_obj(w, "score");
    cpn_jo_obj(w, "L1");
    for (int i = 0; i < CPN_L1_N; i++)
        if (c->l1[i] >= 0)
            cpn_jo_num(w, l1_names[i], c->l1[i]);
    cpn_jo_end(w);
    cpn_jo_num(w, "L2", c->l2);
    cpn_jo_end(w);
    cpn_jo_end(w);
}

int cpn_read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    *text = NULL;
    if (!f)
        return WEFT_EIO;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    int rc = b ? 0 : WEFT_ENOMEM;
    while (!rc) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                rc = WEFT_ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = WEFT_EIO;
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = 0;
    *text = b;
    if (len)
        *len = n;
    return 0;
}

int cpn_write_file(const char *path, const char *text)
{
    if (!path || !strcmp(path, "-")) {
        printf("%s\n", text);
        return fflush(stdout) ? WEFT_EIO : 0;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return WEFT_EIO;
    int bad = fprintf(f, "%s\n", text) < 0;
    bad |= fclose(f) != 0;
    return bad ? WEFT_EIO : 0;
}
