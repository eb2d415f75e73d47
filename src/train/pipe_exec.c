/* The pipeline executor: runs this rank's action list of a schedule over
 * the communicator's non-blocking point-to-point calls. Receives are
 * posted where the list puts them and waited for by the first compute
 * that reads them; sends are posted and left to the engine, and a slot's
 * sends are finished before the slot holds another micro-batch. */
#include "train/pipe_sched.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A micro-batch's place at one of our chunks: the model's slot and the
 * buffers its messages use. */
typedef struct {
    float *act, *grad;         /* received input activation, output gradient */
    size_t act_cap, grad_cap;
    weft_request *sends[2];    /* in flight from this slot's buffers */
} pipe_slot;

typedef struct {
    int nslot, used;
    int stash, peak;           /* micro-batches forwarded, backward not done */
    pipe_slot *slot;
    int *free_list, nfree;
    int *of_mb;                /* [m]: the slot a micro-batch holds, or -1 */
    int last_bwd;              /* index in the list of the chunk's step-final backward */
    double sec[3];             /* forward, backward (or its input part), weight part */
    long runs[3];
} pipe_chunk;

/* What an action does to its micro-batch's slot besides its work. */
enum { HOLD = 0, RELEASE = 1 };

struct weft_pipe {
    weft_comm *comm;
    weft_model *model;
    pipe_spec spec;
    pipe_sched sched;
    int rank, nchunk;          /* our chunks: global chunk rank + k*p */
    pipe_chunk *ck;
    weft_request **recv_act, **recv_grad;  /* [nchunk * m] */
    unsigned char *release;    /* per action of our list: the slot's last use */
    int split, agreed;
    char err[256];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(weft_pipe *p, int rc, const char *fmt, const char *a, long b)
{
    snprintf(p->err, sizeof p->err, fmt, a, b);
    return rc;
}

static int local_chunk(const weft_pipe *p, int chunk)
{
    return chunk / p->spec.p;
}

/* Every rank must run the same schedule over the same cut of the model. */
static int agree(weft_pipe *p)
{
    int mine[4] = { p->spec.kind, p->spec.m, p->spec.v, weft_model_block_count(weft_model_config_of(p->model)) };
    int n = p->spec.p;
    int *all = malloc(sizeof(int) * 4 * (size_t)n);
    if (!all)
        return WEFT_ENOMEM;
    int rc = weft_allgather(p->comm, mine, all, 4, WEFT_I32);
    if (rc)
        snprintf(p->err, sizeof p->err, "%s", weft_comm_error(p->comm));
    for (int r = 0; rc == 0 && r < n; r++)
        if (memcmp(all + 4 * r, mine, sizeof mine) != 0) {
            char a[64], b[64];
            pipe_spec other = { all[4 * r], n, all[4 * r + 1], all[4 * r + 2] };
            pipe_spec_name(&p->spec, a, sizeof a);
            pipe_spec_name(&other, b, sizeof b);
            snprintf(p->err, sizeof p->err,
                     "pipeline ranks disagree: rank %d runs %s with %d micro-batches over %d "
                     "blocks, rank %d runs %s with %d over %d",
                     p->rank, a, p->spec.m, mine[3], r, b, all[4 * r + 1], all[4 * r + 3]);
            rc = WEFT_EMISMATCH;
        }
    free(all);
    return rc;
}

void weft_pipe_destroy(weft_pipe *p)
{
    if (!p)
        return;
    for (int k = 0; k < p->nchunk && p->ck; k++) {
        pipe_chunk *c = &p->ck[k];
        for (int s = 0; s < c->nslot; s++) {
            for (int j = 0; j < 2; j++)
                if (c->slot[s].sends[j])
                    weft_wait(c->slot[s].sends[j]);
            free(c->slot[s].act);
            free(c->slot[s].grad);
        }
        free(c->slot);
        free(c->free_list);
        free(c->of_mb);
    }
    free(p->ck);
    free(p->recv_act);
    free(p->recv_grad);
    free(p->release);
    pipe_sched_free(&p->sched);
    free(p);
}

int weft_pipe_create(weft_pipe **out, weft_comm *c, weft_model *m, const char *schedule,
                     int micro_batches)
{
    if (!out || !c || !m || !schedule || micro_batches < 1)
        return WEFT_EINVAL;
    *out = NULL;
    weft_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    p->comm = c;
    p->model = m;
    p->rank = weft_comm_rank(c);
    int rc = pipe_spec_parse(schedule, weft_comm_size(c), micro_batches, &p->spec);
    if (rc == 0)
        rc = pipe_sched_build(&p->sched, &p->spec);
    p->nchunk = p->spec.v;
    /* our model's chunks must be the schedule's chunks of this rank */
    if (rc == 0 && weft_model_chunk_count(m) != p->nchunk)
        rc = WEFT_EINVAL;
    size_t nm = (size_t)p->nchunk * (size_t)micro_batches;
    if (rc == 0) {
        p->ck = calloc((size_t)p->nchunk, sizeof *p->ck);
        p->recv_act = calloc(nm, sizeof *p->recv_act);
        p->recv_grad = calloc(nm, sizeof *p->recv_grad);
        if (!p->ck || !p->recv_act || !p->recv_grad)
            rc = WEFT_ENOMEM;
    }
    for (int k = 0; rc == 0 && k < p->nchunk; k++) {
        pipe_chunk *ck = &p->ck[k];
        ck->of_mb = malloc(sizeof(int) * (size_t)micro_batches);
        ck->free_list = malloc(sizeof(int) * (size_t)micro_batches);
        if (!ck->of_mb || !ck->free_list)
            rc = WEFT_ENOMEM;
        for (int i = 0; rc == 0 && i < micro_batches; i++)
            ck->of_mb[i] = -1;
    }
    const pipe_list *l = rc == 0 ? &p->sched.rank[p->rank] : NULL;
    if (rc == 0 && !(p->release = calloc((size_t)l->n + 1, 1)))
        rc = WEFT_ENOMEM;
    /* a slot goes back after the last action of its micro-batch */
    for (int i = l ? l->n - 1 : -1; rc == 0 && i >= 0; i--) {
        int j = i + 1;
        while (j < l->n && !(l->a[j].chunk == l->a[i].chunk && l->a[j].mb == l->a[i].mb))
            j++;
        p->release[i] = j == l->n ? RELEASE : HOLD;
    }
    for (int i = 0; rc == 0 && i < l->n; i++) {
        const pipe_action *a = &l->a[i];
        if (a->op == PIPE_BWD || a->op == PIPE_BWD_W)
            p->ck[local_chunk(p, a->chunk)].last_bwd = i;
        p->split |= a->op == PIPE_BWD_W;
    }
    if (rc) {
        weft_pipe_destroy(p);
        return rc;
    }
    *out = p;
    return 0;
}

int weft_pipe_chunk_seconds(const weft_pipe *p, int chunk, double *fwd, double *bwd,
                            double *bwd_weight)
{
    if (!p || chunk < 0 || chunk >= p->nchunk)
        return WEFT_EINVAL;
    const pipe_chunk *c = &p->ck[chunk];
    double *out[3] = { fwd, bwd, bwd_weight };
    for (int j = 0; j < 3; j++)
        if (out[j])
            *out[j] = c->runs[j] ? c->sec[j] / (double)c->runs[j] : 0;
    return 0;
}

const char *weft_pipe_error(const weft_pipe *p)
{
    return p && p->err[0] ? p->err : "";
}

static int grow(float **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    float *b = realloc(*buf, (n ? n : 1) * sizeof(float));
    if (!b)
        return WEFT_ENOMEM;
    *buf = b;
    *cap = n;
    return 0;
}

/* The slot micro-batch mb holds at local chunk k, taken on first use and
 * given back after its last action (a slot's buffers outlive its sends:
 * they are finished before the slot is taken again). */
static int slot_of(weft_pipe *p, int k, int mb, int *out)
{
    pipe_chunk *c = &p->ck[k];
    if (c->of_mb[mb] >= 0) {
        *out = c->of_mb[mb];
        return 0;
    }
    int s;
    if (c->nfree) {
        s = c->free_list[--c->nfree];
    } else {
        pipe_slot *ns = realloc(c->slot, sizeof *ns * (size_t)(c->nslot + 1));
        if (!ns)
            return WEFT_ENOMEM;
        c->slot = ns;
        memset(&ns[c->nslot], 0, sizeof *ns);
        s = c->nslot++;
    }
    for (int j = 0; j < 2; j++)
        if (c->slot[s].sends[j]) {
            int rc = weft_wait(c->slot[s].sends[j]);
            c->slot[s].sends[j] = NULL;
            if (rc)
                return rc;
        }
    c->of_mb[mb] = s;
    c->used++;
    *out = s;
    return 0;
}

static void slot_release(weft_pipe *p, int k, int mb)
{
    pipe_chunk *c = &p->ck[k];
    c->free_list[c->nfree++] = c->of_mb[mb];
    c->of_mb[mb] = -1;
    c->used--;
}

static int wait_req(weft_request **r)
{
    int rc = *r ? weft_wait(*r) : 0;
    *r = NULL;
    return rc;
}

typedef struct {
    const void *inputs;
    const int32_t *targets;
    int batch, seq, rows_per_sample;
    size_t in_width;           /* inputs per sample (first chunk) */
    double loss, busy;
    int correct, sends;
    double send_bytes;
} step_ctx;

/* Adds a compute's seconds to the step's busy time and its chunk's tally. */
static void timed(weft_pipe *p, step_ctx *x, int k, int what, double t0)
{
    double d = now_s() - t0;
    x->busy += d;
    p->ck[k].sec[what] += d;
    p->ck[k].runs[what]++;
}

static void mb_range(const weft_pipe *p, const step_ctx *x, int mb, int *lo, int *n)
{
    *lo = (int)((long)mb * x->batch / p->spec.m);
    *n = (int)((long)(mb + 1) * x->batch / p->spec.m) - *lo;
}

static int do_action(weft_pipe *p, step_ctx *x, const pipe_action *a, int index);

static int run_action(weft_pipe *p, step_ctx *x, const pipe_action *a, int index)
{
    int rc = do_action(p, x, a, index);
    pipe_chunk *c = &p->ck[local_chunk(p, a->chunk)];
    if (rc == 0 && a->op == PIPE_FWD && ++c->stash > c->peak)
        c->peak = c->stash;
    if (rc == 0 && (a->op == PIPE_BWD || a->op == PIPE_BWD_W))
        c->stash--;
    if (rc == 0 && p->release[index])
        slot_release(p, local_chunk(p, a->chunk), a->mb);
    return rc;
}

static int do_action(weft_pipe *p, step_ctx *x, const pipe_action *a, int index)
{
    weft_model *m = p->model;
    int k = local_chunk(p, a->chunk), lo, n, s, rc;
    int last = a->chunk == p->spec.p * p->spec.v - 1;
    size_t at = (size_t)k * p->spec.m + (size_t)a->mb;
    mb_range(p, x, a->mb, &lo, &n);
    if (n < 1)
        return fail(p, WEFT_EINVAL, "%s: a micro-batch has no samples (batch %ld)",
                    "pipeline", x->batch);
    if ((rc = slot_of(p, k, a->mb, &s)))
        return rc;
    pipe_slot *sl = &p->ck[k].slot[s];
    size_t in_n, out_n;
    weft_model_chunk_io(m, k, n, x->seq, &in_n, &out_n);
    int tag = pipe_tag(&p->spec, a->op, a->chunk, a->mb);
    double t0;
    switch (a->op) {
    case PIPE_RECV_ACT:
        if ((rc = grow(&sl->act, &sl->act_cap, in_n)))
            return rc;
        return weft_irecv_tag(p->comm, sl->act, in_n, WEFT_F32, a->peer, tag, &p->recv_act[at]);
    case PIPE_RECV_GRAD:
        if ((rc = grow(&sl->grad, &sl->grad_cap, out_n)))
            return rc;
        return weft_irecv_tag(p->comm, sl->grad, out_n, WEFT_F32, a->peer, tag, &p->recv_grad[at]);
    case PIPE_SEND_ACT:
        x->sends++;
        x->send_bytes += (double)out_n * sizeof(float);
        return weft_isend_tag(p->comm, weft_model_chunk_output(m, k, s), out_n, WEFT_F32, a->peer,
                              tag, &sl->sends[0]);
    case PIPE_SEND_GRAD:
        x->sends++;
        x->send_bytes += (double)in_n * sizeof(float);
        return weft_isend_tag(p->comm, weft_model_chunk_input_grad(m, k, s), in_n, WEFT_F32,
                              a->peer, tag, &sl->sends[1]);
    case PIPE_FWD: {
        const void *in;
        if (a->chunk == 0)
            in = (const char *)x->inputs + (size_t)lo * x->in_width *
                 (x->rows_per_sample > 1 ? sizeof(int32_t) : sizeof(float));
        else if ((rc = wait_req(&p->recv_act[at])))
            return rc;
        else
            in = sl->act;
        const int32_t *y = last ? x->targets + (size_t)lo * x->rows_per_sample : NULL;
        float l = 0;
        t0 = now_s();
        rc = weft_model_chunk_forward(m, k, s, in, y, n, x->seq, &l);
        if (rc == 0 && last) {
            x->loss += (double)l * n / x->batch;
            x->correct += weft_model_count_correct(m, y);
        }
        timed(p, x, k, 0, t0);
        return rc;
    }
    case PIPE_BWD: case PIPE_BWD_I: case PIPE_BWD_W: {
        const float *dout = NULL;
        if (!last && a->op != PIPE_BWD_W) {
            if ((rc = wait_req(&p->recv_grad[at])))
                return rc;
            dout = sl->grad;
        }
        int part = a->op == PIPE_BWD ? WEFT_BACKWARD_ALL
                 : a->op == PIPE_BWD_I ? WEFT_BACKWARD_INPUT : WEFT_BACKWARD_WEIGHT;
        t0 = now_s();
        rc = weft_model_chunk_backward(m, k, s, dout, (float)n / (float)x->batch, part,
                                       index == p->ck[k].last_bwd);
        timed(p, x, k, a->op == PIPE_BWD_W ? 2 : 1, t0);
        return rc;
    }
    }
    return WEFT_EINVAL;
}

/* The first and the last rank hold the two halves of a tied embedding:
 * each adds the other's gradient, then announces it. */
static int sum_tied(weft_pipe *p)
{
    weft_model *m = p->model;
    int t = weft_model_tied_tensor(m), n = p->spec.p;
    if (t < 0 || n < 2)
        return 0;
    weft_tensor_info ti;
    int rc = weft_model_tensor_info(m, t, &ti);
    float *g = weft_model_grads(m, NULL) + ti.offset;
    float *other = malloc(ti.numel * sizeof(float));
    if (!other)
        return WEFT_ENOMEM;
    int peer = p->rank == 0 ? n - 1 : 0;
    weft_request *rs = NULL, *rr = NULL;
    const int tag = WEFT_TAG_MAX; /* above every schedule tag */
    if (rc == 0)
        rc = weft_irecv_tag(p->comm, other, ti.numel, WEFT_F32, peer, tag, &rr);
    if (rc == 0)
        rc = weft_isend_tag(p->comm, g, ti.numel, WEFT_F32, peer, tag, &rs);
    int r1 = wait_req(&rr), r2 = wait_req(&rs);
    rc = rc ? rc : r1 ? r1 : r2;
    /* the same sum in the same order on both ranks: first + last */
    if (rc == 0)
        for (size_t i = 0; i < ti.numel; i++)
            g[i] = p->rank == 0 ? g[i] + other[i] : other[i] + g[i];
    free(other);
    return rc ? rc : weft_model_grads_ready(m, t, 1);
}

int weft_pipe_step(weft_pipe *p, const void *inputs, const int32_t *targets, int batch, int seq,
                   weft_pipe_stats *st)
{
    if (!p || !inputs || !targets || batch < p->spec.m)
        return WEFT_EINVAL;
    int rc = 0;
    if (!p->agreed && (rc = agree(p)) != 0)
        return rc;
    p->agreed = 1;
    const weft_model_config *cfg = weft_model_config_of(p->model);
    int gpt = cfg->type != WEFT_MODEL_MLP;
    step_ctx x = { inputs, targets, batch, gpt ? seq : 1, gpt ? seq : 1,
                   gpt ? (size_t)seq : (size_t)cfg->widths[0], 0, 0, 0, 0, 0 };
    const pipe_list *l = &p->sched.rank[p->rank];
    double t0 = now_s();
    for (int i = 0; i < l->n && rc == 0; i++)
        rc = run_action(p, &x, &l->a[i], i);
    if (rc && !p->err[0])
        snprintf(p->err, sizeof p->err, "%s", weft_comm_error(p->comm));
    /* drain: every request of the step is finished or failed */
    size_t nm = (size_t)p->nchunk * (size_t)p->spec.m;
    for (size_t i = 0; i < nm; i++) {
        int r1 = wait_req(&p->recv_act[i]), r2 = wait_req(&p->recv_grad[i]);
        rc = rc ? rc : r1 ? r1 : r2;
    }
    int peak = 0;
    for (int k = 0; k < p->nchunk; k++) {
        pipe_chunk *c = &p->ck[k];
        for (int s = 0; s < c->nslot; s++)
            for (int j = 0; j < 2; j++) {
                int r = wait_req(&c->slot[s].sends[j]);
                rc = rc ? rc : r;
            }
        for (int mb = 0; mb < p->spec.m; mb++)
            if (c->of_mb[mb] >= 0)
                slot_release(p, k, mb);
        peak = c->peak > peak ? c->peak : peak;
        c->peak = c->stash = 0;
    }
    double busy_end = now_s();
    if (rc == 0)
        rc = sum_tied(p);
    if (rc && !p->err[0])
        snprintf(p->err, sizeof p->err, "%s", weft_comm_error(p->comm));
    if (st) {
        st->loss = (float)x.loss;
        st->correct = x.correct;
        st->busy_s = x.busy;
        st->step_s = busy_end - t0;
        st->peak_stash = peak;
        st->sends = x.sends;
        st->send_bytes = x.send_bytes;
    }
    return rc;
}
