/* Virtual executor: all ranks' schedules stepped in one thread. Messages
 * wait in one FIFO per (sender, receiver) pair, which is exactly the
 * matching rule of coll/sched/sched.h: the k-th send from a to b meets b's k-th
 * receive from a. */
#include "coll/sched/vexec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vmsg {
    struct vmsg *next;
    unsigned char *data;
    uint64_t len;
    int *sender_wait;   /* rendezvous: the sender's count of unmatched sends */
} vmsg;

typedef struct {
    uint64_t key;       /* (src << 32 | dst) + 1; 0: empty slot */
    vmsg *head, *tail;
} vpair;

typedef struct {
    uint32_t round;     /* current round */
    int started;        /* its local ops ran and its sends are posted */
    int unsent;         /* rendezvous: sends of this round not yet matched */
    unsigned char *done;/* per op of the current round: matched */
} vrank;

typedef struct {
    int p;
    const weft_sched *s;
    vexec_mem *mem;
    const vexec_opts *o;
    vexec_stats *st;
    vpair *pairs;
    uint64_t npairs;    /* table size, a power of two */
    vrank *rk;
} vx;

static int fail(vx *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->st->err, sizeof x->st->err, fmt, ap);
    va_end(ap);
    return WEFT_EINVAL;
}

int vexec_sum_f32(void *dst, const void *a, const void *b, size_t bytes, void *ctx)
{
    float *d = dst;
    const float *x = a, *y = b;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        d[i] = x[i] + y[i];
    return 0;
}

static uint64_t hash64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static vpair *pair_get(vx *x, int src, int dst, int create)
{
    uint64_t key = (((uint64_t)(uint32_t)src << 32) | (uint32_t)dst) + 1;
    uint64_t i = hash64(key) & (x->npairs - 1);
    while (x->pairs[i].key && x->pairs[i].key != key)
        i = (i + 1) & (x->npairs - 1);
    if (!x->pairs[i].key) {
        if (!create)
            return NULL;
        x->pairs[i].key = key;
    }
    return &x->pairs[i];
}

static uint32_t rbegin(const weft_sched *s, uint32_t k) { return k ? s->round_end[k - 1] : 0; }

static const char *bufname(int b)
{
    static const char *n[] = { "send", "recv", "tmp" };
    return b >= 0 && b < SB_COUNT ? n[b] : "?";
}

static int in_bounds(vx *x, int r, int b, uint64_t off, uint64_t len)
{
    if (b < 0 || b >= SB_COUNT)
        return 0;
    uint64_t sz = x->mem[r].size[b];
    if (len == 0)
        return off <= sz;
    return x->mem[r].buf[b] && off <= sz && len <= sz - off;
}

static int check_op(vx *x, int r, uint32_t i)
{
    const sched_op *o = &x->s[r].ops[i];
    if (o->kind > SOP_REDUCE)
        return fail(x, "rank %d op %u: unknown kind %d", r, i, o->kind);
    if (!in_bounds(x, r, o->buf, o->off, o->len))
        return fail(x, "rank %d op %u: %s+%llu len %llu out of bounds", r, i,
                    bufname(o->buf), (unsigned long long)o->off,
                    (unsigned long long)o->len);
    if ((o->kind == SOP_RECV_REDUCE || o->kind == SOP_COPY || o->kind == SOP_REDUCE)
        && !in_bounds(x, r, o->src_buf, o->src_off, o->len))
        return fail(x, "rank %d op %u: source %s+%llu len %llu out of bounds", r, i,
                    bufname(o->src_buf), (unsigned long long)o->src_off,
                    (unsigned long long)o->len);
    if (o->kind <= SOP_RECV_REDUCE && (o->peer < 0 || o->peer >= x->p || o->peer == r))
        return fail(x, "rank %d op %u: bad peer %d", r, i, o->peer);
    return 0;
}

typedef struct { int buf; uint64_t a, b; int write; uint32_t op; } vrange;

static int overlap(const vrange *u, const vrange *v)
{
    return u->buf == v->buf && u->a < v->b && v->a < u->b;
}

/* Network ops of one round run concurrently: none may write bytes that
 * another one reads or writes. */
static int check_hazards(vx *x, int r, uint32_t k)
{
    const weft_sched *s = &x->s[r];
    uint32_t b = rbegin(s, k), e = s->round_end[k], n = 0;
    vrange stackv[64], *v = stackv;
    /* in place, SB_SEND and SB_RECV are the same bytes */
    int alias = x->mem[r].buf[SB_SEND] && x->mem[r].buf[SB_SEND] == x->mem[r].buf[SB_RECV];
    if (2 * (e - b) > 64 && !(v = malloc(2 * (size_t)(e - b) * sizeof *v)))
        return WEFT_ENOMEM;
    for (uint32_t i = b; i < e; i++) {
        const sched_op *o = &s->ops[i];
        if (o->len == 0 || o->kind > SOP_RECV_REDUCE)
            continue;
        int b1 = alias && o->buf == SB_SEND ? SB_RECV : o->buf;
        int b2 = alias && o->src_buf == SB_SEND ? SB_RECV : o->src_buf;
        v[n++] = (vrange){ b1, o->off, o->off + o->len, o->kind != SOP_SEND, i };
        if (o->kind == SOP_RECV_REDUCE)
            v[n++] = (vrange){ b2, o->src_off, o->src_off + o->len, 0, i };
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++)
        for (uint32_t j = i + 1; j < n && !rc; j++)
            if ((v[i].write || v[j].write) && v[i].op != v[j].op && overlap(&v[i], &v[j]))
                rc = fail(x, "rank %d round %u: ops %u and %u race on %s+[%llu,%llu)",
                          r, k, v[i].op - b, v[j].op - b, bufname(v[i].buf),
                          (unsigned long long)(v[i].a > v[j].a ? v[i].a : v[j].a),
                          (unsigned long long)(v[i].b < v[j].b ? v[i].b : v[j].b));
    if (v != stackv)
        free(v);
    return rc;
}

