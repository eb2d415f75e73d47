/* ZeRO stages 0-3: N ranks with batch B/N train like one process with
 * batch B (same per-step losses to fp32 reduction-order tolerance) for
 * N = 1..4 and a model whose size no N > 1 divides; gradient accumulation
 * over unequal micro-steps changes nothing; memory per rank follows the
 * ZeRO formulas; a checkpoint written at N = 4 (stage 2) resumes at N = 2
 * (stage 3) with the losses of the uninterrupted run. Between steps the
 * pages a rank does not own are given back: with a 1 MB model the resident
 * bytes (mincore) stay within the formula plus a few edge pages at stage
 * 3, and cover both full buffers at stage 0. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>

#define IN 16
#define CLASSES 4
#define GLOBAL_BATCH 12
#define STEPS 20
#define SPLIT 10

static char ckpt_path[256];

typedef struct {
    int stage, accum, first, last; /* steps [first, last) */
    int save_at;                   /* write ckpt_path after this many steps; 0 none */
    int resume;                    /* start from ckpt_path */
    weft_optim_kind kind;
} plan;

/* losses[s] for steps s in [first, last): the job's mean loss. */
static int train(weft_comm *c, const plan *pl, float *losses)
{
    int r = c ? weft_comm_rank(c) : 0, p = c ? weft_comm_size(c) : 1, rc;
    int lo = r * GLOBAL_BATCH / p, hi = (r + 1) * GLOBAL_BATCH / p, rows = hi - lo;
    weft_model_config cfg;
    weft_model *m;
    weft_optim_config oc;
    weft_zero *z;
    weft_ckpt *ck = NULL;
    float x[GLOBAL_BATCH * IN];
    int32_t y[GLOBAL_BATCH];
    /* 655 parameters: 2, 3 and 4 leave a tail */
    if ((rc = weft_model_config_parse("mlp:16-31-4", &cfg)) ||
        (rc = weft_model_create(&m, &cfg, 1000 + (uint64_t)r)))
        return rc;
    weft_model_set_threads(m, 1);
    weft_optim_config_default(&oc, pl->kind);
    if ((rc = weft_zero_create(&z, c, m, &oc, pl->stage, 256)))
        return rc;
    if ((rc = weft_zero_broadcast_params(z)))
        return rc;
    if (pl->resume) {
        if ((rc = weft_ckpt_load(&ck, ckpt_path)) || (rc = weft_ckpt_get_params(ck, m)) ||
            (rc = weft_zero_load_optim(z, ck)))
            return rc;
        weft_ckpt_free(ck);
    }
    for (int s = pl->first; s < pl->last; s++) {
        float loss = 0;
        for (int j = 0; j < rows; j++)
            mp_sample((long)s * GLOBAL_BATCH + lo + j, x + j * IN, y + j, IN, CLASSES);
        /* micro-steps of unequal size when accum does not divide rows */
        for (int k = 0; k < pl->accum; k++) {
            int a = k * rows / pl->accum, b = (k + 1) * rows / pl->accum;
            float l;
            if ((rc = weft_zero_micro(z, b - a, GLOBAL_BATCH, k == pl->accum - 1)) ||
                (rc = weft_model_forward(m, x + a * IN, y + a, b - a, 1, &l)) ||
                (rc = weft_model_backward(m)))
                return rc;
            /* held micro-steps launch nothing; the last launches every
             * bucket from inside backward */
            int want = k < pl->accum - 1 || (pl->stage < 2 && !c) ? 0 : weft_zero_bucket_count(z);
            CHECKF(weft_zero_launched(z) == want, "stage %d micro %d: %d launched, want %d",
                   pl->stage, k, weft_zero_launched(z), want);
            loss += l * (float)(b - a) / (float)GLOBAL_BATCH;
        }
        if (c && (rc = weft_allreduce(c, &loss, &loss, 1, WEFT_F32, WEFT_SUM)))
            return rc;
        losses[s] = loss;
        if ((rc = weft_zero_step(z, pl->kind == WEFT_OPTIM_SGD ? 0.1f : 0.01f, 0.5f, NULL)))
            return rc;
        if (pl->save_at == s + 1) {
            if ((rc = weft_zero_gather_params(z)))
                return rc;
            if (r == 0 && ((rc = weft_ckpt_new(&ck)) || (rc = weft_ckpt_put_model(ck, m))))
                return rc;
            if ((rc = weft_zero_put_optim(z, ck)))
                return rc;
            if (r == 0) {
                rc = weft_ckpt_save(ck, ckpt_path);
                weft_ckpt_free(ck);
                if (rc)
                    return rc;
            }
            if (c && (rc = weft_barrier(c)))
                return rc;
        }
    }
    /* memory per rank against the formula: the owned shard differs from
     * n / N by less than N elements */
    weft_zero_mem mem;
    size_t n;
    weft_model_params(m, &n);
    weft_zero_memory(z, &mem);
    double owned = (double)(mem.param_bytes + mem.grad_bytes + mem.optim_bytes);
    int K = pl->kind == WEFT_OPTIM_ADAMW ? 8 : 4;
    CHECKF(mem.state_bytes_per_param == K, "K %d", mem.state_bytes_per_param);
    CHECKF(fabs(owned - mem.formula_bytes) <=
               (double)mem.buckets * (p - 1) * (8 + K) + 1e-6 * mem.formula_bytes,
           "stage %d rank %d of %d: owns %.0f bytes, formula %.0f", pl->stage, r, p, owned,
           mem.formula_bytes);
    if (pl->stage >= 1 && p > 1)
        CHECK(mem.optim_bytes < (size_t)K * n);
    weft_zero_destroy(z);
    weft_model_destroy(m);
    return 0;
}

