/* The parser behind weft_dtype_parse, weft_op_parse and weft_algo_parse. */
#ifndef WEFT_CORE_NAMES_H
#define WEFT_CORE_NAMES_H

#include <stddef.h>

#include "weft.h"

/* Another spelling of the value's name (name NULL: none). */
typedef struct {
    const char *name;
    int value;
} names_alias;

/* *out = the index of s among names[0..n) (NULL entries skipped), else the
 * value of the alias s is; case is ignored. WEFT_EINVAL when s (or out) is
 * NULL or names nothing. */
int names_parse(const char *s, const char *const *names, int n, const names_alias *al,
                size_t nal, int *out);

#endif
