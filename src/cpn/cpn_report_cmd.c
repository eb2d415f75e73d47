/* weft-cpn report: publishes a cluster's description to the registry,
 * heartbeats, and measures the links from this cluster to the others'
 * endpoints (periodically, and when someone asks with links --refresh). */
#include "cpn/cpn_cluster.h"
#include "cpn/cpn_link.h"
#include "cpn/cpn_registry.h"

#include "core/clock.h"
#include "core/json.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *registry, *cluster, *secret, *link_host;
    double every, links_every, link_seconds;
    long count;
    int no_links;
} report_args;

static void usage(void)
{
    printf("usage: weft-cpn report --registry HOST:PORT --cluster FILE [--secret S]\n"
           "                       [--every S] [--count N] [--links-every S]\n"
           "                       [--link-seconds S] [--link-host ADDR] [--no-links]\n"
           "  Publishes FILE (weft-cpn probe's description), then heartbeats every S\n"
           "  seconds (default 2), N times (default: until killed). Serves a link\n"
           "  endpoint and measures the links to the other clusters' every\n"
           "  --links-every seconds (default 60) and on `weft-cpn links --refresh`.\n");
}

static int num(const char *o, const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    if (*end || end == v || *out < 0) {
        fprintf(stderr, "weft-cpn report: %s %s: want a number >= 0\n", o, v);
        return -1;
    }
    return 0;
}

static int parse(int argc, char **argv, report_args *a)
{
    memset(a, 0, sizeof *a);
    a->every = 2;
    a->links_every = 60;
    a->link_seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage();
            return 1;
        } else if (!strcmp(o, "--no-links")) {
            a->no_links = 1;
            continue;
        } else if (!v) {
            fprintf(stderr, "weft-cpn report: %s needs a value (or is unknown)\n", o);
            return -1;
        } else if (!strcmp(o, "--registry")) {
            a->registry = v;
        } else if (!strcmp(o, "--cluster")) {
            a->cluster = v;
        } else if (!strcmp(o, "--secret")) {
            a->secret = v;
        } else if (!strcmp(o, "--link-host")) {
            a->link_host = v;
        } else if (num(o, v, &x)) {
            return -1;
        } else if (!strcmp(o, "--every")) {
            a->every = x > 0.01 ? x : 0.01;
        } else if (!strcmp(o, "--count")) {
            a->count = (long)x;
        } else if (!strcmp(o, "--links-every")) {
            a->links_every = x;
        } else if (!strcmp(o, "--link-seconds")) {
            a->link_seconds = x > 0.01 ? x : 0.01;
        } else {
            fprintf(stderr, "weft-cpn report: unknown option %s\n", o);
            return -1;
        }
        i++;
    }
    if (!a->registry || !a->cluster) {
        fprintf(stderr, "weft-cpn report: --registry and --cluster are needed\n");
        return -1;
    }
    return 0;
}

/* The link from name to other, stored as one weft-cpn-links/1 entry. */
static int measure_one(store_client *c, const char *name, const char *other, double secs,
                       const char *secret)
{
    char key[300], *ep = NULL, err[512];
    snprintf(key, sizeof key, "cpn/ep/%s", other);
    int rc = cpn_reg_read(c, key, &ep);
    if (rc || !ep)
        return rc;
    cpn_link_figures f;
    int mrc = cpn_link_measure(ep, secret, secs, &f, err, sizeof err);
    free(ep);
    if (mrc) {
        fprintf(stderr, "weft-cpn report: %s\n", err);
        return 0; /* a link down is no reason to stop reporting */
    }
    cpn_jo w;
    char at[32];
    cpn_iso_now(at, sizeof at);
    cpn_jo_init(&w);
    cpn_jo_obj(&w, NULL);
    cpn_jo_str(&w, "from", name);
    cpn_jo_str(&w, "to", other);
    cpn_jo_num(&w, "bandwidth_bps", f.bandwidth_bps);
    cpn_jo_num(&w, "rtt_ms", f.rtt_ms);
    cpn_jo_num(&w, "loss", f.loss);
    cpn_jo_str(&w, "source", "measured");
    cpn_jo_str(&w, "at", at);
    cpn_jo_end(&w);
    const char *text = cpn_jo_text(&w, &rc);
    snprintf(key, sizeof key, "cpn/link/%s/%s", name, other);
    if (!rc)
        rc = store_set(c, key, text, strlen(text));
    cpn_jo_free(&w);
    return rc;
}

