/* Building the simulated schedules, and finding their symmetry.
 *
 * Folding: if shifting every rank by P maps the topology onto itself (P is
 * a multiple of a node, and of a pod or a cluster when those levels have
 * more than one member) and maps every schedule onto the shifted rank's
 * schedule (same rounds, same kinds, same lengths, peers shifted by P),
 * then all ranks congruent mod P start alike and stay alike for the whole
 * run: their rounds start at the same times and their messages see the
 * same link loads. Simulating ranks 0..P-1, with a message to rank q going
 * to q mod P over the links of q mod P, is then exact. Ring and recursive
 * doubling are symmetric this way; trees are not. */
#include "sim/prog.h"
#include "coll/sched/nccl.h"

#include <stdlib.h>
#include <string.h>

/* The simulator-only generators, from the table (coll/algo_table.h). */
static const struct {
    int (*build)(weft_sched *s, const sched_params *p, const sched_nccl *o);
    unsigned kinds;
} sim_gens[SIM_ALGO_COUNT - SIM_ALGO_PS - 1] = {
#define SIM_GEN(id, name, build, kinds) { build, kinds },
    COLL_SIM_ALGOS(SIM_GEN)
#undef SIM_GEN
};

int sim_algo_has(int algo, weft_coll_kind kind)
{
    if (algo == SIM_ALGO_PS)
        return kind == WEFT_COLL_ALLREDUCE;
    if (algo > SIM_ALGO_PS && algo < SIM_ALGO_COUNT)
        return (unsigned)kind < WEFT_COLL_KIND_COUNT &&
               (sim_gens[algo - SIM_ALGO_PS - 1].kinds >> kind & 1);
    return algo >= 0 && algo < WEFT_ALGO_COUNT && sched_has((weft_algo)algo, kind);
}

int sim_sched_build(weft_sched *s, const sim_job *j, const sched_params *p)
{
    if (j->algo < WEFT_ALGO_COUNT)
        return sched_build(s, (weft_algo)j->algo, p);
    sched_reset(s);
    if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks || p->esize == 0)
        return WEFT_EINVAL;
    int rc;
    if (j->algo == SIM_ALGO_PS)
        rc = sim_sched_ps(s, p, j->ps_servers);
    else if (j->algo > SIM_ALGO_PS && j->algo < SIM_ALGO_COUNT) {
        sched_nccl o = { .channels = j->channels ? j->channels : j->topo->channels,
                         .ranks_per_node = j->topo->ranks_per_node };
        rc = sim_gens[j->algo - SIM_ALGO_PS - 1].build(s, p, &o);
    } else
        rc = WEFT_EINVAL;
    sched_end_round(s);
    return rc ? rc : s->err;
}

static sched_params params(const sim_job *j, uint64_t count, int rank)
{
    sched_params sp = { .kind = j->kind, .rank = rank, .nranks = j->nranks, .root = 0,
                        .count = count, .esize = j->esize, .inplace = 0,
                        .chunk_bytes = j->chunk_bytes, .host = j->host };
    return sp;
}

int64_t sim_count_ops(const sim_job *j, uint64_t count, uint32_t *widest)
{
    weft_sched s;
    sched_init(&s);
    sched_params sp = params(j, count, 0);
    int rc = sim_sched_build(&s, j, &sp);
    int64_t n = rc ? rc : (int64_t)s.nops;
    *widest = 0;
    for (uint32_t k = 0; k < s.nrounds && !rc; k++) {
        uint32_t w = 0;
        for (uint32_t i = k ? s.round_end[k - 1] : 0; i < s.round_end[k]; i++)
            w += s.ops[i].kind <= SOP_RECV_REDUCE;
        if (w > *widest)
            *widest = w;
    }
    sched_free(&s);
    return n;
}

/* The topology's own period: the smallest shift that preserves which
 * ranks share a node, a pod and a cluster. */
static int topo_period(const sim_topo *t, int p)
{
    int per = (p + t->clusters - 1) / t->clusters;
    if (t->clusters > 1)
        return per;
    if ((per + t->ranks_per_node - 1) / t->ranks_per_node > t->nodes_per_pod)
        return t->ranks_per_node * t->nodes_per_pod;
    return t->ranks_per_node;
}

