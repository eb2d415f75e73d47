/* The schedule executor. Within a round, every network op makes progress
 * whenever its socket (or shared-memory ring) is ready; when none can, the
 * rank polls briefly, yielding its core, then sleeps in poll() until one
 * can, so a waiting rank never takes a core from a rank that computes.
 * Peers on the same host exchange messages through transport/shm.h rings
 * (the TCP connection then carries only doorbells); receives that reduce
 * read straight out of the ring, or, over TCP, through a small per-peer
 * staging buffer, reduced as the bytes arrive so that the reduction
 * overlaps the transfer. */
#include "coll/exec/exec.h"

#include "coll/exec/exec_int.h"
#include "coll/exec/exec_hint.h"
#include "coll/exec/exec_ofi.h"
#include "coll/exec/exec_shm.h"

#include "coll/exec/exec_check.h"

#include "coll/exec/callboard.h"
#include "coll/exec/mismatch.h"
#include "coll/comm_watch.h"
#include "coll/exec/live.h"
#include "transport/ofi.h"
#include "coll/reduce.h"
#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define STAGE_BYTES (256u * 1024u)
#define PEND_MAX TCP_PEND_MAX
#define PROBE_S 1.0            /* how often to check on peers that never connected */

static int local_op(weft_comm *c, const sched_op *o, char **bufs, const frame_hdr *fp)
{
    char *dst = bufs[o->buf] + o->off;
    const char *src = bufs[o->src_buf] + o->src_off;
    size_t es = weft_dtype_size((weft_dtype)fp->dtype);
    if (o->kind == SOP_COPY) {
        if (dst != src)
            memmove(dst, src, o->len);
        return 0;
    }
    int rc = reduce_apply(dst, dst, src, o->len / es, (weft_dtype)fp->dtype, (weft_op)fp->op);
    return rc ? comm_fail(c, rc, "bad reduction (dtype %d, op %d)", fp->dtype, fp->op) : 0;
}

/* Returns 1 on progress, 0 if the socket would block, negative on error. */
static int do_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                   const frame_hdr *fp)
{
    char e[300], d[160];
    int fd, progressed = 0;
    uint64_t visit = 0;
    if (exec_ofi_pair(c, o->peer))
        return exec_ofi_send(c, o, st, bufs, fp);
    int rc = tcp_out(&c->net, o->peer, &fd, e, sizeof e);
    if (rc < 0) {
        exec_describe(fp, d, sizeof d);
        c->fail_peer = o->peer;
        return comm_fail(c, rc, "%s, during %s", e, d);
    }
    st->wfd = fd;
    st->wev = POLLIN;
    st->lk = NULL;
    if (rc == 0)
        return 0; /* its listener has not answered the handshake yet */
    st->wev = POLLOUT;
    if (exec_same_host(c, o->peer) &&
        (rc = exec_shm_send(c, o, st, bufs, fp, fd)) != EXEC_NOT_SHM)
        return rc;
    while (!st->complete) {
        struct iovec iov[2];
        int n_iov = 0;
        if (st->hdr < sizeof st->h) {
            iov[n_iov].iov_base = (char *)&st->h + st->hdr;
            iov[n_iov++].iov_len = sizeof st->h - st->hdr;
        }
        if (st->done < o->len) {
            uint64_t left = o->len - st->done;
            iov[n_iov].iov_base = bufs[o->buf] + o->off + st->done;
            iov[n_iov++].iov_len = left < VISIT_BYTES ? left : VISIT_BYTES;
        }
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n_iov };
        ssize_t n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return progressed;
            if (errno == EPIPE || errno == ECONNRESET)
                return exec_fail_peer(c, o->peer, fp, "was reset");
            return comm_fail(c, WEFT_ESYS, "send to rank %d: %s", o->peer, strerror(errno));
        }
        progressed = 1;
        visit += (uint64_t)n;
        size_t h = sizeof st->h - st->hdr;
        if ((size_t)n <= h) {
            st->hdr += (uint32_t)n;
        } else {
            st->hdr = sizeof st->h;
            st->done += (uint64_t)n - h;
        }
        st->complete = st->hdr == sizeof st->h && st->done == o->len;
        if (visit >= VISIT_BYTES)
            return 1;
    }
    return progressed;
}

