/* The layout planner (weft-sim plan): every layout listed once and valid,
 * memory as the ZeRO formulas by hand, the choice under a memory limit,
 * nothing fitting reported, tensor-parallel bytes as Megatron counts them;
 * a mixture of experts' FLOPs, memory and all-to-all bytes and context
 * parallelism's ring bytes and activations by hand;
 * the replay with ranks sharing cores against the own-core replay and the
 * work it must serialise. Nothing here is timed: predicted seconds are
 * only compared. */
#include "test.h"
#include "sim/pipe_costs.h"
#include "sim/pipe_share.h"
#include "sim/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODEL "gpt:vocab=256,ctx=32,layers=2,heads=4,dim=64"

static int query(sim_plan_query *q, sim_topo *t, const char *model, int ranks, int batch)
{
    memset(q, 0, sizeof *q);
    if (sim_topo_preset(t, "host") || weft_model_config_parse(model, &q->model))
        return -1;
    q->topo = t;
    q->ranks = ranks;
    q->batch = batch;
    q->gflops = 10;
    q->optim_bytes = 8;
    return 0;
}

static const sim_plan_entry *find(const sim_plan *p, int tp, int pp, int zero, int sp)
{
    for (int i = 0; i < p->n; i++) {
        const sim_plan_entry *e = &p->e[i];
        if (e->tp == tp && e->pp == pp && e->zero == zero && e->sp == sp)
            return e;
    }
    return NULL;
}

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b) + 1e-6;
}

/* Counts what the enumeration should list, independently of it. */
static int expected_count(int n, int heads, int blocks, int batch, int T)
{
    int count = 0;
    for (int tp = 1; tp <= n; tp++)
        for (int pp = 1; tp * pp <= n; pp++) {
            if (n % (tp * pp) || heads % tp || pp > blocks)
                continue;
            int dp = n / (tp * pp), b = (batch + dp - 1) / dp, zeros = dp > 1 ? 4 : 1;
            if (dp > batch)
                continue;
            for (int m = pp; m <= 4 * pp; m *= 2) {
                if (m > b || (pp == 1 && m > 1))
                    break;
                int mb = (b + m - 1) / m, sps = 1 + (tp > 1 && (mb * T) % tp == 0);
                int kinds = pp == 1 ? 1 : 3 + (m % pp == 0 && 2 * pp <= blocks);
                count += kinds * sps * zeros;
            }
        }
    return count;
}

