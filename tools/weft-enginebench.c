/* weft-enginebench: training-step throughput of the engine on synthetic
 * data, for comparison with PyTorch (bench/engine_vs_torch.sh).
 *
 *   weft-enginebench [--model SPEC] [--batch N] [--steps N] [--warmup N]
 *                    [--matmul openblas|portable] [--threads N]
 *                    [--prec fp32|bf16] [--optim sgd|adamw] [--seq N]
 *
 * Defaults: mlp:784-512-512-10, batch 256, SGD momentum 0.9, lr 0.01,
 * 100 timed steps after 5 warm-up steps, threads from WEFT_THREADS. A step
 * is zero_grad + forward + backward + optimiser step. Prints one line
 * ending in "samples/s", with the model FLOPs of a step (weft_model_flops),
 * the rate achieved and the model-FLOPs utilisation against threads x one
 * thread's measured matmul peak (weft_matmul_peak_get; WEFT_PEAK_GFLOPS sets
 * it).
 * --per-step also prints each timed step's milliseconds and MFU.
 * --phases 1 also prints each phase's (zero_grad, forward, backward,
 * gradient reduction, optimiser) milliseconds per timed step, wall and
 * process CPU: CPU over wall is how many threads a phase kept busy,
 * whatever else the machine runs; and attention's wall time within the
 * forward and the backward (weft_model_attention_seconds).
 * --dp 1 makes it a data-parallel run under weftrun (weft_comm_init_env;
 * every rank the whole model, its own batch of synthetic data): the
 * gradient reduction (weft_dp_sync_grads, after backward, which has
 * launched buckets as their gradients were final) is its own phase, the
 * wait for what backward left; each rank prints its lines. bench/engine_phases.sh splits the same run by kind of work
 * (products, attention, norms, element-wise, bf16 rounding, optimiser)
 * from perf samples. With --matmul auto (the default) the kernel chosen on the
 * model's own products and both kernels' rates are printed before the
 * result line.
 *
 * --gemm 1 instead times, on one thread, the matrix products of one step
 * of the GPT or Llama given (every linear layer's forward, input gradient and
 * weight gradient; attention's products are left out) with each kernel,
 * rounds interleaved and the best run of each kept, and prints each
 * shape's GFLOP/s and the step's matmul milliseconds per kernel.
 * --gemm ROUNDS --size N times one N x N x N product instead, on one
 * thread of the portable kernel, the best of ROUNDS: fp32, and with
 * --prec bf16 also bf16 widened to fp32, on VDPBF16PS and on AMX tiles
 * (each where the CPU has it).
 * --probe 1 prints the peak probe's result, measured now, beside the
 * textbook bound at the clock /proc/cpuinfo shows.
 * With --prec bf16 the result's MFU is against the bf16 peak (the rate of
 * the bf16 products' kernel, named), the fp32 peak shown beside it.
 * --perf-ctl FIFO writes "enable" to FIFO as the timed steps start and
 * "disable" as they end: perf record -D -1 --control fifo:FIFO then
 * samples the timed steps alone, not setup and warm-up (whose first-touch
 * page faults and weight initialisation are no part of a step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { PH_ZERO, PH_FWD, PH_BWD, PH_RED, PH_OPT, PHASES };

/* Adds the wall, process CPU and calling thread's CPU time since the
 * last mark to phase ph. */
static void phase_mark(double acc[PHASES][3], int ph, double mark[3])
{
    double t[3] = { now(), cpu_now(CLOCK_PROCESS_CPUTIME_ID), cpu_now(CLOCK_THREAD_CPUTIME_ID) };
    for (int i = 0; i < 3; i++) {
        if (ph >= 0)
            acc[ph][i] += t[i] - mark[i];
        mark[i] = t[i];
    }
}

/* One matrix product of a step: C[M,N] = op(A) op(B), K deep, done
 * count times (once per layer); three a linear layer. */
enum { MAX_SHAPES = 3 * 7 };
typedef struct {
    const char *what;
    int ta, tb, M, N, K, count;
} gemm_shape;

