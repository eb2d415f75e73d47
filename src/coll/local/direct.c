/* The direct algorithm: ranks on one host read each other's buffers with
 * process_vm_readv (transport/shm.h, shm_cma_read), so every byte crosses
 * memory once per reader instead of being copied into a ring and out again.
 *
 * An all-reduce in five steps, each rank owning one slice of the result:
 *   exchange  every rank tells every other its pid and buffer addresses
 *             (with every peer at once, or beyond 16 ranks in log2 P
 *             rounds, each with two peers: see DIRECT_MESH_MAX);
 *   reduce    rank r reads slice r of every peer's send buffer, a piece
 *             small enough to stay in cache at a time, and reduces it into
 *             slice r of its own receive buffer;
 *   barrier   all slices are final;
 *   gather    rank r reads every other slice from its owner's receive
 *             buffer into its own;
 *   barrier   nobody returns (and lets its caller touch the buffers) while
 *             another rank still reads them.
 * In place (send == recv) is safe: in the reduce step rank r writes only
 * slice r, which only rank r reads; in the gather step it writes slices
 * that only their owners read, and they were read before the barrier.
 * The other collectives are the same exchange, reads of what each rank
 * needs from where it lies, and a barrier (docs/ALGORITHMS.md).
 *
 * The exchange and the barriers are ordinary schedules run by exec_run, so
 * a dead peer, a timeout, an abort or a mismatched call are reported as
 * for any other algorithm, and waiting ranks sleep.
 *
 * Reading another process needs ptrace permission (Yama, seccomp, pid
 * namespaces may forbid it). On first use every rank reads every peer's
 * cookie; the ranks share their verdicts, and unless all succeeded every
 * rank runs the ring schedule instead, for good.
 *
 * A peer may become unreadable later (it drops PR_SET_DUMPABLE, installs
 * a seccomp filter). A rank whose read fails so skips the rest of its
 * reads and says so at the next synchronisation, which is an exchange of
 * each rank's status rather than a bare barrier: every rank then knows
 * the same things, turns single copy off for good, and either runs the
 * call again by the ring (when every rank's input is still as it was) or
 * fails it with the same error (an all-reduce in place, say, whose input
 * already holds part of the result). Only a dead peer ends the call
 * at once. */
#include "coll/local/direct.h"

#include "coll/local/direct_av.h"
#include "coll/local/direct_int.h"

#include "coll/coll_sched.h"
#include "coll/exec/exec.h"
#include "coll/exec/mismatch.h"
#include "coll/reduce.h"
#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIECE (256u << 10) /* bytes of all peers read and reduced while in cache */
#define PIECE_MIN (16u << 10) /* per peer, at least */
#define FOLD_MAX 16            /* sources reduced in one pass */

void direct_free(weft_comm *c)
{
    struct direct_state *d = c->direct;
    if (!d)
        return;
    sched_free(&d->xchg);
    sched_free(&d->bar);
    free(d->peers);
    free(d->status);
    free(d->piece);
    free(d->scratch);
    free(d->pairs);
    sched_free(&d->avx);
    free(d->av_out);
    free(d->av_in);
    direct_map_free(d->maps);
    free(d);
    c->direct = NULL;
}

static int does(weft_coll_kind k)
{
    return k > WEFT_COLL_RECV && k < WEFT_COLL_KIND_COUNT;
}

static int overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

/* Descriptors [from, from + n) (rank order, modulo P) between rank r's
 * SB_RECV and peer: one op, or two where the range wraps. */
static void xchg_blocks(weft_sched *s, int send, int peer, int from, int n, int P)
{
    while (n > 0) {
        int run = from + n <= P ? n : P - from;
        if (send)
            sched_send(s, peer, SB_RECV, (uint64_t)from * sizeof(desc),
                       (uint64_t)run * sizeof(desc));
        else
            sched_recv(s, peer, SB_RECV, (uint64_t)from * sizeof(desc),
                       (uint64_t)run * sizeof(desc));
        from = (from + run) % P;
        n -= run;
    }
}

/* Every rank's descriptor into SB_RECV, where each rank has put its own
 * (at its rank) before the run. Bruck's all-gather beyond DIRECT_MESH_MAX: in
 * the round of distance k a rank passes the k descriptors it holds from
 * itself on to rank r - k and takes the next k from rank r + k. */
