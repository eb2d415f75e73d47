/* The point-to-point streams (coll/exec/p2p.h): per peer, messages out
 * in posting order and in as they arrive, each matched to the oldest
 * receive with its tag or kept until one comes. Runs under the engine's
 * drive lock (p2p.c). */
#include "coll/exec/p2p.h"

#include "coll/exec/p2p_int.h"

#include "core/clock.h"
#include "core/log.h"
#include "transport/ofi.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static void list_push(req_list *l, weft_request *r)
{
    r->next = NULL;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
}

static weft_request *list_pop(req_list *l)
{
    weft_request *r = l->head;
    if (r && !(l->head = r->next))
        l->tail = NULL;
    return r;
}

/* The oldest request of l with this tag, unlinked; NULL if none. */
static weft_request *list_take_tag(req_list *l, int32_t tag)
{
    weft_request *prev = NULL;
    for (weft_request *r = l->head; r; prev = r, r = r->next) {
        if (r->tag != tag)
            continue;
        if (prev)
            prev->next = r->next;
        else
            l->head = r->next;
        if (l->tail == r)
            l->tail = prev;
        return r;
    }
    return NULL;
}

/* "send(count=100, f32, tag 3) to rank 2" */
static void describe(const weft_request *r, char *buf, size_t len)
{
    const char *dt = weft_dtype_name(r->a.dtype);
    int send = r->a.kind == WEFT_COLL_SEND;
    snprintf(buf, len, "%s(count=%zu, %s, tag %d) %s rank %d", send ? "send" : "recv",
             r->a.count, dt ? dt : "?", (int)r->tag, send ? "to" : "from", r->a.root);
}