/* A step's linear layers on BT tokens of width C: x W^T forward, the
 * input gradient dy W, the weight gradient dy^T x. The logits' layer is V
 * wide (a GPT's the tied embedding); a Llama's k and v are its kv heads
 * wide, its gate and up one product 2 ffn wide, as the model runs them. */
static int step_shapes(const weft_model_config *c, int BT, gemm_shape *s)
{
    int C = c->d_model, V = c->vocab, L = c->n_layer, F = c->ffn, n = 0;
    int kv = C / c->n_head * c->n_kv_head;
    typedef struct { const char *name; int in, out, layers; } linear;
    const linear gpt[] = {
        { "qkv", C, 3 * C, L }, { "proj", C, C, L }, { "fc", C, 4 * C, L },
        { "fcproj", 4 * C, C, L }, { "logits", C, V, 1 },
    };
    const linear llama[] = {
        { "q", C, C, L }, { "k", C, kv, L }, { "v", C, kv, L }, { "o", C, C, L },
        { "gateup", C, 2 * F, L }, { "down", F, C, L }, { "logits", C, V, 1 },
    };
    int is_llama = c->type == WEFT_MODEL_LLAMA;
    const linear *lin = is_llama ? llama : gpt;
    size_t nlin = is_llama ? sizeof llama / sizeof *llama : sizeof gpt / sizeof *gpt;
    for (size_t i = 0; i < nlin; i++) {
        int in = lin[i].in, out = lin[i].out;
        s[n++] = (gemm_shape){ lin[i].name, 0, 1, BT, out, in, lin[i].layers };
        s[n++] = (gemm_shape){ lin[i].name, 0, 0, BT, in, out, lin[i].layers };
        s[n++] = (gemm_shape){ lin[i].name, 1, 0, out, in, BT, lin[i].layers };
    }
    return n;
}

static int gemm_bench(const weft_model_config *cfg, int BT, int rounds)
{
    gemm_shape sh[MAX_SHAPES];
    int ns = step_shapes(cfg, BT, sh);
    enum { NK = 2 };
    const char *kname[NK] = { "portable", "openblas" };
    weft_matmul *mm[NK] = { NULL, NULL };
    int nk = 0;
    for (int k = 0; k < NK; k++)
        if (weft_matmul_create(&mm[nk], kname[k], 1) == 0)
            kname[nk++] = kname[k];
    size_t most = 0;
    for (int i = 0; i < ns; i++) {
        size_t a = (size_t)sh[i].M * sh[i].K, b = (size_t)sh[i].K * sh[i].N,
               o = (size_t)sh[i].M * sh[i].N;
        most = a > most ? a : most;
        most = b > most ? b : most;
        most = o > most ? o : most;
    }
    float *A = malloc(most * 4), *B = malloc(most * 4), *O = malloc(most * 4);
    if (!A || !B || !O)
        return 1;
    for (size_t i = 0; i < most; i++) {
        A[i] = (float)(i % 17) * 0.01f;
        B[i] = (float)(i % 13) * 0.01f;
    }
    double best[MAX_SHAPES][NK];
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < nk; k++)
            best[i][k] = 1e30;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < ns; i++)
            for (int k = 0; k < nk; k++) {
                const gemm_shape *g = &sh[i];
                double t0 = now();
                weft_matmul_gemm(mm[k], g->ta, g->tb, g->M, g->N, g->K, A, g->ta ? g->M : g->K, B,
                              g->tb ? g->K : g->N, 0.0f, O, g->N);
                double dt = now() - t0;
                best[i][k] = dt < best[i][k] ? dt : best[i][k];
            }
    double total[NK] = { 0 }, flops = 0;
    printf("%-7s %-2s %5s %5s %5s %3s", "layer", "op", "M", "N", "K", "x");
    for (int k = 0; k < nk; k++)
        printf(" %9s", kname[k]);
    printf("   (GFLOP/s, best of %d)\n", rounds);
    for (int i = 0; i < ns; i++) {
        const gemm_shape *g = &sh[i];
        double f = 2.0 * g->M * g->N * g->K;
        flops += f * g->count;
        printf("%-7s %c%c %5d %5d %5d %3d", g->what, g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->M,
               g->N, g->K, g->count);
        for (int k = 0; k < nk; k++) {
            printf(" %9.1f", f / best[i][k] / 1e9);
            total[k] += best[i][k] * g->count;
        }
        printf("\n");
    }
    printf("step's linear layers: %.2f GFLOP;", flops / 1e9);
    for (int k = 0; k < nk; k++)
        printf(" %s %.1f ms (%.1f GFLOP/s)", kname[k], 1e3 * total[k], flops / total[k] / 1e9);
    printf("\n");
    for (int k = 0; k < nk; k++)
        weft_matmul_destroy(mm[k]);
    free(A);
    free(B);
    free(O);
    return 0;
}

