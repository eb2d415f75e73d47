/* What each request does under each consistency mode: BSP sums a step's
 * gradients and applies their average once every live worker pushed; SSP
 * and ASP apply each push on arrival; pulls wait as the mode says. A
 * request that may not proceed yet is parked and retried whenever the
 * state changes. Replies are held while the log has unsynced records
 * (ps_ckpt.c), so a worker never learns of an update a crash could lose. */
#include "ps/ps_server.h"

#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_wk_live(const ps_wk *k)
{
    return k->state == WK_EXPECTED || k->state == WK_LIVE;
}

/* Connected and owed replies (a worker that said goodbye still gets the
 * acknowledgement of it). */
int ps_wk_reachable(const ps_wk *k)
{
    return k->l.fd >= 0 && (k->state == WK_LIVE || k->state == WK_BYE);
}

int ps_wk_live_count(const weft_ps *ps)
{
    int n = 0;
    for (int w = 0; w < ps->nworkers; w++)
        n += ps_wk_live(&ps->srvst->wk[w]);
    return n;
}

/* Workers not dead: a push is weighted 1/members under SSP and ASP, so that
 * one clock of every worker adds up to one averaged step (a worker that
 * finished still counts; a dead one no longer does). */
static int member_count(const weft_ps *ps)
{
    int n = 0;
    for (int w = 0; w < ps->nworkers; w++)
        n += ps->srvst->wk[w].state != WK_DEAD;
    return n;
}

static int64_t min_clock(const weft_ps *ps)
{
    int64_t m = INT64_MAX;
    for (int w = 0; w < ps->nworkers; w++)
        if (ps_wk_live(&ps->srvst->wk[w]) && ps->srvst->wk[w].clock < m)
            m = ps->srvst->wk[w].clock;
    return m;
}

/* Queue a reply to worker w; held back while the log has unsynced records. */
static int reply(weft_ps *ps, int w, const ps_msg *m, const void *data, void *own)
{
    ps_server *sv = ps->srvst;
    if (!ps_wk_reachable(&sv->wk[w])) {
        free(own);
        return 0;
    }
    if (sv->dirty) {
        ps_wait *h = calloc(1, sizeof *h);
        if (!h) {
            free(own);
            return WEFT_ENOMEM;
        }
        h->w = w;
        h->gen = sv->wk[w].gen;
        h->m = *m;
        h->payload = own;
        *sv->held_tail = h;
        sv->held_tail = &h->next;
        return 0;
    }
    return ps_link_send(&sv->wk[w].l, m, data, own);
}

static int ack(weft_ps *ps, int w, const ps_msg *req)
{
    ps_msg m = ps_msg_make(PS_ACK);
    m.id = req->id;
    m.key = req->key;
    m.chunk = req->chunk;
    return reply(ps, w, &m, NULL, NULL);
}

/* Under BSP the chunk's update count is the step it is at: a worker
 * joining a resumed server, or re-admitted after a restart, starts its
 * clock there; under SSP/ASP at the clock the server holds for it (set
 * at re-admission to the slowest live worker's). */
static int ack_init(weft_ps *ps, int w, const ps_msg *req, const ps_chunk *c)
{
    ps_msg m = ps_msg_make(PS_ACK);
    m.id = req->id;
    m.key = req->key;
    m.chunk = req->chunk;
    m.clock = ps->cfg.consistency == WEFT_PS_BSP ? c->version : ps->srvst->wk[w].clock;
    m.total = c->seq[w]; /* a restarted worker numbers its pushes on from here */
    return reply(ps, w, &m, NULL, NULL);
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int reply_err(weft_ps *ps, int w, const ps_msg *req, int code, const char *fmt, ...)
{
    ps_msg m = ps_msg_make(PS_ERR);
    char *text = malloc(PS_ERR_MAX);
    va_list ap;
    if (!text)
        return WEFT_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(text, PS_ERR_MAX, fmt, ap);
    va_end(ap);
    log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
            "parameter server %d: worker %d: %s", ps->rank, w, text);
    m.id = req->id;
    m.key = req->key;
    m.chunk = req->chunk;
    m.status = code;
    m.len = strlen(text);
    return reply(ps, w, &m, text, text);
}

