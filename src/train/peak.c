#include "train/peak.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/half.h"
#include "core/log.h"
#include "train/host_cache.h"
#include "core/param.h"
#include "train/matmul.h"
#include "weft.h"

/* The shapes a GPT step at width 512 runs on 512 tokens (the MLP's
 * forward x W^T, its input gradient, its weight gradient, and qkv's
 * forward): the peak is the best of them, so that no real step, which
 * runs these and smaller ones, can be measured above it. */
static const struct { int ta, tb, M, N, K; } probe_shapes[] = {
    { 0, 1, 512, 2048, 512 },
    { 0, 0, 512, 512, 2048 },
    { 1, 0, 2048, 512, 512 },
    { 0, 1, 512, 1536, 512 },
};
enum { PROBE_SHAPES = sizeof probe_shapes / sizeof *probe_shapes };

/* Each shape runs at least this many times and for at least this long: a
 * CPU whose clock rises under load (or a VM's) reaches its speed only
 * after some milliseconds of work, and a best-of over a few short runs
 * caught it before then (65.8 GFLOP/s probed against 73 in a real step). */
enum { PROBE_MIN_RUNS = 3 };
#define PROBE_MIN_SECS 0.2

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The operands: fp32, or their bf16 roundings (a16 set) for the
 * portable kernel's bf16 products. */
typedef struct {
    const float *a, *b;
    const uint16_t *a16, *b16;
    float *o;
} probe_data;

/* The best time of one product, at least runs runs and secs seconds: the
 * fastest run, since other processes only ever slow a run down. */
static double time_gemm(mm_ctx *c, int ta, int tb, int M, int N, int K, const probe_data *d,
                        int runs, double secs)
{
    double best = 1e30, t_start = now();
    for (int r = 0; r < runs || now() - t_start < secs; r++) {
        double t0 = now();
        if (d->a16)
            train_mm_gemm_bf16(c, ta, tb, M, N, K, d->a16, ta ? M : K, d->b16, tb ? K : N, 0.0f,
                               d->o, N);
        else
            train_mm_gemm(c, ta, tb, M, N, K, d->a, ta ? M : K, d->b, tb ? K : N, 0.0f, d->o, N);
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    return best;
}

static double probe_shape(mm_ctx *c, int s, const probe_data *d)
{
    return time_gemm(c, probe_shapes[s].ta, probe_shapes[s].tb, probe_shapes[s].M,
                     probe_shapes[s].N, probe_shapes[s].K, d, PROBE_MIN_RUNS, PROBE_MIN_SECS);
}

/* Operands of n elements each (and their bf16 roundings when bf16). */
static int data_make(probe_data *d, size_t n, int bf16)
{
    memset(d, 0, sizeof *d);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    uint16_t *a16 = bf16 ? malloc(n * 2) : NULL, *b16 = bf16 ? malloc(n * 2) : NULL;
    d->o = malloc(n * sizeof(float));
    d->a = a;
    d->b = b;
    d->a16 = a16;
    d->b16 = b16;
    if (!a || !b || !d->o || (bf16 && (!a16 || !b16)))
        return WEFT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 17) * 0.01f;
        b[i] = (float)(i % 13) * 0.01f;
    }
    if (bf16) {
        half_f32_to_bf16(a16, a, n);
        half_f32_to_bf16(b16, b, n);
    }
    return 0;
}

static void data_free(probe_data *d)
{
    free((void *)d->a);
    free((void *)d->b);
    free((void *)d->a16);
    free((void *)d->b16);
    free(d->o);
}

/* train_mm_describe's fp32 part ("portable avx512", "openblas Zen"): the
 * name the cache knows a kernel by, as it did before bf16 had its own. */
static void kernel_name(const mm_ctx *c, char *name, size_t cap)
{
    train_mm_describe(c, name, cap);
    name[strcspn(name, ",")] = 0;
}

/* The portable kernel's bf16 path in words: "portable amx", "portable
 * avx512bf16", or "portable avx512 widened" where bf16 is widened for the
 * fp32 kernel. A new path (AMX where the cache line has VDPBF16PS's) gets
 * its rate measured again: train_peak_get compares the names. */
static void bf16_name(const mmp *p, char *name, size_t cap)
{
    const char *k = train_mmp_isa_bf16(p);
    snprintf(name, cap, "portable %s%s", k ? k : train_mmp_isa(p), k ? "" : " widened");
}

static double shape_flops(int s)
{
    return 2.0 * probe_shapes[s].M * probe_shapes[s].N * probe_shapes[s].K;
}

/* One thread's GFLOP/s of backend after a warm-up that brings the clock
 * and the caches to a step's state: *gflops the best shape's best run
 * (the peak), *mix all the shapes' best runs together (to choose a
 * kernel by, since one lucky shape should not). */
