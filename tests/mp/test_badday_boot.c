/* Bad days at the edges of a job: a frozen store host, a parameter-server
 * worker killed under weftrun, a rank started with another world size, a
 * second process claiming a rank. Each case forks its ranks itself (their
 * configurations differ, which mp_run's do not), sends each one's stderr
 * to a file and reads what it says.
 *
 * Waits are bounded so that a regression fails instead of stalling: a
 * rank's alarm, and in store_host_frozen a bound on how long the survivors
 * may take while the store host stays frozen (the notice path once waited
 * 30 s on it whatever WEFT_TIMEOUT said). */
#include "mp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

TEST_TIMEOUT(400);

typedef struct {
    int rank, size, port;
    double timeout_s;
    int expect;       /* what weft_comm_init must return */
    const char *shm;  /* WEFT_SHM for this rank, NULL: as it is */
} rank_cfg;

/* The work of a rank that joined: 0 when all went as it should. */
typedef int (*rank_fn)(weft_comm *c, void *arg);

typedef struct {
    pid_t pid;
    char log[96];
} child;

static int seq_;

/* Forks one rank; its stderr goes to k->log. It exits 0 when init returned
 * what was expected and fn (if it joined) returned 0. */
static void spawn(const rank_cfg *r, rank_fn fn, void *arg, child *k)
{
    snprintf(k->log, sizeof k->log, "/tmp/weft-badday-%d-%d.log", (int)getpid(), seq_++);
    fflush(NULL);
    k->pid = fork();
    if (k->pid != 0)
        return;
    int fd = open(k->log, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        _exit(5);
    setvbuf(stderr, NULL, _IONBF, 0);
    alarm(120); /* a hang must fail, not stall CI */
    if (r->shm)
        setenv("WEFT_SHM", r->shm, 1);
    weft_config cfg;
    weft_comm *c = NULL;
    weft_config_default(&cfg);
    cfg.rank = r->rank;
    cfg.world_size = r->size;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = r->port;
    cfg.timeout_s = r->timeout_s;
    cfg.connect_timeout_s = 30;
    cfg.job_secret = "badday-test-secret";
    int rc = weft_comm_init(&c, &cfg);
    if (rc != r->expect) {
        fprintf(stderr, "FAIL rank %d: init returned %s, not %s\n", r->rank, weft_strerror(rc),
                weft_strerror(r->expect));
        if (rc == 0) { /* say what the job then did */
            rc = weft_barrier(c);
            fprintf(stderr, "barrier: %s: %s\n", weft_strerror(rc), weft_comm_error(c));
            weft_comm_destroy(c);
        }
        _exit(1);
    }
    if (rc)
        _exit(0);
    rc = fn ? fn(c, arg) : 0;
    int drc = weft_comm_destroy(c);
    if (drc)
        fprintf(stderr, "rank %d: destroy: %s\n", r->rank, weft_strerror(drc));
    _exit(rc ? 1 : 0);
}

/* Waits for k; its exit status (128 + signal when killed). */
static int reap(child *k)
{
    int st;
    if (waitpid(k->pid, &st, 0) != k->pid)
        return -1;
    k->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* k's log holds every one of want (NULL-ended); printed when it does not. */
static int log_has(const child *k, const char *const *want)
{
    long len;
    char *t = fx_slurp(k->log, &len);
    int ok = t != NULL;
    for (; ok && *want; want++)
        ok = strstr(t, *want) != NULL;
    if (!ok)
        fprintf(stderr, "---- %s:\n%s----\n", k->log, t ? t : "(unreadable)\n");
    free(t);
    return ok;
}

static int log_lacks(const child *k, const char *what)
{
    long len;
    char *t = fx_slurp(k->log, &len);
    int ok = t && !strstr(t, what);
    if (!ok)
        fprintf(stderr, "---- %s says \"%s\":\n%s----\n", k->log, what, t ? t : "");
    free(t);
    return ok;
}

/* ---- ranks that keep a job busy until told to stop --------------------- */

/* Every rank runs all-reduces and checks them; rank 0 writes a byte to
 * ready once the job runs, and the job stops when rank 0 reads a byte on
 * stop (it says so through the all-reduce itself). */
typedef struct {
    int ready, stop;
    int rounds;   /* > 0: stop after this many instead */
    int want_rc;  /* what the loop must end with: 0, or any error (-1) */
} busy_arg;

static int busy(weft_comm *c, void *arg)
{
    busy_arg *b = arg;
    int me = weft_comm_rank(c), n = weft_comm_size(c), told = 0;
    float v[256];
    for (int round = 0;; round++) {
        float stop = 0;
        for (int i = 0; i < 256; i++)
            v[i] = (float)(me + i);
        if (me == 0 && round == 1 && write(b->ready, "r", 1) != 1)
            return 1;
        if (me == 0 && round > 0) {
            struct pollfd p = { .fd = b->stop, .events = POLLIN };
            stop = poll(&p, 1, 0) == 1;
        }
        if (b->rounds > 0 && round >= b->rounds)
            break;
        int rc = weft_allreduce(c, v, v, 256, WEFT_F32, WEFT_SUM);
        if (!rc)
            rc = weft_allreduce(c, &stop, &stop, 1, WEFT_F32, WEFT_MAX);
        if (rc) {
            fprintf(stderr, "rank %d: round %d: %s: %s\n", me, round, weft_strerror(rc),
                    weft_comm_error(c));
            return b->want_rc == 0;
        }
        for (int i = 0; i < 256; i++)
            if (v[i] != (float)(n * (n - 1) / 2 + n * i)) {
                fprintf(stderr, "rank %d: round %d: wrong sum at %d: %g\n", me, round, i,
                        (double)v[i]);
                return 1;
            }
        if (stop > 0 && !told++)
            break;
        usleep(2000); /* no need to race: this job only has to stay alive */
    }
    return b->want_rc != 0;
}

/* ---- item: a rank started with another world size -------------------- */

TEST(world_size_disagrees)
{
    int port = fx_free_port();
    child k[4];
    for (int r = 0; r < 4; r++) {
        rank_cfg cfg = { .rank = r, .size = r == 2 ? 3 : 4, .port = port, .timeout_s = 5,
                         .expect = WEFT_ECONFIG };
        spawn(&cfg, NULL, NULL, &k[r]);
    }
    for (int r = 0; r < 4; r++)
        CHECKF(reap(&k[r]) == 0, "rank %d did not fail its init with WEFT_ECONFIG", r);
    for (int r = 0; r < 4; r++) {
        if (r == 2) {
            CHECK(log_has(&k[r], (const char *const[]){ "disagree on the world size",
                                                        "rank 0 (pid", "was started with 4",
                                                        "this rank (2,", "with 3", NULL }));
        } else {
            CHECK(log_has(&k[r], (const char *const[]){ "disagree on the world size",
                                                        "rank 2 (pid", "was started with 3",
                                                        "with 4", NULL }));
        }
        /* nobody is blamed for dying: everyone is alive */
        CHECK(log_lacks(&k[r], "died"));
        CHECK(log_lacks(&k[r], "authentication"));
        unlink(k[r].log);
    }
}

/* A rank that claims a place the others do not have (rank 4 of 5 beside a
 * job of 4): the job goes on, the stray one is told why. */
TEST(world_size_larger_stray)
{
    int port = fx_free_port(), ready[2], stop[2];
    child k[5];
    CHECK(pipe(ready) == 0 && pipe(stop) == 0);
    busy_arg b = { .ready = ready[1], .stop = stop[0] };
    for (int r = 0; r < 5; r++) {
        rank_cfg cfg = { .rank = r, .size = r == 4 ? 5 : 4, .port = port, .timeout_s = 20,
                         .expect = r == 4 ? WEFT_ECONFIG : 0 };
        spawn(&cfg, busy, &b, &k[r]);
    }
    CHECKF(reap(&k[4]) == 0, "the stray rank joined");
    CHECK(log_has(&k[4], (const char *const[]){ "disagree on the world size", "rank 0 (pid",
                                                "was started with 4", "with 5", NULL }));
    CHECK(write(stop[1], "s", 1) == 1);
    for (int r = 0; r < 4; r++)
        CHECKF(reap(&k[r]) == 0, "rank %d of the job failed", r);
    for (int r = 0; r < 5; r++)
        unlink(k[r].log);
    close(ready[0]), close(ready[1]), close(stop[0]), close(stop[1]);
}

/* ---- item: a second process claiming a rank ------------------------------ */

static void duplicate(const char *shm, int twin)
{
    int port = fx_free_port(), ready[2], stop[2];
    child k[4], dup;
    char c;
    CHECK(pipe(ready) == 0 && pipe(stop) == 0);
    busy_arg b = { .ready = ready[1], .stop = stop[0] };
    for (int r = 0; r < 4; r++) {
        rank_cfg cfg = { .rank = r, .size = 4, .port = port, .timeout_s = 20, .shm = shm };
        spawn(&cfg, busy, &b, &k[r]);
    }
    CHECKF(read(ready[0], &c, 1) == 1, "the job never ran");
    pid_t first = k[twin].pid;
    rank_cfg cfg = { .rank = twin, .size = 4, .port = port, .timeout_s = 20, .shm = shm,
                     .expect = WEFT_ECONFIG };
    spawn(&cfg, NULL, NULL, &dup);
    pid_t second = dup.pid;
    CHECKF(reap(&dup) == 0, "WEFT_SHM=%s: the second rank %d was not refused", shm, twin);
    char a[64], bb[64], what[64];
    snprintf(what, sizeof what, "rank %d is claimed twice", twin);
    snprintf(a, sizeof a, "first by pid %d on host ", (int)first);
    snprintf(bb, sizeof bb, "this process (pid %d on host ", (int)second);
    CHECK(log_has(&dup, (const char *const[]){ what, a, bb, "refused",
                                               NULL }));
    /* the job itself goes on, right, and ends well */
    CHECK(write(stop[1], "s", 1) == 1);
    for (int r = 0; r < 4; r++) {
        CHECKF(reap(&k[r]) == 0, "WEFT_SHM=%s: rank %d of the job failed", shm, r);
        CHECK(log_lacks(&k[r], "died"));
        unlink(k[r].log);
    }
    unlink(dup.log);
    close(ready[0]), close(ready[1]), close(stop[0]), close(stop[1]);
}

TEST(duplicate_rank_shm) { duplicate("1", 1); }
TEST(duplicate_rank_tcp) { duplicate("0", 1); }
/* the store's host: the second cannot serve it, and is told who does */
TEST(duplicate_rank_0) { duplicate("1", 0); }

/* ---- item: a frozen rank, the store's host among them -------------------- */

/* Freezes rank victim of 4 mid-job (WEFT_TIMEOUT 2 s). Every other rank
 * must report the failure, naming the frozen rank, while it is still
 * frozen, and within bound_s: the failure notice waits on the store at
 * most WEFT_TIMEOUT, even when the store's host is the frozen one. */
static void freeze(int victim, double bound_s)
{
    int port = fx_free_port(), ready[2], stop[2], left = 3;
    child k[4];
    char c, who[32];
    CHECK(pipe(ready) == 0 && pipe(stop) == 0);
    busy_arg b = { .ready = ready[1], .stop = stop[0], .want_rc = -1 };
    for (int r = 0; r < 4; r++) {
        rank_cfg cfg = { .rank = r, .size = 4, .port = port, .timeout_s = 2 };
        spawn(&cfg, busy, &b, &k[r]);
    }
    CHECKF(read(ready[0], &c, 1) == 1, "the job never ran");
    pid_t frozen = k[victim].pid;
    kill(frozen, SIGSTOP);
    double until = mp_now_s() + bound_s;
    while (left > 0 && mp_now_s() < until) {
        for (int r = 0; r < 4; r++) {
            int st;
            if (r == victim || !k[r].pid || waitpid(k[r].pid, &st, WNOHANG) != k[r].pid)
                continue;
            k[r].pid = 0;
            left--;
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                   "rank %d did not end with an error of its collective", r);
        }
        usleep(50000);
    }
    CHECKF(left == 0, "rank %d frozen: %d other rank(s) still waiting after %.0f s", victim,
           left, bound_s);
    /* who is blamed is the executor's business (a rank waiting on a rank
     * that waits on the frozen one names the one it waits on); that the
     * store's silence is named is this path's */
    snprintf(who, sizeof who, victim == 0 ? "did not answer" : "timed out");
    for (int r = 0; r < 4; r++) {
        if (r == victim)
            continue;
        if (k[r].pid) {
            kill(k[r].pid, SIGKILL);
            reap(&k[r]);
        }
        CHECK(log_has(&k[r], (const char *const[]){ who, NULL }));
        if (victim == 0) /* the store's host is named, whichever peer timed out */
            CHECK(log_has(&k[r], (const char *const[]){ "served by rank 0", NULL }));
    }
    kill(frozen, SIGKILL);
    kill(frozen, SIGCONT);
    reap(&k[victim]);
    for (int r = 0; r < 4; r++)
        unlink(k[r].log);
    close(ready[0]), close(ready[1]), close(stop[0]), close(stop[1]);
}

/* WEFT_TIMEOUT 2 s: before, the survivors took 2 + 30 s here */
TEST(store_host_frozen) { freeze(0, 20); }
TEST(rank_frozen) { freeze(2, 20); }

/* ---- item: a parameter-server worker killed under weftrun ------------------ */

/* A /proc file into buf (its size is not known beforehand); bytes read. */
static long read_proc(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    long n = 0;
    ssize_t got;
    if (fd < 0)
        return -1;
    while (n < (long)cap - 1 && (got = read(fd, buf + n, cap - 1 - (size_t)n)) > 0)
        n += got;
    buf[n] = 0;
    close(fd);
    return n;
}

/* The child of parent whose environment says WEFT_RANK=rank; -1 if none. */
static pid_t child_with_rank(pid_t parent, int rank)
{
    static char t[1 << 16];
    char want[32], path[64];
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = -1;
    snprintf(want, sizeof want, "WEFT_RANK=%d", rank);
    while (d && found < 0 && (e = readdir(d))) {
        int p = atoi(e->d_name), pp = -1;
        long len;
        if (p <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/stat", p);
        if (read_proc(path, t, sizeof t) <= 0)
            continue;
        char *close_paren = strrchr(t, ')'); /* the command name may hold anything */
        if (!close_paren || sscanf(close_paren + 1, " %*c %d", &pp) != 1 || pp != parent)
            continue;
        snprintf(path, sizeof path, "/proc/%d/environ", p);
        if ((len = read_proc(path, t, sizeof t)) <= 0)
            continue;
        for (long at = 0; at < len; at += (long)strlen(t + at) + 1)
            if (!strcmp(t + at, want))
                found = p;
    }
    if (d)
        closedir(d);
    return found;
}

TEST(ps_worker_killed)
{
    char run[PATH_MAX], train[PATH_MAX], *out = NULL;
    size_t len = 0, cap = 0;
    int fds[2], killed = 0;
    if (fx_tool("weftrun", run, sizeof run) || fx_tool("weft-train", train, sizeof train)) {
        printf("skipped: weftrun or weft-train not built\n");
        return;
    }
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t wr = fork();
    if (wr == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execl(run, run, "-n", "4", "--servers", "2", "--timeout", "300", train, "--model",
              "mlp:784-64-10", "--data", "builtin", "--train-size", "4096", "--steps", "600",
              "--batch", "64", "--mode", "ps", "--consistency", "bsp", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    for (;;) {
        if (cap - len < 4096 && !(out = realloc(out, cap = cap ? 2 * cap : 65536)))
            break;
        ssize_t n = read(fds[0], out + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
        out[len] = 0;
        /* once training is under way (worker 0 reports a step), kill worker 2 */
        if (!killed && strstr(out, " step ")) {
            pid_t victim = child_with_rank(wr, 2);
            CHECKF(victim > 0, "no rank 2 under weftrun");
            if (victim > 0)
                kill(victim, SIGKILL);
            killed = 1;
        }
    }
    close(fds[0]);
    int st;
    waitpid(wr, &st, 0);
    int ok = out && killed;
    CHECK(ok);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "weftrun: %s %d", WIFEXITED(st) ? "exit"
           : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    if (ok) {
        CHECK(strstr(out, "rank 2 killed by signal SIGKILL; it was a worker"));
        CHECK(strstr(out, "continuing with the 3 live worker"));
        CHECK(strstr(out, "accuracy"));               /* worker 0 finished and evaluated */
        CHECK(strstr(out, "finished without 1 of its 4 worker"));
        CHECK(!strstr(out, "leaving the job"));      /* no survivor failed at the end */
        CHECK(!strstr(out, "exited with status"));
    }
    if (test_failed_ && out)
        fprintf(stderr, "---- weftrun's output:\n%s----\n", out);
    free(out);
}