static int send_data(weft_ps *ps, int w, const ps_msg *req, const ps_chunk *c)
{
    ps_msg m = ps_msg_make(PS_DATA);
    float *copy = malloc(c->n * sizeof(float));
    int64_t mc = min_clock(ps);
    if (!copy)
        return WEFT_ENOMEM;
    memcpy(copy, c->param, c->n * sizeof(float));
    m.id = req->id;
    m.key = c->key;
    m.chunk = c->idx;
    m.clock = c->version;
    m.total = mc == INT64_MAX ? 0 : (uint64_t)mc;
    m.len = c->n * sizeof(float);
    return reply(ps, w, &m, copy, copy);
}

static float lr_now(const weft_ps *ps, const ps_chunk *c)
{
    return weft_lr_at(&ps->cfg.lr, c->version);
}

static int apply(weft_ps *ps, ps_chunk *c, const float *grad)
{
    float lr = lr_now(ps, c);
    int rc = ps_ckpt_log(ps, LOG_REC_APPLY, c, grad, lr);
    return rc ? rc : ps_table_apply(c, grad, lr);
}

/* BSP: apply the step once every live worker pushed this chunk. */
static int bsp_try_complete(weft_ps *ps, ps_chunk *c)
{
    ps_server *sv = ps->srvst;
    int rc;
    if (c->contrib == 0)
        return 0;
    for (int w = 0; w < ps->nworkers; w++)
        if (ps_wk_live(&sv->wk[w]) && !c->push_id[w])
            return 0;
    weft_scale(c->acc, c->n, 1.0f / (float)c->contrib);
    for (int w = 0; w < ps->nworkers; w++)
        if (c->push_id[w])
            c->dseq[w] = c->seq[w];
    if ((rc = apply(ps, c, c->acc)))
        return rc;
    memset(c->acc, 0, c->n * sizeof(float));
    c->contrib = 0;
    for (int w = 0; w < ps->nworkers; w++) {
        ps_msg m = ps_msg_make(PS_PUSH);
        if (!c->push_id[w])
            continue;
        m.id = c->push_id[w];
        m.key = c->key;
        m.chunk = c->idx;
        c->push_id[w] = 0;
        /* a push of a worker's earlier process (it died and came back)
         * counts in the step but is acknowledged to nobody */
        if (c->push_gen[w] == sv->wk[w].gen && (rc = ack(ps, w, &m)))
            return rc;
    }
    return 0;
}

static int bsp_sweep(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    int rc;
    for (size_t b = 0; b < sv->nbuckets; b++)
        for (ps_chunk *c = sv->bucket[b]; c; c = c->hnext)
            if ((rc = bsp_try_complete(ps, c)))
                return rc;
    return 0;
}

static int barrier_try(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    int any = 0, rc;
    for (int w = 0; w < ps->nworkers; w++) {
        if (ps_wk_live(&sv->wk[w]) && !sv->wk[w].barrier)
            return 0;
        any |= sv->wk[w].barrier != 0;
    }
    for (int w = 0; any && w < ps->nworkers; w++) {
        ps_msg m = ps_msg_make(PS_BARRIER);
        if (!sv->wk[w].barrier)
            continue;
        m.id = sv->wk[w].barrier;
        sv->wk[w].barrier = 0;
        if ((rc = ack(ps, w, &m)))
            return rc;
    }
    return 0;
}

/* What a rule's rc comes to once its payload is consumed: PARK is kept
 * apart, so a rule's own positive rc can never read as one. */
static int settled(int rc)
{
    return rc < 0 ? rc : DONE;
}

/* A worker registers a chunk: worker 0's values make it, every other
 * worker's registration must match them (and waits for them). */
