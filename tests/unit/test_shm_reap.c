/* shm_reap_orphans (transport/shm.h): a ring or flat board whose creator
 * is gone and which is old enough is removed from /dev/shm; one whose
 * creator lives, a calls board (whose name says no process), a younger
 * one and names that are not weft's stay. callboard_reap
 * (coll/exec/callboard.h): a calls board every process of which is gone
 * goes, one that a live process mapped stays. */
#include "test.h"
#include "coll/exec/callboard.h"
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

/* Map calls board name as rank `rank` of 4 in a child that then exits. */
static void map_and_die(const char *name, int rank)
{
    pid_t p = fork();
    if (p == 0) {
        void *m;
        size_t len;
        _exit(callboard_map(name, 4, rank, &m, &len) ? 1 : 0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s not made", name);
}

TEST(reap_calls)
{
    long me = (long)getpid();
    unsigned long long id = 0x7e58000000000000ull | (unsigned long long)me;
    char dead[80], mixed[80], mine[80];
    snprintf(dead, sizeof dead, "/weft-%016llx-calls-0-%016llx", id, 1ull);
    snprintf(mixed, sizeof mixed, "/weft-%016llx-calls-0-%016llx", id, 2ull);
    snprintf(mine, sizeof mine, "/weft-%016llx-calls-0-%016llx", id, 3ull);
    map_and_die(dead, 0);
    map_and_die(dead, 2);
    map_and_die(mixed, 0);
    void *m[2];
    size_t len[2];
    CHECK(callboard_map(mixed, 4, 1, &m[0], &len[0]) == 0);
    CHECK(callboard_map(mine, 4, 3, &m[1], &len[1]) == 0);
    callboard_reap(CALLBOARD_ORPHAN_AGE); /* all made just now: too young */
    CHECK(exists(dead) && exists(mixed) && exists(mine));
    callboard_reap(0);
    CHECKF(!exists(dead), "%s: every process gone, still there", dead);
    CHECK(exists(mixed) && exists(mine));
    for (int i = 0; i < 2; i++)
        munmap(m[i], len[i]);
    const char *all[] = {dead, mixed, mine};
    for (int i = 0; i < 3; i++)
        shm_unlink(all[i]);
}