TEST(enumeration)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, MODEL, 8, 16) == 0);
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    int blocks = weft_model_block_count(&q.model);
    CHECKF(p.n == expected_count(8, 4, blocks, 16, 32), "%d layouts", p.n);
    int seen_tp_pp[9][9] = { { 0 } };
    for (int i = 0; i < p.n; i++) {
        const sim_plan_entry *e = &p.e[i];
        CHECK(e->tp * e->pp * e->dp == 8 && 4 % e->tp == 0 && e->pp <= blocks);
        CHECK(e->spec.p == e->pp && e->spec.m >= 1 && e->spec.m <= (16 + e->dp - 1) / e->dp);
        CHECK(e->pp > 1 || (e->spec.m == 1 && e->spec.kind == PIPE_1F1B));
        CHECK(e->spec.kind != PIPE_INTERLEAVED || e->spec.m % e->pp == 0);
        CHECK(e->dp > 1 || e->zero == 0);
        CHECK(!e->sp || (e->tp > 1 && e->micro_rows % e->tp == 0));
        CHECK(e->step_s > 0 && e->mem_bytes > 0 && e->fits);
        CHECK(i == 0 || p.e[i - 1].step_s <= e->step_s);
        CHECK(e->tp == 1 ? e->bytes[SIM_PLAN_TP] == 0 : e->bytes[SIM_PLAN_TP] > 0);
        CHECK(e->pp == 1 ? e->bytes[SIM_PLAN_PP] == 0 : e->bytes[SIM_PLAN_PP] > 0);
        CHECK(e->dp == 1 ? e->bytes[SIM_PLAN_DP] == 0 : e->bytes[SIM_PLAN_DP] > 0);
        seen_tp_pp[e->tp][e->pp]++;
        for (int j = 0; j < i; j++) {
            const sim_plan_entry *o = &p.e[j];
            CHECK(!(o->tp == e->tp && o->pp == e->pp && o->spec.kind == e->spec.kind &&
                    o->spec.m == e->spec.m && o->sp == e->sp && o->zero == e->zero));
        }
    }
    /* every factorisation the heads allow: tp 1, 2, 4 by pp 1, 2, 4 (8
     * blocks? no: 4 blocks, so pp 8 is out) */
    int want[][2] = { { 1, 1 }, { 1, 2 }, { 1, 4 }, { 2, 1 }, { 2, 2 }, { 2, 4 }, { 4, 1 },
                      { 4, 2 } };
    for (unsigned i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(seen_tp_pp[want[i][0]][want[i][1]] > 0, "tp %d pp %d", want[i][0], want[i][1]);
    CHECK(seen_tp_pp[1][8] == 0 && seen_tp_pp[8][1] == 0);
    CHECK(p.best == 0);
    sim_plan_free(&p);
    /* tp = 3 where the heads allow it */
    CHECK(query(&q, &t, "gpt:vocab=100,ctx=16,layers=3,heads=3,dim=48", 6, 12) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    CHECK(find(&p, 3, 1, 0, 0) && find(&p, 3, 2, 0, 0) && find(&p, 3, 1, 1, 0));
    CHECK(p.n == expected_count(6, 3, 5, 12, 16));
    sim_plan_free(&p);
}

/* Parameters of one tensor rank, by hand from the tensors of
 * weft_model_create_tp. */
static double gpt_params(double V, double ctx, double L, double C, double tp, int pp_copy)
{
    double vp = ceil(V / tp);
    double embed = vp * C + ctx * C;
    double block = 12 * C * C / tp + 7 * C / tp + 6 * C;
    return embed + L * block + 2 * C + (pp_copy ? vp * C : 0);
}

TEST(memory_formula)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, "gpt:vocab=257,ctx=32,layers=2,heads=4,dim=64", 8, 8) == 0);
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    double C = 64, T = 32, rows = T, L = 2, H = 4, V = 257;
    /* tp 1, pp 1, dp 8: the whole model on every rank, one sequence each */
    double psi = gpt_params(V, 32, L, C, 1, 0);
    CHECK(psi == 257 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    /* backward's scratch, once: the residual's, the branch's, q k v's,
     * attention's statistics' and the MLP's gradients (train_gpt_layout) */
    double act = 4 * rows * C + L * 4 * (16 * rows * C + rows * H) + 4 * rows * (2 * C + 2 * V) +
                 4 * rows * (9 * C + 2 * H);
    double want_state[4] = { 16 * psi, 8 * psi + 8 * psi / 8, 4 * psi + 12 * psi / 8,
                             16 * psi / 8 };
    for (int z = 0; z < 4; z++) {
        const sim_plan_entry *e = find(&p, 1, 1, z, 0);
        CHECK(e != NULL);
        if (!e)
            continue;
        CHECKF(near(e->state_bytes, want_state[z]), "zero %d: %.0f want %.0f", z,
               e->state_bytes, want_state[z]);
        CHECK(near(e->state_bytes, sim_plan_zero_bytes(psi, z, 8, 8)));
        CHECKF(near(e->act_bytes, act), "act %.0f want %.0f", e->act_bytes, act);
        CHECK(near(e->mem_bytes, want_state[z] + act));
        CHECK(e->micro_rows == 32);
    }
    /* tp 2 (vocabulary 257 padded to 258), dp 4: half the matrices a rank */
    const sim_plan_entry *e = find(&p, 2, 1, 2, 0);
    double psi2 = gpt_params(V, 32, L, C, 2, 0);
    CHECK(psi2 == 129 * 64 + 32 * 64 + 2 * (6 * 64 * 64 + 3.5 * 64 + 6 * 64) + 2 * 64);
    CHECK(e && near(e->state_bytes, 4 * psi2 + 12 * psi2 / 4));
    /* SGD's momentum: 4 bytes a parameter */
    CHECK(sim_plan_zero_bytes(100, 0, 4, 4) == 1200 && sim_plan_zero_bytes(100, 3, 4, 4) == 300);
    CHECK(sim_plan_zero_bytes(100, 1, 4, 4) == 900 && sim_plan_zero_bytes(100, 2, 4, 4) == 600);
    /* a pipeline: the last stage keeps the tied copy, so the fullest rank
     * holds at least that stage's share and no more than the whole */
    e = find(&p, 1, 2, 0, 0);
    CHECK(e && e->state_bytes > 16 * (V * C + 2 * C) && e->state_bytes < 16 * psi);
    sim_plan_free(&p);
}