static int do_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                   const frame_hdr *fp, int fd)
{
    int progressed = 0;
    uint64_t visit = 0;
    size_t es = weft_dtype_size((weft_dtype)fp->dtype);
    char *stage = NULL;
    if (o->kind == SOP_RECV_REDUCE) {
        if (!c->stage[o->peer] && !(c->stage[o->peer] = malloc(STAGE_BYTES)))
            return comm_fail(c, WEFT_ENOMEM, "out of memory for a receive buffer");
        stage = c->stage[o->peer];
    }
    while (!st->complete && visit < VISIT_BYTES) {
        char *to;
        size_t want;
        if (st->hdr < sizeof st->h) {
            to = (char *)&st->h + st->hdr;
            want = sizeof st->h - st->hdr;
        } else if (stage) {
            uint64_t left = o->len - st->done - st->partial;
            to = stage + st->partial;
            want = STAGE_BYTES - st->partial;
            if (left < want)
                want = (size_t)left;
        } else {
            uint64_t left = o->len - st->done;
            to = bufs[o->buf] + o->off + st->done;
            want = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
        }
        ssize_t n = recv(fd, to, want, MSG_DONTWAIT);
        if (n == 0)
            return exec_fail_peer(c, o->peer, fp, "closed");
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return progressed;
            if (errno == ECONNRESET)
                return exec_fail_peer(c, o->peer, fp, "was reset");
            return comm_fail(c, WEFT_ESYS, "receive from rank %d: %s", o->peer,
                             strerror(errno));
        }
        progressed = 1;
        visit += (uint64_t)n;
        if (st->hdr < sizeof st->h) {
            st->hdr += (uint32_t)n;
            if (st->hdr == sizeof st->h) {
                int rc = exec_hint_take(c, o->peer, &st->h);
                if (rc == 1) { /* no message: the next header is */
                    st->hdr = 0;
                    continue;
                }
                if (rc == 0)
                    rc = exec_check_header(c, o, st, fp);
                if (rc)
                    return rc;
            }
        } else if (stage) {
            size_t have = st->partial + (size_t)n, nel = have / es, used = nel * es;
            int rc = reduce_apply(bufs[o->buf] + o->off + st->done,
                                  bufs[o->src_buf] + o->src_off + st->done, stage, nel,
                                  (weft_dtype)fp->dtype, (weft_op)fp->op);
            if (rc)
                return comm_fail(c, rc, "bad reduction");
            st->done += used;
            st->partial = (uint32_t)(have - used);
            if (st->partial)
                memmove(stage, stage + used, st->partial);
        } else {
            st->done += (uint64_t)n;
        }
        st->complete = st->hdr == sizeof st->h && st->done == o->len;
    }
    return progressed;
}

