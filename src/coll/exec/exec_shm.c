/* The executor's shared-memory half: messages between ranks on one host
 * go through a transport/shm.h ring per ordered pair, announced by a hello
 * on the pair's TCP connection, which afterwards carries only doorbells
 * (and, by its end, a peer's death). Which pairs use a ring is the
 * sender's decision, told in the hello; the receiver follows, so ranks
 * need not agree on WEFT_SHM. */
#include "coll/exec/exec_shm.h"

#include "coll/exec/exec_check.h"

#include "coll/reduce.h"
#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SHM_PIECE (128u << 10) /* published at a time, so the reader can start */
#define CMA_STAGE (256u << 10) /* read from a peer at a time to reduce, so it stays in cache */

/* A payload refused for single copy follows the descriptor, still 8-byte
 * aligned. */
_Static_assert((sizeof(frame_hdr) + sizeof(shm_cma_desc)) % 8 == 0, "descriptor keeps alignment");

int exec_same_host(const weft_comm *c, int peer)
{
    return peer != c->rank && c->host[peer] == c->host[c->rank];
}

static shm_link *link_of(weft_comm *c, int peer, int out)
{
    shm_link **l = out ? &c->shm_out : &c->shm_in;
    if (!*l && !(*l = calloc((size_t)c->size, sizeof **l)))
        return NULL;
    return &(*l)[peer];
}

/* A doorbell that cannot be rung is no error: the peer then is gone, and
 * this rank learns so from the end of stream. */
static void doorbell(int fd)
{
    char b = 1;
    while (send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

static void drain_doorbell(shm_link *lk, int fd)
{
    char b[64];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            lk->closed = 1;
        return;
    }
}

/* 1: the hello is out (lk->state says which way the pair goes); 0: wait
 * for the socket to take it; negative: error. */
static int shm_hello_send(weft_comm *c, int peer, shm_link *lk, int fd, const frame_hdr *fp)
{
    if (lk->state == SHM_LINK_NEW) {
        char e[300];
        lk->state = SHM_LINK_HELLO;
        if (!c->shm_on ||
            shm_ring_create(&lk->ring, c->id, c->rank, peer,
                            shm_ring_fit(c->shm_bytes, c->host, c->size, c->rank), &lk->hello,
                            e, sizeof e)) {
            if (c->shm_on)
                log_sub(c->loglevel, LOG_WARN, LOG_SUB_SHM, c->rank,
                        "shared memory to rank %d unavailable (%s): using TCP", peer, e);
            memset(&lk->hello, 0, sizeof lk->hello);
            lk->hello.magic = SHM_HELLO_MAGIC;
            lk->hello.version = SHM_VERSION;
            lk->hello.mode = SHM_MODE_TCP;
        } else {
            log_sub(c->loglevel, LOG_DEBUG, LOG_SUB_SHM, c->rank, "ring to rank %d: %s, %llu bytes",
                    peer, lk->ring.name, (unsigned long long)lk->ring.bytes);
        }
    }
    while (lk->hello_done < sizeof lk->hello) {
        ssize_t n = send(fd, (char *)&lk->hello + lk->hello_done,
                         sizeof lk->hello - lk->hello_done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            shm_ring_unlink(&lk->ring); /* nobody will map it */
            return exec_fail_peer(c, peer, fp, "was reset");
        }
        lk->hello_done += (uint32_t)n;
    }
    lk->state = lk->hello.mode == SHM_MODE_RING ? SHM_LINK_RING : SHM_LINK_TCP;
    lk->cma_off = !c->params.shm_cma;
    lk->cma_all = c->params.shm_cma == 2;
    return 1;
}

static int shm_hello_recv(weft_comm *c, int peer, shm_link *lk, int fd, const frame_hdr *fp)
{
    const char *why;
    char e[300];
    lk->state = SHM_LINK_HELLO;
    while (lk->hello_done < sizeof lk->hello) {
        ssize_t n = recv(fd, (char *)&lk->hello + lk->hello_done,
                         sizeof lk->hello - lk->hello_done, MSG_DONTWAIT);
        if (n == 0)
            return exec_fail_peer(c, peer, fp, "closed");
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return exec_fail_peer(c, peer, fp, "was reset");
        }
        lk->hello_done += (uint32_t)n;
    }
    c->fail_peer = peer;
    if (shm_hello_check(&lk->hello, &why))
        return comm_fail(c, WEFT_EPROTO, "garbage from rank %d: %s", peer, why);
    if (lk->hello.mode == SHM_MODE_RING) {
        int rc = shm_ring_attach(&lk->ring, &lk->hello, e, sizeof e);
        if (rc)
            return comm_fail(c, rc, "cannot map rank %d's shared memory: %s (WEFT_SHM=0 "
                                    "on every rank avoids it)", peer, e);
    }
    c->fail_peer = -1;
    lk->state = lk->hello.mode == SHM_MODE_RING ? SHM_LINK_RING : SHM_LINK_TCP;
    lk->cma_off = !c->params.shm_cma;
    return 1;
}

