/* The checker and the timed replay of pipeline schedules. Both run the
 * lists as the executor does: sends never block, receives only post, a
 * compute waits for the messages it needs; the replay adds the clock. */
#include "train/pipe_gen.h"
#include "train/pipe_sched.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What has happened to one (chunk, mb), in list order on its rank. */
enum {
    ST_F = 1,       /* forward done */
    ST_BI = 2,      /* input gradient done (BWD or BWD_I) */
    ST_W = 4,       /* weight gradient done (BWD or BWD_W) */
    ST_FULL = 8,    /* by a full BWD */
    ST_RA = 16,     /* RECV_ACT posted */
    ST_RG = 32,     /* RECV_GRAD posted */
    ST_SA = 64,     /* SEND_ACT issued */
    ST_SG = 128,    /* SEND_GRAD issued */
};

typedef struct {
    const pipe_spec *sp;
    int K;
    uint8_t *st;      /* [K*m] */
    char *why;
    size_t len;
} checker;

#define fault(c, ...) pipe_fail((c)->why, (c)->len, __VA_ARGS__)

static void describe(const pipe_action *a, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s chunk %d mb %d", pipe_op_name(a->op), a->chunk, a->mb);
    if (a->op >= PIPE_SEND_ACT && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " %s rank %d",
                 a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD ? "to" : "from", a->peer);
}

/* One action of rank r against what its list did before it. */
static int check_action(checker *c, int r, int i, const pipe_action *a)
{
    const pipe_spec *s = c->sp;
    char d[96];
    describe(a, d, sizeof d);
    if (a->op < PIPE_FWD || a->op > PIPE_RECV_GRAD)
        return fault(c, "rank %d action %d: unknown op %d", r, i, a->op);
    if (a->chunk < 0 || a->chunk >= c->K || a->mb < 0 || a->mb >= s->m)
        return fault(c, "rank %d action %d: %s out of range (%d chunks, %d mbs)", r, i, d,
                     c->K, s->m);
    if (pipe_chunk_rank(s, a->chunk) != r)
        return fault(c, "rank %d action %d: %s, a chunk of rank %d", r, i, d,
                     pipe_chunk_rank(s, a->chunk));
    uint8_t *st = &c->st[(size_t)a->chunk * (size_t)s->m + (size_t)a->mb];
    int first = a->chunk == 0, last = a->chunk == c->K - 1;
    int want = -1, bit = 0;
    const char *twice = NULL;
    switch (a->op) {
    case PIPE_FWD:
        if (*st & ST_F)
            return fault(c, "rank %d action %d: %s twice", r, i, d);
        if (!first && !(*st & ST_RA))
            return fault(c, "rank %d action %d: %s before its RECV_ACT", r, i, d);
        *st |= ST_F;
        return 0;
    case PIPE_BWD:
    case PIPE_BWD_I:
        if (!(*st & ST_F))
            return fault(c, "rank %d action %d: %s before its FWD", r, i, d);
        if (*st & ST_BI)
            return fault(c, "rank %d action %d: %s after the mb's backward", r, i, d);
        if (!last && !(*st & ST_RG))
            return fault(c, "rank %d action %d: %s before its RECV_GRAD", r, i, d);
        *st |= a->op == PIPE_BWD ? ST_BI | ST_W | ST_FULL : ST_BI;
        return 0;
    case PIPE_BWD_W:
        if (!(*st & ST_BI) || (*st & ST_FULL))
            return fault(c, "rank %d action %d: %s before its BWD_I", r, i, d);
        if (*st & ST_W)
            return fault(c, "rank %d action %d: %s twice", r, i, d);
        *st |= ST_W;
        return 0;
    case PIPE_SEND_ACT:
        if (last)
            return fault(c, "rank %d action %d: %s from the last chunk", r, i, d);
        if (!(*st & ST_F))
            return fault(c, "rank %d action %d: %s before its FWD", r, i, d);
        want = pipe_chunk_rank(s, a->chunk + 1), bit = ST_SA, twice = "sent";
        break;
    case PIPE_RECV_ACT:
        if (first)
            return fault(c, "rank %d action %d: %s into the first chunk", r, i, d);
        want = pipe_chunk_rank(s, a->chunk - 1), bit = ST_RA, twice = "received";
        break;
    case PIPE_SEND_GRAD:
        if (first)
            return fault(c, "rank %d action %d: %s from the first chunk", r, i, d);
        if (!(*st & ST_BI))
            return fault(c, "rank %d action %d: %s before its backward", r, i, d);
        want = pipe_chunk_rank(s, a->chunk - 1), bit = ST_SG, twice = "sent";
        break;
    case PIPE_RECV_GRAD:
        if (last)
            return fault(c, "rank %d action %d: %s into the last chunk", r, i, d);
        want = pipe_chunk_rank(s, a->chunk + 1), bit = ST_RG, twice = "received";
        break;
    }
    if (a->peer != want)
        return fault(c, "rank %d action %d: %s, but chunk %d's peer is rank %d", r, i, d,
                     a->chunk, want);
    if (*st & bit)
        return fault(c, "rank %d action %d: %s %s twice", r, i, d, twice);
    *st |= (uint8_t)bit;
    return 0;
}