TEST(tensor_bytes)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, MODEL, 2, 4) == 0);
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    /* tp 2, pp 1, one micro-batch of 4 sequences: embedding 1 all-reduce
     * of rows x C, each block 2 + 2, the head's input gradient 1, the
     * cross-entropy 3 floats a row */
    double rows = 4 * 32, x = 4 * rows * 64, L = 2;
    const sim_plan_entry *e = find(&p, 2, 1, 0, 0);
    CHECK(e && near(e->bytes[SIM_PLAN_TP], x + L * 4 * x + x + 4 * 3 * rows));
    /* sequence parallel: an all-gather and a reduce-scatter for each */
    e = find(&p, 2, 1, 0, 1);
    CHECK(e && near(e->bytes[SIM_PLAN_TP], 2 * x + L * 8 * x + 2 * x + 4 * 3 * rows));
    CHECK(e && e->link[SIM_PLAN_TP] == LC_INTRA && e->link[SIM_PLAN_DP] == -1);
    /* dp 2: the gradient all-reduce of everything, ZeRO 1 adds the gather */
    double psi = gpt_params(256, 32, L, 64, 1, 0);
    e = find(&p, 1, 1, 0, 0);
    CHECK(e && near(e->bytes[SIM_PLAN_DP], 4 * psi));
    e = find(&p, 1, 1, 1, 0);
    CHECK(e && near(e->bytes[SIM_PLAN_DP], 8 * psi));
    sim_plan_free(&p);
}

TEST(memory_limit)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, MODEL, 8, 16) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    double lo = p.e[0].mem_bytes, hi = lo;
    for (int i = 0; i < p.n; i++) {
        lo = fmin(lo, p.e[i].mem_bytes);
        hi = fmax(hi, p.e[i].mem_bytes);
    }
    sim_plan_free(&p);
    CHECK(lo < hi);
    q.mem = (lo + hi) / 2;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    int fit = 0, over = 0;
    for (int i = 0; i < p.n; i++) {
        CHECK(p.e[i].fits == (p.e[i].mem_bytes <= q.mem));
        fit += p.e[i].fits;
        over += !p.e[i].fits;
    }
    CHECK(fit > 0 && over > 0);
    CHECK(p.best >= 0 && p.e[p.best].fits && p.e[p.best].mem_bytes <= q.mem);
    for (int i = 0; p.best >= 0 && i < p.best; i++)
        CHECK(!p.e[i].fits);
    for (int i = p.best + 1; p.best >= 0 && i < p.n; i++)
        CHECK(p.e[i].step_s >= p.e[p.best].step_s);
    char line[256];
    CHECK(sim_plan_entry_format(&p.e[p.best], line, sizeof line) > 0);
    char want[64];
    snprintf(want, sizeof want, "tp=%d pp=%d dp=%d ", p.e[p.best].tp, p.e[p.best].pp,
             p.e[p.best].dp);
    CHECKF(strncmp(line, want, strlen(want)) == 0 && strstr(line, " zero=") &&
           strstr(line, " step_ms=") && strstr(line, " mem_bytes="), "%s", line);
    sim_plan_free(&p);
    /* under the smallest layout: nothing fits, which is not an error */
    q.mem = lo - 1;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    CHECK(p.n > 0 && p.best == -1 && p.smallest >= 0);
    for (int i = 0; i < p.n; i++)
        CHECK(!p.e[i].fits);
    CHECK(p.smallest >= 0 && p.e[p.smallest].mem_bytes == lo);
    sim_plan_free(&p);
}

TEST(bad_query)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256] = "";
    CHECK(query(&q, &t, "mlp:784-128-10", 2, 4) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == WEFT_EINVAL && strstr(err, "GPT"));
    CHECK(query(&q, &t, MODEL, 0, 4) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == WEFT_EINVAL);
    CHECK(query(&q, &t, MODEL, 2, 4) == 0);
    q.seq = 33;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == WEFT_EINVAL && strstr(err, "ctx"));
    /* more replicas than sequences: those layouts are left out */
    CHECK(query(&q, &t, MODEL, 8, 2) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    for (int i = 0; i < p.n; i++)
        CHECK(p.e[i].dp <= 2);
    CHECK(p.n == expected_count(8, 4, 4, 2, 32));
    sim_plan_free(&p);
}

/* Whether some layout has this tensor-parallel degree. */
static int has_tp(const sim_plan *p, int tp)
{
    for (int i = 0; i < p->n; i++)
        if (p->e[i].tp == tp)
            return 1;
    return 0;
}

/* A Llama: tp only where model_llama.c splits it (heads and ffn divisible,
 * kv heads a multiple or a divisor of tp), its parameters from its own
 * shape, its whole k and v summed over the tensor group once a step. */