/* A single copy announced by st->cd: has the receiver read it? 1 when the
 * op is complete, 0 when it must go on (through the ring, if refused) or
 * wait. */
static int cma_settle(weft_comm *c, const sched_op *o, opstate *st, shm_link *lk)
{
    int refused;
    if (!shm_cma_acked(&lk->ring, &refused))
        return 0;
    st->cma_wait = 0;
    if (!refused) {
        st->done = o->len;
        return 1;
    }
    if (!lk->cma_off)
        log_sub(c->loglevel, LOG_WARN, LOG_SUB_SHM, c->rank,
                "rank %d cannot read this rank's memory: large messages to it are copied "
                "through the ring", o->peer);
    lk->cma_off = 1;
    st->cd.cma = 0; /* the payload follows the descriptor */
    return 0;
}

static int ring_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                     const frame_hdr *fp, shm_link *lk, int fd)
{
    int progressed = 0, bell = 0;
    uint64_t visit = 0, unpublished = 0;
    int big = o->len >= SHM_CMA_MIN;
    if (big && !st->cdone && !st->hdr) {
        /* Not where the receiver may reduce: out of the ring (in cache)
         * that reads no more memory than out of a copy, while a single
         * copy leaves the sender idle until it is read, and measured
         * slower (docs/BENCHMARKS.md). */
        st->cd.cma = !lk->cma_off && (lk->cma_all || (fp->kind != WEFT_COLL_ALLREDUCE &&
                                                      fp->kind != WEFT_COLL_REDUCE &&
                                                      fp->kind != WEFT_COLL_REDUCE_SCATTER));
        st->cd.pid = (int32_t)getpid();
        st->cd.addr = (uint64_t)(uintptr_t)(bufs[o->buf] + o->off);
        if (!lk->ring.cookie)
            lk->ring.cookie = ((uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)lk ^
                               (uint64_t)(clock_now() * 1e9)) | 1;
        st->cd.cookie = lk->ring.cookie;
        st->cd.cookie_addr = (uint64_t)(uintptr_t)&lk->ring.cookie;
    }
    if (st->cma_wait) {
        if (cma_settle(c, o, st, lk)) {
            st->complete = 1;
            return 1;
        }
        progressed = !st->cma_wait;
    }
    while (!st->complete && !st->cma_wait && visit < VISIT_BYTES) {
        const char *from;
        size_t want, n;
        if (st->hdr < sizeof st->h) {
            from = (const char *)&st->h + st->hdr;
            want = sizeof st->h - st->hdr;
        } else if (big && st->cdone < sizeof st->cd) {
            from = (const char *)&st->cd + st->cdone;
            want = sizeof st->cd - st->cdone;
        } else {
            uint64_t left = o->len - st->done;
            from = bufs[o->buf] + o->off + st->done;
            want = left < SHM_PIECE ? (size_t)left : SHM_PIECE;
        }
        if (!(n = shm_ring_put(&lk->ring, from, want)))
            break;
        progressed = 1;
        visit += n;
        if (st->hdr < sizeof st->h)
            st->hdr += (uint32_t)n;
        else if (big && st->cdone < sizeof st->cd)
            st->cdone += (uint32_t)n;
        else
            st->done += n;
        if (big && st->cd.cma && st->cdone == sizeof st->cd) {
            lk->ring.cma_sent++;
            st->cma_wait = 1;
        }
        st->complete = st->hdr == sizeof st->h && st->done == o->len &&
                       (!big || st->cdone == sizeof st->cd);
        if ((unpublished += n) >= SHM_PIECE) {
            bell |= shm_ring_flush(&lk->ring);
            unpublished = 0;
        }
    }
    if (st->complete || st->cma_wait)
        shm_ring_end_msg(&lk->ring);
    if (unpublished)
        bell |= shm_ring_flush(&lk->ring);
    if (bell)
        doorbell(fd);
    if (st->cma_wait && cma_settle(c, o, st, lk)) {
        st->complete = 1;
        return 1;
    }
    if (!progressed && lk->closed)
        return exec_fail_peer(c, o->peer, fp, "closed");
    if (!st->complete) {
        st->lk = lk;
        st->writer = st->cma_wait ? 2 : 1;
        st->wfd = fd;
        st->wev = POLLIN; /* the receiver's doorbell, or its end */
    }
    return progressed;
}

