/* Parameter server: sharding math, the wire decoder, and each consistency
 * mode's guarantee with a deliberately slowed worker; BSP push/pull
 * training equals all-reduce data parallelism. */
#include "test_ps.h"

#include "ps/ps_shard.h"
#include "ps/ps_wire.h"

#include <math.h>
#include <time.h>

TEST(shard)
{
    const size_t counts[] = { 1, 2, 7, 100, 4095, 4096, 10000, 65536, 1000003, 5u << 20 };
    int bad = 0;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int k = 1; k <= 5; k++) {
            size_t count = counts[ci], cmin = 4096, cmax = 1 << 20;
            size_t nc = ps_shard_nchunks(count, k, cmin, cmax), next = 0, lo = (size_t)-1, hi = 0;
            size_t per[8] = { 0 };
            for (size_t j = 0; j < nc; j++) {
                size_t off, n;
                ps_shard_chunk(count, nc, j, &off, &n);
                bad += off != next || n == 0 || n > cmax;
                next = off + n;
                lo = n < lo ? n : lo;
                hi = n > hi ? n : hi;
                per[ps_shard_server(7, j, k)] += n;
            }
            bad += next != count || hi - lo > 1;
            /* big enough to spread: every server holds a share, none more
             * than one chunk above another */
            if (count >= (size_t)k * cmin)
                for (int s = 0; s < k; s++)
                    bad += per[s] == 0 || per[s] > (count + (size_t)k - 1) / (size_t)k + hi;
            if (count < cmin)
                bad += nc != 1;
        }
    CHECKF(bad == 0, "%d sharding violations", bad);
    CHECK(ps_shard_nchunks(0, 3, 4096, 1 << 20) == 0);
    CHECK(ps_shard_nchunks(10u << 20, 2, 4096, 1 << 20) == 10);
    CHECK(ps_shard_server(3, 0, 4) == 3 && ps_shard_server(3, 1, 4) == 0);
}

TEST(wire)
{
    ps_msg m = ps_msg_make(PS_PUSH), d;
    const char *why;
    m.len = 16;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == 0 && d.len == 16);
    CHECK(ps_msg_decode(&m, sizeof m - 1, &d, &why) == WEFT_EPROTO);
    m.len = 15;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO);
    m.len = 0;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO); /* push without data */
    m = ps_msg_make(PS_PULL);
    m.len = 4;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO);
    m = ps_msg_make(PS_ERR);
    m.status = 3;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO);
    m.status = WEFT_EPEER;
    m.len = 11;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == 0);
    m = ps_msg_make(99);
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO);
    m = ps_msg_make(PS_CLOCK);
    m.clock = -1;
    CHECK(ps_msg_decode(&m, sizeof m, &d, &why) == WEFT_EPROTO);

    weft_ps_config c;
    weft_ps_config_default(&c);
    CHECK(weft_ps_consistency_parse("ssp:3", &c) == 0 && c.consistency == WEFT_PS_SSP &&
          c.staleness == 3);
    CHECK(weft_ps_consistency_parse("asp", &c) == 0 && c.consistency == WEFT_PS_ASP);
    CHECK(weft_ps_consistency_parse("bsp", &c) == 0 && c.consistency == WEFT_PS_BSP);
    CHECK(weft_ps_consistency_parse("ssp:", &c) == WEFT_EINVAL);
    CHECK(weft_ps_consistency_parse("ssp:-1", &c) == WEFT_EINVAL);
    CHECK(weft_ps_consistency_parse("lazy", &c) == WEFT_EINVAL);
}

/* ---- counting jobs: param[j] * W counts worker j's pushes applied ------- */

#define CW 4     /* workers: 1/4 is exact in fp32 */
#define STEPS 8

typedef struct {
    _Atomic int64_t clock[CW];  /* each worker's clock, published before weft_ps_clock */
    _Atomic int ran_ahead;      /* a pull saw another worker behind its own clock */
    _Atomic int fast_done;
} counting;

static void configure_counting(psjob *j, const char *mode)
{
    weft_ps_config_default(&j->cfg);
    weft_ps_consistency_parse(mode, &j->cfg);
    weft_optim_config_default(&j->cfg.optim, WEFT_OPTIM_SGD);
    j->cfg.optim.momentum = 0;
    j->cfg.lr.lr = 1.0f;
    j->cfg.chunk_min = 1; /* CW floats over every server */
    j->cfg.timeout_s = 20;
}