/* One N^3 product's rate per path: fp32; bf16 widened (WEFT_MATMUL_ISA
 * avx512 widens on any CPU), on VDPBF16PS and on AMX tiles, when asked. */
static int square_bench(int n, int rounds, int bf16)
{
    static const struct { const char *isa; int bf16; } path[] = {
        { NULL, 0 }, { "avx512", 1 }, { "avx512bf16", 1 }, { "amx", 1 } };
    printf("matmul %dx%dx%d, one thread, best of %d:", n, n, n, rounds);
    for (int i = 0; i < (bf16 ? 4 : 1); i++) {
        double g;
        char name[64];
        int rc = weft_matmul_rate(path[i].isa, path[i].bf16, n, n, n, rounds, &g, name,
                                  sizeof name);
        if (rc == WEFT_ECONFIG && path[i].bf16)
            printf(" %s: not on this CPU;", path[i].isa);
        else if (rc)
            return fprintf(stderr, "\nweft-enginebench: %s\n", weft_strerror(rc)), 1;
        else
            printf(" %s (%s) %.1f GFLOP/s;", name, path[i].bf16 ? "bf16" : "fp32", g);
    }
    printf("\n");
    return 0;
}

static int probe_print(void)
{
    weft_matmul_peak pk;
    int rc = weft_matmul_peak_measure(&pk);
    if (rc) {
        fprintf(stderr, "weft-enginebench: %s\n", weft_strerror(rc));
        return 1;
    }
    double mhz, theory;
    weft_matmul_peak_theory(&theory, &mhz);
    printf("peak probe (best shape; all shapes together): %s %.1f; %.1f GFLOP/s, %s %.1f; %.1f "
           "GFLOP/s; peak %.1f, auto takes %s; textbook bound at the %.0f MHz /proc/cpuinfo "
           "shows: %.1f GFLOP/s\n",
           pk.port_name, pk.port_gflops, pk.port_mix,
           pk.blas_name[0] ? pk.blas_name : "openblas (none)", pk.blas_gflops, pk.blas_mix,
           pk.gflops, pk.best, mhz, theory);
    double b16;
    char bn[64];
    if ((rc = weft_matmul_peak_bf16(1, &b16, bn, sizeof bn)) == 0)
        printf("bf16 products: %s %.1f GFLOP/s\n", bn, b16);
    /* a TDPBF16PS is 16 x 16 x 32 multiply-adds, one every 16 cycles */
    if (rc == 0 && strstr(bn, "amx") && mhz > 0)
        printf("AMX textbook bound at the %.0f MHz /proc/cpuinfo shows: %.1f GFLOP/s (1024 "
               "FLOP a cycle)\n", mhz, 1.024 * mhz);
    return rc != 0;
}

/* Milliseconds per step of each phase (wall / process CPU / calling
 * thread's CPU), attention's wall within forward and backward (att[0],
 * att[1]), and the step's total. */
