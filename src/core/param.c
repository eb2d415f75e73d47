/* Reading the parameter table (core/param_table.h): the one place that
 * asks the environment for a WEFT_* variable. */
#include "core/param.h"

#include "core/log.h"
#include "core/size.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const param_info table[PARAM_COUNT] = {
#define ROW(f, nm, df, al, fl, dc, t) \
    .name = nm, .aliases = al, .dflt = df, .flags = fl, .doc = dc, .type = t, \
    .off = offsetof(param_set, f)
#define PARAM_INT(f, nm, df, lo_, hi_, al, fl, dc) \
    { ROW(f, nm, df, al, fl, dc, PARAM_T_INT), .lo = lo_, .hi = hi_ },
#define PARAM_DBL(f, nm, df, lo_, hi_, al, fl, dc) \
    { ROW(f, nm, df, al, fl, dc, PARAM_T_DBL), .lo = lo_, .hi = hi_ },
#define PARAM_STR(f, nm, df, ck, al, fl, dc) \
    { ROW(f, nm, df, al, fl, dc, PARAM_T_STR), .check = ck },
#define PARAM_ENUM(f, nm, df, w, al, fl, dc) \
    { ROW(f, nm, df, al, fl, dc, PARAM_T_ENUM), .words = w },
#define PARAM_ALGO(f, nm, df, al, fl, dc) { ROW(f, nm, df, al, fl, dc, PARAM_T_ALGO) },
#include "core/param_table.h"
#undef PARAM_INT
#undef PARAM_DBL
#undef PARAM_STR
#undef PARAM_ENUM
#undef PARAM_ALGO
#undef ROW
};

typedef struct {
    int i;         /* INT, ENUM, ALGO */
    double d;      /* DBL */
    const char *s; /* STR */
} value;

const param_info *param_info_of(param_id id)
{
    return (unsigned)id < PARAM_COUNT ? &table[id] : NULL;
}

const param_info *param_find(const char *name)
{
    for (int i = 0; name && i < PARAM_COUNT; i++)
        if (!strcmp(table[i].name, name))
            return &table[i];
    return NULL;
}

const char *param_source_name(param_source s)
{
    return s == PARAM_SRC_ENV ? "environment" : s == PARAM_SRC_CONFIG ? "config" : "default";
}

/* The i-th alias of e (len bytes, in the table's list); NULL past the last. */
static const char *alias_at(const param_info *e, int i, size_t *len)
{
    const char *a = e->aliases;
    for (; i > 0 && *a; i--)
        a += strcspn(a, ",") + (a[strcspn(a, ",")] == ',');
    *len = strcspn(a, ",");
    return *len ? a : NULL;
}

/* Looks the variable up under each of its names; *via: -1 its own name,
 * else the index of the alias; *name: the name that held it (an alias
 * ends at a comma: print it with %.*s and name_len). */
static const char *lookup(const param_info *e, int *via, const char **name)
{
    char alias[64];
    const char *v = getenv(e->name), *a;
    size_t len;
    *via = -1;
    *name = e->name;
    if (v && *v)
        return v;
    for (int i = 0; (a = alias_at(e, i, &len)); i++) {
        if (len >= sizeof alias)
            continue;
        memcpy(alias, a, len);
        alias[len] = 0;
        v = getenv(alias);
        if (v && *v) {
            *via = i;
            *name = a;
            return v;
        }
    }
    return NULL;
}

static int name_len(const char *name) { return (int)strcspn(name, ","); }

#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
static int bad(const param_info *e, const char *name, const char *v, char *err, size_t cap,
               const char *fmt, ...);

static int bad(const param_info *e, const char *name, const char *v, char *err, size_t cap,
               const char *fmt, ...)
{
    char what[256], as[80] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (name != e->name)
        snprintf(as, sizeof as, " (read as %s)", e->name);
    if (e->flags & PARAM_SECRET)
        snprintf(err, cap, "%.*s%s: %s", name_len(name), name, as, what);
    else
        snprintf(err, cap, "%.*s=%.200s%s: %s", name_len(name), name, v, as, what);
    return WEFT_ECONFIG;
}

