/* Diagnostics to stderr, filtered by WEFT_DEBUG=ERROR|WARN|INFO|TRACE
 * (default WARN; WEFT_LOG is the older name) or subsystem names, and
 * WEFT_DEBUG_SUBSYS=INIT,COLL,NET,STORE,AUTH,... (default all; a leading ^
 * excludes the listed ones, as NCCL_DEBUG_SUBSYS). The filter is read once
 * per handle and passed in as `threshold`, so there is no global logger
 * state. */
#ifndef WEFT_CORE_LOG_H
#define WEFT_CORE_LOG_H

enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG, LOG_TRACE = LOG_DEBUG };

enum {
    LOG_SUB_INIT = 1 << 0,
    LOG_SUB_COLL = 1 << 1,
    LOG_SUB_NET = 1 << 2,
    LOG_SUB_STORE = 1 << 3,
    LOG_SUB_AUTH = 1 << 4,
    LOG_SUB_SHM = 1 << 5,
    LOG_SUB_TUNING = 1 << 6,
    LOG_SUB_ALL = 0xffff
};

/* Level in the low 8 bits, subsystem mask above, from the texts of
 * WEFT_DEBUG and WEFT_DEBUG_SUBSYS. Reading them (from a parameter set or
 * the environment) is core/param.h's: log_level_of, log_level_from_env. */
int log_level_parse(const char *debug, const char *subsys);
/* The table's checks of those two: NULL when s is acceptable, else what is. */
const char *log_check_debug(const char *s);
const char *log_check_subsys(const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void log_msg(int threshold, int level, int rank, const char *fmt, ...);
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
void log_sub(int threshold, int level, int sub, int rank, const char *fmt, ...);

#endif