static int probe(int backend, int bf16, double *gflops, double *mix, char *name, size_t cap)
{
    mm_ctx *c;
    int rc = train_mm_create_fixed(&c, 1, backend);
    if (rc)
        return rc;
    if (bf16)
        bf16_name(train_mm_portable(c), name, cap);
    else
        kernel_name(c, name, cap);
    size_t most = 0;
    for (int i = 0; i < PROBE_SHAPES; i++) {
        size_t mk = (size_t)probe_shapes[i].M * probe_shapes[i].K;
        size_t kn = (size_t)probe_shapes[i].K * probe_shapes[i].N;
        size_t mn = (size_t)probe_shapes[i].M * probe_shapes[i].N;
        size_t m = mk > kn ? mk : kn;
        m = m > mn ? m : mn;
        most = m > most ? m : most;
    }
    probe_data d;
    if (data_make(&d, most, bf16)) {
        data_free(&d);
        train_mm_destroy(c);
        return WEFT_ENOMEM;
    }
    (void)probe_shape(c, 0, &d);   /* warm-up, not counted */
    double top = 0.0, flops = 0.0, secs = 0.0;
    for (int i = 0; i < PROBE_SHAPES; i++) {
        double t = probe_shape(c, i, &d), g = shape_flops(i) / t / 1e9;
        top = g > top ? g : top;
        flops += shape_flops(i);
        secs += t;
    }
    *gflops = top;
    *mix = flops / secs / 1e9;
    data_free(&d);
    train_mm_destroy(c);
    return 0;
}

/* How new a kernel family is: 3 AVX-512, 2 AVX2+FMA, 1 AVX, 0 older. */
static int core_rank(const char *core)
{
    static const char *const r3[] = { "SkylakeX", "Cooperlake", "SapphireRapids", "Zen4", NULL };
    static const char *const r2[] = { "Haswell", "Zen", "Excavator", "Skylake", NULL };
    static const char *const r1[] = { "Sandybridge", "Bulldozer", "Piledriver", "Steamroller",
                                      NULL };
    const char *const *t[] = { r3, r2, r1 };
    for (int k = 0; k < 3; k++)
        for (int i = 0; t[k][i]; i++)
            if (strcasecmp(core, t[k][i]) == 0)
                return 3 - k;
    return 0;
}

static int cpu_rank(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 2;
    if (__builtin_cpu_supports("avx"))
        return 1;
#endif
    return 0;
}

/* Said once per measurement (so once per host with a cache): an OpenBLAS
 * that took a kernel older than the CPU is several times slower than it
 * could be, and the fix is outside weft. */
static void warn_old_core(const train_peak *p, const char *core)
{
    int have = cpu_rank(), got = core_rank(core);
    if (got >= have)
        return;
    static const char *const isa[] = { "SSE", "AVX", "AVX2", "AVX-512" };
    static const char *const fix[] = { "", "Sandybridge", "Haswell", "SkylakeX" };
    log_msg(log_level_from_env(), LOG_WARN, 0,
            "OpenBLAS runs its %s kernel on a CPU with %s (%.1f GFLOP/s against the portable "
            "kernel's %.1f); weft uses the %s. OPENBLAS_CORETYPE=%s (before the program starts) "
            "makes OpenBLAS use its %s kernel",
            core, isa[have], p->blas_mix, p->port_mix,
            p->best == MM_OPENBLAS ? "OpenBLAS" : "portable kernel", fix[have], isa[have]);
}

/* The peak is the faster kernel's best shape, whichever kernel the mix
 * picks, so that MFU stays at most 100% with either. */
static void peak_choose(train_peak *p)
{
    p->best = p->blas_mix > p->port_mix ? MM_OPENBLAS : MM_PORTABLE;
    p->gflops = p->blas_gflops > p->port_gflops ? p->blas_gflops : p->port_gflops;
}

/* The bf16 products' rate alone (their mix is not kept: bf16 always
 * runs on the portable kernel, so there is nothing to choose). */
static int measure_bf16(train_peak *p)
{
    double mix;
    return probe(MM_PORTABLE, 1, &p->bf16_gflops, &mix, p->bf16_name, sizeof p->bf16_name);
}

int train_peak_measure(train_peak *p)
{
    memset(p, 0, sizeof *p);
    int rc = probe(MM_PORTABLE, 0, &p->port_gflops, &p->port_mix, p->port_name,
                   sizeof p->port_name);
    if (rc)
        return rc;
    const char *core = train_mm_blas_core();
    if (core && (rc = probe(MM_OPENBLAS, 0, &p->blas_gflops, &p->blas_mix, p->blas_name,
                            sizeof p->blas_name)))
        return rc;
    if ((rc = measure_bf16(p)))
        return rc;
    peak_choose(p);
    if (core)
        warn_old_core(p, core);
    snprintf(p->source, sizeof p->source, "measured now");
    return 0;
}