static int parse_int(const param_info *e, const char *name, const char *v, value *out,
                     char *err, size_t cap)
{
    if (e->flags & PARAM_BYTES) { /* the one size grammar (core/size.h) */
        uint64_t lo = (uint64_t)e->lo + ((e->flags & PARAM_ABOVE) ? 1 : 0), x;
        char why[200];
        if (size_parse(v, lo, (uint64_t)e->hi, &x, why, sizeof why) != 0)
            return bad(e, name, v, err, cap, "%s", why);
        out->i = (int)x;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < e->lo || x > e->hi ||
        ((e->flags & PARAM_ABOVE) && x <= e->lo)) {
        if (e->hi - e->lo == 1)
            return bad(e, name, v, err, cap, "expected %.0f or %.0f", e->lo, e->hi);
        return bad(e, name, v, err, cap, "expected an integer from %.0f to %.0f", e->lo, e->hi);
    }
    out->i = (int)x;
    return 0;
}

static int parse_dbl(const param_info *e, const char *name, const char *v, value *out,
                     char *err, size_t cap)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int low = e->flags & PARAM_ABOVE ? !(x > e->lo) : !(x >= e->lo);
    if (end == v || *end || errno || !isfinite(x) || low || x > e->hi)
        return bad(e, name, v, err, cap, "expected a number %s %g, at most %g",
                   e->flags & PARAM_ABOVE ? "above" : "from", e->lo, e->hi);
    out->d = x;
    return 0;
}

static int parse_enum(const param_info *e, const char *name, const char *v, value *out,
                      char *err, size_t cap)
{
    char list[256];
    const char *w = e->words;
    size_t n = strlen(v);
    for (int i = 0; *w; i++) {
        size_t len = strcspn(w, "|");
        if (len == n && !strncasecmp(w, v, n)) {
            out->i = i;
            return 0;
        }
        w += len + (w[len] == '|');
    }
    size_t at = 0;
    for (w = e->words; *w && at + 3 < sizeof list; w++) {
        if (*w == '|') {
            list[at++] = ',';
            list[at++] = ' ';
        } else {
            list[at++] = *w;
        }
    }
    list[at] = 0;
    return bad(e, name, v, err, cap, "expected one of %s", list);
}

static int parse_algo(const param_info *e, const char *name, const char *v, value *out,
                      char *err, size_t cap)
{
    char list[256] = "";
    weft_algo a;
    size_t n = 0;
    if (weft_algo_parse(v, &a) == 0) {
        out->i = (int)a;
        return 0;
    }
    for (int i = 0; i < WEFT_ALGO_COUNT && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              weft_algo_name((weft_algo)i));
    return bad(e, name, v, err, cap, "expected one of %s", list);
}

static int parse(const param_info *e, const char *name, const char *v, value *out, char *err,
                 size_t cap)
{
    const char *why;
    switch (e->type) {
    case PARAM_T_INT:
        return parse_int(e, name, v, out, err, cap);
    case PARAM_T_DBL:
        return parse_dbl(e, name, v, out, err, cap);
    case PARAM_T_ENUM:
        return parse_enum(e, name, v, out, err, cap);
    case PARAM_T_ALGO:
        return parse_algo(e, name, v, out, err, cap);
    default:
        if (strlen(v) >= PARAM_STR_MAX)
            return bad(e, name, v, err, cap, "longer than %d bytes", PARAM_STR_MAX - 1);
        if (e->check && (why = e->check(v)))
            return bad(e, name, v, err, cap, "expected %s", why);
        out->s = v;
        return 0;
    }
}

static void store(param_set *p, const param_info *e, const value *v)
{
    char *at = (char *)p + e->off;
    switch (e->type) {
    case PARAM_T_DBL:
        *(double *)at = v->d;
        break;
    case PARAM_T_STR:
        snprintf(at, PARAM_STR_MAX, "%s", v->s);
        break;
    case PARAM_T_ALGO:
        *(weft_algo *)at = (weft_algo)v->i;
        break;
    default:
        *(int *)at = v->i;
        break;
    }
}

