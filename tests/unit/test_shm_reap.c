/* shm_reap_orphans (transport/shm.h): a ring or flat board whose creator
 * is gone and which is old enough is removed from /dev/shm; one whose
 * creator lives, a calls board (whose name says no process), a younger
 * one and names that are not weft's stay. */
#include "test.h"
#include "transport/shm.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int exists(const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

static void make(const char *name)
{
    char err[200];
    void *m = NULL;
    CHECKF(shm_segment_create(name, 4096, &m, err, sizeof err) == 0, "%s: %s", name, err);
    if (m)
        munmap(m, 4096);
}

/* A pid that was a process a moment ago and is none now. */
static long gone_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

TEST(reap)
{
    long dead = gone_pid(), me = (long)getpid();
    char ring[80], pipe_board[80], board[80], live[80], calls[80], other[80];
    /* a comm id of this test's own, so a real job's names are never met */
    unsigned long long id = 0x7e57000000000000ull | (unsigned long long)me;
    snprintf(ring, sizeof ring, "/weft-%016llx-0-1-%ld", id, dead);
    snprintf(board, sizeof board, "/weft-%016llx-flat-%ld", id, dead);
    snprintf(pipe_board, sizeof pipe_board, "/weft-%016llx-flat-%ld-pipe", id, dead);
    snprintf(live, sizeof live, "/weft-%016llx-1-0-%ld", id, me);
    snprintf(calls, sizeof calls, "/weft-%016llx-calls-0-%016llu", id, 1234ull);
    snprintf(other, sizeof other, "/weft-%016llx-0-1-%ld-x", id, dead);
    const char *all[] = {ring, board, pipe_board, live, calls, other};
    for (int i = 0; i < 6; i++)
        make(all[i]);
    shm_reap_orphans(SHM_ORPHAN_AGE); /* all made just now: too young */
    for (int i = 0; i < 6; i++)
        CHECKF(exists(all[i]), "%s removed while young", all[i]);
    shm_reap_orphans(0);
    CHECK(!exists(ring) && !exists(board) && !exists(pipe_board));
    CHECK(exists(live) && exists(calls) && exists(other));
    for (int i = 0; i < 6; i++)
        shm_unlink(all[i]);
}
