#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    int bit;
} subsys[] = {
    { "INIT", LOG_SUB_INIT }, { "COLL", LOG_SUB_COLL }, { "NET", LOG_SUB_NET },
    { "STORE", LOG_SUB_STORE }, { "AUTH", LOG_SUB_AUTH }, { "SHM", LOG_SUB_SHM },
    { "TUNING", LOG_SUB_TUNING }, { "ALL", LOG_SUB_ALL },
};

/* -1: not a level name */
static int parse_level(const char *s)
{
    if (!strcasecmp(s, "error") || !strcasecmp(s, "none")) return LOG_ERROR;
    if (!strcasecmp(s, "warn")) return LOG_WARN;
    if (!strcasecmp(s, "info")) return LOG_INFO;
    if (!strcasecmp(s, "debug") || !strcasecmp(s, "trace")) return LOG_TRACE;
    return -1;
}

/* The mask of "INIT,COLL" or "^NET"; -1 when a name is unknown. */
static int parse_subsys(const char *s)
{
    int mask = 0, invert = *s == '^';
    s += invert;
    while (*s) {
        size_t n = strcspn(s, ","), i;
        for (i = 0; i < sizeof subsys / sizeof subsys[0]; i++)
            if (strlen(subsys[i].name) == n && !strncasecmp(s, subsys[i].name, n))
                break;
        if (n && i == sizeof subsys / sizeof subsys[0])
            return -1;
        if (n)
            mask |= subsys[i].bit;
        s += n + (s[n] == ',');
    }
    return invert ? LOG_SUB_ALL & ~mask : mask;
}

const char *log_check_debug(const char *s)
{
    return parse_level(s) >= 0 || parse_subsys(s) > 0
               ? NULL
               : "ERROR, WARN, INFO, TRACE, or subsystem names (INIT,COLL,NET,STORE,AUTH,SHM,"
                 "TUNING)";
}

const char *log_check_subsys(const char *s)
{
    return parse_subsys(s) >= 0 ? NULL
                                : "subsystem names INIT,COLL,NET,STORE,AUTH,SHM,TUNING,ALL, "
                                  "a leading ^ excluding them";
}

int log_level_parse(const char *s, const char *sub)
{
    int level = parse_level(s), mask = LOG_SUB_ALL;
    if (level < 0) {
        /* WEFT_DEBUG=TUNING (or SHM,NET): chatter from those subsystems */
        level = parse_subsys(s) > 0 ? LOG_INFO : LOG_WARN;
        mask = parse_subsys(s) > 0 ? parse_subsys(s) : LOG_SUB_ALL;
    }
    if (*sub && parse_subsys(sub) >= 0)
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
