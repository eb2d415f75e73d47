/* Parameter-server membership that comes back: a worker killed with
 * SIGKILL and restarted (same worker id) is re-admitted with its clock
 * set from the servers, and a server killed and restarted from its
 * checkpoint is reconnected to by the workers themselves, which send
 * again what it had not acknowledged. Gradients are small integers, so
 * every applied total is exact in fp32: an update lost or applied twice
 * shows as a wrong sum. */
#include "test_ps.h"

#include <signal.h>
#include <time.h>

typedef struct {
    _Atomic int w0_at_death, dying, dead, w0_at_join, joined, restarted, phase;
    _Atomic int64_t join_clock;
    _Atomic int done;
    int n;             /* floats in the tensor */
    double spawned, joined_at, killed_at, longest; /* seconds, monotonic (printed only) */
} shared_t;

/* Waits (sleeping, not spinning) for *v >= want, at most 60 s. */
static int await(_Atomic int *v, int want)
{
    for (int i = 0; i < 6000; i++) {
        if (atomic_load(v) >= want)
            return 1;
        mp_sleep_ms(10);
    }
    CHECKF(0, "stage %d not reached within 60 s", want);
    return 0;
}

static void counting_config(weft_ps_config *c, const char *mode)
{
    weft_ps_config_default(c);
    weft_ps_consistency_parse(mode, c);
    c->optim.momentum = 0;
    c->lr.lr = 1.0f;
    c->chunk_min = 1; /* 4 floats: chunk 0 (elements 0-1) on server 0, chunk 1 on server 1 */
    c->timeout_s = 20;
    c->dead_worker_wait_s = 30;
}

/* A job of W workers and two servers, set up but not started. dir: NULL,
 * or a template that becomes the servers' checkpoint directory. */
static void job_init(psjob *j, shared_t *sh, int W, psj_worker_fn fn, const char *mode,
                     char *dir)
{
    memset(j, 0, sizeof *j);
    j->W = W;
    j->K = 2;
    j->alarm_s = 60;
    j->worker = fn;
    j->shared = sh;
    counting_config(&j->cfg, mode);
    if (dir) {
        CHECK(mkdtemp(dir) != NULL);
        j->cfg.ckpt_dir = dir;
    }
}

static void job_end(psjob *j, shared_t *sh)
{
    char cmd[256];
    if (j->cfg.ckpt_dir) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", j->cfg.ckpt_dir);
        CHECK(system(cmd) == 0);
    }
    munmap(sh, sizeof *sh);
}

/* Worker w's gradient: -2 at the elements i with i % 2 == w (of 4: one in
 * each of the two chunks). */
static void grad_of(int w, float *g, int n)
{
    for (int i = 0; i < n; i++)
        g[i] = i % 2 == w ? -2.0f : 0;
}

static int step(weft_ps *ps, const float *g, float *p)
{
    weft_ps_request *a, *b;
    int rc = weft_ps_push(ps, 0, g, &a);
    if (rc)
        return rc;
    if ((rc = weft_ps_clock(ps)) || (rc = weft_ps_pull(ps, 0, p, &b)))
        return rc;
    int ra = weft_ps_wait(a), rb = weft_ps_wait(b);
    return ra ? ra : rb;
}

/* Everything applied: a barrier after each worker's last acknowledged push,
 * then a pull (at the end clock every mode shows every update). */
static void final_params(weft_ps *ps, float *p)
{
    weft_ps_request *b;
    CHECK(weft_ps_barrier(ps) == 0);
    CHECK(weft_ps_pull(ps, 0, p, &b) == 0 && weft_ps_wait(b) == 0);
}

/* ---- a worker killed and restarted --------------------------------------
 * Two workers. Worker 1 runs steps 0..D-1 and is killed; worker 0 goes on
 * alone (a barrier first, so the servers have counted worker 1 out) up to
 * step X, where it waits for worker 1's restarted process to register;
 * both then run to step E. Every step (BSP) or push (SSP/ASP, weighted
 * 1/members) adds 1 to each element of a worker's own while both are
 * members and 2 while worker 0 is alone. */

#define D 3
#define X 8
#define E 14