/* One step of a 263,290-parameter MLP in 4 buckets at `stage`, then the
 * resident bytes against the formula. */
static void resident_body(weft_comm *c, void *arg)
{
    int stage = *(const int *)arg, p = weft_comm_size(c), r = weft_comm_rank(c);
    weft_model_config cfg;
    weft_model *m = NULL;
    weft_optim_config oc;
    weft_zero *z = NULL;
    float x[8 * 256];
    int32_t y[8];
    size_t n, pg = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 8 * 256; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f;
    for (int i = 0; i < 8; i++)
        y[i] = i % 10;
    CHECK(weft_model_config_parse("mlp:256-512-256-10", &cfg) == 0 &&
          weft_model_create(&m, &cfg, 5) == 0);
    if (!m)
        return;
    weft_model_params(m, &n);
    weft_model_set_threads(m, 1);
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    CHECK(weft_zero_create(&z, c, m, &oc, stage, n * sizeof(float) / 4) == 0);
    if (!z) {
        weft_model_destroy(m);
        return;
    }
    int lo = r * 8 / p, hi = (r + 1) * 8 / p;
    CHECK(weft_zero_micro(z, hi - lo, 8, 1) == 0);
    CHECK(weft_model_forward(m, x + lo * 256, y + lo, hi - lo, 1, NULL) == 0);
    CHECK(weft_model_backward(m) == 0);
    CHECK(weft_zero_step(z, 0.01f, 0, NULL) == 0);
    weft_zero_mem mem;
    CHECK(weft_zero_memory(z, &mem) == 0);
    /* partly owned pages: two per bucket edge of the parameters, two at
     * the ends of each buffer */
    double slack = (double)((2 * mem.buckets + 4) * pg);
    if (stage == 3)
        CHECKF(mem.resident_bytes <= mem.formula_bytes + slack &&
                   mem.resident_bytes + slack >= mem.param_bytes + mem.optim_bytes,
               "stage 3 rank %d of %d: %zu bytes resident, formula %.0f, owned params + "
               "optimiser %zu", r, p, mem.resident_bytes, mem.formula_bytes,
               mem.param_bytes + mem.optim_bytes);
    else
        CHECKF(mem.resident_bytes + 2 * pg >= 8 * n + mem.optim_bytes,
               "stage %d: %zu bytes resident, %zu expected", stage, mem.resident_bytes,
               8 * n + mem.optim_bytes);
    /* and the next step gathers what was given back */
    CHECK(weft_zero_gather_params(z) == 0);
    float *pr = weft_model_params(m, NULL), mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabsf(pr[i]) > mx ? fabsf(pr[i]) : mx;
    CHECK(mx > 0);
    int zeros = 0;
    for (size_t i = 0; i < 256 * 512; i++)
        zeros += pr[i] == 0;
    CHECKF(zeros < 100, "%d zero weights after the gather", zeros);
    weft_zero_destroy(z);
    weft_model_destroy(m);
}

