/* Monotonic time for timeouts and benchmarks. */
#ifndef WEFT_CORE_CLOCK_H
#define WEFT_CORE_CLOCK_H

double clock_now(void);                 /* seconds, CLOCK_MONOTONIC */
/* Milliseconds left until deadline, clamped to [0, INT_MAX] for poll(). */
int clock_ms_until(double deadline);

#endif
