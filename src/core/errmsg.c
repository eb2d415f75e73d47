/* Formatted reasons into the caller's buffer (errmsg.h). */
#include "core/errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int errmsg(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}