static float ref_sgd[STEPS], ref_adamw[STEPS];

typedef struct {
    plan pl;
    const float *ref;
    const char *what;
} job;

static void body(weft_comm *c, void *arg)
{
    const job *jb = arg;
    float losses[STEPS];
    int rc = train(c, &jb->pl, losses);
    CHECKF(rc == 0, "%s: %s %s", jb->what, weft_strerror(rc), weft_comm_error(c));
    if (rc)
        return;
    int bad = 0;
    for (int s = jb->pl.first; s < jb->pl.last; s++)
        if (!(fabsf(losses[s] - jb->ref[s]) <= 2e-5f * fabsf(jb->ref[s]) + 1e-6f) && !bad++)
            CHECKF(0, "%s at %d ranks, step %d: loss %.9g, one process %.9g", jb->what,
                   weft_comm_size(c), s, losses[s], jb->ref[s]);
    CHECK(!bad);
}

/* One process's losses under SGD and AdamW, trained by the first case that
 * needs them. */
static void need_references(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    plan one = { 0, 1, 0, STEPS, 0, 0, WEFT_OPTIM_SGD };
    CHECK(train(NULL, &one, ref_sgd) == 0);
    one.kind = WEFT_OPTIM_ADAMW;
    CHECK(train(NULL, &one, ref_adamw) == 0);
    CHECK(ref_sgd[STEPS - 1] < ref_sgd[0] && ref_adamw[STEPS - 1] < ref_adamw[0]);
}

TEST(one_process)
{
    need_references();
    /* one process at stage 3 with accumulation: the same path, same losses */
    float l1[STEPS];
    plan acc1 = { 3, 5, 0, STEPS, 0, 0, WEFT_OPTIM_ADAMW };
    CHECK(train(NULL, &acc1, l1) == 0);
    CHECKF(fabsf(l1[STEPS - 1] - ref_adamw[STEPS - 1]) < 1e-5f, "%g vs %g", l1[STEPS - 1],
           ref_adamw[STEPS - 1]);
}

/* AdamW at stages 0 and 2, SGD with momentum at 1 and 3; two unequal
 * micro-steps at 4 ranks */
static void stage(int st)
{
    need_references();
    for (int p = 1; p <= 4; p++) {
        job jb = { { st, p == 4 ? 2 : 1, 0, STEPS, 0, 0,
                     st % 2 ? WEFT_OPTIM_SGD : WEFT_OPTIM_ADAMW },
                   st % 2 ? ref_sgd : ref_adamw, "zero" };
        CHECKF(mp_run(p, 60, body, &jb) == 0, "stage %d at %d ranks", st, p);
    }
}

TEST(stage0) { stage(0); }
TEST(stage1) { stage(1); }
TEST(stage2) { stage(2); }
TEST(stage3) { stage(3); }

/* checkpoint at N = 4, stage 2, step 10; resume at N = 2, stage 3 */
TEST(checkpoint_resume)
{
    need_references();
    snprintf(ckpt_path, sizeof ckpt_path, "/tmp/weft-test-zero-%d.ckpt", (int)getpid());
    job save = { { 2, 1, 0, SPLIT, SPLIT, 0, WEFT_OPTIM_ADAMW }, ref_adamw, "save" };
    CHECK(mp_run(4, 60, body, &save) == 0);
    job resume = { { 3, 1, SPLIT, STEPS, 0, 1, WEFT_OPTIM_ADAMW }, ref_adamw, "resume" };
    CHECK(mp_run(2, 60, body, &resume) == 0);
    /* and at N = 3, stage 1 (another shard layout reads the same file) */
    job resume3 = { { 1, 1, SPLIT, STEPS, 0, 1, WEFT_OPTIM_ADAMW }, ref_adamw, "resume3" };
    CHECK(mp_run(3, 60, body, &resume3) == 0);
    remove(ckpt_path);
}

TEST(resident)
{
    int st0 = 0, st3 = 3;
    CHECK(mp_run(2, 60, resident_body, &st0) == 0);
    CHECK(mp_run(3, 60, resident_body, &st3) == 0);
}