TEST(llama)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    /* 6 heads over 3 kv heads: tp 3 splits them, tp 6 shares them, tp 2
     * can do neither */
    CHECK(query(&q, &t, "llama:vocab=256,ctx=16,layers=3,heads=6,kv_heads=3,dim=48,ffn=48", 6,
                12) == 0);
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    CHECK(has_tp(&p, 1) && has_tp(&p, 3) && has_tp(&p, 6) && !has_tp(&p, 2));
    CHECK(p.best >= 0 && p.e[p.best].tp != 2);
    sim_plan_free(&p);
    /* a hidden width of 50 does not split in 4 */
    CHECK(query(&q, &t, "llama:vocab=256,ctx=16,layers=2,heads=4,dim=32,ffn=50", 4, 4) == 0);
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0);
    CHECK(has_tp(&p, 2) && !has_tp(&p, 4));
    sim_plan_free(&p);

    CHECK(query(&q, &t, "llama:vocab=257,ctx=32,layers=2,heads=4,kv_heads=2,dim=64,ffn=96", 8,
                8) == 0);
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    double D = 64, kv = 32, F = 96, H = 4, V = 257, L = 2, rows = 32;
    double block = 2 * D + 2 * D * D + 2 * D * kv + 3 * D * F;
    double psi = 2 * V * D + L * block + D;
    /* the blocks' stashes; the final norm, its scale, logits and
     * probabilities; backward's scratch and the rotary tables, once */
    double act = 4 * rows * D + L * 4 * rows * (6 * D + 2 * kv + 3 * F + 2 + 2 * H) +
                 4 * rows * (D + 1 + 2 * V) + 4 * rows * (5 * D + 2 * kv + 2 * H + 3 * F) +
                 4 * 32 * D / H;
    for (int z = 0; z < 4; z++) {
        const sim_plan_entry *e = find(&p, 1, 1, z, 0);
        CHECK(e && near(e->state_bytes, sim_plan_zero_bytes(psi, z, 8, 8)));
        CHECKF(e && near(e->act_bytes, act), "act %.0f want %.0f", e ? e->act_bytes : 0, act);
    }
    /* tp 2 splits the 2 kv heads; tp 4 keeps k and v whole on every rank
     * and sums their gradients: 2 all-reduces of D x kv a layer */
    double vp2 = 129, vp4 = 65;
    double psi2 = 2 * vp2 * D + L * ((2 * D * D + 3 * D * F + 2 * D * kv) / 2 + 2 * D) + D;
    double psi4 = 2 * vp4 * D + L * ((2 * D * D + 3 * D * F) / 4 + 2 * D * kv + 2 * D) + D;
    const sim_plan_entry *e2 = find(&p, 2, 1, 0, 0), *e4 = find(&p, 4, 1, 0, 0);
    CHECK(e2 && near(e2->state_bytes, 16 * psi2));
    CHECK(e4 && near(e4->state_bytes, 16 * psi4));
    if (e2 && e4) {
        /* one micro-batch of 8 / dp sequences */
        double x2 = 4 * e2->micro_rows * D, x4 = 4 * e4->micro_rows * D;
        CHECK(near(e2->bytes[SIM_PLAN_TP], x2 + L * 4 * x2 + x2 + 4 * 3 * e2->micro_rows));
        CHECK(near(e4->bytes[SIM_PLAN_TP],
                   x4 + L * 4 * x4 + x4 + 4 * 3 * e4->micro_rows + L * 2 * 4 * D * kv));
    }
    sim_plan_free(&p);
}

/* The 1F1B layout of tp 1, pp 2, ZeRO 0 without sequence parallelism. */
static const sim_plan_entry *find_1f1b(const sim_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        const sim_plan_entry *e = &p->e[i];
        if (e->tp == 1 && e->pp == 2 && e->zero == 0 && e->spec.kind == PIPE_1F1B)
            return e;
    }
    return NULL;
}

/* A tied Llama's last stage keeps a copy of the embedding and sums its
 * gradient with the first; an untied one's lm_head is its own. */
TEST(llama_tied)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    double D = 32, V = 256, psi[2] = { 0 }, pp_bytes[2] = { 0 }, cut[2] = { 0 };
    for (int tied = 0; tied < 2; tied++) {
        char model[128];
        snprintf(model, sizeof model,
                 "llama:vocab=256,ctx=16,layers=2,heads=4,dim=32,ffn=48,tied=%d", tied);
        CHECK(query(&q, &t, model, 2, 4) == 0);
        CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
        const sim_plan_entry *e = find(&p, 1, 1, 0, 0), *e2 = find_1f1b(&p);
        CHECK(e && e2);
        if (e && e2) {
            psi[tied] = e->state_bytes / 16;
            pp_bytes[tied] = e2->bytes[SIM_PLAN_PP];
            /* each stage sends or receives one cut's activations a micro-batch */
            cut[tied] = e2->spec.m * 4.0 * e2->micro_rows * D;
        }
        sim_plan_free(&p);
    }
    CHECK(near(psi[0] - psi[1], V * D));
    CHECKF(near(pp_bytes[0], cut[0]), "%.0f want %.0f", pp_bytes[0], cut[0]);
    CHECKF(near(pp_bytes[1], cut[1] + 4 * V * D), "%.0f want %.0f", pp_bytes[1],
           cut[1] + 4 * V * D);
}

