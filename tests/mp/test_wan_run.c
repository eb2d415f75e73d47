/* weftrun --clusters C, run as a user runs it: this program is its own
 * rank program (WAN_RUN_RANK set: it joins the job, prints what it sees of
 * the clusters and exits). Each rank must be in the block weftrun put it
 * in, and see its peers' links classed by those blocks. */
#include "test.h"

#include "weft.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void rank_main(void)
{
    weft_comm *c;
    int rc = weft_comm_init_env(&c);
    if (rc) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        _exit(2);
    }
    int r = weft_comm_rank(c), p = weft_comm_size(c), one = 1, sum = 0;
    /* "rank R cluster K of N: classes ..." with s, l, w per peer */
    char classes[64] = "";
    for (int q = 0; q < p && q < 63; q++) {
        int k = weft_comm_link_class(c, q);
        classes[q] = k == WEFT_LINK_WAN ? 'w' : k == WEFT_LINK_LAN ? 'l' : 's';
        classes[q + 1] = 0;
    }
    rc = weft_allreduce(c, &one, &sum, 1, WEFT_I32, WEFT_SUM);
    printf("rank %d cluster %d of %d: classes %s sum %d\n", r, weft_comm_cluster_of(c, r),
           weft_comm_cluster_count(c), classes, sum);
    fflush(NULL);
    _exit(rc || weft_comm_destroy(c) ? 3 : 0);
}

static char weftrun[PATH_MAX], self[PATH_MAX];

TEST_INIT
{
    if (getenv("WAN_RUN_RANK"))
        rank_main();
    CHECKF(fx_tool("weftrun", weftrun, sizeof weftrun) == 0, "weftrun not found at %s",
           weftrun);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
}

/* weftrun's combined output (malloc'd, through a file) and exit status. */
static char *job(const char *args, int *status)
{
    char cmd[3 * PATH_MAX], path[] = "/tmp/weft-wan-run-XXXXXX";
    int fd = mkstemp(path);
    long len;
    if (fd < 0)
        return strdup("");
    close(fd);
    snprintf(cmd, sizeof cmd,
             "WAN_RUN_RANK=1 WEFT_TIMEOUT=20 timeout -s KILL 60 %s %s -- %s >%s 2>&1", weftrun,
             args, self, path);
    fflush(NULL);
    *status = system(cmd);
    char *out = fx_slurp(path, &len);
    unlink(path);
    return out ? out : strdup("");
}

/* 5 ranks in 2 clusters: blocks {0, 1, 2} and {3, 4}. */
TEST(clusters_place_blocks)
{
    int st;
    char *out = job("-n 5 --clusters 2", &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun status %d:\n%s", st, out);
    static const char *want[] = {
        "rank 0 cluster 0 of 2: classes sssww sum 5",
        "rank 1 cluster 0 of 2: classes sssww sum 5",
        "rank 2 cluster 0 of 2: classes sssww sum 5",
        "rank 3 cluster 1 of 2: classes wwwss sum 5",
        "rank 4 cluster 1 of 2: classes wwwss sum 5",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(strstr(out, want[i]), "missing \"%s\" in:\n%s", want[i], out);
    free(out);
}

/* One rank a cluster, and the option's bounds. */
TEST(clusters_one_rank_each_and_bounds)
{
    int st;
    char *out = job("-n 3 --clusters 3", &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun status %d:\n%s", st, out);
    CHECKF(strstr(out, "rank 1 cluster 1 of 3: classes wsw sum 3"), "%s", out);
    free(out);
    out = job("-n 2 --clusters 3", &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2 && strstr(out, "more clusters"),
           "status %d:\n%s", st, out);
    free(out);
    out = job("-n 2 --clusters 0", &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d:\n%s", st, out);
    free(out);
}
