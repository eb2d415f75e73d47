/* The worker side: requests (push, pull, register, barrier, checkpoint,
 * goodbye) fan out as one message per chunk to the chunk's server; replies
 * are read as they come, pulled chunks straight into the caller's buffer.
 * Progress happens inside wait and test, on the caller's thread. */
#include "ps/ps.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/vec.h"
#include "ps/ps_shard.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int server_rank(const weft_ps *ps, int s)
{
    return ps_server_world_rank(ps, s);
}

/* Up: connected now (not lost for good, not reconnecting). */
static int srv_up(const weft_ps *ps, int s)
{
    return !ps->srv_rc[s] && ps->srv[s].fd >= 0;
}

static void req_free(weft_ps_request *r)
{
    free(r->pend);
    free(r->parts);
    free(r);
}

void ps_worker_free(weft_ps *ps)
{
    weft_ps_request *r = ps->reqs, *next;
    for (; r; r = next) {
        next = r->next;
        req_free(r);
    }
    ps->reqs = NULL;
    for (int s = 0; ps->srv && s < ps->nservers; s++) {
        ps->sent += ps->srv[s].sent;
        ps->recvd += ps->srv[s].recvd;
        ps_link_close(&ps->srv[s]);
    }
    free(ps->srv);
    free(ps->srv_rc);
    free(ps->sx);
    for (int i = 0; ps->tens && i < ps->ntens; i++)
        free(ps->tens[i].seq);
    free(ps->tens);
    ps->srv = NULL;
    ps->srv_rc = NULL;
    ps->sx = NULL;
    ps->tens = NULL;
}

/* Server s is gone: fail everything waiting on it, now and later. srv_rc
 * is 1 once the server acknowledged this worker's goodbye. */
void ps_server_lost(weft_ps *ps, int s, int rc, const char *why)
{
    if (ps->srv_rc[s])
        return;
    ps->srv_rc[s] = rc;
    ps_fail(ps, rc, "parameter server %d (rank %d) %s: %s", s, server_rank(ps, s),
            rc == WEFT_EPEER ? "died" : "failed", why);
    ps->sent += ps->srv[s].sent;
    ps->recvd += ps->srv[s].recvd;
    ps_link_close(&ps->srv[s]);
    ps->srv[s].sent = ps->srv[s].recvd = 0;
    for (weft_ps_request *r = ps->reqs; r; r = r->next) {
        if (!r->pend[s])
            continue;
        r->pending -= r->pend[s];
        r->pend[s] = 0;
        if (!r->rc)
            r->rc = rc;
    }
}

