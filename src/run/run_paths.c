/* weft-train's paths, checked before the run does anything with them
 * (the checks are tools/cli_args.h's, shared by the tools). */
#include "train_tool.h"

#include "../cli_args.h"

void path_check(const char *opt, const char *path, int dir_ok, int written)
{
    char buf[4200];
    const char *why = path[0] ? cli_path_problem(path, dir_ok, written, buf, sizeof buf) : NULL;
    if (why)
        die("%s %s: %s", opt, path, why);
}