static int timed_out(weft_comm *c, const sched_op *ops, const opstate *st, uint32_t b,
                     uint32_t e, const frame_hdr *fp)
{
    char d[160], who[256], why[200];
    int32_t wait[FLIGHT_WAIT_MAX];
    int nw = 0;
    size_t w = 0;
    who[0] = 0;
    for (uint32_t i = b; i < e; i++) {
        if (st[i - b].complete || ops[i].kind == SOP_COPY || ops[i].kind == SOP_REDUCE)
            continue;
        if (w < sizeof who - 16)
            w += (size_t)snprintf(who + w, sizeof who - w, "%s%s %d", w ? ", " : "",
                                  ops[i].kind == SOP_SEND ? "to" : "from", ops[i].peer);
        if (nw < FLIGHT_WAIT_MAX)
            wait[nw++] = ops[i].kind == SOP_SEND ? -ops[i].peer - 1 : ops[i].peer;
    }
    for (uint32_t i = b; i < e && c->fail_peer < 0; i++)
        if (!st[i - b].complete && ops[i].kind != SOP_COPY && ops[i].kind != SOP_REDUCE)
            c->fail_peer = ops[i].peer;
    exec_describe(fp, d, sizeof d);
    /* the ranks this one waits on may only wait themselves: name the one
     * they all wait behind */
    int culprit = live_blame(c, wait, nw, why, sizeof why);
    if (culprit >= 0) {
        c->fail_peer = culprit;
        return comm_fail(c, WEFT_ETIMEDOUT,
                         "%s: rank %d timed out after %.0f s in %s waiting on ranks: %s", why,
                         c->rank, c->timeout_s, d, who);
    }
    return comm_fail(c, WEFT_ETIMEDOUT,
                     "rank %d timed out after %.0f s in %s waiting on ranks: %s", c->rank,
                     c->timeout_s, d, who);
}

/* A peer in another call may have sent this rank a message it will never
 * take, whose header then waits unread at the head of their connection.
 * A rank that has waited STRAY_AFTER_S peeks (never consuming) at every
 * TCP connection on which this round has no message under way: a header
 * of this operation's number that names another call is a mismatch. Root
 * and op are left out: a call's sub-steps vary them (direct's). */
#define STRAY_AFTER_S 0.05
#define RECHECK_S 0.2 /* a waiting rank looks again at least this often */

static int stray_mismatch(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                          const opstate *st, const frame_hdr *fp)
{
    for (int q = 0; q < c->size; q++) {
        int fd = c->net.in_fd[q], busy = 0, rc;
        if (exec_ofi_pair(c, q)) {
            rc = exec_ofi_stray(c, s, b, e, st, fp, q);
            if (rc)
                return rc;
            continue;
        }
        if (q == c->rank || fd < 0)
            continue;
        for (uint32_t i = b; i < e && !busy; i++)
            busy = s->ops[i].peer == q && s->ops[i].kind != SOP_SEND && st[i - b].hdr &&
                   !st[i - b].complete;
        /* without shared memory a same-host pair starts with a hello, which
         * may be all that stands before a hint */
        if (exec_same_host(c, q) && !busy &&
            (rc = exec_shm_hello_tcp(c, q, fd, 0, fp)) != 1) {
            if (rc < 0)
                return rc;
            continue; /* rings: the call board's; a hello not all here yet */
        }
        frame_hdr h;
        const char *why;
        if (busy || recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != (ssize_t)sizeof h ||
            frame_decode(&h, sizeof h, &h, &why))
            continue;
        if (h.flags & FRAME_HINT) {
            if ((rc = exec_hint_check(c, q, &h)))
                return rc;
            /* the same call, or one this rank cannot judge: whole and
             * between messages, so take it off the stream */
            (void)!recv(fd, &h, sizeof h, MSG_DONTWAIT);
            continue;
        }
        if (h.seq != fp->seq || h.kind == WEFT_COLL_SEND)
            continue;
        if (h.kind != fp->kind || h.count != fp->count || h.dtype != fp->dtype ||
            h.algo != fp->algo || h.flags != fp->flags)
            return callboard_mismatch(c, q, &h, fp);
    }
    return 0;
}

/* Tell every peer this round waits to hear from that this rank waits (a
 * peer that waits to hear from this one too is then in another call).
 * Not while a message to it is half out: a hint goes between messages. */
static int send_hints(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                      const opstate *st)
{
    const frame_hdr *call = live_past(c, c->seq);
    if (!call)
        return 0;
    for (uint32_t i = b; i < e; i++) {
        const sched_op *o = &s->ops[i];
        int q = o->peer, writing = 0, rc;
        if (st[i - b].complete || (o->kind != SOP_RECV && o->kind != SOP_RECV_REDUCE))
            continue;
        for (uint32_t k = b; k < e && !writing; k++)
            writing = s->ops[k].peer == q && s->ops[k].kind == SOP_SEND && st[k - b].hdr &&
                      !st[k - b].complete;
        if (!writing && (rc = exec_hint_send(c, q, call)))
            return rc;
    }
    return 0;
}

