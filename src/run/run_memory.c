/* --mem-limit BYTES: the memory wall, said before it is hit.
 * At start a rank's training state (parameters, gradients, optimiser
 * state, by the ZeRO formulas for its layout) must fit the budget, or the
 * run is refused with the bytes it needs and the smallest layout that
 * would fit; after the first step what the state and the activations
 * measure resident (mincore, and the activations' arena) is checked
 * against the budget too. The program and its libraries are not counted
 * there; after a resume's load, a save and an evaluation each rank's peak
 * resident set (the kernel's VmHWM, everything included) is. */
#include "run/run_memory.h"

#include "run/run_model.h"
#include "train/flops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sanitizer's shadow memory is in the resident set: no budget to hold
 * it to. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* The whole model's parameters, from its shape alone (no allocation). */
static double whole_params(const weft_model_config *c)
{
    return train_model_param_count(c);
}

/* Optimiser bytes per parameter: AdamW's two moments, SGD's momentum. */
static int optim_bytes(const run_opts *r)
{
    weft_optim_config oc;
    model_optim_config(r, &oc);
    return oc.kind == WEFT_OPTIM_ADAMW ? 8 : oc.momentum != 0.0f ? 4 : 0;
}

/* Bytes per parameter a rank holds at this ZeRO stage over dp replicas
 * (weft_zero_mem's formulas: parameters, gradients, optimiser state). */
static double per_param(int zero, int dp, int K)
{
    switch (zero) {
    case 0: return 8.0 + K;
    case 1: return 8.0 + (double)K / dp;
    case 2: return 4.0 + (4.0 + K) / dp;
    default: return (8.0 + K) / dp;
    }
}

static void fmt_bytes(char *buf, size_t len, double b)
{
    if (b >= 1e9)
        snprintf(buf, len, "%.2f GB", b / 1e9);
    else
        snprintf(buf, len, "%.1f MB", b / 1e6);
}

/* The fewest ranks, then the simplest layout (least sharding), whose state
 * fits: tensor parallelism by the heads, pipeline stages by the blocks. */
static int suggest(const weft_model_config *c, int K, double limit, char *buf, size_t len)
{
    double psi = whole_params(c);
    int nb = weft_model_block_count(c);
    for (int n = 2; n <= 4096; n *= 2)
        for (int zero = 0; zero <= 3; zero++)
            for (int tp = 1; tp <= n && tp <= 64; tp *= 2)
                for (int pp = 1; pp * tp <= n && pp <= nb; pp *= 2) {
                    if (c->type != WEFT_MODEL_MLP && c->n_head % tp)
                        continue;
                    int dp = n / (tp * pp);
                    if (zero > 0 && dp < 2)
                        continue;
                    double need = psi / (tp * pp) * per_param(zero, dp, K);
                    if (need <= limit) {
                        char b[32];
                        fmt_bytes(b, sizeof b, need);
                        snprintf(buf, len, "%d ranks as --tp %d --pp %d --zero %d (dp %d): %s a rank",
                                 n, tp, pp, zero, dp, b);
                        return 1;
                    }
                }
    return 0;
}

int memory_check_start(weft_run *t)
{
    const opts *o = t->o;
    if (o->mem_limit <= 0)
        return 0;
    /* the load's buffers (a rank's share, the readers' bounded ones) */
    int rc = o->resume[0] ? memory_check_peak(t, "the resume") : 0;
    if (rc)
        return rc;
    weft_zero_mem zm;
    weft_zero_memory(t->sync.z, &zm);
    double need = (double)zm.param_bytes + zm.grad_bytes + zm.optim_bytes;
    if (need <= o->mem_limit)
        return 0;
    char have[32], lim[32], alt[256] = "none within 4096 ranks";
    fmt_bytes(have, sizeof have, need);
    fmt_bytes(lim, sizeof lim, o->mem_limit);
    suggest(weft_model_config_of(t->m), optim_bytes(&o->r), o->mem_limit, alt, sizeof alt);
    return run_fail(t, WEFT_ECONFIG,
                    "--mem-limit %s: this rank's training state needs %s (parameters %zu B, "
                    "gradients %zu B, optimiser %zu B) at this layout; the smallest layout that "
                    "fits: %s", lim, have, zm.param_bytes, zm.grad_bytes, zm.optim_bytes, alt);
}

int memory_check_step(weft_run *t, long step)
{
    const opts *o = t->o;
    if (o->mem_limit <= 0 || step != t->start_step)
        return 0;
    weft_zero_mem zm;
    weft_zero_memory(t->sync.z, &zm);
    double act = (double)weft_model_activation_bytes(t->m);
    double have = (double)zm.resident_bytes + act;
    if (have > o->mem_limit) {
        char p[32], lim[32];
        fmt_bytes(p, sizeof p, have);
        fmt_bytes(lim, sizeof lim, o->mem_limit);
        return run_fail(t, WEFT_ENOMEM,
                        "--mem-limit %s: after the first step this rank holds %s resident "
                        "(state %zu B, activations %.0f B)", lim, p, zm.resident_bytes, act);
    }
    return 0;
}

/* This process's peak resident set in bytes (VmHWM); 0 where unknown. */
static double peak_resident(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kb = strtod(line + 6, NULL);
            break;
        }
    if (f)
        fclose(f);
    return kb * 1024.0;
}

int memory_check_peak(weft_run *t, const char *during)
{
    const opts *o = t->o;
    if (o->mem_limit <= 0 || SANITIZED)
        return 0;
    double peak = peak_resident();
    if (peak <= 0)
        return 0; /* no /proc: nothing to compare */
    int jr = t->job ? weft_comm_rank(t->job) : 0;
    char p[32], lim[32];
    fmt_bytes(p, sizeof p, peak);
    fmt_bytes(lim, sizeof lim, o->mem_limit);
    /* this rank alone: the others learn of it as of any rank's failure,
     * and no collective is added where ranks may not all be (a joiner) */
    if (peak > o->mem_limit)
        return run_fail(t, WEFT_ENOMEM,
                        "--mem-limit %s: rank %d's peak resident memory reached %s by the end of "
                        "%s (VmHWM: the whole process, the program and its buffers included)",
                        lim, jr, p, during);
    if (t->lead && !o->quiet)
        run_say(t, WEFT_RUN_OUT, "memory: rank %d's peak resident %s by the end of %s "
                                 "(--mem-limit %s)\n", jr, p, during, lim);
    return 0;
}
