/* Parameter-server failures: a worker that dies or hangs is counted out
 * and the survivors go on (BSP, averaging over who pushed); a server that
 * dies is reported to the workers as WEFT_EPEER and one that hangs as
 * WEFT_ETIMEDOUT, never a hang; a server killed with SIGKILL mid-training
 * and restarted resumes from its checkpoint and log without losing any
 * acknowledged update. */
#include "test_ps.h"

#include <math.h>
#include <signal.h>
#include <time.h>

typedef struct {
    _Atomic int phase;        /* worker -> parent handshakes */
    _Atomic int done;
    _Atomic int64_t acked, issued;
    _Atomic int epeer, other_rc;
    float seen[8];
    char msg[256];
} shared_t;

/* The parent waits for a worker's signal at most a minute: a worker that
 * failed early must fail the test, not hang it. */
static int await(psjob *j, _Atomic int *v, int want)
{
    for (int i = 0; i < 6000; i++) {
        if (atomic_load(v) >= want)
            return 1;
        mp_sleep_ms(10);
    }
    CHECKF(0, "no worker reached stage %d within 60 s", want);
    for (int r = 0; r < j->W + j->K; r++)
        psj_kill(j, r);
    return 0;
}

static void counting_config(weft_ps_config *c, const char *mode)
{
    weft_ps_config_default(c);
    weft_ps_consistency_parse(mode, c);
    c->optim.momentum = 0;
    c->lr.lr = 1.0f;
    c->chunk_min = 1;
    c->timeout_s = 20;
}

/* ---- worker death: 3 workers under BSP, worker 2 leaves after 3 steps --- */

#define DW 3
#define DSTEPS 8

static void dying_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    float p[DW], g[DW] = { 0 }, zero[DW] = { 0 };
    weft_ps_request *a, *b;
    int hang = j->cfg.dead_worker_wait_s < 5; /* the second variant hangs instead */
    CHECK(weft_ps_register(ps, 0, zero, DW) == 0);
    g[w] = -1.0f;
    for (int c = 0; c < DSTEPS; c++) {
        if (w == 2 && c == 3) {
            if (hang) {
                atomic_store(&sh->phase, 1);
                raise(SIGSTOP); /* silent, connection open: only the dead wait helps */
            }
            _exit(0); /* connection closes: the servers see EOF */
        }
        CHECK(weft_ps_push(ps, 0, g, &a) == 0);
        CHECK(weft_ps_clock(ps) == 0);
        CHECK(weft_ps_pull(ps, 0, p, &b) == 0);
        CHECK(weft_ps_wait(a) == 0 && weft_ps_wait(b) == 0);
    }
    /* steps 0-2 average over 3 pushes, steps 3-7 over the 2 survivors */
    CHECKF(fabsf(p[w] - (3.0f / 3 + 5.0f / 2)) < 1e-5f, "worker %d: own %g", w, p[w]);
    CHECKF(fabsf(p[2] - 1.0f) < 1e-5f, "dead worker's share %g", p[2]);
    CHECK(weft_ps_shutdown(ps) == 0);
    atomic_fetch_add(&sh->done, 1);
}

static void test_worker_death(int hang)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    memset(&j, 0, sizeof j);
    j.W = DW;
    j.K = 2;
    j.alarm_s = 60;
    j.worker = dying_worker;
    j.shared = sh;
    counting_config(&j.cfg, "bsp");
    j.cfg.dead_worker_wait_s = hang ? 2.0 : 30;
    psj_start(&j);
    if (hang && await(&j, &sh->done, 2))
        psj_kill(&j, 2);
    CHECKF(psj_finish(&j) == 0, "worker %s", hang ? "hang" : "death");
    CHECK(atomic_load(&sh->done) == 2);
    munmap(sh, sizeof *sh);
}

/* ---- server death: reported as WEFT_EPEER ------------------------------ */

/* Steps (push, clock, pull) until one fails or `steps` pass; worker 0
 * tells the parent at step 3 to harm server 1. Returns the failure. */