static void xchg_build(weft_sched *s, int r, int P)
{
    if (P <= DIRECT_MESH_MAX) {
        for (int q = 0; q < P; q++) {
            if (q == r)
                continue;
            sched_send(s, q, SB_RECV, (uint64_t)r * sizeof(desc), sizeof(desc));
            sched_recv(s, q, SB_RECV, (uint64_t)q * sizeof(desc), sizeof(desc));
        }
        sched_end_round(s);
        return;
    }
    for (int k = 1; k < P; k *= 2) {
        int n = k < P - k ? k : P - k;
        xchg_blocks(s, 1, (r - k + P) % P, r, n, P);
        xchg_blocks(s, 0, (r + k) % P, (r + k) % P, n, P);
        sched_end_round(s);
    }
}

int direct_state_get(weft_comm *c, struct direct_state **out)
{
    struct direct_state *d = c->direct;
    int P = c->size, r = c->rank;
    if (d) {
        *out = d;
        return 0;
    }
    d = calloc(1, sizeof *d);
    size_t per = P > 1 ? PIECE / (size_t)(P - 1) / 4096 * 4096 : PIECE;
    if (per < PIECE_MIN)
        per = PIECE_MIN;
    if (!d || !(d->peers = calloc((size_t)P, sizeof *d->peers)) ||
        !(d->status = calloc((size_t)P, sizeof *d->status)) ||
        !(d->piece = malloc(per * (size_t)(P > 1 ? P - 1 : 1)))) {
        if (d) {
            free(d->peers);
            free(d->status);
            free(d);
        }
        return comm_fail(c, WEFT_ENOMEM, "direct: out of memory");
    }
    d->per_peer = per;
    d->bad_peer = -1;
    d->pid = (int32_t)getpid();
    d->mesh = P <= DIRECT_MESH_MAX;
    sched_init(&d->xchg);
    sched_init(&d->bar);
    xchg_build(&d->xchg, r, P);
    sched_params bp = { .kind = WEFT_COLL_BARRIER, .rank = r, .nranks = P, .root = -1,
                        .esize = 1 };
    sched_barrier_dissemination(&d->bar, &bp);
    sched_end_round(&d->bar);
    /* nonzero, and unlikely to sit by chance at the same address in a
     * process that merely reuses the pid */
    d->cookie = (c->id ^ ((uint64_t)(uintptr_t)d << 16) ^ (uint64_t)(clock_now() * 1e9)) |
                1;
    c->direct = d;
    int rc = d->xchg.err ? d->xchg.err : d->bar.err;
    if (rc) {
        direct_free(c);
        return comm_fail(c, rc, "direct: out of memory");
    }
    *out = d;
    return 0;
}

/* The sub-operations' fingerprints: the call's own, with the step in a
 * field the kind leaves unused and frame_describe does not print (the
 * root of a collective without one, the op of one that does not reduce),
 * so that messages of different steps never match each other. */
frame_hdr direct_step_fp(const frame_hdr *fp, int step)
{
    frame_hdr h = *fp;
    if (h.root == -1)
        h.root = step;
    else if (h.kind != WEFT_COLL_REDUCE)
        h.op = (uint8_t)step;
    return h;
}

int direct_exchange(weft_comm *c, struct direct_state *d, desc *mine, const frame_hdr *fp,
                    int step)
{
    char *bufs[SB_COUNT] = { (char *)mine, (char *)d->peers, (char *)&d->zero };
    frame_hdr h = direct_step_fp(fp, step);
    d->peers[c->rank] = *mine;
    return exec_run(c, &d->xchg, bufs, &h);
}

static int barrier(weft_comm *c, struct direct_state *d, const frame_hdr *fp, int step)
{
    char *z = (char *)&d->zero;
    char *bufs[SB_COUNT] = { z, z, z };
    frame_hdr h = direct_step_fp(fp, step);
    return exec_run(c, &d->bar, bufs, &h);
}

/* n bytes at addr in rank q into dst. A read refused while the peer
 * lives is noted (d->bad_peer) for settle, and this rank reads nothing
 * more in the call. */
