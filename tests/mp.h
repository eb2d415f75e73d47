/* Multi-process test support: fork n ranks on loopback, each running
 * fn(comm, arg) with its own CHECK counters, and add their results up. A
 * case (TEST in test.h) calls mp_run once or more; each call is one job. */
#ifndef WEFT_TEST_MP_H
#define WEFT_TEST_MP_H

#include "test.h"
#include "weft.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*mp_fn)(weft_comm *c, void *arg);

/* When > 0, rank r claims to be on host r / mp_ranks_per_host (WEFT_HOST_ID),
 * so one machine stands for several hosts. */
static int mp_ranks_per_host;
/* When > 0, rank r is in cluster r / mp_ranks_per_cluster (WEFT_CLUSTER). */
static int mp_ranks_per_cluster;

/* Runs fn on n forked ranks; returns the number of ranks that failed to
 * start, crashed or exited non-zero. Check counts are folded into this
 * process's totals through a pipe. */
static inline int mp_run(int n, double timeout_s, mp_fn fn, void *arg)
{
    int port = fx_free_port(), bad = 0, fds[2];
    pid_t pids[64];
    if (pipe(fds))
        return n;
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            weft_config cfg;
            weft_comm *c;
            close(fds[0]);
            weft_config_default(&cfg);
            /* WEFT_ALGO=NAME reruns a test under one algorithm */
            const char *algo = getenv("WEFT_ALGO");
            if (algo && *algo && weft_algo_parse(algo, &cfg.algo)) {
                fprintf(stderr, "rank %d: WEFT_ALGO=%s: no such algorithm\n", r, algo);
                _exit(3);
            }
            cfg.rank = r;
            cfg.world_size = n;
            cfg.master_addr = "127.0.0.1";
            cfg.master_port = port;
            cfg.timeout_s = timeout_s;
            cfg.connect_timeout_s = 30;
            cfg.job_secret = "mp-test-job-secret"; /* every connection authenticates */
            test_passed_ = test_failed_ = 0;
            if (mp_ranks_per_host > 0) {
                char id[32];
                snprintf(id, sizeof id, "host%d", r / mp_ranks_per_host);
                setenv("WEFT_HOST_ID", id, 1);
            }
            if (mp_ranks_per_cluster > 0) {
                char id[32];
                snprintf(id, sizeof id, "%d", r / mp_ranks_per_cluster);
                setenv("WEFT_CLUSTER", id, 1);
            }
            alarm((unsigned)(timeout_s * 4 + 60)); /* a hang must fail, not stall CI */
            int rc = weft_comm_init(&c, &cfg);
            if (rc) {
                fprintf(stderr, "rank %d: init failed: %s\n", r, weft_strerror(rc));
                _exit(3);
            }
            fn(c, arg);
            rc = weft_comm_destroy(c);
            if (rc)
                fprintf(stderr, "rank %d: destroy: %s\n", r, weft_strerror(rc));
            int counts[2] = { test_passed_, test_failed_ };
            if (write(fds[1], counts, sizeof counts) != sizeof counts)
                _exit(4);
            fflush(NULL);
            _exit(test_failed_ ? 1 : 0);
        }
        pids[r] = pid;
    }
    close(fds[1]);
    int counts[2];
    while (read(fds[0], counts, sizeof counts) == sizeof counts) {
        test_passed_ += counts[0];
        test_failed_ += counts[1];
    }
    close(fds[0]);
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d of %d: %s %d\n", r, n,
                    WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    return bad;
}

/* Under sanitizers (TEST_SCALE > 1, about ten times slower) the sweeps over
 * rank counts keep a spread — one rank, an odd count, a power of two and
 * the most — rather than every count. */
static inline int mp_thin(void)
{
    const char *s = getenv("TEST_SCALE");
    return s && atoi(s) > 1;
}
static inline int mp_size_kept(int n)
{
    return !mp_thin() || n == 1 || n == 3 || n == 4 || n == 8;
}

#endif
