/* The layout planner: enumerate tp x cp x dp x pp (and ep inside dp) with
 * schedule, micro-batches, sequence parallelism and ZeRO stage; price each
 * with the library's own pipeline schedules and the simulator's
 * collectives; sort; pick. */
#include "sim/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/pipe_costs.h"
#include "sim/pipe_share.h"
#include "sim/sim.h"
#include "train/flops.h"
#include "train/model.h"

/* One priced collective, so that the many layouts sharing a group and a
 * size simulate it once. */
typedef struct {
    int stride, n, kind;
    double count, sec;
} coll_memo;

typedef struct {
    const sim_plan_query *q;
    double T, C, V, H, vpad_tp; /* vpad_tp: padded vocabulary per tensor rank, tp=1 unused */
    double rate;                /* GFLOP/s of one rank while it computes */
    double cores;               /* > 0: fewer cores than ranks on a node */
    int on_node;                /* ranks of the job on a node */
    double update_s;            /* the optimiser's seconds a parameter, one thread */
    double sync;                /* > 0: what a pipeline message waits on shared cores
                                   (weft-sim sync): its receiver, asleep through the
                                   sender's work, woken onto cores other ranks hold */
    double chain;               /* > 0: the cores ranks handing work on get (weft-sim
                                   sync), where fewer than the node's */
    double msg_cpu;             /* > 0: CPU seconds a pipeline message's end (its
                                   send, its receive) costs on the shared cores
                                   (weft-sim sync) */
    double msg_per;             /* its part a second of the piece a message
                                   carries (its sender's work on it) */
    double slow;                /* a rank's work with every rank working: its
                                   threads' share of the cores, as a factor */
    int ep, cp, pp;             /* the layout being priced: expert, context and
                                   pipeline degrees */
    coll_memo *memo;
    int nmemo, capmemo;
    sim_plan *out;
    sim_topo topo;              /* the query's, its cores the calibration's */
    sim_plan_query lq;          /* the query on that topology */
} planner;

/* Room for one more of n elements of size bytes in *a (capacity *cap). */
static int grow(void **a, int *cap, int n, size_t size)
{
    if (n < *cap)
        return 0;
    int c = *cap ? 2 * *cap : 64;
    void *na = realloc(*a, (size_t)c * size);
    if (!na)
        return WEFT_ENOMEM;
    *a = na;
    *cap = c;
    return 0;
}

static int fail(char *err, size_t len, const char *msg)
{
    snprintf(err, len, "%s", msg);
    return WEFT_EINVAL;
}

double sim_plan_zero_bytes(double psi, int zero, int dp, int optim_bytes)
{
    double N = dp > 0 ? dp : 1, K = optim_bytes;
    switch (zero) {
    case 0: return (8 + K) * psi;
    case 1: return 8 * psi + K * psi / N;
    case 2: return 4 * psi + (4 + K) * psi / N;
    default: return (8 + K) * psi / N;
    }
}

/* Ranks of the world on one node, and how many of them belong to one
 * group of n ranks stride apart: the rest are other groups of the same
 * dimension, assumed to communicate at the same time and so to share the
 * node's NICs and cores. */
static void node_share(const sim_topo *t, int world, int stride, int n, double *share)
{
    int rpn = t->ranks_per_node, on_node = world < rpn ? world : rpn;
    int g = stride >= rpn ? 1 : rpn / stride;
    if (g > n)
        g = n;
    if (g < 1)
        g = 1;
    *share = on_node > g ? (double)on_node / g : 1;
}

/* The topology a group of ranks stride apart sees: as many of its members
 * on a node as fit, its share of the NICs and cores. */
static void group_topo(const sim_topo *t, int world, int stride, int n, sim_topo *g)
{
    *g = *t;
    int rpn = t->ranks_per_node;
    if (stride >= rpn) {
        g->ranks_per_node = 1;
        int nodes = stride / rpn;
        g->nodes_per_pod = t->nodes_per_pod / nodes > 0 ? t->nodes_per_pod / nodes : 1;
    } else
        g->ranks_per_node = rpn / stride > 0 ? rpn / stride : 1;
    double share;
    node_share(t, world, stride, n, &share);
    g->lc[LC_NIC].bw_GBps /= share;
    g->cpu_cores /= share;
    g->cpu_mem_GBps /= share;
    g->cpu_cache_MiB /= share;
}

/* The highest link class between the group's first and last member. */
static int group_link(const sim_topo *t, int world, int stride, int n)
{
    if (n < 2)
        return -1;
    sim_place a, b;
    sim_topo_place(t, world, 0, &a);
    sim_topo_place(t, world, (n - 1) * stride, &b);
    if (a.cluster != b.cluster)
        return LC_WAN;
    if (a.pod != b.pod)
        return LC_POD;
    return a.node != b.node ? LC_NIC : LC_INTRA;
}

/* With weft-tune's constants and the group on one node: the library's
 * own closed forms (cost_closed), the fastest algorithm. A group whose
 * members fit on the node's cores meets as if they were its own, at
 * weft-tune's alpha, however many other ranks share the cores: its
 * members do the same work between two rounds and are scheduled side by
 * side, so each one's wait spins (polling, yielding) until the others
 * arrive rather than sleeping, and while the group's turn on the cores
 * lasts its rounds follow each other; the other groups' compute in the
 * meantime is the processor sharing of the replay (share_replay), not a
 * wait of this group's. A group of more members than cores cannot run
 * side by side: some member sleeps at every round and is woken. Where
 * the group is every rank of the node, the member that goes to wait
 * hands its core to the one woken: the oversubscribed constants
 * weft-tune measured so (alpha_over). Where ranks outside the group hold
 * the cores, computing, the one woken waits for a core as weft-sim sync
 * measured a woken rank to (a round waits that long, when measured
 * longer). Returns 0 when the calibration has no constants or the group
 * leaves the node. */
static int calib_coll(const planner *pl, int kind, int stride, int n, double count, double *sec)
{
    const sim_calib *c = pl->q->calib;
    if (!c || !c->have_coll || (n - 1) * stride >= pl->q->topo->ranks_per_node)
        return 0;
    cost_params p = c->coll;
    double cores = pl->q->topo->cpu_cores;
    p.cores = cores > 0 && n > cores ? (int)cores : 0;
    if (p.cores && n < pl->on_node && pl->sync > p.alpha_over)
        p.alpha_over = pl->sync;
    double best = -1;
    for (int a = 1; a < WEFT_ALGO_COUNT; a++) {
        double t = cost_closed(&p, (weft_algo)a, (weft_coll_kind)kind, (uint64_t)count * 4, n);
        if (t >= 0 && (best < 0 || t < best))
            best = t;
    }
    if (best < 0)
        return 0;
    *sec = best * 1e6; /* coll_sec's unit */
    return 1;
}

/* Seconds of one collective of count floats (as the API counts them) over
 * n ranks stride apart: the fastest of the algorithms the simulator can
 * run for it, as the library's tuner picks the fastest. */