/* 1 when b's schedule is a's shifted by `shift` ranks. */
static int same_shifted(const weft_sched *a, const weft_sched *b, int shift, int p,
                        uint64_t tol, uint64_t *dmax)
{
    if (a->nops != b->nops || a->nrounds != b->nrounds)
        return 0;
    if (memcmp(a->round_end, b->round_end, a->nrounds * sizeof *a->round_end))
        return 0;
    for (uint32_t i = 0; i < a->nops; i++) {
        const sched_op *x = &a->ops[i], *y = &b->ops[i];
        if (x->kind != y->kind)
            return 0;
        if (x->peer >= 0 && ((long)y->peer - x->peer - shift) % p != 0)
            return 0;
        uint64_t d = x->len > y->len ? x->len - y->len : y->len - x->len;
        if (d > tol)
            return 0;
        if (d > *dmax)
            *dmax = d;
    }
    return 1;
}

static int check_period(const sim_job *j, uint64_t count, int P, uint64_t tol,
                        uint64_t *dmax)
{
    int p = j->nranks, ok = 1;
    weft_sched a, b;
    sched_init(&a);
    sched_init(&b);
    for (int r = 0; r < P && ok; r++) {
        sched_params sa = params(j, count, r);
        if (sim_sched_build(&a, j, &sa)) {
            ok = 0;
            break;
        }
        /* the next period, and the last one (which wraps around) */
        int others[2] = { r + P, r + (p / P - 1) * P };
        for (int k = 0; k < 2 && ok; k++) {
            sched_params sb = params(j, count, others[k]);
            ok = sim_sched_build(&b, j, &sb) == 0 &&
                 same_shifted(&a, &b, others[k] - r, p, tol, dmax);
        }
    }
    sched_free(&a);
    sched_free(&b);
    return ok;
}

int sim_find_period(const sim_job *j, uint64_t count, uint64_t tol, int *exact,
                    uint64_t *max_dlen)
{
    int p = j->nranks, P0 = topo_period(j->topo, p);
    *exact = 0;
    *max_dlen = 0;
    if (j->no_fold || P0 < 1 || p % P0)
        return 0;
    /* try the topology's period and a few multiples of it */
    for (int P = P0, tries = 0; P <= p / 2 && tries < 3; P *= 2, tries++) {
        if (p % P)
            break;
        uint64_t d = 0;
        if (check_period(j, count, P, tol, &d)) {
            *exact = d == 0;
            *max_dlen = d;
            return P;
        }
    }
    return 0;
}

static int grow(void **a, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = realloc(*a, c * elem);
    if (!n)
        return WEFT_ENOMEM;
    *a = n;
    *cap = c;
    return 0;
}

int sim_prog_build(sim_prog *g, const sim_job *j, uint64_t count, int period)
{
    memset(g, 0, sizeof *g);
    g->p = j->nranks;
    g->period = period;
    g->nreps = period ? period : j->nranks;
    g->op0 = calloc((size_t)g->nreps + 1, sizeof *g->op0);
    g->rd0 = calloc((size_t)g->nreps + 1, sizeof *g->rd0);
    if (!g->op0 || !g->rd0)
        return WEFT_ENOMEM;
    weft_sched s;
    sched_init(&s);
    int rc = 0;
    for (int r = 0; r < g->nreps && !rc; r++) {
        sched_params sp = params(j, count, r);
        if ((rc = sim_sched_build(&s, j, &sp)))
            break;
        /* consecutive calls are one schedule: the k-th send to a peer
         * still meets its k-th receive */
        int calls = j->calls > 1 ? j->calls : 1;
        for (int k = 0; k < calls && !rc; k++) {
            if ((rc = grow((void **)&g->ops, &g->capops, g->nops + s.nops, sizeof *g->ops)) ||
                (rc = grow((void **)&g->rend, &g->caprend, g->nrend + s.nrounds,
                           sizeof *g->rend)))
                break;
            for (uint32_t i = 0; i < s.nops; i++) {
                sim_op *o = &g->ops[g->nops + i];
                o->len = s.ops[i].len;
                o->peer = s.ops[i].peer;
                o->kind = s.ops[i].kind;
            }
            for (uint32_t i = 0; i < s.nrounds; i++)
                g->rend[g->nrend + i] = s.round_end[i] + (uint32_t)k * s.nops;
            g->nops += s.nops;
            g->nrend += s.nrounds;
        }
        if (rc)
            break;
        g->op0[r + 1] = g->nops;
        g->rd0[r + 1] = g->nrend;
        if ((uint32_t)calls * s.nrounds > g->max_rounds)
            g->max_rounds = (uint32_t)calls * s.nrounds;
    }
    sched_free(&s);
    return rc;
}

void sim_prog_free(sim_prog *g)
{
    free(g->ops);
    free(g->rend);
    free(g->op0);
    free(g->rd0);
    memset(g, 0, sizeof *g);
}
