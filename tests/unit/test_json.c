/* core/json.c: every value kind, escapes and surrogate pairs into UTF-8,
 * numbers exactly as strtod reads them, and the refusals (each with the
 * byte offset where reading stopped): trailing commas, duplicate keys,
 * bad escapes and numbers, control characters, text after the value,
 * nesting too deep, truncation at every byte. */
#include "core/json.h"
#include "test.h"
#include "weft.h"

#include <stdlib.h>
#include <string.h>

static json_value *parse(const char *s)
{
    json_value *v = NULL;
    char err[256];
    int rc = json_parse(s, strlen(s), &v, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", s, err);
    return v;
}

/* Refused, with "offset AT:" leading the message. */
static void refused(const char *s, size_t at)
{
    json_value *v = (json_value *)1;
    char err[256], want[32];
    int rc = json_parse(s, strlen(s), &v, err, sizeof err);
    snprintf(want, sizeof want, "offset %zu:", at);
    CHECKF(rc == WEFT_EINVAL && v == NULL && strncmp(err, want, strlen(want)) == 0,
           "'%s': rc %d, err '%s' (want '%s')", s, rc, err, want);
}

TEST(values)
{
    json_value *v = parse(" {\"a\": [1, -2.5e3, 0.125, true, false, null], \"b\": {\"c\": \"d\"},"
                          " \"e\": [], \"f\": {}} ");
    CHECK(v && v->type == JSON_OBJ && v->n == 4);
    const json_value *a = json_get(v, "a");
    CHECK(a && a->type == JSON_ARR && a->n == 6);
    CHECK(a->items[0].type == JSON_NUM && a->items[0].num == 1);
    CHECK(a->items[1].num == -2500 && a->items[2].num == 0.125);
    CHECK(a->items[3].type == JSON_BOOL && a->items[3].boolean == 1);
    CHECK(a->items[4].type == JSON_BOOL && a->items[4].boolean == 0);
    CHECK(a->items[5].type == JSON_NULL);
    const json_value *c = json_get(json_get(v, "b"), "c");
    CHECK(c && c->type == JSON_STR && strcmp(c->str, "d") == 0 && c->len == 1);
    CHECK(json_get(v, "e")->n == 0 && json_get(v, "f")->type == JSON_OBJ);
    CHECK(json_get(v, "zz") == NULL && json_get(a, "a") == NULL);
    /* offsets point at each value's first byte */
    CHECK(a->offset == 7 && a->items[1].offset == 11);
    long long x;
    CHECK(json_int(&a->items[1], -3000, 0, &x) == 0 && x == -2500);
    CHECK(json_int(&a->items[2], 0, 10, &x) == -1);
    CHECK(json_int(&a->items[0], 2, 10, &x) == -1);
    json_free(v);
    v = parse("7");
    CHECK(v && v->type == JSON_NUM && v->num == 7);
    json_free(v);
    v = parse("1.7976931348623157e308");
    CHECK(v && v->num == 1.7976931348623157e308);
    json_free(v);
}

TEST(escapes)
{
    json_value *v = parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u0041\\u00e9\\u20ac\\ud83d\\ude00\"");
    const char want[] = "q\" b\\ s/ \b\f\n\r\t A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    CHECK(v && v->type == JSON_STR && v->len == sizeof want - 1 && memcmp(v->str, want, v->len) == 0);
    json_free(v);
    /* a string with a NUL inside keeps its length */
    v = parse("\"a\\u0000b\"");
    CHECK(v && v->len == 3 && v->str[1] == 0 && v->str[2] == 'b');
    json_free(v);
    char buf[64];
    size_t n = 0;
    json_put_str(buf, sizeof buf, &n, "a\"b\\c\n");
    CHECK(strcmp(buf, "\"a\\\"b\\\\c\\u000a\"") == 0 && n == strlen(buf));
    v = parse(buf);
    CHECK(v && strcmp(v->str, "a\"b\\c\n") == 0);
    json_free(v);
    n = 0;
    json_put_str(buf, 4, &n, "abcdef"); /* cut short, the length still counted */
    CHECK(n == 8 && strlen(buf) < 4);
}

TEST(refusals)
{
    refused("", 0);
    refused("   ", 3);
    refused("[1, 2,]", 6);
    refused("{\"a\": 1,}", 8);
    refused("{\"a\": 1, \"a\": 2}", 9);
    refused("{\"a\" 1}", 5);
    refused("{1: 2}", 1);
    refused("[1 2]", 3);
    refused("\"abc", 0);
    refused("\"a\\x\"", 3);
    refused("\"a\tb\"", 2);
    refused("\"\\u12g4\"", 3);
    refused("\"\\ud83d\"", 7);
    refused("\"\\ude00\"", 7);
    refused("01", 1);
    refused("-", 0);
    refused("1.", 2);
    refused("1e+", 3);
    refused("+1", 0);
    refused("1e999", 0);
    refused("tru", 0);
    refused("nul", 0);
    refused("[1] x", 4);
    refused("{} {}", 3);
    char deep[2 * JSON_MAX_DEPTH + 8];
    memset(deep, '[', JSON_MAX_DEPTH + 1);
    memset(deep + JSON_MAX_DEPTH + 1, ']', JSON_MAX_DEPTH + 1);
    deep[2 * JSON_MAX_DEPTH + 2] = 0;
    refused(deep, JSON_MAX_DEPTH);
    deep[0] = ' '; /* one level less: fine */
    deep[2 * JSON_MAX_DEPTH + 1] = 0;
    json_free(parse(deep));
}

TEST(truncated_everywhere)
{
    const char *s = "{\"k\": [1.5, \"x\\u00e9\", {\"n\": null}, true], \"z\": -0.25e-2}";
    size_t n = strlen(s);
    int all = 1;
    for (size_t k = 0; k < n; k++) {
        json_value *v = NULL;
        char err[128];
        int rc = json_parse(s, k, &v, err, sizeof err);
        all &= rc == WEFT_EINVAL && v == NULL && strncmp(err, "offset ", 7) == 0;
        json_free(v);
    }
    CHECK(all);
    json_value *v = parse(s);
    CHECK(v && json_get(v, "z")->num == -0.25e-2);
    json_free(v);
}

TEST(bad_arguments)
{
    json_value *v;
    CHECK(json_parse(NULL, 1, &v, NULL, 0) == WEFT_EINVAL);
    CHECK(json_parse("1", 1, NULL, NULL, 0) == WEFT_EINVAL);
    CHECK(json_parse("[", 1, &v, NULL, 0) == WEFT_EINVAL); /* no err buffer: fine */
    json_free(NULL);
}