int direct_pull(weft_comm *c, struct direct_state *d, int q, void *dst, uint64_t addr,
                size_t n, const frame_hdr *fp)
{
    char *to = dst;
    while (n && d->bad_peer < 0) {
        long k = shm_cma_read(d->peers[q].pid, to, addr, n);
        if (k > 0) {
            to += k;
            addr += (uint64_t)k;
            n -= (size_t)k;
            continue;
        }
        char what[160];
        int e = k < 0 ? (int)-k : EFAULT;
        exec_describe(fp, what, sizeof what);
        c->fail_peer = q;
        if (e == ESRCH || (kill(d->peers[q].pid, 0) < 0 && errno == ESRCH))
            return comm_fail(c, WEFT_EPEER,
                             "rank %d died (its memory could not be read by rank %d) during %s",
                             q, c->rank, what);
        d->bad_peer = q;
        d->bad_errno = e;
    }
    return 0;
}

/* The synchronisation after a step of reads: every rank's status to
 * every other (so also a barrier). intact: this rank's input is still as
 * the call found it. 0: all read everything; 1: some rank could not,
 * and the ring has run the call instead; or an error, alike on every
 * rank. */
static int ring(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp);

int direct_settle(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                  const frame_hdr *fp, int step, int intact)
{
    desc mine = { .pid = d->pid,
                  .ok = d->bad_peer < 0,
                  .send = (uint64_t)(d->bad_peer < 0 ? 0 : d->bad_peer),
                  .recv = (uint64_t)!!intact,
                  .aux = (uint64_t)d->bad_errno,
                  .cookie_addr = d->bad_sent,
                  .cookie = d->bad_want };
    char *bufs[SB_COUNT] = { (char *)&mine, (char *)d->status, (char *)&d->zero };
    frame_hdr h = direct_step_fp(fp, step);
    d->status[c->rank] = mine; /* the exchange passes it on from there */
    int rc = exec_run(c, &d->xchg, bufs, &h), who = -1, redo = 1;
    if (rc)
        return rc;
    for (int q = 0; q < c->size; q++) {
        if (!d->status[q].ok && who < 0)
            who = q;
        redo &= d->status[q].recv != 0;
    }
    if (who < 0)
        return 0;
    const desc *w = &d->status[who];
    int e = (int)w->aux, peer = (int)w->send;
    char what[160];
    exec_describe(fp, what, sizeof what);
    c->fail_peer = peer;
    if (e == EMSGSIZE) /* the caller's counts, not the memory: single copy stays on */
        return comm_fail(c, WEFT_EMISMATCH,
                         "%s: rank %d sends rank %d %llu bytes, but rank %d expects %llu", what,
                         peer, who, (unsigned long long)w->cookie_addr, who,
                         (unsigned long long)w->cookie);
    /* a permission withdrawn: the ring needs none. Anything else (a bad
     * address) would only move into the ring, so the call fails. */
    redo &= e == EPERM || e == EACCES || e == ENOSYS;
    d->verdict = -1;
    log_sub(c->loglevel, LOG_WARN, LOG_SUB_COLL, c->rank,
            "direct: rank %d could not read rank %d's memory (%s) during %s; single copy is "
            "off on this communicator from now on%s",
            who, peer, strerror(e), what, redo ? ", and the ring runs the call again" : "");
    if (redo)
        return !a ? DIRECT_AGAIN : (rc = ring(c, a, fp)) ? rc : 1;
    return comm_fail(c, WEFT_ESYS,
                     "rank %d could not read rank %d's memory during %s: %s (single copy is "
                     "off on this communicator from now on; the call cannot run again "
                     "because %s)",
                     who, peer, what, strerror(e),
                     e == EPERM || e == EACCES || e == ENOSYS
                         ? "a rank's input already holds part of the result"
                         : "the error is not a refused permission");
}

/* settle's answer, for a step that ends the call: done either way */
static int settled(int rc) { return rc < 0 ? rc : 0; }

/* Can this rank read every peer? (It then knows it reads the right
 * processes: each one's cookie is where it said.) */
static int can_read_all(weft_comm *c, struct direct_state *d)
{
    for (int q = 0; q < c->size; q++) {
        uint64_t v = 0;
        if (q == c->rank)
            continue;
        if (shm_cma_read(d->peers[q].pid, &v, d->peers[q].cookie_addr, sizeof v) !=
                (long)sizeof v ||
            v != d->peers[q].cookie)
            return 0;
    }
    return 1;
}