static int measure_links(store_client *c, const char *name, double secs, long long ask,
                         const char *secret)
{
    char **names;
    int n, rc = cpn_reg_names(c, &names, &n);
    for (int i = 0; !rc && i < n; i++)
        if (strcmp(names[i], name))
            rc = measure_one(c, name, names[i], secs, secret);
    cpn_reg_names_free(names, n);
    char key[300], val[32];
    snprintf(key, sizeof key, "cpn/linksdone/%s", name);
    snprintf(val, sizeof val, "%lld", ask);
    return rc ? rc : store_set(c, key, val, strlen(val));
}

/* The endpoint, and its address in the registry: --link-host, else the
 * address this host reaches the registry from. */
static int open_endpoint(store_client *c, const report_args *a, const char *name,
                         cpn_link_ep **ep)
{
    char err[512], ip[64], key[300], val[128];
    int port;
    int rc = cpn_link_serve(ep, NULL, 0, a->secret, &port, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft-cpn report: link endpoint: %s\n", err);
        return rc;
    }
    if (a->link_host)
        snprintf(ip, sizeof ip, "%s", a->link_host);
    else if (store_local_ip(c, ip, sizeof ip))
        snprintf(ip, sizeof ip, "127.0.0.1");
    snprintf(key, sizeof key, "cpn/ep/%s", name);
    snprintf(val, sizeof val, "%s:%d", ip, port);
    return store_set(c, key, val, strlen(val));
}

static int loop(store_client *c, const report_args *a, const char *name)
{
    double last_links = -1e30;
    long long done_ask = -1;
    int rc = 0;
    for (long i = 0; !rc && (a->count <= 0 || i < a->count); i++) {
        if (i > 0) {
            struct timespec ts = { (time_t)a->every,
                                   (long)((a->every - (time_t)a->every) * 1e9) };
            nanosleep(&ts, NULL);
        }
        if ((rc = cpn_reg_beat(c, name)) || a->no_links)
            continue;
        long long ask;
        if ((rc = cpn_reg_counter(c, "cpn/links/ask", &ask)))
            break;
        int due = a->links_every > 0 && clock_now() - last_links >= a->links_every;
        if (due || ask != done_ask) {
            rc = measure_links(c, name, a->link_seconds, ask, a->secret);
            last_links = clock_now();
            done_ask = ask;
        }
    }
    return rc;
}

int weft_cpn_report_main(int argc, char **argv)
{
    report_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    char *text = NULL, err[512];
    size_t len;
    cpn_cluster cl;
    memset(&cl, 0, sizeof cl);
    if ((rc = cpn_read_file(a.cluster, &text, &len))) {
        fprintf(stderr, "weft-cpn report: cannot read %s\n", a.cluster);
        return rc;
    }
    json_value *root = NULL;
    rc = json_parse(text, len, &root, err, sizeof err);
    if (!rc)
        rc = cpn_cluster_from_json(root, &cl, err, sizeof err);
    json_free(root);
    if (rc) {
        fprintf(stderr, "weft-cpn report: %s: %s\n", a.cluster, err);
        free(text);
        return rc;
    }
    store_client *c = NULL;
    cpn_link_ep *ep = NULL;
    rc = cpn_reg_connect(a.registry, a.secret, &c, err, sizeof err);
    if (rc)
        fprintf(stderr, "weft-cpn report: %s\n", err);
    if (!rc)
        rc = cpn_reg_publish(c, cl.name, text);
    if (!rc && !a.no_links)
        rc = open_endpoint(c, &a, cl.name, &ep);
    if (!rc)
        rc = loop(c, &a, cl.name);
    if (rc && c)
        fprintf(stderr, "weft-cpn report: %s\n", store_error(c));
    cpn_link_stop(ep);
    if (c)
        store_close(c);
    cpn_cluster_free(&cl);
    free(text);
    return rc;
}
