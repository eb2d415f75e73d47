/* Point-to-point messages between ranks of one host (coll/exec/p2p_int.h):
 * a ring per ordered pair of the engine's own (named with its salted id,
 * so it never meets the collectives' rings), and with WEFT_SHM_CMA=2
 * single copy (process_vm_readv) from SHM_CMA_MIN bytes, as
 * transport/shm.h lays them out. Single copy is not the default here: on
 * the paravirtualised 2-core EPYC the benchmarks run on, process_vm_readv
 * itself moved 14.9 GB/s at 1 MiB and 7.6 at 16 MiB (a third of memcpy),
 * where the ring's two copies, under way at once, move 22-24 GB/s; a
 * blocking sender waiting past its spin for the acknowledgement also
 * pays a doorbell and a wake-up (1 MiB ping-pongs: 4.3 GB/s single copy,
 * 22.9 by the ring). A message in the ring is its frame header, for single copy the
 * descriptor, then (unless the payload stays in the sender) the payload,
 * the next starting 8-byte aligned. The pair's connection carries the
 * hello, then only doorbells and, at its end, the news that the peer is
 * gone. A payload that lies in one of the sender's weft_mem_alloc
 * regions goes by one copy whatever WEFT_SHM_CMA says: its descriptor
 * names the region (p2p_reg.h) and the receiver copies out of its own
 * mapping of it at memcpy's rate, then acknowledges as for
 * process_vm_readv. Runs under the engine's drive lock. */
#include "coll/exec/p2p.h"

#include "coll/exec/p2p_int.h"
#include "coll/exec/p2p_reg.h"

#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PIECE (128u << 10) /* published at a time, so the reader can start */
/* A caller waiting for a single copy's acknowledgement looks (yielding)
 * for as long as the copy should take at this rate before it sleeps:
 * half the slowest copy measured here (16 MiB out of a registered region,
 * 7-9 GB/s on the 2-vCPU EPYC). A sleeper woken by the doorbell paid
 * ~120 us on that guest, as much as the 4 MiB copy itself (4 MiB
 * ping-pongs: 16-19 GB/s with WEFT_SPIN_US's 50 us, 33-34 GB/s with 400). */
#define COPY_NS_PER_BYTE 0.25
#define COPY_WAIT_MAX_S 0.005 /* beyond it the copy dwarfs a wake-up anyway */
#define HDR_MAX (sizeof(frame_hdr) + sizeof(shm_cma_desc))

_Static_assert(sizeof(frame_hdr) % 8 == 0 && HDR_MAX % 8 == 0, "payloads stay aligned");

int p2p_local(const p2p_engine *e, int q)
{
    return q != e->rank && !e->peer[q].ofi && e->c->host &&
           e->c->host[q] == e->c->host[e->rank];
}

int p2p_shm_tcp(const shm_link *lk) { return lk->state == SHM_LINK_TCP; }

/* A doorbell that cannot be rung is no error: the peer is gone then, and
 * the end of its stream says so. */