static void phases_print(double acc[PHASES][3], const double att[2], int steps, int dp)
{
    static const char *const names[PHASES] = { "zero_grad", "forward", "backward",
                                               "grad_reduce", "optimiser" };
    /* the calling thread runs every serial part and its share of each
     * split one, so on idle cores a step takes about its CPU time: one
     * thread's step CPU over this is the speed-up to expect from the
     * threads, whatever the load now */
    double tot[3] = { 0 };
    printf("phases, ms per step (wall / process CPU / calling thread's CPU):");
    for (int i = 0; i < PHASES; i++) {
        if (i == PH_RED && !dp)
            continue;
        printf(" %s %.1f / %.1f / %.1f%s", names[i], 1e3 * acc[i][0] / steps,
               1e3 * acc[i][1] / steps, 1e3 * acc[i][2] / steps, i + 1 < PHASES ? "," : "\n");
        for (int k = 0; k < 3; k++)
            tot[k] += acc[i][k];
    }
    printf("phases, attention's wall ms per step: %.1f of forward's %.1f, %.1f of backward's "
           "%.1f (%.1f%% of the step)\n", 1e3 * att[0] / steps, 1e3 * acc[PH_FWD][0] / steps,
           1e3 * att[1] / steps, 1e3 * acc[PH_BWD][0] / steps,
           tot[0] > 0 ? 100.0 * (att[0] + att[1]) / tot[0] : 0.0);
    printf("step: %.1f ms wall, %.1f ms CPU, %.1f ms on the calling thread\n",
           1e3 * tot[0] / steps, 1e3 * tot[1] / steps, 1e3 * tot[2] / steps);
}

/* --dp 1: the communicator from weftrun's environment and a data-parallel
 * handle with rank 0's parameters everywhere. */
static int dp_start(weft_model *m, weft_comm **comm, weft_dp **dp)
{
    int rc = weft_comm_init_env(comm);
    if (!rc && (rc = weft_dp_create(dp, *comm, m, 0)) == 0)
        rc = weft_dp_broadcast_params(*dp);
    if (rc)
        fprintf(stderr, "weft-enginebench: --dp: %s\n", weft_strerror(rc));
    return rc;
}

/* One perf control command ("enable", "disable") to the FIFO perf reads;
 * a failure only costs the samples' focus, so it is said and passed over. */