static void counting_worker(psjob *j, weft_ps *ps, int w)
{
    counting *sh = j->shared;
    float p[CW], g[CW] = { 0 }, zero[CW] = { 0 };
    weft_ps_request *a, *b;
    int slow = w == 1, s = j->cfg.staleness, mode = j->cfg.consistency;
    CHECK(weft_ps_register(ps, 0, zero, CW) == 0);
    CHECK(weft_ps_barrier(ps) == 0);
    g[w] = -1.0f; /* lr 1: param[w] grows by the averaging weight per push */
    for (int c = 0; c < STEPS; c++) {
        if (slow)
            mp_sleep_ms(mode == WEFT_PS_ASP ? 0 : 30);
        if (slow && mode == WEFT_PS_ASP)
            while (atomic_load(&sh->fast_done) < CW - 1)
                mp_sleep_ms(5);
        CHECK(weft_ps_push(ps, 0, g, &a) == 0);
        atomic_store(&sh->clock[w], c + 1);
        CHECK(weft_ps_clock(ps) == 0);
        CHECK(weft_ps_pull(ps, 0, p, &b) == 0);
        CHECK(weft_ps_wait(a) == 0);
        CHECK(weft_ps_wait(b) == 0);
        int now = c + 1, bad = 0;
        for (int k = 0; k < CW; k++) {
            float n = p[k] * CW; /* pushes of worker k applied */
            if (mode == WEFT_PS_BSP)
                bad += n != (float)now;
            if (mode == WEFT_PS_SSP) {
                /* all updates of clocks <= now-s-1 from everyone, all its own */
                bad += n < (float)(now - s) || (k == w && n != (float)now);
                /* nobody is more than s clocks behind this worker */
                bad += atomic_load(&sh->clock[k]) < now - s;
                if (n < (float)now)
                    atomic_store(&sh->ran_ahead, 1);
            }
            if (mode == WEFT_PS_ASP)
                bad += k == w && n != (float)now;
        }
        CHECKF(bad == 0, "worker %d at clock %d saw %g %g %g %g", w, now, p[0] * CW, p[1] * CW,
               p[2] * CW, p[3] * CW);
    }
    if (mode == WEFT_PS_ASP && !slow) {
        /* the slow worker has not pushed yet: ASP let this one run alone */
        CHECKF(p[1] == 0.0f, "slow worker's count %g", p[1] * CW);
        atomic_fetch_add(&sh->fast_done, 1);
    }
    CHECK(weft_ps_shutdown(ps) == 0);
}

static void run_counting(const char *mode, int K)
{
    psjob j;
    memset(&j, 0, sizeof j);
    j.W = CW;
    j.K = K;
    j.alarm_s = 60;
    j.worker = counting_worker;
    j.shared = psj_shared(sizeof(counting));
    configure_counting(&j, mode);
    psj_start(&j);
    CHECKF(psj_finish(&j) == 0, "%s job with %d servers", mode, K);
    if (j.cfg.consistency == WEFT_PS_SSP)
        printf("%s: a fast worker ran ahead of a slow one: %s\n", mode,
               atomic_load(&((counting *)j.shared)->ran_ahead) ? "yes" : "no");
    munmap(j.shared, sizeof(counting));
}

/* ---- BSP training equals all-reduce data parallelism -------------------- */

#define IN 16
#define CLASSES 4
#define GB 12
#define TSTEPS 10
#define TW 3

typedef struct {
    float loss[TW][TSTEPS];
    float dp_loss[TSTEPS];
    float params[1024], dp_params[1024];
    size_t n;
} training;

/* The servers' optimiser and schedule, and the same on every DP rank:
 * SGD with momentum and weight decay at a constant rate, or AdamW with
 * warm-up and cosine decay. */
static int use_adamw;