static int step_until_error(weft_ps *ps, int w, _Atomic int *phase, const float *g, float *p,
                            int steps)
{
    weft_ps_request *a, *b;
    int rc = 0;
    for (int c = 0; c < steps && !rc; c++) {
        if (w == 0 && c == 3)
            atomic_store(phase, 1);
        if (c >= 3)
            mp_sleep_ms(5);
        if ((rc = weft_ps_push(ps, 0, g, &a)) == 0) {
            int r2;
            rc = weft_ps_clock(ps);
            r2 = weft_ps_pull(ps, 0, p, &b);
            int ra = weft_ps_wait(a), rb = r2 ? r2 : weft_ps_wait(b);
            rc = rc ? rc : ra ? ra : rb;
        }
    }
    return rc;
}

static void orphan_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    float p[4], g[4] = { -1, -1, -1, -1 }, zero[4] = { 0 };
    CHECK(weft_ps_register(ps, 0, zero, 4) == 0);
    int rc = step_until_error(ps, w, &sh->phase, g, p, 1000); /* kill server 1 */
    CHECKF(rc == WEFT_EPEER, "worker %d ended with %s", w, weft_strerror(rc));
    CHECKF(strstr(weft_ps_error(ps), "parameter server 1 (rank 3) died") != NULL,
           "message: %s", weft_ps_error(ps));
    if (w == 0)
        snprintf(sh->msg, sizeof sh->msg, "%s", weft_ps_error(ps));
    /* what needs the dead server keeps failing at once */
    weft_ps_request *a;
    CHECK(weft_ps_push(ps, 0, g, &a) == 0 && weft_ps_wait(a) == WEFT_EPEER);
    CHECK(weft_ps_shutdown(ps) == WEFT_EPEER);
}

static void test_server_death(void)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    memset(&j, 0, sizeof j);
    j.W = 2;
    j.K = 2;
    j.alarm_s = 60;
    j.worker = orphan_worker;
    j.shared = sh;
    counting_config(&j.cfg, "bsp");
    psj_start(&j);
    if (await(&j, &sh->phase, 1))
        psj_kill(&j, 3);
    CHECK(psj_finish(&j) == 0);
    printf("dead server, as a worker reports it: %s\n", sh->msg);
    munmap(sh, sizeof *sh);
}

/* ---- a hung server: WEFT_ETIMEDOUT after timeout_s, not a hang --------- */

static void stalled_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    float g[4] = { -1, -1, -1, -1 }, zero[4] = { 0 };
    weft_ps_request *a;
    CHECK(weft_ps_register(ps, 0, zero, 4) == 0);
    atomic_store(&sh->phase, 1); /* parent: stop the server */
    while (atomic_load(&sh->phase) != 2)
        mp_sleep_ms(5);
    CHECK(weft_ps_push(ps, 0, g, &a) == 0);
    int rc = weft_ps_wait(a);
    CHECKF(rc == WEFT_ETIMEDOUT, "push on a stopped server: %s", weft_strerror(rc));
    CHECKF(strstr(weft_ps_error(ps), "no reply from parameter server(s) 0") != NULL,
           "message: %s", weft_ps_error(ps));
    snprintf(sh->msg, sizeof sh->msg, "%s", weft_ps_error(ps));
    atomic_store(&sh->phase, 3);
}

static void test_server_hang(void)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    memset(&j, 0, sizeof j);
    j.W = 1;
    j.K = 1;
    j.alarm_s = 60;
    j.worker = stalled_worker;
    j.shared = sh;
    counting_config(&j.cfg, "bsp");
    j.cfg.timeout_s = 1;
    psj_start(&j);
    if (await(&j, &sh->phase, 1)) {
        kill(j.pid[1], SIGSTOP);
        atomic_store(&sh->phase, 2);
        if (await(&j, &sh->phase, 3))
            psj_kill(&j, 1);
    }
    CHECK(psj_finish(&j) == 0);
    printf("hung server, as a worker reports it: %s\n", sh->msg);
    munmap(sh, sizeof *sh);
}

/* ---- a stopped server among two: every worker names it ---------------- *
 * Four workers, two servers (server 1 is rank 5, as under weftrun
 * --servers 2 with 6 ranks); every request spans both servers. Server 1
 * is frozen (SIGSTOP) mid-training: server 0 then holds its BSP replies
 * too, yet every worker must name server 1, within the timeout and a
 * generous margin (a 2-core machine running other suites beside this one
 * took the timeout twice over), not "no reply from parameter server(s) 0, 1". */

