/* ZeRO-3 layer by layer and activation recomputation, on a GPT:
 *   - N ranks at stage 3 (blocks gathered just before use, the next one
 *     prefetched, released right after) train like one process: 12 steps
 *     of losses equal to fp32 reduction-order tolerance, with recomputation
 *     on or off, with gradient accumulation, at N = 2..4;
 *   - the peak resident bytes of the parameter and gradient buffers during
 *     a step (measured at every block boundary) stay within the shards plus
 *     the documented few-blocks bound, far below the whole model that a
 *     gather of everything holds;
 *   - a forward without targets between steps (eval) and a whole gather
 *     (a checkpoint) leave the order of needs and the shards intact;
 *   - recomputation gives bit-identical losses and gradients with fewer
 *     activation bytes; it is refused with a split backward. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GB 8    /* sequences in the global batch */
#define SEQ 16
#define STEPS 12

static const char *small = "gpt:vocab=61,ctx=16,layers=4,heads=2,dim=32";

static void batch_of(int step, int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < GB * SEQ; i++) {
        uint32_t h = (uint32_t)(step * 7919 + i * 104729) * 2654435761u;
        tok[i] = (int32_t)((h >> 8) % 61);
    }
    for (int i = 0; i < GB * SEQ; i++)
        tgt[i] = (tok[i] * 5 + 3) % 61; /* learnable: a fixed map of the current token */
}

typedef struct {
    int stage, recompute, accum, eval_at;
} plan;

static int train(weft_comm *c, const plan *pl, const char *model, float *losses,
                 weft_zero_mem *mem)
{
    int r = c ? weft_comm_rank(c) : 0, p = c ? weft_comm_size(c) : 1, rc;
    int lo = r * GB / p, hi = (r + 1) * GB / p, rows = hi - lo;
    weft_model_config cfg;
    weft_model *m;
    weft_optim_config oc;
    weft_zero *z;
    int32_t tok[GB * SEQ], tgt[GB * SEQ];
    if ((rc = weft_model_config_parse(model, &cfg)) || (rc = weft_model_create(&m, &cfg, 77)))
        return rc;
    weft_model_set_threads(m, 1);
    if ((rc = weft_model_set_recompute(m, pl->recompute)))
        return rc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    if ((rc = weft_zero_create(&z, c, m, &oc, pl->stage, 0)))
        return rc;
    for (int s = 0; s < STEPS && rc == 0; s++) {
        float loss = 0;
        batch_of(s, tok, tgt);
        for (int k = 0; k < pl->accum && rc == 0; k++) {
            int a = lo + k * rows / pl->accum, b = lo + (k + 1) * rows / pl->accum;
            float l = 0;
            if ((rc = weft_zero_micro(z, b - a, GB, k == pl->accum - 1)) ||
                (rc = weft_model_forward(m, tok + a * SEQ, tgt + a * SEQ, b - a, SEQ, &l)) ||
                (rc = weft_model_backward(m)))
                break;
            loss += l * (float)(b - a) / (float)GB;
        }
        if (rc == 0 && c)
            rc = weft_allreduce(c, &loss, &loss, 1, WEFT_F32, WEFT_SUM);
        if (rc == 0)
            rc = weft_zero_step(z, 0.01f, 1.0f, NULL);
        losses[s] = loss;
        if (rc == 0 && mem && s == 1)
            rc = weft_zero_memory(z, mem);
        /* logits only, as an evaluation between steps does; then a whole
         * gather, as a checkpoint does */
        if (rc == 0 && s == pl->eval_at)
            rc = weft_model_forward(m, tok, NULL, 2, SEQ, NULL);
        if (rc == 0 && s == pl->eval_at + 1)
            rc = weft_zero_gather_params(z);
    }
    weft_zero_destroy(z);
    weft_model_destroy(m);
    return rc;
}

static float ref[STEPS];

static int close_to(const float *a, const float *b, char *why, size_t len)
{
    for (int s = 0; s < STEPS; s++)
        if (!(fabsf(a[s] - b[s]) <= 1e-5f * fabsf(b[s]) + 1e-6f)) {
            snprintf(why, len, "step %d: loss %.9g, one process %.9g", s, a[s], b[s]);
            return 0;
        }
    return 1;
}

static void need_reference(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    plan one = { 0, 0, 1, -5 };
    CHECK(train(NULL, &one, small, ref, NULL) == 0);
    CHECKF(ref[STEPS - 1] < ref[0], "loss %g -> %g", ref[0], ref[STEPS - 1]);
}

