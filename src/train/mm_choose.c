#include "train/mm_choose.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/host_cache.h"

void train_mm_choose(mm_shapes *t, int forced, int have_blas, int reps,
                     mm_timer_fn fn, void *arg, mm_choice *out)
{
    memset(out, 0, sizeof *out);
    out->flops = train_mm_shapes_flops(t);
    out->shapes = t->n;
    if (forced == MM_PORTABLE || forced == MM_OPENBLAS || !have_blas || t->n == 0) {
        out->backend = forced == MM_OPENBLAS && have_blas ? MM_OPENBLAS : MM_PORTABLE;
        snprintf(out->source, sizeof out->source, "%s",
                 forced == MM_PORTABLE || forced == MM_OPENBLAS ? "as told"
                 : !have_blas                                   ? "the only kernel"
                                                                : "no products to time");
        return;
    }
    if (reps < 1)
        reps = 1;
    for (int i = 0; i < t->n; i++) {
        double bp = 1e30, bb = 1e30;
        /* interleaved, so that a slow spell of the machine falls on both */
        for (int r = 0; r < reps; r++) {
            double p = fn(arg, MM_PORTABLE, &t->s[i]), b = fn(arg, MM_OPENBLAS, &t->s[i]);
            bp = p < bp ? p : bp;
            bb = b < bb ? b : bb;
        }
        out->port_s += t->s[i].count * bp;
        out->blas_s += t->s[i].count * bb;
        out->split_s += t->s[i].count * (bp < bb ? bp : bb);
        t->s[i].pick = bb < bp ? MM_OPENBLAS : MM_PORTABLE;
    }
    out->backend = out->blas_s < out->port_s ? MM_OPENBLAS : MM_PORTABLE;
    double single = out->blas_s < out->port_s ? out->blas_s : out->port_s;
    if (out->split_s < single * (1.0 - MM_MIXED_GAIN)) {
        out->mixed = 1;
        out->route = *t;
    }
    snprintf(out->source, sizeof out->source, "measured now");
}

/* A line: the version tag, the key, the kernels with spaces as '_', the
 * choice and the timings (milliseconds per step). */
#define MM_CACHE_TAG "v1"

static void underscore(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
    for (char *s = dst; *s; s++)
        *s = *s == ' ' ? '_' : *s;
}

/* A mixed choice's route: "ta.tb.M.N.K.acc.k/..." with k 'o' (OpenBLAS)
 * or 'p'; "-" for none. */
static void route_format(const mm_choice *c, char *buf, size_t cap)
{
    size_t at = 0;
    snprintf(buf, cap, "-");
    for (int i = 0; c->mixed && i < c->route.n && at < cap; i++) {
        const mm_shape *s = &c->route.s[i];
        at += (size_t)snprintf(buf + at, cap - at, "%s%d.%d.%d.%d.%d.%d.%c", i ? "/" : "", s->ta,
                               s->tb, s->M, s->N, s->K, s->acc,
                               s->pick == MM_OPENBLAS ? 'o' : 'p');
    }
}

static int route_parse(char *r, mm_choice *c)
{
    c->mixed = strcmp(r, "-") != 0;
    c->route.n = 0;
    for (char *save = NULL, *tok = c->mixed ? strtok_r(r, "/", &save) : NULL; tok;
         tok = strtok_r(NULL, "/", &save)) {
        mm_shape s = { 0 };
        char k;
        if (c->route.n == MM_SHAPES_MAX ||
            sscanf(tok, "%d.%d.%d.%d.%d.%d.%c", &s.ta, &s.tb, &s.M, &s.N, &s.K, &s.acc, &k) != 7 ||
            (k != 'o' && k != 'p'))
            return -1;
        s.pick = k == 'o' ? MM_OPENBLAS : MM_PORTABLE;
        s.count = 1.0;
        c->route.s[c->route.n++] = s;
    }
    return c->mixed && c->route.n == 0 ? -1 : 0;
}

enum { LINE_MAX_CHARS = 2560 };