static weft_ps_request *find_req(weft_ps *ps, uint64_t id)
{
    for (weft_ps_request *r = ps->reqs; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static int answers(const ps_part *p, int s, const ps_msg *m)
{
    return p->s == s && !p->done && p->hdr.key == m->key && p->hdr.chunk == m->chunk;
}

/* The unanswered message of r to server s that reply m answers. */
static ps_part *find_part(weft_ps_request *r, int s, const ps_msg *m)
{
    /* a tensor's message for chunk j is its j-th, one to every server's
     * the s-th: looked at first, so a large tensor's replies stay O(1) */
    uint64_t at = r->tensor >= 0 ? m->chunk : (uint64_t)s;
    if (at < (uint64_t)r->nparts && answers(&r->parts[at], s, m))
        return &r->parts[at];
    for (int i = 0; i < r->nparts; i++)
        if (answers(&r->parts[i], s, m))
            return &r->parts[i];
    return NULL;
}

static int reply_dest(void *arg, ps_link *l, const ps_msg *m, void **dst, char *e, size_t elen)
{
    weft_ps *ps = arg;
    weft_ps_request *r;
    if (m->type < PS_ACK) {
        snprintf(e, elen, "sent a request (%s) to a worker", ps_msg_name(m->type));
        return WEFT_EPROTO;
    }
    if (m->type == PS_PONG) {
        if (m->len) {
            snprintf(e, elen, "an answer to a ping with a payload");
            return WEFT_EPROTO;
        }
        return 0;
    }
    if (m->type == PS_HELLO) {
        if (ps->sx[l->peer].hello) {
            snprintf(e, elen, "a second hello on one connection");
            return WEFT_EPROTO;
        }
        return 0;
    }
    r = find_req(ps, m->id);
    if (!r || !find_part(r, l->peer, m)) {
        snprintf(e, elen, "a reply (%s) to no request of this worker", ps_msg_name(m->type));
        return WEFT_EPROTO;
    }
    if (m->type == PS_ERR) {
        *dst = ps->errbuf;
        return 0;
    }
    if (m->type == PS_ACK) {
        if (m->len) {
            snprintf(e, elen, "an acknowledgement with a payload");
            return WEFT_EPROTO;
        }
        return 0;
    }
    /* PS_DATA: must be a chunk of the pulled tensor that this server owns */
    const ps_tensor *t = r->tensor >= 0 ? &ps->tens[r->tensor] : NULL;
    size_t off, n;
    if (r->type != PS_PULL || !t || m->key != t->key || m->chunk >= t->nchunks ||
        ps_shard_server(t->key, m->chunk, ps->nservers) != l->peer) {
        snprintf(e, elen, "data for chunk %u of key %u, which this worker did not ask it for",
                 m->chunk, m->key);
        return WEFT_EPROTO;
    }
    ps_shard_chunk(t->count, t->nchunks, m->chunk, &off, &n);
    if (m->len != n * sizeof(float)) {
        snprintf(e, elen, "chunk %u of key %u has %zu floats here but %llu bytes came", m->chunk,
                 m->key, n, (unsigned long long)m->len);
        return WEFT_EPROTO;
    }
    *dst = r->dst + off;
    return 0;
}

static int reply_done(void *arg, ps_link *l, const ps_msg *m, void *dst)
{
    weft_ps *ps = arg;
    weft_ps_request *r;
    if (m->type == PS_PONG) {
        ps->sx[l->peer].unanswered = 0;
        ps->pong_bytes += sizeof *m;
        return 0;
    }
    if (m->type == PS_HELLO) {
        ps_srv *x = &ps->sx[l->peer];
        x->hello = 1;
        x->newinc = m->id;
        x->durable = m->total != 0;
        return 0;
    }
    r = find_req(ps, m->id);
    find_part(r, l->peer, m)->done = 1;
    r->pend[l->peer]--;
    r->pending--;
    /* a restarted worker numbers its pushes on from the server's count */
    if (r->type == PS_INIT && m->type == PS_ACK && r->tensor >= 0 &&
        m->chunk < ps->tens[r->tensor].nchunks && m->total > ps->tens[r->tensor].seq[m->chunk])
        ps->tens[r->tensor].seq[m->chunk] = m->total;
    /* BSP: resumed servers are at the step of their chunk furthest behind
     * (after a crash mid-push some chunks may be one step ahead: they drop
     * the repeated push) */
    if (r->type == PS_INIT && m->type == PS_ACK && m->clock < r->minv)
        r->minv = m->clock;
    if (r->type == PS_INIT && r->pending == 0 && !r->rc && r->minv > ps->clock &&
        r->minv != INT64_MAX)
        ps->clock = r->minv;
    if (r->type == PS_BYE && m->type == PS_ACK)
        ps->srv_rc[l->peer] = 1; /* it may close now: not a failure */
    if (m->type == PS_ERR) {
        ps->errbuf[m->len] = 0;
        if (!r->rc) {
            r->rc = m->status;
            snprintf(ps->err, sizeof ps->err, "parameter server %d (rank %d): %s", l->peer,
                     server_rank(ps, l->peer), ps->errbuf);
        }
    }
    return 0;
}

int ps_worker_read(weft_ps *ps, int s, char *e, size_t elen)
{
    return ps_link_read(&ps->srv[s], reply_dest, reply_done, ps, e, elen);
}

/* Retry the connections that are down (when their backoff allows);
 * returns ms until the next retry is due, or -1 when none is down. */
static int retry_down(weft_ps *ps)
{
    int wake = -1;
    for (int s = 0; s < ps->nservers; s++) {
        if (ps->srv_rc[s] || ps->srv[s].fd >= 0)
            continue;
        ps_srv_retry(ps, s);
        if (!ps->srv_rc[s] && ps->srv[s].fd < 0) {
            int ms = clock_ms_until(ps->sx[s].next_try);
            ms = ms < 1 ? 1 : ms;
            wake = wake < 0 || ms < wake ? ms : wake;
        }
    }
    return wake;
}

/* Move bytes on every server connection, waiting up to ms (less when a
 * reconnection is due sooner). */
static int progress(weft_ps *ps, int ms)
{
    struct pollfd pf[ps->nservers];
    int idx[ps->nservers], n = 0, wake = retry_down(ps);
    char e[256];
    if (wake >= 0 && wake < ms)
        ms = wake;
    for (int s = 0; s < ps->nservers; s++) {
        if (!srv_up(ps, s))
            continue;
        short ev = (short)(POLLIN | (ps_link_pending(&ps->srv[s]) ? POLLOUT : 0));
        pf[n] = (struct pollfd){ .fd = ps->srv[s].fd, .events = ev };
        idx[n++] = s;
    }
    if (n == 0) {
        if (wake >= 0 && ms > 0)
            poll(NULL, 0, ms); /* only reconnections left: sleep until one is due */
        return 0;
    }
    if (poll(pf, (nfds_t)n, ms) <= 0)
        return 0;
    for (int i = 0; i < n; i++) {
        int s = idx[i], rc = 0;
        e[0] = 0;
        if (pf[i].revents & POLLOUT)
            rc = ps_link_flush(&ps->srv[s], e, sizeof e);
        if (!rc && (pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
            rc = ps_worker_read(ps, s, e, sizeof e);
        if (rc)
            ps_srv_down(ps, s, rc == WEFT_EPEER ? WEFT_EPEER : rc, e);
    }
    return 0;
}

static void flush_all(weft_ps *ps)
{
    char e[256];
    for (int s = 0; s < ps->nservers; s++) {
        int rc;
        if (!srv_up(ps, s) || !ps_link_pending(&ps->srv[s]))
            continue;
        e[0] = 0;
        if ((rc = ps_link_flush(&ps->srv[s], e, sizeof e)))
            ps_srv_down(ps, s, rc, e);
    }
}

static int worker_ok(weft_ps *ps)
{
    if (!ps)
        return WEFT_EINVAL;
    if (ps->role != WEFT_PS_ROLE_WORKER)
        return ps_fail(ps, WEFT_EINVAL, "only a worker can do this (this rank is server %d)",
                       ps->rank);
    if (ps->bye)
        return ps_fail(ps, WEFT_EINVAL, "this worker has shut down");
    if (!ps->connected) {
        /* the store stays open: a restarted server's new address is there */
        int rc = ps_worker_connect(ps);
        if (rc)
            return rc;
        ps->connected = 1;
    }
    return 0;
}

static weft_ps_request *req_new(weft_ps *ps, int type, int tensor, float *dst)
{
    weft_ps_request *r = calloc(1, sizeof *r);
    if (!r || !(r->pend = calloc((size_t)ps->nservers, sizeof *r->pend))) {
        free(r);
        return NULL;
    }
    r->ps = ps;
    r->minv = INT64_MAX;
    r->id = ++ps->next_id;
    r->type = type;
    r->tensor = tensor;
    r->dst = dst;
    r->next = ps->reqs;
    ps->reqs = r;
    return r;
}

/* Queue m (for request r) to server s, and keep it until answered; a dead
 * server fails r at once, one being reconnected gets it when it is back. */
static int req_send(weft_ps *ps, weft_ps_request *r, int s, ps_msg *m, const void *data)
{
    int rc = 0;
    if (ps->srv_rc[s]) {
        if (!r->rc)
            r->rc = ps->srv_rc[s];
        return 0;
    }
    if ((rc = VEC_RESERVE(r->parts, r->cap, (size_t)r->nparts + 1)))
        return rc;
    m->id = r->id;
    if (srv_up(ps, s))
        rc = m->type == PS_PULL ? ps_link_send_front(&ps->srv[s], m)
                                : ps_link_send(&ps->srv[s], m, data, NULL);
    if (rc)
        return rc;
    r->parts[r->nparts++] = (ps_part){ s, 0, *m, data };
    r->pend[s]++;
    r->pending++;
    return 0;
}

static void unlink_req(weft_ps *ps, weft_ps_request *r)
{
    for (weft_ps_request **p = &ps->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

static int finish(weft_ps_request *r)
{
    int rc = r->rc;
    unlink_req(r->ps, r);
    req_free(r);
    return rc;
}

/* While it waits, a worker tells every server it is alive (a clock message
 * that changes nothing), so that a server never takes a worker blocked on
 * another server for a hung one. */
static void beat(weft_ps *ps)
{
    double now = clock_now(), every = ps->cfg.dead_worker_wait_s / 4;
    if (now - ps->beat_at < (every < 0.05 ? 0.05 : every))
        return;
    ps->beat_at = now;
    for (int s = 0; s < ps->nservers; s++) {
        ps_msg m = ps_msg_make(PS_CLOCK);
        if (!srv_up(ps, s) || ps->bye)
            continue;
        m.clock = ps->clock;
        ps_link_send(&ps->srv[s], &m, NULL, NULL);
    }
    flush_all(ps);
}

/* A wait past half the timeout: ask every server it waits on whether it
 * is there, once a second. A server's loop answers at once even while it
 * holds the reply itself (a BSP step waiting for another worker), so at
 * the timeout a server that never answered is the one that stopped, and
 * the others only wait behind it. The ping goes ahead of queued pushes. */
#define PING_EVERY_S 1.0

static void ping(weft_ps *ps, const weft_ps_request *r)
{
    double now = clock_now();
    for (int s = 0; s < ps->nservers; s++) {
        ps_srv *x = &ps->sx[s];
        if (!r->pend[s] || !srv_up(ps, s) || now - x->ping_at < PING_EVERY_S)
            continue;
        ps_msg m = ps_msg_make(PS_PING);
        m.id = ++ps->next_id;
        if (ps_link_send_front(&ps->srv[s], &m))
            continue;
        x->ping_at = now;
        if (x->unanswered <= 0)
            x->unanswered = now;
    }
    flush_all(ps);
}

/* At the timeout: the pending servers that have not answered a ping for
 * a quarter of it, as "parameter server 1 (rank 5)"; how many. */
static int stopped_servers(weft_ps *ps, const weft_ps_request *r, char *who, size_t len)
{
    size_t o = 0;
    int n = 0;
    double now = clock_now(), most = 0;
    who[0] = 0;
    for (int s = 0; s < ps->nservers; s++) {
        double since = ps->sx[s].unanswered;
        if (!r->pend[s] || since <= 0 || now - since < ps->timeout_s / 4 || o >= len - 40)
            continue;
        o += (size_t)snprintf(who + o, len - o, "%sparameter server %d (rank %d)",
                              n ? " and " : "", s, server_rank(ps, s));
        if (now - since > most)
            most = now - since;
        n++;
    }
    if (n && o < len - 40)
        snprintf(who + o, len - o, " stopped responding (no answer to a ping for %.0f s)", most);
    return n;
}

int weft_ps_test(weft_ps_request *r, int *done)
{
    if (!r || !done)
        return WEFT_EINVAL;
    *done = 0;
    flush_all(r->ps);
    progress(r->ps, 0);
    if (r->pending > 0)
        return 0;
    *done = 1;
    return finish(r);
}

int weft_ps_wait(weft_ps_request *r)
{
    weft_ps *ps;
    double last;
    uint64_t seen = 0;
    if (!r)
        return WEFT_EINVAL;
    ps = r->ps;
    flush_all(ps);
    last = clock_now();
    while (r->pending > 0) {
        uint64_t now_bytes = 0;
        int ms = clock_ms_until(last + ps->timeout_s), beat_ms = (int)(ps->cfg.dead_worker_wait_s * 250);
        if (beat_ms < 50)
            beat_ms = 50;
        if (ms > beat_ms)
            ms = beat_ms;
        /* wake for the pings from half the timeout on */
        int half = clock_ms_until(last + ps->timeout_s / 2);
        if (half > 0 && ms > half)
            ms = half;
        if (half <= 0 && ms > (int)(PING_EVERY_S * 1000))
            ms = (int)(PING_EVERY_S * 1000);
        progress(ps, ms);
        beat(ps);
        for (int s = 0; s < ps->nservers; s++)
            now_bytes += ps->srv[s].recvd; /* heartbeats out are no sign of life in */
        now_bytes -= ps->pong_bytes;
        int down = 0; /* a reconnection has its own bound */
        for (int s = 0; s < ps->nservers; s++)
            down |= r->pend[s] && !srv_up(ps, s);
        if (now_bytes != seen || down) {
            seen = now_bytes;
            last = clock_now();
        } else if (r->pending > 0 && clock_now() < last + ps->timeout_s &&
                   clock_now() >= last + ps->timeout_s / 2) {
            ping(ps, r);
        } else if (r->pending > 0 && clock_now() >= last + ps->timeout_s) {
            char who[128] = "", stopped[256];
            size_t o = 0;
            int nstop = stopped_servers(ps, r, stopped, sizeof stopped);
            for (int s = 0; s < ps->nservers && o < sizeof who - 12; s++)
                if (r->pend[s])
                    o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "", s);
            for (int s = 0; s < ps->nservers; s++)
                if (r->pend[s])
                    ps_server_lost(ps, s, WEFT_ETIMEDOUT, "no reply");
            if (nstop)
                ps_fail(ps, WEFT_ETIMEDOUT,
                        "%s: no reply from parameter server(s) %s for %.0f s (worker %d "
                        "waiting in %s)",
                        stopped, who, ps->timeout_s, ps->rank, ps_msg_name(r->type));
            else
                ps_fail(ps, WEFT_ETIMEDOUT,
                        "no reply from parameter server(s) %s for %.0f s (worker %d waiting in %s)",
                        who, ps->timeout_s, ps->rank, ps_msg_name(r->type));
            r->rc = WEFT_ETIMEDOUT;
            break;
        }
    }
    return finish(r);
}

/* The clock to every server that is up (one being reconnected gets it
 * first thing when it is back). */
static int send_clock(weft_ps *ps)
{
    int rc;
    for (int s = 0; s < ps->nservers; s++) {
        ps_msg m = ps_msg_make(PS_CLOCK);
        if (ps->srv_rc[s])
            return ps->srv_rc[s];
        if (!srv_up(ps, s))
            continue;
        m.clock = ps->clock;
        if ((rc = ps_link_send(&ps->srv[s], &m, NULL, NULL)))
            return rc;
    }
    flush_all(ps);
    for (int s = 0; s < ps->nservers; s++)
        if (ps->srv_rc[s])
            return ps->srv_rc[s];
    return 0;
}

static int find_tensor(const weft_ps *ps, uint32_t key)
{
    for (int i = 0; i < ps->ntens; i++)
        if (ps->tens[i].key == key)
            return i;
    return -1;
}

int weft_ps_register(weft_ps *ps, uint32_t key, const float *values, size_t count)
{
    weft_ps_request *r;
    ps_tensor *t;
    int rc, i;
    if ((rc = worker_ok(ps)))
        return rc;
    if (count == 0 || count > ((size_t)1 << 48) || (ps->rank == 0 && !values))
        return ps_fail(ps, WEFT_EINVAL, "register key %u: count %zu%s", key, count,
                       ps->rank == 0 && !values ? " without initial values on worker 0" : "");
    if ((i = find_tensor(ps, key)) >= 0) {
        if (ps->tens[i].count != count)
            return ps_fail(ps, WEFT_EINVAL, "key %u registered with %zu elements, now %zu",
                           key, ps->tens[i].count, count);
    } else {
        if ((rc = VEC_RESERVE(ps->tens, ps->tens_cap, (size_t)ps->ntens + 1)))
            return rc;
        ps_tensor nt = { key, count,
                         ps_shard_nchunks(count, ps->nservers, (size_t)ps->cfg.chunk_min,
                                          (size_t)ps->cfg.chunk_max),
                         NULL };
        if (!(nt.seq = calloc(nt.nchunks, sizeof *nt.seq)))
            return WEFT_ENOMEM;
        i = ps->ntens++;
        ps->tens[i] = nt;
    }
    t = &ps->tens[i];
    if (!(r = req_new(ps, PS_INIT, i, NULL)))
        return WEFT_ENOMEM;
    for (size_t j = 0; j < t->nchunks; j++) {
        size_t off, n;
        ps_msg m = ps_msg_make(PS_INIT);
        ps_shard_chunk(count, t->nchunks, j, &off, &n);
        m.key = key;
        m.chunk = (uint32_t)j;
        m.total = count;
        m.len = ps->rank == 0 ? n * sizeof(float) : 0;
        if ((rc = req_send(ps, r, ps_shard_server(key, j, ps->nservers), &m,
                           ps->rank == 0 ? values + off : NULL))) {
            finish(r);
            return rc;
        }
    }
    int64_t before = ps->clock;
    if ((rc = weft_ps_wait(r)))
        return rc;
    /* re-admitted after a restart: every server learns where it goes on */
    return ps->clock != before ? send_clock(ps) : 0;
}

static int tensor_op(weft_ps *ps, int type, uint32_t key, const float *src, float *dst,
                     weft_ps_request **out)
{
    weft_ps_request *r;
    ps_tensor *t;
    int rc, i;
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    if ((rc = worker_ok(ps)))
        return rc;
    if ((type == PS_PUSH && !src) || (type == PS_PULL && !dst))
        return ps_fail(ps, WEFT_EINVAL, "%s of key %u: NULL buffer", ps_msg_name(type), key);
    if ((i = find_tensor(ps, key)) < 0)
        return ps_fail(ps, WEFT_EINVAL, "%s of key %u, which was never registered",
                       ps_msg_name(type), key);
    t = &ps->tens[i];
    if (!(r = req_new(ps, type, i, dst)))
        return WEFT_ENOMEM;
    for (size_t j = 0; j < t->nchunks; j++) {
        size_t off, n;
        ps_msg m = ps_msg_make(type);
        ps_shard_chunk(t->count, t->nchunks, j, &off, &n);
        m.key = key;
        m.chunk = (uint32_t)j;
        m.clock = ps->clock;
        /* a push is numbered per chunk, so that a server drops one sent
         * again after a reconnect; a pull may overtake this worker's pushes
         * on the way: it names the last one the server must have taken in
         * first (its own updates are always visible to it) */
        m.total = type == PS_PUSH ? ++t->seq[j] : t->seq[j];
        m.len = type == PS_PUSH ? n * sizeof(float) : 0;
        if ((rc = req_send(ps, r, ps_shard_server(key, j, ps->nservers), &m,
                           type == PS_PUSH ? src + off : NULL))) {
            finish(r);
            return rc;
        }
    }
    flush_all(ps);
    *out = r;
    return 0;
}

int weft_ps_push(weft_ps *ps, uint32_t key, const float *grads, weft_ps_request **req)
{
    return tensor_op(ps, PS_PUSH, key, grads, NULL, req);
}

int weft_ps_pull(weft_ps *ps, uint32_t key, float *params, weft_ps_request **req)
{
    return tensor_op(ps, PS_PULL, key, NULL, params, req);
}

/* One message to every server, and wait for every answer. */
static int everyone(weft_ps *ps, int type)
{
    weft_ps_request *r = req_new(ps, type, -1, NULL);
    int rc;
    if (!r)
        return WEFT_ENOMEM;
    for (int s = 0; s < ps->nservers; s++) {
        ps_msg m = ps_msg_make(type);
        m.clock = ps->clock;
        if ((rc = req_send(ps, r, s, &m, NULL))) {
            finish(r);
            return rc;
        }
    }
    int64_t before = ps->clock;
    if ((rc = weft_ps_wait(r)))
        return rc;
    /* re-admitted after a restart: every server learns where it goes on */
    return ps->clock != before ? send_clock(ps) : 0;
}

int weft_ps_clock(weft_ps *ps)
{
    int rc;
    if ((rc = worker_ok(ps)))
        return rc;
    ps->clock++;
    return send_clock(ps);
}

int64_t weft_ps_clock_value(const weft_ps *ps)
{
    return ps ? ps->clock : WEFT_EINVAL;
}

int weft_ps_barrier(weft_ps *ps)
{
    int rc = worker_ok(ps);
    return rc ? rc : everyone(ps, PS_BARRIER);
}

int weft_ps_checkpoint(weft_ps *ps)
{
    int rc = worker_ok(ps);
    return rc ? rc : everyone(ps, PS_CKPT);
}

int weft_ps_shutdown(weft_ps *ps)
{
    int rc = worker_ok(ps), first = 0;
    if (rc)
        return rc;
    /* let what the caller issued reach the servers before the goodbye */
    double deadline = clock_now() + ps->timeout_s;
    for (weft_ps_request *r = ps->reqs; r; r = r->next)
        while (r->pending > 0 && clock_now() < deadline) {
            int any = 0;
            for (int s = 0; s < ps->nservers; s++)
                any |= r->pend[s] > 0 && !ps->srv_rc[s];
            if (!any)
                break;
            progress(ps, 50);
            beat(ps);
        }
    first = everyone(ps, PS_BYE);
    ps->bye = 1;
    return first;
}

void weft_ps_bytes(const weft_ps *ps, uint64_t *sent, uint64_t *received)
{
    uint64_t s = 0, r = 0;
    if (ps) {
        s = ps->sent;
        r = ps->recvd;
        for (int i = 0; ps->srv && i < ps->nservers; i++) {
            s += ps->srv[i].sent;
            r += ps->srv[i].recvd;
        }
        s += ps_server_bytes(ps, &r);
    }
    if (sent)
        *sent = s;
    if (received)
        *received = r;
}
