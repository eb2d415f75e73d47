/* Evaluation under --cp, in the training layout (run_eval_layout.c's
 * forward passes): a context-parallel group takes an evaluation batch
 * together, each rank its zig-zag rows of every window (as the training
 * data's view gives them), so the ring meets in every layer and the loss
 * is the group's mean over its tokens, each rank's share summed by the
 * layout's reduction with the other groups'. The replicas that take
 * turns at the batches are the groups, not their ranks. Generating runs
 * on the whole model gathered on the lead (a prompt's growing prefix does
 * not cut into 2C chunks), with the lead's ring set aside meanwhile when
 * the gathered model is its own. */
#include "run/run_cp.h"
#include "run/run_eval.h"

#include "train/attention_cp.h"
#include "train/model.h"

#include <stdlib.h>

struct run_cp_eval {
    int (*forward)(eval_fwd *f, const void *in, const int32_t *y, int n, int T, int image,
                   double *loss, long *correct);
    int (*gather)(eval_fwd *f, weft_model **whole, int *fits);
    void (*release)(eval_fwd *f, weft_model *whole);
    attn_cp *held;  /* the lead's ring while its own model generates alone */
    int32_t *x, *y; /* this rank's rows of a batch's windows */
    size_t cap;
};

static int cp_forward(eval_fwd *f, const void *in, const int32_t *y, int n, int T, int image,
                      double *loss, long *correct)
{
    run_cp_eval *c = f->cp;
    const attn_cp *cp = f->t->m->cp;
    int C = train_attn_cp_size(cp), r = train_attn_cp_rank(cp);
    if (image || n < 1 || T % (2 * C))
        return WEFT_EINVAL;
    int Tl = T / C;
    size_t need = (size_t)n * (size_t)Tl;
    if (need > c->cap) {
        int32_t *x = realloc(c->x, need * sizeof *x), *yy = x ? realloc(c->y, need * sizeof *yy)
                                                              : NULL;
        if (x)
            c->x = x;
        if (!x || !yy)
            return WEFT_ENOMEM;
        c->y = yy;
        c->cap = need;
    }
    const int32_t *tok = in;
    for (int k = 0; k < n; k++)
        for (int t = 0; t < Tl; t++) {
            size_t p = (size_t)k * (size_t)T + (size_t)train_cp_pos(r, C, Tl, t);
            c->x[(size_t)k * Tl + t] = tok[p];
            c->y[(size_t)k * Tl + t] = y ? y[p] : 0;
        }
    return c->forward(f, c->x, y ? c->y : NULL, n, Tl, 0, loss, correct);
}

static int cp_gather(eval_fwd *f, weft_model **whole, int *fits)
{
    run_cp_eval *c = f->cp;
    int rc = c->gather(f, whole, fits);
    /* the lead generates alone on its own model: no group to ring with */
    if (rc == 0 && *whole && *whole == f->t->m && !c->held) {
        c->held = f->t->m->cp;
        f->t->m->cp = NULL;
    }
    return rc;
}

static void put_back(eval_fwd *f)
{
    run_cp_eval *c = f->cp;
    if (c && c->held) {
        f->t->m->cp = c->held;
        c->held = NULL;
    }
}

static void cp_release(eval_fwd *f, weft_model *whole)
{
    put_back(f);
    f->cp->release(f, whole);
}

int run_cp_eval_open(weft_run *t, eval_fwd *f)
{
    int C = t->o->cp;
    if (C <= 1 || !t->m || !t->m->cp)
        return 0;
    int q = run_cp_replica(t);
    if (q < 0)
        return run_fail(t, WEFT_ECONFIG, "--cp %d: the layout does not fit the job", C);
    run_cp_eval *c = calloc(1, sizeof *c);
    if (!c)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    c->forward = f->forward;
    c->gather = f->gather;
    c->release = f->release;
    f->cp = c;
    f->forward = cp_forward;
    f->gather = cp_gather;
    f->release = cp_release;
    f->next_token = NULL;
    /* a group's forward takes C times a rank's share of the rows (each
     * rank 1/C of each window): a training micro-batch's activations */
    f->batch = f->batch * C < 32 ? f->batch * C : 32;
    /* the groups take turns at the batches (shares > 1: every replica
     * does, else the lead's alone), every rank of a group the same ones */
    if (f->shares > 1) {
        f->shares /= C;
        f->share = q / C;
    } else {
        f->share = q / C == 0 ? 0 : -1;
    }
    return 0;
}

void run_cp_eval_close(eval_fwd *f)
{
    run_cp_eval *c = f->cp;
    if (!c)
        return;
    put_back(f);
    free(c->x);
    free(c->y);
    free(c);
    f->cp = NULL;
}