static void done(p2p_engine *e, weft_request *r, int rc)
{
    flight_rec *fr = flight_get(&e->c->fl, r->flight_id);
    if (fr)
        flight_finish(fr, rc);
    e->outstanding--;
    req_complete(r, rc);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void fail(p2p_engine *e, weft_request *r, int rc, const char *fmt, ...)
{
    char d[120], why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    describe(r, d, sizeof d);
    snprintf(r->err, sizeof r->err, "%.190s during %.110s", why, d);
    log_msg(e->c->loglevel, LOG_DEBUG, e->rank, "%s", r->err);
    done(e, r, rc);
}

void p2p_started(p2p_engine *e, weft_request *r)
{
    flight_rec *fr = flight_get(&e->c->fl, r->flight_id);
    if (fr && __atomic_load_n(&fr->state, __ATOMIC_RELAXED) == FL_QUEUED) {
        frame_hdr h = r->h;
        flight_start(fr, &h);
        int32_t w = r->a.kind == WEFT_COLL_SEND ? -r->a.root - 1 : r->a.root;
        flight_waiting(fr, &w, 1);
    }
}

static void msg_free(p2p_msg *m)
{
    if (m) {
        free(m->buf);
        free(m);
    }
}

/* Everything that involves peer q fails with the peer's reason; what is
 * posted for it later fails at once. Messages that arrived whole stay:
 * receives may still take them. */
void p2p_peer_gone(p2p_engine *e, int q, int rc, const char *why)
{
    p2p_peer *p = &e->peer[q];
    weft_request *r;
    if (!p->gone) {
        p->gone = 1;
        p->gone_rc = rc;
        snprintf(p->gone_why, sizeof p->gone_why, "%s", why);
        tcp_drop(&e->net, q);
        p2p_shm_gone(e, q);
        /* libfabric cannot end one pair: a body on its way into a
         * receive's buffer, or a send the provider still reads, would
         * outlive the request's failure, so the endpoint closes */
        if (p->ofi && (p->into || p->park || p->sends.head) && !e->ofi_cut[0]) {
            snprintf(e->ofi_cut, sizeof e->ofi_cut,
                     "point-to-point over libfabric closed after rank %d failed: %.120s", q, why);
            ofi_sever(e->ofi);
        }
    }
    if (p->into)
        fail(e, p->into, rc, "%s", why);
    msg_free(p->park);
    p->into = NULL;
    p->park = NULL;
    p->hdr = 0;
    p->got = 0;
    while ((r = list_pop(&p->recvs)))
        fail(e, r, rc, "%s", why);
    while ((r = list_pop(&p->sends)))
        fail(e, r, rc, "%s", why);
}

/* A receive meets a message that arrived before it. */
/* Does message h fit receive r? If not, r fails with both named. */
static int fits(p2p_engine *e, weft_request *r, const frame_hdr *h)
{
    if (h->dtype == (uint8_t)r->a.dtype && h->count == r->a.count)
        return 1;
    const char *dt = weft_dtype_name((weft_dtype)h->dtype);
    fail(e, r, WEFT_EMISMATCH, "rank %d sent count=%llu %s with this tag", r->a.root,
         (unsigned long long)h->count, dt ? dt : "?");
    return 0;
}

static void take_parked(p2p_engine *e, weft_request *r, p2p_msg *m)
{
    if (fits(e, r, &m->h)) {
        r->h = m->h;
        p2p_started(e, r);
        if (m->h.len)
            memcpy(r->a.recv, m->buf, m->h.len);
        r->moved = m->h.len;
        done(e, r, 0);
    }
    msg_free(m);
}

/* A newly posted receive: the oldest parked message with its tag, else
 * it waits in the peer's list. */
static void post_recv(p2p_engine *e, weft_request *r)
{
    p2p_peer *p = &e->peer[r->a.root];
    p2p_msg *prev = NULL;
    for (p2p_msg *m = p->uq_head; m; prev = m, m = m->next) {
        if (m->h.root != r->tag)
            continue;
        if (prev)
            prev->next = m->next;
        else
            p->uq_head = m->next;
        if (p->uq_tail == m)
            p->uq_tail = prev;
        take_parked(e, r, m);
        return;
    }
    if (p->gone && !(p->park && p->h.root == r->tag)) {
        fail(e, r, p->gone_rc, "%s", p->gone_why);
        return;
    }
    list_push(&p->recvs, r);
}

/* Take what callers posted. Returns 1 when there was any. */
int p2p_take_posts(p2p_engine *e, int *stop)
{
    char sink[64];
    weft_request *r, *next;
    pthread_mutex_lock(&e->mu);
    r = e->post_head;
    e->post_head = e->post_tail = NULL;
    *stop = e->stop;
    int sev = e->sever_rc;
    pthread_mutex_unlock(&e->mu);
    /* only after a poke: a blocking exchange then makes no system call here */
    if (atomic_exchange(&e->poked, 0))
        while (read(e->wake[0], sink, sizeof sink) > 0) {
        }
    if (sev && !e->severed) {
        e->severed = 1;
        if (e->shm_on) /* the rings nobody here will read */
            shm_unlink_to(e->c->id ^ P2P_SALT, e->rank);
        ofi_sever(e->ofi); /* nothing lands in a buffer whose owner is told */
        for (int q = 0; q < e->size; q++)
            if (q != e->rank)
                p2p_peer_gone(e, q, sev, "communicator unusable after an earlier error");
    }
    int any = r != NULL;
    for (; r; r = next) {
        next = r->next;
        r->next = NULL;
        e->outstanding++;
        e->fresh = 1;
        p2p_peer *p = &e->peer[r->a.root];
        if (e->aborted || atomic_load(&e->c->aborted)) {
            fail(e, r, WEFT_EABORTED, "communicator aborted");
        } else if (r->a.kind == WEFT_COLL_RECV) {
            post_recv(e, r);
        } else if (p->gone) {
            fail(e, r, p->gone_rc, "%s", p->gone_why);
        } else {
            r->h.seq = p->sent++;
            list_push(&p->sends, r);
        }
    }
    return any;
}

/* A message has been read whole. */
void p2p_msg_arrived(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    if (p->into) {
        p->into->moved = p->got;
        done(e, p->into, 0);
    } else if (p->park->drop) {
        msg_free(p->park);
    } else {
        /* a receive posted while it was on its way waits in the list */
        weft_request *r = list_take_tag(&p->recvs, p->park->h.root);
        if (r) {
            take_parked(e, r, p->park);
        } else {
            if (p->uq_tail)
                p->uq_tail->next = p->park;
            else
                p->uq_head = p->park;
            p->uq_tail = p->park;
        }
    }
    p->into = NULL;
    p->park = NULL;
    p->hdr = 0;
    p->got = 0;
}

/* A header arrived whole: check it, then find where its payload goes.
 * Returns 0, or negative when the stream is unusable (peer_gone done). */
int p2p_header_arrived(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    const char *why;
    char msg[200];
    frame_hdr h;
    if (frame_decode(&p->h, sizeof p->h, &h, &why)) {
        /* why says it */
    } else if (h.kind != WEFT_COLL_SEND)
        why = "not a point-to-point message";
    else if (h.seq != p->recvd)
        why = "message out of order";
    else if (h.len != h.count * weft_dtype_size((weft_dtype)h.dtype))
        why = "its length and count disagree";
    else
        why = NULL;
    if (why) {
        snprintf(msg, sizeof msg, "garbage from rank %d on its point-to-point stream: %s", q,
                 why);
        p2p_peer_gone(e, q, WEFT_EPROTO, msg);
        return WEFT_EPROTO;
    }
    p->h = h;
    p->recvd++;
    weft_request *r = list_take_tag(&p->recvs, h.root);
    int refused = r && !fits(e, r, &h);
    if (r && !refused) {
        p->into = r;
        r->h = h;
        p2p_started(e, r);
    } else {
        /* early (kept for its receive) or refused (read to keep the
         * stream, then dropped): either way it needs a buffer */
        if (!(p->park = calloc(1, sizeof *p->park)) ||
            (h.len && !(p->park->buf = malloc(h.len)))) {
            snprintf(msg, sizeof msg, "out of memory for a message of %llu bytes from rank %d",
                     (unsigned long long)h.len, q);
            p2p_peer_gone(e, q, WEFT_ENOMEM, msg);
            return WEFT_ENOMEM;
        }
        p->park->h = h;
        p->park->drop = refused;
    }
    if (!h.len && !p->ofi) /* libfabric still has an empty body to take */
        p2p_msg_arrived(e, q);
    return 0;
}

/* Read peer q's stream as far as it goes. 1: progress, 0: none. */
static int read_peer(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    int fd = e->net.in_fd[q], progressed = 0;
    uint64_t visit = 0;
    char why[200];
    while (!p->gone && visit < VISIT_BYTES) {
        char *to;
        size_t want;
        if (p->hdr < sizeof p->h) {
            to = (char *)&p->h + p->hdr;
            want = sizeof p->h - p->hdr;
        } else {
            uint64_t left = p->h.len - p->got;
            to = (p->into ? (char *)p->into->a.recv : p->park->buf) + p->got;
            want = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
        }
        ssize_t n = recv(fd, to, want, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            p->readable = 0;
            break;
        }
        if (n <= 0) {
            snprintf(why, sizeof why, "rank %d died (its connection to rank %d %s)", q,
                     e->rank, n == 0 ? "closed" : errno == ECONNRESET ? "was reset"
                                                               : strerror(errno));
            /* a peer that finished and left is no failure unless this
             * rank still expected something of it */
            p2p_peer_gone(e, q, WEFT_EPEER, why);
            return 1;
        }
        progressed = 1;
        visit += (uint64_t)n;
        if (p->hdr < sizeof p->h) {
            p->hdr += (uint32_t)n;
            if (p->hdr == sizeof p->h && p2p_header_arrived(e, q))
                return 1;
        } else if ((p->got += (uint64_t)n) == p->h.len) {
            p2p_msg_arrived(e, q);
        }
    }
    return progressed;
}

void p2p_sent(p2p_engine *e, int q)
{
    done(e, list_pop(&e->peer[q].sends), 0);
}

/* Write peer q's oldest sends as far as the socket takes them. */
static int send_peer(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    weft_request *r;
    char err[300];
    int fd, progressed = 0;
    uint64_t visit = 0;
    while ((r = p->sends.head) && visit < VISIT_BYTES) {
        int rc = tcp_out(&e->net, q, &fd, err, sizeof err);
        if (rc < 0) {
            p2p_peer_gone(e, q, rc, err);
            return 1;
        }
        p->wfd = fd;
        if (rc == 0) { /* its handshake waits for the peer */
            p->wev = POLLIN;
            p->writable = 0;
            return progressed;
        }
        p2p_started(e, r);
        struct iovec iov[2];
        int n_iov = 0;
        if (r->hdr < sizeof r->h) {
            iov[n_iov].iov_base = (char *)&r->h + r->hdr;
            iov[n_iov++].iov_len = sizeof r->h - r->hdr;
        }
        if (r->moved < r->bytes) {
            uint64_t left = r->bytes - r->moved;
            iov[n_iov].iov_base = (char *)(uintptr_t)r->a.send + r->moved;
            iov[n_iov++].iov_len = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
        }
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n_iov };
        ssize_t n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                p->wev = POLLOUT;
                p->writable = 0;
                return progressed;
            }
            snprintf(err, sizeof err, "rank %d died (its connection from rank %d %s)", q,
                     e->rank, errno == EPIPE || errno == ECONNRESET ? "was reset"
                                                                 : strerror(errno));
            p2p_peer_gone(e, q, WEFT_EPEER, err);
            return 1;
        }
        progressed = 1;
        visit += (uint64_t)n;
        size_t h = sizeof r->h - r->hdr;
        if ((size_t)n <= h) {
            r->hdr += (uint32_t)n;
        } else {
            r->hdr = sizeof r->h;
            r->moved += (uint64_t)n - h;
        }
        if (r->hdr == sizeof r->h && r->moved == r->bytes)
            p2p_sent(e, q);
    }
    return progressed;
}

