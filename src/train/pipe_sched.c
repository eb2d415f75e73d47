/* Pipeline schedules: names, the generator table, building the lists.
 *
 * What each rank r of p runs in one step, m micro-batches (F forward,
 * B backward, Bi/Bw its input and weight halves; numbers are mbs):
 *
 *   gpipe          F0 F1 .. F(m-1)  B0 B1 .. B(m-1)
 *                  stash m; bubble (p-1)/(m+p-1)
 *   1f1b           w = min(p-1-r, m) warm-up forwards F0..F(w-1), then
 *                  F(w) B0 F(w+1) B1 .. in turn, then the w backwards left
 *                  stash min(p-r, m); bubble (p-1)/(m+p-1)
 *   interleaved:V  chunks r, r+p, .., r+(V-1)p; the k-th forward is chunk
 *                  (k mod pV) div p of mb (k div pV)*p + k mod p, the k-th
 *                  backward the same with the chunks reversed; warm-up
 *                  2(p-1-r) + (V-1)p forwards (all when m == p), then one
 *                  forward one backward; needs m % p == 0
 *                  bubble (p-1)/(V*m+p-1)
 *   zb             ZB-H1: 1F1B's order with Bi for B; up to r Bw's lag
 *                  behind their Bi in the steady phase, each Bi of the
 *                  drain is followed by the oldest waiting Bw, the rest
 *                  close the step; stash at most min(p, m) (1F1B's peak)
 *                  bubble time (p-1)(F+Bi-Bw) against (p-1)(F+Bi+Bw)
 *
 * In every schedule a chunk's backwards run in micro-batch order, so a
 * weight gradient sums its micro-batches in the same order whichever
 * schedule ran. Sends and receives are placed by pipe_gen_comms. */
#include "core/vec.h"
#include "train/pipe_gen.h"
#include "train/pipe_sched.h"
#include "weft.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds that keep chunk in int16_t and every tag in an int. */
#define PIPE_MAX_CHUNKS 4096
#define PIPE_MAX_MB (1 << 18)

typedef struct {
    int kind;
    const char *name;
    int (*gen)(const pipe_spec *s, int r, pipe_list *out);
} pipe_gen_entry;

static const pipe_gen_entry gens[] = {
    { PIPE_GPIPE, "gpipe", pipe_gen_gpipe },
    { PIPE_1F1B, "1f1b", pipe_gen_1f1b },
    { PIPE_INTERLEAVED, "interleaved", pipe_gen_interleaved },
    { PIPE_ZB, "zb", pipe_gen_zb },
};
#define NGENS ((int)(sizeof gens / sizeof gens[0]))

static const pipe_gen_entry *gen_of(int kind)
{
    for (int i = 0; i < NGENS; i++)
        if (gens[i].kind == kind)
            return &gens[i];
    return NULL;
}

int pipe_spec_parse(const char *name, int p, int m, pipe_spec *out)
{
    if (!name || !out)
        return WEFT_EINVAL;
    pipe_spec s = { .p = p, .m = m, .v = 1 };
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    for (int i = 0; i < NGENS; i++)
        if (strlen(gens[i].name) == len && !strncmp(name, gens[i].name, len))
            s.kind = gens[i].kind;
    if (!s.kind)
        return WEFT_EINVAL;
    if (s.kind == PIPE_INTERLEAVED) {
        char *end;
        long v = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || end == colon + 1 || *end || v < 2 || v > PIPE_MAX_CHUNKS)
            return WEFT_EINVAL;
        s.v = (int)v;
    } else if (colon) {
        return WEFT_EINVAL;
    }
    *out = s;
    return 0;
}

void pipe_spec_name(const pipe_spec *s, char *buf, size_t len)
{
    const pipe_gen_entry *g = s ? gen_of(s->kind) : NULL;
    if (!len)
        return;
    if (!g)
        snprintf(buf, len, "?");
    else if (s->kind == PIPE_INTERLEAVED)
        snprintf(buf, len, "%s:%d", g->name, s->v);
    else
        snprintf(buf, len, "%s", g->name);
}

int pipe_fail(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return WEFT_EINVAL;
}

const char *pipe_op_name(int op)
{
    static const char *const names[] = { "?", "FWD", "BWD", "BWD_I", "BWD_W", "SEND_ACT",
                                         "RECV_ACT", "SEND_GRAD", "RECV_GRAD" };
    return op >= PIPE_FWD && op <= PIPE_RECV_GRAD ? names[op] : names[0];
}

static int spec_ok(const pipe_spec *s)
{
    if (!s || !gen_of(s->kind) || s->p < 1 || s->m < 1 || s->m > PIPE_MAX_MB || s->v < 1)
        return 0;
    if (s->kind != PIPE_INTERLEAVED)
        return s->v == 1 && s->p <= PIPE_MAX_CHUNKS;
    /* chunks on one rank would hand activations to themselves: the
     * interleaved schedule is for two ranks or more */
    return s->v >= 2 && s->p >= 2 && s->m % s->p == 0 &&
           (long)s->p * s->v <= PIPE_MAX_CHUNKS;
}