static void rejoin_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    float p[4], g[4], zero[4] = { 0 };
    int64_t c0 = 0;
    grad_of(w, g, 4);
    CHECK(weft_ps_register(ps, 0, zero, 4) == 0);
    if (w == 1 && atomic_load(&sh->restarted)) {
        weft_ps_request *b;
        /* the restarted process: its clock comes from the servers */
        c0 = weft_ps_clock_value(ps);
        atomic_store(&sh->join_clock, c0);
        CHECKF(c0 == X, "re-admitted at clock %lld, expected %d", (long long)c0, X);
        CHECK(weft_ps_pull(ps, 0, p, &b) == 0 && weft_ps_wait(b) == 0);
        sh->joined_at = mp_now_s();
        atomic_store(&sh->joined, 1);
    }
    for (int64_t c = c0; c < E; c++) {
        if (w == 1 && c == D && !atomic_load(&sh->restarted)) {
            await(&sh->w0_at_death, 1);
            atomic_store(&sh->dying, 1);
            /* hang (the same process comes back), or die */
            raise(j->cfg.dead_worker_wait_s < 5 ? SIGSTOP : SIGKILL);
        }
        if (w == 1 && c == X && !atomic_load(&sh->restarted)) {
            /* woken: reconnected and re-admitted; its pushes for the
             * steps it missed were dropped (the chunks were past them) */
            atomic_store(&sh->join_clock, c);
            atomic_store(&sh->joined, 1);
        }
        if (w == 0 && c == D) {
            atomic_store(&sh->w0_at_death, 1);
            await(&sh->dead, 1);
            CHECK(weft_ps_barrier(ps) == 0); /* returns once worker 1 is counted out */
        }
        if (w == 0 && c == X) {
            atomic_store(&sh->w0_at_join, 1);
            await(&sh->joined, 1);
        }
        int rc = step(ps, g, p);
        CHECKF(rc == 0, "worker %d step %lld: %s (%s)", w, (long long)c, weft_strerror(rc),
               weft_ps_error(ps));
        if (rc)
            break;
    }
    CHECK(weft_ps_clock_value(ps) == E);
    final_params(ps, p);
    float both = (float)(D + 2 * (X - D) + (E - X)), one = (float)(D + (E - X));
    CHECKF(p[0] == both && p[2] == both, "worker 0's elements %g %g, expected %g", p[0], p[2],
           both);
    CHECKF(p[1] == one && p[3] == one, "worker 1's elements %g %g, expected %g", p[1], p[3],
           one);
    CHECK(weft_ps_shutdown(ps) == 0);
    atomic_fetch_add(&sh->done, 1);
}

static void test_worker_restart(const char *mode)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    job_init(&j, sh, 2, rejoin_worker, mode, NULL);
    psj_start(&j);
    if (await(&sh->dying, 1)) {
        waitpid(j.pid[1], NULL, 0); /* it killed itself: SIGKILL, no goodbye */
        j.killed[1] = 1;
        atomic_store(&sh->dead, 1);
        if (await(&sh->w0_at_join, 1)) {
            atomic_store(&sh->restarted, 1);
            sh->spawned = mp_now_s();
            psj_spawn(&j, 1);
        }
    }
    CHECK(psj_finish(&j) == 0);
    CHECK(atomic_load(&sh->done) == 2);
    printf("%s: worker 1 killed at step %d, restarted and re-admitted at clock %lld "
           "(process start to parameters pulled: %.3f s); both finished step %d with exact "
           "sums\n",
           mode, D, (long long)atomic_load(&sh->join_clock), sh->joined_at - sh->spawned, E);
    job_end(&j, sh);
}

/* ---- a server killed and restarted --------------------------------------
 * Two workers, two durable servers; server 1 is killed with SIGKILL while
 * both push and is restarted from its checkpoint and log. The workers see
 * no error: they reconnect, send again what was not acknowledged, and
 * every element ends at exactly one per step. */

#define RSTEPS 40

#define RMAX 4096

static void steady_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    static float p[RMAX], g[RMAX], zero[RMAX];
    int n = sh->n, bad = 0;
    grad_of(w, g, n);
    CHECK(weft_ps_register(ps, 0, zero, (size_t)n) == 0);
    for (int c = 0; c < RSTEPS; c++) {
        if (w == 0 && c == 5)
            atomic_store(&sh->phase, 1); /* parent: kill server 1 now */
        if (c >= 5)
            mp_sleep_ms(4);
        double t0 = mp_now_s();
        int rc = step(ps, g, p);
        if (w == 0 && mp_now_s() - t0 > sh->longest)
            sh->longest = mp_now_s() - t0;
        CHECKF(rc == 0, "worker %d step %d: %s (%s)", w, c, weft_strerror(rc),
               weft_ps_error(ps));
        if (rc)
            break;
    }
    final_params(ps, p);
    for (int i = 0; i < n; i++)
        bad += p[i] != (float)RSTEPS;
    CHECKF(bad == 0, "%d of %d elements not at %d (element %d: %g, element %d: %g)", bad, n,
           RSTEPS, w, p[w], n - 2 + w, p[n - 2 + w]);
    if (w == 0)
        atomic_store(&sh->done, 1);
    CHECK(weft_ps_shutdown(ps) == 0);
}

