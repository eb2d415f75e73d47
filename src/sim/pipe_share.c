/* Processor-sharing replay of a pipeline schedule (pipe_share.h): events
 * are a rank's work ending, its wait ending and a message arriving;
 * between two events every rank computing moves at the same speed. */
#include "sim/pipe_share.h"

#include <stdlib.h>

#include "weft.h"

enum { IDLE = 0, WORK, HOLD, DONE };

typedef struct {
    const pipe_sched *s;
    const pipe_share_costs *c;
    pipe_result *r;
    int p, nmsg;
    double *arrive, *rem, *hold; /* per message; per rank: work and wait left */
    char *sent;
    int *pos, *state, *stash;
} share;

/* The message a compute action waits for, or -1 (as pipe_check.c's). */
static int waits_for(const pipe_spec *s, const pipe_action *a)
{
    if (a->op == PIPE_FWD)
        return pipe_tag(s, PIPE_RECV_ACT, a->chunk, a->mb);
    if (a->op == PIPE_BWD || a->op == PIPE_BWD_I)
        return pipe_tag(s, PIPE_RECV_GRAD, a->chunk, a->mb);
    return -1;
}

static double at(const double *v, int i)
{
    return v ? v[i] : 0;
}

/* Work and wait of a compute action. */
static void cost_of(const pipe_share_costs *c, const pipe_action *a, double *work, double *wait)
{
    int k = a->chunk;
    *work = *wait = 0;
    if (a->op == PIPE_FWD || a->op == PIPE_BWD) {
        int f = a->op == PIPE_FWD;
        *work = f ? c->fwd[k] : c->bwd_i[k] + c->bwd_w[k];
        *wait = f ? at(c->fwd_wait, k) : at(c->bwd_i_wait, k) + at(c->bwd_w_wait, k);
    } else if (a->op == PIPE_BWD_I) {
        *work = c->bwd_i[k];
        *wait = at(c->bwd_i_wait, k);
    } else if (a->op == PIPE_BWD_W) {
        *work = c->bwd_w[k];
        *wait = at(c->bwd_w_wait, k);
    }
}

static double link_time(const pipe_share_costs *c, const pipe_action *a)
{
    int b = a->op == PIPE_SEND_ACT ? a->chunk : a->chunk - 1;
    double bytes = at(c->out_bytes, b);
    return c->latency + (c->bandwidth > 0 ? bytes / c->bandwidth : 0);
}

/* Takes an idle rank through its sends and receives up to a compute
 * action it can start at now (then WORK) or must wait for (stays IDLE).
 * Returns 1 when a message was sent. */
static int advance(share *x, int q, double now)
{
    const pipe_spec *sp = &x->s->spec;
    const pipe_list *l = &x->s->rank[q];
    int sent = 0;
    for (; x->pos[q] < l->n; x->pos[q]++) {
        const pipe_action *a = &l->a[x->pos[q]];
        if (a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD) {
            int t = pipe_tag(sp, a->op, a->chunk, a->mb);
            x->sent[t] = 1;
            x->arrive[t] = now + link_time(x->c, a);
            sent = 1;
            continue;
        }
        if (a->op == PIPE_RECV_ACT || a->op == PIPE_RECV_GRAD)
            continue;
        int t = waits_for(sp, a);
        if (t >= 0 && (!x->sent[t] || x->arrive[t] > now))
            return sent;
        cost_of(x->c, a, &x->rem[q], &x->hold[q]);
        x->r->busy[q] += x->rem[q];
        x->stash[q] += a->op == PIPE_FWD ? 1 : a->op == PIPE_BWD_I ? 0 : -1;
        if (x->stash[q] > x->r->peak_stash[q])
            x->r->peak_stash[q] = x->stash[q];
        x->state[q] = WORK;
        return sent;
    }
    x->state[q] = DONE;
    return sent;
}

/* The next time something changes other than a rank's work ending: a
 * wait ending or a message a rank waits for arriving; -1 when none. */