#define STOP_TIMEOUT_S 3.0

typedef struct {
    _Atomic int phase, done;
    double t_stop;
    char msg[400];
} stop_t;

static void blaming_worker(psjob *j, weft_ps *ps, int w)
{
    stop_t *sh = j->shared;
    float p[64], g[64], zero[64] = { 0 };
    for (int i = 0; i < 64; i++)
        g[i] = -1;
    CHECK(weft_ps_register(ps, 0, zero, 64) == 0);
    int rc = step_until_error(ps, w, &sh->phase, g, p, 100000); /* stop server 1 */
    double took = mp_now_s() - sh->t_stop;
    CHECKF(rc == WEFT_ETIMEDOUT, "worker %d ended with %s: %s", w, weft_strerror(rc),
           weft_ps_error(ps));
    CHECKF(strstr(weft_ps_error(ps), "parameter server 1 (rank 5) stopped responding") &&
               !strstr(weft_ps_error(ps), "parameter server 0 (rank 4) stopped"),
           "worker %d: %s", w, weft_ps_error(ps));
    const char *ts = getenv("TEST_SCALE"); /* sanitizers: everything slower alike */
    double scale = ts && atof(ts) > 1 ? atof(ts) : 1;
    CHECKF(took <= STOP_TIMEOUT_S + 6 * scale, "worker %d: %.1f s from the stop to the error", w,
           took);
    if (w == 0)
        snprintf(sh->msg, sizeof sh->msg, "%.1f s after the stop: %s", took, weft_ps_error(ps));
    atomic_fetch_add(&sh->done, 1);
    /* server 0 lets this worker go (server 1 is lost already) */
    CHECK(weft_ps_shutdown(ps) != 0);
}

static void test_server_stop(void)
{
    psjob j;
    stop_t *sh = psj_shared(sizeof *sh);
    memset(&j, 0, sizeof j);
    j.W = 4;
    j.K = 2;
    j.alarm_s = 60;
    j.worker = blaming_worker;
    j.shared = sh;
    counting_config(&j.cfg, "bsp");
    j.cfg.chunk_max = 16; /* four chunks: both servers in every request */
    j.cfg.timeout_s = STOP_TIMEOUT_S;
    psj_start(&j);
    if (await(&j, &sh->phase, 1)) {
        sh->t_stop = mp_now_s();
        kill(j.pid[5], SIGSTOP);
        await(&j, &sh->done, 4);
        psj_kill(&j, 5); /* nothing left behind, stopped */
    }
    CHECK(psj_finish(&j) == 0);
    printf("stopped server, as worker 0 reports it: %s\n", sh->msg);
    munmap(sh, sizeof *sh);
}

/* ---- server restart: no acknowledged update lost ----------------------- */

#define RN 3000  /* floats: one server, three chunks */
#define RC 1000  /* elements per chunk (chunk_max) */

static int attach(psjob *j, weft_ps **ps)
{
    return weft_ps_init(ps, NULL, &j->cfg);
}

