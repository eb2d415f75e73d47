/* The validation set and its table. Every reference names its source;
 * "nccl-model" points have no published number at that scale and are set
 * against NCCL's own cost model (sim_nccl_model, from the same preset), so
 * the simulation is checked against the published curve's ends and against
 * the model that NCCL itself uses in between. */
#include "sim/validate.h"
#include "sim/sim.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define BLOG "NCCL 2.4 announcement (NVIDIA blog, 2019), Summit figure, as the seed quotes it"
#define SEED "seed collective-communication: tree ~180x below ring at 24,576 GPUs"
#define NCCLT                                                                              \
    "nccl-tests all_reduce_perf, 8x H100 SXM, NCCL_ALGO=RING: ~370 GB/s (NCCL's maintainers, " \
    "github.com/NVIDIA/nccl-tests/issues/212; 368.8 with NVLS off, issues/309)"
#define HOST "bench/sim_calibrate.sh, idle machine 2026-12-02 (load 0.04-4.6): lower of 2 (3) runs' medians"

/* clang-format off */
const sim_vpoint sim_vpoints[] = {
    /* Summit, 8 B latency (us) */
    { "summit", "summit", "nccl-ring", NULL, 96,    8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 768,   8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 6144,  8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 24576, 8, SIM_V_TIME_US, 44000, BLOG, 0 },
    { "summit", "summit", "nccl-tree", NULL, 96,    8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-tree", NULL, 768,   8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-tree", NULL, 6144,  8, SIM_V_TIME_US, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-tree", NULL, 24576, 8, SIM_V_TIME_US, 240, BLOG, 0 },
    { "summit", "summit", "nccl-ring", "nccl-tree", 24576, 8, SIM_V_RATIO, 180, SEED, 0 },
    /* Summit, 64 MB bus bandwidth (GB/s) */
    { "summit", "summit", "nccl-ring", NULL, 96,    64 << 20, SIM_V_BUSBW, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 768,   64 << 20, SIM_V_BUSBW, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 6144,  64 << 20, SIM_V_BUSBW, 0, "nccl-model", 0 },
    { "summit", "summit", "nccl-ring", NULL, 24576, 64 << 20, SIM_V_BUSBW, 2, BLOG, 0 },
    { "summit", "summit", "nccl-tree", NULL, 24576, 64 << 20, SIM_V_BUSBW, 12, BLOG, 0 },
    /* one DGX H100: the ring's figure; the default's 460-480 GB/s busbw is
     * NVLink SHARP (NVLS, the reduction in the switch), not modelled */
    { "dgx-h100", "dgx-h100", "nccl-ring", NULL, 8, 1 << 30, SIM_V_BUSBW, 370, NCCLT, 0 },
    { "dgx-h100", "dgx-h100", "nccl-ring", NULL, 8, 8,       SIM_V_TIME_US, 0, "nccl-model", 0 },
    /* this host: weft's ring, 2/4/8 processes on 2 cores; the 2 ranks of
     * the small calls ran on one of them (docs/SIMULATION.md, "This host") */
#define H(n, b, us) { "host", "host", "ring", NULL, n, b, SIM_V_TIME_US, us, HOST, 0 }
#define H1(n, b, us) { "host", "host", "ring", NULL, n, b, SIM_V_TIME_US, us, HOST, 1 }
    H1(2, 8, 11.26), H1(2, 1024, 14.85), H1(2, 65536, 31.67), H(2, 1048576, 248.00),
    H(2, 16777216, 7071.74), H(2, 67108864, 26848.79),
    H(4, 8, 19.45), H(4, 1024, 42.51), H(4, 65536, 80.06), H(4, 1048576, 950.63),
    H(4, 16777216, 20654.66), H(4, 67108864, 72933.63),
    H(8, 8, 76.39), H(8, 1024, 148.88), H(8, 65536, 254.13), H(8, 1048576, 3017.67),
    H(8, 16777216, 52268.01), H(8, 67108864, 203745.04),
#undef H
#undef H1
};
/* clang-format on */
const int sim_nvpoints = (int)(sizeof sim_vpoints / sizeof sim_vpoints[0]);

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int predict(const sim_topo *t, int algo, const sim_vpoint *v, sim_result *r,
                   char *err, size_t errlen)
{
    sim_job j = { .topo = t, .algo = algo, .kind = WEFT_COLL_ALLREDUCE, .nranks = v->ranks,
                  .count = (uint64_t)(v->bytes / 4), .esize = 4 };
    return sim_run(&j, r, err, errlen);
}

int sim_validate_point(int i, sim_vresult *out, char *err, size_t errlen)
{
    const sim_vpoint *v = &sim_vpoints[i];
    sim_topo t;
    int a, b = -1, rc;
    memset(out, 0, sizeof *out);
    if (sim_topo_preset(&t, v->topo) || sim_algo_parse(v->algo, &a) ||
        (v->algo2 && sim_algo_parse(v->algo2, &b))) {
        snprintf(err, errlen, "point %d: unknown preset or algorithm", i);
        return WEFT_EINVAL;
    }
    if (v->cores > 0 && v->cores < t.cpu_cores)
        t.cpu_cores = v->cores;
    double t0 = wall();
    sim_result r, r2;
    if ((rc = predict(&t, a, v, &r, err, errlen)))
        return rc;
    if (v->metric == SIM_V_RATIO) {
        if ((rc = predict(&t, b, v, &r2, err, errlen)))
            return rc;
        out->pred = r.time_us / r2.time_us;
    } else
        out->pred = v->metric == SIM_V_BUSBW ? r.busbw_GBps : r.time_us;
    out->sim_s = wall() - t0;
    out->ref = v->ref;
    if (out->ref <= 0) {
        double us;
        if ((rc = sim_nccl_model(&t, a, r.proto, v->ranks, v->bytes, &us))) {
            snprintf(err, errlen, "point %d: no NCCL model for %s", i, v->algo);
            return rc;
        }
        out->ref = v->metric == SIM_V_BUSBW
                       ? v->bytes / (us * 1e3) * sim_bus_factor(WEFT_COLL_ALLREDUCE, v->ranks)
                       : us;
    }
    out->err = out->pred / out->ref - 1;
    return 0;
}

int sim_validate(FILE *f, const char *set)
{
    static const char *const metric[] = { "time_us", "busbw_GBps", "ratio" };
    const char *cur = NULL;
    double sum = 0, worst = 0;
    int n = 0;
    fprintf(f, "# %-9s %-10s %6s %11s %-10s %12s %12s %8s  %s\n", "set", "algo", "ranks",
            "bytes", "metric", "predicted", "reference", "error", "source");
    for (int i = 0; i <= sim_nvpoints; i++) {
        const sim_vpoint *v = i < sim_nvpoints ? &sim_vpoints[i] : NULL;
        if (v && set && strcmp(set, v->set))
            continue;
        if (cur && (!v || strcmp(cur, v->set))) {
            fprintf(f, "# %s: %d points, mean |error| %.1f%%, worst %.1f%%\n", cur, n,
                    100 * sum / n, 100 * worst);
            sum = worst = 0;
            n = 0;
        }
        if (!v)
            break;
        cur = v->set;
        sim_vresult r;
        char err[256];
        int rc = sim_validate_point(i, &r, err, sizeof err);
        if (rc) {
            fprintf(f, "# error: %s\n", err);
            return rc;
        }
        char algo[32];
        snprintf(algo, sizeof algo, "%s%s%s", v->algo, v->algo2 ? "/" : "",
                 v->algo2 ? "tree" : "");
        fprintf(f, "  %-9s %-10s %6d %11.0f %-10s %12.4g %12.4g %+7.1f%%  %s%s\n", v->set, algo,
                v->ranks, v->bytes, metric[v->metric], r.pred, r.ref, 100 * r.err, v->source,
                v->cores == 1 ? " [ranks on 1 core]" : "");
        fflush(f);
        sum += fabs(r.err);
        if (fabs(r.err) > worst)
            worst = fabs(r.err);
        n++;
    }
    return 0;
}