static int coll_sec(planner *pl, int kind, int stride, int n, double count, double *sec)
{
    *sec = 0;
    if (n < 2 || count < 1)
        return 0;
    for (int i = 0; i < pl->nmemo; i++) {
        coll_memo *m = &pl->memo[i];
        if (m->kind == kind && m->stride == stride && m->n == n && m->count == count) {
            *sec = m->sec;
            return 0;
        }
    }
    double best = -1;
    if (calib_coll(pl, kind, stride, n, count, &best))
        goto done;
    sim_topo g;
    group_topo(pl->q->topo, pl->q->ranks, stride, n, &g);
    char err[256];
    for (int a = 1; a < WEFT_ALGO_COUNT; a++) {
        if (!sim_algo_has(a, (weft_coll_kind)kind))
            continue;
        sim_job j = { .topo = &g, .algo = a, .kind = (weft_coll_kind)kind, .nranks = n,
                      .count = (uint64_t)count, .esize = 4, .op_budget = 20000 };
        sim_result r;
        if (sim_run(&j, &r, err, sizeof err) == 0 && (best < 0 || r.time_us < best))
            best = r.time_us;
    }
done:
    if (best < 0)
        return WEFT_ENOTSUP;
    if (grow((void **)&pl->memo, &pl->capmemo, pl->nmemo, sizeof *pl->memo))
        return WEFT_ENOMEM;
    pl->memo[pl->nmemo++] = (coll_memo){ stride, n, kind, count, best * 1e-6 };
    *sec = best * 1e-6;
    return 0;
}

/* One block's share of a tensor rank: parameters, activations stashed per
 * micro-batch, tensor-parallel payload and seconds per micro-batch, and
 * those of once a step (a Llama's whole k and v: their gradients summed
 * over the group at the step's last backward). own_s: seconds of each
 * pass's products beyond the rank's 1/tp share (those k and v again). */
typedef struct {
    double params, act, tp_bytes, tp_fwd, tp_bwd, step_bytes, step_s, own_s;
    double xparams;                   /* experts a rank of an expert group holds
                                         (reduced over their replicas only) */
    double ep_fwd, ep_bwd, ep_bytes;  /* the experts' all-to-alls a micro-batch */
    double cp_fwd, cp_bwd, cp_bytes;  /* the context ring's unhidden waits */
    double ring;                      /* the ring's buffers (bytes, once a rank) */
    int tp_measured;                  /* the calibration measured the rank's slice
                                         as its group runs it and the group fits
                                         the cores: its collectives' time is in
                                         the work, not a wait */
} block_part;

/* Waits of a block's forward and input backward that hold no core. */
static double wait_fwd(const block_part *b)
{
    return (b->tp_measured ? 0 : b->tp_fwd) + b->ep_fwd + b->cp_fwd;
}

static double wait_bwd(const block_part *b)
{
    return (b->tp_measured ? 0 : b->tp_bwd) + b->ep_bwd + b->cp_bwd;
}

static int is_llama(const planner *pl)
{
    return pl->q->model.type == WEFT_MODEL_LLAMA;
}

/* Whether tp ranks can split the model as weft_model_create_tp does: a
 * GPT's heads; a Llama's heads, hidden width and kv heads (model_llama.c). */
static int tp_splits(const weft_model_config *c, int tp)
{
    if (c->type == WEFT_MODEL_LLAMA)
        return train_llama_tp_fits(c, tp);
    return c->n_head % tp == 0;
}

/* A Llama's k and v at tp: split by kv heads where tp divides them, else
 * whole on every rank (each rank computing the one kv head its query heads
 * read). kvd: their full width; hold, use: the rows a rank keeps and
 * computes. */
static void llama_kv(const planner *pl, int tp, double *kvd, double *hold, double *use)
{
    const weft_model_config *c = &pl->q->model;
    double hd = pl->C / c->n_head;
    *kvd = hd * c->n_kv_head;
    int split = c->n_kv_head % tp == 0;
    *hold = split ? *kvd / tp : *kvd;
    *use = split ? *kvd / tp : hd;
}

/* Megatron's collectives per micro-batch of rows tokens (docs/TRAINING.md,
 * "Tensor, sequence and 3D parallelism"): the embedding sums its vocabulary
 * parts (1 all-reduce of rows x C; sequence parallel: a reduce-scatter,
 * then an all-gather in backward); a block 2 all-reduces forward and 2
 * backward (sequence parallel: an all-gather before and a reduce-scatter
 * after each tensor-parallel layer, mirrored in backward); the
 * cross-entropy 2 all-reduces of 1 and 2 floats a row, the head's input
 * gradient 1 all-reduce (sequence parallel: the head gathers forward and
 * reduce-scatters backward). */
static int block_tp(planner *pl, int tp, int sp, int kind, double rows, block_part *b)
{
    double x = rows * pl->C, part = x / tp, ar, ag, rs, ce1, ce2;
    int rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, 1, tp, x, &ar);
    if (!rc)
        rc = coll_sec(pl, WEFT_COLL_ALLGATHER, 1, tp, part, &ag);
    if (!rc)
        rc = coll_sec(pl, WEFT_COLL_REDUCE_SCATTER, 1, tp, part, &rs);
    if (!rc)
        rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, 1, tp, rows, &ce1);
    if (!rc)
        rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, 1, tp, 2 * rows, &ce2);
    if (rc || tp < 2)
        return rc;
    double kvd, hold, use;
    if (kind == 1 && is_llama(pl)) {
        llama_kv(pl, tp, &kvd, &hold, &use);
        if (hold == kvd) {
            rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, 1, tp, kvd * pl->C, &b->step_s);
            if (rc)
                return rc;
            b->step_s *= 2;
            b->step_bytes = 2 * 4 * kvd * pl->C;
        }
    }
    double B4 = 4 * x;
    if (kind == 0) {
        b->tp_fwd = sp ? rs : ar;
        b->tp_bwd = sp ? ag : 0;
        b->tp_bytes = B4 * (sp ? 2 : 1);
    } else if (kind == 1) {
        b->tp_fwd = sp ? 2 * (ag + rs) : 2 * ar;
        b->tp_bwd = b->tp_fwd;
        b->tp_bytes = B4 * (sp ? 8 : 4);
        if (pl->q->model.experts > 0) {
            /* the experts' gate gradients (topk a row) ride in the MLP's
             * input-gradient all-reduce; under --sp they lie outside the
             * reduce-scatter's rows and take a small all-reduce of their own */
            double g = rows * pl->q->model.topk, gar;
            rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, 1, tp, sp ? g : x + g, &gar);
            b->tp_bwd = sp ? b->tp_bwd + gar : ar + gar;
            b->tp_bytes += 4 * g;
        }
    } else {
        b->tp_fwd = ce1 + ce2 + (sp ? ag : 0);
        b->tp_bwd = sp ? rs : ar;
        b->tp_bytes = 4 * 3 * rows + B4 * (sp ? 2 : 1);
    }
    return rc;
}

