/* A strict recursive-descent JSON reader. Values own their strings and
 * member arrays; json_free releases a tree from its root. */
#include "core/json.h"

#include "weft.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t len, at;
    char *err;
    size_t cap;
} reader;

static int fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(reader *r, const char *fmt, ...)
{
    if (r->err && r->cap) {
        int n = snprintf(r->err, r->cap, "offset %zu: ", r->at);
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < r->cap)
            vsnprintf(r->err + n, r->cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return WEFT_EINVAL;
}

static void skip_ws(reader *r)
{
    while (r->at < r->len && (r->s[r->at] == ' ' || r->s[r->at] == '\t' ||
                              r->s[r->at] == '\n' || r->s[r->at] == '\r'))
        r->at++;
}

static int peek(const reader *r)
{
    return r->at < r->len ? (unsigned char)r->s[r->at] : -1;
}

static void free_members(json_value *v)
{
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        free_members(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

void json_free(json_value *v)
{
    if (!v)
        return;
    free_members(v);
    free(v);
}

static int hex4(reader *r, unsigned *out)
{
    if (r->len - r->at < 4)
        return fail(r, "truncated \\u escape");
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        int c = r->s[r->at + (size_t)i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(r, "bad hex digit in \\u escape");
        x = x * 16 + (unsigned)d;
    }
    r->at += 4;
    *out = x;
    return 0;
}

/* A \u escape (r->at past the 'u'), a surrogate pair included, as UTF-8. */
static int unicode_escape(reader *r, char *dst, size_t *n)
{
    unsigned cp, lo;
    int rc = hex4(r, &cp);
    if (rc)
        return rc;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return fail(r, "lone low surrogate in \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (r->len - r->at < 2 || r->s[r->at] != '\\' || r->s[r->at + 1] != 'u')
            return fail(r, "high surrogate without its low half");
        r->at += 2;
        if ((rc = hex4(r, &lo)))
            return rc;
        if (lo < 0xdc00 || lo > 0xdfff)
            return fail(r, "high surrogate without its low half");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp < 0x80) {
        dst[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        dst[(*n)++] = (char)(0xc0 | cp >> 6);
        dst[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        dst[(*n)++] = (char)(0xe0 | cp >> 12);
        dst[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        dst[(*n)++] = (char)(0xf0 | cp >> 18);
        dst[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        dst[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
    return 0;
}

/* A string literal (r->at on its quote); *out malloc'ed. The decoded text
 * is never longer than the literal, so one buffer of its size holds it. */
static int read_string(reader *r, char **out, size_t *out_len)
{
    size_t start = ++r->at, end = start;
    while (end < r->len && r->s[end] != '"')
        end += r->s[end] == '\\' ? 2 : 1;
    if (end >= r->len)
        return (r->at = start - 1, fail(r, "unterminated string"));
    char *dst = malloc(end - start + 1);
    if (!dst)
        return WEFT_ENOMEM;
    size_t n = 0;
    int rc = 0;
    while (rc == 0 && r->s[r->at] != '"') {
        unsigned char c = (unsigned char)r->s[r->at];
        if (c < 0x20) {
            rc = fail(r, "control character in string");
            break;
        }
        r->at++;
        if (c != '\\') {
            dst[n++] = (char)c;
            continue;
        }
        char e = r->s[r->at++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k)
            dst[n++] = to[k - from];
        else if (e == 'u')
            rc = unicode_escape(r, dst, &n);
        else
            rc = (r->at--, fail(r, "bad escape '\\%c'", e));
    }
    if (rc) {
        free(dst);
        return rc;
    }
    r->at++;
    dst[n] = 0;
    *out = dst;
    *out_len = n;
    return 0;
}

/* The number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int read_number(reader *r, double *out)
{
    size_t i = r->at;
    const char *s = r->s;
#define DIGITS(at) ((at) < r->len && s[at] >= '0' && s[at] <= '9')
    if (i < r->len && s[i] == '-')
        i++;
    if (!DIGITS(i))
        return fail(r, "bad number");
    if (s[i] == '0')
        i++;
    else
        while (DIGITS(i))
            i++;
    if (i < r->len && s[i] == '.') {
        if (!DIGITS(i + 1))
            return (r->at = i + 1, fail(r, "bad number: no digit after '.'"));
        for (i++; DIGITS(i);)
            i++;
    }
    if (i < r->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < r->len && (s[i] == '+' || s[i] == '-'))
            i++;
        if (!DIGITS(i))
            return (r->at = i, fail(r, "bad number: no digit in exponent"));
        while (DIGITS(i))
            i++;
    }
#undef DIGITS
    char small[64], *text = small;
    size_t n = i - r->at;
    if (n >= sizeof small && !(text = malloc(n + 1)))
        return WEFT_ENOMEM;
    memcpy(text, s + r->at, n);
    text[n] = 0;
    *out = strtod(text, NULL);
    if (text != small)
        free(text);
    if (!isfinite(*out))
        return fail(r, "number out of range");
    r->at = i;
    return 0;
}

static int read_value(reader *r, json_value *v, int depth);

/* Arrays and objects alike: members until close, each after a key in an
 * object. */
static int read_members(reader *r, json_value *v, int depth, char close)
{
    int obj = close == '}';
    size_t cap = 0;
    r->at++;
    skip_ws(r);
    if (peek(r) == close) {
        r->at++;
        return 0;
    }
    for (;;) {
        skip_ws(r);
        if (v->n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            json_value *ni = realloc(v->items, nc * sizeof *ni);
            if (ni)
                v->items = ni;
            char **nk = obj ? realloc(v->keys, nc * sizeof *nk) : NULL;
            if (nk)
                v->keys = nk;
            if (!ni || (obj && !nk))
                return WEFT_ENOMEM;
            cap = nc;
        }
        json_value *m = &v->items[v->n];
        memset(m, 0, sizeof *m);
        if (obj) {
            if (peek(r) != '"')
                return fail(r, "expected a key string");
            size_t at = r->at, klen;
            char *key;
            int rc = read_string(r, &key, &klen);
            if (rc)
                return rc;
            v->keys[v->n] = key;
            v->n++; /* owned from here on, freed with v */
            if (strlen(key) != klen || json_get(v, key) != m)
                return (r->at = at, fail(r, "duplicate or NUL-bearing key \"%s\"", key));
            skip_ws(r);
            if (peek(r) != ':')
                return fail(r, "expected ':'");
            r->at++;
            skip_ws(r);
        } else {
            v->n++;
        }
        int rc = read_value(r, m, depth + 1);
        if (rc)
            return rc;
        skip_ws(r);
        int c = peek(r);
        r->at++;
        if (c == close)
            return 0;
        if (c != ',')
            return (r->at--, fail(r, "expected ',' or '%c'", close));
    }
}

static int read_word(reader *r, const char *w)
{
    size_t n = strlen(w);
    if (r->len - r->at < n || memcmp(r->s + r->at, w, n) != 0)
        return fail(r, "unexpected character");
    r->at += n;
    return 0;
}

static int read_value(reader *r, json_value *v, int depth)
{
    if (depth >= JSON_MAX_DEPTH)
        return fail(r, "nested deeper than %d", JSON_MAX_DEPTH);
    v->offset = r->at;
    switch (peek(r)) {
    case -1: return fail(r, "unexpected end of text");
    case '{': v->type = JSON_OBJ; return read_members(r, v, depth, '}');
    case '[': v->type = JSON_ARR; return read_members(r, v, depth, ']');
    case '"': v->type = JSON_STR; return read_string(r, &v->str, &v->len);
    case 't': v->type = JSON_BOOL; v->boolean = 1; return read_word(r, "true");
    case 'f': v->type = JSON_BOOL; return read_word(r, "false");
    case 'n': v->type = JSON_NULL; return read_word(r, "null");
    default: v->type = JSON_NUM; return read_number(r, &v->num);
    }
}

int json_parse(const char *text, size_t len, json_value **out, char *err, size_t cap)
{
    if (err && cap)
        err[0] = 0;
    if (!out || (!text && len))
        return WEFT_EINVAL;
    *out = NULL;
    reader r = { text, len, 0, err, cap };
    json_value *v = calloc(1, sizeof *v);
    if (!v)
        return WEFT_ENOMEM;
    skip_ws(&r);
    int rc = read_value(&r, v, 0);
    if (rc == 0) {
        skip_ws(&r);
        if (r.at != r.len)
            rc = fail(&r, "text after the value");
    }
    if (rc) {
        if (rc == WEFT_ENOMEM && err && cap)
            snprintf(err, cap, "out of memory");
        json_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJ || !key)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (v->keys[i] && strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

int json_int(const json_value *v, long long lo, long long hi, long long *out)
{
    if (!v || v->type != JSON_NUM || v->num != floor(v->num) || v->num < (double)lo ||
        v->num > (double)hi || fabs(v->num) > 9007199254740992.0)
        return -1;
    *out = (long long)v->num;
    return 0;
}

static void put_char(char *buf, size_t cap, size_t *len, char c)
{
    if (*len + 1 < cap) {
        buf[*len] = c;
        buf[*len + 1] = 0;
    }
    (*len)++;
}

void json_put_str(char *buf, size_t cap, size_t *len, const char *s)
{
    put_char(buf, cap, len, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            put_char(buf, cap, len, '\\');
            put_char(buf, cap, len, (char)c);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            for (char *e = esc; *e; e++)
                put_char(buf, cap, len, *e);
        } else {
            put_char(buf, cap, len, (char)c);
        }
    }
    put_char(buf, cap, len, '"');
}