static double next_event(const share *x, double now)
{
    double next = -1;
    for (int q = 0; q < x->p; q++) {
        double t = -1;
        if (x->state[q] == HOLD)
            t = now + x->hold[q];
        else if (x->state[q] == IDLE) {
            int m = waits_for(&x->s->spec, &x->s->rank[q].a[x->pos[q]]);
            if (m >= 0 && x->sent[m])
                t = x->arrive[m];
        }
        if (t >= 0 && (next < 0 || t < next))
            next = t;
    }
    return next;
}

static int run(share *x)
{
    const pipe_share_costs *c = x->c;
    double now = 0, rep = c->replicas > 1 ? c->replicas : 1;
    for (;;) {
        for (int moved = 1; moved;) {
            moved = 0;
            for (int q = 0; q < x->p; q++)
                if (x->state[q] == IDLE)
                    moved |= advance(x, q, now) || x->state[q] != IDLE;
        }
        int working = 0, done = 0;
        for (int q = 0; q < x->p; q++) {
            working += x->state[q] == WORK;
            done += x->state[q] == DONE;
        }
        if (done == x->p)
            break;
        double speed = 1;
        if (c->cores > 0 && working * rep > c->cores)
            speed = c->cores / (working * rep);
        double dt = -1, ev = next_event(x, now);
        if (ev >= 0)
            dt = ev - now;
        for (int q = 0; q < x->p; q++)
            if (x->state[q] == WORK && (dt < 0 || x->rem[q] / speed < dt))
                dt = x->rem[q] / speed;
        if (dt < 0)
            return WEFT_EINVAL; /* every rank waits for a message never sent */
        now += dt;
        for (int q = 0; q < x->p; q++) {
            if (x->state[q] == WORK) {
                x->rem[q] -= dt * speed;
                if (x->rem[q] <= 1e-15 * (1 + now))
                    x->state[q] = x->hold[q] > 0 ? HOLD : IDLE;
                else
                    continue;
                if (x->state[q] == IDLE)
                    x->pos[q]++;
            } else if (x->state[q] == HOLD) {
                x->hold[q] -= dt;
                if (x->hold[q] <= 1e-15 * (1 + now)) {
                    x->state[q] = IDLE;
                    x->pos[q]++;
                }
            }
        }
    }
    x->r->step = now;
    for (int q = 0; q < x->p; q++)
        x->r->bubble[q] = now > 0 ? (now - x->r->busy[q]) / now : 0;
    return 0;
}

int pipe_share_replay(const pipe_sched *s, const pipe_share_costs *c, pipe_result *r)
{
    if (!s || !c || !r || !r->busy || !r->bubble || !r->peak_stash || !c->fwd || !c->bwd_i ||
        !c->bwd_w || s->spec.p < 1)
        return WEFT_EINVAL;
    int p = s->spec.p, K = p * s->spec.v, nmsg = 2 * (K - 1) * s->spec.m;
    size_t nm = nmsg > 0 ? (size_t)nmsg : 1, P = (size_t)p;
    share x = { .s = s, .c = c, .r = r, .p = p, .nmsg = nmsg };
    x.arrive = calloc(nm, sizeof *x.arrive);
    x.sent = calloc(nm, 1);
    x.rem = calloc(P, sizeof *x.rem);
    x.hold = calloc(P, sizeof *x.hold);
    x.pos = calloc(P, sizeof *x.pos);
    x.state = calloc(P, sizeof *x.state);
    x.stash = calloc(P, sizeof *x.stash);
    int rc = x.arrive && x.sent && x.rem && x.hold && x.pos && x.state && x.stash ? 0
                                                                                  : WEFT_ENOMEM;
    if (!rc) {
        for (int q = 0; q < p; q++)
            r->busy[q] = 0, r->peak_stash[q] = 0;
        rc = run(&x);
    }
    free(x.arrive);
    free(x.sent);
    free(x.rem);
    free(x.hold);
    free(x.pos);
    free(x.state);
    free(x.stash);
    return rc;
}