/* Expert parallelism in one mixture-of-experts layer a micro-batch
 * (moe_ep.c), over the expert group (ep consecutive data-parallel ranks,
 * stride apart): forward, the counts all-gathered (E + 1 integers a
 * rank), then the routed rows dispatched and the experts' outputs
 * combined, each an all-to-all(-v) of the rank's rows x topk rows of width
 * C, (ep - 1)/ep of them leaving the rank on a balanced routing; backward
 * the mirror, two more. A rank computes as many expert rows as without
 * --ep (its E/ep experts for the whole group's tokens). */
static int ep_block(planner *pl, int stride, double rows, block_part *b)
{
    const weft_model_config *c = &pl->q->model;
    int ep = pl->ep;
    if (ep < 2 || c->experts <= 0)
        return 0;
    double E = c->experts, x = rows * c->topk * pl->C, a2a, ag;
    int rc = coll_sec(pl, WEFT_COLL_ALLTOALL, stride, ep, ceil(x / ep), &a2a);
    if (!rc)
        rc = coll_sec(pl, WEFT_COLL_ALLGATHER, stride, ep, E + 1, &ag);
    if (rc)
        return rc;
    b->ep_fwd = ag + 2 * a2a;
    b->ep_bwd = 2 * a2a;
    b->ep_bytes = 4 * (4 * x * (ep - 1) / ep + (E + 1) * (ep - 1));
    return 0;
}

static void pp_link(const planner *pl, int stride, int pp, double *lat, double *bw);

/* Context parallelism in one block a micro-batch (attention_cp.c), rows
 * the rank's T/C tokens of its micro-batch: forward, C - 1 transfers of
 * the K/V block (2 rows x the key width the rank computes), each posted
 * before a ring step's products and waited for after them; backward C - 1
 * K/V transfers the same way, and C sends of the dK/dV sums, each waited
 * for within its step. A ring step's products are the rank's attention
 * over one block: 4 rows x T x C / tp FLOPs a pass over C steps (the
 * estimate's whole-matrix count), twice that backward. A transfer shows
 * where it is slower than its step's products; a dK/dV send always
 * shows. The head sums the counted targets over the group (one float). */
static int cp_block(planner *pl, int tp, int kind, double rows, block_part *b)
{
    int cp = pl->cp;
    if (cp < 2)
        return 0;
    if (kind == 2) {
        b->cp_bytes = 4;
        return coll_sec(pl, WEFT_COLL_ALLREDUCE, tp, cp, 1, &b->cp_fwd);
    }
    if (kind != 1)
        return 0;
    double kvw = pl->C / tp, kvd, hold;
    if (is_llama(pl))
        llama_kv(pl, tp, &kvd, &hold, &kvw);
    double kvb = 4 * 2 * rows * kvw, lat, bw;
    pp_link(pl, tp, 2, &lat, &bw);
    double x = lat + (bw > 0 ? kvb / bw : 0);
    double a = 4 * rows * pl->T * pl->C / tp / cp / (pl->rate * 1e9);
    b->cp_fwd = (cp - 1) * (x > a ? x - a : 0);
    b->cp_bwd = cp * x + (cp - 1) * (x > 2 * a ? x - 2 * a : 0);
    b->cp_bytes = kvb * (3 * cp - 2);
    b->ring = 4 * kvb;
    return 0;
}

/* The floats of the tied embedding a pipeline's last stage keeps a copy
 * of (a GPT's always tied, a Llama's when tied), and whose gradient it
 * sums with the first stage's; 0 when one stage holds both. */
static double tied_copy(const planner *pl, int tp, int pp)
{
    int tied = !is_llama(pl) || pl->q->model.tied;
    return pp > 1 && tied ? ceil(pl->V / tp) * pl->C : 0;
}

/* A mixture of experts' share of a block at tp (model_llama.c,
 * model_gpt.c, moe.c): each expert's width split by tp (expert tensor
 * parallelism; a Llama's SwiGLU experts three C x fe matrices each, a
 * GPT's GELU ones two), the router (and its bias) whole on every tensor
 * rank, so its products run on each in full; under --ep a rank keeps only
 * its group's E/ep experts (moe_split.c; under --tp or --pp their 1/tp
 * slices, the pipeline's experts divided as well). The
 * record backward keeps: train_moe_acts_floats, every token's topk rows
 * routed (a balanced routing: as many rows reach a rank's experts under
 * --ep as it sends). */
static void moe_block(const planner *pl, int tp, double rows, double fe, block_part *b)
{
    const weft_model_config *c = &pl->q->model;
    double C = pl->C, E = c->experts, experts = (is_llama(pl) ? 3 : 2) * C * fe * E / tp;
    b->params += C * E + (c->moe_bias ? E : 0);
    if (pl->ep > 1)
        b->xparams = experts / pl->ep;
    else
        b->params += experts;
    b->own_s += 2 * rows * C * E * (1 - 1.0 / tp) / (pl->rate * 1e9);
    b->act += 4 * sim_moe_record(rows, C, E, c->topk, fe / tp);
}

/* A Llama block at tp (train_llama_layout): q, o, gate, up and down split
 * by tp, k and v as llama_kv, the two RMSNorm gains whole, no biases. A
 * token's stash: the norms' gathered outputs, the residuals (by rows
 * under sequence parallelism, which also keeps this rank's rows of the
 * norms' outputs), each norm's row scale, q, attention's output, gate|up
 * and their product split by tp, the k and v computed, and 2 floats a row
 * a head of attention's statistics. */
static void llama_block(const planner *pl, int tp, int sp, double rows, block_part *b)
{
    const weft_model_config *c = &pl->q->model;
    double C = pl->C, F = c->ffn, rep = sp ? 1.0 / tp : 1, kvd, hold, use;
    double fe = sim_expert_width(c);
    if (fe > 0)
        F = c->shared * fe; /* the dense MLP is the shared experts */
    llama_kv(pl, tp, &kvd, &hold, &use);
    b->params = (2 * C * C + 3 * C * F) / tp + 2 * C * hold + 2 * C;
    b->own_s = 2 * rows * 2 * C * (use - kvd / tp) / (pl->rate * 1e9);
    double tok = 2 * C + 2 * C * rep + (sp ? 2 * C / tp : 0) + 2 * rep + 2 * C / tp + 2 * use +
                 3 * F / tp + 2 * pl->H / tp;
    b->act = 4 * rows * tok;
    if (fe > 0)
        moe_block(pl, tp, rows, fe, b);
}

/* Parameters and activations of a tensor rank (tensor_parallel split as
 * weft_model_create_tp does: qkv, the first MLP layer and the vocabulary
 * by tp, LayerNorms, positions and row-parallel biases replicated). The
 * stash follows llm.c's per-layer count (~16 C floats a token, split by
 * tp but for the residual and the LayerNorms' outputs unless sequence
 * parallel) and each row's log-sum-exp a head (attention keeps no T x T
 * matrix). */
