/* The run's paths, checked before the run does anything with them: a
 * special file read as data or a folder nobody may write in fails at once,
 * naming the option, rather than steps later. */
#include "run/run_paths.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Why path cannot serve (NULL: it can): written into buf. */
static const char *path_problem(const char *path, int dir_ok, int written, char *buf,
                                size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !(dir_ok && S_ISDIR(st.st_mode))) {
        mode_t m = st.st_mode;
        snprintf(buf, cap, "it is %s, not a regular file%s",
                 S_ISFIFO(m)  ? "a FIFO"
                 : S_ISCHR(m) ? "a character device"
                 : S_ISBLK(m) ? "a block device"
                 : S_ISSOCK(m) ? "a socket"
                 : S_ISDIR(m)  ? "a directory"
                               : "something else",
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

int path_check(weft_run *t, const char *opt, const char *path, int dir_ok, int written)
{
    char buf[4200];
    const char *why = path[0] ? path_problem(path, dir_ok, written, buf, sizeof buf) : NULL;
    if (why)
        return run_fail(t, WEFT_EIO, "%s %s: %s", opt, path, why);
    return 0;
}
