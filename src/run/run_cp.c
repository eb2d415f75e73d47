/* --cp C (context parallelism, Megatron's layout): the job's ranks in
 * groups of C; the ranks of a group take the same samples and each holds
 * 2 of the 2C chunks of every sequence (rank r: chunks r and 2C-1-r, so
 * the causal work is even). Attention meets the other chunks around the
 * group's ring (train/attention_cp.c); norms, MLP and loss are per token.
 * The loss is a mean over the group's tokens (their count summed over the
 * group), and the groups sit inside the data-parallel reduction: the
 * gradients are averaged over all dp x cp ranks, which hold the same
 * parameters. With --tp and --pp (tp x cp x dp x pp) a group is C
 * consecutive ranks of a data-parallel group, the fastest part of the
 * layout's data-parallel coordinate: one tensor rank and one stage, so
 * the ring runs on that rank's heads and the tensor collectives and the
 * pipeline's messages stay among ranks that hold the same rows. */
#include "run/run_cp.h"

#include "train/attention_cp.h"
#include "train/dataset_impl.h"
#include "train/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return WEFT_ECONFIG;
}

int run_cp_check(const opts *o, char *err, size_t cap)
{
    int C = o->cp;
    if (C <= 1)
        return 0;
    if (o->sp)
        return bad(err, cap, "--cp %d with --sp: both split the sequence (sequence "
                   "parallelism over the tensor group); give one of them", C);
    if (o->ep > 1)
        return bad(err, cap, "--cp %d with --ep %d: not done; give one of them", C, o->ep);
    if (o->layout_auto)
        return bad(err, cap, "--cp %d with --layout auto: the planner does not weigh --cp; "
                   "give one of them", C);
    if (o->ps || strcmp(o->sync, "full") != 0 || o->elastic)
        return bad(err, cap, "--cp %d takes --sync full (no --mode ps, no --elastic): the "
                   "group's ranks hold one replica between them", C);
    if (o->r.seq % (2 * C))
        return bad(err, cap, "--cp %d: --seq %d must be a multiple of 2 x %d (the zig-zag's "
                   "%d chunks)", C, o->r.seq, C, 2 * C);
    return 0;
}

/* ---- the samples: each rank its zig-zag rows ------------------------------------ */

typedef struct {
    weft_dataset *inner;
    int r, C, T;
} cp_view;

static int view_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const cp_view *v = ds->impl;
    int T = v->T, Tl = T / v->C;
    int32_t *whole = malloc(sizeof(int32_t) * 2 * (size_t)T);
    if (!whole)
        return WEFT_ENOMEM;
    int rc = weft_dataset_get(v->inner, i, x, whole, whole + T);
    for (int t = 0; rc == 0 && t < Tl; t++) {
        int p = train_cp_pos(v->r, v->C, Tl, t);
        tokens[t] = whole[p];
        y[t] = whole[T + p];
    }
    free(whole);
    return rc;
}

static void view_destroy(weft_dataset *ds)
{
    cp_view *v = ds->impl;
    weft_dataset_free(v->inner);
    free(v);
}

/* This rank's place in its group: the fastest part of its data-parallel
 * coordinate in the tp x dp layout (--order's), so a group's ranks share
 * their tensor rank and differ in nothing else. -1: the layout does not
 * fit the job. */
int run_cp_replica(const weft_run *t)
{
    const opts *o = t->o;
    int jr = t->job ? weft_comm_rank(t->job) : 0, jw = t->job ? weft_comm_size(t->job) : 1;
    int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1, x, q, y;
    weft_layout l;
    if (jw % (tp * pp * o->cp) || weft_layout_init(&l, jw, tp, pp, o->order))
        return -1;
    weft_layout_coords(&l, jr, &x, &q, &y);
    return q;
}

static int group_place(const weft_run *t)
{
    int q = run_cp_replica(t);
    return q < 0 ? -1 : q % t->o->cp;
}