static void block_shape(const planner *pl, int tp, int sp, int pp, int kind, double rows,
                        block_part *b)
{
    double C = pl->C, H = pl->H, ctx = pl->q->model.ctx;
    int llama = is_llama(pl);
    double vp = ceil(pl->V / tp), rep = sp ? 1.0 / tp : 1;
    memset(b, 0, sizeof *b);
    if (kind == 0) {
        b->params = vp * C + (llama ? 0 : ctx * C);
        b->act = 4 * rows * C * rep;
    } else if (kind == 1 && llama) {
        llama_block(pl, tp, sp, rows, b);
    } else if (kind == 1 && pl->q->model.experts > 0) {
        /* a GPT's experts in place of its MLP (model_gpt.c): qkv and proj
         * as below, no MLP biases; the stash without fc's two outputs */
        b->params = 4 * C * C / tp + 3 * C / tp + 5 * C;
        b->act = 4 * (rows * C * (4 * rep + 4.0 / tp) + rows * H / tp);
        moe_block(pl, tp, rows, sim_expert_width(&pl->q->model), b);
    } else if (kind == 1) {
        b->params = 12 * C * C / tp + 7 * C / tp + 6 * C;
        /* under --sp the LayerNorms' outputs are kept gathered, whole, and
         * as this rank's rows (train_gpt_layout) */
        b->act = sp ? 4 * rows * (2 * C + 16 * C / tp + 4.0 / tp + 2 * H / tp)
                    : 4 * (rows * C * (4 * rep + 12.0 / tp) + rows * H / tp);
    } else {
        b->params = (llama ? C : 2 * C) + tied_copy(pl, tp, pp);
        if (llama && !pl->q->model.tied)
            b->params += vp * C;
        /* a Llama's (train_llama_layout): the final norm's output,
         * its rows' scale, logits and probabilities */
        b->act = llama || sp ? 4 * rows * (C + (sp ? C / tp : 0) + rep + 2 * vp)
                             : 4 * rows * (2 * C * rep + 2 * vp);
    }
}

/* Bytes a Llama chunk's arena holds for each micro-batch slot beside its
 * blocks' stashes (train_llama_layout): the rotary tables, the chunk's
 * input where it has no embedding, and backward's scratch, which its
 * layers share: the residual's and the branch's gradients (the branch's
 * with the experts' gate gradients after it), and with layers q, k, v,
 * attention's statistics, its output, the MLP's gate|up and product and
 * the sum's gradients (and the experts' routed rows' with experts), each
 * at the rank's width. A GPT's stash counts the rest already but for its
 * experts' (model_gpt.c): their scratch, the gate gradients and, under
 * --sp, the gathered dout and the router's input gradient. */
static double llama_chunk_extra(const planner *pl, int tp, int sp, double rows, int layers,
                                int embed)
{
    const weft_model_config *c = &pl->q->model;
    double fe = sim_expert_width(c);
    if (!is_llama(pl)) {
        /* train_gpt_layout: the residual's and the branch's gradients, the
         * chunk's input where it has no embedding, the gathered input
         * under --sp, and with layers q, k, v's, attention's statistics',
         * the MLP's and (split) attention's output gradients */
        double K = c->topk, C = pl->C, rep = sp ? 1.0 / tp : 1;
        double tok = 2 * C * rep + (embed ? 0 : C * rep) + (sp ? C : 0);
        if (layers) {
            tok += 3 * C / tp + 2 * pl->H / tp + (fe > 0 ? 0 : 4 * C / tp) + (tp > 1 ? C / tp : 0);
            if (fe > 0)
                tok += K * (2 * C + 3 * fe / tp) + c->experts + 2 * K + (sp ? 2 * C : 0);
        }
        return 4 * rows * tok;
    }
    double C = pl->C, rep = sp ? 1.0 / tp : 1, kvd, hold, use;
    double F = fe > 0 ? c->shared * fe : c->ffn, K = fe > 0 ? c->topk : 0;
    llama_kv(pl, tp, &kvd, &hold, &use);
    double tok = 2 * C * rep + (sp ? C : 0) + (embed ? 0 : C * rep);
    if (layers) {
        tok += 2 * C / tp + 2 * use + 2 * pl->H / tp + 3 * F / tp + C + K;
        if (fe > 0)
            tok += K * (2 * C + 3 * fe / tp) + c->experts + K;
    }
    return 4 * (rows * tok + pl->T / pl->cp * C / pl->H);
}

static int add_entry(sim_plan *p, const sim_plan_entry *e)
{
    if (grow((void **)&p->e, &p->cap, p->n, sizeof *p->e))
        return WEFT_ENOMEM;
    p->e[p->n++] = *e;
    return 0;
}

/* Seconds and bytes the data-parallel group adds to a rank holding psi
 * parameters: the gradient reduction (all-reduce at stages 0-1,
 * reduce-scatter at 2-3) launched from backward's hook, so the backward
 * of the rank's chunks for the step's last micro-batch hides part of it;
 * the parameters' all-gather after the step (stages 1-3) hides nothing. */
static int dp_cost(planner *pl, int stride, int dp, int zero, double psi, double hide,
                   double *sec, double *bytes)
{
    double red, ag = 0;
    int rc = zero >= 2 ? coll_sec(pl, WEFT_COLL_REDUCE_SCATTER, stride, dp, ceil(psi / dp), &red)
                       : coll_sec(pl, WEFT_COLL_ALLREDUCE, stride, dp, psi, &red);
    if (!rc && zero >= 1)
        rc = coll_sec(pl, WEFT_COLL_ALLGATHER, stride, dp, ceil(psi / dp), &ag);
    /* Ranks outnumbering the cores: every rank of the node sums its
     * gradients at the step's end, and the rounds' copies, sums, polls and
     * yields of all of them are work the shared cores must do, which the
     * closed form (one group's wall time, the node otherwise idle) leaves
     * out: the all-reduce takes at least the node's CPU in it (arcpu, as
     * measured with every rank in one) over the cores. From stage 2 its
     * reduce-scatter and the all-gather after the step move what one
     * all-reduce does (a ring all-reduce is the two): the pair at least
     * that. */
    double cpu = 0;
    if (!rc && pl->cores > 0 && pl->q->calib)
        cpu = pl->on_node * sim_calib_ar_cpu(pl->q->calib, pl->on_node, dp, psi) / pl->cores;
    if (zero < 2 && cpu > red)
        red = cpu;
    if (zero >= 2 && cpu > red + ag)
        red = cpu - ag;
    *sec = (red > hide ? red - hide : 0) + ag;
    *bytes = dp > 1 ? 4 * psi * (zero >= 1 ? 2 : 1) : 0;
    return rc;
}

