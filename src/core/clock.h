/* Monotonic time for timeouts and benchmarks; wall seconds for file ages. */
#ifndef WEFT_CORE_CLOCK_H
#define WEFT_CORE_CLOCK_H

double clock_now(void);                 /* seconds, CLOCK_MONOTONIC */
/* Milliseconds left until deadline, clamped to [0, INT_MAX] for poll(). */
int clock_ms_until(double deadline);
/* Wall-clock seconds read from the fine clock: tmpfs stamps a new name's
 * ctime from it, so time()'s coarse second can still be the one before. */
long long clock_wall_s(void);

#endif