static void optim_config(weft_optim_config *oc)
{
    weft_optim_config_default(oc, use_adamw ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
    oc->weight_decay = 0.01f;
}

static weft_lr_schedule schedule(void)
{
    weft_lr_schedule s = { WEFT_LR_CONSTANT, 0.05f, 0, 0, 0 };
    if (use_adamw)
        s = (weft_lr_schedule){ WEFT_LR_COSINE, 0.01f, 0.001f, 3, TSTEPS };
    return s;
}

static weft_model *make_model(uint64_t seed)
{
    weft_model_config cfg;
    weft_model *m = NULL;
    weft_model_config_parse("mlp:16-32-4", &cfg);
    weft_model_create(&m, &cfg, seed);
    if (m)
        weft_model_set_threads(m, 1);
    return m;
}

static void ps_trainer(psjob *j, weft_ps *ps, int w)
{
    training *sh = j->shared;
    weft_model *m = make_model(1000 + (uint64_t)w); /* differs per worker: register fixes it */
    size_t n;
    float *p = weft_model_params(m, &n), x[GB * IN];
    int32_t y[GB];
    int lo = w * GB / TW, hi = (w + 1) * GB / TW;
    weft_ps_request *a, *b;
    CHECK(weft_ps_register(ps, 0, p, n) == 0);
    CHECK(weft_ps_pull(ps, 0, p, &b) == 0 && weft_ps_wait(b) == 0);
    for (int s = 0; s < TSTEPS; s++) {
        float loss;
        for (int r = lo; r < hi; r++)
            mp_sample((long)s * GB + r, x + (r - lo) * IN, y + (r - lo), IN, CLASSES);
        weft_model_zero_grad(m);
        CHECK(weft_model_forward(m, x, y, hi - lo, 1, &loss) == 0 && weft_model_backward(m) == 0);
        sh->loss[w][s] = loss;
        CHECK(weft_ps_push(ps, 0, weft_model_grads(m, &n), &a) == 0);
        CHECK(weft_ps_clock(ps) == 0);
        CHECK(weft_ps_pull(ps, 0, p, &b) == 0);
        CHECK(weft_ps_wait(a) == 0 && weft_ps_wait(b) == 0);
    }
    if (w == 0) {
        memcpy(sh->params, p, n * sizeof(float));
        sh->n = n;
    }
    uint64_t sent, recvd;
    weft_ps_bytes(ps, &sent, &recvd);
    CHECKF(sent >= (uint64_t)TSTEPS * n * 4 && recvd >= (uint64_t)TSTEPS * n * 4,
           "bytes %llu/%llu", (unsigned long long)sent, (unsigned long long)recvd);
    CHECK(weft_ps_shutdown(ps) == 0);
    weft_model_destroy(m);
}

static training *dp_out;

static void dp_trainer(weft_comm *c, void *arg)
{
    int w = weft_comm_rank(c), lo = w * GB / TW, hi = (w + 1) * GB / TW;
    weft_model *m = make_model(1000 + (uint64_t)w);
    weft_optim_config oc;
    weft_optim *o;
    weft_dp *dp;
    size_t n;
    float x[GB * IN];
    int32_t y[GB];
    weft_model_params(m, &n);
    optim_config(&oc);
    weft_optim_create(&o, &oc, 0, n);
    CHECK(weft_dp_create(&dp, c, m, 256) == 0 && weft_dp_broadcast_params(dp) == 0);
    for (int s = 0; s < TSTEPS; s++) {
        float loss;
        for (int r = lo; r < hi; r++)
            mp_sample((long)s * GB + r, x + (r - lo) * IN, y + (r - lo), IN, CLASSES);
        weft_model_zero_grad(m);
        CHECK(weft_model_forward(m, x, y, hi - lo, 1, &loss) == 0 && weft_model_backward(m) == 0);
        CHECK(weft_dp_sync_grads(dp) == 0 && weft_dp_average(dp, &loss, 1) == 0);
        if (w == 0)
            dp_out->dp_loss[s] = loss;
        weft_lr_schedule ls = schedule();
        weft_optim_step(o, weft_model_params(m, &n), weft_model_grads(m, &n), weft_lr_at(&ls, s));
    }
    if (w == 0)
        memcpy(dp_out->dp_params, weft_model_params(m, &n), n * sizeof(float));
    weft_dp_destroy(dp);
    weft_optim_destroy(o);
    weft_model_destroy(m);
}

static void test_bsp_equals_dp(void)
{
    psjob j;
    training *sh = psj_shared(sizeof(training));
    memset(&j, 0, sizeof j);
    j.W = TW;
    j.K = 2;
    j.alarm_s = 60;
    j.worker = ps_trainer;
    j.shared = sh;
    weft_ps_config_default(&j.cfg);
    optim_config(&j.cfg.optim);
    j.cfg.lr = schedule();
    j.cfg.chunk_min = 64; /* 676 parameters in chunks on both servers */
    psj_start(&j);
    CHECK(psj_finish(&j) == 0);
    dp_out = sh;
    CHECK(mp_run(TW, 30, dp_trainer, NULL) == 0);
    double worst = 0, worstp = 0;
    for (int s = 0; s < TSTEPS; s++) {
        float ps_loss = (sh->loss[0][s] + sh->loss[1][s] + sh->loss[2][s]) / TW;
        double d = fabs(ps_loss - sh->dp_loss[s]) / fabs(sh->dp_loss[s]);
        worst = d > worst ? d : worst;
    }
    for (size_t i = 0; i < sh->n; i++) {
        double d = fabs(sh->params[i] - sh->dp_params[i]);
        worstp = d > worstp ? d : worstp;
    }
    printf("BSP vs all-reduce DP (%s): %d steps, worst loss rel diff %.2e, worst param diff %.2e "
           "(%zu params; loss %.4f -> %.4f)\n",
           use_adamw ? "AdamW, cosine lr" : "SGD momentum", TSTEPS, worst, worstp, sh->n, sh->dp_loss[0], sh->dp_loss[TSTEPS - 1]);
    CHECK(sh->n > 0);
    CHECKF(worst < 1e-5, "loss differs by %.2e", worst);
    CHECKF(worstp < 1e-5, "params differ by %.2e", worstp);
    CHECK(sh->dp_loss[TSTEPS - 1] < sh->dp_loss[0]);
    munmap(sh, sizeof(training));
}

TEST(counting_bsp_1) { run_counting("bsp", 1); }
TEST(counting_bsp_2) { run_counting("bsp", 2); }
TEST(counting_ssp2_2) { run_counting("ssp:2", 2); }
TEST(counting_ssp0_1) { run_counting("ssp:0", 1); }
TEST(counting_asp_2) { run_counting("asp", 2); }

TEST(bsp_equals_dp_sgd)
{
    use_adamw = 0;
    test_bsp_equals_dp();
}

TEST(bsp_equals_dp_adamw)
{
    use_adamw = 1;
    test_bsp_equals_dp();
}