/* The pipeline link: what a message between neighbouring stages crosses. */
static void pp_link(const planner *pl, int stride, int pp, double *lat, double *bw)
{
    const sim_topo *t = pl->q->topo;
    *lat = *bw = 0;
    int c = group_link(t, pl->q->ranks, stride, pp > 1 ? 2 : 1);
    if (c < 0)
        return;
    double share;
    node_share(t, pl->q->ranks, stride, 2, &share);
    const sim_calib *cal = pl->q->calib;
    if (c == LC_INTRA && cal && cal->have_coll && cal->coll.beta > 0) {
        /* weft-tune's: a round's latency (a wake-up's when oversubscribed)
         * and its bytes' time */
        int over = t->cpu_cores > 0 && pl->on_node > t->cpu_cores;
        *lat = over ? cal->coll.alpha_over : cal->coll.alpha;
        /* a stage's message waits while other stages compute */
        if (over && pl->sync > *lat)
            *lat = pl->sync;
        *bw = 1 / cal->coll.beta;
        return;
    }
    *lat = (t->lc[c].lat_us + t->lc[c].ovh_us) * 1e-6;
    double b = t->lc[c].bw_GBps * 1e9;
    if (c == LC_NIC)
        b /= share;
    if (c == LC_INTRA && t->cpu_mem_GBps > 0 && t->cpu_mem_GBps * 1e9 / share < b)
        b = t->cpu_mem_GBps * 1e9 / share;
    *bw = b;
}

/* The blocks' measured seconds in place of the FLOP estimate, where the
 * calibration has them (one thread's, divided by the threads a rank runs
 * as the rate is); the GFLOP/s a core they imply, for the report. At tp >
 * 1, where the calibration measured a rank's slice as its group runs it
 * (a tpblock line), that slice's seconds times tp, so that price_blocks'
 * division by tp gives them back: the LayerNorms, the residuals, the
 * row-parallel biases and the cross-entropy's rows that every rank of the
 * group computes whole, and each layer's fixed cost, do not split, and
 * at small widths they are much of a block (sp: the slice measured
 * with sequence parallelism). measured[k]: kind k so. */
static int calib_blocks(planner *pl, sim_block_costs *bc, int mb, int tp, int sp,
                        int measured[3])
{
    const sim_plan_query *q = pl->q;
    double t[3][3], threads = pl->rate / q->gflops;
    int have[3];
    /* with the ranks outnumbering the cores, even a whole block is taken
     * as every rank of the node ran it at once, if measured so (a tpblock
     * line of TP 1): a rank shares its core's caches with the others
     * between its turns, which a block probed alone does not pay */
    int shared = tp > 1 || pl->cores > 0;
    for (int k = 0; k < 3; k++) {
        measured[k] = shared && sim_calib_tp_block_get(q->calib, &q->model, mb, (int)pl->T, k,
                                                       tp, tp > 1 ? sp : 0, pl->on_node, t[k]);
        if (measured[k]) {
            have[k] = 1;
            q->calib->hits++;
            for (int j = 0; j < 3; j++)
                t[k][j] *= tp;
            continue;
        }
        have[k] = sim_calib_block_get(q->calib, &q->model, mb, (int)pl->T, k, t[k]);
        if (have[k] < 0)
            return -have[k];
    }
    for (int i = 0; i < bc->n; i++) {
        int k = i == 0 ? 0 : i == bc->n - 1 ? 2 : 1;
        if (!have[k])
            continue;
        sim_block_cost *b = &bc->b[i];
        if (k == 1 && t[1][0] > 0 && !measured[1])
            q->calib->gflops = b->fwd * pl->rate / t[1][0];
        b->fwd = t[k][0] / threads;
        b->bwd_i = t[k][1] / threads;
        b->bwd_w = t[k][2] / threads;
    }
    return 0;
}

/* The replay of pl's partition with ranks sharing the node's cores: a
 * chunk's compute is work at the shared speed, its tensor-parallel
 * collectives waits that hold no core. Overwrites pp's step, busy and
 * bubble. */
static int share_replay(const planner *pl, sim_pipe_plan *pp, const block_part *part,
                        double lat, double bw, int replicas)
{
    int k = pp->k, m = pp->spec.m;
    pipe_sched s;
    int rc = pipe_sched_build(&s, &pp->spec);
    if (rc)
        return rc;
    double *w = calloc((size_t)k * 6, sizeof *w);
    if (!w) {
        pipe_sched_free(&s);
        return WEFT_ENOMEM;
    }
    double *fw = w, *iw = w + k, *ww = w + 2 * k, *fh = w + 3 * k, *ih = w + 4 * k,
           *wh = w + 5 * k;
    for (int j = 0; j < k; j++) {
        for (int i = pp->first[j]; i < pp->first[j + 1]; i++) {
            const block_part *b = &part[i];
            fh[j] += wait_fwd(b);
            ih[j] += wait_bwd(b);
            wh[j] += b->step_s / m;
        }
        fw[j] = pp->fwd[j] - fh[j];
        iw[j] = pp->bwd_i[j] - ih[j];
        ww[j] = pp->bwd_w[j] - wh[j];
        /* a chunk's messages, each way a micro-batch: its input received
         * and its output sent in the forward, their gradients in the
         * backward. Each end costs CPU on the shared cores beyond the
         * copy (the receive is posted ahead and the progress thread polls
         * and yields until it comes): work, holding a core */
        double ends = (j > 0) + (j + 1 < k);
        fw[j] += ends * pl->msg_cpu;
        iw[j] += ends * pl->msg_cpu;
    }
    /* and the progress thread polls, yielding, as long as the piece a
     * message carries takes its sender: each end costs msg_per of that
     * piece's work (the forward's output of chunk j, received by j + 1;
     * the input gradient of j + 1, received by j), sender and receiver
     * alike. Read from the pieces as they were before this pass added to
     * them. */
    for (int j = 0; pl->msg_per > 0 && j + 1 < k; j++) {
        double f = pp->fwd[j] - fh[j], b = pp->bwd_i[j + 1] - ih[j + 1];
        fw[j] += pl->msg_per * f;
        fw[j + 1] += pl->msg_per * f;
        iw[j] += pl->msg_per * b;
        iw[j + 1] += pl->msg_per * b;
    }
    /* a pipeline's stages hand their micro-batches on: they get the cores
     * weft-sim sync measured such a chain to get (the scheduler may run a
     * woken stage where its waker ran) */
    double cores = pl->cores;
    if (pp->spec.p > 1 && pl->chain > 0 && pl->chain < cores)
        cores = pl->chain;
    pipe_share_costs c = { fw, iw, ww, fh, ih, wh, pp->out_bytes, lat, bw, cores, replicas };
    /* Copies of a pipeline rank's list (its tp x dp x cp ranks) do not
     * wait in step: while one copy's group waits in a collective, holding
     * no core, the others compute on the cores. Their waits overlap the
     * others' work, so the step is bounded by the node's work over its
     * cores (the replay without those waits) and by one copy's own path
     * (its work at a core of its own and its waits, the own-core replay
     * pp holds), whichever is longer; the replay that holds every copy's
     * waits at once would leave the cores idle while all of them wait.
     * One copy a list (a pipeline of the node's ranks) keeps its waits:
     * nothing else runs in them but the other stages, which it shares
     * the cores with. */
    double own = pp->step;
    if (replicas > 1)
        c.fwd_wait = c.bwd_i_wait = c.bwd_w_wait = NULL;
    pipe_result r = { 0, pp->busy, pp->bubble, pp->peak_stash };
    rc = pipe_share_replay(&s, &c, &r);
    if (!rc)
        pp->step = replicas > 1 && own > r.step ? own : r.step;
    free(w);
    pipe_sched_free(&s);
    return rc;
}

