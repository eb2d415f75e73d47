/* --ep E (Megatron's expert parallelism inside data parallelism): the
 * data-parallel group of a stage is cut into expert groups of E
 * consecutive ranks (dp 4, ep 2: {0,1} and {2,3}); each rank of a group
 * runs E_total/E of the experts for the whole group's tokens, and the
 * ranks at the same place of every group (dp/E of them) hold the same
 * experts. Under --tp the data-parallel group is a tensor rank's (the
 * ranks holding the same slice of every tensor), so an expert group
 * exchanges rows between ranks of one tensor rank and each runs its
 * share of its experts' width on them (Megatron's expert tensor
 * parallelism with expert parallelism); the partial outputs come back and
 * are summed over the tensor group with the rest of the block's MLP.
 * Two test-only variables shape the routing and the capacity so
 * that a test can skew the load or make a rank disagree:
 * WEFT_TEST_MOE_SKEW (a router logit bias toward experts 0 and 1) and
 * WEFT_TEST_MOE_SKEW_RANK (that data-parallel rank announces a capacity
 * one higher than the others). */
#include "run/run_ep.h"

#include "train/model.h"
#include "train/moe_ep.h"
#include "train/moe_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What --ep cannot go with, as run_fail's message. */
static int refuse(weft_run *t, const opts *o, const weft_model_config *c, int dp)
{
    int E = o->ep;
    if (c->type == WEFT_MODEL_MLP || c->experts <= 0)
        return run_fail(t, WEFT_ECONFIG, "--ep %d spreads a mixture of experts' experts: the "
                        "model has none (llama:... or gpt:...,experts=N)", E);
    if (o->ps || strcmp(o->sync, "full") != 0 || o->elastic)
        return run_fail(t, WEFT_ECONFIG, "--ep %d takes --sync full (no --mode ps, no "
                        "--elastic): the other modes average whole models", E);
    if (dp % E || c->experts % E)
        return run_fail(t, WEFT_ECONFIG, "--ep %d: it must divide the data-parallel ranks "
                        "(%d) and the experts (%d)", E, dp, c->experts);
    return 0;
}

/* Each rank keeps its own experts' weights (and so gradients and
 * optimiser state) only; the ranks at the same place of every group
 * reduce those gradients among themselves. */
static int divide(weft_run *t, int E)
{
    weft_comm *rep = NULL;
    int rc = weft_comm_split(t->comm, t->rank % E, t->rank / E, &rep);
    if (rc == 0 && (rc = train_moe_split(t->m, E, t->rank % E, rep)) != 0)
        weft_comm_destroy(rep);
    if (rc != 0)
        return run_fail(t, rc, "--ep %d: dividing the experts: %s", E, weft_strerror(rc));
    return 0;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int run_ep_open(weft_run *t)
{
    const opts *o = t->o;
    const char *sk = getenv("WEFT_TEST_MOE_SKEW");
    float skew = sk && *sk ? strtof(sk, NULL) : 0.0f;
    int E = o->ep > 1 ? o->ep : 1, lie = env_int("WEFT_TEST_MOE_SKEW_RANK", -1) == t->rank;
    const weft_model_config *c = weft_model_config_of(t->m);
    /* a GPT's experts: what the Llama's refuse in run_cp.c */
    if (o->cp > 1 && c->type == WEFT_MODEL_GPT && c->experts > 0)
        return run_fail(t, WEFT_ECONFIG, "--cp %d with a mixture of experts: not done", o->cp);
    if (E == 1 && skew == 0.0f)
        return 0;
    if (E == 1 && (c->type == WEFT_MODEL_MLP || c->experts <= 0))
        return 0;
    int rc = E > 1 ? refuse(t, o, c, t->world) : 0;
    if (rc)
        return rc;
    weft_comm *g = NULL;
    int first = t->rank / E * E;
    if (E > 1 && (rc = weft_comm_split(t->comm, t->rank / E, t->rank % E, &g)) != 0)
        return run_fail(t, rc, "--ep %d: the expert groups: %s: %s", E, weft_strerror(rc),
                        weft_comm_error(t->comm));
    moe_ep *p;
    if ((rc = train_moe_ep_open(&p, g, c->experts, first, skew, lie)) != 0) {
        weft_comm_destroy(g);
        return run_fail(t, rc, "--ep %d: %s", E, weft_strerror(rc));
    }
    train_moe_ep_free(t->m->ep);
    t->m->ep = p;
    size_t whole = 0, mine = 0;
    weft_model_params(t->m, &whole);
    if (E > 1 && (rc = divide(t, E)) != 0)
        return rc;
    weft_model_params(t->m, &mine);
    int tp = o->tp > 1 ? o->tp : 1;
    if (E > 1 && !o->quiet)
        run_say(t, WEFT_RUN_OUT, "experts: %d over expert groups of %d data-parallel ranks "
                "(%d each, each expert on %d rank%s%s); a rank holds %zu of the model's %zu "
                "parameters%s (with their gradients and optimiser state)\n", c->experts, E,
                c->experts / E, t->world / E * tp, t->world / E * tp > 1 ? "s" : "",
                tp > 1 ? ", a share of its width on each" : "", mine, whole,
                !t->pl ? "" : tp > 1 ? " of its stage's tensor slice" : " of its stage");
    return 0;
}

int run_ep_eval(weft_run *t, int on)
{
    if (!t->m || train_moe_ep_size(t->m->ep) < 2)
        return 0;
    train_moe_ep_set_eval(t->m->ep, on);
    return 1;
}

int run_ep_line(const weft_run *t, long steps, char *buf, size_t len)
{
    if (!t->m || !t->m->ep || train_moe_ep_size(t->m->ep) < 2 || steps < 1)
        return 0;
    moe_ep_count n;
    train_moe_ep_counters(t->m->ep, &n);
    int E = t->m->cfg.experts;
    double mean = n.calls ? (double)n.rows / ((double)n.calls * E) : 0;
    snprintf(buf, len, "all-to-all %.3f MB and %.2f ms a step (mean); the group's tokens per "
             "expert max/mean %.3f; copied in memory around it %.3f MB a step",
             (double)n.bytes / 1e6 / (double)steps, n.seconds * 1e3 / (double)steps,
             mean > 0 ? (double)n.rows_max / (double)n.calls / mean : 0.0,
             (double)n.copied / 1e6 / (double)steps);
    return 1;
}