static int reduce(vx *x, void *dst, const void *a, const void *b, uint64_t len)
{
    vexec_reduce_fn f = x->o && x->o->reduce ? x->o->reduce : vexec_sum_f32;
    return f(dst, a, b, (size_t)len, x->o ? x->o->reduce_ctx : NULL);
}

/* Start rank r's current round: local ops in order, then post the sends. */
static int start_round(vx *x, int r)
{
    const weft_sched *s = &x->s[r];
    vrank *st = &x->rk[r];
    uint32_t b = rbegin(s, st->round), e = s->round_end[st->round];
    vexec_mem *m = &x->mem[r];
    int rc;
    if (x->o && x->o->check_hazards && (rc = check_hazards(x, r, st->round)))
        return rc;
    memset(st->done, 0, e - b);
    st->unsent = 0;
    for (uint32_t i = b; i < e; i++) {
        const sched_op *o = &s->ops[i];
        if ((rc = check_op(x, r, i)))
            return rc;
        if (o->kind == SOP_COPY) {
            if (o->len)
                memmove(m->buf[o->buf] + o->off, m->buf[o->src_buf] + o->src_off, o->len);
            st->done[i - b] = 1;
        } else if (o->kind == SOP_REDUCE) {
            if (o->len && (rc = reduce(x, m->buf[o->buf] + o->off, m->buf[o->buf] + o->off,
                                       m->buf[o->src_buf] + o->src_off, o->len)))
                return rc;
            st->done[i - b] = 1;
        }
    }
    for (uint32_t i = b; i < e; i++) {
        const sched_op *o = &s->ops[i];
        if (o->kind != SOP_SEND)
            continue;
        vmsg *msg = malloc(sizeof *msg + (size_t)o->len);
        if (!msg)
            return WEFT_ENOMEM;
        msg->next = NULL;
        msg->data = (unsigned char *)(msg + 1);
        msg->len = o->len;
        if (o->len)
            memcpy(msg->data, m->buf[o->buf] + o->off, o->len);
        msg->sender_wait = NULL;
        if (x->o && x->o->mode == VEXEC_RENDEZVOUS) {
            msg->sender_wait = &st->unsent;
            st->unsent++;
        }
        st->done[i - b] = 1;
        vpair *pr = pair_get(x, r, o->peer, 0);
        if (pr->tail)
            pr->tail->next = msg;
        else
            pr->head = msg;
        pr->tail = msg;
        x->st->messages++;
        x->st->bytes += o->len;
    }
    st->started = 1;
    return 0;
}

/* Match what can be matched of rank r's receives; *moved when any did. */
static int try_recv(vx *x, int r, int *moved)
{
    const weft_sched *s = &x->s[r];
    vrank *st = &x->rk[r];
    uint32_t b = rbegin(s, st->round), e = s->round_end[st->round];
    vexec_mem *m = &x->mem[r];
    for (uint32_t i = b; i < e; i++) {
        const sched_op *o = &s->ops[i];
        if (st->done[i - b] || (o->kind != SOP_RECV && o->kind != SOP_RECV_REDUCE))
            continue;
        /* an earlier receive from the same peer still waiting goes first */
        int blocked = 0;
        for (uint32_t j = b; j < i && !blocked; j++)
            blocked = !st->done[j - b] && s->ops[j].peer == o->peer &&
                      (s->ops[j].kind == SOP_RECV || s->ops[j].kind == SOP_RECV_REDUCE);
        if (blocked)
            continue;
        vpair *pr = pair_get(x, o->peer, r, 0);
        if (!pr || !pr->head)
            continue;
        vmsg *msg = pr->head;
        if (msg->len != o->len)
            return fail(x, "rank %d round %u: receives %llu bytes from %d, which sent %llu",
                        r, st->round, (unsigned long long)o->len, o->peer,
                        (unsigned long long)msg->len);
        pr->head = msg->next;
        if (!pr->head)
            pr->tail = NULL;
        int rc = 0;
        if (o->len && o->kind == SOP_RECV)
            memcpy(m->buf[o->buf] + o->off, msg->data, o->len);
        else if (o->len)
            rc = reduce(x, m->buf[o->buf] + o->off, m->buf[o->src_buf] + o->src_off,
                        msg->data, o->len);
        if (msg->sender_wait)
            (*msg->sender_wait)--;
        free(msg);
        if (rc)
            return rc;
        st->done[i - b] = 1;
        *moved = 1;
    }
    return 0;
}