/* The communicator is aborted, destroyed or timed out: every peer with
 * something outstanding goes (a message half on the wire cannot be taken
 * back, so its stream ends too, and the peer learns). */
void p2p_fail_all(p2p_engine *e, int rc, const char *why)
{
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        if (p->recvs.head || p->sends.head || p->into)
            p2p_peer_gone(e, q, rc, why);
    }
}

/* Nothing moved for timeout_s while messages wait: name who they wait on. */
void p2p_timed_out(p2p_engine *e)
{
    char who[200], why[260];
    size_t w = 0;
    who[0] = 0;
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        int in = p->recvs.head || p->into, out = p->sends.head != NULL;
        if ((in || out) && w < sizeof who - 24)
            w += (size_t)snprintf(who + w, sizeof who - w, "%s%s%s %d", w ? ", " : "",
                                  in ? "from" : "", in && out ? "/to" : out ? "to" : "", q);
    }
    snprintf(why, sizeof why, "timed out after %.0f s waiting on ranks: %s", e->c->timeout_s,
             who);
    p2p_fail_all(e, WEFT_ETIMEDOUT, why);
}

/* Peers this rank awaits a message from but that never connected may be
 * dead, and then nobody would ever notice. */
void p2p_probe(p2p_engine *e)
{
    char why[200];
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        /* over libfabric there is no connection to end: every peer
         * something is outstanding with is looked at, sends too */
        int await = p->ofi ? p->recvs.head || p->into || p->sends.head
                           : p->recvs.head && e->net.in_fd[q] < 0;
        if (q == e->rank || p->gone || !await)
            continue;
        if (tcp_probe(&e->net, q)) {
            snprintf(why, sizeof why, "rank %d died (nothing listens at its address %s)", q,
                     e->net.addr[q]);
            p2p_peer_gone(e, q, WEFT_EPEER, why);
        }
    }
}