int direct_agree(weft_comm *c, struct direct_state *d, desc *mine, const frame_hdr *fp)
{
    int rc;
    if (d->verdict)
        return d->verdict < 0;
    /* every rank must take the same path: share what each one saw */
    mine->ok = (uint32_t)can_read_all(c, d);
    if ((rc = direct_exchange(c, d, mine, fp, 1)))
        return rc;
    d->verdict = 1;
    for (int q = 0; q < c->size; q++)
        if (!d->peers[q].ok)
            d->verdict = -1;
    return d->verdict < 0;
}

/* Elements [*off, *off + *n) of count are slice q of P. */
static void slice(uint64_t count, int P, int q, uint64_t *off, uint64_t *n)
{
    uint64_t base = count / (uint64_t)P, rem = count % (uint64_t)P, uq = (uint64_t)q;
    *n = base + (uq < rem);
    *off = uq * base + (uq < rem ? uq : rem);
}

/* dst = op(mine, every peer's bytes at src_off in its send buffer), a
 * piece of every peer at a time (peers in turn from r + 1, so that they
 * are read evenly), folded into dst in one pass while in cache. */
static int reduce_from_all(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                           char *dst, const char *mine, uint64_t src_off, uint64_t bytes,
                           const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t es = weft_dtype_size(a->dtype), per = d->per_peer / es * es;
    const void *from[FOLD_MAX];
    for (uint64_t pos = 0; pos < bytes && d->bad_peer < 0; pos += per) {
        size_t len = bytes - pos < per ? (size_t)(bytes - pos) : per;
        if (atomic_load(&c->aborted))
            return comm_fail(c, WEFT_EABORTED, "communicator aborted");
        int nf = 0;
        from[nf++] = mine + pos;
        for (int k = 1; k < P; k++) {
            int q = (r + k) % P;
            char *piece = d->piece + (size_t)(k - 1) * d->per_peer;
            if ((rc = direct_pull(c, d, q, piece, d->peers[q].send + src_off + pos, len, fp)))
                return rc;
            from[nf++] = piece;
            if (nf == FOLD_MAX || k == P - 1) {
                if ((rc = reduce_apply_many(dst + pos, from, nf, len / es, a->dtype, a->op)))
                    return comm_fail(c, rc, "direct: bad reduction (dtype %d, op %d)",
                                     (int)a->dtype, (int)a->op);
                nf = 0;
                from[nf++] = dst + pos;
            }
        }
    }
    return 0;
}

static int allreduce(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                     const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t es = weft_dtype_size(a->dtype);
    int intact = !overlaps(a->send, a->count * es, a->recv, a->count * es);
    uint64_t off, n;
    slice(a->count, P, r, &off, &n);
    if ((rc = reduce_from_all(c, d, a, (char *)a->recv + off * es,
                              (const char *)a->send + off * es, off * es, n * es, fp)))
        return rc;
    if ((rc = direct_settle(c, d, a, fp, 2, intact)))
        return settled(rc);
    for (int k = 1; k < P; k++) {
        int q = (r + k) % P;
        slice(a->count, P, q, &off, &n);
        if (n && (rc = direct_pull(c, d, q, (char *)a->recv + off * es,
                                   d->peers[q].recv + off * es, n * es, fp)))
            return rc;
    }
    return settled(direct_settle(c, d, a, fp, 3, intact));
}

/* send: P blocks of count; recv: this rank's reduced block. */
static int reduce_scatter(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                          const frame_hdr *fp)
{
    size_t es = weft_dtype_size(a->dtype), bytes = a->count * es;
    uint64_t own = (uint64_t)c->rank * bytes;
    const char *s = a->send, *rv = a->recv;
    /* the others read all of this rank's send buffer until the barrier:
     * a result that lands inside it waits in scratch */
    int overlap = rv < s + (size_t)c->size * bytes && s < rv + bytes;
    char *dst = a->recv;
    int rc;
    if (overlap) {
        if ((rc = coll_scratch(c, &d->scratch, &d->scratch_cap, bytes)))
            return rc;
        dst = d->scratch;
    }
    if ((rc = reduce_from_all(c, d, a, dst, s + own, own, bytes, fp)) ||
        (rc = direct_settle(c, d, a, fp, 2, 1)))
        return settled(rc);
    if (overlap)
        memmove(a->recv, dst, bytes);
    return 0;
}

