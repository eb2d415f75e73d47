/* The run's paths, checked before the run does anything with them
 * (run_paths.c). */
#ifndef WEFT_RUN_RUN_PATHS_H
#define WEFT_RUN_RUN_PATHS_H

#include "run/run_int.h"

/* Fails when path (of option opt) exists but is no regular file (or
 * folder, dir_ok), or when a path to be written lies in a folder it cannot
 * write. An empty path is no path: 0. */
int path_check(weft_run *t, const char *opt, const char *path, int dir_ok, int written);

#endif