/* Completeness of rank r's chunks once its list has run. */
static int check_done(checker *c, int r)
{
    const pipe_spec *s = c->sp;
    for (int ch = r; ch < c->K; ch += s->p)
        for (int mb = 0; mb < s->m; mb++) {
            uint8_t st = c->st[(size_t)ch * (size_t)s->m + (size_t)mb];
            if (!(st & ST_F))
                return fault(c, "rank %d: no FWD of chunk %d mb %d", r, ch, mb);
            if (!(st & ST_BI))
                return fault(c, "rank %d: no backward of chunk %d mb %d", r, ch, mb);
            if (!(st & ST_W))
                return fault(c, "rank %d: BWD_I of chunk %d mb %d without its BWD_W", r, ch, mb);
        }
    return 0;
}

/* Every send has its receive at the other end and the other way round. */
static int check_matched(checker *c)
{
    const pipe_spec *s = c->sp;
    for (int b = 0; b + 1 < c->K; b++)
        for (int mb = 0; mb < s->m; mb++) {
            uint8_t lo = c->st[(size_t)b * (size_t)s->m + (size_t)mb];
            uint8_t hi = c->st[(size_t)(b + 1) * (size_t)s->m + (size_t)mb];
            int rl = pipe_chunk_rank(s, b), rh = pipe_chunk_rank(s, b + 1);
            if ((lo & ST_SA) && !(hi & ST_RA))
                return fault(c, "rank %d: SEND_ACT chunk %d mb %d to rank %d is never received",
                             rl, b, mb, rh);
            if (!(lo & ST_SA) && (hi & ST_RA))
                return fault(c, "rank %d: RECV_ACT chunk %d mb %d from rank %d has no "
                             "SEND_ACT", rh, b + 1, mb, rl);
            if ((hi & ST_SG) && !(lo & ST_RG))
                return fault(c, "rank %d: SEND_GRAD chunk %d mb %d to rank %d is never "
                             "received", rh, b + 1, mb, rl);
            if (!(hi & ST_SG) && (lo & ST_RG))
                return fault(c, "rank %d: RECV_GRAD chunk %d mb %d from rank %d has no "
                             "SEND_GRAD", rl, b, mb, rh);
        }
    return 0;
}

static int check_static(const pipe_sched *s, char *why, size_t len)
{
    if (!s || !s->rank || s->spec.p < 1 || s->spec.m < 1 || s->spec.v < 1)
        return WEFT_EINVAL;
    checker c = { .sp = &s->spec, .K = s->spec.p * s->spec.v, .why = why, .len = len };
    c.st = calloc((size_t)c.K * (size_t)s->spec.m, 1);
    if (!c.st)
        return WEFT_ENOMEM;
    int rc = 0;
    for (int r = 0; r < s->spec.p && !rc; r++) {
        for (int i = 0; i < s->rank[r].n && !rc; i++)
            rc = check_action(&c, r, i, &s->rank[r].a[i]);
        if (!rc)
            rc = check_done(&c, r);
    }
    if (!rc)
        rc = check_matched(&c);
    free(c.st);
    return rc;
}

/* The message a compute action waits for (its tag), or -1. */
static int waits_for(const pipe_spec *s, const pipe_action *a)
{
    int t = a->op == PIPE_FWD ? pipe_tag(s, PIPE_RECV_ACT, a->chunk, a->mb)
          : a->op == PIPE_BWD || a->op == PIPE_BWD_I ? pipe_tag(s, PIPE_RECV_GRAD, a->chunk, a->mb)
          : -1;
    return t >= 0 ? t : -1;
}

static double duration(const pipe_costs *c, const pipe_action *a)
{
    if (!c)
        return 0;
    switch (a->op) {
    case PIPE_FWD: return c->fwd[a->chunk];
    case PIPE_BWD: return c->bwd_i[a->chunk] + c->bwd_w[a->chunk];
    case PIPE_BWD_I: return c->bwd_i[a->chunk];
    case PIPE_BWD_W: return c->bwd_w[a->chunk];
    }
    return 0;
}

static double link_time(const pipe_costs *c, const pipe_action *a)
{
    if (!c)
        return 0;
    /* both directions carry the boundary tensor at the producer chunk's
     * output: b is the lower chunk of the boundary */
    int b = a->op == PIPE_SEND_ACT ? a->chunk : a->chunk - 1;
    double bytes = c->act_bytes ? c->act_bytes[b] : 0;
    return c->latency + (c->bandwidth > 0 ? bytes / c->bandwidth : 0);
}

/* Runs every rank's list as far as it can go, round after round, until
 * all are done or all are stuck. With costs, keeps each rank's clock. */
