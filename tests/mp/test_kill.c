/* kill -9 of a random rank at a random moment during each collective, at
 * N = 4 and 8: every survivor must return an error that names the dead
 * rank, none may hang (each rank has an alarm), and the slowest time from
 * the kill to a survivor's error is printed (not asserted: wall-clock time
 * on a loaded machine proves nothing).
 *
 *   WEFT_KILL_TRIALS (default 52), WEFT_KILL_SEED (default 1); a case per
 *   collective runs the trials of that collective */
#include "test.h"

#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT 4096
#define MAXN 8

static const weft_coll_kind kinds[] = {
    WEFT_COLL_ALLREDUCE, WEFT_COLL_BROADCAST, WEFT_COLL_REDUCE, WEFT_COLL_ALLGATHER,
    WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_GATHER, WEFT_COLL_SCATTER, WEFT_COLL_ALLTOALL,
    WEFT_COLL_BARRIER,
};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

typedef struct {
    int rank, rc;
    double t_err;
    long iters;
    char msg[400];
} report;

static uint64_t rng_state;
static uint64_t rng(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rank_main(int r, int n, int port, weft_coll_kind kind, weft_algo algo, int ready,
                      int out)
{
    weft_config cfg;
    weft_comm *c;
    report rep;
    float *send = calloc((size_t)COUNT * MAXN, sizeof *send);
    float *recv = calloc((size_t)COUNT * MAXN, sizeof *recv);
    weft_config_default(&cfg);
    cfg.rank = r;
    cfg.world_size = n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.job_secret = "kill-test-secret";
    /* sanitizers (TEST_SCALE) slow everything down alike */
    const char *ts = getenv("TEST_SCALE");
    unsigned scale = ts && atoi(ts) > 1 ? (unsigned)atoi(ts) : 1;
    cfg.timeout_s = 60.0 * scale; /* far beyond the alarm: a detection must not be a timeout */
    cfg.connect_timeout_s = 20.0 * scale;
    cfg.algo = algo;
    alarm(25 * scale);
    memset(&rep, 0, sizeof rep);
    rep.rank = r;
    if ((rep.rc = weft_comm_init(&c, &cfg))) {
        snprintf(rep.msg, sizeof rep.msg, "init: %s", weft_strerror(rep.rc));
        rep.t_err = -1;
        (void)!write(out, &rep, sizeof rep);
        _exit(3);
    }
    (void)!write(ready, "r", 1);
    weft_coll_args a = { .kind = kind, .send = send, .recv = recv, .count = COUNT,
                         .dtype = WEFT_F32, .op = WEFT_SUM, .root = 0 };
    for (;;) {
        if (kind == WEFT_COLL_BROADCAST)
            a.send = recv;
        if ((rep.rc = weft_collective(c, &a)))
            break;
        rep.iters++;
    }
    rep.t_err = clock_now();
    snprintf(rep.msg, sizeof rep.msg, "%s", weft_comm_error(c));
    (void)!write(out, &rep, sizeof rep);
    weft_comm_destroy(c);
    free(send);
    free(recv);
    _exit(0);
}

/* One trial; returns the slowest detection (s), or -1 on a failed check. */
static double trial(int n, weft_coll_kind kind, weft_algo algo, int victim, double delay_s)
{
    int port = fx_free_port(), ready[2], out[2];
    pid_t pid[MAXN];
    double slowest = 0, t_kill;
    char c;
    if (pipe(ready) || pipe(out))
        return -1;
    fflush(NULL);
    for (int r = 0; r < n; r++)
        if ((pid[r] = fork()) == 0) {
            close(ready[0]);
            close(out[0]);
            rank_main(r, n, port, kind, algo, ready[1], out[1]);
        }
    close(ready[1]);
    close(out[1]);
    int up = 0;
    while (up < n && read(ready[0], &c, 1) == 1)
        up++;
    close(ready[0]);
    CHECKF(up == n, "only %d of %d ranks came up", up, n);
    usleep((useconds_t)(delay_s * 1e6));
    kill(pid[victim], SIGKILL);
    t_kill = clock_now();
    report rep;
    int reports = 0, ok = 1;
    char want[32];
    snprintf(want, sizeof want, "rank %d died", victim);
    while (read(out[0], &rep, sizeof rep) == sizeof rep) {
        reports++;
        if (rep.rank == victim)
            continue; /* it wrote before it was killed: cannot be */
        double dt = rep.t_err - t_kill;
        if (dt > slowest)
            slowest = dt;
        int named = rep.rc != 0 && strstr(rep.msg, want) != NULL;
        CHECKF(named, "n=%d %s victim %d: survivor %d got %s: %s", n,
               weft_coll_name(kind), victim, rep.rank, weft_strerror(rep.rc), rep.msg);
        ok &= named;
    }
    close(out[0]);
    CHECKF(reports == n - 1, "n=%d %s victim %d: %d of %d survivors reported (a hang?)", n,
           weft_coll_name(kind), victim, reports, n - 1);
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        if (r != victim)
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "survivor %d: %s %d", r,
                   WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    return ok && reports == n - 1 ? slowest : -1;
}

/* The trials of one collective: the draws of every trial are made in order,
 * so a trial is the same one whichever cases run. */
static void trials_of(weft_coll_kind only)
{
    const char *v = getenv("WEFT_KILL_TRIALS");
    int trials = v ? atoi(v) : 52, failed = 0, ran = 0;
    double slowest = 0, t0 = clock_now();
    rng_state = getenv("WEFT_KILL_SEED") ? strtoull(getenv("WEFT_KILL_SEED"), NULL, 10) : 1;
    for (int t = 0; t < trials; t++) {
        int n = t % 2 ? 8 : 4;
        weft_coll_kind kind = kinds[(t / 2) % NKINDS];
        weft_algo algo = rng() % 2 ? WEFT_ALGO_RING : WEFT_ALGO_AUTO;
        int victim = (int)(rng() % (uint64_t)n);
        double delay = (double)(rng() % 80) / 1e3;
        if (kind != only || (getenv("WEFT_KILL_ONLY") && atoi(getenv("WEFT_KILL_ONLY")) != t))
            continue;
        double s = trial(n, kind, algo, victim, delay);
        ran++;
        if (s < 0)
            failed++;
        else if (s > slowest)
            slowest = s;
    }
    printf("kill -9 in %s: %d trials (N = 4 and 8), %d failed; slowest detection "
           "%.3f s; %.1f s in all\n", weft_coll_name(only), ran, failed, slowest,
           clock_now() - t0);
}

TEST(allreduce) { trials_of(WEFT_COLL_ALLREDUCE); }
TEST(broadcast) { trials_of(WEFT_COLL_BROADCAST); }
TEST(reduce) { trials_of(WEFT_COLL_REDUCE); }
TEST(allgather) { trials_of(WEFT_COLL_ALLGATHER); }
TEST(reduce_scatter) { trials_of(WEFT_COLL_REDUCE_SCATTER); }
TEST(gather) { trials_of(WEFT_COLL_GATHER); }
TEST(scatter) { trials_of(WEFT_COLL_SCATTER); }
TEST(alltoall) { trials_of(WEFT_COLL_ALLTOALL); }
TEST(barrier) { trials_of(WEFT_COLL_BARRIER); }
