/* weft_comm_grow / weft_comm_join: n members (store in rank 0) admit k
 * processes started beside them; every process of the larger communicator
 * then holds parameters bit-identical to rank 0's (broadcast, then an
 * all-gather of each one's checksum), members keep their ranks, joiners
 * follow them, and a collective over all of them adds up. */
#include "test.h"

#include "weft.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXP 12
#define NPARAM 4099 /* odd: no chunking lines up by chance */

static uint64_t checksum(const float *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n * sizeof *p; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* On the grown communicator: everyone ends with rank 0's parameters. */
static void after_join(weft_comm *g, int n, int k, int joiner)
{
    static float p[NPARAM];
    uint64_t mine, all[MAXP];
    int one = 1, sum = 0, r = weft_comm_rank(g);
    CHECK(weft_comm_size(g) == n + k);
    CHECK(joiner ? r >= n : r < n);
    for (int i = 0; i < NPARAM; i++)
        p[i] = r == 0 ? (float)i * 0.37f - 11.0f : -1.0f;
    CHECK(weft_broadcast(g, p, NPARAM, WEFT_F32, 0) == 0);
    mine = checksum(p, NPARAM);
    CHECK(weft_allgather(g, &mine, all, 1, WEFT_I64) == 0);
    for (int i = 0; i < n + k; i++)
        CHECKF(all[i] == all[0], "rank %d's parameters differ from rank 0's", i);
    CHECK(weft_allreduce(g, &one, &sum, 1, WEFT_I32, WEFT_SUM) == 0 && sum == n + k);
}

static void member(int r, int n, int k, int port)
{
    weft_config cfg;
    weft_comm *c, *g = NULL;
    int rc;
    weft_config_default(&cfg);
    cfg.rank = r;
    cfg.world_size = n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.timeout_s = 20;
    cfg.connect_timeout_s = 30;
    cfg.job_secret = "grow-test-secret";
    if ((rc = weft_comm_init(&c, &cfg))) {
        fprintf(stderr, "rank %d: init: %s\n", r, weft_strerror(rc));
        _exit(3);
    }
    rc = weft_comm_grow(c, k, &g);
    CHECKF(rc == 0, "rank %d: grow: %s: %s", r, weft_strerror(rc), weft_comm_error(c));
    CHECK(k == 0 ? g == NULL : g != NULL);
    if (g) {
        CHECK(weft_comm_rank(g) == r);
        after_join(g, n, k, 0);
    }
    CHECK(weft_comm_destroy(c) == 0);
    CHECK(weft_comm_destroy(g) == 0);
}

static void joiner(int k, int port)
{
    weft_config cfg;
    weft_comm *g;
    int rc;
    weft_config_default(&cfg);
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.timeout_s = 20;
    cfg.connect_timeout_s = 30;
    cfg.job_secret = "grow-test-secret";
    rc = weft_comm_join(&cfg, &g);
    CHECKF(rc == 0, "join: %s", weft_strerror(rc));
    if (rc)
        return;
    after_join(g, weft_comm_size(g) - k, k, 1);
    CHECK(weft_comm_destroy(g) == 0);
}

static void run(int n, int k)
{
    int port = fx_free_port(), fds[2];
    pid_t pid[MAXP];
    if (pipe(fds)) {
        test_failed_++;
        return;
    }
    fflush(NULL);
    for (int i = 0; i < n + k; i++) {
        if ((pid[i] = fork()) == 0) {
            int counts[2];
            close(fds[0]);
            test_passed_ = test_failed_ = 0;
            alarm(120);
            if (i < n)
                member(i, n, k, port);
            else
                joiner(k, port);
            counts[0] = test_passed_;
            counts[1] = test_failed_;
            if (write(fds[1], counts, sizeof counts) != sizeof counts)
                _exit(4);
            fflush(NULL);
            _exit(test_failed_ ? 1 : 0);
        }
    }
    close(fds[1]);
    int counts[2];
    while (read(fds[0], counts, sizeof counts) == sizeof counts) {
        test_passed_ += counts[0];
        test_failed_ += counts[1];
    }
    close(fds[0]);
    for (int i = 0; i < n + k; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %d: %s %d", i < n ? "member" : "joiner",
               i, WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
}

TEST(grow_nobody_waiting) { run(2, 0); }
TEST(grow_by_one) { run(3, 1); }
TEST(grow_by_two) { run(4, 2); }
TEST(grow_odd_to_eight) { run(5, 3); }
