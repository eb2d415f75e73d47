/* The evaluation's forward passes in the training layout, so that no rank
 * needs the whole model for the validation loss: data-parallel ranks (or
 * replicas) take turns at the batches and the sums are all-reduced; a
 * pipeline's stages pass each batch's activations along as the training
 * forward does (forward only); tensor ranks compute their parts together;
 * ZeRO-3 gathers block by block inside forward as training does (a
 * pipeline's stage gathers its own part, as its step does). Only the
 * exact-match answers and the sample still take the whole model, gathered
 * on the lead where it fits. Under --ep the experts' dispatch joins the
 * ranks of an expert group in every forward: they evaluate in step. */
#include "run/run_eval.h"
#include "run/run_memory.h"

#include "run/run_cp.h"
#include "run/run_ep.h"
#include "run/run_pipeline.h"
#include "train/flops.h"
#include "train/zero_eval.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int piped;
    pipeline_view v;
    float *act; /* a received activation */
    size_t cap;
    weft_zero *z; /* ZeRO-3 layer by layer: its record of needs kept */
    train_zero_mark mark;
} layout_state;

static int whole_forward(eval_fwd *f, const void *in, const int32_t *y, int n, int T, int image,
                         double *loss, long *correct)
{
    float l = 0;
    int rc = weft_model_forward(f->m, in, y, n, T, &l);
    if (rc != 0)
        return rc;
    *loss = (double)l * n;
    *correct = image ? weft_model_count_correct(f->m, y) : 0;
    return 0;
}

static int whole_next(eval_fwd *f, int32_t *toks, int pos, float temperature, int top_k,
                      weft_rng *rng)
{
    return weft_model_generate(f->m, toks, pos, pos + 1, temperature, top_k, rng);
}

static int no_reduce(eval_fwd *f, double *v, int n)
{
    (void)f;
    (void)v;
    (void)n;
    return 0;
}

static int own_gather(eval_fwd *f, weft_model **whole, int *fits)
{
    *whole = f->t->lead ? f->m : NULL;
    *fits = 1;
    return 0;
}

static void no_release(eval_fwd *f, weft_model *whole)
{
    (void)f;
    (void)whole;
}

void eval_local(weft_run *t, weft_model *m, eval_fwd *f)
{
    memset(f, 0, sizeof *f);
    f->forward = whole_forward;
    f->next_token = whole_next;
    f->gen = 1;
    f->say = 1;
    f->reduce = no_reduce;
    f->gather = own_gather;
    f->release = no_release;
    f->t = t;
    f->m = m;
    f->batch = 32;
    f->shares = 1;
}

/* A tag per global chunk above every schedule's (sum_tied has the top);
 * the receiver's "ready" for a chunk's input below all of them. */
static int act_tag(int chunk) { return WEFT_TAG_MAX - 1 - chunk; }
static int ready_tag(int chunk) { return WEFT_TAG_MAX - (1 << 20) - chunk; }

/* This stage's chunks in order, each fed from the previous chunk's rank
 * and feeding the next one's; the last chunk has the loss. */
static int pipe_forward(eval_fwd *f, const void *in, const int32_t *y, int n, int T, int image,
                        double *loss, long *correct)
{
    layout_state *s = f->state;
    const pipeline_view *v = &s->v;
    int K = v->pp * v->v, rc = 0;
    weft_request *sends[WEFT_STAGE_MAX_CHUNKS] = { 0 };
    for (int j = 0; rc == 0 && j < v->v; j++) {
        int c = v->stage + j * v->pp, last = c == K - 1;
        size_t in_n, out_n;
        weft_model_chunk_io(v->model, j, n, T, &in_n, &out_n);
        const void *x = in;
        if (c > 0) {
            if (in_n > s->cap) {
                float *a = realloc(s->act, in_n * sizeof *a);
                if (!a) {
                    rc = WEFT_ENOMEM;
                    break;
                }
                s->act = a;
                s->cap = in_n;
            }
            /* a stage sends a batch only once the next one is ready for
             * it: forward only, nothing else holds an earlier stage back,
             * and the batches it ran ahead with would pile up unreceived
             * in this rank's memory, past --mem-limit */
            int32_t ready = c;
            weft_request *r = NULL;
            rc = weft_send_tag(v->pp_comm, &ready, 1, WEFT_I32, (c - 1) % v->pp, ready_tag(c));
            if (rc == 0)
                rc = weft_irecv_tag(v->pp_comm, s->act, in_n, WEFT_F32, (c - 1) % v->pp,
                                    act_tag(c), &r);
            if (rc == 0)
                rc = weft_wait(r);
            x = s->act;
        }
        float l = 0;
        if (rc == 0)
            rc = weft_model_chunk_forward(v->model, j, 0, x, last ? y : NULL, n, T, &l);
        if (rc == 0 && last) {
            *loss = (double)l * n;
            *correct = image ? weft_model_count_correct(v->model, y) : 0;
        } else if (rc == 0) {
            int32_t ready = 0;
            rc = weft_recv_tag(v->pp_comm, &ready, 1, WEFT_I32, (c + 1) % v->pp,
                               ready_tag(c + 1));
            if (rc == 0)
                rc = weft_isend_tag(v->pp_comm, weft_model_chunk_output(v->model, j, 0), out_n,
                                    WEFT_F32, (c + 1) % v->pp, act_tag(c + 1), &sends[j]);
        }
    }
    for (int j = 0; j < v->v; j++)
        if (sends[j]) {
            int r = weft_wait(sends[j]);
            rc = rc ? rc : r;
        }
    return rc;
}

