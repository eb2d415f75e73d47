/* A JSON writer for the compute power network's documents (cluster
 * descriptions, link matrices, plans): a growing buffer with a stack of
 * open objects and arrays, so that commas and nesting come out right
 * whatever order the caller's branches take. The reader is core/json.c. */
#ifndef WEFT_CPN_JSON_OUT_H
#define WEFT_CPN_JSON_OUT_H

#include <stddef.h>

#define CPN_JO_DEPTH 32

typedef struct {
    char *buf;
    size_t len, cap;
    int depth;
    int count[CPN_JO_DEPTH]; /* members written at each open level */
    char kind[CPN_JO_DEPTH]; /* '{' or '[' */
    int err;                 /* the first error (WEFT_ENOMEM, WEFT_EINVAL); sticky */
} cpn_jo;

void cpn_jo_init(cpn_jo *w);
void cpn_jo_free(cpn_jo *w);
/* key NULL inside arrays and at the top. */
void cpn_jo_obj(cpn_jo *w, const char *key);
void cpn_jo_arr(cpn_jo *w, const char *key);
void cpn_jo_end(cpn_jo *w);
void cpn_jo_str(cpn_jo *w, const char *key, const char *s);
/* A number; a non-finite one is written as null (JSON has no inf). */
void cpn_jo_num(cpn_jo *w, const char *key, double v);
void cpn_jo_int(cpn_jo *w, const char *key, long long v);
void cpn_jo_bool(cpn_jo *w, const char *key, int v);
/* A value already in JSON (a member copied from a document read in). */
void cpn_jo_raw(cpn_jo *w, const char *key, const char *json, size_t len);
/* The text (NUL-terminated, owned by w), or NULL after an error or with a
 * level left open; *err (may be NULL) gets the error. */
const char *cpn_jo_text(cpn_jo *w, int *err);

#endif