/* n floats; chunks: 0 = one per server, else chunk_max (many per server:
 * pulls answered in part when the server dies are asked again in part) */
static void test_server_restart(const char *mode, int n, int chunk)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    char dir[] = "/tmp/weft-ps-elastic-XXXXXX";
    job_init(&j, sh, 2, steady_worker, mode, dir);
    sh->n = n;
    if (chunk)
        j.cfg.chunk_max = chunk;
    j.cfg.ckpt_interval = 5; /* checkpoints and a log tail both matter */
    psj_start(&j);
    if (await(&sh->phase, 1)) {
        mp_sleep_ms(6);
        psj_kill(&j, 3); /* server 1 */
        sh->killed_at = mp_now_s();
        CHECKF(!atomic_load(&sh->done), "the workers finished before the server was killed");
        psj_spawn(&j, 3);
    }
    CHECK(psj_finish(&j) == 0);
    printf("%s, %d floats: server 1 killed and restarted mid-run; both workers reconnected, "
           "every element at exactly %d; worker 0's longest step %.3f s\n",
           mode, n, RSTEPS, sh->longest);
    job_end(&j, sh);
}

/* ---- a durable server that does not come back --------------------------
 * The workers try for timeout_s, then fail as for any dead server. */

static void abandoned_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    float p[4], g[4], zero[4] = { 0 };
    int rc = 0;
    grad_of(w, g, 4);
    CHECK(weft_ps_register(ps, 0, zero, 4) == 0);
    for (int c = 0; c < 100000 && !rc; c++) {
        if (c == 3)
            atomic_store(&sh->phase, 1); /* parent: kill server 1 for good */
        if (c >= 3)
            mp_sleep_ms(5);
        rc = step(ps, g, p);
    }
    CHECKF(rc == WEFT_EPEER, "ended with %s", weft_strerror(rc));
    CHECKF(strstr(weft_ps_error(ps), "parameter server 1 (rank 2) died: connection ") &&
               strstr(weft_ps_error(ps), "did not come back within 2 s"),
           "message: %s", weft_ps_error(ps));
    printf("a durable server gone for good, as the worker reports it: %s\n",
           weft_ps_error(ps));
    CHECK(weft_ps_shutdown(ps) == WEFT_EPEER); /* server 0 still gets the goodbye */
}

static void test_server_gone(void)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    char dir[] = "/tmp/weft-ps-elastic-XXXXXX";
    job_init(&j, sh, 1, abandoned_worker, "bsp", dir);
    j.cfg.timeout_s = 2;
    psj_start(&j);
    if (await(&sh->phase, 1))
        psj_kill(&j, 2);
    CHECK(psj_finish(&j) == 0);
    job_end(&j, sh);
}

/* Worker 1 stopped (SIGSTOP) instead: counted out after dead_worker_wait_s
 * while worker 0 waits on it, woken once worker 0 is at step X. The same
 * process finds its connections closed, reconnects to the same servers
 * and is re-admitted; under BSP the sums are those of the restart. */
static void test_worker_wakes(void)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    char dir[] = "/tmp/weft-ps-elastic-XXXXXX";
    job_init(&j, sh, 2, rejoin_worker, "bsp", dir);
    j.cfg.dead_worker_wait_s = 1;
    psj_start(&j);
    if (await(&sh->dying, 1)) {
        atomic_store(&sh->dead, 1); /* worker 0's barrier waits until it is counted out */
        if (await(&sh->w0_at_join, 1))
            kill(j.pid[1], SIGCONT);
    }
    CHECK(psj_finish(&j) == 0);
    CHECK(atomic_load(&sh->done) == 2);
    printf("bsp: worker 1 stopped at step %d, counted out, woken at step %d: reconnected and "
           "re-admitted, exact sums\n",
           D, X);
    job_end(&j, sh);
}

TEST(worker_restart_bsp) { test_worker_restart("bsp"); }
TEST(worker_restart_ssp) { test_worker_restart("ssp:2"); }
/* Under sanitizers (about ten times slower) ASP, the mode with the least
 * to check, is left out. */
TEST(worker_restart_asp)
{
    if (!mp_thin())
        test_worker_restart("asp");
}
TEST(server_restart_bsp) { test_server_restart("bsp", 4, 0); }
TEST(server_restart_ssp) { test_server_restart("ssp:2", 4, 0); }
TEST(server_restart_chunks_bsp) { test_server_restart("bsp", RMAX, 256); }
TEST(server_restart_chunks_ssp) { test_server_restart("ssp:2", RMAX, 256); }
TEST(server_restart_asp)
{
    if (!mp_thin())
        test_server_restart("asp", 4, 0);
}
TEST(server_gone) { test_server_gone(); }
TEST(worker_wakes_bsp) { test_worker_wakes(); }