static int round_done(vx *x, int r)
{
    const weft_sched *s = &x->s[r];
    vrank *st = &x->rk[r];
    uint32_t b = rbegin(s, st->round), e = s->round_end[st->round];
    if (st->unsent)
        return 0;
    for (uint32_t i = b; i < e; i++)
        if (!st->done[i - b])
            return 0;
    return 1;
}

static void describe_deadlock(vx *x)
{
    int len = snprintf(x->st->err, sizeof x->st->err, "deadlock:");
    for (int r = 0; r < x->p && len < (int)sizeof x->st->err - 40; r++) {
        const weft_sched *s = &x->s[r];
        vrank *st = &x->rk[r];
        if (st->round >= s->nrounds)
            continue;
        uint32_t b = rbegin(s, st->round), e = s->round_end[st->round];
        int waits = -1;
        for (uint32_t i = b; i < e && waits < 0; i++)
            if (!st->done[i - b])
                waits = s->ops[i].peer;
        len += snprintf(x->st->err + len, sizeof x->st->err - (size_t)len,
                        " rank %d round %u waits on %d;", r, st->round, waits);
    }
}

static int run(vx *x)
{
    int p = x->p, rc;
    uint32_t maxops = 1;
    for (int r = 0; r < p; r++) {
        const weft_sched *s = &x->s[r];
        if (s->err)
            return fail(x, "rank %d: schedule failed to build (%d)", r, s->err);
        if (s->nrounds > x->st->max_rounds)
            x->st->max_rounds = s->nrounds;
        for (uint32_t k = 0; k < s->nrounds; k++)
            if (s->round_end[k] - rbegin(s, k) > maxops)
                maxops = s->round_end[k] - rbegin(s, k);
        if (s->nrounds && s->round_end[s->nrounds - 1] != s->nops)
            return fail(x, "rank %d: schedule not closed", r);
        for (uint32_t i = 0; i < s->nops; i++)
            if (s->ops[i].kind == SOP_SEND) {
                if ((rc = check_op(x, r, i)))
                    return rc;
                pair_get(x, r, s->ops[i].peer, 1);
            }
    }
    for (int r = 0; r < p; r++)
        if (!(x->rk[r].done = calloc(maxops, 1)))
            return WEFT_ENOMEM;
    int left = p;
    for (int r = 0; r < p; r++)
        if (x->s[r].nrounds == 0)
            left--;
    while (left > 0) {
        int moved = 0;
        for (int r = 0; r < p; r++) {
            vrank *st = &x->rk[r];
            while (st->round < x->s[r].nrounds) {
                if (!st->started) {
                    if ((rc = start_round(x, r)))
                        return rc;
                    moved = 1;
                }
                if ((rc = try_recv(x, r, &moved)))
                    return rc;
                if (!round_done(x, r))
                    break;
                st->round++;
                st->started = 0;
                moved = 1;
                if (st->round == x->s[r].nrounds)
                    left--;
            }
        }
        if (!moved) {
            describe_deadlock(x);
            return WEFT_EINVAL;
        }
    }
    for (uint64_t i = 0; i < x->npairs; i++)
        if (x->pairs[i].head) {
            uint64_t k = x->pairs[i].key - 1;
            return fail(x, "rank %d sent %llu bytes to %d that were never received",
                        (int)(k >> 32), (unsigned long long)x->pairs[i].head->len,
                        (int)(k & 0xffffffffu));
        }
    return 0;
}

int vexec_run(int p, const weft_sched *scheds, vexec_mem *mem,
              const vexec_opts *opts, vexec_stats *st)
{
    vexec_stats dummy;
    vx x = { .p = p, .s = scheds, .mem = mem, .o = opts, .st = st ? st : &dummy };
    memset(x.st, 0, sizeof *x.st);
    if (p < 1 || p > 4096 || !scheds || !mem)
        return fail(&x, "bad arguments (p = %d)", p);
    uint64_t sends = 0;
    for (int r = 0; r < p; r++)
        for (uint32_t i = 0; i < scheds[r].nops; i++)
            sends += scheds[r].ops[i].kind == SOP_SEND;
    x.npairs = 16;
    while (x.npairs < 2 * sends + 2)
        x.npairs *= 2;
    x.pairs = calloc(x.npairs, sizeof *x.pairs);
    x.rk = calloc((size_t)p, sizeof *x.rk);
    int rc = x.pairs && x.rk ? run(&x) : WEFT_ENOMEM;
    if (x.pairs)
        for (uint64_t i = 0; i < x.npairs; i++)
            for (vmsg *m = x.pairs[i].head, *n; m; m = n) {
                n = m->next;
                free(m);
            }
    if (x.rk)
        for (int r = 0; r < p; r++)
            free(x.rk[r].done);
    free(x.pairs);
    free(x.rk);
    return rc;
}
