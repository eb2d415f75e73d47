/* weft-cpn clusters and weft-cpn links: the registry read back. */
#include "cpn/cpn_cluster.h"
#include "cpn/cpn_json_out.h"
#include "cpn/cpn_registry.h"

#include "core/clock.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *registry, *secret;
    int json, refresh;
    double wait;
} view_args;

static int parse(const char *cmd, int argc, char **argv, view_args *a)
{
    memset(a, 0, sizeof *a);
    a->wait = 30;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            printf("usage: weft-cpn %s --registry HOST:PORT [--secret S] %s\n", cmd,
                   !strcmp(cmd, "links") ? "[--refresh [--wait S]]"
                                         : "[--json]\n  --json: the descriptions as one "
                                           "JSON array (plan --clusters reads it)");
            return 1;
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
        } else if (!strcmp(o, "--refresh")) {
            a->refresh = 1;
        } else if (v && !strcmp(o, "--registry")) {
            a->registry = v;
            i++;
        } else if (v && !strcmp(o, "--secret")) {
            a->secret = v;
            i++;
        } else if (v && !strcmp(o, "--wait")) {
            a->wait = atof(v);
            i++;
        } else {
            fprintf(stderr, "weft-cpn %s: unknown option %s (or no value)\n", cmd, o);
            return -1;
        }
    }
    if (!a->registry) {
        fprintf(stderr, "weft-cpn %s: --registry HOST:PORT is needed\n", cmd);
        return -1;
    }
    return 0;
}

static int connect_(const char *cmd, const view_args *a, store_client **c)
{
    char err[512];
    int rc = cpn_reg_connect(a->registry, a->secret, c, err, sizeof err);
    if (rc)
        fprintf(stderr, "weft-cpn %s: %s\n", cmd, err);
    return rc;
}

static void print_line(const char *name, const char *status, const char *json)
{
    cpn_cluster cl;
    char err[256];
    int ok = json != NULL;
    cpn_cluster *cs = NULL;
    int n = 0;
    if (ok && cpn_clusters_parse(json, strlen(json), &cs, &n, err, sizeof err) == 0 && n == 1)
        cl = cs[0];
    else
        ok = 0;
    char state[16] = "unknown";
    double age = -1;
    if (status)
        sscanf(status, "%15s %lf", state, &age);
    if (ok)
        printf("%-16s %-7s age %6.1f s  hosts %2d  cores %4d  fp32/core %7.1f GFLOP/s  "
               "speed %.2f  L2 %.3f\n",
               name, state, age, cl.nhosts, cpn_cluster_cores(&cl),
               cpn_metric_value(&cl, "peak_fp32_gflops_per_core", 0),
               cpn_metric_value(&cl, "speed", 1), cl.l2);
    else
        printf("%-16s %-7s age %6.1f s  (no readable description)\n", name, state, age);
    for (int i = 0; i < n; i++)
        cpn_cluster_free(&cs[i]);
    free(cs);
}

int weft_cpn_clusters_main(int argc, char **argv)
{
    view_args a;
    store_client *c = NULL;
    int rc = parse("clusters", argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    if ((rc = connect_("clusters", &a, &c)))
        return rc;
    char **names;
    int n;
    rc = cpn_reg_names(c, &names, &n);
    if (a.json)
        printf("[");
    for (int i = 0; !rc && i < n; i++) {
        char key[300], *status = NULL, *json = NULL;
        snprintf(key, sizeof key, "cpn/status/%s", names[i]);
        rc = cpn_reg_read(c, key, &status);
        snprintf(key, sizeof key, "cpn/cluster/%s", names[i]);
        if (!rc)
            rc = cpn_reg_read(c, key, &json);
        if (!rc && a.json)
            printf("%s%s", i ? ",\n" : "", json ? json : "null");
        else if (!rc)
            print_line(names[i], status, json);
        free(status);
        free(json);
    }
    if (a.json)
        printf("]\n");
    if (rc)
        fprintf(stderr, "weft-cpn clusters: %s\n", store_error(c));
    cpn_reg_names_free(names, n);
    store_close(c);
    return rc;
}

/* After links --refresh: until every cluster with an endpoint has
 * measured for this request, or the wait is over. */
static int wait_refreshed(store_client *c, char **names, int n, long long ask, double wait)
{
    double end = clock_now() + wait;
    for (;;) {
        int pending = 0, rc = 0;
        for (int i = 0; !rc && i < n; i++) {
            char key[300], *ep = NULL, *done = NULL;
            snprintf(key, sizeof key, "cpn/ep/%s", names[i]);
            rc = cpn_reg_read(c, key, &ep);
            snprintf(key, sizeof key, "cpn/linksdone/%s", names[i]);
            if (!rc && ep)
                rc = cpn_reg_read(c, key, &done);
            if (ep && (!done || atoll(done) < ask))
                pending++;
            free(ep);
            free(done);
        }
        if (rc || !pending)
            return rc;
        if (clock_now() > end) {
            fprintf(stderr, "weft-cpn links: %d cluster(s) did not remeasure in %.0f s\n",
                    pending, wait);
            return 0;
        }
        struct timespec ts = { 0, 100000000 };
        nanosleep(&ts, NULL);
    }
}

static int print_links(store_client *c, char **names, int n)
{
    int rc = 0, first = 1;
    printf("{\"schema\":\"weft-cpn-links/1\",\"links\":[");
    for (int i = 0; !rc && i < n; i++)
        for (int j = 0; !rc && j < n; j++) {
            char key[300], *v = NULL;
            if (i == j)
                continue;
            snprintf(key, sizeof key, "cpn/link/%s/%s", names[i], names[j]);
            rc = cpn_reg_read(c, key, &v);
            if (v)
                printf("%s\n  %s", first ? "" : ",", v);
            first = first && !v;
            free(v);
        }
    printf("\n]}\n");
    return rc;
}

int weft_cpn_links_main(int argc, char **argv)
{
    view_args a;
    store_client *c = NULL;
    int rc = parse("links", argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    if ((rc = connect_("links", &a, &c)))
        return rc;
    char **names = NULL;
    int n = 0;
    int64_t ask = 0;
    if (a.refresh)
        rc = store_add(c, "cpn/links/ask", 1, &ask);
    if (!rc)
        rc = cpn_reg_names(c, &names, &n);
    if (!rc && a.refresh)
        rc = wait_refreshed(c, names, n, ask, a.wait);
    if (!rc)
        rc = print_links(c, names, n);
    if (rc)
        fprintf(stderr, "weft-cpn links: %s\n", store_error(c));
    cpn_reg_names_free(names, n);
    store_close(c);
    return rc;
}