/* e's value from the environment, else its default, into *v. */
static int read_one(const param_info *e, value *v, int *src, int *via, char *err, size_t cap)
{
    const char *name, *text = lookup(e, via, &name);
    *src = text ? PARAM_SRC_ENV : PARAM_SRC_DEFAULT;
    if (!text) {
        name = e->name;
        text = e->dflt;
    }
    return parse(e, name, text, v, err, cap);
}

int param_load(param_set *p, char *err, size_t cap)
{
    char scratch[8];
    int rc = 0;
    if (!err || !cap) {
        err = scratch;
        cap = sizeof scratch;
    }
    memset(p, 0, sizeof *p);
    for (int i = 0; i < PARAM_COUNT; i++) {
        value v = { 0 };
        int src, via;
        p->via[i] = -1;
        if (!rc && (rc = read_one(&table[i], &v, &src, &via, err, cap)) == 0) {
            p->src[i] = (unsigned char)src;
            p->via[i] = (signed char)via;
        } else if (parse(&table[i], table[i].name, table[i].dflt, &v, scratch, sizeof scratch)) {
            continue; /* a default that does not parse: tests/test_param.c catches it */
        }
        store(p, &table[i], &v);
    }
    return rc;
}

int param_set_text(param_set *p, param_id id, const char *text, param_source src, char *err,
                   size_t cap)
{
    const param_info *e = param_info_of(id);
    char scratch[8];
    value v = { 0 };
    int rc;
    if (!e || !text)
        return WEFT_EINVAL;
    if (!err || !cap) {
        err = scratch;
        cap = sizeof scratch;
    }
    if ((rc = parse(e, e->name, text, &v, err, cap)))
        return rc;
    store(p, e, &v);
    p->src[id] = (unsigned char)src;
    p->via[id] = -1;
    return 0;
}

void param_format(const param_set *p, param_id id, char *buf, size_t cap)
{
    const param_info *e = param_info_of(id);
    const char *at;
    if (!e || !cap)
        return;
    at = (const char *)p + e->off;
    switch (e->type) {
    case PARAM_T_INT:
        snprintf(buf, cap, "%d", *(const int *)at);
        break;
    case PARAM_T_DBL:
        snprintf(buf, cap, "%g", *(const double *)at);
        break;
    case PARAM_T_ALGO:
        snprintf(buf, cap, "%s", weft_algo_name(*(const weft_algo *)at));
        break;
    case PARAM_T_ENUM: {
        const char *w = e->words;
        for (int i = *(const int *)at; i > 0 && *w; i--)
            w += strcspn(w, "|") + (w[strcspn(w, "|")] == '|');
        snprintf(buf, cap, "%.*s", (int)strcspn(w, "|"), w);
        break;
    }
    default:
        if (e->flags & PARAM_SECRET)
            snprintf(buf, cap, "%s", *at ? "(set)" : "(none)");
        else
            snprintf(buf, cap, "%s", at);
        break;
    }
}

static int read_checked(param_id id, param_type want, value *v, char *err, size_t cap)
{
    const param_info *e = param_info_of(id);
    char msg[300];
    int src, via, rc;
    if (!e || (e->type == PARAM_T_STR) != (want == PARAM_T_STR) ||
        (e->type == PARAM_T_DBL) != (want == PARAM_T_DBL))
        return WEFT_EINVAL;
    rc = read_one(e, v, &src, &via, err ? err : msg, err ? cap : sizeof msg);
    if (rc && !err)
        log_msg(LOG_ERROR, LOG_ERROR, -1, "%s", msg);
    return rc;
}

int param_read_int(param_id id, int *out, char *err, size_t cap)
{
    value v = { 0 };
    int rc = read_checked(id, PARAM_T_INT, &v, err, cap);
    if (!rc)
        *out = v.i;
    return rc;
}

int param_read_dbl(param_id id, double *out, char *err, size_t cap)
{
    value v = { 0 };
    int rc = read_checked(id, PARAM_T_DBL, &v, err, cap);
    if (!rc)
        *out = v.d;
    return rc;
}

int param_read_str(param_id id, const char **out, char *err, size_t cap)
{
    value v = { 0 };
    int rc = read_checked(id, PARAM_T_STR, &v, err, cap);
    if (!rc)
        *out = v.s;
    return rc;
}