/* Read (or reduce) the payload that st->cd points at in the sender. 1:
 * progress, 0: refused (the payload follows in the ring), negative: error. */
static int cma_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                    const frame_hdr *fp, shm_link *lk, int fd, size_t es)
{
    const char *why = NULL;
    long k = 0;
    uint64_t visit = 0;
    if (lk->cma_off) {
        why = "";
    } else if (!lk->cma_checked) {
        uint64_t v = 0;
        k = shm_cma_read(st->cd.pid, &v, st->cd.cookie_addr, sizeof v);
        if (k == (long)sizeof v && v == st->cd.cookie)
            lk->cma_checked = 1;
        else
            why = k < 0 ? strerror((int)-k) : "another process answers to its pid";
    }
    if (!why && o->kind == SOP_RECV_REDUCE && !lk->stage && !(lk->stage = malloc(CMA_STAGE)))
        why = "no memory for staging";
    if (why) {
        if (*why)
            log_sub(c->loglevel, LOG_WARN, LOG_SUB_SHM, c->rank,
                    "cannot read rank %d's memory (%s): its large messages come through "
                    "the ring", o->peer, why);
        lk->cma_off = 1;
        st->cd.cma = 0;
        if (shm_cma_ack(&lk->ring, 1))
            doorbell(fd);
        return 0;
    }
    while (st->done < o->len && visit < VISIT_BYTES) {
        uint64_t left = o->len - st->done;
        if (o->kind == SOP_RECV_REDUCE) {
            size_t want = left < CMA_STAGE ? (size_t)left : CMA_STAGE;
            k = shm_cma_read(st->cd.pid, lk->stage, st->cd.addr + st->done, want);
            if (k > 0 && (k -= k % (long)es) > 0) {
                int rc = reduce_apply(bufs[o->buf] + o->off + st->done,
                                      bufs[o->src_buf] + o->src_off + st->done, lk->stage,
                                      (size_t)k / es, (weft_dtype)fp->dtype, (weft_op)fp->op);
                if (rc)
                    return comm_fail(c, rc, "bad reduction");
            }
        } else {
            size_t want = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
            k = shm_cma_read(st->cd.pid, bufs[o->buf] + o->off + st->done, st->cd.addr + st->done,
                             want);
        }
        if (k == -ESRCH || (k <= 0 && lk->closed))
            return exec_fail_peer(c, o->peer, fp, "closed");
        if (k <= 0) {
            c->fail_peer = o->peer;
            return comm_fail(c, WEFT_ESYS, "reading rank %d's memory: %s", o->peer,
                             k ? strerror((int)-k) : "nothing read");
        }
        st->done += (uint64_t)k;
        visit += (uint64_t)k;
    }
    if (st->done == o->len && shm_cma_ack(&lk->ring, 0))
        doorbell(fd);
    return 1;
}