static int rule_init(weft_ps *ps, int w, const ps_msg *m, void *payload, ps_chunk *c)
{
    ps_server *sv = ps->srvst;
    size_t n = m->len / sizeof(float);
    int rc;
    if (c) {
        if (c->total != m->total || (m->len && c->n != n))
            return settled(reply_err(ps, w, m, WEFT_EMISMATCH,
                                     "key %u has %llu elements (chunk %u: %zu) here, worker %d "
                                     "registers %llu (chunk: %zu)",
                                     m->key, (unsigned long long)c->total, m->chunk, c->n, w,
                                     (unsigned long long)m->total, n));
        return settled(ack_init(ps, w, m, c));
    }
    if (!m->len) {
        if (sv->wk[0].state == WK_DEAD || sv->wk[0].state == WK_BYE)
            return settled(reply_err(ps, w, m, WEFT_EPEER,
                                     "worker 0 left before it registered key %u's initial values",
                                     m->key));
        return PARK; /* worker 0 brings the values */
    }
    if ((rc = ps_table_add(ps, m->key, m->chunk, m->total, n, payload, &c)) ||
        (rc = ps_ckpt_log(ps, LOG_REC_INIT, c, c->param, 0)))
        return settled(rc);
    return settled(ack_init(ps, w, m, c));
}

/* A push under BSP: summed into this step's gradient, acknowledged when
 * the step completes; a later step's waits, an earlier step's is dropped. */
static int rule_push_bsp(weft_ps *ps, int w, const ps_msg *m, void *payload, ps_chunk *c)
{
    ps_wk *k = &ps->srvst->wk[w];
    size_t n = m->len / sizeof(float);
    int rc;
    if (m->clock > c->version || c->push_id[w])
        return PARK; /* a later step's gradient: after this one completes */
    if (m->clock < c->version) {
        /* a step this chunk has applied already: a worker resuming after
         * a crash that cut a step short on some chunks repeats it */
        log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
                "parameter server %d: worker %d's push for step %lld of chunk %u of key "
                "%u dropped: the chunk is at step %lld",
                ps->rank, w, (long long)m->clock, m->chunk, m->key, (long long)c->version);
        c->seq[w] = c->dseq[w] = m->total; /* taken in, as far as this worker's pulls go */
        if (!(rc = ps_ckpt_log_seq(ps, c)))
            rc = ack(ps, w, m);
        return settled(rc);
    }
    for (size_t i = 0; i < n; i++)
        c->acc[i] += ((const float *)payload)[i];
    c->contrib++;
    c->push_id[w] = m->id;
    c->push_gen[w] = k->gen;
    c->seq[w] = m->total;
    return settled(bsp_try_complete(ps, c));
}

/* A worker's gradient for a chunk; m->total carries its sequence number,
 * which makes a push sent again after a reconnect harmless. */
static int rule_push(weft_ps *ps, int w, const ps_msg *m, void *payload, ps_chunk *c)
{
    ps_wk *k = &ps->srvst->wk[w];
    size_t n = m->len / sizeof(float);
    uint64_t seq = m->total;
    int rc;
    if (!c)
        return settled(reply_err(ps, w, m, WEFT_EINVAL,
                                 "push to chunk %u of key %u, which no worker registered",
                                 m->chunk, m->key));
    if (c->n != n)
        return settled(reply_err(ps, w, m, WEFT_EMISMATCH,
                                 "push of %zu floats to chunk %u of key %u, which has %zu", n,
                                 m->chunk, m->key, c->n));
    if (seq <= c->seq[w]) {
        /* sent again after a reconnect: taken in already */
        if (ps->cfg.consistency == WEFT_PS_BSP && c->push_id[w] && seq == c->seq[w]) {
            /* still in this step's sum: acknowledged with the step, on
             * the connection it came back on */
            c->push_id[w] = m->id;
            c->push_gen[w] = k->gen;
            return DONE;
        }
        return settled(ack(ps, w, m));
    }
    if (ps->cfg.consistency != WEFT_PS_BSP) {
        int lc = member_count(ps);
        weft_scale(payload, n, 1.0f / (float)(lc > 0 ? lc : 1));
        c->seq[w] = c->dseq[w] = seq;
        if (!(rc = apply(ps, c, payload)))
            rc = ack(ps, w, m);
        return settled(rc);
    }
    return rule_push_bsp(ps, w, m, payload, c);
}

/* A pull waits for the worker's own pushes and for the step (BSP) or the
 * staleness bound (SSP) before the values go out. */
