/* A JSON writer with the nesting kept by the writer, not the caller. */
#include "cpn/cpn_json_out.h"

#include "core/json.h"
#include "weft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cpn_jo_init(cpn_jo *w)
{
    memset(w, 0, sizeof *w);
}

void cpn_jo_free(cpn_jo *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static void put(cpn_jo *w, const char *s, size_t n)
{
    if (w->err)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1)
            cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->err = WEFT_ENOMEM;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

static void puts_(cpn_jo *w, const char *s)
{
    put(w, s, strlen(s));
}

/* The comma before a member and its key; a key inside an array (or none
 * inside an object) is the caller's mistake. */
static void member(cpn_jo *w, const char *key)
{
    if (w->err)
        return;
    if (w->count[w->depth]++ > 0)
        puts_(w, ",");
    if (key) {
        size_t need = 0;
        json_put_str(NULL, 0, &need, key);
        char small[128], *tmp = need < sizeof small ? small : malloc(need + 1);
        if (!tmp) {
            w->err = WEFT_ENOMEM;
            return;
        }
        size_t n = 0;
        json_put_str(tmp, need + 1, &n, key);
        put(w, tmp, n);
        puts_(w, ":");
        if (tmp != small)
            free(tmp);
    }
}

static void open_(cpn_jo *w, const char *key, const char *brace)
{
    member(w, key);
    if (w->depth + 1 >= CPN_JO_DEPTH) {
        w->err = WEFT_EINVAL;
        return;
    }
    puts_(w, brace);
    w->count[++w->depth] = 0;
    w->kind[w->depth] = brace[0];
}

void cpn_jo_obj(cpn_jo *w, const char *key)
{
    open_(w, key, "{");
}

void cpn_jo_arr(cpn_jo *w, const char *key)
{
    open_(w, key, "[");
}

void cpn_jo_end(cpn_jo *w)
{
    if (w->err)
        return;
    if (w->depth == 0) {
        w->err = WEFT_EINVAL;
        return;
    }
    puts_(w, w->kind[w->depth] == '[' ? "]" : "}");
    w->depth--;
}

void cpn_jo_str(cpn_jo *w, const char *key, const char *s)
{
    member(w, key);
    if (w->err)
        return;
    if (!s) {
        puts_(w, "null");
        return;
    }
    size_t need = 0;
    json_put_str(NULL, 0, &need, s);
    char *tmp = malloc(need + 1);
    if (!tmp) {
        w->err = WEFT_ENOMEM;
        return;
    }
    size_t n = 0;
    json_put_str(tmp, need + 1, &n, s);
    put(w, tmp, n);
    free(tmp);
}

void cpn_jo_num(cpn_jo *w, const char *key, double v)
{
    member(w, key);
    char b[40];
    if (!isfinite(v))
        snprintf(b, sizeof b, "null");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(b, sizeof b, "%.0f", v);
    else
        snprintf(b, sizeof b, "%.9g", v);
    puts_(w, b);
}

void cpn_jo_int(cpn_jo *w, const char *key, long long v)
{
    member(w, key);
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    puts_(w, b);
}

void cpn_jo_bool(cpn_jo *w, const char *key, int v)
{
    member(w, key);
    puts_(w, v ? "true" : "false");
}

void cpn_jo_raw(cpn_jo *w, const char *key, const char *json, size_t len)
{
    member(w, key);
    put(w, json, len);
}

const char *cpn_jo_text(cpn_jo *w, int *err)
{
    int e = w->err ? w->err : (w->depth ? WEFT_EINVAL : 0);
    if (err)
        *err = e;
    return e ? NULL : (w->buf ? w->buf : "");
}
