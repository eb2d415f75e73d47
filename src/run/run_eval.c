/* The run's evaluation: test accuracy for images; validation loss,
 * exact-match answers and a sample for text, as lines of the run's log. */
#include "run/run_eval.h"

#include "run/run_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Batches of f->batch samples of the first count of the evaluation set,
 * shared over f's ranks: *loss the sum of the per-sample losses, *correct
 * the right answers (image data), summed over the layout. */
static int eval_batches(eval_fwd *f, const data_sets *d, uint64_t count, int image,
                        double *loss, long *correct)
{
    int B = f->batch, dim = d->ei.x_dim, rc = 0;
    size_t xw = image ? sizeof(float) : sizeof(int32_t), yn = image ? 1 : (size_t)dim;
    void *x = malloc((size_t)B * (size_t)dim * xw);
    int32_t *y = malloc((size_t)B * yn * sizeof *y);
    if (!x || !y)
        rc = WEFT_ENOMEM;
    double v[3] = { 0, 0, 0 };
    uint64_t nb = (count + (uint64_t)B - 1) / (uint64_t)B;
    uint64_t rounds = f->share < 0 ? 0 : (nb + (uint64_t)f->shares - 1) / (uint64_t)f->shares;
    for (uint64_t r = 0; rc == 0 && r < rounds; r++) {
        uint64_t b = r * (uint64_t)f->shares + (uint64_t)f->share;
        int have = b < nb;
        if (!have && !f->lockstep)
            break;
        /* lockstep: a rank past the end runs the first batch again, unheard,
         * so that the collectives inside forward still meet */
        uint64_t at = have ? b * (uint64_t)B : 0;
        int n = (int)(count - at < (uint64_t)B ? count - at : (uint64_t)B);
        for (int k = 0; k < n; k++) {
            char *xk = (char *)x + (size_t)k * (size_t)dim * xw;
            if (image)
                weft_dataset_get(d->eval, at + (uint64_t)k, (float *)xk, NULL, y + k);
            else
                weft_dataset_get(d->eval, at + (uint64_t)k, NULL, (int32_t *)xk,
                                 y + (size_t)k * yn);
        }
        double l = 0;
        long c = 0;
        rc = f->forward(f, x, y, n, image ? 1 : dim, image, &l, &c);
        if (have) {
            v[0] += l;
            v[1] += (double)c;
        }
    }
    free(x);
    free(y);
    /* every rank reduces, a failed one too (counted in v[2]): the others
     * are waiting there, and all of them stop together */
    v[2] = rc != 0;
    int r2 = f->reduce(f, v, 3);
    *loss = v[0];
    *correct = lrint(v[1]);
    if (rc == 0 && r2 == 0 && v[2] > 0)
        rc = WEFT_EINVAL;
    return rc ? rc : r2;
}

static int eval_mlp(weft_run *t, eval_fwd *f, const data_sets *d, FILE *csv, long step,
                    double epoch)
{
    double loss_sum;
    long correct;
    int rc = eval_batches(f, d, d->ei.n, 1, &loss_sum, &correct);
    if (rc != 0)
        return run_fail(t, rc, "evaluation forward: %s", weft_strerror(rc));
    double acc = (double)correct / (double)d->ei.n, loss = loss_sum / (double)d->ei.n;
    if (!f->say)
        return 0;
    run_say(t, WEFT_RUN_OUT, t->o->eval_only
                ? "test: %s, %llu samples: accuracy %.6g (%ld correct), loss %.6g\n"
                : "test: %s, %llu samples: accuracy %.4f (%ld correct), loss %.4f\n",
            d->ei.name, (unsigned long long)d->ei.n, acc, correct, loss);
    csv_row(csv, step, epoch, "test", loss, acc, 0, -1, 0, 0);
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
/* tokens[n_prompt..n_total) generated through f's layout. */
static int fwd_generate(eval_fwd *f, int32_t *tokens, int n_prompt, int n_total,
                        float temperature, int top_k, weft_rng *rng)
{
    int rc = 0;
    for (int pos = n_prompt; rc == 0 && pos < n_total; pos++)
        rc = f->next_token(f, tokens, pos, temperature, top_k, rng);
    return rc;
}

static int eval_prompts(weft_run *t, eval_fwd *f, const data_sets *d, const opts *o,
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
        int rc = fwd_generate(f, toks, np, np + na, 0, 0, rng);
        if (rc != 0)
            return run_fail(t, rc, "generate: %s", weft_strerror(rc));
        weft_bytes_decode(toks, (size_t)(np + na), out);
        int ok = memcmp(out + np, answer, (size_t)na) == 0;
        right += ok;
        if (shown < 5 && f->say) {
            char line[1024];
            snprintf(line, sizeof line, "  %s", prompt);
            put_escaped(line, sizeof line, out + np, (size_t)na);
            run_say(t, WEFT_RUN_OUT, "%s   %s\n", line, ok ? "right" : "wrong");
            shown++;
        }
    }
    *acc = (double)right / o->eval_prompts;
    if (f->say)
        run_say(t, WEFT_RUN_OUT, "exact match: %d of %d held-out problems (%.4f)%s\n", right,
            o->eval_prompts, *acc,
            strstr(o->r.format, "reversed") ? "; sums are written least significant digit first"
                                            : "");
    *shown_prompts = 1;
    return 0;
}

