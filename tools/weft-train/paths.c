/* weft-train's paths, checked before the run does anything with them: a
 * FIFO, a device or a socket given as --data, --resume, --save or
 * --metrics would block an open forever or be read without end, and a
 * --save or --metrics whose folder cannot be written would fail only
 * after the whole run. */
#include "train_tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
         : S_ISDIR(m) ? "a directory" : "not a regular file";
}

void path_check(const char *opt, const char *path, int dir_ok, int written)
{
    struct stat st;
    if (!path[0])
        return;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !(dir_ok && S_ISDIR(st.st_mode)))
        die("%s %s: it is %s, not a regular file%s", opt, path, kind_of(st.st_mode),
            dir_ok ? " or a directory" : "");
    if (!written)
        return;
    const char *slash = strrchr(path, '/');
    char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                     : strndup(path, (size_t)(slash - path));
    if (!dir)
        die("out of memory");
    if (access(dir, W_OK) != 0)
        die("%s %s: cannot write in %s: %s", opt, path, dir, strerror(errno));
    free(dir);
}