/* Each block's costs as one tensor rank of tp runs it, m micro-batches a
 * step, rows its tokens of a micro-batch (its 1/cp of the sequences'
 * under context parallelism, whose costs bc holds whole). */
static int price_blocks(planner *pl, int tp, int sp, int pp, double rows, int m,
                        const int measured[3], sim_block_costs *bc, block_part *part)
{
    int nb = bc->n, rc = 0;
    double div = (double)tp * pl->cp;
    for (int i = 0; i < nb && !rc; i++) {
        int kind = i == 0 ? 0 : i == nb - 1 ? 2 : 1;
        block_shape(pl, tp, sp, pp, kind, rows, &part[i]);
        /* the measured slice holds its collectives' CPU; a group larger
         * than the cores also sleeps at its rounds, woken onto a core,
         * which no CPU clock sees: that wait stays (calib_coll) where the
         * group is every rank of the node, all asleep at once. A smaller
         * group's sleep is the other ranks' compute, which the shared
         * replay already counts (at 8 ranks on 2 cores tp 4 x dp 2's
         * cores were 95% busy: no room for the waits on a rank's path) */
        double cores = pl->q->topo->cpu_cores;
        part[i].tp_measured = measured[kind] && (cores <= 0 || tp <= cores || tp < pl->on_node);
        rc = block_tp(pl, tp, sp, kind, rows, &part[i]);
        if (!rc && kind == 1)
            rc = ep_block(pl, tp * pl->cp, rows, &part[i]);
        if (!rc)
            rc = cp_block(pl, tp, kind, rows, &part[i]);
        sim_block_cost *b = &bc->b[i];
        b->fwd = b->fwd / div + wait_fwd(&part[i]) + part[i].own_s;
        b->bwd_i = b->bwd_i / div + wait_bwd(&part[i]) + part[i].own_s;
        /* a step's once-only sums spread over its micro-batches */
        b->bwd_w = b->bwd_w / div + part[i].own_s + part[i].step_s / m;
        b->act_bytes = part[i].act;
        b->state_bytes = (8 + pl->q->optim_bytes) * (part[i].params + part[i].xparams);
        if (sp && b->out_bytes > 0)
            b->out_bytes /= tp;
        if (b->out_bytes > 0)
            b->out_bytes /= pl->cp;
    }
    return rc;
}

/* weft-train's pipeline sums its loss and takes its span over the stages
 * every step: two small all-reduces over the pipeline group. */
static int pp_step_sums(planner *pl, int pstride, int pp, double *sec)
{
    double one;
    int rc = 0;
    *sec = 0;
    if (pp > 1 && !(rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, pstride, pp, 6, &one)))
        *sec = one;
    if (!rc && pp > 1 && !(rc = coll_sec(pl, WEFT_COLL_ALLREDUCE, pstride, pp, 2, &one)))
        *sec += one;
    return rc;
}

/* What pipeline rank r of a layout holds and sends a step (its chunks'
 * blocks), and the data-parallel seconds it adds at ZeRO stage zero. */
typedef struct {
    double psi, xpsi, act, hide, ring, dsec, dbytes;
    double bytes[SIM_PLAN_DIMS], tp_s, ep_s, cp_s;
} rank_part;

static int rank_totals(planner *pl, const sim_pipe_plan *pp_plan, const block_part *part,
                       const double *extra, int r, int tp, int dp, int zero, rank_part *t)
{
    int k = pp_plan->k, p = pp_plan->spec.p, m = pp_plan->spec.m, cp = pl->cp, ep = pl->ep;
    memset(t, 0, sizeof *t);
    for (int j = r; j < k; j += p) {
        for (int i = pp_plan->first[j]; i < pp_plan->first[j + 1]; i++) {
            const block_part *b = &part[i];
            t->psi += b->params;
            t->xpsi += b->xparams;
            t->act += pp_plan->chunk_stash[j] * b->act;
            if (b->ring > t->ring)
                t->ring = b->ring;
            t->bytes[SIM_PLAN_TP] += m * b->tp_bytes + b->step_bytes;
            t->tp_s += m * (b->tp_fwd + b->tp_bwd) + b->step_s;
            t->bytes[SIM_PLAN_EP] += m * b->ep_bytes;
            t->ep_s += m * (b->ep_fwd + b->ep_bwd);
            t->bytes[SIM_PLAN_CP] += m * b->cp_bytes;
            t->cp_s += m * (b->cp_fwd + b->cp_bwd);
        }
        t->act += pp_plan->chunk_stash[j] * extra[j];
        t->hide += pp_plan->bwd_i[j] + pp_plan->bwd_w[j];
        if (j + 1 < k)
            t->bytes[SIM_PLAN_PP] += m * pp_plan->out_bytes[j];
        if (j > 0)
            t->bytes[SIM_PLAN_PP] += m * pp_plan->out_bytes[j - 1];
    }
    t->act += t->ring;
    /* ranks outnumbering the cores: the reduction's rounds need the
     * cores the backward is using, so none of it hides */
    if (pl->cores > 0)
        t->hide = 0;
    /* the replicas are the dp x cp ranks of a tensor rank and stage (cp
     * fastest, tp apart); an expert's, the dp/ep ranks at its place of
     * every expert group, all-reduced whole (ZeRO 1 keeps their state) */
    int rn = dp * cp, rc = dp_cost(pl, tp, rn, zero, t->psi, t->hide, &t->dsec, &t->dbytes);
    if (!rc && t->xpsi > 0 && dp / ep > 1) {
        double xs, xb;
        rc = dp_cost(pl, tp * ep, dp / ep, 0, t->xpsi, 0, &xs, &xb);
        t->dsec += xs;
        t->dbytes += xb;
    }
    /* the update after the step: every rank at once, so at its share of
     * the cores where they are too few */
    t->dsec += ((zero >= 1 ? t->psi / rn : t->psi) + t->xpsi) * pl->update_s * pl->slow;
    t->bytes[SIM_PLAN_DP] = t->dbytes;
    return rc;
}

/* One (tp, pp, dp, schedule, m, sp) at the planner's cp and ep: the
 * pipeline is replayed once, every ZeRO stage priced on it. */