static int rule_pull(weft_ps *ps, int w, const ps_msg *m, ps_chunk *c)
{
    if (!c)
        return settled(reply_err(ps, w, m, WEFT_EINVAL,
                                 "pull of chunk %u of key %u, which no worker registered",
                                 m->chunk, m->key));
    if (c->seq[w] < m->total)
        return PARK; /* this worker's own pushes come first */
    if (ps->cfg.consistency == WEFT_PS_BSP && c->version < m->clock)
        return PARK;
    if (ps->cfg.consistency == WEFT_PS_SSP && min_clock(ps) < m->clock - ps->cfg.staleness)
        return PARK;
    return settled(send_data(ps, w, m, c));
}

/* The requests that touch no chunk. */
static int rule_other(weft_ps *ps, int w, const ps_msg *m)
{
    ps_server *sv = ps->srvst;
    ps_wk *k = &sv->wk[w];
    int rc = 0;
    switch (m->type) {
    case PS_CLOCK:
        if (m->clock > k->clock)
            k->clock = m->clock;
        break;
    case PS_BARRIER:
        k->barrier = m->id;
        rc = barrier_try(ps);
        break;
    case PS_CKPT:
        if (sv->logfd < 0)
            rc = reply_err(ps, w, m, WEFT_ENOTSUP,
                           "checkpoint requested but server %d has no checkpoint directory",
                           ps->rank);
        else if ((rc = ps_ckpt_save(ps)) == 0)
            rc = ack(ps, w, m);
        break;
    case PS_PING: {
        ps_msg p = ps_msg_make(PS_PONG);
        p.id = m->id;
        rc = reply(ps, w, &p, NULL, NULL);
        break;
    }
    case PS_BYE:
        rc = ack(ps, w, m);
        k->state = WK_BYE;
        k->barrier = 0;
        break;
    default:
        rc = reply_err(ps, w, m, WEFT_EPROTO, "a %s message is not a request",
                       ps_msg_name(m->type));
    }
    return settled(rc);
}

/* Handle one request from worker w. payload (malloc'd, len bytes) is
 * consumed unless PARK is returned. Negative: this server cannot go on. */
int ps_rules_handle(weft_ps *ps, int w, const ps_msg *m, void *payload)
{
    ps_chunk *c = NULL;
    int rc;
    if (m->type == PS_INIT || m->type == PS_PUSH || m->type == PS_PULL)
        c = ps_table_find(ps->srvst, m->key, m->chunk);
    if (m->type == PS_INIT)
        rc = rule_init(ps, w, m, payload, c);
    else if (m->type == PS_PUSH)
        rc = rule_push(ps, w, m, payload, c);
    else if (m->type == PS_PULL)
        rc = rule_pull(ps, w, m, c);
    else
        rc = rule_other(ps, w, m);
    if (rc == PARK)
        return PARK;
    free(payload);
    return rc;
}

int ps_rules_park(weft_ps *ps, int w, const ps_msg *m, void *payload)
{
    ps_server *sv = ps->srvst;
    ps_wait *p = calloc(1, sizeof *p), **t;
    if (!p)
        return WEFT_ENOMEM;
    p->w = w;
    p->gen = sv->wk[w].gen;
    p->m = *m;
    p->payload = payload;
    for (t = &sv->waits; *t; t = &(*t)->next)
        ;
    *t = p;
    return 0;
}

int ps_rules_retry(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    int moved = 1, rc;
    while (moved) {
        moved = 0;
        for (ps_wait **p = &sv->waits; *p;) {
            ps_wait *q = *p;
            /* a dead worker's requests, or those of a connection it has
             * since replaced (it sends again what was not answered) */
            if (sv->wk[q->w].state == WK_DEAD || q->gen != sv->wk[q->w].gen) {
                *p = q->next;
                free(q->payload);
                free(q);
                continue;
            }
            rc = ps_rules_handle(ps, q->w, &q->m, q->payload);
            if (rc < 0)
                return rc;
            if (rc == PARK) {
                p = &q->next;
                continue;
            }
            *p = q->next;
            free(q);
            moved = 1;
        }
        if ((rc = bsp_sweep(ps)) || (rc = barrier_try(ps)))
            return rc;
    }
    return 0;
}
