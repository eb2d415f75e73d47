/* The run's evaluation (run_eval.c): test accuracy for images; validation
 * loss, exact-match answers and a sample for text. The forward passes run
 * in whatever layout eval_fwd describes (run_eval_layout.c: the training
 * layout's own); the answers and the sample need the whole model. */
#ifndef WEFT_RUN_RUN_EVAL_H
#define WEFT_RUN_RUN_EVAL_H

#include "run/run_int.h"

typedef struct run_cp_eval run_cp_eval;

/* One layout's forward over the evaluation batches. */
typedef struct eval_fwd {
    /* Collective over the ranks of one replica: *loss the batch's loss
     * times n, *correct its right answers (image data only), on the ranks
     * that hold them (0 elsewhere). */
    int (*forward)(struct eval_fwd *f, const void *in, const int32_t *y, int n, int T,
                   int image, double *loss, long *correct);
    /* Sums v[0..n) over the layout (every rank gets the totals). */
    int (*reduce)(struct eval_fwd *f, double *v, int n);
    /* Generating in the layout (NULL: it cannot; gather instead): fills
     * toks[pos] from the ctx tokens before it, on every rank with gen set
     * (collective over them). */
    int (*next_token)(struct eval_fwd *f, int32_t *toks, int pos, float temperature, int top_k,
                      weft_rng *rng);
    int gen;        /* this rank takes part in generating (the lead always) */
    int say;        /* this rank writes the lines and the CSV row */
    /* Collective: *whole the whole model on the lead for generating (NULL
     * elsewhere; *fits 0 where it would not fit --mem-limit), and its
     * release. */
    int (*gather)(struct eval_fwd *f, weft_model **whole, int *fits);
    void (*release)(struct eval_fwd *f, weft_model *whole);
    weft_run *t;
    weft_model *m;  /* this rank's part */
    int batch;      /* rows a forward */
    int share, shares; /* this rank takes batch b when b % shares == share (share < 0: none) */
    int lockstep;   /* every rank runs every round (ZeRO-3's per-block gathers) */
    void *state;
    run_cp_eval *cp; /* --cp: the groups' wrapping of the above (run_cp_eval.c) */
} eval_fwd;

/* This rank's part of the training layout, ready to evaluate (final: after
 * the last parameter average, when every replica holds the same model). */
int eval_layout_open(weft_run *t, int final, eval_fwd *f);
void eval_layout_close(eval_fwd *f);
/* --mem-limit: the evaluation's most held on any rank, checked
 * (collective over the job). */
int eval_layout_memory(eval_fwd *f);
/* A whole model on this rank alone (--mode ps, one process). */
void eval_local(weft_run *t, weft_model *m, eval_fwd *f);

/* Collective over f's layout: lines through the run's log (the lead's), a
 * row in csv; l: how far the loader went. */
int evaluate_in(weft_run *t, eval_fwd *f, const data_sets *d, const opts *o, FILE *csv,
                long step, const weft_loader *l);
/* The whole model m on this rank. */
int evaluate(weft_run *t, weft_model *m, const data_sets *d, const opts *o, FILE *csv,
             long step, const weft_loader *l);

#endif