static int ring_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                     const frame_hdr *fp, shm_link *lk, int fd)
{
    int progressed = 0, bell = 0, ring = 0, rc;
    uint64_t visit = 0;
    size_t es = weft_dtype_size((weft_dtype)fp->dtype);
    int big = o->len >= SHM_CMA_MIN;
    while (!st->complete && visit < VISIT_BYTES) {
        size_t n;
        uint64_t left = o->len - st->done;
        size_t want = left < SHM_PIECE ? (size_t)left : SHM_PIECE;
        if (st->hdr < sizeof st->h) {
            n = shm_ring_read(&lk->ring, (char *)&st->h + st->hdr, sizeof st->h - st->hdr,
                              &ring);
            if (!n)
                break;
            st->hdr += (uint32_t)n;
            if (st->hdr == sizeof st->h && (rc = exec_check_header(c, o, st, fp)))
                return rc;
        } else if (big && st->cdone < sizeof st->cd) {
            n = shm_ring_read(&lk->ring, (char *)&st->cd + st->cdone, sizeof st->cd - st->cdone,
                              &ring);
            if (!n)
                break;
            st->cdone += (uint32_t)n;
            if (st->cdone == sizeof st->cd && st->cd.cma > 1)
                return comm_fail(c, WEFT_EPROTO, "garbage from rank %d: bad large-message "
                                 "descriptor", o->peer);
        } else if (big && st->cd.cma) {
            bell |= ring;
            ring = 0;
            if ((rc = cma_recv(c, o, st, bufs, fp, lk, fd, es)) < 0)
                return rc;
            /* a refusal moves on to the payload in the ring; a read ends the visit */
            n = st->cd.cma ? VISIT_BYTES : 1;
        } else if (o->kind == SOP_RECV_REDUCE) {
            const char *p;
            n = shm_ring_peek(&lk->ring, &p, want);
            n -= n % es;
            if (!n)
                break;
            rc = reduce_apply(bufs[o->buf] + o->off + st->done,
                              bufs[o->src_buf] + o->src_off + st->done, p, n / es,
                              (weft_dtype)fp->dtype, (weft_op)fp->op);
            if (rc)
                return comm_fail(c, rc, "bad reduction");
            shm_ring_consume(&lk->ring, n, &ring);
            st->done += n;
        } else {
            n = shm_ring_read(&lk->ring, bufs[o->buf] + o->off + st->done, want, &ring);
            if (!n)
                break;
            st->done += n;
        }
        bell |= ring;
        progressed = 1;
        visit += n;
        st->complete = st->hdr == sizeof st->h && st->done == o->len &&
                       (!big || st->cdone == sizeof st->cd);
    }
    bell |= ring;
    if (st->complete)
        shm_ring_end_msg_read(&lk->ring);
    if (bell)
        doorbell(fd);
    if (!progressed && lk->closed)
        return exec_fail_peer(c, o->peer, fp, "closed");
    if (!st->complete) {
        st->lk = lk;
        st->writer = 0;
        st->wfd = fd;
        st->wev = POLLIN; /* the sender's doorbell, or its end */
    }
    return progressed;
}

void exec_shm_reap(weft_comm *c, int failed)
{
    int any = 0;
    for (int p = 0; p < c->size; p++) {
        shm_link *out = c->shm_out ? &c->shm_out[p] : NULL;
        int fd = c->net.out_fd ? c->net.out_fd[p] : -1;
        any |= exec_same_host(c, p);
        if (out && out->ring.name[0] && fd >= 0) {
            drain_doorbell(out, fd); /* to the end of stream, if the receiver is gone */
            if (out->closed)
                shm_ring_unlink(&out->ring);
        }
    }
    if (failed && any)
        shm_unlink_to(c->id, c->rank);
}

