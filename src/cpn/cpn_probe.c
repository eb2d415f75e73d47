/* The resource layer's measurements: a rank's host and peaks, the
 * cluster's all-reduce constants, and the description made of them. */
#include "cpn/cpn_probe.h"

#include "cpn/cpn_host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cpn_probe_rank(cpn_rank_facts *out)
{
    memset(out, 0, sizeof *out);
    cpn_host_probe(&out->host);
    weft_matmul_peak p;
    int rc = weft_matmul_peak_get(&p);
    if (rc)
        return rc;
    out->fp32_gflops = p.gflops;
    out->fp32_declared = getenv("WEFT_PEAK_GFLOPS") && getenv("WEFT_PEAK_GFLOPS")[0];
    char kernel[64];
    if (weft_matmul_peak_bf16(0, &out->bf16_gflops, kernel, sizeof kernel) != 0)
        out->bf16_gflops = 0;
    return 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define BATCHES 5

/* Seconds a call of bytes takes: per batch of calls the slowest rank's
 * mean, the median of the batches. */
static int time_allreduce(weft_comm *c, size_t bytes, int calls, double *out)
{
    size_t n = bytes / sizeof(float);
    float *buf = calloc(n ? n : 1, sizeof *buf);
    if (!buf)
        return WEFT_ENOMEM;
    int rc = 0;
    for (int i = 0; !rc && i < 2; i++) /* connections and buffers warm */
        rc = weft_allreduce(c, buf, buf, n, WEFT_F32, WEFT_SUM);
    double t[BATCHES];
    for (int b = 0; !rc && b < BATCHES; b++) {
        rc = weft_barrier(c);
        double t0 = now_s();
        for (int i = 0; !rc && i < calls; i++)
            rc = weft_allreduce(c, buf, buf, n, WEFT_F32, WEFT_SUM);
        double dt = (now_s() - t0) / calls;
        if (!rc)
            rc = weft_allreduce(c, &dt, &t[b], 1, WEFT_F64, WEFT_MAX);
    }
    free(buf);
    if (rc)
        return rc;
    qsort(t, BATCHES, sizeof t[0], cmp_double);
    *out = t[BATCHES / 2];
    return 0;
}

int cpn_probe_allreduce(weft_comm *c, double *alpha_us, double *beta_gbps)
{
    int p = weft_comm_size(c);
    double t8, t256k, t2m;
    int rc = time_allreduce(c, 8, 20, &t8);
    if (!rc)
        rc = time_allreduce(c, 256 << 10, 5, &t256k);
    if (!rc)
        rc = time_allreduce(c, 2 << 20, 3, &t2m);
    if (rc)
        return rc;
    /* a small all-reduce takes about log2 p rounds; a large one moves
     * 2 (p-1)/p of the buffer through each rank's link (the ring) */
    int rounds = (int)ceil(log2((double)p));
    *alpha_us = t8 / (rounds > 0 ? rounds : 1) * 1e6;
    double moved = 2.0 * (p - 1) / p * (double)((2 << 20) - (256 << 10));
    double dt = t2m - t256k;
    if (dt <= 0)
        dt = t2m;
    *beta_gbps = moved * 8 / dt / 1e9;
    return 0;
}

static void metric(cpn_cluster *c, const char *name, double v, const char *unit,
                   const char *source, const char *stat)
{
    cpn_metric m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", name);
    m.value = v;
    snprintf(m.unit, sizeof m.unit, "%s", unit);
    snprintf(m.source, sizeof m.source, "%s", source);
    snprintf(m.statistic, sizeof m.statistic, "%s", stat);
    cpn_iso_now(m.at, sizeof m.at);
    cpn_metric_set(c, &m);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int add_hosts(const cpn_rank_facts *facts, int n, cpn_cluster *out)
{
    out->hosts = calloc((size_t)n, sizeof *out->hosts);
    if (!out->hosts)
        return WEFT_ENOMEM;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < out->nhosts && !seen; j++)
            seen = !strcmp(out->hosts[j].name, facts[i].host.name) &&
                   !strcmp(out->hosts[j].addr, facts[i].host.addr);
        if (!seen)
            out->hosts[out->nhosts++] = facts[i].host;
    }
    return 0;
}

/* The job's step times, each the median over the ranks (which timed it
 * at once, sharing the hosts as the training's ranks will). */
static void add_calib(const cpn_rank_facts *facts, int n, double *v, cpn_cluster *out)
{
    if (facts[0].calib.sample_s <= 0)
        return;
    static const char *const names[] = { "train_sample_s", "train_fixed_s", "train_update_s" };
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < n; i++)
            v[i] = k == 0 ? facts[i].calib.sample_s
                 : k == 1 ? facts[i].calib.fixed_s : facts[i].calib.update_s;
        metric(out, names[k], median(v, n), "s", "measured", "median");
    }
    for (int i = 0; i < n; i++)
        v[i] = facts[i].calib.core_share;
    metric(out, "core_share", median(v, n), "fraction", "measured", "median");
}

