/* Waiting on the flat board without taking a core from a rank that still
 * has to post: look, yield, look again for the executor's spin (c->spin_s,
 * and at least c->spin_yields yields), then sleep on the board's futex.
 * The futex is rung only by the post (or pipeline step) that completes
 * what others wait for, and only
 * when a rank declared itself asleep, so a call costs no wake-up while
 * everyone polls. Asleep, a rank wakes every FLAT_NAP_MS to look for an
 * abort, another rank's failure notice, a dead peer (its pidfd turns
 * readable when it exits), the deadline and the network (flat_tend). */
#include "coll/local/flat_int.h"

#include "coll/exec/callboard.h"
#include "coll/exec/exec.h"
#include "coll/exec/mismatch.h"
#include "coll/comm_watch.h"
#include "coll/exec/live.h"
#include "core/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

void flat_pids_open(weft_comm *c, struct flat_state *fs)
{
    struct stat sb;
    uint64_t ns = stat("/proc/self/ns/pid", &sb) ? 0 : (uint64_t)sb.st_ino;
    if (!fs->pidfd && !(fs->pidfd = malloc((size_t)c->size * sizeof *fs->pidfd)))
        return; /* deaths then show as timeouts */
    for (int r = 0; r < c->size; r++) {
        const flat_rank *x = &fs->b.ranks[r];
        fs->pidfd[r] = FLAT_PID_UNKNOWN;
        /* a pid means that process only in this rank's pid namespace */
        if (r == c->rank || x->pid <= 0 || !ns || x->pidns != ns)
            continue;
        long fd = syscall(SYS_pidfd_open, (pid_t)x->pid, 0);
        if (fd >= 0)
            fs->pidfd[r] = (int)fd;
        else if (errno == ESRCH)
            fs->pidfd[r] = FLAT_PID_DEAD;
    }
}

void flat_pids_close(weft_comm *c, struct flat_state *fs)
{
    for (int r = 0; fs->pidfd && r < c->size; r++)
        if (fs->pidfd[r] >= 0)
            close(fs->pidfd[r]);
    free(fs->pidfd);
    fs->pidfd = NULL;
}

