/* Diagnostics to stderr, filtered by WEFT_LOG=error|warn|info|debug (default
 * warn). The level is read once per handle and passed in, so there is no
 * global logger state. */
#ifndef WEFT_CORE_LOG_H
#define WEFT_CORE_LOG_H

enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

int log_level_from_env(void);
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void log_msg(int threshold, int level, int rank, const char *fmt, ...);

#endif
