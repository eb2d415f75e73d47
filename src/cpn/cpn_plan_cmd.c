/* weft-cpn plan: clusters (a file, or the registry's clusters that are
 * up), a job intent and a link matrix in; the plan out (weft-cpn-plan/1),
 * each part's layout from the single-cluster planner (weft-sim plan) at
 * that cluster's measured peak. */
#include "cpn/cpn_plan_out.h"
#include "cpn/cpn_registry.h"
#include "cpn/cpn_run_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *clusters, *job, *links, *registry, *secret, *out, *price;
} plan_args;

static int parse(int argc, char **argv, plan_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            printf("usage: weft-cpn plan (--clusters FILE | --registry HOST:PORT) --job FILE\n"
                   "                     [--links FILE] [--secret S] [--out FILE] [--price PLAN]\n"
                   "  FILE of clusters: one description or an array (weft-cpn probe's);\n"
                   "  the registry gives its clusters that are up and its link matrix.\n"
                   "  Prints the plan (weft-cpn-plan/1, docs/CPN.md); with --price, the\n"
                   "  predicted step of PLAN's parts, shares and sync as they stand.\n");
            return 1;
        }
        const char **dst = !strcmp(o, "--clusters") ? &a->clusters
                         : !strcmp(o, "--job")      ? &a->job
                         : !strcmp(o, "--links")    ? &a->links
                         : !strcmp(o, "--registry") ? &a->registry
                         : !strcmp(o, "--secret")   ? &a->secret
                         : !strcmp(o, "--out")      ? &a->out
                         : !strcmp(o, "--price")    ? &a->price
                                                    : NULL;
        if (!dst || !v) {
            fprintf(stderr, "weft-cpn plan: %s: unknown or without a value\n", o);
            return -1;
        }
        *dst = v;
    }
    if (!a->job || (!a->clusters == !a->registry)) {
        fprintf(stderr, "weft-cpn plan: --job and one of --clusters or --registry are needed\n");
        return -1;
    }
    return 0;
}

/* The registry's clusters that are up, as one JSON array text. */
static int from_registry(const plan_args *a, char **text)
{
    store_client *c;
    char err[512], **names = NULL;
    int n = 0, rc = cpn_reg_connect(a->registry, a->secret, &c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft-cpn plan: %s\n", err);
        return rc;
    }
    size_t cap = 2, len = 1;
    char *buf = malloc(cap);
    rc = buf ? cpn_reg_names(c, &names, &n) : WEFT_ENOMEM;
    if (buf)
        strcpy(buf, "[");
    for (int i = 0; !rc && i < n; i++) {
        char key[300], *st = NULL, *js = NULL;
        snprintf(key, sizeof key, "cpn/status/%s", names[i]);
        rc = cpn_reg_read(c, key, &st);
        snprintf(key, sizeof key, "cpn/cluster/%s", names[i]);
        if (!rc && st && !strncmp(st, "up", 2))
            rc = cpn_reg_read(c, key, &js);
        if (js) {
            size_t need = len + strlen(js) + 3;
            char *nb = need > cap ? realloc(buf, cap = need * 2) : buf;
            if (!nb)
                rc = WEFT_ENOMEM;
            else {
                buf = nb;
                len += (size_t)sprintf(buf + len, "%s%s", len > 1 ? "," : "", js);
            }
        }
        free(st);
        free(js);
    }
    if (!rc)
        strcat(buf, "]");
    cpn_reg_names_free(names, n);
    store_close(c);
    if (rc)
        free(buf);
    else
        *text = buf;
    return rc;
}

static int load(const plan_args *a, cpn_cluster **cs, int *n, cpn_job *job, cpn_link **links,
                int *nl)
{
    char *text = NULL, err[512];
    size_t len = 0;
    const char *what = a->job;
    int rc = cpn_read_file(a->job, &text, &len);
    if (!rc)
        rc = cpn_job_parse(text, len, job, err, sizeof err);
    free(text);
    text = NULL;
    if (!rc) {
        what = a->clusters ? a->clusters : a->registry;
        rc = a->clusters ? cpn_read_file(a->clusters, &text, &len) : from_registry(a, &text);
        if (!rc)
            rc = cpn_clusters_parse(text, strlen(text), cs, n, err, sizeof err);
        free(text);
        text = NULL;
    }
    if (!rc && a->links) {
        what = a->links;
        rc = cpn_read_file(a->links, &text, &len);
        if (!rc)
            rc = cpn_links_parse(text, len, links, nl, err, sizeof err);
        free(text);
    }
    if (rc == WEFT_EIO)
        fprintf(stderr, "weft-cpn plan: cannot read %s\n", what);
    else if (rc)
        fprintf(stderr, "weft-cpn plan: %s: %s\n", what, err);
    return rc;
}

