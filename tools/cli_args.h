/* Strict numbers from the command line for weft's tools. atoi and atof
 * read "abc" as 0 and "5x" as 5, so a mistyped option became a default
 * nobody asked for (a size of 0, a port of 0); here the whole word must be
 * a number within the stated range. Each returns 0, or -1 after printing
 * "TOOL: OPT VALUE: expected ..." to stderr. */
#ifndef WEFT_TOOLS_CLI_ARGS_H
#define WEFT_TOOLS_CLI_ARGS_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static inline int cli_int(const char *tool, const char *opt, const char *s, long lo, long hi,
                          int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: expected a whole number from %ld to %ld\n", tool, opt, s, lo,
                hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static inline int cli_double(const char *tool, const char *opt, const char *s, double lo,
                             double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: expected a number from %g to %g\n", tool, opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Bytes in the one grammar of weft_size_parse (64M, 2MiB, 1.5G, 65536), at
 * most hi: "TOOL: OPT V: bad size 'V' (want bytes or a number with K, ...)",
 * OPT V first as the other refusals here. */
static inline int cli_size(const char *tool, const char *opt, const char *s, uint64_t hi,
                           uint64_t *out)
{
    char why[200];
    if (weft_size_parse(s, 0, hi, out, why, sizeof why) == 0)
        return 0;
    fprintf(stderr, "%s: %s %s: %s\n", tool, opt, s, why);
    return -1;
}

/* What is wrong with a path a tool will read or (written) write, NULL if
 * nothing: a FIFO, a device or a socket would block an open forever or
 * never end, and a file to be written in a folder that cannot be written
 * would fail only at the end of the run. dir_ok: a folder is fine. The
 * message goes to buf. */
static inline const char *cli_path_problem(const char *path, int dir_ok, int written, char *buf,
                                           size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !(dir_ok && S_ISDIR(st.st_mode))) {
        mode_t m = st.st_mode;
        snprintf(buf, cap, "it is %s, not a regular file%s",
                 S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
                 : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
                 : S_ISDIR(m) ? "a directory" : "something else",
                 dir_ok ? " or a directory" : "");
        return buf;
    }
    if (!written)
        return NULL;
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", !slash ? 1 : slash == path ? 1 : (int)(slash - path),
             !slash ? "." : path);
    if (access(dir, W_OK) != 0) {
        snprintf(buf, cap, "cannot write in %s: %s", dir, strerror(errno));
        return buf;
    }
    return NULL;
}

/* Seconds on CLOCK_MONOTONIC, for a tool's own timings. */
static inline double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
