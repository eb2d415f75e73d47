/* The validation set and its table. A reference is a published or
 * measured number, each naming where it comes from; a model's output never
 * is one (NCCL's cost model shares the simulator's constants, so agreeing
 * with it proves nothing). Points with no published number are printed as
 * predictions, marked unchecked. */
#include "sim/validate.h"
#include "sim/sim.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* NVIDIA's NCCL 2.4 announcement (S. Jeaugey, "Massively Scale Your Deep
 * Learning Training with NCCL 2.4", NVIDIA blog, 2019-02-04): its text
 * gives one number; its Figures 3 (8 B latency) and 4 (64 MB bus
 * bandwidth) are images whose points were not available here, so the
 * figure readings below are a reader's, not a digitisation of ours. */
#define BLOG                                                                               \
    "NCCL 2.4 blog (NVIDIA, 2019), text: \"up to 180x improvement at 24k GPUs\" (stated)"
#define FIG4R                                                                              \
    "NCCL 2.4 blog, Figure 4 read by a reader: rings at 768 GPUs ~7.4 GB/s (reading error " \
    "not given)"
#define FIG4T                                                                              \
    "NCCL 2.4 blog, Figure 4 read by a reader: trees at 96-1,536 GPUs between 14 and 19.6 " \
    "GB/s (which count has which value not given)"
#define NONE "unchecked: no published number"
#define NCCLT                                                                              \
    "nccl-tests all_reduce_perf, 8x H100 SXM, NCCL_ALGO=RING: ~370 GB/s (NCCL's maintainers, " \
    "github.com/NVIDIA/nccl-tests/issues/212; 368.8 with NVLS off, issues/309)"
#define HOST "bench/sim_calibrate.sh, idle machine 2026-12-02 (load 0.04-4.6): lower of 2 (3) runs' medians"

/* clang-format off */
#define S(algo, n, b, m, ref, hi, src) { "summit", "summit", algo, NULL, n, b, m, ref, hi, src, 0 }
const sim_vpoint sim_vpoints[] = {
    /* Summit, 8 B latency (us): Figure 3's points were not available */
    S("nccl-ring", 96,    8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-ring", 768,   8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-ring", 6144,  8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-ring", 24576, 8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-tree", 96,    8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-tree", 768,   8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-tree", 6144,  8, SIM_V_TIME_US, 0, 0, NONE),
    S("nccl-tree", 24576, 8, SIM_V_TIME_US, 0, 0, NONE),
    { "summit", "summit", "nccl-ring", "nccl-tree", 24576, 8, SIM_V_RATIO, 180, 0, BLOG, 0 },
    /* Summit, 64 MB bus bandwidth (GB/s) */
    S("nccl-ring", 96,    64 << 20, SIM_V_BUSBW, 0, 0, NONE),
    S("nccl-ring", 768,   64 << 20, SIM_V_BUSBW, 7.4, 0, FIG4R),
    S("nccl-ring", 6144,  64 << 20, SIM_V_BUSBW, 0, 0, NONE),
    S("nccl-ring", 24576, 64 << 20, SIM_V_BUSBW, 0, 0, NONE),
    S("nccl-tree", 96,    64 << 20, SIM_V_BUSBW, 14, 19.6, FIG4T),
    S("nccl-tree", 192,   64 << 20, SIM_V_BUSBW, 14, 19.6, FIG4T),
    S("nccl-tree", 384,   64 << 20, SIM_V_BUSBW, 14, 19.6, FIG4T),
    S("nccl-tree", 768,   64 << 20, SIM_V_BUSBW, 14, 19.6, FIG4T),
    S("nccl-tree", 1536,  64 << 20, SIM_V_BUSBW, 14, 19.6, FIG4T),
    S("nccl-tree", 6144,  64 << 20, SIM_V_BUSBW, 0, 0, NONE),
#undef S
    /* one DGX H100: the ring's figure; the default's 460-480 GB/s busbw is
     * NVLink SHARP (NVLS, the reduction in the switch), not modelled */
    { "dgx-h100", "dgx-h100", "nccl-ring", NULL, 8, 1 << 30, SIM_V_BUSBW, 370, 0, NCCLT, 0 },
    { "dgx-h100", "dgx-h100", "nccl-ring", NULL, 8, 8,       SIM_V_TIME_US, 0, 0, NONE, 0 },
    /* this host: weft's ring, 2/4/8 processes on 2 cores; the 2 ranks of
     * the small calls ran on one of them (docs/SIMULATION.md, "This host") */
#define H(n, b, us) { "host", "host", "ring", NULL, n, b, SIM_V_TIME_US, us, 0, HOST, 0 }
#define H1(n, b, us) { "host", "host", "ring", NULL, n, b, SIM_V_TIME_US, us, 0, HOST, 1 }
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
    out->ref_hi = v->ref_hi > v->ref ? v->ref_hi : v->ref;
    out->checked = v->ref > 0;
    if (!out->checked)
        out->err = 0;
    else if (out->pred < out->ref)
        out->err = out->pred / out->ref - 1;
    else if (out->pred > out->ref_hi)
        out->err = out->pred / out->ref_hi - 1;
    else
        out->err = 0;
    return 0;
}

int sim_validate(FILE *f, const char *set)
{
    static const char *const metric[] = { "time_us", "busbw_GBps", "ratio" };
    const char *cur = NULL;
    double sum = 0, worst = 0;
    int n = 0, unchecked = 0;
    fprintf(f, "# %-9s %-19s %6s %11s %-10s %10s %13s %8s  %s\n", "set", "algo", "ranks",
            "bytes", "metric", "predicted", "reference", "error", "source");
    for (int i = 0; i <= sim_nvpoints; i++) {
        const sim_vpoint *v = i < sim_nvpoints ? &sim_vpoints[i] : NULL;
        if (v && set && strcmp(set, v->set))
            continue;
        if (cur && (!v || strcmp(cur, v->set))) {
            fprintf(f, "# %s: %d points against published or measured numbers, mean |error| "
                       "%.1f%%, worst %.1f%%; %d unchecked\n",
                    cur, n, n ? 100 * sum / n : 0, 100 * worst, unchecked);
            sum = worst = 0;
            n = unchecked = 0;
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
        char algo[32], ref[32], e[16];
        snprintf(algo, sizeof algo, "%s%s%s", v->algo, v->algo2 ? "/" : "",
                 v->algo2 ? v->algo2 : "");
        if (!r.checked)
            snprintf(ref, sizeof ref, "-");
        else if (r.ref_hi > r.ref)
            snprintf(ref, sizeof ref, "%.4g-%.4g", r.ref, r.ref_hi);
        else
            snprintf(ref, sizeof ref, "%.4g", r.ref);
        if (r.checked)
            snprintf(e, sizeof e, "%+7.1f%%", 100 * r.err);
        else
            snprintf(e, sizeof e, "%8s", "-");
        fprintf(f, "  %-9s %-19s %6d %11.0f %-10s %10.4g %13s %8s  %s%s\n", v->set, algo,
                v->ranks, v->bytes, metric[v->metric], r.pred, ref, e, v->source,
                v->cores == 1 ? " [ranks on 1 core]" : "");
        fflush(f);
        if (!r.checked) {
            unchecked++;
            continue;
        }
        sum += fabs(r.err);
        if (fabs(r.err) > worst)
            worst = fabs(r.err);
        n++;
    }
    return 0;
}