/* One round in progress: what its parts share. */
typedef struct {
    weft_comm *c;
    const weft_sched *s;
    uint32_t b, e;            /* its ops: s->ops[b..e) */
    char **bufs;
    const frame_hdr *fp;
    opstate *st;              /* per op */
    char *busy;               /* per peer and direction: an op visited this sweep */
    struct pollfd *pf;
    int *shw;                 /* ops that wait on rings */
    double last;              /* the last progress */
    double next_probe;        /* when to look for peers that never connected */
    int32_t wait[FLIGHT_WAIT_MAX];
    int nw, nsh, nofi;        /* ranks waited on, ring waits, libfabric waits */
    int npf, ipend, npend;    /* the poll set; its pending connections */
    int ilfd, iwatch, nspin;  /* the listener's and the watch's entries; what the spin polls */
} round_ctx;

/* The round's local ops run; its network ops made ready to move. */
static int round_start(round_ctx *x)
{
    int rc;
    for (uint32_t i = x->b; i < x->e; i++) {
        const sched_op *o = &x->s->ops[i];
        opstate *st = &x->st[i - x->b];
        memset(st, 0, sizeof *st);
        if (o->kind == SOP_COPY || o->kind == SOP_REDUCE) {
            if ((rc = local_op(x->c, o, x->bufs, x->fp)))
                return rc;
            st->complete = 1;
        } else {
            st->h = *x->fp;
            st->h.len = o->len;
            st->wfd = -1;
        }
    }
    return 0;
}

/* Every op that can move, moved (the first not complete per peer and
 * direction): the ops still pending, or a negative error. */
static int round_move(round_ctx *x, int *progressed)
{
    weft_comm *c = x->c;
    int P = c->size, pending = 0, rc;
    memset(x->busy, 0, 2 * (size_t)P);
    for (uint32_t i = x->b; i < x->e; i++) {
        const sched_op *o = &x->s->ops[i];
        opstate *st = &x->st[i - x->b];
        if (st->complete)
            continue;
        int is_send = o->kind == SOP_SEND;
        char *slot = &x->busy[(is_send ? 0 : P) + o->peer];
        pending++;
        if (*slot) /* an earlier op on this peer and direction goes first */
            continue;
        *slot = 1;
        if (is_send) {
            rc = do_send(c, o, st, x->bufs, x->fp);
        } else if (exec_ofi_pair(c, o->peer)) {
            rc = exec_ofi_recv(c, o, st, x->bufs, x->fp);
        } else {
            int fd;
            char emsg[8];
            rc = tcp_in(&c->net, o->peer, &fd, emsg, sizeof emsg);
            st->wfd = fd;
            st->wev = POLLIN;
            st->lk = NULL;
            if (rc > 0 && (!exec_same_host(c, o->peer) ||
                           (rc = exec_shm_recv(c, o, st, x->bufs, x->fp, fd)) == EXEC_NOT_SHM))
                rc = do_recv(c, o, st, x->bufs, x->fp, fd);
        }
        if (rc < 0)
            return rc;
        *progressed |= rc;
        pending -= st->complete;
    }
    return pending;
}

/* What to wait on: the sockets and rings of the ops that wait, pending
 * connections, the listener, the abort pipe, the watch and libfabric. */
