/* Pipelines of 2-4 ranks, every schedule, the MLP and the GPT: one step's
 * loss and every gradient equal the whole model's over the same
 * micro-batches (bit for bit but for the tied embedding, whose halves add
 * in another order), a second step on the same slots gives the same, the
 * gradient hook hears every tensor once, the 1F1B stash stays at
 * min(p - r, m), a schedule mismatch between ranks is WEFT_EMISMATCH at
 * the first step, and a dead stage fails the others' step instead of
 * hanging. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>

TEST_TIMEOUT(600);

static const char *const MLP8 = "mlp:12-16-16-16-16-16-16-16-5:gelu"; /* 8 blocks */
static const char *const GPT8 = "gpt:vocab=13,ctx=8,layers=6,heads=2,dim=8";  /* 8 blocks */

typedef struct {
    const char *model, *schedule;
    int m, v, batch;
    int mismatch;   /* rank 1 runs another micro-batch count */
    int die;        /* the last rank exits before its step */
} pipe_case;

typedef struct {
    int count[256];
} heard;

static void on_ready(void *arg, int first, int count)
{
    heard *h = arg;
    for (int i = first; i < first + count && i < 256; i++)
        h->count[i]++;
}

/* Chunk c of k = p*v over nb blocks: as even as possible, the extra
 * blocks to the first chunks. */
static weft_block_range chunk_of(int nb, int k, int c)
{
    int base = nb / k, extra = nb % k;
    int first = c * base + (c < extra ? c : extra);
    return (weft_block_range){ first, base + (c < extra) };
}

static void make_batch(const weft_model_config *cfg, int B, float **x, int32_t **tok, int32_t **y)
{
    weft_rng r;
    weft_rng_seed(&r, 99);
    int gpt = cfg->type == WEFT_MODEL_GPT, T = gpt ? cfg->ctx : 1;
    *x = NULL;
    *tok = NULL;
    *y = malloc(sizeof(int32_t) * (size_t)B * T);
    if (gpt) {
        *tok = malloc(sizeof(int32_t) * (size_t)B * T);
        for (int i = 0; i < B * T; i++) {
            (*tok)[i] = (int32_t)weft_rng_below(&r, (uint64_t)cfg->vocab);
            (*y)[i] = (int32_t)weft_rng_below(&r, (uint64_t)cfg->vocab);
        }
    } else {
        *x = malloc(sizeof(float) * (size_t)B * cfg->widths[0]);
        for (int i = 0; i < B * cfg->widths[0]; i++)
            (*x)[i] = 2.0f * weft_rng_uniform(&r) - 1.0f;
        for (int i = 0; i < B; i++)
            (*y)[i] = (int32_t)weft_rng_below(&r, (uint64_t)cfg->widths[cfg->n_widths - 1]);
    }
}

/* The whole model over the same micro-batches, weighted as the pipeline
 * weighs them. */
static float reference(weft_model *w, const void *in, const int32_t *y, int B, int T, int m,
                       size_t in_width, size_t esize)
{
    double loss = 0;
    weft_model_zero_grad(w);
    for (int k = 0; k < m; k++) {
        int lo = k * B / m, n = (k + 1) * B / m - lo;
        float l = 0;
        weft_model_chunk_forward(w, 0, 0, (const char *)in + (size_t)lo * in_width * esize,
                                 y + (size_t)lo * T, n, T, &l);
        weft_model_chunk_backward(w, 0, 0, NULL, (float)n / (float)B, WEFT_BACKWARD_ALL, 1);
        loss += (double)l * n / B;
    }
    return (float)loss;
}