int run_cp_data(weft_run *t, data_sets *d)
{
    int C = t->o->cp, tp = t->o->tp > 1 ? t->o->tp : 1;
    int jw = t->job ? weft_comm_size(t->job) : 1;
    if (C <= 1)
        return 0;
    int r = group_place(t);
    if (r < 0)
        return run_fail(t, WEFT_ECONFIG, "--cp %d%s: it must divide the job's ranks (%d)%s",
                        C, tp > 1 ? " x --tp" : "", jw, tp > 1 ? " over the tensor groups" : "");
    if (d->ti.kind != WEFT_DATA_SEQ || d->ti.x_dim % (2 * C))
        return run_fail(t, WEFT_ECONFIG, "--cp %d splits sequences of a multiple of %d tokens: "
                        "the data %s has samples of %d", C, 2 * C, d->ti.name, d->ti.x_dim);
    cp_view *v = calloc(1, sizeof *v);
    weft_dataset *ds = train_dataset_alloc(WEFT_DATA_SEQ, d->ti.n, d->ti.x_dim / C,
                                           d->ti.n_classes, d->ti.name);
    if (!v || !ds) {
        free(v);
        free(ds);
        return run_fail(t, WEFT_ENOMEM, "--cp %d: out of memory", C);
    }
    *v = (cp_view){ d->train, r, C, d->ti.x_dim };
    ds->impl = v;
    ds->get = view_get;
    ds->destroy = view_destroy;
    ds->keyed_order = d->train->keyed_order; /* the same sample order */
    d->train = ds;
    return 0;
}

void run_cp_loader_ranks(const weft_run *t, int *rank, int *world)
{
    int C = t->o->cp > 1 ? t->o->cp : 1;
    *rank /= C;
    *world /= C;
}

/* ---- the groups ----------------------------------------------------------------- */

int run_cp_open(weft_run *t)
{
    const opts *o = t->o;
    int C = o->cp, rc;
    if (C <= 1)
        return 0;
    const weft_model_config *c = weft_model_config_of(t->m);
    if (c->type == WEFT_MODEL_MLP)
        return run_fail(t, WEFT_ECONFIG, "--cp %d splits sequences: the model is an MLP", C);
    if (c->type == WEFT_MODEL_LLAMA && c->experts > 0)
        return run_fail(t, WEFT_ECONFIG, "--cp %d with a mixture of experts: not done", C);
    weft_comm *g = NULL;
    /* the data-parallel group (the job's ranks of this tensor rank): its
     * consecutive ranks, which the data views placed (group_place) */
    if (!t->comm || t->world % C || t->rank % C != group_place(t))
        return run_fail(t, WEFT_ECONFIG, "--cp %d needs a data-parallel group of a multiple "
                        "of %d ranks (it has %d)", C, C, t->comm ? t->world : 1);
    if ((rc = weft_comm_split(t->comm, t->rank / C, t->rank % C, &g)) != 0)
        return run_fail(t, rc, "--cp %d: the context-parallel groups: %s: %s", C,
                        weft_strerror(rc), weft_comm_error(t->comm));
    attn_cp *cp;
    if ((rc = train_attn_cp_open(&cp, g)) != 0) {
        weft_comm_destroy(g);
        return run_fail(t, rc, "--cp %d: %s", C, weft_strerror(rc));
    }
    /* bf16 products in the ring as in the rest of a bf16 model */
    train_attn_cp_set_bf16(cp, t->m->prec == WEFT_PREC_BF16);
    train_attn_cp_free(t->m->cp);
    t->m->cp = cp;
    if (!o->quiet)
        run_say(t, WEFT_RUN_OUT, "context parallel: sequences of %d over groups of %d ranks "
                "(%d tokens each, chunks r and %d-r of %d); %d replicas%s\n", o->r.seq, C,
                o->r.seq / C, 2 * C - 1, 2 * C, t->world / C,
                o->tp > 1 ? ", each group's ranks of one tensor rank" : "");
    return 0;
}

int run_cp_line(const weft_run *t, long steps, char *buf, size_t len)
{
    if (!t->m || !t->m->cp || steps < 1)
        return 0;
    uint64_t n, bytes, held;
    train_attn_cp_counters(t->m->cp, &n, &bytes, &held);
    snprintf(buf, len, "context ring: %.1f steps and %.3f MB sent a training step (mean); "
             "ring buffers %llu B", (double)n / (double)steps,
             (double)bytes / 1e6 / (double)steps, (unsigned long long)held);
    return 1;
}
