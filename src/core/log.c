#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int log_level_from_env(void)
{
    const char *s = getenv("WEFT_LOG");
    if (!s || !*s)
        return LOG_WARN;
    if (!strcmp(s, "error")) return LOG_ERROR;
    if (!strcmp(s, "info")) return LOG_INFO;
    if (!strcmp(s, "debug")) return LOG_DEBUG;
    return LOG_WARN;
}

void log_msg(int threshold, int level, int rank, const char *fmt, ...)
{
    static const char *names[] = { "error", "warn", "info", "debug" };
    char line[1024];
    va_list ap;
    int n;
    if (level > threshold)
        return;
    n = snprintf(line, sizeof line, "weft[%d] %s: ", rank, names[level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line keeps lines of different ranks from interleaving */
    fprintf(stderr, "%s\n", line);
}