/* The replay with shared cores: with a core for every rank it is the
 * library's own replay; on one core it serialises all the work (nothing
 * idles while a rank can compute); replicas share the cores as ranks;
 * a wait adds its time and takes no core. */
TEST(shared_cores_replay)
{
    static const int kinds[][2] = { { PIPE_GPIPE, 1 }, { PIPE_1F1B, 1 },
                                    { PIPE_INTERLEAVED, 2 }, { PIPE_ZB, 1 } };
    for (int ki = 0; ki < 4; ki++) {
        pipe_spec spec = { kinds[ki][0], 4, 8, kinds[ki][1] };
        pipe_sched s;
        CHECK(pipe_sched_build(&s, &spec) == 0);
        int k = spec.p * spec.v;
        double f[8], bi[8], bw[8], ob[8], busy[2][4], bub[2][4], total = 0;
        int peak[2][4];
        for (int j = 0; j < k; j++) {
            f[j] = 1e-3 * (1 + j % 3), bi[j] = 1.5e-3 * (1 + j % 2), bw[j] = 0.5e-3 * (1 + j);
            ob[j] = 1e4;
            total += spec.m * (f[j] + bi[j] + bw[j]);
        }
        pipe_costs own = { f, bi, bw, ob, 1e-5, 1e9 };
        pipe_result a = { 0, busy[0], bub[0], peak[0] }, b = { 0, busy[1], bub[1], peak[1] };
        CHECK(pipe_sched_replay(&s, &own, &a) == 0);
        for (double cores = 0; cores <= 4; cores += 4) {
            pipe_share_costs sh = { f, bi, bw, NULL, NULL, NULL, ob, 1e-5, 1e9, cores, 1 };
            CHECK(pipe_share_replay(&s, &sh, &b) == 0);
            CHECKF(fabs(a.step - b.step) < 1e-12, "kind %d cores %.0f: %.9f want %.9f",
                   spec.kind, cores, b.step, a.step);
            for (int r = 0; r < 4; r++)
                CHECK(fabs(busy[0][r] - busy[1][r]) < 1e-12 && peak[0][r] == peak[1][r]);
        }
        /* one core, free links: every second of work one after another */
        pipe_share_costs one = { f, bi, bw, NULL, NULL, NULL, ob, 0, 0, 1, 1 };
        CHECK(pipe_share_replay(&s, &one, &b) == 0);
        CHECKF(fabs(b.step - total) < 1e-9, "kind %d: one core %.9f, the work %.9f", spec.kind,
               b.step, total);
        /* two cores for 4 ranks of 2 replicas each: between both bounds */
        pipe_share_costs two = { f, bi, bw, NULL, NULL, NULL, ob, 1e-5, 1e9, 2, 2 };
        CHECK(pipe_share_replay(&s, &two, &b) == 0);
        CHECKF(b.step >= total - 1e-9 && b.step >= a.step, "kind %d: %.9f", spec.kind, b.step);
        pipe_sched_free(&s);
    }
    /* one stage: its work at cores / replicas of a core, its wait beside */
    pipe_spec one = { PIPE_1F1B, 1, 1, 1 };
    pipe_sched s;
    CHECK(pipe_sched_build(&s, &one) == 0);
    double f = 2e-3, bi = 3e-3, bw = 1e-3, fh = 5e-4, ob = 0, busy, bub;
    int peak;
    pipe_result r = { 0, &busy, &bub, &peak };
    pipe_share_costs c = { &f, &bi, &bw, &fh, NULL, NULL, &ob, 0, 0, 2, 4 };
    CHECK(pipe_share_replay(&s, &c, &r) == 0);
    CHECKF(fabs(r.step - (2 * (f + bi + bw) + fh)) < 1e-12, "%.9f", r.step);
    CHECK(fabs(busy - (f + bi + bw)) < 1e-12 && peak == 1);
    pipe_sched_free(&s);
}

/* The layout of (tp, pp, ep, cp) at ZeRO stage zero, without sp. */
static const sim_plan_entry *find4(const sim_plan *p, int tp, int pp, int ep, int cp, int zero)
{
    for (int i = 0; i < p->n; i++) {
        const sim_plan_entry *e = &p->e[i];
        if (e->tp == tp && e->pp == pp && e->ep == ep && e->cp == cp && e->zero == zero &&
            !e->sp)
            return e;
    }
    return NULL;
}