double train_peak_for(const train_peak *p, int bf16, const char **kernel)
{
    int b = bf16 && p->bf16_gflops > 0;
    if (kernel)
        *kernel = b ? p->bf16_name : p->blas_gflops > p->port_gflops ? p->blas_name : p->port_name;
    return b ? p->bf16_gflops : p->gflops;
}

double train_peak_theory(double *mhz)
{
    double clock = 0.0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (clock <= 0.0 && fgets(line, sizeof line, f))
            if (strncmp(line, "cpu MHz", 7) == 0) {
                const char *v = strchr(line, ':');
                clock = v ? atof(v + 1) : 0.0;
            }
        fclose(f);
    }
    if (mhz)
        *mhz = clock;
    int lanes = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        lanes = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        lanes = 8;
#endif
    return 2.0 * lanes * 2.0 * clock / 1e3;
}

/* Each cache line starts with the probe's version, so that a line a
 * different probe wrote (version 1, untagged, measured too short a time)
 * is measured again rather than believed. */
#define PEAK_CACHE_TAG "v2"

/* A cache line is only taken when it was measured with the kernels this
 * process has: the same portable ISA, OpenBLAS with the same core type.
 * The bf16 rate and kernel come after them on the line; a line without
 * (written before bf16 had a kernel of its own) still gives the rest. */
static int cache_read(const char *path, train_peak *p)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        double port, blas, pmix, bmix, b16 = 0;
        char pn[32], bn[48], hn[32] = "";
        int got = sscanf(line,
                         PEAK_CACHE_TAG " port=%lf blas=%lf port_mix=%lf blas_mix=%lf "
                         "port_kernel=%31s blas_kernel=%47s bf16=%lf bf16_kernel=%31s",
                         &port, &blas, &pmix, &bmix, pn, bn, &b16, hn);
        if ((got == 6 || (got == 8 && b16 > 0)) && port > 0 && blas >= 0 && pmix > 0 &&
            bmix >= 0) {
            for (char *s = pn; *s; s++)
                *s = *s == '_' ? ' ' : *s;
            for (char *s = bn; *s; s++)
                *s = *s == '_' ? ' ' : *s;
            for (char *s = hn; *s; s++)
                *s = *s == '_' ? ' ' : *s;
            pn[strcspn(pn, ",")] = 0;   /* a name with the bf16 kernel after it */
            p->bf16_gflops = got == 8 ? b16 : 0;
            snprintf(p->bf16_name, sizeof p->bf16_name, "%s", hn);
            p->port_gflops = port;
            p->blas_gflops = blas;
            p->port_mix = pmix;
            p->blas_mix = bmix;
            snprintf(p->port_name, sizeof p->port_name, "%s", pn);
            snprintf(p->blas_name, sizeof p->blas_name, "%s", strcmp(bn, "-") ? bn : "");
            ok = 1;
            break;
        }
    }
    fclose(f);
    return ok ? 0 : -1;
}

