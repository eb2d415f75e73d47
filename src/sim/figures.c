/* The seeds' two figures, recomputed by the simulator from the presets'
 * calibration (docs/SIMULATION.md explains every constant). Output is
 * plain text: '#' comment lines, then whitespace-separated columns. */
#include "sim/figures.h"
#include "sim/sim.h"

#include <string.h>
#include <time.h>

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int one(FILE *f, const sim_topo *t, int algo, weft_coll_kind kind, int p,
               uint64_t count, uint32_t esize, int servers, sim_result *r)
{
    /* a budget that simulates 64 MB trees on 24,576 ranks in full, so the
     * figures carry no extrapolation error (only huge sizes are extended) */
    sim_job j = { .topo = t, .algo = algo, .kind = kind, .nranks = p, .count = count,
                  .esize = esize, .ps_servers = servers, .op_budget = 12000000 };
    char err[256];
    int rc = sim_run(&j, r, err, sizeof err);
    if (rc)
        fprintf(f, "# error: %s p=%d: %s\n", sim_algo_name(algo), p, err);
    return rc;
}

int sim_figure_summit(FILE *f)
{
    sim_topo t;
    if (sim_topo_preset(&t, "summit"))
        return 1;
    fprintf(f, "# NCCL on Summit, recomputed by weft-sim with the summit preset:\n");
    fprintf(f, "# all-reduce of 8 B (latency, us) and of 64 MB (bus bandwidth, GB/s)\n");
    fprintf(f, "# by NCCL's rings and trees as weft schedules (nccl-ring, nccl-tree); one calibration.\n");
    fprintf(f, "#%6s %6s %12s %12s %8s %10s %10s %8s\n", "gpus", "nodes", "ring_8B_us",
            "tree_8B_us", "ratio", "ring_64M", "tree_64M", "sim_s");
    for (int g = 96; g <= 24576; g *= 2) {
        sim_result rr, rt, br, bt;
        double t0 = wall();
        if (one(f, &t, SIM_ALGO_NCCL_RING, WEFT_COLL_ALLREDUCE, g, 2, 4, 0, &rr) ||
            one(f, &t, SIM_ALGO_NCCL_TREE, WEFT_COLL_ALLREDUCE, g, 2, 4, 0, &rt) ||
            one(f, &t, SIM_ALGO_NCCL_RING, WEFT_COLL_ALLREDUCE, g, 16u << 20, 4, 0, &br) ||
            one(f, &t, SIM_ALGO_NCCL_TREE, WEFT_COLL_ALLREDUCE, g, 16u << 20, 4, 0, &bt))
            return 1;
        fprintf(f, " %6d %6d %12.1f %12.1f %8.1f %10.2f %10.2f %8.2f\n", g,
                g / t.ranks_per_node, rr.time_us, rt.time_us, rr.time_us / rt.time_us,
                br.busbw_GBps, bt.busbw_GBps, wall() - t0);
        fflush(f);
    }
    return 0;
}

/* GPT-3 175B (Brown et al. 2020): 96 layers, hidden 12288, sequence 2048,
 * batch 1536 sequences (3.2 M tokens). */
#define GPT3_PARAMS 175000000000ull
#define GPT3_HIDDEN 12288ull
#define GPT3_SEQ 2048ull
#define GPT3_LAYERS 96
#define GPT3_BATCH 1536