/* A block's seconds at 1 GFLOP/s for 2 sequences of T tokens of width D:
 * its products (mm parameters a token) forward and for the weights'
 * gradients, attention's two T x T products forward. */
static void block_flops(const weft_model_config *c, double mm, double T, double D)
{
    sim_block_costs bc;
    char err[256];
    CHECK(sim_block_costs_estimate(c, 2, (int)T, 1, &bc, err, sizeof err) == 0);
    double rows = 2 * T, fwd = (2 * mm * rows + 4 * 2 * T * T * D) / 1e9;
    CHECKF(bc.n == 4 && near(bc.b[1].fwd, fwd), "%.9g want %.9g", bc.b[1].fwd, fwd);
    CHECK(near(bc.b[1].bwd_w, 2 * mm * rows / 1e9));
    sim_block_costs_free(&bc);
}

#define MOE "llama:vocab=256,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=48,experts=4," \
            "topk=2,moe_ffn=24,shared=1"

/* A mixture of experts priced by hand: a token's FLOPs through topk
 * experts and the shared one, E experts' parameters held (E/ep a rank
 * under --ep, each expert's width split under --tp, every expert at that
 * width under --ep with --tp), the router's record stashed, the
 * all-to-alls' bytes under --ep (at ep x tp over a tensor rank's expert
 * group, every tensor rank sending its rows) and the gate gradients in
 * the tensor all-reduce; ZeRO 2-3 not with --ep. */
