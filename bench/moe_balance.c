/* What balance one batch allows, for bench/moe.sh: the figure weft-train
 * prints each step (max/mean tokens per expert of the least balanced
 * block) measured where no balancing rule can move it.
 *
 *   moe_balance floor E K N L BATCHES WINDOW SEED
 *     every token's K picks uniform among E experts (the ideal router:
 *     what sampling alone leaves), N tokens a batch, L blocks: the
 *     figure's mean, median, 90th percentile and largest over BATCHES
 *     batches, and the figure of the loads summed over WINDOW batches.
 *   moe_balance frozen CKPT TOKENS BATCH SEQ BATCHES train|eval FIRST
 *     a trained model (weft-train --save) with its bias frozen at the
 *     saved value, on BATCHES batches: train, the training stream's from
 *     batch FIRST (weft-train's data order, seed 1: FIRST = the run's
 *     steps gives the batches it would have trained on next, from the
 *     documents it trained on); eval, the held-out last tenth of the
 *     file (other documents, which training never reads). The same
 *     figures, and that of the loads summed over the batches. With
 *     CALIB > 0 the bias is first set anew for the frozen weights: CALIB
 *     batches step it by the proportional rule, it is set to its mean over
 *     the latter half of them (the balance a constant bias reaches, the
 *     steps' noise averaged out), and the BATCHES frozen ones follow.
 *
 * The frozen run reads each expert's load back from the proportional
 * rule's step (bias=2: 1e-2 x (mean - load) / mean, moe.h), which is the
 * load's exact image, then puts the bias back before the next batch; the
 * figure from those loads is checked against weft_model_moe_stats's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define PROP_RATE 1e-2 /* bias=2's step at a load off the mean by all of it */

typedef struct {
    double *v;
    int n, cap;
} figs;