const char *param_env(param_id id)
{
    const param_info *e = param_info_of(id);
    const char *name;
    int via;
    return e ? lookup(e, &via, &name) : NULL;
}

/* The name that set entry id: its own, or the alias ("RANK", which ends
 * at a comma, as bad() expects). */
static const char *set_name(const param_set *p, param_id id)
{
    const char *a;
    size_t len;
    if (p->src[id] == PARAM_SRC_ENV && p->via[id] >= 0 &&
        (a = alias_at(&table[id], p->via[id], &len)))
        return a;
    return table[id].name;
}

/* Entry id's value as its variable said it, else as p holds it. */
static const char *text_of(const param_set *p, param_id id, char *buf, size_t cap)
{
    const char *t = p->src[id] == PARAM_SRC_ENV ? param_env(id) : NULL;
    if (t)
        return t;
    param_format(p, id, buf, cap);
    return buf;
}

/* "WEFT_X (or A, B, C)": every name entry id is read under. */
static void all_names(param_id id, char *buf, size_t cap)
{
    const param_info *e = &table[id];
    if (*e->aliases)
        snprintf(buf, cap, "%s (or %s)", e->name, e->aliases);
    else
        snprintf(buf, cap, "%s", e->name);
}

int param_check_job(const param_set *p, char *err, size_t cap)
{
    char v[32], names[200];
    int has_rank = p->src[PARAM_rank] != PARAM_SRC_DEFAULT,
        has_size = p->src[PARAM_world_size] != PARAM_SRC_DEFAULT;
    const param_info *r = &table[PARAM_rank];
    const char *rn = set_name(p, PARAM_rank), *sn = set_name(p, PARAM_world_size);
    if (has_rank != has_size) {
        /* half a job description is a launcher's mistake, not a one-rank job */
        param_id set = has_rank ? PARAM_rank : PARAM_world_size;
        all_names(has_rank ? PARAM_world_size : PARAM_rank, names, sizeof names);
        return bad(&table[set], has_rank ? rn : sn, text_of(p, set, v, sizeof v), err, cap,
                   "set without %s: set both, or neither for a one-rank job", names);
    }
    if (has_rank && p->rank >= p->world_size) {
        return bad(r, rn, text_of(p, PARAM_rank, v, sizeof v), err, cap, "expected an integer from 0 to %d (below %.*s=%d)",
                   p->world_size - 1, name_len(sn), sn, p->world_size);
    }
    return 0;
}

int log_level_of(const param_set *p)
{
    return log_level_parse(p->debug, p->debug_subsys);
}

int log_level_from_env(void)
{
    char err[8];
    const char *s, *sub;
    /* a bad value is reported where a handle loads the table; here it
     * leaves the default */
    if (param_read_str(PARAM_debug, &s, err, sizeof err))
        s = "WARN";
    if (param_read_str(PARAM_debug_subsys, &sub, err, sizeof err))
        sub = "";
    return log_level_parse(s, sub);
}

void param_log(const param_set *p, int loglevel, int rank)
{
    char val[PARAM_STR_MAX + 8], how[96];
    const char *a;
    size_t len;
    if ((loglevel & 0xff) < LOG_INFO || !((loglevel >> 8) & LOG_SUB_INIT))
        return;
    for (int i = 0; i < PARAM_COUNT; i++) {
        if (rank > 0 && p->src[i] == PARAM_SRC_DEFAULT)
            continue;
        param_format(p, (param_id)i, val, sizeof val);
        if (!*val)
            snprintf(val, sizeof val, "\"\"");
        if (p->src[i] == PARAM_SRC_ENV && p->via[i] >= 0 &&
            (a = alias_at(&table[i], p->via[i], &len)))
            snprintf(how, sizeof how, "environment, as %.*s", (int)len, a);
        else
            snprintf(how, sizeof how, "%s", param_source_name((param_source)p->src[i]));
        log_sub(loglevel, LOG_INFO, LOG_SUB_INIT, rank, "%s = %s (%s)", table[i].name, val, how);
    }
}
