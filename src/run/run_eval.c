/* weft-train's final evaluation: test accuracy for images; validation loss,
 * exact-match answers and a sample for text. */
#include "train_tool.h"

#include <stdlib.h>
#include <string.h>

static void eval_mlp(weft_model *m, const data_sets *d, FILE *csv, long step, double epoch)
{
    enum { CHUNK = 500 };
    int dim = d->ei.x_dim;
    float *x = malloc((size_t)CHUNK * (size_t)dim * sizeof *x);
    int32_t *y = malloc(CHUNK * sizeof *y);
    if (!x || !y)
        die("out of memory");
    double loss_sum = 0;
    long correct = 0;
    for (uint64_t i = 0; i < d->ei.n; i += CHUNK) {
        int n = (int)(d->ei.n - i < CHUNK ? d->ei.n - i : CHUNK);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, x + (size_t)k * (size_t)dim, NULL, y + k);
        float loss;
        int rc = weft_model_forward(m, x, y, n, 1, &loss);
        if (rc != 0)
            die("evaluation forward: %s", weft_strerror(rc));
        loss_sum += (double)loss * n;
        correct += weft_model_count_correct(m, y);
    }
    double acc = (double)correct / (double)d->ei.n, loss = loss_sum / (double)d->ei.n;
    printf("test: %s, %llu samples: accuracy %.4f (%ld correct), loss %.4f\n", d->ei.name,
           (unsigned long long)d->ei.n, acc, correct, loss);
    csv_row(csv, step, epoch, "test", loss, acc, 0, -1, 0, 0);
    free(x);
    free(y);
}

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c >= 32 && c < 127)
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

static void eval_gpt(weft_model *m, const data_sets *d, const opts *o, FILE *csv, long step,
                     double epoch)
{
    int T = d->ei.x_dim, B = 32;
    uint64_t windows = d->ei.n < 4096 ? d->ei.n : 4096;
    int32_t *x = malloc((size_t)B * (size_t)T * sizeof *x);
    int32_t *y = malloc((size_t)B * (size_t)T * sizeof *y);
    if (!x || !y)
        die("out of memory");
    double loss_sum = 0;
    for (uint64_t i = 0; i < windows; i += (uint64_t)B) {
        int n = (int)(windows - i < (uint64_t)B ? windows - i : (uint64_t)B);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, NULL, x + (size_t)k * (size_t)T,
                             y + (size_t)k * (size_t)T);
        float loss;
        int rc = weft_model_forward(m, x, y, n, T, &loss);
        if (rc != 0)
            die("evaluation forward: %s", weft_strerror(rc));
        loss_sum += (double)loss * n;
    }
    double vloss = loss_sum / (double)windows;
    printf("validation: %s, %llu windows of %d tokens: loss %.4f\n", d->ei.name,
           (unsigned long long)windows, T, vloss);

    weft_rng rng;
    weft_rng_seed(&rng, 1234);
    char prompt[64], answer[64];
    double acc = -1;
    int shown_prompts = 0;
    if (o->eval_prompts > 0 &&
        weft_dataset_prompt(d->eval, 0, prompt, sizeof prompt, answer, sizeof answer) == 0) {
        int right = 0, shown = 0;
        int32_t toks[160];
        char out[160];
        for (int i = 0; i < o->eval_prompts; i++) {
            weft_dataset_prompt(d->eval, (uint64_t)i, prompt, sizeof prompt, answer,
                                sizeof answer);
            int np = (int)strlen(prompt), na = (int)strlen(answer);
            weft_bytes_encode(prompt, (size_t)np, toks);
            int rc = weft_model_generate(m, toks, np, np + na, 0, 0, &rng);
            if (rc != 0)
                die("generate: %s", weft_strerror(rc));
            weft_bytes_decode(toks, (size_t)(np + na), out);
            int ok = memcmp(out + np, answer, (size_t)na) == 0;
            right += ok;
            if (shown < 5) {
                printf("  %s", prompt);
                print_escaped(out + np, (size_t)na);
                printf("   %s\n", ok ? "right" : "wrong");
                shown++;
            }
        }
        acc = (double)right / o->eval_prompts;
        printf("exact match: %d of %d held-out problems (%.4f)%s\n", right, o->eval_prompts, acc,
               strstr(o->r.format, "reversed") ? "; sums are written least significant digit first"
                                               : "");
        shown_prompts = 1;
    }
    csv_row(csv, step, epoch, "val", vloss, acc, 0, -1, 0, 0);

    /* a sample: continue the start of a validation window (the answers
     * above already are samples of a prompted task) */
    int np = T < 8 ? T : 8, total = shown_prompts ? 0 : np + 64;
    int32_t *toks = malloc((size_t)(total + 1) * sizeof *toks);
    char *text = malloc((size_t)total + 1);
    if (total && toks && text) {
        weft_dataset_get(d->eval, 0, NULL, x, y);
        memcpy(toks, x, (size_t)np * sizeof *toks);
        if (weft_model_generate(m, toks, np, total, 0.8f, 40, &rng) == 0 &&
            d->ei.n_classes <= WEFT_BYTE_VOCAB) {
            weft_bytes_decode(toks, (size_t)total, text);
            printf("sample (temperature 0.8, top-k 40): \"");
            print_escaped(text, (size_t)np);
            printf("|");
            print_escaped(text + np, (size_t)(total - np));
            printf("\"\n");
        }
    }
    free(toks);
    free(text);
    free(x);
    free(y);
}

/* epoch: how far the loader went, for the CSV row. */
void evaluate(weft_model *m, const data_sets *d, const opts *o, FILE *csv, long step,
              const weft_loader *l)
{
    double epoch = (double)weft_loader_position(l) / (double)d->ti.n;
    if (d->ti.kind == WEFT_DATA_IMAGE)
        eval_mlp(m, d, csv, step, epoch);
    else
        eval_gpt(m, d, o, csv, step, epoch);
}