/* The last stage: the token the last row of logits picks, the tensor
 * ranks' vocabulary slices put together first (>= 0, or WEFT_E*). */
static int pick_token(const pipeline_view *v, int T, float temperature, int top_k, weft_rng *rng)
{
    int rows = 0, cols = 0;
    const float *z = weft_model_logits(v->model, &rows, &cols);
    if (!z || rows != T)
        return WEFT_EINVAL;
    z += (size_t)(T - 1) * (size_t)cols;
    float *row = malloc((size_t)cols * (size_t)v->tp * sizeof *row);
    if (!row)
        return WEFT_ENOMEM;
    int rc = 0;
    if (v->tp_comm)
        rc = weft_allgather(v->tp_comm, z, row, (size_t)cols, WEFT_F32);
    else
        memcpy(row, z, (size_t)cols * sizeof *row);
    /* the vocabulary padding of the last slice is no token */
    if (rc == 0)
        rc = weft_sample_logits(row, weft_model_config_of(v->model)->vocab, temperature, top_k,
                                rng);
    free(row);
    return rc;
}

/* One token through the pipeline: the last stage picks it, and the
 * pipeline hears it (or the last stage's failure) from there. */
static int pipe_next(eval_fwd *f, int32_t *toks, int pos, float temperature, int top_k,
                     weft_rng *rng)
{
    layout_state *s = f->state;
    const pipeline_view *v = &s->v;
    int ctx = weft_model_config_of(v->model)->ctx, start = pos > ctx ? pos - ctx : 0;
    int T = pos - start;
    double l;
    long c;
    int rc = pipe_forward(f, toks + start, NULL, 1, T, 0, &l, &c);
    int32_t tok = rc;
    if (rc == 0 && v->stage == v->pp - 1)
        tok = pick_token(v, T, temperature, top_k, rng);
    if (v->pp > 1 && (rc = weft_broadcast(v->pp_comm, &tok, 1, WEFT_I32, v->pp - 1)) != 0)
        return rc;
    if (tok < 0)
        return tok;
    toks[pos] = tok;
    return 0;
}

static int sum(weft_comm *c, double *v, int n)
{
    return c && weft_comm_size(c) > 1 ? weft_allreduce(c, v, v, (size_t)n, WEFT_F64, WEFT_SUM)
                                      : 0;
}

/* The last stage holds the sums: the pipeline spreads them, the replicas
 * add theirs. */
static int layout_reduce(eval_fwd *f, double *v, int n)
{
    layout_state *s = f->state;
    int rc = s->piped ? sum(s->v.pp_comm, v, n) : 0;
    if (rc == 0)
        rc = sum(s->piped ? s->v.dp_comm : f->t->job, v, n);
    return rc ? run_fail(f->t, rc, "evaluation sums: %s", weft_strerror(rc)) : 0;
}

/* Whether the whole model, gathered for generating, fits --mem-limit on
 * every rank: its parameters and gradients (the lead's assembled copy, or
 * ZeRO-3's whole buffer) beside what the rank holds now. */
static int whole_fits(eval_fwd *f, int *fits)
{
    weft_run *t = f->t;
    *fits = 1;
    if (t->o->mem_limit <= 0)
        return 0;
    weft_zero_mem zm;
    memset(&zm, 0, sizeof zm);
    weft_zero_memory(t->sync.z, &zm);
    double psi = train_model_param_count(weft_model_config_of(f->m));
    double need = 8.0 * psi + (double)zm.resident_bytes +
                  (double)weft_model_activation_bytes(f->m);
    int rc = t->job ? weft_allreduce(t->job, &need, &need, 1, WEFT_F64, WEFT_MAX) : 0;
    if (rc != 0)
        return run_fail(t, rc, "evaluation: %s", weft_strerror(rc));
    *fits = need <= t->o->mem_limit;
    return 0;
}

static int layout_gather(eval_fwd *f, weft_model **whole, int *fits)
{
    weft_run *t = f->t;
    layout_state *s = f->state;
    *whole = NULL;
    int rc = whole_fits(f, fits);
    if (rc != 0 || !*fits)
        return rc;
    if ((rc = weft_zero_gather_params(t->sync.z)) != 0)
        return run_fail(t, rc, "gathering parameters: %s", weft_strerror(rc));
    if (s->piped)
        return pipeline_gather(t->pl, t->m, t->sync.z, NULL, whole);
    *whole = t->lead ? t->m : NULL;
    return 0;
}

