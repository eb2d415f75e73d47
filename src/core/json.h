/* A small, strict JSON reader (RFC 8259: objects, arrays, strings with
 * every escape, numbers, true, false, null) for the files other programs
 * write for us: Hugging Face's config.json, safetensors headers and their
 * shard index. Anything outside the grammar is refused with the byte
 * offset where reading stopped; so are duplicate keys in one object
 * (safetensors forbids them, and which one wins is undefined elsewhere)
 * and nesting deeper than JSON_MAX_DEPTH. */
#ifndef WEFT_CORE_JSON_H
#define WEFT_CORE_JSON_H

#include <stddef.h>

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    int boolean;
    double num;
    char *str;         /* JSON_STR: UTF-8, NUL-terminated (len excludes it) */
    size_t len;
    size_t n;          /* JSON_ARR / JSON_OBJ: members */
    json_value *items; /* the elements, or the objects' values */
    char **keys;       /* JSON_OBJ: keys[i] names items[i] */
    size_t offset;     /* where the value starts in the text */
};

/* The value that is the whole text (surrounding white space allowed).
 * WEFT_EINVAL with "offset N: why" in err (may be NULL), WEFT_ENOMEM. */
int json_parse(const char *text, size_t len, json_value **out, char *err, size_t cap);
void json_free(json_value *v);
/* The member of an object called key, or NULL (also when v is no object). */
const json_value *json_get(const json_value *v, const char *key);
/* A number that is an integer in [lo, hi]: 0 and *out, else -1. */
int json_int(const json_value *v, long long lo, long long hi, long long *out);
/* Appends s as a JSON string literal (quotes, escapes) to buf[*len..cap),
 * keeping it NUL-terminated; *len counts what it would need. */
void json_put_str(char *buf, size_t cap, size_t *len, const char *s);

#endif