static int allgather(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                     const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    char *rv = a->recv;
    for (int k = 1; k < P; k++) {
        int q = (r + k) % P;
        if ((rc = direct_pull(c, d, q, rv + (size_t)q * bytes, d->peers[q].send, bytes, fp)))
            return rc;
    }
    const char *own = (const char *)(uintptr_t)d->peers[r].send; /* maybe a copy */
    if (own != rv + (size_t)r * bytes)
        memmove(rv + (size_t)r * bytes, own, bytes);
    /* a copy: the send buffer lies in the receive buffer, now written */
    return settled(direct_settle(c, d, a, fp, 2, own == (const char *)a->send));
}

static int broadcast(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                     const frame_hdr *fp)
{
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    int rc;
    if (c->rank != a->root &&
        (rc = direct_pull(c, d, a->root, a->recv, d->peers[a->root].recv, bytes, fp)))
        return rc;
    return settled(direct_settle(c, d, a, fp, 2, 1));
}

/* The root reduces nothing itself beyond its slice: every rank reduces
 * its slice into scratch, and the root collects the slices. */
static int reduce(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                  const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t es = weft_dtype_size(a->dtype);
    uint64_t off, n;
    slice(a->count, P, r, &off, &n);
    if ((rc = reduce_from_all(c, d, a, d->scratch, (const char *)a->send + off * es, off * es,
                              n * es, fp)) ||
        (rc = direct_settle(c, d, a, fp, 2, 1)))
        return settled(rc);
    if (r == a->root) {
        for (int q = 0; q < P; q++) {
            slice(a->count, P, q, &off, &n);
            if (q == r)
                memcpy((char *)a->recv + off * es, d->scratch, n * es);
            else if (n && (rc = direct_pull(c, d, q, (char *)a->recv + off * es,
                                            d->peers[q].aux, n * es, fp)))
                return rc;
        }
    }
    return settled(direct_settle(c, d, a, fp, 3,
                                 r != a->root || !overlaps(a->send, a->count * es, a->recv,
                                                           a->count * es)));
}

static int gather(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                  const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    char *rv = a->recv;
    if (r == a->root) {
        for (int q = 0; q < P; q++) {
            const char *own = (const char *)(uintptr_t)d->peers[r].send; /* maybe a copy */
            if (q == r) {
                if (own != rv + (size_t)r * bytes)
                    memmove(rv + (size_t)r * bytes, own, bytes);
            } else if ((rc = direct_pull(c, d, q, rv + (size_t)q * bytes, d->peers[q].send,
                                         bytes, fp))) {
                return rc;
            }
        }
    }
    return settled(direct_settle(
        c, d, a, fp, 2, (const char *)(uintptr_t)d->peers[r].send == (const char *)a->send));
}

static int scatter(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                   const frame_hdr *fp)
{
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    int rc;
    if (c->rank != a->root &&
        (rc = direct_pull(c, d, a->root, a->recv,
                          d->peers[a->root].send + (uint64_t)c->rank * bytes, bytes, fp)))
        return rc;
    if ((rc = direct_settle(c, d, a, fp, 2, 1)))
        return settled(rc);
    /* the root's own block waits until nobody reads its send buffer */
    if (c->rank == a->root && (const char *)a->send + (size_t)c->rank * bytes != a->recv)
        memmove(a->recv, (const char *)a->send + (size_t)c->rank * bytes, bytes);
    return 0;
}

/* Rank r reads block r of every peer's send buffer into block q of its
 * receive buffer; in place, into scratch until nobody reads it any more. */
static int alltoall(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                    const frame_hdr *fp)
{
    int P = c->size, r = c->rank, rc;
    size_t bytes = a->count * weft_dtype_size(a->dtype), all = (size_t)P * bytes;
    int inplace = overlaps(a->send, all, a->recv, all);
    char *dst = inplace ? d->scratch : a->recv;
    for (int k = 0; k < P; k++) {
        int q = (r + k) % P;
        if (q == r)
            memmove(dst + (size_t)r * bytes, (const char *)a->send + (size_t)r * bytes, bytes);
        else if ((rc = direct_pull(c, d, q, dst + (size_t)q * bytes,
                            d->peers[q].send + (uint64_t)r * bytes, bytes, fp)))
            return rc;
    }
    if ((rc = direct_settle(c, d, a, fp, 2, 1)))
        return settled(rc);
    if (inplace)
        memcpy(a->recv, dst, all);
    return 0;
}