int cpn_probe_describe(const cpn_rank_facts *facts, int n, double alpha_us, double beta_gbps,
                       cpn_cluster *out)
{
    double *v = calloc((size_t)n, sizeof *v);
    int rc = v ? add_hosts(facts, n, out) : WEFT_ENOMEM;
    if (rc) {
        free(v);
        return rc;
    }
    for (int i = 0; i < n; i++)
        v[i] = facts[i].fp32_gflops;
    metric(out, "peak_fp32_gflops_per_core", median(v, n), "GFLOP/s",
           facts[0].fp32_declared ? "declared" : "measured", "median");
    for (int i = 0; i < n; i++)
        v[i] = facts[i].bf16_gflops;
    double bf16 = median(v, n);
    if (bf16 > 0)
        metric(out, "peak_bf16_gflops_per_core", bf16, "GFLOP/s", "measured", "median");
    add_calib(facts, n, v, out);
    free(v);
    if (alpha_us >= 0) {
        metric(out, "allreduce_alpha_us", alpha_us, "us", "measured", "median");
        metric(out, "allreduce_beta_gbps", beta_gbps, "Gbit/s", "measured", "median");
    } else {
        weft_cost_params cp;
        if (weft_cost_default(&cp, 1) == 0) {
            metric(out, "allreduce_alpha_us", cp.alpha_inter * 1e6, "us", "nominal", "last");
            metric(out, "allreduce_beta_gbps", 8 / cp.beta_inter / 1e9, "Gbit/s", "nominal",
                   "last");
        }
    }
    if (!cpn_metric_find(out, "speed"))
        metric(out, "speed", 1, "", "nominal", "last");
    cpn_cluster_score(out);
    return 0;
}

/* The declared facts probe knows, with their units; a measured metric may
 * be declared too (a figure from elsewhere overrides the measurement). */
static const struct {
    const char *name, *unit;
    int text; /* an ISO time or a number of seconds since the epoch */
} declarable[] = {
    {"price_per_core_hour", "per core-hour", 0}, {"gco2_per_kwh", "gCO2/kWh", 0},
    {"watts_per_core", "W", 0},                  {"available_from", "ISO-8601", 1},
    {"available_until", "ISO-8601", 1},          {"speed", "", 0},
    {"peak_fp32_gflops_per_core", "GFLOP/s", 0}, {"peak_bf16_gflops_per_core", "GFLOP/s", 0},
    {"allreduce_alpha_us", "us", 0},             {"allreduce_beta_gbps", "Gbit/s", 0},
};

int cpn_probe_declare(cpn_cluster *c, const char *kv, char *err, size_t errlen)
{
    const char *eq = strchr(kv, '=');
    size_t klen = eq ? (size_t)(eq - kv) : 0;
    for (size_t i = 0; eq && i < sizeof declarable / sizeof declarable[0]; i++) {
        if (strlen(declarable[i].name) != klen || strncmp(kv, declarable[i].name, klen))
            continue;
        cpn_metric m;
        memset(&m, 0, sizeof m);
        snprintf(m.name, sizeof m.name, "%s", declarable[i].name);
        snprintf(m.unit, sizeof m.unit, "%s", declarable[i].unit);
        snprintf(m.source, sizeof m.source, "declared");
        snprintf(m.statistic, sizeof m.statistic, "last");
        cpn_iso_now(m.at, sizeof m.at);
        char *end;
        m.value = strtod(eq + 1, &end);
        if (end == eq + 1 || *end || !isfinite(m.value) || m.value < 0) {
            if (!declarable[i].text || !eq[1] || strlen(eq + 1) >= sizeof m.text) {
                snprintf(err, errlen, "--declare %s: not a number >= 0", kv);
                return WEFT_EINVAL;
            }
            snprintf(m.text, sizeof m.text, "%s", eq + 1);
        }
        if (!strcmp(m.name, "speed") && (m.value <= 0 || m.value > 1)) {
            snprintf(err, errlen, "--declare %s: speed is a factor in (0, 1]", kv);
            return WEFT_EINVAL;
        }
        cpn_metric_set(c, &m);
        cpn_cluster_score(c);
        return 0;
    }
    size_t len = (size_t)snprintf(err, errlen, "--declare %s: want KEY=VALUE, KEY one of", kv);
    for (size_t i = 0; i < sizeof declarable / sizeof declarable[0] && len < errlen; i++)
        len += (size_t)snprintf(err + len, errlen - len, " %s", declarable[i].name);
    return WEFT_EINVAL;
}