static void doorbell(int fd)
{
    char b = 1;
    while (send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

static void drain(shm_link *lk, int fd)
{
    char b[64];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            lk->closed = 1;
        return;
    }
}

static void died(p2p_engine *e, int q, const char *how)
{
    char why[200];
    snprintf(why, sizeof why, "rank %d died (its connection with rank %d %s)", q, e->rank, how);
    p2p_peer_gone(e, q, WEFT_EPEER, why);
}

/* Map every page of the ring now: a first touch in the middle of an
 * exchange cost its message tens of microseconds (4 KiB ping-pongs
 * averaged 84 us over their first trip round a 2 MiB ring, 2.6 us after). */
static void prefault(const shm_ring *r)
{
    const volatile char *m = (const volatile char *)r->ctl;
    for (size_t off = 0; m && off < r->map_len; off += 4096)
        (void)m[off];
}

/* 1: the hello is out (lk->state says which way the pair goes), 0: the
 * socket is full, negative: the peer is gone. */
static int hello_send(p2p_engine *e, int q, shm_link *lk, int fd)
{
    weft_comm *c = e->c;
    if (lk->state == SHM_LINK_NEW) {
        char err[300];
        lk->state = SHM_LINK_HELLO;
        if (!e->shm_on ||
            shm_ring_create(&lk->ring, c->id ^ P2P_SALT, e->rank, q,
                            shm_ring_fit(shm_ring_bytes(&c->params), c->host, c->size, e->rank),
                            &lk->hello, err, sizeof err)) {
            if (e->shm_on)
                log_sub(c->loglevel, LOG_WARN, LOG_SUB_SHM, e->rank,
                        "point-to-point: shared memory to rank %d unavailable (%s): using TCP",
                        q, err);
            memset(&lk->hello, 0, sizeof lk->hello);
            lk->hello.magic = SHM_HELLO_MAGIC;
            lk->hello.version = SHM_VERSION;
            lk->hello.mode = SHM_MODE_TCP;
        }
        prefault(&lk->ring);
        lk->ring.cookie = (uint64_t)e->pid << 32 ^ (uint64_t)(uintptr_t)lk ^
                          (uint64_t)(clock_now() * 1e9);
    }
    while (lk->hello_done < sizeof lk->hello) {
        ssize_t n = send(fd, (char *)&lk->hello + lk->hello_done,
                         sizeof lk->hello - lk->hello_done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0) {
            died(e, q, "was reset");
            return -1;
        }
        lk->hello_done += (uint32_t)n;
    }
    lk->state = lk->hello.mode == SHM_MODE_RING ? SHM_LINK_RING : SHM_LINK_TCP;
    lk->cma_off = c->params.shm_cma < 2;
    return 1;
}

static int hello_recv(p2p_engine *e, int q, shm_link *lk, int fd)
{
    const char *why;
    char err[300], msg[400];
    lk->state = SHM_LINK_HELLO;
    while (lk->hello_done < sizeof lk->hello) {
        ssize_t n = recv(fd, (char *)&lk->hello + lk->hello_done,
                         sizeof lk->hello - lk->hello_done, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0) {
            died(e, q, n == 0 ? "closed" : "was reset");
            return -1;
        }
        lk->hello_done += (uint32_t)n;
    }
    if (shm_hello_check(&lk->hello, &why)) {
        snprintf(msg, sizeof msg, "garbage from rank %d on its point-to-point stream: %s", q,
                 why);
        p2p_peer_gone(e, q, WEFT_EPROTO, msg);
        return -1;
    }
    if (lk->hello.mode == SHM_MODE_RING) {
        int rc = shm_ring_attach(&lk->ring, &lk->hello, err, sizeof err);
        if (rc) {
            snprintf(msg, sizeof msg, "cannot map rank %d's shared memory: %.300s "
                                      "(WEFT_P2P_SHM=0 on every rank avoids it)", q, err);
            p2p_peer_gone(e, q, rc, msg);
            return -1;
        }
        prefault(&lk->ring);
    }
    lk->state = lk->hello.mode == SHM_MODE_RING ? SHM_LINK_RING : SHM_LINK_TCP;
    lk->cma_off = e->c->params.shm_cma < 2;
    return 1;
}

/* Bytes of the message's head in the ring: its header, and from
 * SHM_CMA_MIN on the descriptor. */
static size_t head_len(uint64_t len)
{
    return len >= SHM_CMA_MIN ? HDR_MAX : sizeof(frame_hdr);
}

/* Put what fits of r's head (header and descriptor) in the ring. 1: all
 * of it is in. */
static int put_head(p2p_engine *e, p2p_peer *p, weft_request *r, uint64_t *visit)
{
    shm_link *lk = &p->out;
    char b[HDR_MAX];
    size_t hl = head_len(r->bytes);
    if (r->hdr == 0)
        shm_ring_end_msg(&lk->ring);
    memcpy(b, &r->h, sizeof r->h);
    p->reg_wait = 0;
    if (hl > sizeof r->h) {
        shm_cma_desc d = { .cma = !lk->cma_off, .pid = e->pid,
                           .addr = (uint64_t)(uintptr_t)r->a.send, .cookie = lk->ring.cookie,
                           .cookie_addr = (uint64_t)(uintptr_t)&lk->ring.cookie };
        /* a registered buffer goes by one copy whatever WEFT_SHM_CMA says:
         * that copy runs at memcpy's rate, not the kernel's */
        p->reg_wait = !p->reg_off && p2p_reg_find(e->reg, r->a.send, r->bytes, e->pid, &d);
        memcpy(b + sizeof r->h, &d, sizeof d);
    }
    size_t k = shm_ring_put(&lk->ring, b + r->hdr, hl - r->hdr);
    r->hdr += (uint32_t)k;
    *visit += k;
    if (r->hdr < hl)
        return 0;
    if (hl > sizeof r->h && (!lk->cma_off || p->reg_wait)) {
        lk->ring.cma_sent++;
        p->cma_wait = 1;
    }
    return 1;
}

/* A copy p's receiver offers to share with chunks left, which this side
 * may take: a waiting caller drives, and it can map the peer's regions. */
static int share_open(const p2p_engine *e, const p2p_peer *p, shm_cma_desc *d, uint64_t *len)
{
    return !p->share_off && e->caller_drives && p->out.ring.ctl &&
           shm_share_offered(&p->out.ring, d, len);
}

/* The receiver's side: every byte of the shared copy is in. */
static int share_whole(const p2p_peer *p)
{
    return p->share_mine + shm_share_copied(&p->in.ring) >= p->h.len;
}

/* The sender's side of a shared copy: where the receiver offers to share
 * the copy of r's registered payload, copy the chunks left into its
 * destination too, from this side's own memory. Only a caller waiting in
 * p2p_wait does, whose thread has nothing else to do; the engine's
 * thread would take the core from the caller's computation. A receiver's
 * region this side cannot map (its memfd refused) leaves the copy to the
 * receiver, for this pair from then on. 1: copied some. */
static int share_send(p2p_engine *e, int q, weft_request *r, int fd)
{
    p2p_peer *p = &e->peer[q];
    shm_ring *ring = &p->out.ring;
    shm_cma_desc d;
    uint64_t len, off = 0, n, mine = 0;
    char *dst = NULL, why[200];
    if (!share_open(e, p, &d, &len))
        return 0;
    if (len != r->bytes || p2p_reg_dst(e->reg, q, &d, len, &dst, why, sizeof why)) {
        log_sub(e->c->loglevel, LOG_INFO, LOG_SUB_SHM, e->rank,
                "point-to-point: rank %d's registered memory not shared (%s): it copies "
                "its messages alone", q, len != r->bytes ? "a length that differs" : why);
        p->share_off = 1;
        return 0;
    }
    while ((n = shm_share_claim(ring, len, &off)) > 0) {
        p2p_reg_copy(e->reg, dst + off, (const char *)r->a.send + off, (size_t)n, len);
        mine += n;
    }
    if (mine && shm_share_done(ring, mine))
        doorbell(fd);
    e->shared += mine;
    return mine > 0;
}

/* Move peer q's head sends into the ring; the caller publishes. 1: moved. */
static int send_ring(p2p_engine *e, int q, int fd)
{
    p2p_peer *p = &e->peer[q];
    shm_link *lk = &p->out;
    weft_request *r;
    uint64_t visit = 0, mark = 0;
    int progressed = 0;
    while ((r = p->sends.head) && visit < VISIT_BYTES) {
        p2p_started(e, r);
        if (p->cma_wait) {
            int refused = 0;
            if (!shm_cma_acked(&lk->ring, &refused) &&
                !(p->reg_wait && share_send(e, q, r, fd) && shm_cma_acked(&lk->ring, &refused)))
                break;
            p->cma_wait = 0;
            progressed = 1;
            if (!refused) {
                p2p_sent(e, q);
                continue;
            }
            /* the payload follows in the ring, and every later one's */
            if (p->reg_wait)
                p->reg_off = 1;
            else
                lk->cma_off = 1;
            p->reg_wait = 0;
        } else if (r->hdr < head_len(r->bytes)) {
            if (!put_head(e, p, r, &visit))
                break;
            progressed = 1;
            if (p->cma_wait) {
                if (shm_ring_flush(&lk->ring))
                    doorbell(fd);
                mark = visit;
                continue;
            }
        }
        while (r->moved < r->bytes) {
            uint64_t left = r->bytes - r->moved;
            size_t k = shm_ring_put(&lk->ring, (const char *)r->a.send + r->moved,
                                    left < PIECE ? (size_t)left : PIECE);
            if (!k)
                break;
            r->moved += k;
            visit += k;
            progressed = 1;
            if (visit - mark >= PIECE) { /* the reader may start on it */
                if (shm_ring_flush(&lk->ring))
                    doorbell(fd);
                mark = visit;
            }
        }
        if (r->moved < r->bytes)
            break; /* the ring is full */
        shm_ring_end_msg(&lk->ring);
        p2p_sent(e, q);
    }
    if (visit > mark && shm_ring_flush(&lk->ring))
        doorbell(fd);
    return progressed;
}

int p2p_shm_send(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    shm_link *lk = &p->out;
    char err[300];
    int fd, progressed = 0;
    int rc = tcp_out(&e->net, q, &fd, err, sizeof err);
    if (rc < 0) {
        p2p_peer_gone(e, q, rc, err);
        return 1;
    }
    p->wfd = fd;
    p->wev = POLLIN; /* its handshake, then the receiver's doorbell or end */
    if (rc == 0) {
        p->writable = 0;
        return 0;
    }
    if (lk->state != SHM_LINK_RING) {
        rc = hello_send(e, q, lk, fd);
        if (rc <= 0) {
            p->wev = POLLOUT;
            p->writable = 0;
            return rc < 0;
        }
        p->wev = POLLIN;
        if (lk->state == SHM_LINK_TCP) {
            p->writable = 1; /* send_peer goes on */
            return 1;
        }
        progressed = 1;
    }
    if (p->writable) { /* poll saw a doorbell, or the end */
        drain(lk, fd);
        p->writable = 0;
        if (lk->closed) {
            died(e, q, "closed");
            return 1;
        }
    }
    return send_ring(e, q, fd) | progressed;
}

/* The single copy of peer q's message is over (refused: say so, the
 * payload follows in the ring). 1. */
static int copy_done(p2p_engine *e, int q, int fd, int refused)
{
    p2p_peer *p = &e->peer[q];
    p->cma_rd = 0;
    if (!refused)
        p->got = p->h.len;
    if (shm_cma_ack(&p->in.ring, refused))
        doorbell(fd);
    if (!refused)
        p2p_msg_arrived(e, q);
    return 1;
}

/* Offer the sender to share the copy of p's registered payload into to:
 * only a posted receive of WEFT_P2P_SHARE bytes or more whose buffer lies
 * in a region of this side's weft_mem_alloc, where the sender can map
 * it. 1: offered. */
static int share_offer(p2p_engine *e, p2p_peer *p, char *to)
{
    shm_cma_desc d;
    if (!e->share_min || p->h.len < e->share_min || !p->into || p->got ||
        !p2p_reg_find(e->reg, to, p->h.len, e->pid, &d))
        return 0;
    shm_share_offer(&p->in.ring, &d, p->h.len);
    p->share = 1;
    p->share_mine = 0;
    return 1;
}

/* The receiver's side of a shared copy: claim chunks and copy them until
 * none is left, then wait (the engine's wait: the sender rings when it
 * is done and this side sleeps) for the chunks the sender claimed. 1:
 * moved. */
static int read_shared(p2p_engine *e, int q, int fd, char *to, const char *src)
{
    p2p_peer *p = &e->peer[q];
    uint64_t off = 0, n, visit = 0;
    while (!e->share_lazy && visit < VISIT_BYTES &&
           (n = shm_share_claim(&p->in.ring, p->h.len, &off)) > 0) {
        p2p_reg_copy(e->reg, to + off, src + off, (size_t)n, p->h.len);
        p->share_mine += n;
        visit += n;
    }
    if (!share_whole(p)) {
        /* a sender gone in the middle of its chunks never finishes them */
        if (p->in.closed)
            died(e, q, "ended");
        return visit > 0 || p->in.closed;
    }
    shm_share_end(&p->in.ring);
    p->share = 0;
    return copy_done(e, q, fd, 0);
}

/* The payload of p's message lies in a region of the sender's
 * weft_mem_alloc: copy it out of the region's mapping (or, refused, say
 * so once: it follows in the ring, and so do the pair's later ones). 1:
 * moved. */
static int read_reg(p2p_engine *e, int q, int fd)
{
    p2p_peer *p = &e->peer[q];
    const char *src = NULL;
    char why[200] = "refused before";
    uint64_t visit = 0;
    int rc = p->reg_refuse ? WEFT_ESYS
                           : p2p_reg_src(e->reg, q, &p->cd, p->h.len, &src, why, sizeof why);
    if (rc == WEFT_EPEER) {
        died(e, q, "ended");
        return 1;
    }
    if (rc) {
        if (!p->reg_refuse && !e->reg_said++)
            log_sub(e->c->loglevel, LOG_WARN, LOG_SUB_SHM, e->rank,
                    "point-to-point: cannot map rank %d's registered memory (%s): its "
                    "messages from weft_mem_alloc come through the ring", q, why);
        p->reg_refuse = 1;
        return copy_done(e, q, fd, 1);
    }
    char *to = p->into ? (char *)p->into->a.recv : p->park->buf;
    if (p->share || share_offer(e, p, to))
        return read_shared(e, q, fd, to, src);
    while (p->got < p->h.len && visit < VISIT_BYTES && !(p->park && p->park->drop)) {
        uint64_t left = p->h.len - p->got;
        size_t want = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
        p2p_reg_copy(e->reg, to + p->got, src + p->got, want, p->h.len);
        p->got += want;
        visit += want;
    }
    if (p->got == p->h.len || (p->park && p->park->drop)) {
        e->reg_parked += p->park && !p->park->drop;
        copy_done(e, q, fd, 0);
    }
    return 1;
}

/* The payload of p's message is in the sender's memory: read it (or,
 * refused, say so: it follows in the ring). 1: moved. */
static int read_cma(p2p_engine *e, int q, int fd)
{
    p2p_peer *p = &e->peer[q];
    shm_link *lk = &p->in;
    const char *why = NULL;
    char msg[200];
    uint64_t visit = 0;
    long k;
    if (p->cd.cma == P2P_REG_DESC)
        return read_reg(e, q, fd);
    if (lk->cma_off) {
        why = "";
    } else if (!lk->cma_checked) {
        uint64_t v = 0;
        k = shm_cma_read(p->cd.pid, &v, p->cd.cookie_addr, sizeof v);
        if (k == (long)sizeof v && v == p->cd.cookie)
            lk->cma_checked = 1;
        else if (k == -ESRCH)
            why = "gone";
        else
            why = k < 0 ? strerror((int)-k) : "another process answers to its pid";
    }
    if (why && !strcmp(why, "gone")) {
        died(e, q, "ended");
        return 1;
    }
    if (why) {
        if (*why && !e->cma_said++)
            log_sub(e->c->loglevel, LOG_WARN, LOG_SUB_SHM, e->rank,
                    "point-to-point: cannot read rank %d's memory (%s): large messages from "
                    "ranks of this host come through the ring", q, why);
        lk->cma_off = 1;
        return copy_done(e, q, fd, 1);
    }
    char *to = p->into ? (char *)p->into->a.recv : p->park->buf;
    while (p->got < p->h.len && visit < VISIT_BYTES && !(p->park && p->park->drop)) {
        uint64_t left = p->h.len - p->got;
        size_t want = left < VISIT_BYTES ? (size_t)left : VISIT_BYTES;
        k = shm_cma_read(p->cd.pid, to + p->got, p->cd.addr + p->got, want);
        if (k == -ESRCH || (k <= 0 && lk->closed)) {
            died(e, q, "ended");
            return 1;
        }
        if (k <= 0) {
            snprintf(msg, sizeof msg, "cannot read rank %d's message: %s", q,
                     k < 0 ? strerror((int)-k) : "nothing read");
            p2p_peer_gone(e, q, WEFT_ESYS, msg);
            return 1;
        }
        p->got += (uint64_t)k;
        visit += (uint64_t)k;
    }
    if (p->got == p->h.len || (p->park && p->park->drop))
        copy_done(e, q, fd, 0);
    return 1;
}

/* A whole head is in: match it (p2p_header_arrived). 0, or negative when
 * the peer is gone. */
static int head_in(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    int cma = p->hdr > sizeof p->h && p->cd.cma;
    uint64_t len = p->h.len;
    if (p2p_header_arrived(e, q))
        return -1;
    p->cma_rd = cma && len;
    return 0;
}

/* A whole head in that names a registered region while no receive from
 * its sender is posted: matching it now would copy the payload into a
 * buffer of its own and again at the receive. A caller whose wait ends
 * in this pass (a blocking send's acknowledgement came in with the
 * peer's answer behind it: 2-33% of a rank's 1-4 MiB answers) posts that
 * receive next, so the head waits one pass: whoever drives next matches
 * it, or parks it as before (every driver passes again after a pass
 * that moved something), and the sender keeps waiting for its
 * acknowledgement meanwhile. */
static int hold(const p2p_peer *p)
{
    return !p->held && p->hdr > sizeof p->h && p->cd.cma == P2P_REG_DESC && !p->recvs.head;
}

/* Read peer q's ring as far as it goes. 1: moved. */
static int read_ring(p2p_engine *e, int q, int fd)
{
    p2p_peer *p = &e->peer[q];
    shm_link *lk = &p->in;
    uint64_t visit = 0;
    int progressed = 0, bell = 0;
    if (p->held) { /* the pass after the one that held it */
        p->held = 0;
        if (head_in(e, q))
            return 1;
        progressed = 1;
    }
    while (!p->gone && visit < VISIT_BYTES) {
        if (p->cma_rd) {
            progressed |= read_cma(e, q, fd);
            if (p->cma_rd)
                break;
            continue;
        }
        size_t n;
        if (p->hdr < sizeof p->h || (p->hdr < HDR_MAX && p->h.len >= SHM_CMA_MIN)) {
            if (p->hdr == 0)
                shm_ring_end_msg_read(&lk->ring);
            char *to = p->hdr < sizeof p->h ? (char *)&p->h + p->hdr
                                             : (char *)&p->cd + (p->hdr - sizeof p->h);
            size_t want = p->hdr < sizeof p->h ? sizeof p->h - p->hdr : HDR_MAX - p->hdr;
            n = shm_ring_read(&lk->ring, to, want, &bell);
            p->hdr += (uint32_t)n;
            if (n && p->hdr >= sizeof p->h && p->hdr == head_len(p->h.len)) {
                if (hold(p))
                    p->held = 1;
                else if (head_in(e, q))
                    return 1;
            }
        } else {
            uint64_t left = p->h.len - p->got;
            char *to = (p->into ? (char *)p->into->a.recv : p->park->buf) + p->got;
            n = shm_ring_read(&lk->ring, to, left < VISIT_BYTES ? (size_t)left : VISIT_BYTES,
                              &bell);
            if ((p->got += n) == p->h.len)
                p2p_msg_arrived(e, q);
        }
        if (bell)
            doorbell(fd);
        if (!n)
            break;
        visit += n;
        progressed = 1;
        if (p->held)
            break;
    }
    return progressed;
}

int p2p_shm_read(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    shm_link *lk = &p->in;
    int fd = e->net.in_fd[q], progressed = 0;
    if (fd < 0)
        return 0;
    if (lk->state != SHM_LINK_RING) {
        if (!p->readable)
            return 0;
        int rc = hello_recv(e, q, lk, fd);
        if (rc <= 0) {
            if (rc == 0)
                p->readable = 0;
            return rc < 0;
        }
        if (lk->state == SHM_LINK_TCP)
            return 1; /* read_peer goes on */
        progressed = 1;
    }
    if (p->readable) {
        drain(lk, fd);
        p->readable = 0;
    }
    progressed |= read_ring(e, q, fd);
    /* what the peer put in before it left is still read */
    if (lk->closed && !p->gone && !shm_ring_can_read(&lk->ring) && !p->cma_rd && !p->held)
        died(e, q, "closed");
    return progressed;
}

int p2p_shm_ready(const p2p_engine *e)
{
    for (int q = 0; q < e->size; q++) {
        const p2p_peer *p = &e->peer[q];
        if (p->gone)
            continue;
        if (p->held || (p->in.state == SHM_LINK_RING && shm_ring_can_read(&p->in.ring)))
            return 1;
        if (p->share && share_whole(p))
            return 1;
        if (p->out.state == SHM_LINK_RING && p->sends.head &&
            shm_ring_can_move(&p->out.ring, p->cma_wait ? 2 : 1))
            return 1;
        shm_cma_desc d;
        uint64_t len;
        if (p->cma_wait && p->reg_wait && share_open(e, p, &d, &len))
            return 1;
    }
    return 0;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

double p2p_shm_copy_s(const p2p_engine *e)
{
    double s = 0;
    for (int q = 0; q < e->size; q++) {
        const p2p_peer *p = &e->peer[q];
        if (p->gone || !p->cma_wait || !p->sends.head)
            continue;
        double t = (double)p->sends.head->bytes * COPY_NS_PER_BYTE * 1e-9;
        s = t > s ? t : s;
    }
    return s < COPY_WAIT_MAX_S ? s : COPY_WAIT_MAX_S;
}

int p2p_shm_rings(const p2p_engine *e)
{
    for (int q = 0; q < e->size; q++)
        if (e->peer[q].in.state == SHM_LINK_RING || e->peer[q].out.state == SHM_LINK_RING)
            return 1;
    return 0;
}

int p2p_shm_glance(const p2p_engine *e, int looks)
{
    for (int k = 0; k < looks; k++) {
        if (p2p_shm_ready(e))
            return 1;
        relax();
    }
    return p2p_shm_ready(e);
}

int p2p_shm_sleep(p2p_engine *e)
{
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        if (p->gone)
            continue;
        if (p->held ||
            (p->in.state == SHM_LINK_RING && !p->cma_rd && !shm_ring_sleep(&p->in.ring, 0)) ||
            (p->share && !shm_share_sleep(&p->in.ring, p->h.len - p->share_mine)) ||
            (p->out.state == SHM_LINK_RING && p->sends.head &&
             !shm_ring_sleep(&p->out.ring, p->cma_wait ? 2 : 1))) {
            p2p_shm_wake(e);
            return 1;
        }
    }
    return 0;
}

void p2p_shm_wake(p2p_engine *e)
{
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        if (p->in.state == SHM_LINK_RING && p->in.ring.ctl)
            shm_ring_wake(&p->in.ring, 0);
        if (p->out.state == SHM_LINK_RING && p->out.ring.ctl)
            shm_ring_wake(&p->out.ring, 1);
    }
}

void p2p_shm_gone(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    shm_ring_unlink(&p->out.ring);
    p->cma_wait = 0;
    p->cma_rd = 0;
    p->held = 0;
    p->share = 0;
    p2p_reg_forget(e->reg, q);
}

void p2p_shm_close(p2p_engine *e, int started)
{
    int local = 0;
    for (int q = 0; e->peer && q < e->size; q++) {
        /* the sender's name stays for a receiver yet to map it (its last
         * message may still be unread there) */
        shm_ring_close(&e->peer[q].out.ring);
        shm_ring_close(&e->peer[q].in.ring);
        local |= started && e->shm_on && p2p_local(e, q);
    }
    if (local)
        shm_unlink_to(e->c->id ^ P2P_SALT, e->rank);
}
