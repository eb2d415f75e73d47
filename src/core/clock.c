#include "core/clock.h"

#include <limits.h>
#include <time.h>

double clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int clock_ms_until(double deadline)
{
    double ms = (deadline - clock_now()) * 1e3;
    if (ms <= 0)
        return 0;
    if (ms >= (double)INT_MAX)
        return INT_MAX;
    return (int)ms + 1; /* round up: never wake just before the deadline */
}

long long clock_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec;
}