static void layout_release(eval_fwd *f, weft_model *whole)
{
    layout_state *s = f->state;
    if (s->piped)
        weft_model_destroy(whole);
}

/* Rows a forward: the training's micro-batch, so that the evaluation's
 * activations are no larger than a step's. */
static int eval_rows(const weft_run *t, int ranks)
{
    int b = t->o->r.batch / (ranks > 0 ? ranks : 1);
    return b < 1 ? 1 : b > 32 ? 32 : b;
}

static int layout_open(weft_run *t, int final, eval_fwd *f)
{
    eval_local(t, t->m, f);
    f->say = t->lead;
    layout_state *s = calloc(1, sizeof *s);
    if (!s)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    f->state = s;
    f->reduce = layout_reduce;
    f->gather = layout_gather;
    f->release = layout_release;
    /* the replicas hold one model when the optimiser spans the job, and
     * after the last average; otherwise the lead's replica alone counts */
    int split = final || t->sync.shared;
    int stage3 = weft_zero_stage(t->sync.z) == 3;
    if (t->pl) {
        s->piped = 1;
        pipeline_view_of(t->pl, &s->v);
        f->forward = pipe_forward;
        /* a token at a time: rows that need not split in the tensor group */
        f->next_token = t->o->sp ? NULL : pipe_next;
        /* --ep: a stage's experts are spread over the replicas' same
         * stage, whose dispatch needs every replica in step, generating
         * too (--ep takes --sync full: one model in every replica) */
        int ep = run_ep_eval(t, 1);
        f->lockstep = ep;
        f->gen = s->v.replica == 0 || ep;
        f->batch = eval_rows(t, s->v.replicas * pipeline_micro(t->pl));
        f->shares = split || ep ? s->v.replicas : 1;
        f->share = split || ep ? s->v.replica : s->v.replica == 0 ? 0 : -1;
        /* a stage's parameters are gathered once, as its step does */
        int rc = stage3 ? weft_zero_gather_params(t->sync.z) : 0;
        return rc ? run_fail(t, rc, "gathering parameters: %s", weft_strerror(rc)) : 0;
    }
    int n = t->job ? weft_comm_size(t->job) : 1, r = t->job ? weft_comm_rank(t->job) : 0;
    f->batch = eval_rows(t, n);
    if (split) {
        f->shares = n;
        f->share = r;
        /* ZeRO-3's gathers inside forward, or the experts' dispatch over
         * their group (--ep): every rank runs every round, generates too */
        int ep = run_ep_eval(t, 1);
        f->lockstep = stage3 || ep;
        f->gen = stage3 || ep || r == 0;
        if (stage3) {
            s->z = t->sync.z;
            train_zero_eval_begin(s->z, &s->mark);
        }
        return 0;
    }
    /* the lead alone: ZeRO-3's shards are gathered first, as one gather */
    f->share = r == 0 ? 0 : -1;
    f->gen = r == 0;
    int rc = stage3 ? weft_zero_gather_params(t->sync.z) : 0;
    return rc ? run_fail(t, rc, "gathering parameters: %s", weft_strerror(rc)) : 0;
}

int eval_layout_open(weft_run *t, int final, eval_fwd *f)
{
    int rc = layout_open(t, final, f);
    /* --cp: the groups take the batches, each rank its rows of them */
    return rc ? rc : run_cp_eval_open(t, f);
}

void eval_layout_close(eval_fwd *f)
{
    run_cp_eval_close(f);
    layout_state *s = f->state;
    if (s) {
        run_ep_eval(f->t, 0);
        train_zero_eval_end(s->z, &s->mark);
        free(s->act);
    }
    free(s);
    f->state = NULL;
}

/* --mem-limit: what the evaluation held at most (the state resident, a
 * block's gathered parameters at ZeRO-3's layer-by-layer peak, the
 * activations of one forward), the most of any rank, against the budget. */
int eval_layout_memory(eval_fwd *f)
{
    weft_run *t = f->t;
    if (t->o->mem_limit <= 0)
        return 0;
    weft_zero_mem zm;
    memset(&zm, 0, sizeof zm);
    weft_zero_memory(t->sync.z, &zm);
    size_t state = zm.resident_bytes > zm.peak_bytes ? zm.resident_bytes : zm.peak_bytes;
    double have = (double)state + (double)weft_model_activation_bytes(f->m);
    int rc = t->job ? weft_allreduce(t->job, &have, &have, 1, WEFT_F64, WEFT_MAX) : 0;
    if (rc != 0)
        return run_fail(t, rc, "evaluation: %s", weft_strerror(rc));
    if (have > t->o->mem_limit)
        return run_fail(t, WEFT_ENOMEM,
                        "--mem-limit %.0f B: the evaluation held %.0f B on a rank", t->o->mem_limit,
                        have);
    if (t->lead && !t->o->quiet)
        run_say(t, WEFT_RUN_OUT, "evaluation in the training layout: at most %.1f MB a rank "
                                 "(--mem-limit %.1f MB)\n", have / 1e6, t->o->mem_limit / 1e6);
    return memory_check_peak(t, "the evaluation");
}