void flat_ring(struct flat_state *fs)
{
    flat_head *h = fs->b.head;
    /* sequentially consistent after the post: a rank that declared itself
     * asleep before this load is woken; one that declares itself later
     * looks at the board afterwards and sees the post */
    if (atomic_load(&h->sleepers)) {
        atomic_fetch_add(&h->bell, 1);
        syscall(SYS_futex, (uint32_t *)&h->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

static void nap(flat_head *h, uint32_t seen, int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    /* shared, not private: the wakers are other processes */
    syscall(SYS_futex, (uint32_t *)&h->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* The ranks whose counter is short of w->want, in who[]. */
static int missing(const flat_ctr *w, int *who, int max)
{
    int n = 0;
    for (int r = 0; r < w->n; r++)
        if (flat_ctr_get(w, r) < w->want && n < max)
            who[n++] = r;
    return n;
}

static int dead(const struct flat_state *fs, int r)
{
    int fd = fs->pidfd ? fs->pidfd[r] : FLAT_PID_UNKNOWN;
    if (fd == FLAT_PID_DEAD)
        return 1;
    if (fd < 0)
        return 0;
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    return poll(&pf, 1, 0) == 1;
}

int flat_tend(weft_comm *c, struct flat_state *fs)
{
    struct pollfd pf[TCP_PEND_MAX + 1];
    char err[200];
    int np = tcp_pending(&c->net, pf, TCP_PEND_MAX), rc;
    pf[np] = (struct pollfd){ .fd = c->net.lfd, .events = POLLIN };
    int n = poll(pf, (nfds_t)np + 1, 0);
    fs->next_tend = clock_now() + FLAT_NAP_MS * 1e-3;
    if (np)
        tcp_check_pending(&c->net); /* also drops those past their deadline */
    if (n > 0 && (pf[np].revents & POLLIN) &&
        (rc = tcp_accept_one(&c->net, err, sizeof err)) < 0)
        return comm_fail(c, rc, "accepting a connection: %s", err);
    return 0;
}

/* A rank that runs this call by a schedule (its count, and so its
 * algorithm, differs) sends its first message through the pair's ring and
 * waits for an answer that never comes. A header waiting in a ring from a
 * rank that has not posted, for this very operation or a point-to-point
 * one, is that: flat sends nothing through rings, and whatever the setup
 * of the board sent was read before the first post. */
static int probe_mismatch(weft_comm *c, const int *who, int n, const frame_hdr *fp)
{
    for (int i = 0; c->shm_in && i < n; i++) {
        shm_link *lk = &c->shm_in[who[i]];
        const char *p, *why;
        frame_hdr h;
        if (lk->state != SHM_LINK_RING || shm_ring_peek(&lk->ring, &p, sizeof h) < sizeof h)
            continue;
        if (frame_decode(p, sizeof h, &h, &why))
            continue; /* the executor will say what it is */
        if (h.kind != WEFT_COLL_SEND && h.seq != fp->seq)
            continue; /* the rank's next operation, already under way */
        return callboard_mismatch(c, who[i], &h, fp);
    }
    return 0;
}

/* Asleep or about to sleep: has anything ended the wait? */
static int check(weft_comm *c, struct flat_state *fs, const flat_ctr *ctr,
                 const frame_hdr *fp, double *last, int *nlast)
{
    int who[64], n = missing(ctr, who, 64), rc;
    char d[160], list[256];
    if (atomic_load(&c->aborted))
        return comm_fail(c, WEFT_EABORTED, "communicator aborted");
    if ((rc = flat_tend(c, fs)) || (rc = callboard_check(c)) ||
        (rc = probe_mismatch(c, who, n, fp)))
        return rc;
    int32_t w[FLIGHT_WAIT_MAX] = { 0 };
    int nw = n < FLIGHT_WAIT_MAX ? n : FLIGHT_WAIT_MAX;
    for (int i = 0; i < nw; i++)
        w[i] = who[i];
    if (c->cur)
        flight_waiting(c->cur, w, nw);
    for (int i = 0; i < n; i++)
        if (dead(fs, who[i])) {
            exec_describe(fp, d, sizeof d);
            c->fail_peer = who[i];
            return comm_fail(c, WEFT_EPEER,
                             "rank %d died (its process ended) during %s, before it reached "
                             "this step on the flat board",
                             who[i], d);
        }
    int wfd = comm_watch_fd(c);
    if (wfd >= 0) {
        struct pollfd pf = { .fd = wfd, .events = POLLIN };
        int code;
        if (poll(&pf, 1, 0) == 1 && (code = comm_watch_fired(c, fp)))
            return code;
    }
    double now = clock_now();
    if (n < *nlast) { /* someone arrived: that is progress */
        *nlast = n;
        *last = now;
    }
    live_waiting(c, fp->seq, w, nw, *last);
    if (now >= *last + c->timeout_s) {
        size_t k = 0;
        char why[200];
        list[0] = 0;
        for (int i = 0; i < n && k < sizeof list - 16; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", who[i]);
        if (n)
            c->fail_peer = who[0];
        exec_describe(fp, d, sizeof d);
        /* those it waits on may only wait themselves: name the one that stopped */
        int culprit = live_blame(c, w, nw, why, sizeof why);
        if (culprit >= 0) {
            c->fail_peer = culprit;
            return comm_fail(c, WEFT_ETIMEDOUT,
                             "%s: rank %d timed out after %.0f s in %s waiting on ranks: %s",
                             why, c->rank, c->timeout_s, d, list);
        }
        return comm_fail(c, WEFT_ETIMEDOUT,
                         "rank %d timed out after %.0f s in %s waiting on ranks: %s", c->rank,
                         c->timeout_s, d, list);
    }
    return 0;
}

/* A rank with a core of its own looks this many times (a few hundred ns)
 * before each yield: the post it waits for is usually a cache line away,
 * and a yield costs more than that, or hands the core to another job. */
#define FLAT_LOOKS 32

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int flat_wait(weft_comm *c, struct flat_state *fs, const flat_ctr *w, const frame_hdr *fp)
{
    flat_head *h = fs->b.head;
    if (w->want == 0 || flat_reached(w))
        return 0;
    comm_spin_yields(c);
    double start = clock_now(), spin_end = start + c->spin_s;
    int looks = c->spin_yields == 0 ? FLAT_LOOKS : 0;
    for (int i = 0; c->spin_s > 0; i++) {
        for (int j = 0; j < looks; j++) {
            relax();
            if (flat_reached(w))
                return 0;
        }
        sched_yield();
        if (flat_reached(w))
            return 0;
        if (i >= c->spin_yields && clock_now() >= spin_end)
            break;
        if (!(i & 63) && atomic_load(&c->aborted))
            break;
    }
    double last = start;
    int nlast = INT_MAX, rc;
    if ((rc = check(c, fs, w, fp, &last, &nlast)))
        return rc;
    for (;;) {
        atomic_fetch_add(&h->sleepers, 1);
        uint32_t seen = atomic_load(&h->bell);
        int done = flat_reached(w);
        if (!done) {
            int ms = clock_ms_until(last + c->timeout_s) + 1;
            nap(h, seen, ms < FLAT_NAP_MS ? ms : FLAT_NAP_MS);
            done = flat_reached(w);
        }
        atomic_fetch_sub(&h->sleepers, 1);
        if (done)
            return 0;
        if ((rc = check(c, fs, w, fp, &last, &nlast)))
            return rc;
    }
}
