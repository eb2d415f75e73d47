/* The built-in sequence task: lines "a+b=c\n" as bytes. A sample is
 * seq_len tokens of consecutive problems starting at a line, with the
 * targets shifted by one. Whether (a, b) is a validation problem is a hash
 * of (seed, a, b), so training never sees a validation problem and
 * exact-match accuracy measures addition rather than memory. */
#include "train/data_rng.h"
#include "train/dataset_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DIGITS = 9, STREAM_SAMPLES = 200, STREAM_PROMPTS = 300, VAL_ONE_IN = 10 };

typedef struct {
    uint64_t seed, limit; /* operands are below limit = 10^digits */
    int split, digits, format;
} addition_data;

/* Writes "a+b=" into buf (and the answer "c\n" into ans) in the format. */
static int format_problem(const addition_data *d, uint64_t a, uint64_t b, char *buf, size_t cap,
                          char *ans, size_t ans_cap)
{
    int w = d->format & WEFT_ADDITION_PADDED ? d->digits : 1, ws = w == 1 ? 1 : w + 1;
    int n = snprintf(buf, cap, "%0*llu+%0*llu=", w, (unsigned long long)a, w,
                     (unsigned long long)b);
    int m = snprintf(ans, ans_cap, "%0*llu\n", ws, (unsigned long long)(a + b));
    if (n < 0 || (size_t)n >= cap || m < 0 || (size_t)m >= ans_cap)
        return WEFT_EINVAL;
    if (d->format & WEFT_ADDITION_REVERSED)
        for (int i = 0, j = m - 2; i < j; i++, j--) {
            char t = ans[i];
            ans[i] = ans[j];
            ans[j] = t;
        }
    return 0;
}

static int is_val(const addition_data *d, uint64_t a, uint64_t b)
{
    return data_mix64(d->seed ^ data_mix64(a * d->limit + b)) % VAL_ONE_IN == 0;
}

/* Next problem of this split from r. */
static void draw_problem(const addition_data *d, data_rng *r, uint64_t *a, uint64_t *b)
{
    do {
        *a = train_data_rng_below(r, d->limit);
        *b = train_data_rng_below(r, d->limit);
    } while (is_val(d, *a, *b) != (d->split == 1));
}

static int addition_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const addition_data *d = ds->impl;
    int T = ds->info.x_dim;
    data_rng r;
    data_rng_init(&r, d->seed, STREAM_SAMPLES + (uint64_t)d->split, i);
    char line[3 * MAX_DIGITS + 8];
    int have = 0, len = 0, pos = 0, answer_at = 0;
    /* T + 1 bytes: inputs are bytes 0..T-1, targets bytes 1..T. */
    while (have < T + 1) {
        if (pos == len) {
            uint64_t a, b;
            char ans[MAX_DIGITS + 4];
            draw_problem(d, &r, &a, &b);
            format_problem(d, a, b, line, sizeof line, ans, sizeof ans);
            answer_at = (int)strlen(line);
            memcpy(line + answer_at, ans, strlen(ans) + 1);
            len = answer_at + (int)strlen(ans);
            pos = 0;
        }
        int in_answer = pos >= answer_at;
        int32_t t = (unsigned char)line[pos++];
        if (have < T)
            tokens[have] = t;
        if (have > 0)
            y[have - 1] = in_answer || !(d->format & WEFT_ADDITION_ANSWER_LOSS) ? t : -1;
        have++;
    }
    return 0;
}

static int addition_prompt(const weft_dataset *ds, uint64_t i, char *prompt, size_t prompt_cap,
                           char *answer, size_t answer_cap)
{
    const addition_data *d = ds->impl;
    data_rng r;
    data_rng_init(&r, d->seed, STREAM_PROMPTS + (uint64_t)d->split, i);
    uint64_t a, b;
    draw_problem(d, &r, &a, &b);
    return format_problem(d, a, b, prompt, prompt_cap, answer, answer_cap);
}

static void addition_destroy(weft_dataset *ds)
{
    free(ds->impl);
}

int weft_dataset_addition(weft_dataset **out, uint64_t seed, int split, int digits, int format,
                          int seq_len, uint64_t n)
{
    if (!out || (split != 0 && split != 1) || digits < 1 || digits > MAX_DIGITS ||
        (format & ~(WEFT_ADDITION_PADDED | WEFT_ADDITION_REVERSED | WEFT_ADDITION_ANSWER_LOSS)) || seq_len < 1 || n == 0)
        return WEFT_EINVAL;
    *out = NULL;
    addition_data *d = calloc(1, sizeof *d);
    if (!d)
        return WEFT_ENOMEM;
    d->seed = seed;
    d->split = split;
    d->digits = digits;
    d->format = format;
    d->limit = 1;
    for (int k = 0; k < digits; k++)
        d->limit *= 10;
    if (digits <= 2) { /* few problems: make sure both splits have some */
        uint64_t val = 0;
        for (uint64_t a = 0; a < d->limit; a++)
            for (uint64_t b = 0; b < d->limit; b++)
                val += (uint64_t)is_val(d, a, b);
        if (val == 0 || val == d->limit * d->limit) {
            free(d);
            return WEFT_EINVAL;
        }
    }
    const char *name = split ? "builtin-addition/val" : "builtin-addition/train";
    weft_dataset *ds = train_dataset_alloc(WEFT_DATA_SEQ, n, seq_len, WEFT_BYTE_VOCAB, name);
    if (!ds) {
        free(d);
        return WEFT_ENOMEM;
    }
    ds->get = addition_get;
    ds->prompt = addition_prompt;
    ds->destroy = addition_destroy;
    ds->impl = d;
    *out = ds;
    return 0;
}
