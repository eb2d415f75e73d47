#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_level(const char *s)
{
    if (!strcasecmp(s, "error") || !strcasecmp(s, "none")) return LOG_ERROR;
    if (!strcasecmp(s, "info")) return LOG_INFO;
    if (!strcasecmp(s, "debug") || !strcasecmp(s, "trace")) return LOG_TRACE;
    return LOG_WARN;
}

static int parse_subsys(const char *s)
{
    static const struct { const char *name; int bit; } names[] = {
        { "INIT", LOG_SUB_INIT }, { "COLL", LOG_SUB_COLL }, { "NET", LOG_SUB_NET },
        { "STORE", LOG_SUB_STORE }, { "AUTH", LOG_SUB_AUTH }, { "SHM", LOG_SUB_SHM },
        { "TUNING", LOG_SUB_TUNING }, { "ALL", LOG_SUB_ALL },
    };
    int mask = 0, invert = *s == '^';
    s += invert;
    while (*s) {
        size_t n = strcspn(s, ",");
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && !strncasecmp(s, names[i].name, n))
                mask |= names[i].bit;
        s += n + (s[n] == ',');
    }
    return invert ? LOG_SUB_ALL & ~mask : mask;
}

int log_level_from_env(void)
{
    const char *s = getenv("WEFT_DEBUG"), *sub = getenv("WEFT_DEBUG_SUBSYS");
    int level = LOG_WARN, mask = LOG_SUB_ALL;
    if (!s || !*s)
        s = getenv("WEFT_LOG");
    if (s && *s) {
        level = parse_level(s);
        /* WEFT_DEBUG=TUNING (or SHM,NET): chatter from those subsystems */
        if (level == LOG_WARN && strcasecmp(s, "warn") && parse_subsys(s)) {
            level = LOG_INFO;
            mask = parse_subsys(s);
        }
    }
    if (sub && *sub)
        mask = parse_subsys(sub);
    return level | mask << 8;
}

static void vlog(int level, int rank, const char *fmt, va_list ap)
{
    static const char *names[] = { "error", "warn", "info", "trace" };
    char line[1024];
    int n;
    if (rank >= 0)
        n = snprintf(line, sizeof line, "weft[%d] %s: ", rank, names[level]);
    else
        n = snprintf(line, sizeof line, "weft %s: ", names[level]);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* one write per line keeps lines of different ranks from interleaving */
    fprintf(stderr, "%s\n", line);
}

void log_msg(int threshold, int level, int rank, const char *fmt, ...)
{
    va_list ap;
    if (level > (threshold & 0xff))
        return;
    va_start(ap, fmt);
    vlog(level, rank, fmt, ap);
    va_end(ap);
}

void log_sub(int threshold, int level, int sub, int rank, const char *fmt, ...)
{
    va_list ap;
    /* errors and warnings always show; the subsystem filter is for chatter */
    if (level > (threshold & 0xff) || (level > LOG_WARN && !((threshold >> 8) & sub)))
        return;
    va_start(ap, fmt);
    vlog(level, rank, fmt, ap);
    va_end(ap);
}