static int plan_pipeline(planner *pl, int tp, int pp, int dp, const pipe_spec *spec, int sp,
                         int mb)
{
    const sim_plan_query *q = pl->q;
    int cp = pl->cp, ep = pl->ep;
    double rows = (double)mb * pl->T / cp;
    sim_block_costs bc;
    char err[256];
    int measured[3] = { 0, 0, 0 };
    int rc = sim_block_costs_estimate(&q->model, mb, (int)pl->T, pl->rate, &bc, err, sizeof err);
    if (!rc && q->calib)
        rc = calib_blocks(pl, &bc, mb, tp, sp, measured);
    if (rc)
        return rc;
    int nb = bc.n;
    block_part *part = calloc((size_t)nb, sizeof *part);
    if (!part) {
        sim_block_costs_free(&bc);
        return WEFT_ENOMEM;
    }
    rc = price_blocks(pl, tp, sp, pp, rows, spec->m, measured, &bc, part);
    double lat, bw;
    int pstride = tp * cp * dp, dstride = tp * cp;
    pp_link(pl, pstride, pp, &lat, &bw);
    sim_pipe_plan pp_plan;
    if (!rc)
        rc = sim_pipe_plan_run(&bc, spec, "auto", 0, lat, bw, &pp_plan, err, sizeof err);
    if (rc) {
        free(part);
        sim_block_costs_free(&bc);
        return rc;
    }
    int p = spec->p;
    double tied = 4 * tied_copy(pl, tp, pp), bubble = 0;
    /* each chunk's arena beside its blocks' stashes, a slot */
    double *extra = calloc((size_t)pp_plan.k, sizeof *extra);
    if (!extra)
        rc = WEFT_ENOMEM;
    for (int j = 0; extra && j < pp_plan.k; j++) {
        int f = pp_plan.first[j], l = pp_plan.first[j + 1];
        int layers = l - f - (f == 0) - (l == nb) > 0;
        extra[j] = llama_chunk_extra(pl, tp, sp, rows, layers, f == 0);
    }
    /* Ranks sharing too few cores: replayed again with each computing
     * rank at its share of them (pipe_share.h), so that overlapping
     * stages slow each other and a bubble hands its core to the others */
    if (!rc && pl->cores > 0)
        rc = share_replay(pl, &pp_plan, part, lat, bw, pl->on_node > pp ? pl->on_node / pp : 1);
    double pipe_s = pp_plan.step;
    for (int r = 0; r < p; r++)
        bubble += pp_plan.bubble[r] / p;
    double pp_sums = 0;
    if (!rc)
        rc = pp_step_sums(pl, pstride, pp, &pp_sums);
    /* ZeRO over the dp x cp ranks; with experts divided, stage 1 at most
     * (weft-train refuses 2 and 3 with --ep) */
    int zmax = dp * cp > 1 ? (ep > 1 ? 1 : 3) : 0;
    for (int zero = 0; zero <= zmax && !rc; zero++) {
        sim_plan_entry e = { .tp = tp, .pp = pp, .dp = dp, .sp = sp, .zero = zero,
                             .ep = ep, .cp = cp, .spec = *spec, .micro_rows = (int)rows,
                             .pipe_s = pipe_s, .bubble = bubble };
        e.link[SIM_PLAN_TP] = group_link(q->topo, q->ranks, 1, tp);
        e.link[SIM_PLAN_PP] = group_link(q->topo, q->ranks, pstride, pp > 1 ? 2 : 1);
        /* the gradients' group: the dp x cp ranks of a tensor rank and stage */
        e.link[SIM_PLAN_DP] = group_link(q->topo, q->ranks, tp, dp * cp);
        e.link[SIM_PLAN_EP] = group_link(q->topo, q->ranks, dstride, ep);
        e.link[SIM_PLAN_CP] = group_link(q->topo, q->ranks, tp, cp);
        double worst_dp = 0;
        for (int r = 0; r < p && !rc; r++) {
            rank_part t;
            rc = rank_totals(pl, &pp_plan, part, extra, r, tp, dp, zero, &t);
            if (tied > 0 && (r == 0 || r == p - 1)) {
                /* the tied embedding's gradient summed between the ends */
                t.bytes[SIM_PLAN_PP] += tied;
                t.dsec += lat + (bw > 0 ? tied / bw : 0);
            }
            double state = sim_plan_zero_bytes(t.psi, zero, dp * cp, q->optim_bytes) +
                           (8 + q->optim_bytes) * t.xpsi;
            if (state + t.act > e.mem_bytes) {
                e.mem_bytes = state + t.act;
                e.state_bytes = state;
                e.act_bytes = t.act;
            }
            if (t.dsec > worst_dp)
                worst_dp = t.dsec;
            for (int d = 0; d < SIM_PLAN_DIMS; d++)
                if (t.bytes[d] > e.bytes[d])
                    e.bytes[d] = t.bytes[d];
            e.tp_s = t.tp_s > e.tp_s ? t.tp_s : e.tp_s;
            e.ep_s = t.ep_s > e.ep_s ? t.ep_s : e.ep_s;
            e.cp_s = t.cp_s > e.cp_s ? t.cp_s : e.cp_s;
        }
        e.dp_s = worst_dp;
        e.step_s = e.pipe_s + worst_dp + pp_sums;
        e.fits = q->mem <= 0 || e.mem_bytes <= q->mem;
        if (!rc)
            rc = add_entry(pl->out, &e);
    }
    sim_pipe_plan_free(&pp_plan);
    free(extra);
    free(part);
    sim_block_costs_free(&bc);
    return rc;
}