/* A sample: the start of a validation window continued (x, y: room for a
 * window). */
static int eval_sample(weft_run *t, eval_fwd *f, const data_sets *d, weft_rng *rng,
                       int32_t *x, int32_t *y)
{
    int T = d->ei.x_dim;
    int np = T < 8 ? T : 8, total = np + 64;
    int32_t *toks = malloc((size_t)(total + 1) * sizeof *toks);
    char *text = malloc((size_t)total + 1);
    int rc = toks && text ? 0 : WEFT_ENOMEM;
    if (rc == 0) {
        weft_dataset_get(d->eval, 0, NULL, x, y);
        memcpy(toks, x, (size_t)np * sizeof *toks);
        rc = fwd_generate(f, toks, np, total, 0.8f, 40, rng);
        if (rc == 0 && f->say && d->ei.n_classes <= WEFT_BYTE_VOCAB) {
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
    return rc;
}

/* The answers and the sample, generated through g (on the ranks that
 * take part in it; NULL: left out); say: this rank writes the CSV row. */
static int eval_generate(weft_run *t, eval_fwd *g, int say, const data_sets *d, const opts *o,
                         FILE *csv, long step, double epoch, double vloss)
{
    int T = d->ei.x_dim, rc = 0;
    int32_t *x = malloc((size_t)T * sizeof *x), *y = malloc((size_t)T * sizeof *y);
    if (!x || !y)
        rc = run_fail(t, WEFT_ENOMEM, "out of memory");
    double acc = -1;
    weft_rng rng;
    weft_rng_seed(&rng, 1234);
    int shown_prompts = 0;
    if (rc == 0 && g)
        rc = eval_prompts(t, g, d, o, &rng, &acc, &shown_prompts);
    if (rc == 0 && say)
        csv_row(csv, step, epoch, "val", vloss, acc, 0, -1, 0, 0);
    /* the answers above already are samples of a prompted task */
    if (rc == 0 && g && !shown_prompts && (rc = eval_sample(t, g, d, &rng, x, y)) != 0)
        rc = run_fail(t, rc, "generate: %s", weft_strerror(rc));
    free(x);
    free(y);
    return rc;
}

/* Generating on the whole model gathered on the lead, where it fits. */
static int eval_gathered(weft_run *t, eval_fwd *f, const data_sets *d, const opts *o,
                         FILE *csv, long step, double epoch, double vloss)
{
    weft_model *whole = NULL;
    int fits = 1, rc = f->gather(f, &whole, &fits);
    if (rc != 0)
        return rc;
    if (!fits && f->say)
        run_say(t, WEFT_RUN_OUT, "exact match and sample left out: the whole model does not "
                                 "fit --mem-limit on one rank\n");
    eval_fwd g;
    if (t->lead) {
        eval_local(t, whole, &g);
        rc = eval_generate(t, fits ? &g : NULL, f->say, d, o, csv, step, epoch, vloss);
    }
    f->release(f, whole);
    return rc;
}

static int eval_gpt(weft_run *t, eval_fwd *f, const data_sets *d, const opts *o, FILE *csv,
                    long step, double epoch)
{
    int T = d->ei.x_dim;
    /* a run's closing look at a few thousand; --eval-only's at them all */
    uint64_t windows = d->ei.n < 4096 || o->eval_only ? d->ei.n : 4096;
    double loss_sum;
    long correct;
    int rc = eval_batches(f, d, windows, 0, &loss_sum, &correct);
    if (rc != 0)
        return run_fail(t, rc, "evaluation forward: %s", weft_strerror(rc));
    double vloss = loss_sum / (double)windows;
    if (f->say)
        run_say(t, WEFT_RUN_OUT, o->eval_only
                ? "validation: %s, %llu windows of %d tokens: loss %.6g\n"
                : "validation: %s, %llu windows of %d tokens: loss %.4f\n",
            d->ei.name, (unsigned long long)windows, T, vloss);
    if (!f->next_token)
        return eval_gathered(t, f, d, o, csv, step, epoch, vloss);
    return f->gen ? eval_generate(t, f, f->say, d, o, csv, step, epoch, vloss) : 0;
}

/* epoch: how far the loader went, for the CSV row. */
int evaluate_in(weft_run *t, eval_fwd *f, const data_sets *d, const opts *o, FILE *csv,
                long step, const weft_loader *l)
{
    double epoch = (double)weft_loader_position(l) / (double)d->ti.n;
    if (d->ti.kind == WEFT_DATA_IMAGE)
        return eval_mlp(t, f, d, csv, step, epoch);
    return eval_gpt(t, f, d, o, csv, step, epoch);
}

int evaluate(weft_run *t, weft_model *m, const data_sets *d, const opts *o, FILE *csv,
             long step, const weft_loader *l)
{
    eval_fwd f;
    eval_local(t, m, &f);
    return evaluate_in(t, &f, d, o, csv, step, l);
}