int exec_shm_hello_tcp(weft_comm *c, int peer, int fd, int out, const frame_hdr *fp)
{
    shm_link *lk = link_of(c, peer, out);
    if (!lk)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for shared-memory state");
    if (lk->state == SHM_LINK_TCP)
        return 1;
    if (lk->state == SHM_LINK_RING || c->shm_on)
        return 0; /* a ring would be made or mapped: the ops' to do */
    char b;
    if (!out && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
        return 0; /* nothing yet, or an end that the ops report */
    int rc = out ? shm_hello_send(c, peer, lk, fd, fp) : shm_hello_recv(c, peer, lk, fd, fp);
    return rc <= 0 ? rc : lk->state == SHM_LINK_TCP;
}

int exec_shm_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd)
{
    int progressed = 0, rc;
    shm_link *lk = link_of(c, o->peer, 1);
    if (!lk)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for shared-memory state");
    if (lk->state == SHM_LINK_NEW || lk->state == SHM_LINK_HELLO) {
        if ((rc = shm_hello_send(c, o->peer, lk, fd, fp)) <= 0)
            return rc; /* the caller waits for POLLOUT */
        progressed = 1;
    }
    if (lk->state != SHM_LINK_RING)
        return EXEC_NOT_SHM;
    rc = ring_send(c, o, st, bufs, fp, lk, fd);
    return rc < 0 ? rc : rc | progressed;
}

int exec_shm_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd)
{
    int progressed = 0, rc;
    shm_link *lk = link_of(c, o->peer, 0);
    if (!lk)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for shared-memory state");
    if (lk->state == SHM_LINK_NEW || lk->state == SHM_LINK_HELLO) {
        if ((rc = shm_hello_recv(c, o->peer, lk, fd, fp)) <= 0)
            return rc;
        progressed = 1;
    }
    if (lk->state != SHM_LINK_RING)
        return EXEC_NOT_SHM;
    rc = ring_recv(c, o, st, bufs, fp, lk, fd);
    return rc < 0 ? rc : rc | progressed;
}

int exec_shm_ready(const opstate *st, const int *shw, int nsh)
{
    for (int k = 0; k < nsh; k++) {
        const opstate *x = &st[shw[k]];
        if (shm_ring_can_move(&x->lk->ring, x->writer))
            return 1;
    }
    return 0;
}

/* between looks: the core's sibling thread, if any, gets the pipeline */
#if defined(__x86_64__) || defined(__i386__)
#define LOOK_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define LOOK_PAUSE() __asm__ __volatile__("yield")
#else
#define LOOK_PAUSE() ((void)0)
#endif

int exec_shm_look(const opstate *st, const int *shw, int nsh, int looks)
{
    for (int i = 0; i < looks; i++) {
        if (exec_shm_ready(st, shw, nsh))
            return 1;
        if (i + 1 < looks)
            LOOK_PAUSE();
    }
    return 0;
}

int exec_shm_sleep(opstate *st, const int *shw, int nsh)
{
    int k = 0;
    while (k < nsh && shm_ring_sleep(&st[shw[k]].lk->ring, st[shw[k]].writer))
        k++;
    if (k == nsh)
        return 1;
    while (k-- > 0)
        shm_ring_wake(&st[shw[k]].lk->ring, st[shw[k]].writer);
    return 0;
}

void exec_shm_wake(opstate *st, const int *shw, int nsh)
{
    for (int k = 0; k < nsh; k++)
        shm_ring_wake(&st[shw[k]].lk->ring, st[shw[k]].writer);
}

void exec_shm_drain(opstate *st, const int *shw, int nsh, const void *pfv)
{
    const struct pollfd *pf = pfv;
    for (int k = 0; k < nsh; k++)
        if (pf[st[shw[k]].pfi].revents)
            drain_doorbell(st[shw[k]].lk, pf[st[shw[k]].pfi].fd);
}