static int figs_add(figs *f, double x)
{
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 256;
        double *v = realloc(f->v, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* mean, median, 90th percentile, largest */
static void figs_print(const char *what, figs *f, const char *unit)
{
    if (!f->n)
        return;
    double s = 0;
    for (int i = 0; i < f->n; i++)
        s += f->v[i];
    qsort(f->v, (size_t)f->n, sizeof *f->v, cmp_double);
    printf("%s: mean %.3f median %.3f p90 %.3f largest %.3f (%d %s)\n", what, s / f->n,
           f->v[f->n / 2], f->v[(int)(0.9 * (f->n - 1))], f->v[f->n - 1], f->n, unit);
}

/* The least balanced block's max/mean of loads [L][E]. */
static double worst(const int64_t *ld, int L, int E)
{
    double w = 0;
    for (int l = 0; l < L; l++) {
        int64_t mx = 0, sum = 0;
        for (int e = 0; e < E; e++) {
            mx = ld[(size_t)l * E + e] > mx ? ld[(size_t)l * E + e] : mx;
            sum += ld[(size_t)l * E + e];
        }
        if (sum > 0 && (double)mx * E / (double)sum > w)
            w = (double)mx * E / (double)sum;
    }
    return w;
}

static uint64_t next(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static int floor_run(int E, int K, int N, int L, int batches, int window, uint64_t seed)
{
    int64_t *ld = calloc((size_t)L * E, sizeof *ld), *sum = calloc((size_t)L * E, sizeof *sum);
    int *perm = malloc(sizeof *perm * (size_t)E);
    figs one = { 0 }, win = { 0 };
    uint64_t s = seed ? seed : 1;
    int rc = ld && sum && perm && K >= 1 && K <= E && N > 0 && L > 0 && window > 0 ? 0 : 1;
    for (int b = 0; b < batches && rc == 0; b++) {
        memset(ld, 0, sizeof *ld * (size_t)L * E);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < N; t++) {
                /* K distinct experts: the first K of a partial shuffle */
                for (int e = 0; e < E; e++)
                    perm[e] = e;
                for (int j = 0; j < K; j++) {
                    int r = j + (int)(next(&s) % (uint64_t)(E - j)), x = perm[r];
                    perm[r] = perm[j];
                    perm[j] = x;
                    ld[(size_t)l * E + x]++;
                }
            }
        rc = figs_add(&one, worst(ld, L, E));
        for (size_t i = 0; i < (size_t)L * E; i++)
            sum[i] += ld[i];
        if ((b + 1) % window == 0) {
            rc = rc ? rc : figs_add(&win, worst(sum, L, E));
            memset(sum, 0, sizeof *sum * (size_t)L * E);
        }
    }
    if (rc == 0) {
        char what[160];
        snprintf(what, sizeof what, "uniform routing, one batch (%d tokens x %d picks over %d "
                 "experts, %d blocks)", N, K, E, L);
        figs_print(what, &one, "batches");
        snprintf(what, sizeof what, "uniform routing, the loads summed over %d batches", window);
        figs_print(what, &win, "windows");
    }
    free(one.v);
    free(win.v);
    free(ld);
    free(sum);
    free(perm);
    return rc;
}

/* Each block's bias tensor's offset in the flat parameters. */
static int bias_offsets(weft_model *m, int L, size_t *off)
{
    for (int l = 0; l < L; l++) {
        char name[64];
        weft_tensor_info ti;
        snprintf(name, sizeof name, "blocks.%d.mlp.router.bias", l);
        int i = weft_model_tensor_find(m, name);
        if (i < 0 || weft_model_tensor_info(m, i, &ti) != 0)
            return -1;
        off[l] = ti.offset;
    }
    return 0;
}

/* The trained model as one that steps by the proportional rule (the same
 * tensors: only the rule differs). */
static int frozen_model(const char *path, weft_model **out)
{
    weft_ckpt *ck = NULL;
    weft_model *m0 = NULL;
    int rc = weft_ckpt_load(&ck, path);
    rc = rc ? rc : weft_ckpt_get_model(ck, &m0);
    weft_ckpt_free(ck);
    if (rc)
        return rc;
    weft_model_config cfg = *weft_model_config_of(m0);
    if (cfg.experts <= 0 || !cfg.moe_bias) {
        weft_model_destroy(m0);
        return WEFT_EINVAL;
    }
    cfg.moe_bias = 2;
    size_t n0, n1;
    rc = weft_model_create(out, &cfg, 1);
    if (rc == 0) {
        const float *p0 = weft_model_params(m0, &n0);
        float *p1 = weft_model_params(*out, &n1);
        if (n0 == n1)
            memcpy(p1, p0, sizeof *p1 * n0);
        else
            rc = WEFT_EINVAL;
    }
    weft_model_destroy(m0);
    return rc;
}

/* CALIB batches stepping the bias (the model's own step, the proportional
 * rule), then each bias set to its mean over the latter half of them. */
static int calibrate(weft_model *m, weft_loader *ld, float *p, const size_t *off, int L, int E,
                     int calib)
{
    double *avg = calloc((size_t)L * E, sizeof *avg);
    int rc = avg ? 0 : WEFT_ENOMEM, n = 0;
    for (int b = 0; b < calib && rc == 0; b++) {
        weft_batch bt;
        rc = weft_loader_next(ld, &bt);
        rc = rc ? rc : weft_model_zero_grad(m);
        rc = rc ? rc : weft_model_forward(m, bt.tokens, bt.y, bt.n, bt.x_dim, NULL);
        rc = rc ? rc : weft_model_backward(m);
        if (rc == 0 && 2 * b >= calib) {
            for (int l = 0; l < L; l++)
                for (int e = 0; e < E; e++)
                    avg[(size_t)l * E + e] += p[off[l] + e];
            n++;
        }
    }
    for (int l = 0; l < L && rc == 0 && n; l++)
        for (int e = 0; e < E; e++)
            p[off[l] + e] = (float)(avg[(size_t)l * E + e] / n);
    free(avg);
    return rc;
}

static int frozen_run(const char *path, const char *tokens, int B, int T, int batches,
                      const char *split, long first, int calib)
{
    int train = strcmp(split, "train") == 0;
    if (!train && strcmp(split, "eval") != 0)
        return 2;
    weft_model *m = NULL;
    weft_dataset *ds = NULL;
    weft_loader *ld = NULL;
    int rc = frozen_model(path, &m);
    if (rc) {
        fprintf(stderr, "moe_balance: %s: %s\n", path, weft_strerror(rc));
        return 1;
    }
    const weft_model_config *c = weft_model_config_of(m);
    int L = c->n_layer, E = c->experts;
    double mean = (double)B * T * c->topk / E;
    size_t *off = malloc(sizeof *off * (size_t)L), np;
    float *keep = malloc(sizeof *keep * (size_t)L * E), *p = weft_model_params(m, &np);
    int64_t *load = malloc(sizeof *load * (size_t)L * E);
    int64_t *sum = calloc((size_t)L * E, sizeof *sum);
    figs one = { 0 };
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = B;
    rc = off && keep && load && sum ? bias_offsets(m, L, off) : -1;
    rc = rc ? rc : weft_model_set_threads(m, 1);
    rc = rc ? rc : weft_dataset_open_tokens(&ds, tokens, T, train ? 0 : 0.9, train ? 0.9 : 1);
    rc = rc ? rc : weft_loader_create(&ld, ds, &lc);
    rc = rc ? rc : weft_loader_seek(ld, train ? (uint64_t)first * (uint64_t)B : 0);
    rc = rc || calib <= 0 ? rc : calibrate(m, ld, p, off, L, E, calib);
    for (int b = 0; b < batches && rc == 0; b++) {
        weft_batch bt;
        weft_moe_stats st;
        rc = weft_loader_next(ld, &bt);
        for (int l = 0; l < L && rc == 0; l++)
            memcpy(keep + (size_t)l * E, p + off[l], sizeof *keep * (size_t)E);
        rc = rc ? rc : weft_model_zero_grad(m);
        rc = rc ? rc : weft_model_forward(m, bt.tokens, bt.y, bt.n, bt.x_dim, NULL);
        rc = rc ? rc : weft_model_backward(m);
        rc = rc ? rc : weft_model_moe_stats(m, &st);
        for (int l = 0; l < L && rc == 0; l++)
            for (int e = 0; e < E; e++) {
                double d = (double)p[off[l] + e] - keep[(size_t)l * E + e];
                load[(size_t)l * E + e] = llround(mean - d * mean / PROP_RATE);
                sum[(size_t)l * E + e] += load[(size_t)l * E + e];
                p[off[l] + e] = keep[(size_t)l * E + e]; /* frozen */
            }
        double w = worst(load, L, E);
        if (rc == 0 && fabs(w - st.load_max / st.load_mean) > 1e-9) {
            fprintf(stderr, "moe_balance: batch %d: loads read back give %.6f, the model's "
                    "counters %.6f\n", b, w, st.load_max / st.load_mean);
            rc = -1;
        }
        rc = rc ? rc : figs_add(&one, w);
    }
    if (rc == 0) {
        char what[160];
        snprintf(what, sizeof what, "trained router, bias %s, %s, one batch",
                 calib > 0 ? "set anew and frozen" : "frozen",
                 train ? "the training stream's next batches" : "held-out documents");
        figs_print(what, &one, "batches");
        printf("trained router, bias %s, %s, the loads summed over %d batches: %.3f\n",
               calib > 0 ? "set anew and frozen" : "frozen", train ? "the training stream's next batches" : "held-out documents", batches,
               worst(sum, L, E));
    } else
        fprintf(stderr, "moe_balance: frozen run failed (%d)\n", rc);
    weft_loader_free(ld);
    weft_dataset_free(ds);
    weft_model_destroy(m);
    free(one.v);
    free(off);
    free(keep);
    free(load);
    free(sum);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "floor") == 0)
        return floor_run(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                         atoi(argv[6]), atoi(argv[7]), strtoull(argv[8], NULL, 10));
    if ((argc == 9 || argc == 10) && strcmp(argv[1], "frozen") == 0)
        return frozen_run(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
                          argv[7], atol(argv[8]), argc == 10 ? atoi(argv[9]) : 0);
    fprintf(stderr, "usage: moe_balance floor E K N L BATCHES WINDOW SEED\n"
                    "       moe_balance frozen CKPT TOKENS BATCH SEQ BATCHES train|eval FIRST [CALIB]\n");
    return 2;
}