static void round_poll_set(round_ctx *x)
{
    weft_comm *c = x->c;
    int P = c->size;
    x->nw = x->nsh = x->nofi = x->npf = 0;
    memset(x->busy, 0, 2 * (size_t)P);
    for (uint32_t i = x->b; i < x->e; i++) {
        const sched_op *o = &x->s->ops[i];
        opstate *st = &x->st[i - x->b];
        if (st->complete)
            continue;
        int is_send = o->kind == SOP_SEND;
        char *slot = &x->busy[(is_send ? 0 : P) + o->peer];
        if (*slot)
            continue;
        *slot = 1;
        if (x->nw < FLIGHT_WAIT_MAX)
            x->wait[x->nw++] = is_send ? -o->peer - 1 : o->peer;
        x->nofi += st->ofi;
        if (st->wfd >= 0 && !st->ofi) {
            if (st->lk) {
                x->shw[x->nsh++] = (int)(i - x->b);
                st->pfi = x->npf;
            }
            x->pf[x->npf++] = (struct pollfd){ .fd = st->wfd, .events = st->wev };
        }
    }
    if (c->cur)
        flight_waiting(c->cur, x->wait, x->nw);
    x->ipend = x->npf;
    x->npend = tcp_pending(&c->net, x->pf + x->npf, PEND_MAX);
    x->npf += x->npend;
    x->ilfd = x->npf;
    x->iwatch = -1;
    x->pf[x->npf++] = (struct pollfd){ .fd = c->net.lfd, .events = POLLIN };
    x->pf[x->npf++] = (struct pollfd){ .fd = c->abort_pipe[0], .events = POLLIN };
    if (comm_watch_fd(c) >= 0) {
        x->iwatch = x->npf;
        x->pf[x->npf++] = (struct pollfd){ .fd = comm_watch_fd(c), .events = POLLIN };
    }
    /* libfabric's fd last, and only for the blocking poll: the spin
     * reads the queue instead (the fd stays readable from the last
     * completion until ofi_may_sleep rearms it, a costly call) */
    x->nspin = x->npf;
    if (x->nofi && ofi_wait_fd(c->ofi) >= 0)
        x->pf[x->npf++] = (struct pollfd){ .fd = ofi_wait_fd(c->ofi), .events = POLLIN };
}

/* A message is usually imminent: poll without sleeping, yielding the core
 * to any rank that can use it, for up to spin_s before blocking; waking a
 * blocked process costs tens of microseconds on a VM. Rings are looked at
 * first on every turn; when only rings are awaited, the sockets (abort,
 * notices, new connections) on the first and every 16th, so that
 * connections still get accepted (and strangers dropped) while rings keep
 * a rank busy. A rank with a core of its own looks at its rings a few
 * times before each system call: the message it waits for is usually a
 * cache line away, and poll and sched_yield cost 0.4 and 0.5 us each on
 * this guest, which a single-copy call pays at each of its two waits.
 * Returns poll's answer; *moved: a ring or libfabric can move. */
#define EXEC_LOOKS 32
static int round_spin(round_ctx *x, int *moved)
{
    weft_comm *c = x->c;
    int n = 0, nsock = x->nspin - x->nsh;
    if (c->spin_s <= 0 || !exec_may_spin(c->spin_yields))
        return 0;
    /* a core of its own: the rings first, EXEC_LOOKS times a turn */
    int looks = c->spin_yields == 0 ? EXEC_LOOKS : 1;
    double spin_end = clock_now() + c->spin_s;
    for (int k = 0;; k++) {
        if (x->nsh && exec_shm_look(x->st, x->shw, x->nsh, looks)) {
            *moved = 1;
            break;
        }
        if ((nsock > 2 + (x->iwatch >= 0) || !(k & 15)) &&
            (n = poll(x->pf, (nfds_t)x->nspin, 0)) != 0)
            break;
        if (x->nofi && ofi_poll(c->ofi)) {
            *moved = 1; /* an error is the op's to report on its next visit */
            break;
        }
        if (k >= c->spin_yields && clock_now() >= spin_end)
            break;
        sched_yield();
    }
    return n;
}

/* About to sleep: unless a peer of this host is in another call, which no
 * message of either may ever show; then tell the others of the wait. */