static int cache_write(const char *path, const train_peak *p)
{
    if (host_cache_mkdirs(path) != 0)
        return -1;
    char tmp[320], pn[32], bn[48], hn[32];
    snprintf(tmp, sizeof tmp, "%.290s.%ld", path, (long)getpid());
    snprintf(pn, sizeof pn, "%s", p->port_name);
    snprintf(bn, sizeof bn, "%s", p->blas_name[0] ? p->blas_name : "-");
    snprintf(hn, sizeof hn, "%s", p->bf16_name);
    for (char *s = pn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    for (char *s = bn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    for (char *s = hn; *s; s++)
        *s = *s == ' ' ? '_' : *s;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    double load[3] = { 0 };
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = 0;
        fclose(la);
    }
    fprintf(f, "# weft matmul peak: one thread's sgemm GFLOP/s on a GPT's shapes, per kernel; "
               "load average %.2f when measured. Delete the file to measure again.\n",
            load[0]);
    fprintf(f,
            PEAK_CACHE_TAG " port=%.2f blas=%.2f port_mix=%.2f blas_mix=%.2f port_kernel=%s "
            "blas_kernel=%s bf16=%.2f bf16_kernel=%s\n",
            p->port_gflops, p->blas_gflops, p->port_mix, p->blas_mix, pn, bn, p->bf16_gflops, hn);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* What this process would measure with, to match against a cache line:
 * the portable kernel, OpenBLAS and the bf16 path (hn, 32 bytes). */
static int current_names(char *pn, size_t pcap, char *bn, size_t bcap, char *hn)
{
    mm_ctx *c;
    int rc = train_mm_create_fixed(&c, 1, MM_PORTABLE);
    if (rc)
        return rc;
    kernel_name(c, pn, pcap);
    bf16_name(train_mm_portable(c), hn, 32);
    train_mm_destroy(c);
    const char *core = train_mm_blas_core();
    snprintf(bn, bcap, "%s%s", core ? "openblas " : "", core ? core : "");
    return 0;
}

int train_peak_get(train_peak *p)
{
    if (!p)
        return WEFT_EINVAL;
    double given;
    char paths[2][300], pn[32], bn[48], hn[32];
    int n, rc;
    if ((rc = param_read_dbl(PARAM_peak_gflops, &given, NULL, 0)) ||
        (rc = host_cache_paths("peak", paths, &n)) ||
        (rc = current_names(pn, sizeof pn, bn, sizeof bn, hn)))
        return rc;
    int found = 0, keep = 0;
    for (int i = 0; i < n && !found; i++) {
        memset(p, 0, sizeof *p);
        if (cache_read(paths[i], p) == 0 && strcmp(p->port_name, pn) == 0 &&
            strcmp(p->blas_name, bn) == 0) {
            found = 1;
            snprintf(p->source, sizeof p->source, "measured once, kept in %.280s", paths[i]);
        }
    }
    /* a line without this bf16 path's rate keeps its fp32 ones, and gets
     * the bf16 one measured and added */
    if (found && strcmp(p->bf16_name, hn) != 0) {
        if ((rc = measure_bf16(p)))
            return rc;
        keep = 1;
    } else if (!found) {
        if ((rc = train_peak_measure(p)))
            return rc;
        keep = 1;
    }
    for (int i = 0; keep && i < n; i++)
        if (cache_write(paths[i], p) == 0) {
            snprintf(p->source, sizeof p->source, "%s, kept in %.280s",
                     found ? "measured once (bf16 now)" : "measured now", paths[i]);
            keep = 0;
        }
    peak_choose(p);
    if (given > 0) {
        p->gflops = given;
        snprintf(p->source, sizeof p->source, "WEFT_PEAK_GFLOPS");
    }
    return 0;
}

int weft_matmul_peak_bf16(int measure, double *gflops, char *kernel, size_t cap)
{
    if (!gflops)
        return WEFT_EINVAL;
    train_peak pk;
    memset(&pk, 0, sizeof pk);
    int rc = measure ? measure_bf16(&pk) : train_peak_get(&pk);
    if (rc)
        return rc;
    *gflops = pk.bf16_gflops;
    if (kernel && cap)
        snprintf(kernel, cap, "%s", pk.bf16_name);
    return 0;
}

/* WEFT_MATMUL_ISA's word as its index (MMP_ISA_*), from the parameter
 * table's own list; -1 for none of them. */
static int isa_index(const char *word)
{
    const char *w = param_info_of(PARAM_matmul_isa)->words;
    for (int i = 0; *w; i++) {
        size_t n = strcspn(w, "|");
        if (strlen(word) == n && strncmp(w, word, n) == 0)
            return i;
        w += n + (w[n] == '|');
    }
    return -1;
}

int weft_matmul_rate(const char *isa, int bf16, int M, int N, int K, int runs, double *gflops,
                     char *kernel, size_t cap)
{
    if (!gflops || M < 1 || N < 1 || K < 1 || runs < 1)
        return WEFT_EINVAL;
    int ix = MMP_ISA_AUTO, rc = 0;
    if (!isa)
        rc = param_read_int(PARAM_matmul_isa, &ix, NULL, 0);
    else if ((ix = isa_index(isa)) < 0)
        rc = WEFT_ECONFIG;
    mmp *p = NULL;
    if (rc || (rc = train_mmp_create_isa(&p, 1, ix)))
        return rc;
    size_t mk = (size_t)M * K, kn = (size_t)K * N, mn = (size_t)M * N;
    size_t most = mk > kn ? mk : kn;
    probe_data d;
    if ((rc = data_make(&d, most > mn ? most : mn, bf16)) == 0) {
        double best = 1e30;
        for (int r = 0; r <= runs; r++) {   /* the first warms up */
            double t0 = now();
            if (bf16)
                train_mmp_gemm_bf16(p, NULL, 0, 0, M, N, K, d.a16, K, d.b16, N, 0.0f, d.o, N);
            else
                train_mmp_gemm(p, NULL, 0, 0, M, N, K, d.a, K, d.b, N, 0.0f, d.o, N);
            double dt = now() - t0;
            best = r > 0 && dt < best ? dt : best;
        }
        *gflops = 2.0 * M * N * K / best / 1e9;
        if (kernel && cap && bf16)
            bf16_name(p, kernel, cap);
        else if (kernel && cap)
            snprintf(kernel, cap, "portable %s", train_mmp_isa(p));
    }
    data_free(&d);
    train_mmp_destroy(p);
    return rc;
}