static void perf_ctl(const char *fifo, const char *cmd)
{
    if (!fifo)
        return;
    FILE *f = fopen(fifo, "w");
    int ok = f && fprintf(f, "%s\n", cmd) > 0;
    if ((f && fclose(f) != 0) || !ok)
        fprintf(stderr, "weft-enginebench: --perf-ctl %s: could not write '%s'\n", fifo, cmd);
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-enginebench [--model SPEC] [--batch N] [--steps N] [--warmup N]\n"
                    "         [--matmul openblas|portable] [--threads N] [--prec fp32|bf16]\n"
                    "         [--optim sgd|adamw] [--seq N] [--per-step 0|1] [--phases 0|1]\n"
                    "         [--dp 0|1] [--perf-ctl FIFO]\n"
                    "         [--gemm ROUNDS [--size N]] [--probe 1]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *spec = "mlp:784-512-512-10", *matmul = NULL, *prec = "fp32", *optim = "sgd";
    const char *ctl = NULL;
    int batch = 256, steps = 100, warmup = 5, threads = 0, seq = 0, per_step = 0;
    int gemm = 0, probe = 0, phases = 0, size = 0, dpar = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--model")) spec = v;
        else if (!strcmp(k, "--batch")) batch = atoi(v);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--warmup")) warmup = atoi(v);
        else if (!strcmp(k, "--matmul")) matmul = v;
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--prec")) prec = v;
        else if (!strcmp(k, "--optim")) optim = v;
        else if (!strcmp(k, "--seq")) seq = atoi(v);
        else if (!strcmp(k, "--per-step")) per_step = atoi(v);
        else if (!strcmp(k, "--gemm")) gemm = atoi(v);
        else if (!strcmp(k, "--probe")) probe = atoi(v);
        else if (!strcmp(k, "--phases")) phases = atoi(v);
        else if (!strcmp(k, "--size")) size = atoi(v);
        else if (!strcmp(k, "--dp")) dpar = atoi(v);
        else if (!strcmp(k, "--perf-ctl")) ctl = v;
        else usage();
    }
    weft_model_config cfg;
    weft_model *m;
    int rc;
    if ((rc = weft_model_config_parse(spec, &cfg)) != 0) {
        fprintf(stderr, "weft-enginebench: bad model '%s'\n", spec);
        return 2;
    }
    if (batch < 1 || steps < 1 || warmup < 0)
        usage();
    if (probe)
        return probe_print();
    if (gemm && size > 0)
        return square_bench(size, gemm, !strcmp(prec, "bf16"));
    if (gemm) {
        if (cfg.type == WEFT_MODEL_MLP)
            usage();
        return gemm_bench(&cfg, batch * (seq > 0 && seq <= cfg.ctx ? seq : cfg.ctx), gemm);
    }
    if ((rc = weft_model_create(&m, &cfg, 1)) != 0 ||
        (threads > 0 && (rc = weft_model_set_threads(m, threads)) != 0) ||
        (matmul && (rc = weft_model_set_matmul(m, matmul)) != 0) ||
        (rc = weft_model_set_precision(m, strcmp(prec, "bf16") ? WEFT_PREC_FP32 : WEFT_PREC_BF16)) != 0) {
        fprintf(stderr, "weft-enginebench: %s\n", weft_strerror(rc));
        return 1;
    }
    int tokens = cfg.type != WEFT_MODEL_MLP; /* a GPT or a Llama */
    int T = tokens ? (seq > 0 && seq <= cfg.ctx ? seq : cfg.ctx) : 1;
    int in = tokens ? T : cfg.widths[0];
    int ncls = tokens ? cfg.vocab : cfg.widths[cfg.n_widths - 1];
    enum { NB = 4 };   /* a few distinct batches, cycled */
    void *x[NB];
    int32_t *y[NB];
    weft_rng r;
    weft_rng_seed(&r, 42);
    for (int b = 0; b < NB; b++) {
        size_t nx = (size_t)batch * in, ny = (size_t)batch * T;
        x[b] = malloc(nx * 4);
        y[b] = malloc(ny * 4);
        if (!x[b] || !y[b])
            return 1;
        for (size_t i = 0; i < nx; i++) {
            if (tokens)
                ((int32_t *)x[b])[i] = (int32_t)weft_rng_below(&r, (uint64_t)cfg.vocab);
            else
                ((float *)x[b])[i] = weft_rng_uniform(&r);
        }
        for (size_t i = 0; i < ny; i++)
            y[b][i] = (int32_t)weft_rng_below(&r, (uint64_t)ncls);
    }
    weft_comm *comm = NULL;
    weft_dp *dp = NULL;
    if (dpar && dp_start(m, &comm, &dp))
        return 1;
    if (comm)   /* each rank its own batches */
        weft_rng_seed(&r, 42 + (uint64_t)weft_comm_rank(comm));
    for (int b = 0; comm && b < NB; b++)
        for (size_t i = 0; i < (size_t)batch * T; i++)
            y[b][i] = (int32_t)weft_rng_below(&r, (uint64_t)ncls);
    weft_optim_config oc;
    weft_optim_config_default(&oc, strcmp(optim, "adamw") ? WEFT_OPTIM_SGD : WEFT_OPTIM_ADAMW);
    float lr = oc.kind == WEFT_OPTIM_SGD ? 0.01f : 1e-3f;
    weft_optim *o;
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    if ((rc = weft_optim_create(&o, &oc, 0, n)) != 0 ||
        (rc = weft_optim_set_threads(o, weft_model_threads(m))) != 0) {
        fprintf(stderr, "weft-enginebench: %s\n", weft_strerror(rc));
        return 1;
    }
    weft_matmul_peak pk;
    if ((rc = weft_matmul_peak_get(&pk)) != 0) {
        fprintf(stderr, "weft-enginebench: the matmul peak: %s\n", weft_strerror(rc));
        return 1;
    }
    /* a bf16 run's products go to the bf16 kernel: its peak is the MFU's */
    int bf16 = !strcmp(prec, "bf16");
    double b16 = 0.0;
    char b16_name[64] = "";
    if (bf16 && (rc = weft_matmul_peak_bf16(0, &b16, b16_name, sizeof b16_name)) != 0) {
        fprintf(stderr, "weft-enginebench: the bf16 peak: %s\n", weft_strerror(rc));
        return 1;
    }
    double one = bf16 ? b16 : pk.gflops;
    double step_flops;
    weft_model_flops(&cfg, batch, T, &step_flops);
    double peak = one * 1e9 * weft_model_threads(m);
    float loss = 0.0f;
    double t0 = 0.0, ts = 0.0, acc[PHASES][3] = { { 0 } }, mark[3] = { 0 }, att[2] = { 0 };
    double a0 = 0.0, a1 = 0.0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            perf_ctl(ctl, "enable");
            t0 = now();
        }
        if (per_step && s >= warmup) {
            double t = now();
            if (s > warmup)
                printf("step %d: %.1f ms, MFU %.1f%%\n", s - warmup, 1e3 * (t - ts),
                       100.0 * step_flops / (t - ts) / peak);
            ts = t;
        }
        int timed = phases && s >= warmup;
        if (timed)
            phase_mark(acc, -1, mark);
        weft_model_zero_grad(m);
        if (timed)
            phase_mark(acc, PH_ZERO, mark);
        weft_model_attention_seconds(m, &a0);
        if ((rc = weft_model_forward(m, x[s % NB], y[s % NB], batch, T, &loss)) != 0)
            break;
        weft_model_attention_seconds(m, &a1);
        if (timed) {
            phase_mark(acc, PH_FWD, mark);
            att[0] += a1 - a0;
        }
        if ((rc = weft_model_backward(m)) != 0)
            break;
        weft_model_attention_seconds(m, &a0);
        if (timed) {
            phase_mark(acc, PH_BWD, mark);
            att[1] += a0 - a1;
        }
        if (dp && (rc = weft_dp_sync_grads(dp)) != 0)
            break;
        if (timed && dp)
            phase_mark(acc, PH_RED, mark);
        if ((rc = weft_optim_step(o, p, g, lr)) != 0)
            break;
        if (timed)
            phase_mark(acc, PH_OPT, mark);
    }
    if (rc) {
        fprintf(stderr, "weft-enginebench: a step: %s\n", weft_strerror(rc));
        return 1;
    }
    double dt = now() - t0;
    perf_ctl(ctl, "disable");
    char text[512];
    if (weft_model_matmul_choice(m, text, sizeof text) > 0)
        printf("matmul auto: %s\n", text);
    if (phases)
        phases_print(acc, att, steps, dp != NULL);
    if (bf16)
        printf("bf16 products on %s: peak %.1f GFLOP/s a thread (fp32's %.1f, %s: MFU %.1f%% "
               "against it)\n", b16_name, b16, pk.gflops,
               pk.blas_gflops > pk.port_gflops ? pk.blas_name : pk.port_name,
               100.0 * step_flops * steps / dt / (pk.gflops * 1e9 * weft_model_threads(m)));
    printf("weft %s batch %d %s %s matmul %s threads %d: %d steps in %.3f s, loss %.4f, "
           "%.2f GFLOP/step, %.1f GFLOP/s, MFU %.1f%% of %d x %.1f GFLOP/s (%s, %s), "
           "%.1f samples/s\n", spec, batch, optim, prec, weft_model_matmul_name(m),
           weft_model_threads(m), steps, dt, loss, step_flops / 1e9,
           step_flops * steps / dt / 1e9, 100.0 * step_flops * steps / dt / peak,
           weft_model_threads(m), one,
           bf16 ? b16_name : pk.blas_gflops > pk.port_gflops ? pk.blas_name : pk.port_name,
           pk.source, (double)steps * batch / dt);
    weft_optim_destroy(o);
    weft_dp_destroy(dp);
    weft_model_destroy(m);
    if (comm)
        weft_comm_destroy(comm);
    for (int b = 0; b < NB; b++) {
        free(x[b]);
        free(y[b]);
    }
    return 0;
}