/* Where single copy is not allowed: the ring schedule, on every rank. */
static int ring(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    return coll_run_sched(c, a, WEFT_ALGO_RING, &c->sched, &c->tmp, &c->tmp_cap, fp);
}

int direct_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    struct direct_state *d = NULL;
    const char *name = weft_coll_name(a->kind);
    int rc;
    if (!does(a->kind))
        return comm_fail(c, WEFT_ENOTSUP, "%s has no direct algorithm", name ? name : "?");
    if (c->nhosts > 1 || (!c->shm_on && c->size > 1))
        return comm_fail(c, WEFT_ENOTSUP,
                         "%s: the direct algorithm needs every rank on one host with shared "
                         "memory on (%d hosts, WEFT_SHM %s)",
                         name, c->nhosts, c->shm_on ? "on" : "off");
    if (c->size == 1) {
        size_t bytes = a->count * weft_dtype_size(a->dtype);
        if (a->count && a->kind != WEFT_COLL_BROADCAST && a->kind != WEFT_COLL_BARRIER &&
            a->send != a->recv)
            memmove(a->recv, a->send, bytes);
        return 0;
    }
    if (a->count == 0 && a->kind != WEFT_COLL_BARRIER)
        return 0;
    if ((rc = direct_state_get(c, &d)))
        return rc;
    if (a->kind == WEFT_COLL_BARRIER)
        return barrier(c, d, fp, 0);
    if (d->verdict < 0)
        return ring(c, a, fp);
    d->bad_peer = -1;
    d->bad_errno = 0;
    const char *send = a->kind == WEFT_COLL_BROADCAST ? a->recv : a->send;
    size_t es = weft_dtype_size(a->dtype), bytes = a->count * es;
    int root = a->root == c->rank;
    if (a->kind == WEFT_COLL_ALLGATHER || (a->kind == WEFT_COLL_GATHER && root)) {
        /* the others read this send buffer while this rank fills its
         * receive buffer: if they overlap (other than the send buffer
         * being this rank's own block), they read a copy */
        const char *rv = a->recv, *s = a->send;
        if (s != rv + (size_t)c->rank * bytes &&
            overlaps(s, bytes, rv, (size_t)c->size * bytes)) {
            if ((rc = coll_scratch(c, &d->scratch, &d->scratch_cap, bytes)))
                return rc;
            memcpy(d->scratch, s, bytes);
            send = d->scratch;
        }
    } else if (a->kind == WEFT_COLL_REDUCE) {
        uint64_t off, n;
        slice(a->count, c->size, c->rank, &off, &n);
        if ((rc = coll_scratch(c, &d->scratch, &d->scratch_cap, n * es + 1)))
            return rc;
    } else if (a->kind == WEFT_COLL_ALLTOALL &&
               overlaps(a->send, (size_t)c->size * bytes, a->recv, (size_t)c->size * bytes) &&
               (rc = coll_scratch(c, &d->scratch, &d->scratch_cap, (size_t)c->size * bytes))) {
        return rc;
    }
    desc mine = { .pid = d->pid,
                  .send = (uint64_t)(uintptr_t)send,
                  .recv = (uint64_t)(uintptr_t)a->recv,
                  .aux = (uint64_t)(uintptr_t)d->scratch,
                  .cookie_addr = (uint64_t)(uintptr_t)&d->cookie,
                  .cookie = d->cookie };
    if ((rc = direct_exchange(c, d, &mine, fp, 0)) || (rc = direct_agree(c, d, &mine, fp)) < 0)
        return rc;
    if (rc)
        return ring(c, a, fp);
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE: return allreduce(c, d, a, fp);
    case WEFT_COLL_REDUCE_SCATTER: return reduce_scatter(c, d, a, fp);
    case WEFT_COLL_ALLGATHER: return allgather(c, d, a, fp);
    case WEFT_COLL_BROADCAST: return broadcast(c, d, a, fp);
    case WEFT_COLL_REDUCE: return reduce(c, d, a, fp);
    case WEFT_COLL_GATHER: return gather(c, d, a, fp);
    case WEFT_COLL_SCATTER: return scatter(c, d, a, fp);
    default: return alltoall(c, d, a, fp);
    }
}

int direct_verdict(const weft_comm *c) { return c->direct ? c->direct->verdict : 0; }