static void run_case(weft_comm *c, void *arg)
{
    const pipe_case *pc = arg;
    int r = weft_comm_rank(c), p = weft_comm_size(c), v = pc->v, k = p * v;
    weft_model_config cfg;
    CHECK(weft_model_config_parse(pc->model, &cfg) == 0);
    int nb = weft_model_block_count(&cfg), gpt = cfg.type == WEFT_MODEL_GPT;
    weft_block_range ch[WEFT_STAGE_MAX_CHUNKS];
    for (int j = 0; j < v; j++)
        ch[j] = chunk_of(nb, k, r + j * p);
    int split = strcmp(pc->schedule, "zb") == 0;
    weft_model *st = NULL, *whole = NULL;
    CHECK(weft_model_create_stage(&st, &cfg, 5, ch, v, split ? WEFT_STAGE_SPLIT_BACKWARD : 0) == 0);
    CHECK(weft_model_create(&whole, &cfg, 5) == 0);
    if (!st || !whole)
        return;
    heard h;
    memset(&h, 0, sizeof h);
    weft_model_set_grad_hook(st, on_ready, &h);
    int m = pc->mismatch && r == 1 ? pc->m + 1 : pc->m;
    weft_pipe *pp = NULL;
    int rc = weft_pipe_create(&pp, c, st, pc->schedule, m);
    CHECKF(rc == 0, "rank %d: create %s m=%d: %s", r, pc->schedule, m, weft_strerror(rc));
    if (!pp)
        return;
    float *x;
    int32_t *tok, *y;
    int B = pc->batch, T = gpt ? cfg.ctx : 1;
    make_batch(&cfg, B, &x, &tok, &y);
    const void *in = gpt ? (const void *)tok : (const void *)x;
    size_t in_width = gpt ? (size_t)T : (size_t)cfg.widths[0];
    size_t esize = gpt ? sizeof(int32_t) : sizeof(float);
    for (int step = 0; step < 2; step++) {
        weft_pipe_stats s;
        if (pc->die && r == p - 1 && step == 1)
            _exit(0); /* gone without a word, mid-job */
        weft_model_zero_grad(st);
        rc = weft_pipe_step(pp, in, y, B, T, &s);
        if (pc->mismatch || (pc->die && step == 1)) {
            CHECKF(rc == (pc->mismatch ? WEFT_EMISMATCH : rc) && rc != 0,
                   "rank %d: step gave %s", r, weft_strerror(rc));
            if (pc->mismatch)
                CHECKF(strstr(weft_pipe_error(pp), "disagree") != NULL, "rank %d: '%s'", r,
                       weft_pipe_error(pp));
            break;
        }
        CHECKF(rc == 0, "rank %d: step: %s: %s", r, weft_strerror(rc), weft_pipe_error(pp));
        if (rc)
            break;
        if (pc->die)
            continue;
        float lw = reference(whole, in, y, B, T, m, in_width, esize);
        if (r == p - 1)
            CHECKF(s.loss == lw, "rank %d: loss %.9g, whole model %.9g", r, (double)s.loss,
                   (double)lw);
        if (strcmp(pc->schedule, "1f1b") == 0)
            CHECKF(s.peak_stash == (p - r < m ? p - r : m), "rank %d: 1f1b stash %d", r,
                   s.peak_stash);
        if (strcmp(pc->schedule, "gpipe") == 0)
            CHECKF(s.peak_stash == m, "rank %d: gpipe stash %d", r, s.peak_stash);
        CHECK(s.busy_s > 0 && s.step_s >= s.busy_s);
        double worst = 0;
        for (int i = 0; i < weft_model_tensor_count(st); i++) {
            weft_tensor_info a, b;
            weft_model_tensor_info(st, i, &a);
            int j = weft_model_tensor_find(whole, a.name);
            CHECK(j >= 0 && weft_model_tensor_info(whole, j, &b) == 0 && a.numel == b.numel);
            const float *ga = weft_model_grads(st, NULL) + a.offset;
            const float *gb = weft_model_grads(whole, NULL) + b.offset;
            double num = 0, den = 0;
            for (size_t e = 0; e < a.numel; e++) {
                num += (ga[e] - gb[e]) * (double)(ga[e] - gb[e]);
                den += gb[e] * (double)gb[e];
            }
            double d = sqrt(num / (den > 0 ? den : 1));
            if (i == weft_model_tied_tensor(st))
                CHECKF(d < 1e-6, "rank %d: tied %s differs by %.3g", r, a.name, d);
            else
                worst = d > worst ? d : worst;
        }
        CHECKF(worst == 0.0, "rank %d %s %s p=%d m=%d: gradients differ by %.3g", r, pc->model,
               pc->schedule, p, m, worst);
        int once = 1;
        for (int i = 0; i < weft_model_tensor_count(st); i++)
            once &= h.count[i] == step + 1;
        CHECKF(once, "rank %d: the hook did not hear every tensor once", r);
    }
    free(x);
    free(tok);
    free(y);
    weft_pipe_destroy(pp);
    weft_model_destroy(st);
    weft_model_destroy(whole);
}

static void sweep(const char *model)
{
    static const char *const scheds[] = { "gpipe", "1f1b", "zb", "interleaved:2" };
    for (int p = 2; p <= 4; p++)
        for (int si = 0; si < 4; si++) {
            int ms[3] = { 1, p, 2 * p + 1 };
            int inter = si == 3;
            if (inter) { /* interleaved: m a multiple of p */
                ms[0] = p;
                ms[1] = 2 * p;
                ms[2] = 0;
            }
            /* under sanitizers (ten times slower) one m per (p, schedule):
             * the grid's other points run in the plain build */
            if (mp_thin()) {
                ms[0] = inter ? 2 * p : 2 * p + 1;
                ms[1] = 0;
            }
            for (int mi = 0; mi < 3 && ms[mi]; mi++) {
                pipe_case pc = { model, scheds[si], ms[mi], inter ? 2 : 1, 2 * p + 3, 0, 0 };
                if (inter && p == 4)
                    pc.v = 2; /* 8 chunks of one block */
                int bad = mp_run(p, 30, run_case, &pc);
                CHECKF(bad == 0, "%s %s p=%d m=%d: %d ranks failed", model, scheds[si], p,
                       ms[mi], bad);
            }
        }
}

TEST(mlp_every_schedule)
{
    sweep(MLP8);
}

TEST(gpt_every_schedule)
{
    sweep(GPT8);
}

TEST(schedule_mismatch)
{
    pipe_case pc = { MLP8, "1f1b", 4, 1, 8, 1, 0 };
    CHECK(mp_run(3, 10, run_case, &pc) == 0);
}

TEST(dead_stage)
{
    pipe_case pc = { GPT8, "1f1b", 4, 1, 8, 0, 1 };
    /* the dead rank exits 0; the others must see an error, not hang */
    CHECK(mp_run(3, 5, run_case, &pc) == 0);
}