static int round_before_sleep(round_ctx *x)
{
    weft_comm *c = x->c;
    int rc;
    if ((rc = callboard_check(c)) ||
        (clock_now() >= x->last + STRAY_AFTER_S &&
         ((rc = stray_mismatch(c, x->s, x->b, x->e, x->st, x->fp)) ||
          (rc = send_hints(c, x->s, x->b, x->e, x->st)))))
        return rc;
    live_waiting(c, x->fp->seq, x->wait, x->nw, x->last);
    return 0;
}

/* Declare every awaited ring asleep, then look once more: a peer that
 * published before seeing the flag is caught here, one that publishes
 * after it rings the doorbell. libfabric's queue must be read until its
 * wait object is armed; a provider without one is looked at every
 * millisecond. Returns poll's answer; *moved: no sleep, something can
 * move. */
static int round_sleep(round_ctx *x, double wake, int *moved)
{
    weft_comm *c = x->c;
    int ms = clock_ms_until(wake), n = 0;
    if (x->nofi && ofi_wait_fd(c->ofi) < 0 && ms > 1)
        ms = 1;
    if (x->nofi && !ofi_may_sleep(c->ofi)) {
        *moved = 1;
    } else if (exec_shm_sleep(x->st, x->shw, x->nsh)) {
        n = poll(x->pf, (nfds_t)x->npf, ms);
        exec_shm_wake(x->st, x->shw, x->nsh);
    } else {
        *moved = 1;
    }
    return n;
}

/* A peer this rank waits for but that never connected may be dead, and
 * then nobody else may ever notice; over libfabric there is no connection
 * to end, so every awaited peer is looked at, sends too. */
static int round_probe(round_ctx *x)
{
    weft_comm *c = x->c;
    for (uint32_t i = x->b; i < x->e; i++) {
        const sched_op *o = &x->s->ops[i];
        int ofi = exec_ofi_pair(c, o->peer);
        if (x->st[i - x->b].complete || o->kind == SOP_COPY || o->kind == SOP_REDUCE ||
            (!ofi && (o->kind == SOP_SEND || c->net.in_fd[o->peer] >= 0)))
            continue;
        if (tcp_probe(&c->net, o->peer)) {
            char d[160];
            exec_describe(x->fp, d, sizeof d);
            c->fail_peer = o->peer;
            return comm_fail(c, WEFT_EPEER,
                             "rank %d died (nothing listens at its address %s) during %s",
                             o->peer, c->net.addr[o->peer], d);
        }
    }
    x->next_probe = clock_now() + PROBE_S;
    return 0;
}

/* After poll answered n: another rank's notice, connections that
 * finished their handshake, a new one at the listener. */
static int round_woke(round_ctx *x, int n)
{
    weft_comm *c = x->c;
    int rc;
    /* another rank's notice counts only when nothing else is ready:
     * what this rank can see for itself (a mismatched frame, a closed
     * connection) says more */
    int others = 0, ofd = x->nofi ? ofi_wait_fd(c->ofi) : -1;
    for (int k = 0; n > 0 && k < x->npf; k++) /* libfabric's wait fd says nothing of itself */
        others += k != x->iwatch && x->pf[k].revents && (ofd < 0 || x->pf[k].fd != ofd);
    if (n > 0 && !others && x->iwatch >= 0 && x->pf[x->iwatch].revents) {
        if ((rc = comm_watch_fired(c, x->fp)))
            return rc;
    }
    int ready = 0;
    for (int k = 0; n > 0 && k < x->npend; k++)
        ready |= x->pf[x->ipend + k].revents != 0;
    if ((ready || x->npend) && tcp_check_pending(&c->net) > 0)
        x->last = clock_now();
    if (n > 0 && (x->pf[x->ilfd].revents & POLLIN)) {
        char emsg[200];
        if ((rc = tcp_accept_one(&c->net, emsg, sizeof emsg)) < 0)
            return comm_fail(c, rc, "accepting a connection: %s", emsg);
        if (rc > 0) /* a member arrived (a liveness probe is no progress) */
            x->last = clock_now();
    }
    return 0;
}

