/* weft-cpn serve: the registry. weft's store keeps the keys
 * (cpn_registry.h); this process also watches every cluster's heartbeat
 * counter and writes whether it moved within the last T seconds, by its
 * own clock alone, so that the reporters' clocks need not agree. */
#include "cpn/cpn_registry.h"

#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char name[128];
    long long beats;
    double moved; /* clock_now() when beats last changed */
} watched;

typedef struct {
    const char *listen, *secret;
    double down_after, seconds;
} serve_args;

static int parse(int argc, char **argv, serve_args *a)
{
    memset(a, 0, sizeof *a);
    a->down_after = 15;
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            printf("usage: weft-cpn serve --listen HOST:PORT [--secret S] [--down-after T]\n"
                   "                      [--for SECONDS]\n"
                   "  The registry clusters report to (weft's store: clients prove the\n"
                   "  secret, else WEFT_JOB_SECRET's, when one is set; TLS under WEFT_TLS=1).\n"
                   "  A cluster whose heartbeats stop for T seconds (default 15) is down.\n");
            return 1;
        }
        if (!v) {
            fprintf(stderr, "weft-cpn serve: %s needs a value (or is unknown)\n", o);
            return -1;
        }
        if (!strcmp(o, "--listen"))
            a->listen = v;
        else if (!strcmp(o, "--secret"))
            a->secret = v;
        else if (!strcmp(o, "--down-after") || !strcmp(o, "--for")) {
            char *end;
            double x = strtod(v, &end);
            if (*end || end == v || x <= 0) {
                fprintf(stderr, "weft-cpn serve: %s %s: want seconds > 0\n", o, v);
                return -1;
            }
            *(!strcmp(o, "--for") ? &a->seconds : &a->down_after) = x;
        } else {
            fprintf(stderr, "weft-cpn serve: unknown option %s\n", o);
            return -1;
        }
    }
    if (!a->listen) {
        fprintf(stderr, "weft-cpn serve: --listen HOST:PORT is needed\n");
        return -1;
    }
    return 0;
}

/* One pass over the registered clusters: each one's status rewritten. */
static int watch_once(store_client *c, watched **w, int *nw, double down_after)
{
    char **names;
    int n, rc = cpn_reg_names(c, &names, &n);
    for (int i = 0; !rc && i < n; i++) {
        int j = 0;
        while (j < *nw && strcmp((*w)[j].name, names[i]))
            j++;
        if (j == *nw) {
            watched *nw2 = realloc(*w, (size_t)(*nw + 1) * sizeof **w);
            if (!nw2) {
                rc = WEFT_ENOMEM;
                break;
            }
            *w = nw2;
            memset(&nw2[j], 0, sizeof nw2[j]);
            snprintf(nw2[j].name, sizeof nw2[j].name, "%s", names[i]);
            nw2[j].beats = -1;
            (*nw)++;
        }
        char key[256], val[64];
        long long beats;
        snprintf(key, sizeof key, "cpn/beat/%s", names[i]);
        if ((rc = cpn_reg_counter(c, key, &beats)))
            break;
        double now = clock_now();
        if (beats != (*w)[j].beats) {
            (*w)[j].beats = beats;
            (*w)[j].moved = now;
        }
        double age = now - (*w)[j].moved;
        snprintf(val, sizeof val, "%s %.1f", age > down_after ? "down" : "up", age);
        snprintf(key, sizeof key, "cpn/status/%s", names[i]);
        rc = store_set(c, key, val, strlen(val));
    }
    cpn_reg_names_free(names, n);
    return rc;
}

int weft_cpn_serve_main(int argc, char **argv)
{
    serve_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    char host[SOCK_ADDR_MAX], err[512], self[SOCK_ADDR_MAX + 16];
    int port, bound;
    /* port 0 (any) is fine here, though not to connect to */
    char probe_addr[SOCK_ADDR_MAX + 8];
    size_t hl = strlen(a.listen);
    int any = hl >= 2 && !strcmp(a.listen + hl - 2, ":0");
    snprintf(probe_addr, sizeof probe_addr, "%.*s%s", (int)(any ? hl - 1 : hl), a.listen,
             any ? "1" : "");
    if (sock_split_addr(probe_addr, host, sizeof host, &port)) {
        fprintf(stderr, "weft-cpn serve: --listen %s: want host:port\n", a.listen);
        return WEFT_EINVAL;
    }
    if (any)
        port = 0;
    const char *secret = a.secret ? a.secret : getenv("WEFT_JOB_SECRET");
    if (secret && !secret[0])
        secret = NULL;
    store_server *s;
    if ((rc = store_server_start(&s, host[0] ? host : NULL, port, &bound, secret, err,
                                 sizeof err))) {
        fprintf(stderr, "weft-cpn serve: %s\n", err);
        return rc;
    }
    printf("weft-cpn serve: listening on %s:%d\n", host[0] ? host : "0.0.0.0", bound);
    fflush(stdout);
    snprintf(self, sizeof self, "%s:%d",
             host[0] && strcmp(host, "0.0.0.0") ? host : "127.0.0.1", bound);
    store_client *c = NULL;
    rc = cpn_reg_connect(self, secret, &c, err, sizeof err);
    watched *w = NULL;
    int nw = 0;
    double t0 = clock_now(), tick = a.down_after / 4 < 1 ? a.down_after / 4 : 1;
    while (!rc && (a.seconds <= 0 || clock_now() - t0 < a.seconds)) {
        rc = watch_once(c, &w, &nw, a.down_after);
        struct timespec ts = { (time_t)tick, (long)((tick - (time_t)tick) * 1e9) };
        nanosleep(&ts, NULL);
    }
    if (rc)
        fprintf(stderr, "weft-cpn serve: %s\n", c ? store_error(c) : err);
    free(w);
    if (c)
        store_close(c);
    store_server_stop(s);
    return rc;
}