static void restart_worker(psjob *j, weft_ps *ps, int w)
{
    shared_t *sh = j->shared;
    static float p[RN], g[RN], zero[RN];
    weft_ps_request *a;
    int rc = 0;
    for (int i = 0; i < RN; i++)
        g[i] = -1.0f;
    CHECK(weft_ps_register(ps, 0, zero, RN) == 0);
    /* push while the server is killed under us and restarted: the worker
     * reconnects by itself and sends again what was not acknowledged */
    for (int c = 0; c < 100000 && atomic_load(&sh->phase) < 2; c++) {
        atomic_store(&sh->issued, c + 1);
        if ((rc = weft_ps_push(ps, 0, g, &a)) || (rc = weft_ps_wait(a)) ||
            (rc = weft_ps_clock(ps)))
            break;
        atomic_store(&sh->acked, c + 1);
        if (c == 12)
            atomic_store(&sh->phase, 1);
        if (c >= 12)
            mp_sleep_ms(2);
    }
    CHECKF(rc == 0, "push ended with %s", weft_strerror(rc));
    weft_ps_destroy(ps);
    ps = NULL;
    /* a new handle on the restarted server, as a restarted worker makes */
    CHECK(attach(j, &ps) == 0);
    j->replaced = ps;
    if (!ps)
        return;
    CHECK(weft_ps_register(ps, 0, zero, RN) == 0);
    CHECK(weft_ps_pull(ps, 0, p, &a) == 0 && weft_ps_wait(a) == 0);
    int64_t acked = atomic_load(&sh->acked), issued = atomic_load(&sh->issued);
    /* a push is atomic per chunk (RC elements): the one in flight at the
     * crash may have reached some chunks and not others */
    int uneven = 0, out = 0;
    float lo = p[0], hi = p[0];
    for (int i = 0; i < RN; i++) {
        uneven += p[i] != p[i / RC * RC];
        out += p[i] < (float)acked || p[i] > (float)issued;
        lo = p[i] < lo ? p[i] : lo;
        hi = p[i] > hi ? p[i] : hi;
    }
    CHECKF(uneven == 0, "%d elements differ within their chunk", uneven);
    CHECKF(out == 0, "resumed at %g..%g updates; %lld acknowledged, %lld issued", lo, hi,
           (long long)acked, (long long)issued);
    sh->seen[0] = lo;
    sh->seen[1] = hi;
    /* BSP: the worker resumes at the step of the chunk furthest behind */
    if (j->cfg.consistency == WEFT_PS_BSP)
        CHECKF(weft_ps_clock_value(ps) == (int64_t)lo, "clock %lld at %g..%g updates",
               (long long)weft_ps_clock_value(ps), lo, hi);
    /* and training goes on: BSP brings the chunks behind up to the others
     * (a push for a step a chunk already has is dropped), ASP adds one */
    float before[RN / RC];
    for (int k = 0; k < RN / RC; k++)
        before[k] = p[k * RC];
    CHECK(weft_ps_push(ps, 0, g, &a) == 0 && weft_ps_wait(a) == 0 && weft_ps_clock(ps) == 0);
    CHECK(weft_ps_pull(ps, 0, p, &a) == 0 && weft_ps_wait(a) == 0);
    for (int k = 0; k < RN / RC; k++) {
        float want = j->cfg.consistency == WEFT_PS_BSP ? lo + 1 : before[k] + 1;
        if (j->cfg.consistency == WEFT_PS_BSP && before[k] > lo)
            want = before[k];
        CHECKF(p[k * RC] == want, "chunk %d: %g after one more push (was %g)", k, p[k * RC],
               before[k]);
    }
    CHECK(weft_ps_checkpoint(ps) == 0);
    CHECK(weft_ps_shutdown(ps) == 0);
}

static void test_server_restart(const char *mode)
{
    psjob j;
    shared_t *sh = psj_shared(sizeof *sh);
    char dir[] = "/tmp/weft-ps-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    memset(&j, 0, sizeof j);
    j.W = 1;
    j.K = 1;
    j.alarm_s = 60;
    j.worker = restart_worker;
    j.shared = sh;
    counting_config(&j.cfg, mode);
    j.cfg.chunk_max = RC;
    j.cfg.ckpt_dir = dir;
    j.cfg.ckpt_interval = 5; /* checkpoints and a log tail both matter */
    psj_start(&j);
    if (await(&j, &sh->phase, 1)) {
        mp_sleep_ms(7);
        psj_kill(&j, 1); /* SIGKILL mid-push */
        psj_spawn(&j, 1);
        mp_sleep_ms(300);
        atomic_store(&sh->phase, 2);
    }
    CHECK(psj_finish(&j) == 0);
    printf("%s: server killed after %lld acknowledged pushes (%lld issued); the restarted one "
           "resumed at %g..%g\n",
           mode, (long long)atomic_load(&sh->acked), (long long)atomic_load(&sh->issued),
           sh->seen[0], sh->seen[1]);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    munmap(sh, sizeof *sh);
}

TEST(worker_death) { test_worker_death(0); }
TEST(worker_hang) { test_worker_death(1); }
TEST(server_death) { test_server_death(); }
TEST(server_hang) { test_server_hang(); }
TEST(server_stop_named) { test_server_stop(); }
TEST(server_restart_asp) { test_server_restart("asp"); }
TEST(server_restart_bsp) { test_server_restart("bsp"); }
