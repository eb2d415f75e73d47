/* weft-tune as a user runs it (weftrun -n 2 weft-tune -o FILE, from the
 * same build directory): the file it writes is one cost_parse reads and a
 * communicator's selector loads through WEFT_TUNE_FILE, with the constants
 * it measured in it; bad arguments are refused. Never asserts a time. */
#include "coll/tune/cost.h"
#include "coll/tune/tuner.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char weftrun[PATH_MAX], tune[PATH_MAX];
static volatile pid_t running;

static void on_alarm(int sig)
{
    if (running > 0)
        kill(running, SIGKILL); /* a hung job fails its checks */
}

static int found; /* both tools are built: the cases can run */

TEST_INIT
{
    signal(SIGALRM, on_alarm);
    unsetenv("WEFT_TUNE");
    found = fx_tool("weftrun", weftrun, sizeof weftrun) == 0 &&
            fx_tool("weft-tune", tune, sizeof tune) == 0;
    CHECKF(found, "%s or %s not found (make tools)", weftrun, tune);
}

/* Exit status of argv[0] (NULL-terminated argv), its stdout in out. */
static int run(const char *const *argv, char *out, size_t cap)
{
    FILE *f = tmpfile();
    int status = -1;
    if (!f)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(fileno(f), 1);
        if (null >= 0)
            dup2(null, 2);
        execv(argv[0], (char *const *)argv);
        _exit(126);
    }
    running = pid;
    alarm(60);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    alarm(0);
    running = 0;
    rewind(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(measure_and_load)
{
    char out[8192], path[] = "/tmp/weft-tune-test-XXXXXX";
    if (!found)
        return;
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    /* an older file named by WEFT_TUNE_FILE must not steer the measurement,
     * even a broken one */
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("alpha=bogus\n", f) >= 0 && fclose(f) == 0);
    setenv("WEFT_TUNE_FILE", path, 1);

    const char *job[] = { weftrun, "--no-prefix", "--timeout", "50", "-n", "2", tune,
                          "-t", "0.3", "-r", "2", "-o", path, NULL };
    int rc = run(job, out, sizeof out);
    CHECKF(rc == 0, "weft-tune exited %d", rc);
    CHECKF(!strncmp(out, "WEFT_TUNE=\"alpha=", 17), "printed: %s", out);

    /* the file: what cost_parse reads, with what was measured */
    char *text = fx_slurp(path, NULL);
    CHECK(text != NULL);
    cost_params c;
    const char *bad = NULL;
    memset(&c, 0, sizeof c);
    c.alpha = c.beta = c.gamma = c.alpha_over = -1;
    CHECKF(text && cost_parse(&c, text, &bad) == 0, "unreadable at %s", bad ? bad : "?");
    CHECKF(c.alpha > 0 && c.beta > 0 && c.gamma > 0, "alpha %g beta %g gamma %g", c.alpha,
           c.beta, c.gamma);
    CHECK(c.cores == (int)sysconf(_SC_NPROCESSORS_ONLN));
    /* alpha_over needs more ranks than cores: with 2 ranks only on 1 core */
    CHECK(c.cores < 2 ? c.alpha_over > 0 : c.alpha_over == -1);
    CHECK(text && strstr(text, "# weft-tune") == text && strstr(text, "load average"));
    /* the printed line is the file's */
    char *line = text ? strrchr(text, '\n') : NULL;
    if (line && line > text) { /* the last line */
        *line = 0;
        line = strrchr(text, '\n');
        line = line ? line + 1 : text;
        CHECKF(strstr(out, line) != NULL, "file line %s not in %s", line, out);
    }

    /* a communicator's selector loads it */
    cost_params e;
    char err[256];
    CHECKF(cost_from_env(&e, err, sizeof err) == 0, "%s", err);
    CHECK(e.alpha == c.alpha && e.beta == c.beta && e.gamma == c.gamma);
    coll_tuner *t = NULL;
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == 0 && t);
    if (t) {
        CHECK(coll_tuner_params(t)->alpha == c.alpha);
        weft_algo a = coll_tuner_select(t, WEFT_COLL_ALLREDUCE, 1u << 20, 4);
        CHECK(a > WEFT_ALGO_AUTO && a < WEFT_ALGO_COUNT && a != WEFT_ALGO_HIER);
        coll_tuner_destroy(t);
    }
    unsetenv("WEFT_TUNE_FILE");
    unlink(path);
    free(text);
}

/* refusals: a bad budget, one rank */
TEST(refusals)
{
    char out[8192];
    if (!found)
        return;
    const char *zero[] = { weftrun, "--timeout", "20", "-n", "2", tune, "-t", "0", NULL };
    CHECK(run(zero, out, sizeof out) != 0);
    const char *one[] = { weftrun, "--timeout", "20", "-n", "1", tune, "-t", "0.2", NULL };
    CHECK(run(one, out, sizeof out) != 0);
}