static int by_step(const void *a, const void *b)
{
    const sim_plan_entry *x = a, *y = b;
    if (x->step_s != y->step_s)
        return x->step_s < y->step_s ? -1 : 1;
    if (x->mem_bytes != y->mem_bytes)
        return x->mem_bytes < y->mem_bytes ? -1 : 1;
    int kx[] = { x->tp, x->pp, x->spec.kind, x->spec.m, x->sp, x->zero, x->cp, x->ep };
    int ky[] = { y->tp, y->pp, y->spec.kind, y->spec.m, y->sp, y->zero, y->cp, y->ep };
    for (int i = 0; i < 8; i++)
        if (kx[i] != ky[i])
            return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* Whether a degree is one the query asks for: 0 none (1 only), -1 every
 * one, N that one. */
static int wanted(int want, int d)
{
    return want < 0 || d == (want > 0 ? want : 1);
}

/* Context parallelism of cp ranks as weft-train runs it: the sequence cut
 * into 2 cp chunks, not with experts. */
static int cp_applies(const sim_plan_query *q, int cp, int T)
{
    if (!wanted(q->cp, cp))
        return 0;
    return cp == 1 || (q->model.experts <= 0 && T % (2 * cp) == 0);
}

/* Expert groups of ep data-parallel ranks (a tensor rank's, tp apart,
 * under --tp): ep divides the experts, and weft-train refuses --ep with
 * --cp. */
static int ep_applies(const sim_plan_query *q, int ep, int cp)
{
    if (!wanted(q->ep, ep))
        return 0;
    return ep == 1 || (q->model.experts > 0 && q->model.experts % ep == 0 && cp == 1);
}

/* The schedules a pipeline of p stages with m micro-batches can run over
 * blocks blocks: every kind for p >= 2 (interleaved with 2 chunks a rank
 * where m is a multiple of p and there are blocks enough), one plain
 * forward and backward for p = 1. */
static int plan_layout(planner *pl, int tp, int pp, int dp, int blocks)
{
    const sim_plan_query *q = pl->q;
    int b = (q->batch + dp - 1) / dp, rc = 0;
    int ms[3] = { pp, 2 * pp, 4 * pp }, nm = pp > 1 ? 3 : 1;
    for (int mi = 0; mi < nm && !rc; mi++) {
        int m = ms[mi];
        if (m > b)
            break;
        int mb = (b + m - 1) / m;
        static const int kinds[] = { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZB };
        for (int ki = 0; ki < 4 && !rc; ki++) {
            pipe_spec s = { kinds[ki], pp, m, kinds[ki] == PIPE_INTERLEAVED ? 2 : 1 };
            if (pp == 1 && kinds[ki] != PIPE_1F1B)
                continue;
            if (kinds[ki] == PIPE_INTERLEAVED && (m % pp || 2 * pp > blocks))
                continue;
            /* weft-train refuses --sp with --cp (both split the sequence) */
            int sps = tp > 1 && pl->cp == 1;
            for (int sp = 0; sp <= sps && !rc; sp++) {
                if (sp && ((long)mb * (long)pl->T) % tp)
                    continue;
                rc = plan_pipeline(pl, tp, pp, dp, &s, sp, mb);
            }
        }
    }
    return rc;
}

int sim_plan_run(const sim_plan_query *q, sim_plan *out, char *err, size_t len)
{
    if (!out)
        return WEFT_EINVAL;
    memset(out, 0, sizeof *out);
    out->best = out->smallest = -1;
    if (!q || !q->topo)
        return fail(err, len, "no query or topology");
    if ((q->model.type != WEFT_MODEL_GPT && q->model.type != WEFT_MODEL_LLAMA) ||
        weft_model_config_check(&q->model))
        return fail(err, len, "the planner takes a GPT (gpt:vocab=..,ctx=..,layers=..,heads=..,"
                              "dim=..) or a Llama (llama:...)");
    if (q->ranks < 1 || q->batch < 1 || q->gflops <= 0 || q->optim_bytes < 0)
        return fail(err, len, "need ranks >= 1, batch >= 1 and gflops > 0");
    if (q->seq > q->model.ctx)
        return fail(err, len, "the sequence is longer than the model's ctx");
    int moe = q->model.experts > 0;
    if (q->ep > 1 && !moe)
        return fail(err, len, "expert parallelism needs a model with experts");
    if (q->cp > 1 && moe)
        return fail(err, len, "context parallelism with experts: weft-train refuses it");
    planner pl = { .out = out, .topo = *q->topo, .lq = *q };
    if (q->calib && q->calib->cores > 0 && pl.topo.cpu_cores > 0) /* a topology of cores */
        pl.topo.cpu_cores = q->calib->cores;
    pl.lq.topo = &pl.topo;
    pl.q = q = &pl.lq;
    pl.T = q->seq > 0 ? q->seq : q->model.ctx;
    pl.C = q->model.d_model;
    pl.V = q->model.vocab;
    pl.H = q->model.n_head;
    int rpn = q->topo->ranks_per_node, on_node = q->ranks < rpn ? q->ranks : rpn;
    /* a rank runs cores / ranks threads, at least one, on a core of its own
     * while it computes (plan_pipeline bounds the node's total) */
    double cores = q->topo->cpu_cores;
    pl.rate = q->gflops * (cores > on_node ? cores / on_node : 1);
    pl.cores = cores > 0 && cores < on_node ? cores : 0;
    pl.on_node = on_node;
    pl.slow = pl.cores > 0 ? on_node / pl.cores : q->gflops / pl.rate;
    int blocks = weft_model_block_count(&q->model), rc = 0;
    if (q->calib && pl.cores > 0) {
        pl.sync = sim_calib_sync(q->calib, on_node);
        pl.chain = sim_calib_chain(q->calib, on_node);
        pl.msg_cpu = sim_calib_msg_cpu(q->calib, on_node);
        pl.msg_per = sim_calib_msg_cpu_per(q->calib, on_node);
    }
    if (q->calib) {
        rc = sim_calib_update_get(q->calib, q->optim_bytes, train_model_param_count(&q->model),
                                  &pl.update_s);
        rc = rc < 0 ? -rc : 0;
    }
    for (int tp = 1; tp <= q->ranks && !rc; tp++) {
        if (q->ranks % tp || !tp_splits(&q->model, tp))
            continue;
        for (int pp = 1; pp <= q->ranks / tp && !rc; pp++) {
            if ((q->ranks / tp) % pp || pp > blocks)
                continue;
            int rest = q->ranks / (tp * pp);
            for (int cp = 1; cp <= rest && !rc; cp++) {
                int dp = rest / cp;
                if (rest % cp || !cp_applies(q, cp, (int)pl.T) || dp > q->batch)
                    continue;
                for (int ep = 1; ep <= dp && !rc; ep++) {
                    if (dp % ep || !ep_applies(q, ep, cp))
                        continue;
                    pl.cp = cp, pl.ep = ep, pl.pp = pp;
                    rc = plan_layout(&pl, tp, pp, dp, blocks);
                }
            }
        }
    }
    free(pl.memo);
    if (rc) {
        snprintf(err, len, "pricing a layout failed: %s", weft_strerror(rc));
        sim_plan_free(out);
        out->best = out->smallest = -1;
        return rc;
    }
    if (out->n)
        qsort(out->e, (size_t)out->n, sizeof *out->e, by_step);
    for (int i = 0; i < out->n; i++) {
        if (out->e[i].fits && out->best < 0)
            out->best = i;
        if (out->smallest < 0 || out->e[i].mem_bytes < out->e[out->smallest].mem_bytes)
            out->smallest = i;
    }
    return 0;
}

void sim_plan_free(sim_plan *p)
{
    if (p) {
        free(p->e);
        memset(p, 0, sizeof *p);
    }
}

int sim_plan_entry_format(const sim_plan_entry *e, char *buf, size_t len)
{
    char name[32];
    pipe_spec_name(&e->spec, name, sizeof name);
    char more[32] = "";
    int at = e->ep > 1 ? snprintf(more, sizeof more, " ep=%d", e->ep) : 0;
    if (e->cp > 1)
        snprintf(more + at, sizeof more - (size_t)at, " cp=%d", e->cp);
    return snprintf(buf, len, "tp=%d pp=%d dp=%d sp=%d schedule=%s m=%d zero=%d step_ms=%.3f "
                    "mem_bytes=%.0f%s", e->tp, e->pp, e->dp, e->sp, name, e->spec.m, e->zero,
                    1e3 * e->step_s, e->mem_bytes, more);
}
