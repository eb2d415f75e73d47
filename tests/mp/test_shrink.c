/* weft_comm_shrink at 3-8 ranks: a rank dies (kill -9 of itself between
 * two all-reduces), the survivors shrink, and a second rank dies at each
 * phase of the agreement (the test-only hook c->shrink_fault kills it
 * exactly there), or freezes there and comes back after the others are
 * done. Every survivor must end with the same members (checked by an
 * all-gather of their old ranks against the expected set, and an
 * all-reduce), shrinking again when a death came after the agreement
 * (a failure of the new communicator, as the API says). The time from the
 * first death to a working communicator is printed, not asserted.
 *
 * The store runs in the test process (outside the ranks, as in an elastic
 * job) unless a case puts it in rank 0. */
#include "mp.h"

#include "bootstrap/store.h"
#include "coll/comm.h"
#include "core/clock.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 8
#define SECRET "shrink-test-secret"

typedef struct {
    int n;
    int first;       /* dies before the shrink (-1: none) */
    int second;      /* dies (or freezes) at phase `phase` of the first shrink (-1: none) */
    int phase;
    int freeze;      /* second stops itself instead, and is woken after the others end */
    int store_rank0; /* the store in rank 0's process, not the test's */
    int store_lost;  /* first is rank 0 and the store died with it: shrink must say so */
    double timeout_s;
} plan;

typedef struct {          /* one write: atomic on a pipe, so reports never interleave */
    int passed, failed;
    int survivor;
    double recovery_s; /* first death to a working communicator */
} report;

static void die_at(void *arg, int phase)
{
    const plan *p = arg;
    if (phase != p->phase)
        return;
    fflush(NULL);
    raise(p->freeze ? SIGSTOP : SIGKILL);
}

static int gone(const plan *p, int r)
{
    return r == p->first || (r == p->second && p->phase >= 0);
}

/* Members of c as old ranks (all-gather), checked against the plan. 0 when
 * c works and has exactly the expected members; else the failing code. */
static int verify(weft_comm *c, const plan *p, int me)
{
    int32_t mine = me, all[MAXN], expect[MAXN], ne = 0, sum = 0, got = 0;
    int rc;
    if ((rc = weft_allgather(c, &mine, all, 1, WEFT_I32)))
        return rc;
    if ((rc = weft_allreduce(c, &mine, &got, 1, WEFT_I32, WEFT_SUM)))
        return rc;
    for (int r = 0; r < p->n; r++)
        if (!gone(p, r)) {
            expect[ne++] = r;
            sum += r;
        }
    CHECKF(weft_comm_size(c) == ne, "rank %d: %d members, want %d", me, weft_comm_size(c), ne);
    for (int i = 0; i < ne && i < weft_comm_size(c); i++)
        CHECKF(all[i] == expect[i], "rank %d: member %d is %d, want %d", me, i, all[i],
               expect[i]);
    CHECK(got == sum);
    return 0;
}

static void rank_main(int r, const plan *p, int port, int out)
{
    weft_config cfg;
    weft_comm *world, *cur;
    report rep = { .survivor = 1 };
    int one = 1, sum = 0, rc;
    double t_death;
    weft_config_default(&cfg);
    cfg.rank = r;
    cfg.world_size = p->n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.host_store = p->store_rank0 ? -1 : 0;
    cfg.timeout_s = p->timeout_s;
    cfg.connect_timeout_s = 30;
    cfg.job_secret = SECRET;
    alarm((unsigned)(p->timeout_s * (p->n + 4) + 60));
    if ((rc = weft_comm_init(&world, &cfg))) {
        fprintf(stderr, "rank %d: init: %s\n", r, weft_strerror(rc));
        _exit(3);
    }
    CHECK(weft_allreduce(world, &one, &sum, 1, WEFT_I32, WEFT_SUM) == 0 && sum == p->n);
    if (r == p->first) {
        fflush(NULL);
        raise(SIGKILL);
    }
    if (r == p->second)
        world->shrink_fault = die_at, world->shrink_fault_arg = (void *)p;
    t_death = clock_now();
    rc = weft_allreduce(world, &one, &sum, 1, WEFT_I32, WEFT_SUM);
    CHECKF(p->first < 0 ? rc == 0 : rc == WEFT_EPEER, "rank %d: %s", r, weft_strerror(rc));
    cur = world;
    for (int tries = 0; tries < 3; tries++) {
        weft_comm *next;
        rc = weft_comm_shrink(cur, &next);
        if (p->store_lost) {
            CHECKF(rc == WEFT_EPEER && strstr(weft_comm_error(cur), "store"), "rank %d: %s: %s",
                   r, weft_strerror(rc), weft_comm_error(cur));
            break;
        }
        if (p->freeze && r == p->second) { /* woken late: the others went on without it */
            CHECKF(rc == WEFT_EPEER, "rank %d: %s", r, weft_strerror(rc));
            rep.survivor = 0;
            break;
        }
        CHECKF(rc == 0, "rank %d: shrink: %s: %s", r, weft_strerror(rc), weft_comm_error(cur));
        if (cur != world)
            weft_comm_destroy(cur);
        if (rc) {
            cur = NULL;
            break;
        }
        cur = next;
        if ((rc = verify(cur, p, r)) == 0) {
            rep.recovery_s = clock_now() - t_death;
            break;
        }
        CHECKF(rc == WEFT_EPEER && p->phase == SHRINK_PH_READY, "rank %d: verify: %s: %s", r,
               weft_strerror(rc), weft_comm_error(cur));
    }
    weft_comm_destroy(world); /* broken or shrunk: no barrier */
    if (cur && cur != world)
        CHECK(weft_comm_destroy(cur) == 0);
    rep.passed = test_passed_;
    rep.failed = test_failed_;
    if (write(out, &rep, sizeof rep) != sizeof rep)
        _exit(4);
    fflush(NULL);
    _exit(test_failed_ ? 1 : 0);
}

