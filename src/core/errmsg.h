/* Errors for callers that pass a buffer (err, cap) for the reason: the
 * message goes there, the code comes back, so a failure is one line. */
#ifndef WEFT_CORE_ERRMSG_H
#define WEFT_CORE_ERRMSG_H

#include <stddef.h>

/* Formats into err (when err and cap are given) and returns rc. */
int errmsg(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