static int line_parse(const char *line, uint64_t *key, char *kern, size_t kcap, mm_choice *c)
{
    unsigned long long k;
    char kn[128], ch[16], route[LINE_MAX_CHARS];
    double p, b, sp, fl;
    int shapes;
    if (sscanf(line,
               MM_CACHE_TAG " key=%llx kernels=%127s choice=%15s port_ms=%lf blas_ms=%lf "
                            "split_ms=%lf gflop=%lf products=%d route=%2559s",
               &k, kn, ch, &p, &b, &sp, &fl, &shapes, route) != 9 ||
        p <= 0 || b <= 0 || sp <= 0 || fl <= 0 || shapes < 0)
        return -1;
    if (strcmp(ch, "openblas") != 0 && strcmp(ch, "portable") != 0)
        return -1;
    *key = k;
    snprintf(kern, kcap, "%s", kn);
    memset(c, 0, sizeof *c);
    c->backend = strcmp(ch, "openblas") == 0 ? MM_OPENBLAS : MM_PORTABLE;
    c->port_s = p / 1e3;
    c->blas_s = b / 1e3;
    c->split_s = sp / 1e3;
    c->flops = fl * 1e9;
    c->shapes = shapes;
    return route_parse(route, c);
}

int train_mm_choice_load(uint64_t key, const char *kernels, mm_choice *out)
{
    char paths[2][300], want[128];
    int n;
    if (host_cache_paths("matmul", paths, &n))
        return -1;
    underscore(want, sizeof want, kernels);
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(paths[i], "r");
        if (!f)
            continue;
        char line[LINE_MAX_CHARS], kn[128];
        uint64_t k;
        static_assert(sizeof(mm_choice) < 8192, "a choice on the stack");
        mm_choice c;
        int found = 0;
        while (!found && fgets(line, sizeof line, f))
            if (line_parse(line, &k, kn, sizeof kn, &c) == 0 && k == key && !strcmp(kn, want))
                found = 1;
        fclose(f);
        if (found) {
            *out = c;
            snprintf(out->source, sizeof out->source, "measured once, kept in %.280s", paths[i]);
            return 0;
        }
    }
    return -1;
}

/* Rewrites path with its other keys' lines (the newest MM_CACHE_LINES - 1)
 * and this one last; through a temporary file and rename, so a reader
 * never sees half a file. */
static int store_one(const char *path, const char *line, uint64_t key, const char *kern)
{
    char *keep[MM_CACHE_LINES];
    int nk = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        char buf[LINE_MAX_CHARS], kn[128];
        uint64_t k;
        mm_choice c;
        while (fgets(buf, sizeof buf, f)) {
            if (line_parse(buf, &k, kn, sizeof kn, &c) != 0 || (k == key && !strcmp(kn, kern)))
                continue;
            if (nk == MM_CACHE_LINES - 1) {
                free(keep[0]);
                memmove(keep, keep + 1, (size_t)(nk - 1) * sizeof *keep);
                nk--;
            }
            if ((keep[nk] = strdup(buf)) != NULL)
                nk++;
        }
        fclose(f);
    }
    int rc = -1;
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%.290s.%ld", path, (long)getpid());
    if (host_cache_mkdirs(path) == 0 && (f = fopen(tmp, "w")) != NULL) {
        fprintf(f, "# weft: which matmul kernel each model's own products run faster on, per "
                   "model signature (milliseconds per step). Delete the file to measure again.\n");
        for (int i = 0; i < nk; i++)
            fputs(keep[i], f);
        fputs(line, f);
        rc = fclose(f) == 0 && rename(tmp, path) == 0 ? 0 : -1;
        if (rc)
            unlink(tmp);
    }
    for (int i = 0; i < nk; i++)
        free(keep[i]);
    return rc;
}

int train_mm_choice_store(uint64_t key, const char *kernels, mm_choice *c)
{
    char paths[2][300], kern[128], line[LINE_MAX_CHARS], route[LINE_MAX_CHARS - 400];
    int n;
    if (c->port_s <= 0 || c->blas_s <= 0 || host_cache_paths("matmul", paths, &n))
        return -1;
    underscore(kern, sizeof kern, kernels);
    route_format(c, route, sizeof route);
    snprintf(line, sizeof line,
             MM_CACHE_TAG " key=%016llx kernels=%s choice=%s port_ms=%.6g blas_ms=%.6g "
                          "split_ms=%.6g gflop=%.6g products=%d route=%s\n",
             (unsigned long long)key, kern, train_mm_kernel_name(c->backend), c->port_s * 1e3, c->blas_s * 1e3,
             c->split_s * 1e3, c->flops / 1e9, c->shapes, route);
    for (int i = 0; i < n; i++)
        if (store_one(paths[i], line, key, kern) == 0) {
            snprintf(c->source, sizeof c->source, "measured now, kept in %.280s", paths[i]);
            return 0;
        }
    return -1;
}
