/* weftrun --elastic MIN:MAX [--restarts N], run as a user runs it: this
 * program is its own rank program (ELASTIC_VICTIM set: it runs a small
 * elastic loop instead of the cases). Each step admits joiners
 * (weft_comm_grow), then all-reduces; the victim kills itself at a given
 * step, the survivors shrink and, when a restart is expected, wait for the
 * replacement at the next step. Checks weftrun's exit status and what rank
 * 0 and weftrun say about each membership change. */
#include "test.h"

#include "weft.h"

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 12

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : 0;
}

static void rank_main(void)
{
    int victim = env_int("ELASTIC_VICTIM"), kill_step = env_int("ELASTIC_KILL_STEP");
    int expect_join = env_int("ELASTIC_EXPECT_JOIN"), slot = env_int("WEFT_RANK");
    int joined = env_int("WEFT_JOIN") == 1, need = 0, one = 1, sum, rc;
    int64_t step = 0;
    weft_comm *c;
    if ((rc = weft_comm_init_env(&c))) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        _exit(2);
    }
    if (joined && weft_broadcast(c, &step, 1, WEFT_I64, 0)) /* the members' after their grow */
        _exit(2);
    for (int first = joined; step < STEPS; first = 0) {
        weft_comm *g = NULL;
        /* a joiner comes in where the members are: past this step's grow */
        rc = first ? 0 : weft_comm_grow(c, need, &g);
        if (rc == 0 && g) {
            weft_comm_destroy(c);
            c = g;
            need = 0;
            rc = weft_broadcast(c, &step, 1, WEFT_I64, 0);
            if (weft_comm_rank(c) == 0)
                printf("step %lld: grew to %d ranks\n", (long long)step, weft_comm_size(c));
        }
        if (rc == 0 && !joined && slot == victim && step == kill_step) {
            fflush(NULL);
            raise(SIGKILL);
        }
        if (rc == 0)
            rc = weft_allreduce(c, &one, &sum, 1, WEFT_I32, WEFT_SUM);
        if (rc == 0 && sum != weft_comm_size(c)) {
            fprintf(stderr, "step %lld: sum %d on %d ranks\n", (long long)step, sum,
                    weft_comm_size(c));
            _exit(1);
        }
        if (rc) {
            weft_comm *s;
            if ((rc = weft_comm_shrink(c, &s))) {
                fprintf(stderr, "shrink: %s: %s\n", weft_strerror(rc), weft_comm_error(c));
                _exit(3);
            }
            weft_comm_destroy(c);
            c = s;
            need = expect_join;
            if (weft_comm_rank(c) == 0)
                printf("step %lld: shrank to %d ranks\n", (long long)step, weft_comm_size(c));
            continue; /* the step again, with those left */
        }
        step++;
    }
    if (weft_comm_rank(c) == 0)
        printf("done: %d ranks after %d steps\n", weft_comm_size(c), STEPS);
    fflush(NULL);
    _exit(weft_comm_destroy(c) ? 4 : 0);
}

static char weftrun[PATH_MAX], self[PATH_MAX];

TEST_INIT
{
    ssize_t n;
    if (getenv("ELASTIC_VICTIM"))
        rank_main();
    CHECKF(fx_tool("weftrun", weftrun, sizeof weftrun) == 0, "weftrun not found at %s",
           weftrun);
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
}

/* weftrun's combined output (malloc'd) and exit status. */
static char *job(const char *args, int victim, int expect_join, int *status)
{
    char cmd[3 * PATH_MAX], *out = NULL;
    size_t len = 0, cap = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd,
             "ELASTIC_VICTIM=%d ELASTIC_KILL_STEP=4 ELASTIC_EXPECT_JOIN=%d WEFT_TIMEOUT=20 "
             "timeout -s KILL 120 %s %s -- %s 2>&1",
             victim, expect_join, weftrun, args, self);
    fflush(NULL);
    if (!(f = popen(cmd, "r")))
        return strdup("");
    for (;;) {
        if (cap - len < 4096 && !(out = realloc(out, cap = cap ? 2 * cap : 65536)))
            break;
        size_t got = fread(out + len, 1, cap - len - 1, f);
        if (!got)
            break;
        len += got;
    }
    if (out)
        out[len] = 0;
    *status = pclose(f);
    return out ? out : strdup("");
}

static int says(const char *out, const char *what)
{
    int ok = strstr(out, what) != NULL;
    if (!ok)
        fprintf(stderr, "missing \"%s\" in:\n%s\n", what, out);
    return ok;
}

TEST(elastic_goes_on_without_a_dead_rank)
{
    int st;
    char *out = job("--elastic 2:4 -n 4", 1, 0, &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun status %d", st);
    CHECK(says(out, "rank 1 killed by signal SIGKILL; elastic: the job goes on with 3"));
    CHECK(says(out, "step 4: shrank to 3 ranks"));
    CHECK(says(out, "done: 3 ranks after"));
    free(out);
}

TEST(elastic_restart_joins)
{
    int st;
    char *out = job("--elastic 2:4 --restarts 1 -n 4", 2, 1, &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun status %d", st);
    CHECK(says(out, "rank 2 killed by signal SIGKILL; elastic: starting it again (restart 1 of 1)"));
    CHECK(says(out, "step 4: shrank to 3 ranks"));
    CHECK(says(out, "step 4: grew to 4 ranks"));
    CHECK(says(out, "done: 4 ranks after"));
    free(out);
}

/* Rank 0 dies: its store is weftrun's, so the others still agree. */
TEST(elastic_rank0_dies)
{
    int st;
    char *out = job("--elastic 2:3 -n 3", 0, 0, &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun status %d", st);
    CHECK(says(out, "done: 2 ranks after"));
    free(out);
}

TEST(elastic_below_min_stops)
{
    int st;
    char *out = job("--elastic 3:3 -n 3", 1, 0, &st);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL, "weftrun status %d", st);
    CHECK(says(out, "fewer than 3"));
    free(out);
}