/* The plan's sync word (cpn_run_plan's --sync) as the planner's mode. */
static cpn_sync sync_of(const char *w, int *H)
{
    *H = 0;
    if (!strncmp(w, "diloco:", 7) || !strncmp(w, "streaming:", 10)) {
        *H = atoi(strchr(w, ':') + 1);
        return w[0] == 'd' ? CPN_SYNC_DILOCO : CPN_SYNC_STREAMING;
    }
    return CPN_SYNC_FULL;
}

/* --price: a given plan's parts, shares and sync priced by the model. */
static int price_given(const plan_args *a, const cpn_cluster *cs, int n, const cpn_job *job,
                       const cpn_link *links, int nl)
{
    cpn_plan p;
    char err[512];
    int rc = cpn_plan_read(a->price, &p, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft-cpn plan: --price %s: %s\n", a->price, err);
        return rc;
    }
    cpn_candidate c;
    memset(&c, 0, sizeof c);
    c.given = 1;
    c.sync = sync_of(p.sync, &c.H);
    c.compress = !strcmp(p.compress, "int8") ? 2 : !strcmp(p.compress, "bf16") ? 1 : 0;
    for (int i = 0; !rc && i < p.nparts; i++) {
        int k = 0;
        while (k < n && strcmp(cs[k].name, p.parts[i].cluster))
            k++;
        if (k == n || i >= CPN_PLAN_MAX_CLUSTERS) {
            fprintf(stderr, "weft-cpn plan: --price: no cluster %s\n", p.parts[i].cluster);
            rc = WEFT_EINVAL;
            break;
        }
        c.idx[c.n] = k;
        c.ranks[c.n] = p.parts[i].ranks;
        c.batch[c.n++] = p.parts[i].batch;
    }
    if (!rc) {
        cpn_plan_price(cs, links, nl, &job->m, &c);
        printf("{\"step_s\": %.6g, \"compute_s\": %.6g, \"intra_s\": %.6g, \"wan_s\": %.6g, "
               "\"H\": %d, \"calibrated\": %d}\n", c.step_s, c.compute_s, c.intra_s, c.wan_s,
               c.H, c.calibrated);
    }
    cpn_plan_free(&p);
    return rc;
}

int weft_cpn_plan_main(int argc, char **argv)
{
    plan_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    cpn_cluster *cs = NULL;
    cpn_link *links = NULL;
    int n = 0, nl = 0;
    cpn_job job;
    memset(&job, 0, sizeof job);
    cpn_plan_result *r = calloc(1, sizeof *r);
    rc = r ? load(&a, &cs, &n, &job, &links, &nl) : WEFT_ENOMEM;
    if (!rc && (n < 1 || n > CPN_PLAN_MAX_CLUSTERS)) {
        fprintf(stderr, "weft-cpn plan: %d clusters: want 1 to %d\n", n, CPN_PLAN_MAX_CLUSTERS);
        rc = WEFT_EINVAL;
    }
    if (!rc && a.price)
        rc = price_given(&a, cs, n, &job, links, nl);
    else if (!rc && (rc = cpn_plan_search(cs, n, links, nl, &job.m, r)))
        fprintf(stderr, "weft-cpn plan: the job and clusters make no plan\n");
    cpn_jo w;
    cpn_jo_init(&w);
    if (!rc && !a.price && (rc = cpn_plan_write(cs, &job, r, &w)) == 0) {
        const char *text = cpn_jo_text(&w, &rc);
        if (!rc)
            rc = cpn_write_file(a.out, text);
    }
    if (!rc && !a.price && r->best.n == 0) {
        fprintf(stderr, "weft-cpn plan: no plan meets the job's QoS (\"rejected\" says why)\n");
        rc = WEFT_ECONFIG;
    }
    cpn_jo_free(&w);
    for (int i = 0; i < n; i++)
        cpn_cluster_free(&cs[i]);
    free(cs);
    free(links);
    free(r);
    cpn_job_free(&job);
    return rc;
}