TEST(moe_pricing)
{
    double D = 32, kv = 16, fe = 24, E = 4, K = 2, S = 1, V = 256, L = 2, H = 4, T = 16;
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, MOE, 4, 8) == 0);
    /* FLOPs: the products a token runs (q, o, k, v, the router, topk + shared experts) */
    block_flops(&q.model, 2 * D * D + 2 * D * kv + D * E + 3 * D * fe * (K + S), T, D);

    q.ep = -1;
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    double block = 2 * D + 2 * D * D + 2 * D * kv + D * E + 3 * D * fe * (E + S);
    double psi = 2 * V * D + L * block + D, xps = L * 3 * D * fe * E;
    const sim_plan_entry *e1 = find4(&p, 1, 1, 1, 1, 0), *e2 = find4(&p, 1, 1, 2, 1, 0);
    const sim_plan_entry *e4 = find4(&p, 1, 1, 4, 1, 0), *z1 = find4(&p, 1, 1, 2, 1, 1);
    CHECK(e1 && e2 && e4 && z1 && !find4(&p, 1, 1, 2, 1, 2));
    if (!e1 || !e2 || !e4 || !z1) {
        sim_plan_free(&p);
        return;
    }
    CHECKF(near(e1->state_bytes, 16 * psi), "%.0f want %.0f", e1->state_bytes, 16 * psi);
    /* ep 2: half the experts a rank, their state whole at ZeRO 1 */
    CHECK(near(e2->state_bytes, 16 * (psi - xps) + 16 * xps / 2));
    CHECK(near(e4->state_bytes, 16 * (psi - xps) + 16 * xps / 4));
    CHECK(near(z1->state_bytes, sim_plan_zero_bytes(psi - xps, 1, 4, 8) + 16 * xps / 2));
    /* dp 4: 2 sequences, one micro-batch */
    double rows = e1->micro_rows;
    CHECK(rows == 2 * T);
    double rec = 2 * rows * E + 4 * rows * K + 2 * E + 1 + rows * K * (2 * D + 3 * fe);
    /* backward's scratch: the dense one with the shared expert's width,
     * the gate gradients, the routed rows' and the scores' gradients */
    double scratch = 5 * D + 2 * kv + 2 * H + 3 * S * fe + K + K * (2 * D + 3 * fe) + E + K;
    double act = 4 * rows * D + L * 4 * (rows * (6 * D + 2 * kv + 3 * S * fe + 2 + 2 * H) + rec) +
                 4 * rows * (D + 1 + 2 * V) + 4 * rows * scratch + 4 * T * D / H;
    CHECKF(near(e1->act_bytes, act), "act %.0f want %.0f", e1->act_bytes, act);
    CHECK(near(e2->act_bytes, act));
    /* each MoE layer: counts all-gathered, 4 all-to-alls of rows x topk rows */
    double x = rows * K * D;
    CHECK(e1->bytes[SIM_PLAN_EP] == 0 && e1->ep_s == 0);
    CHECKF(near(e2->bytes[SIM_PLAN_EP], L * 4 * (4 * x / 2 + (E + 1))), "%.0f",
           e2->bytes[SIM_PLAN_EP]);
    CHECK(near(e4->bytes[SIM_PLAN_EP], L * 4 * (4 * x * 3 / 4 + 3 * (E + 1))));
    CHECK(e2->ep_s > 0 && e2->step_s > e2->pipe_s);
    /* --sp is listed (weft-train runs experts under it), and ep 2 x tp 2 */
    int sps = 0;
    for (int i = 0; i < p.n; i++) {
        CHECK(p.e[i].cp == 1);
        sps += p.e[i].sp && p.e[i].tp == 2;
    }
    CHECK(sps > 0);
    /* tp 2: every expert's width split, the router whole; the gate
     * gradients (topk a row) in the MLP's backward all-reduce */
    const sim_plan_entry *t2 = find4(&p, 2, 1, 1, 1, 0);
    CHECK(t2 != NULL);
    if (t2) {
        double b2 = (2 * D * D + 3 * D * S * fe) / 2 + 2 * D * kv / 2 + 2 * D + D * E +
                    3 * D * fe * E / 2;
        double psi2 = 2 * 128 * D + L * b2 + D, r2 = t2->micro_rows, x2 = 4 * r2 * D;
        CHECKF(near(t2->state_bytes, 16 * psi2), "%.0f want %.0f", t2->state_bytes, 16 * psi2);
        CHECK(near(t2->bytes[SIM_PLAN_TP], x2 + L * (4 * x2 + 4 * r2 * K) + x2 + 4 * 3 * r2));
        /* ep 2 x tp 2 (dp 2, one expert group a tensor rank): half the
         * experts a rank at their tp 2 width (the pipeline's divided as
         * well), the tensor rank's rows dispatched over its group */
        const sim_plan_entry *et = find4(&p, 2, 1, 2, 1, 0);
        CHECK(et != NULL && et->dp == 2 && !find4(&p, 2, 1, 2, 1, 2));
        if (et) {
            double re = et->micro_rows, xe = re * K * D;
            double xe2 = L * 3 * D * fe * E / 2;
            CHECKF(near(et->state_bytes, 16 * (psi2 - xe2) + 16 * xe2 / 2), "%.0f want %.0f",
                   et->state_bytes, 16 * (psi2 - xe2) + 16 * xe2 / 2);
            CHECK(near(et->bytes[SIM_PLAN_EP], L * 4 * (4 * xe / 2 + (E + 1))));
            CHECK(near(et->bytes[SIM_PLAN_TP], 4 * re * D * (2 + 4 * L) + L * 4 * re * K +
                                                   4 * 3 * re));
            CHECK(et->ep_s > 0 && et->tp_s > 0);
        }
    }
    sim_plan_free(&p);
    /* only ep 2 asked for; expert parallelism of a dense model refused */
    q.ep = 2;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == 0 && p.n > 0);
    int tps = 0;
    for (int i = 0; i < p.n; i++) {
        CHECK(p.e[i].ep == 2);
        tps += p.e[i].tp == 2;
    }
    CHECK(tps > 0);
    sim_plan_free(&p);
    CHECK(query(&q, &t, MODEL, 4, 8) == 0);
    q.ep = 2;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == WEFT_EINVAL && strstr(err, "experts"));
}

/* A GPT's GELU experts priced by hand (model_gpt.c): the MLP's four
 * tensors give way to the router and two C x fe matrices an expert (fc,
 * proj), no biases; a token's FLOPs through topk experts; E/ep experts a
 * rank under --ep, each expert's width split under --tp; the all-to-alls
 * under --ep and at ep x tp; the gate gradients in the tensor all-reduce. */