static void equal_body(weft_comm *c, void *arg)
{
    const plan *pl = arg;
    float l[STEPS];
    char why[160];
    int rc = train(c, pl, small, l, NULL);
    CHECKF(rc == 0, "%s: %s", weft_strerror(rc), weft_comm_error(c));
    CHECKF(rc || close_to(l, ref, why, sizeof why), "stage %d recompute %d accum %d at %d ranks: %s",
           pl->stage, pl->recompute, pl->accum, weft_comm_size(c), rc ? "" : why);
}

TEST(losses_equal_one_process)
{
    need_reference();
    const char *ts = getenv("TEST_SCALE");
    int scale = ts ? atoi(ts) : 1;
    for (int p = 2; p <= 4; p++)
        for (int rec = 0; rec <= 1; rec++) {
            if (scale > 1 && p == 3)
                continue; /* sanitizers: 2 and 4 ranks */
            plan pl = { 3, rec, p == 3 ? 2 : 1, 4 };
            CHECKF(mp_run(p, 60, equal_body, &pl) == 0, "%d ranks, recompute %d", p, rec);
        }
}

/* 12 transformer blocks: the whole model is many blocks' worth */
static const char *deep = "gpt:vocab=61,ctx=16,layers=12,heads=2,dim=64";

static void peak_body(weft_comm *c, void *arg)
{
    (void)arg;
    float l[STEPS];
    weft_zero_mem mem;
    plan pl = { 3, 1, 1, -5 };
    int rc = train(c, &pl, deep, l, &mem);
    CHECKF(rc == 0, "%s: %s", weft_strerror(rc), weft_comm_error(c));
    if (rc)
        return;
    size_t shards = mem.param_bytes + mem.grad_bytes, whole = 8 * mem.n;
    CHECK(mem.layerwise == 1 && mem.buckets == 12 + 2);
    CHECKF(mem.peak_bytes > mem.optim_bytes + shards, "peak %zu, shards %zu", mem.peak_bytes,
           shards);
    CHECKF(mem.peak_bytes <= mem.optim_bytes + shards + mem.work_bytes,
           "rank %d: peak %zu B > shards %zu + optimiser %zu + bound %zu", weft_comm_rank(c),
           mem.peak_bytes, shards, mem.optim_bytes, mem.work_bytes);
    /* gathering everything would hold both whole buffers */
    CHECKF(mem.peak_bytes - mem.optim_bytes < whole / 2, "peak %zu B of buffers, whole %zu B",
           mem.peak_bytes - mem.optim_bytes, whole);
}

TEST(peak_memory_a_few_blocks)
{
    CHECK(mp_run(4, 60, peak_body, NULL) == 0);
}

/* One process: recomputation changes no bit of the losses or gradients. */
TEST(recompute_bit_identical)
{
    weft_model_config cfg;
    weft_model *m[2] = { NULL, NULL };
    int32_t tok[GB * SEQ], tgt[GB * SEQ];
    float loss[2];
    size_t act[2], n = 0;
    batch_of(3, tok, tgt);
    CHECK(weft_model_config_parse(small, &cfg) == 0);
    for (int k = 0; k < 2; k++) {
        CHECK(weft_model_create(&m[k], &cfg, 5) == 0);
        if (!m[k])
            return;
        weft_model_set_threads(m[k], 1);
        CHECK(weft_model_set_recompute(m[k], k) == 0);
        CHECK(weft_model_zero_grad(m[k]) == 0);
        CHECK(weft_model_forward(m[k], tok, tgt, GB, SEQ, &loss[k]) == 0);
        act[k] = weft_model_activation_bytes(m[k]);
        CHECK(weft_model_backward(m[k]) == 0);
    }
    const float *g0 = weft_model_grads(m[0], &n), *g1 = weft_model_grads(m[1], NULL);
    CHECKF(memcmp(&loss[0], &loss[1], sizeof(float)) == 0, "%.9g vs %.9g", loss[0], loss[1]);
    CHECK(memcmp(g0, g1, n * sizeof(float)) == 0);
    CHECKF(act[1] < act[0] * 2 / 3, "activations %zu B with recomputation, %zu without", act[1],
           act[0]);
    /* the weight half of a split backward needs what recomputation reuses */
    weft_model *s = NULL;
    weft_block_range all = { 0, weft_model_block_count(&cfg) };
    CHECK(weft_model_create_stage(&s, &cfg, 5, &all, 1, WEFT_STAGE_SPLIT_BACKWARD) == 0);
    CHECK(weft_model_set_recompute(s, 1) == WEFT_EINVAL);
    weft_model_destroy(s);
    for (int k = 0; k < 2; k++)
        weft_model_destroy(m[k]);
}