int pipe_list_push(pipe_list *l, int op, int chunk, int mb, int peer)
{
    int rc = VEC_RESERVE(l->a, l->cap, (size_t)l->n + 1);
    if (rc)
        return rc;
    l->a[l->n++] = (pipe_action){ .op = (uint8_t)op, .chunk = (int16_t)chunk, .mb = mb,
                                  .peer = peer };
    return 0;
}

int pipe_chunk_rank(const pipe_spec *s, int chunk)
{
    if (!s || s->p < 1 || chunk < 0 || chunk >= s->p * s->v)
        return WEFT_EINVAL;
    return chunk % s->p;
}

/* A message crosses the boundary b between chunks b and b+1 in one
 * direction; the tag numbers (mb, boundary, direction), so the sender's
 * and the receiver's action give the same tag. */
int pipe_tag(const pipe_spec *s, int op, int chunk, int mb)
{
    if (!s || mb < 0 || mb >= s->m)
        return WEFT_EINVAL;
    int nb = s->p * s->v - 1, b, dir = op == PIPE_SEND_GRAD || op == PIPE_RECV_GRAD;
    switch (op) {
    case PIPE_SEND_ACT: case PIPE_RECV_GRAD: b = chunk; break;
    case PIPE_RECV_ACT: case PIPE_SEND_GRAD: b = chunk - 1; break;
    default: return WEFT_EINVAL;
    }
    if (b < 0 || b >= nb)
        return WEFT_EINVAL;
    return (mb * nb + b) * 2 + dir;
}

/* The receive a compute action needs, and the send it feeds; 0: none. */
static int needs(const pipe_spec *s, const pipe_action *a, int *peer)
{
    int last = s->p * s->v - 1;
    if (a->op == PIPE_FWD && a->chunk > 0) {
        *peer = pipe_chunk_rank(s, a->chunk - 1);
        return PIPE_RECV_ACT;
    }
    if ((a->op == PIPE_BWD || a->op == PIPE_BWD_I) && a->chunk < last) {
        *peer = pipe_chunk_rank(s, a->chunk + 1);
        return PIPE_RECV_GRAD;
    }
    return 0;
}

static int feeds(const pipe_spec *s, const pipe_action *a, int *peer)
{
    int last = s->p * s->v - 1;
    if (a->op == PIPE_FWD && a->chunk < last) {
        *peer = pipe_chunk_rank(s, a->chunk + 1);
        return PIPE_SEND_ACT;
    }
    if ((a->op == PIPE_BWD || a->op == PIPE_BWD_I) && a->chunk > 0) {
        *peer = pipe_chunk_rank(s, a->chunk - 1);
        return PIPE_SEND_GRAD;
    }
    return 0;
}

static int push_recv(const pipe_spec *s, const pipe_list *c, int i, pipe_list *out)
{
    int peer, op = i < c->n ? needs(s, &c->a[i], &peer) : 0;
    return op ? pipe_list_push(out, op, c->a[i].chunk, c->a[i].mb, peer) : 0;
}

int pipe_gen_comms(const pipe_spec *s, const pipe_list *c, pipe_list *out)
{
    int rc = push_recv(s, c, 0, out);
    for (int i = 0; i < c->n && !rc; i++) {
        /* posted before compute i starts, the next input arrives while
         * it runs */
        rc = push_recv(s, c, i + 1, out);
        if (!rc)
            rc = pipe_list_push(out, c->a[i].op, c->a[i].chunk, c->a[i].mb, -1);
        int peer, op = rc ? 0 : feeds(s, &c->a[i], &peer);
        if (op)
            rc = pipe_list_push(out, op, c->a[i].chunk, c->a[i].mb, peer);
    }
    return rc;
}

void pipe_sched_free(pipe_sched *s)
{
    if (!s)
        return;
    if (s->rank)
        for (int r = 0; r < s->spec.p; r++)
            free(s->rank[r].a);
    free(s->rank);
    s->rank = NULL;
}

int pipe_sched_build(pipe_sched *s, const pipe_spec *spec)
{
    if (!s || !spec_ok(spec))
        return WEFT_EINVAL;
    memset(s, 0, sizeof *s);
    s->spec = *spec;
    s->rank = calloc((size_t)spec->p, sizeof *s->rank);
    if (!s->rank)
        return WEFT_ENOMEM;
    const pipe_gen_entry *g = gen_of(spec->kind);
    pipe_list compute = { 0 };
    int rc = 0;
    for (int r = 0; r < spec->p && !rc; r++) {
        compute.n = 0;
        rc = g->gen(spec, r, &compute);
        if (!rc)
            rc = pipe_gen_comms(spec, &compute, &s->rank[r]);
    }
    free(compute.a);
    if (rc)
        pipe_sched_free(s);
    return rc;
}