TEST(gpt_moe_pricing)
{
    double D = 32, fe = 24, E = 4, K = 2, V = 256, L = 2, T = 16, ctx = 16;
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, "gpt:vocab=256,ctx=16,layers=2,heads=4,dim=32,experts=4,topk=2,"
                        "moe_ffn=24", 4, 8) == 0);
    /* qkv, proj, the router, topk experts */
    block_flops(&q.model, 4 * D * D + D * E + 2 * D * fe * K, T, D);

    q.ep = -1;
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    double block = 4 * D * D + 4 * D + 4 * D + D * E + 2 * D * fe * E;
    double psi = V * D + ctx * D + L * block + 2 * D, xps = L * 2 * D * fe * E;
    const sim_plan_entry *e1 = find4(&p, 1, 1, 1, 1, 0), *e2 = find4(&p, 1, 1, 2, 1, 0);
    const sim_plan_entry *t2 = find4(&p, 2, 1, 1, 1, 0), *et = find4(&p, 2, 1, 2, 1, 0);
    CHECK(e1 && e2 && t2 && et);
    if (e1 && e2 && t2 && et) {
        CHECKF(near(e1->state_bytes, 16 * psi), "%.0f want %.0f", e1->state_bytes, 16 * psi);
        CHECK(near(e2->state_bytes, 16 * (psi - xps) + 16 * xps / 2));
        /* tp 2: the vocabulary, qkv, proj and each expert's width split */
        double b2 = (4 * D * D + 3 * D) / 2 + 5 * D + D * E + 2 * D * fe * E / 2;
        double psi2 = 128 * D + ctx * D + L * b2 + 2 * D;
        CHECKF(near(t2->state_bytes, 16 * psi2), "%.0f want %.0f", t2->state_bytes, 16 * psi2);
        double xe2 = L * 2 * D * fe * E / 2; /* ep 2 x tp 2: half the experts' slices */
        CHECK(near(et->state_bytes, 16 * (psi2 - xe2) + 16 * xe2 / 2));
        double x = e2->micro_rows * K * D, xe = et->micro_rows * K * D;
        CHECK(e1->bytes[SIM_PLAN_EP] == 0);
        CHECK(near(e2->bytes[SIM_PLAN_EP], L * 4 * (4 * x / 2 + (E + 1))));
        CHECK(near(et->bytes[SIM_PLAN_EP], L * 4 * (4 * xe / 2 + (E + 1))));
        /* the gate gradients (topk a row) ride in the MLP's input gradient's sum */
        double r2 = t2->micro_rows, x2 = 4 * r2 * D;
        CHECK(near(t2->bytes[SIM_PLAN_TP], x2 + L * (4 * x2 + 4 * r2 * K) + x2 + 4 * 3 * r2));
    }
    sim_plan_free(&p);
}

/* Context parallelism by hand: a rank's T/C tokens, its activations and
 * the ring's four buffers, the K/V blocks the ring carries (C - 1 forward,
 * C - 1 and C dK/dV sums backward, a layer), ZeRO over dp x cp; only
 * where 2C chunks cut the sequence, never with --sp or experts. */
TEST(cp_pricing)
{
    sim_plan_query q;
    sim_topo t;
    sim_plan p;
    char err[256];
    CHECK(query(&q, &t, MODEL, 4, 8) == 0);
    q.cp = -1;
    CHECKF(sim_plan_run(&q, &p, err, sizeof err) == 0, "%s", err);
    double C = 64, T = 32, L = 2, H = 4, V = 256, psi = gpt_params(V, T, L, C, 1, 0);
    int seen[5] = { 0 };
    for (int i = 0; i < p.n; i++) {
        const sim_plan_entry *e = &p.e[i];
        CHECK(e->tp * e->cp * e->dp * e->pp == 4 && (e->cp == 1 || !e->sp) && e->ep == 1);
        CHECK(e->cp == 1 ? e->bytes[SIM_PLAN_CP] == 0 : e->bytes[SIM_PLAN_CP] > 0);
        seen[e->cp]++;
    }
    CHECK(seen[1] && seen[2] && seen[4] && !seen[3]);
    for (int z = 0; z < 4; z++) {
        const sim_plan_entry *e = find4(&p, 1, 1, 1, 2, z);
        CHECK(e != NULL);
        if (!e)
            continue;
        /* dp 2: 4 sequences, one micro-batch, 16 of each one's 32 tokens */
        double rows = 4 * T / 2, kvb = 4 * 2 * rows * C;
        CHECK(e->dp == 2 && e->micro_rows == rows);
        CHECK(near(e->state_bytes, sim_plan_zero_bytes(psi, z, 4, 8)));
        double act = 4 * rows * C + L * 4 * (16 * rows * C + rows * H) +
                     4 * rows * (2 * C + 2 * V) + 4 * rows * (9 * C + 2 * H) + 4 * kvb;
        CHECKF(near(e->act_bytes, act), "act %.0f want %.0f", e->act_bytes, act);
        CHECKF(near(e->bytes[SIM_PLAN_CP], L * kvb * (3 * 2 - 2) + 4), "%.0f",
               e->bytes[SIM_PLAN_CP]);
        CHECK(e->cp_s > 0);
    }
    sim_plan_free(&p);
    /* 2C chunks of 32 tokens: cp 2 and 4 fit, 3 never; experts refuse cp */
    CHECK(query(&q, &t, MOE, 4, 8) == 0);
    q.cp = 2;
    CHECK(sim_plan_run(&q, &p, err, sizeof err) == WEFT_EINVAL && strstr(err, "experts"));
}
