/* The run's evaluation: test accuracy for images; validation loss,
 * exact-match answers and a sample for text, as lines of the run's log. */
#include "run/run_eval.h"

#include "run/run_report.h"

#include <stdlib.h>
#include <string.h>

static int eval_mlp(weft_run *t, weft_model *m, const data_sets *d, FILE *csv, long step,
                    double epoch)
{
    enum { CHUNK = 500 };
    int dim = d->ei.x_dim;
    float *x = malloc((size_t)CHUNK * (size_t)dim * sizeof *x);
    int32_t *y = malloc(CHUNK * sizeof *y);
    int rc = 0;
    if (!x || !y) {
        free(x);
        free(y);
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    }
    double loss_sum = 0;
    long correct = 0;
    for (uint64_t i = 0; i < d->ei.n; i += CHUNK) {
        int n = (int)(d->ei.n - i < CHUNK ? d->ei.n - i : CHUNK);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, x + (size_t)k * (size_t)dim, NULL, y + k);
        float loss;
        rc = weft_model_forward(m, x, y, n, 1, &loss);
        if (rc != 0) {
            free(x);
            free(y);
            return run_fail(t, rc, "evaluation forward: %s", weft_strerror(rc));
        }
        loss_sum += (double)loss * n;
        correct += weft_model_count_correct(m, y);
    }
    double acc = (double)correct / (double)d->ei.n, loss = loss_sum / (double)d->ei.n;
    run_say(t, WEFT_RUN_OUT, t->o->eval_only
                ? "test: %s, %llu samples: accuracy %.6g (%ld correct), loss %.6g\n"
                : "test: %s, %llu samples: accuracy %.4f (%ld correct), loss %.4f\n",
            d->ei.name, (unsigned long long)d->ei.n, acc, correct, loss);
    csv_row(csv, step, epoch, "test", loss, acc, 0, -1, 0, 0);
    free(x);
    free(y);
    return 0;
}

/* s[0..n) escaped onto the end of line (cap bytes in all, kept ended). */
static void put_escaped(char *line, size_t cap, const char *s, size_t n)
{
    size_t at = strlen(line);
    for (size_t i = 0; i < n && at + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            at += (size_t)snprintf(line + at, cap - at, "\\n");
        else if (c >= 32 && c < 127)
            line[at++] = (char)c;
        else
            at += (size_t)snprintf(line + at, cap - at, "\\x%02x", c);
        line[at] = 0;
    }
}

/* Exact match on the held-out problems, five of them shown; *acc: the
 * share right (left alone when the data has no prompts); *shown: 1 when
 * it ran. */
static int eval_prompts(weft_run *t, weft_model *m, const data_sets *d, const opts *o,
                        weft_rng *rng, double *acc, int *shown_prompts)
{
    char prompt[64], answer[64];
    if (o->eval_prompts <= 0 ||
        weft_dataset_prompt(d->eval, 0, prompt, sizeof prompt, answer, sizeof answer) != 0)
        return 0;
    int right = 0, shown = 0;
    int32_t toks[160];
    char out[160];
    for (int i = 0; i < o->eval_prompts; i++) {
        weft_dataset_prompt(d->eval, (uint64_t)i, prompt, sizeof prompt, answer, sizeof answer);
        int np = (int)strlen(prompt), na = (int)strlen(answer);
        weft_bytes_encode(prompt, (size_t)np, toks);
        int rc = weft_model_generate(m, toks, np, np + na, 0, 0, rng);
        if (rc != 0)
            return run_fail(t, rc, "generate: %s", weft_strerror(rc));
        weft_bytes_decode(toks, (size_t)(np + na), out);
        int ok = memcmp(out + np, answer, (size_t)na) == 0;
        right += ok;
        if (shown < 5) {
            char line[1024];
            snprintf(line, sizeof line, "  %s", prompt);
            put_escaped(line, sizeof line, out + np, (size_t)na);
            run_say(t, WEFT_RUN_OUT, "%s   %s\n", line, ok ? "right" : "wrong");
            shown++;
        }
    }
    *acc = (double)right / o->eval_prompts;
    run_say(t, WEFT_RUN_OUT, "exact match: %d of %d held-out problems (%.4f)%s\n", right,
            o->eval_prompts, *acc,
            strstr(o->r.format, "reversed") ? "; sums are written least significant digit first"
                                            : "");
    *shown_prompts = 1;
    return 0;
}