static int run_lists(const pipe_sched *s, const pipe_costs *c, pipe_result *res,
                     char *why, size_t len)
{
    const pipe_spec *sp = &s->spec;
    int p = sp->p, K = p * sp->v, nmsg = 2 * (K - 1) * sp->m;
    size_t nm = nmsg > 0 ? (size_t)nmsg : 1;
    double *arrive = malloc(nm * sizeof *arrive);
    char *sent = calloc(nm, 1);
    int *pos = calloc((size_t)p, sizeof *pos), *stash = calloc((size_t)p, sizeof *stash);
    double *clock = calloc((size_t)p, sizeof *clock), *first = malloc((size_t)p * sizeof *first);
    int rc = arrive && sent && pos && stash && clock && first ? 0 : WEFT_ENOMEM;
    for (int r = 0; r < p && !rc; r++) {
        first[r] = -1;
        if (res) {
            res->busy[r] = 0;
            res->peak_stash[r] = 0;
        }
    }
    /* a pass over the ranks runs each as far as it goes; one more pass
     * while any of them got further */
    for (int moved = 1; moved && !rc;) {
        moved = 0;
        for (int r = 0; r < p; r++) {
            const pipe_list *l = &s->rank[r];
            int from = pos[r];
            for (; pos[r] < l->n; pos[r]++) {
                const pipe_action *a = &l->a[pos[r]];
                if (a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD) {
                    int t = pipe_tag(sp, a->op, a->chunk, a->mb);
                    sent[t] = 1;
                    arrive[t] = clock[r] + link_time(c, a);
                    continue;
                }
                if (a->op == PIPE_RECV_ACT || a->op == PIPE_RECV_GRAD)
                    continue;
                int t = waits_for(sp, a);
                if (t >= 0 && !sent[t])
                    break;
                double start = t >= 0 && arrive[t] > clock[r] ? arrive[t] : clock[r];
                double d = duration(c, a);
                if (first[r] < 0)
                    first[r] = start;
                clock[r] = start + d;
                stash[r] += a->op == PIPE_FWD ? 1 : a->op == PIPE_BWD_I ? 0 : -1;
                if (res) {
                    res->busy[r] += d;
                    if (stash[r] > res->peak_stash[r])
                        res->peak_stash[r] = stash[r];
                }
            }
            moved |= pos[r] != from;
        }
    }
    if (!rc) {
        int n = 0;
        for (int r = 0; r < p; r++) {
            if (pos[r] == s->rank[r].n)
                continue;
            char d[96];
            describe(&s->rank[r].a[pos[r]], d, sizeof d);
            if (!n++)
                rc = pipe_fail(why, len, "deadlock:");
            size_t at = why && len ? strlen(why) : 0;
            if (why && at < len)
                snprintf(why + at, len - at, " rank %d action %d (%s) waits;", r, pos[r], d);
        }
    }
    if (!rc && res) {
        double t0 = -1, t1 = 0;
        for (int r = 0; r < p; r++) {
            if (first[r] >= 0 && (t0 < 0 || first[r] < t0))
                t0 = first[r];
            if (clock[r] > t1)
                t1 = clock[r];
        }
        res->step = t0 >= 0 ? t1 - t0 : 0;
        for (int r = 0; r < p; r++)
            res->bubble[r] = res->step > 0 ? (res->step - res->busy[r]) / res->step : 0;
    }
    free(arrive);
    free(sent);
    free(pos);
    free(stash);
    free(clock);
    free(first);
    return rc;
}

int pipe_sched_check(const pipe_sched *s, char *why, size_t len)
{
    if (why && len)
        why[0] = 0;
    int rc = check_static(s, why, len);
    return rc ? rc : run_lists(s, NULL, NULL, why, len);
}

int pipe_sched_replay(const pipe_sched *s, const pipe_costs *c, pipe_result *r)
{
    if (!c || !r || !r->busy || !r->bubble || !r->peak_stash || !c->fwd || !c->bwd_i ||
        !c->bwd_w)
        return WEFT_EINVAL;
    int rc = check_static(s, NULL, 0);
    return rc ? rc : run_lists(s, c, r, NULL, 0);
}

int pipe_sched_chunk_stash(const pipe_sched *s, int *peak)
{
    int rc = check_static(s, NULL, 0);
    if (rc || !peak)
        return rc ? rc : WEFT_EINVAL;
    int K = s->spec.p * s->spec.v;
    int *now = calloc((size_t)K, sizeof *now);
    if (!now)
        return WEFT_ENOMEM;
    memset(peak, 0, (size_t)K * sizeof *peak);
    for (int r = 0; r < s->spec.p; r++)
        for (int i = 0; i < s->rank[r].n; i++) {
            const pipe_action *a = &s->rank[r].a[i];
            int ch = a->chunk;
            if (a->op == PIPE_FWD && ++now[ch] > peak[ch])
                peak[ch] = now[ch];
            else if (a->op == PIPE_BWD || a->op == PIPE_BWD_W)
                now[ch]--;
        }
    free(now);
    return 0;
}