int sim_figure_gpt3(FILE *f)
{
    sim_topo ib, rail, dgx;
    if (sim_topo_preset(&ib, "ib800") || sim_topo_preset(&dgx, "dgx-h100"))
        return 1;
    uint64_t count = GPT3_PARAMS; /* fp32 gradients, 700 GB per replica */
    double per_rep = (double)count * 4;
    fprintf(f, "# GPT-3: %.0f fp32 gradients = %.1f GB per replica; x 128 replicas = %.1f TB\n",
            (double)count, per_rep / 1e9, per_rep * 128 / 1e12);
    fprintf(f, "# all-reduce of %.0f GB over 128 replicas, one 800 Gb/s (100 GB/s) link each\n",
            per_rep / 1e9);
    fprintf(f, "# (topology ib800); the seed's 89.6 TB through one such link: %.0f s\n",
            per_rep * 128 / 100e9);
    fprintf(f, "#%-16s %12s %10s %10s %14s %8s\n", "algorithm", "time_s", "algbw", "busbw",
            "max_link_TB", "sim_s");
    static const struct { const char *name; int algo, servers; } rows[] = {
        { "ring", WEFT_ALGO_RING, 0 },     { "tree", WEFT_ALGO_TREE, 0 },
        { "rd", WEFT_ALGO_RD, 0 },         { "ps-1-server", SIM_ALGO_PS, 1 },
        { "ps-8-servers", SIM_ALGO_PS, 8 }, { "ps-128-servers", SIM_ALGO_PS, 128 },
    };
    for (unsigned i = 0; i < sizeof rows / sizeof *rows; i++) {
        sim_result r;
        double t0 = wall();
        if (one(f, &ib, rows[i].algo, WEFT_COLL_ALLREDUCE, 128, count, 4, rows[i].servers, &r))
            return 1;
        fprintf(f, " %-16s %12.2f %10.2f %10.2f %14.2f %8.2f\n", rows[i].name,
                r.time_us / 1e6, r.algbw_GBps, r.busbw_GBps,
                r.util_max[LC_NIC] * 100e9 * r.time_us / 1e6 / 1e12, wall() - t0);
        fflush(f);
    }

    /* 24,576 H100s, 3D parallel: tensor 8 (inside a DGX), pipeline 16,
     * data 192. Each data-parallel group has one GPU per node, on its own
     * 400 Gb/s rail: the 128 groups use disjoint rails of a non-blocking
     * fabric, so one group simulated alone is all of them. */
    int tp = 8, pp = 16, dp = 24576 / (8 * 16);
    uint64_t shard = GPT3_PARAMS / (uint64_t)(tp * pp);
    rail = dgx;
    strcpy(rail.name, "dgx-h100-rail");
    rail.ranks_per_node = 1;
    rail.lc[LC_NIC].bw_GBps = 50;
    fprintf(f, "#\n# 24,576 H100 GPUs (DGX-H100, NDR 400 Gb/s per GPU): tensor %d x pipeline %d"
            " x data %d\n", tp, pp, dp);
    fprintf(f, "# per GPU %.3g parameters = %.2f GB fp32 gradients, all-reduced over %d ranks\n",
            (double)shard, shard * 4 / 1e9, dp);
    fprintf(f, "#%-28s %12s %10s %10s %8s\n", "communication", "time_ms", "algbw", "busbw",
            "sim_s");
    static const int dpalgos[] = { WEFT_ALGO_RING, WEFT_ALGO_TREE, WEFT_ALGO_RD };
    for (unsigned i = 0; i < 3; i++) {
        sim_result r;
        double t0 = wall();
        if (one(f, &rail, dpalgos[i], WEFT_COLL_ALLREDUCE, dp, shard, 4, 0, &r))
            return 1;
        char name[64];
        snprintf(name, sizeof name, "dp-allreduce-%s", sim_algo_name(dpalgos[i]));
        fprintf(f, " %-28s %12.2f %10.2f %10.2f %8.2f\n", name, r.time_us / 1e3,
                r.algbw_GBps, r.busbw_GBps, wall() - t0);
    }
    /* tensor parallel: an all-reduce of one micro-batch's activations
     * (sequence x hidden, bf16) over NVLink, 2 per layer forward and 2
     * backward; pipeline: the same activations sent to the next stage */
    uint64_t act = GPT3_SEQ * GPT3_HIDDEN;
    int layers = GPT3_LAYERS / pp, micro = GPT3_BATCH / dp;
    sim_result rt, rp;
    double t0 = wall();
    if (one(f, &dgx, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, tp, act, 2, 0, &rt))
        return 1;
    fprintf(f, " %-28s %12.3f %10.2f %10.2f %8.2f\n", "tp-allreduce-ring-1", rt.time_us / 1e3,
            rt.algbw_GBps, rt.busbw_GBps, wall() - t0);
    t0 = wall();
    if (one(f, &rail, WEFT_ALGO_RING, WEFT_COLL_BROADCAST, 2, act, 2, 0, &rp))
        return 1;
    fprintf(f, " %-28s %12.3f %10.2f %10.2f %8.2f\n", "pp-send-1", rp.time_us / 1e3,
            rp.algbw_GBps, rp.busbw_GBps, wall() - t0);
    double tp_ms = 4.0 * layers * micro * rt.time_us / 1e3;
    double pp_ms = 2.0 * micro * rp.time_us / 1e3;
    double flops = 6.0 * (double)GPT3_PARAMS * GPT3_BATCH * (double)GPT3_SEQ;
    double compute_ms = flops / (24576 * 989e12 * 0.4) * 1e3;
    fprintf(f, "# per iteration (batch %d x %llu tokens, %d micro-batches per replica,"
            " %d layers per stage):\n", GPT3_BATCH, GPT3_SEQ, micro, layers);
    fprintf(f, "#   tensor-parallel all-reduces  %d x %.3f ms = %.1f ms per GPU\n",
            4 * layers * micro, rt.time_us / 1e3, tp_ms);
    fprintf(f, "#   pipeline sends               %d x %.3f ms = %.1f ms per stage boundary\n",
            2 * micro, rp.time_us / 1e3, pp_ms);
    fprintf(f, "#   compute, 6 N tokens at 40%% of 989 TFLOP/s: %.0f ms\n", compute_ms);
    return 0;
}