/* A sample: the start of a validation window continued (x, y: room for a
 * window). */
static void eval_sample(weft_run *t, weft_model *m, const data_sets *d, weft_rng *rng,
                        int32_t *x, int32_t *y)
{
    int T = d->ei.x_dim;
    int np = T < 8 ? T : 8, total = np + 64;
    int32_t *toks = malloc((size_t)(total + 1) * sizeof *toks);
    char *text = malloc((size_t)total + 1);
    if (toks && text) {
        weft_dataset_get(d->eval, 0, NULL, x, y);
        memcpy(toks, x, (size_t)np * sizeof *toks);
        if (weft_model_generate(m, toks, np, total, 0.8f, 40, rng) == 0 &&
            d->ei.n_classes <= WEFT_BYTE_VOCAB) {
            char line[1024] = "sample (temperature 0.8, top-k 40): \"";
            weft_bytes_decode(toks, (size_t)total, text);
            put_escaped(line, sizeof line, text, (size_t)np);
            put_escaped(line, sizeof line, "|", 1);
            put_escaped(line, sizeof line, text + np, (size_t)(total - np));
            run_say(t, WEFT_RUN_OUT, "%s\"\n", line);
        }
    }
    free(toks);
    free(text);
}

static int eval_gpt(weft_run *t, weft_model *m, const data_sets *d, const opts *o, FILE *csv,
                    long step, double epoch)
{
    int T = d->ei.x_dim, B = 32, rc = 0;
    /* a run's closing look at a few thousand; --eval-only's at them all */
    uint64_t windows = d->ei.n < 4096 || o->eval_only ? d->ei.n : 4096;
    int32_t *x = malloc((size_t)B * (size_t)T * sizeof *x);
    int32_t *y = malloc((size_t)B * (size_t)T * sizeof *y);
    if (!x || !y)
        rc = run_fail(t, WEFT_ENOMEM, "out of memory");
    double loss_sum = 0;
    for (uint64_t i = 0; rc == 0 && i < windows; i += (uint64_t)B) {
        int n = (int)(windows - i < (uint64_t)B ? windows - i : (uint64_t)B);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, NULL, x + (size_t)k * (size_t)T,
                             y + (size_t)k * (size_t)T);
        float loss;
        rc = weft_model_forward(m, x, y, n, T, &loss);
        if (rc != 0)
            rc = run_fail(t, rc, "evaluation forward: %s", weft_strerror(rc));
        loss_sum += (double)loss * n;
    }
    if (rc == 0) {
        double vloss = loss_sum / (double)windows, acc = -1;
        run_say(t, WEFT_RUN_OUT, o->eval_only
                    ? "validation: %s, %llu windows of %d tokens: loss %.6g\n"
                    : "validation: %s, %llu windows of %d tokens: loss %.4f\n",
                d->ei.name, (unsigned long long)windows, T, vloss);
        weft_rng rng;
        weft_rng_seed(&rng, 1234);
        int shown_prompts = 0;
        rc = eval_prompts(t, m, d, o, &rng, &acc, &shown_prompts);
        if (rc == 0)
            csv_row(csv, step, epoch, "val", vloss, acc, 0, -1, 0, 0);
        /* the answers above already are samples of a prompted task */
        if (rc == 0 && !shown_prompts)
            eval_sample(t, m, d, &rng, x, y);
    }
    free(x);
    free(y);
    return rc;
}

/* epoch: how far the loader went, for the CSV row. */
int evaluate(weft_run *t, weft_model *m, const data_sets *d, const opts *o, FILE *csv,
             long step, const weft_loader *l)
{
    double epoch = (double)weft_loader_position(l) / (double)d->ti.n;
    if (d->ti.kind == WEFT_DATA_IMAGE)
        return eval_mlp(t, m, d, csv, step, epoch);
    return eval_gpt(t, m, d, o, csv, step, epoch);
}