int p2p_sweep(p2p_engine *e)
{
    int progressed = 0;
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        if (q == e->rank || p->gone)
            continue;
        if (p->ofi) {
            progressed |= p2p_ofi_read(e, q);
            if (p->sends.head && !p->gone)
                progressed |= p2p_ofi_send(e, q);
            continue;
        }
        /* a same-host pair's ways go by ring once their hellos say so */
        int local = p2p_local(e, q);
        if (local && !p2p_shm_tcp(&p->in))
            progressed |= p2p_shm_read(e, q);
        if ((!local || p2p_shm_tcp(&p->in)) && !p->gone && p->readable &&
            e->net.in_fd[q] >= 0)
            progressed |= read_peer(e, q);
        if (local && !p2p_shm_tcp(&p->out) && p->sends.head && !p->gone)
            progressed |= p2p_shm_send(e, q);
        if ((!local || p2p_shm_tcp(&p->out)) && p->sends.head && p->writable && !p->gone)
            progressed |= send_peer(e, q);
    }
    if (e->severed) /* connections that arrive later end at once */
        for (int q = 0; q < e->size; q++)
            if (e->net.in_fd[q] >= 0 || e->net.out_fd[q] >= 0)
                tcp_drop(&e->net, q);
    return progressed;
}

void p2p_free_parked(p2p_engine *e)
{
    for (int q = 0; e->peer && q < e->size; q++) {
        p2p_msg *m = e->peer[q].uq_head, *next;
        for (; m; m = next) {
            next = m->next;
            msg_free(m);
        }
        e->peer[q].uq_head = e->peer[q].uq_tail = NULL;
        msg_free(e->peer[q].park);
        e->peer[q].park = NULL;
    }
}