/* One job; returns the slowest survivor's recovery time. */
static double run(const plan *p)
{
    int port = fx_free_port(), fds[2], survivors = 0;
    pid_t pid[MAXN];
    pid_t store = 0;
    double worst = 0;
    if (pipe(fds)) {
        test_failed_++;
        return 0;
    }
    fflush(NULL);
    /* the store in a process of its own: this one forks the ranks, and a
     * fork beside a running thread may copy a lock that thread holds */
    if (!p->store_rank0 && (store = fork()) == 0) {
        store_server *srv;
        char err[200];
        close(fds[0]);
        close(fds[1]);
        if (store_server_start(&srv, "127.0.0.1", port, NULL, SECRET, err, sizeof err)) {
            fprintf(stderr, "store: %s\n", err);
            _exit(1);
        }
        for (;;)
            pause(); /* until the test kills it */
    }
    for (int r = 0; r < p->n; r++) {
        if ((pid[r] = fork()) == 0) {
            close(fds[0]);
            test_passed_ = test_failed_ = 0;
            rank_main(r, p, port, fds[1]);
        }
    }
    close(fds[1]);
    for (;;) {
        report rep;
        if (read(fds[0], &rep, sizeof rep) != sizeof rep)
            break;
        test_passed_ += rep.passed;
        test_failed_ += rep.failed;
        survivors += rep.survivor;
        if (rep.survivor && rep.recovery_s > worst && !p->store_lost)
            worst = rep.recovery_s;
        if (p->freeze && survivors == p->n - 2 && p->second >= 0)
            kill(pid[p->second], SIGCONT); /* the others are done: let it find out */
    }
    close(fds[0]);
    for (int r = 0; r < p->n; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        int want_kill = r == p->first || (r == p->second && p->phase >= 0 && !p->freeze);
        if (want_kill)
            CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "rank %d should have died", r);
        else
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d of %d: %s %d", r, p->n,
                   WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    CHECKF(survivors == p->n - (p->first >= 0) - (p->second >= 0 && p->phase >= 0),
           "%d survivors reported", survivors);
    if (store > 0) {
        kill(store, SIGKILL);
        waitpid(store, NULL, 0);
    }
    return worst;
}

TEST(shrink_nobody_dead)
{
    plan p = { .n = 4, .first = -1, .second = -1, .phase = -1, .timeout_s = 10 };
    run(&p);
}

/* One death at 3, 4, 7 and 8 ranks, the dead rank first, last or in
 * between. */
TEST(shrink_one_dead)
{
    static const int sizes[] = { 3, 4, 7, 8 };
    for (int s = 0; s < 4; s += mp_thin() ? 3 : 1) {
        int n = sizes[s];
        int first = (n - 3) % 3 == 0 ? 0 : (n - 3) % 3 == 1 ? n - 1 : n / 2;
        plan p = { .n = n, .first = first, .second = -1, .phase = -1, .timeout_s = 10 };
        double t = run(&p);
        printf("  n=%d rank %d killed: working communicator %.3f s after the death\n", n,
               p.first, t);
    }
}

/* A second death at every phase of the agreement. */
TEST(shrink_death_at_every_phase)
{
    static const int sizes[] = { 3, 8 };
    for (int s = 0; s < 2; s++) {
        if (mp_thin() && s == 1)
            continue;
        for (int ph = 0; ph < SHRINK_PH_COUNT; ph++) {
            int n = sizes[s];
            plan p = { .n = n, .first = 1, .second = (ph % 2) ? 0 : n - 1, .phase = ph,
                       .timeout_s = 10 };
            double t = run(&p);
            printf("  n=%d rank 1 killed, rank %d at phase %d: %.3f s\n", n, p.second, ph, t);
        }
    }
}

/* A rank frozen inside the agreement is counted out after the timeout;
 * woken later, it learns so (WEFT_EPEER), while the others go on. */
TEST(shrink_frozen_rank_counted_out)
{
    for (int ph = SHRINK_PH_JOINED; ph <= SHRINK_PH_PUBLISHED; ph += 2) {
        plan p = { .n = 4, .first = 2, .second = 3, .phase = ph, .freeze = 1,
                   .timeout_s = 1 };
        run(&p);
    }
}

/* The store in rank 0's process: shrinking works while rank 0 lives, and
 * its store moves to the new communicator. */
TEST(shrink_store_in_rank0)
{
    plan p = { .n = 5, .first = 3, .second = 4, .phase = SHRINK_PH_AGREED, .store_rank0 = 1,
               .timeout_s = 10 };
    run(&p);
}

/* ... and when rank 0 dies with the store, shrink says so at once. */
TEST(shrink_store_lost_with_rank0)
{
    plan p = { .n = 4, .first = 0, .second = -1, .phase = -1, .store_rank0 = 1,
               .store_lost = 1, .timeout_s = 10 };
    run(&p);
}