static int run_round(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                     char **bufs, const frame_hdr *fp, opstate *st, char *busy,
                     struct pollfd *pf, int *shw)
{
    round_ctx x = { .c = c, .s = s, .b = b, .e = e, .bufs = bufs, .fp = fp, .st = st,
                    .busy = busy, .pf = pf, .shw = shw };
    int rc;
    x.last = clock_now();
    x.next_probe = x.last + PROBE_S;
    if ((rc = round_start(&x)))
        return rc;
    for (;;) {
        int progressed = 0, moved = 0, n;
        if (atomic_load(&c->aborted))
            return comm_fail(c, WEFT_EABORTED, "communicator aborted");
        int pending = round_move(&x, &progressed);
        if (pending <= 0)
            return pending; /* done, or an error */
        if (progressed) {
            x.last = clock_now();
            continue;
        }
        /* Nothing can move: sleep until a socket is ready, a connection
         * arrives, another rank reports a failure or this one is aborted. */
        round_poll_set(&x);
        double wake = x.last + c->timeout_s < x.next_probe ? x.last + c->timeout_s
                                                           : x.next_probe;
        if (wake > clock_now() + RECHECK_S)
            wake = clock_now() + RECHECK_S; /* for a peer in another call */
        n = round_spin(&x, &moved);
        if (!moved && n == 0 && (rc = round_before_sleep(&x)))
            return rc;
        if (!moved && n == 0)
            n = round_sleep(&x, wake, &moved);
        if (n > 0)
            exec_shm_drain(st, shw, x.nsh, pf);
        /* after a real wake-up the check runs the provider's connection
         * events too (rxm's trywait reads its EQ, which a queue read
         * looks at only now and then) */
        if (n > 0 && x.nofi)
            ofi_may_sleep(c->ofi);
        if (moved) {
            if (clock_now() >= x.last + c->timeout_s)
                return timed_out(c, s->ops, st, b, e, fp);
            continue;
        }
        if (n < 0 && errno != EINTR)
            return comm_fail(c, WEFT_ESYS, "poll: %s", strerror(errno));
        if (n == 0 && clock_now() >= x.last + c->timeout_s)
            return timed_out(c, s->ops, st, b, e, fp);
        if (clock_now() >= x.next_probe && (rc = round_probe(&x)))
            return rc;
        if (atomic_load(&c->aborted))
            return comm_fail(c, WEFT_EABORTED, "communicator aborted");
        if ((rc = round_woke(&x, n)))
            return rc;
    }
}

int exec_run(weft_comm *c, const weft_sched *s, char *bufs[SB_COUNT], const frame_hdr *fp)
{
    uint32_t maxops = 0, b = 0;
    int rc = 0;
    for (uint32_t r = 0; r < s->nrounds; r++) {
        uint32_t n = s->round_end[r] - (r ? s->round_end[r - 1] : 0);
        if (n > maxops)
            maxops = n;
    }
    c->fail_peer = -1;
    if (!maxops)
        return 0;
    comm_spin_yields(c);
    opstate *st = malloc(maxops * sizeof *st);
    char *busy = malloc(2 * (size_t)c->size);
    struct pollfd *pf = malloc((2 * (size_t)maxops + 3 + PEND_MAX) * sizeof *pf);
    int *shw = malloc(maxops * sizeof *shw);
    if (!st || !busy || !pf || !shw) {
        rc = comm_fail(c, WEFT_ENOMEM, "out of memory running a schedule");
        goto out;
    }
    for (uint32_t r = 0; r < s->nrounds && !rc; r++) {
        rc = run_round(c, s, b, s->round_end[r], bufs, fp, st, busy, pf, shw);
        b = s->round_end[r];
    }
out:
    free(st);
    free(busy);
    free(pf);
    free(shw);
    return rc;
}
