/* The per-host cache files' names and folders (host_cache.h). */
#include "train/host_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/param.h"

static void host_name(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || !buf[0])
        snprintf(buf, cap, "unknown");
    buf[cap - 1] = 0;
    for (char *s = buf; *s; s++)   /* a file name */
        if (*s == '/')
            *s = '_';
}

int host_cache_paths(const char *stem, char paths[2][300], int *n)
{
    const char *f;
    int rc = param_read_str(PARAM_peak_file, &f, NULL, 0);
    if (rc)
        return rc;
    *n = 0;
    if (f && *f) {
        if (strcmp(stem, "peak") == 0)
            snprintf(paths[(*n)++], sizeof paths[0], "%s", f);
        else
            snprintf(paths[(*n)++], sizeof paths[0], "%.280s.%s", f, stem);
        return 0;
    }
    char host[64];
    host_name(host, sizeof host);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(paths[(*n)++], sizeof paths[0], "%.200s/weft/%s-%s", xdg, stem, host);
    else if (home && *home)
        snprintf(paths[(*n)++], sizeof paths[0], "%.200s/.cache/weft/%s-%s", home, stem, host);
    const char *tmp = getenv("TMPDIR");
    snprintf(paths[(*n)++], sizeof paths[0], "%.200s/weft-%s-%ld-%s", tmp && *tmp ? tmp : "/tmp",
             stem, (long)getuid(), host);
    return 0;
}

int host_cache_mkdirs(const char *path)
{
    char d[300];
    snprintf(d, sizeof d, "%.299s", path);
    for (char *s = d + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(d, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return 0;
}
