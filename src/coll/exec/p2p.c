/* The point-to-point engine's driver (coll/exec/p2p.h). Whoever holds
 * the drive lock moves every peer's streams (p2p_stream.c): the engine's
 * thread, so messages progress while the caller computes, or a caller
 * waiting for its message, so a blocking exchange crosses no thread
 * (a wake-up costs tens of microseconds on a VM, more on a loaded host).
 * While a caller drives, the thread sleeps on idle. Posting only appends
 * to a list under mu and writes a byte to the wake pipe that every
 * sleeper polls. */
#include "coll/exec/p2p.h"

#include "coll/exec/p2p_int.h"
#include "coll/exec/p2p_reg.h"
#include "coll/exec/exec.h"

#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_POLL 16  /* a spinning waiter's rounds per look at its sockets */
#define SPIN_LOOKS 32 /* its looks at its rings per round, with a core of its own */
#define SPIN_ALONE 4  /* its first rounds without a system call, with a core of its own */
#define INLINE_MAX (64u << 10) /* a non-blocking send up to this moves at its post */
#define PARK_MS 20             /* a parked thread's look at whether to listen again */

/* One pass over everything. 1: something moved (look again at once).
 * The clock is read only on a pass that moved nothing (the time of the
 * last progress is then stamped, microseconds late): reading it costs
 * tens of ns on this guest's kvm-clock, about what a message's own work
 * costs, and a blocking exchange's passes nearly all move something. */
static int step(p2p_engine *e, int *stop)
{
    int progressed = p2p_take_posts(e, stop);
    if (*stop)
        return 0;
    if (!e->aborted && atomic_load(&e->c->aborted)) {
        e->aborted = 1;
        p2p_fail_all(e, WEFT_EABORTED, "communicator aborted");
    }
    progressed |= p2p_sweep(e);
    if (progressed) {
        e->fresh = 1;
        return 1;
    }
    double now = clock_now();
    if (e->fresh) {
        e->last = now;
        e->fresh = 0;
    }
    if (e->outstanding && now >= e->last + e->c->timeout_s) {
        p2p_timed_out(e);
        e->last = now;
        return 1;
    }
    if (e->outstanding && now >= e->next_probe) {
        p2p_probe(e);
        e->next_probe = clock_now() + PROBE_S;
    } else if (!e->outstanding) {
        e->next_probe = now + PROBE_S;
    }
    return 0;
}

static void ps_add(p2p_pollset *s, int fd, short ev, int peer, char dir)
{
    s->peer[s->n] = peer;
    s->dir[s->n] = dir;
    s->pf[s->n++] = (struct pollfd){ .fd = fd, .events = ev };
}

/* What to sleep on: the wake pipe, the abort pipe, the listening socket,
 * connections in their handshake, every live incoming stream and the
 * sockets of sends that could not move. */
static void ps_build(p2p_engine *e, p2p_pollset *s)
{
    s->n = 0;
    ps_add(s, e->wake[0], POLLIN, -1, 0);
    if (!e->aborted && e->c->abort_pipe[0] >= 0)
        ps_add(s, e->c->abort_pipe[0], POLLIN, -1, 0);
    s->ilfd = s->n;
    ps_add(s, e->net.lfd, POLLIN, -1, 0);
    s->ipend = s->n;
    s->npend = tcp_pending(&e->net, s->pf + s->n, TCP_PEND_MAX);
    for (int k = 0; k < s->npend; k++)
        s->peer[s->n++] = -1;
    s->ipeers = s->n;
    for (int q = 0; q < e->size; q++) {
        p2p_peer *p = &e->peer[q];
        if (p->gone || q == e->rank)
            continue;
        if (e->net.in_fd[q] >= 0)
            ps_add(s, e->net.in_fd[q], POLLIN, q, 0);
        if (p->sends.head && p->wfd >= 0)
            ps_add(s, p->wfd, p->wev, q, 1);
    }
    /* libfabric's fd last, out of a waiter's spin: it stays readable from
     * the last completion until ofi_may_sleep rearms it, so the spin reads
     * the queue instead */
    s->nspin = s->n;
    s->spin_s = e->spin_s;
    s->ofi = 0;
    for (int q = 0; e->ofi && q < e->size && !s->ofi; q++)
        s->ofi = e->peer[q].ofi && !e->peer[q].gone;
    if (s->ofi && ofi_wait_fd(e->ofi) >= 0)
        ps_add(s, ofi_wait_fd(e->ofi), POLLIN, -1, 0);
}

/* When a sleeper must look again even if nothing happens (timeout,
 * probe); -1: never. */
static double deadline(const p2p_engine *e)
{
    if (!e->outstanding)
        return -1;
    double t = e->next_probe;
    return e->last + e->c->timeout_s < t ? e->last + e->c->timeout_s : t;
}

/* Poll without sleeping for a moment, yielding the core (a message or the
 * next post is usually imminent), then sleep until something is ready or
 * the deadline. The thread stops spinning as soon as a caller drives.
 * Returns poll's count. */
static int ps_sleep(p2p_engine *e, p2p_pollset *s, double until, int thread)
{
    int n = 0;
    if (s->spin_s > 0 && exec_may_spin(e->spin_yields)) {
        double end = -1; /* read at the first look at the clock */
        /* the thread armed the fd before it let go of drive */
        nfds_t nspin = (nfds_t)(thread ? s->n : s->nspin);
        /* a waiter looks at its rings in memory every round (a rank with
         * a core of its own several times: the message is usually a cache
         * line away) and asks the kernel about its sockets only every few
         * rounds; with no ring, its sockets every round. A rank with a
         * core of its own makes no system call in its first SPIN_ALONE
         * rounds (a few us): on a paravirtualised guest each costs about a
         * microsecond, where a message under way is half a cache line's
         * round trip away (a poll and a yield at the first miss made an
         * 8-byte half round trip 3.6-3.9 us). Later it yields every round,
         * so a peer that shares its core gets it. */
        int rings = !thread && p2p_shm_rings(e);
        int own = rings && !e->spin_yields;
        int looks = e->spin_yields ? 0 : SPIN_LOOKS, every = rings ? SPIN_POLL : 1;
        for (int k = 1;; k++) {
            int turn = thread || k % every == 0;
            if ((n = rings && p2p_shm_glance(e, looks)) || (turn && (n = poll(s->pf, nspin, 0))))
                break;
            /* a waiter holds drive: it may read libfabric's queue, which
             * is what moves the provider (the thread's fd is armed) */
            if (!thread && s->ofi && ofi_poll(e->ofi))
                return 1;
            if (own && k < SPIN_ALONE)
                continue;
            double t = clock_now();
            if (end < 0)
                end = t + s->spin_s;
            if ((k >= e->spin_yields && t >= end) ||
                (thread && atomic_load(&e->waiters)))
                break;
            sched_yield();
        }
    }
    if (!n && !thread && s->ofi && !ofi_may_sleep(e->ofi))
        return 1;
    if (!n && !thread && p2p_shm_sleep(e))
        return 1; /* a ring moved while the flags went up */
    if (n)
        return n;
    int ms = until < 0 ? -1 : clock_ms_until(until);
    /* a provider without a wait fd is looked at every millisecond; one
     * with it too, because rxm's fd (1.17, over tcp) does not always wake
     * a sleeper that has a message: with four ranks to a core, pairs of
     * ranks slept out whole deadlines, each waiting for the other */
    if (s->ofi && (ms < 0 || ms > OFI_NAP_MS))
        ms = OFI_NAP_MS;
    if (!n && !(thread && atomic_load(&e->waiters))) {
        n = poll(s->pf, (nfds_t)s->n, ms);
        if (!thread)
            p2p_shm_wake(e);
    }
    return n;
}

/* Take in what poll saw. stale: a caller drove meanwhile, so the set may
 * name sockets that are gone; then every stream is worth one try. */
static void ps_apply(p2p_engine *e, const p2p_pollset *s, int n, int stale)
{
    int filed = 0;
    if (stale) {
        for (int q = 0; q < e->size; q++)
            e->peer[q].readable = e->peer[q].writable = 1;
    } else if (n <= 0) {
        return;
    } else {
        for (int k = s->ipeers; k < s->nspin; k++) {
            if (!s->pf[k].revents)
                continue;
            if (s->dir[k])
                e->peer[s->peer[k]].writable = 1;
            else
                e->peer[s->peer[k]].readable = 1;
        }
    }
    int ready = stale;
    for (int k = 0; !stale && k < s->npend; k++)
        ready |= s->pf[s->ipend + k].revents != 0;
    if (ready || s->npend)
        filed += tcp_check_pending(&e->net) > 0;
    if (stale || (s->pf[s->ilfd].revents & POLLIN)) {
        char err[200];
        int rc = tcp_accept_one(&e->net, err, sizeof err);
        if (rc < 0)
            log_msg(e->c->loglevel, LOG_WARN, e->rank, "point-to-point: accepting: %s", err);
        filed += rc > 0;
    }
    if (filed) {
        e->last = clock_now();
        for (int q = 0; q < e->size; q++)
            e->peer[q].readable |= e->net.in_fd[q] >= 0;
    }
}

static void regain(p2p_engine *e);

/* Nothing outstanding: sleep until a post, an abort, or a peer's
 * connection or handshake needs an answer (a peer's first send waits for
 * this rank's challenge). The streams are left out: a message that
 * arrives now waits in its socket until a receive is posted, and is then
 * read straight into its buffer. Called and returns holding drive. */
static void listen_idle(p2p_engine *e)
{
    p2p_pollset *s = &e->ps[0];
    ps_build(e, s);
    s->n = s->nspin = s->ipeers;
    s->ofi = 0;
    uint64_t epoch = e->epoch;
    pthread_mutex_unlock(&e->drive);
    pthread_mutex_lock(&e->mu);
    /* what was posted, severed or stopped since step took the posts: its
     * poke may be the one step drained */
    int now = e->stop || e->kick || e->post_head;
    e->kick = 0;
    e->listening = !now;
    pthread_mutex_unlock(&e->mu);
    if (now) {
        pthread_mutex_lock(&e->drive);
        return;
    }
    int n = poll(s->pf, (nfds_t)s->n, -1);
    pthread_mutex_lock(&e->mu);
    e->listening = 0;
    pthread_mutex_unlock(&e->mu);
    regain(e);
    if (e->epoch == epoch)
        ps_apply(e, s, n, 0);
}

/* Park while a caller drives. A caller that leaves with nothing
 * outstanding does not wake the thread (that would cost every blocking
 * exchange a wake-up): it looks every PARK_MS whether to go back to
 * answering connections. Returns 1 when the engine stops. */
static int park(p2p_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->parked = 1;
    while (!e->stop && (atomic_load(&e->waiters) || !e->kick)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += PARK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&e->idle, &e->mu, &until) == ETIMEDOUT &&
            !atomic_load(&e->waiters))
            break;
    }
    e->kick = 0;
    e->parked = 0;
    int stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    return stop;
}

/* The thread takes drive back after a sleep, or parks while a caller
 * drives. Queued on the mutex instead, it was neither parked nor
 * listening, so every caller's wait poked it (a pipe write), and every
 * release of drive woke it to find drive taken again by the next wait: a
 * thread woken out of listening as a 1 MiB ping-pong began stayed so for
 * the whole run (25,361 context switches in it, against 1,356 on the
 * other rank; 4-6 us more a round trip). The caller's pollset has
 * everything the thread's had. Drive held by no waiter (a progress call,
 * an inline send) is held briefly: the thread waits for it. */
static void regain(p2p_engine *e)
{
    while (pthread_mutex_trylock(&e->drive)) {
        if (!atomic_load(&e->waiters) || park(e)) {
            pthread_mutex_lock(&e->drive);
            return;
        }
    }
}

/* The thread moves messages while nobody waits for one: it parks while a
 * caller drives, and answers connections only while nothing is
 * outstanding (listen_idle). */
static void *engine(void *arg)
{
    p2p_engine *e = arg;
    int stop = 0;
    pthread_mutex_lock(&e->drive);
    while (!stop) {
        if (step(e, &stop) || stop)
            continue;
        if (!e->outstanding && !atomic_load(&e->waiters)) {
            listen_idle(e);
            continue;
        }
        if (atomic_load(&e->waiters)) {
            pthread_mutex_unlock(&e->drive);
            park(e);
            regain(e);
            continue;
        }
        p2p_pollset *s = &e->ps[0];
        ps_build(e, s);
        if (s->ofi && !ofi_may_sleep(e->ofi)) { /* its fd is armed only by this */
            sched_yield(); /* the provider has work only its queue reads move */
            continue;
        }
        /* declared under drive, for the whole sleep: its rings' peers ring */
        if (p2p_shm_sleep(e))
            continue;
        uint64_t epoch = e->epoch;
        double until = deadline(e);
        pthread_mutex_unlock(&e->drive);
        int n = ps_sleep(e, s, until, 1);
        regain(e);
        p2p_shm_wake(e);
        ps_apply(e, s, n, e->epoch != epoch);
    }
    p2p_fail_all(e, WEFT_EABORTED, "communicator destroyed with the message outstanding");
    pthread_mutex_unlock(&e->drive);
    return NULL;
}

static void poke(p2p_engine *e)
{
    if (write(e->wake[1], "w", 1) < 0) {
        /* full: a wake-up is pending anyway */
    }
    atomic_store(&e->poked, 1); /* after the byte: the reader drains it */
}

void p2p_wait(p2p_engine *e, weft_request *r)
{
    int stop = 0;
    pthread_mutex_lock(&e->mu);
    /* a thread that polls only for connections is not in the way */
    int first = atomic_fetch_add(&e->waiters, 1) == 0, parked = e->parked || e->listening;
    pthread_mutex_unlock(&e->mu);
    if (first && !parked)
        poke(e); /* a thread asleep in poll() gets out of the way */
    pthread_mutex_lock(&e->drive);
    e->epoch++;
    e->caller_drives = 1;
    if (!parked)
        p2p_shm_wake(e); /* the thread's flags: its peers would ring for every message */
    while (!atomic_load(&r->done) && !stop) {
        if (step(e, &stop) || stop || atomic_load(&r->done))
            continue;
        p2p_pollset *s = &e->ps[1];
        ps_build(e, s);
        /* while a receiver copies this caller's message, the caller has
         * nothing else to do: it looks as long as the copy should take.
         * The thread does not: its look would take the core from the
         * caller's computation. */
        if (s->spin_s > 0)
            s->spin_s += p2p_shm_copy_s(e);
        int n = ps_sleep(e, s, deadline(e), 0);
        ps_apply(e, s, n, 0);
    }
    int left = e->outstanding;
    e->caller_drives = 0;
    pthread_mutex_unlock(&e->drive);
    pthread_mutex_lock(&e->mu);
    int kick = atomic_fetch_sub(&e->waiters, 1) == 1 && left;
    parked = e->parked;
    if (kick) {
        e->kick = 1; /* what others posted still needs moving */
        pthread_cond_broadcast(&e->idle);
    }
    pthread_mutex_unlock(&e->mu);
    if (kick && !parked)
        poke(e); /* a thread that went to sleep in poll() meanwhile: its rings' flags may be down */
}

struct p2p_reg *p2p_registry(p2p_engine *e)
{
    return e->reg;
}

void p2p_progress(p2p_engine *e)
{
    int stop = 0;
    if (pthread_mutex_trylock(&e->drive))
        return; /* someone is driving already */
    e->epoch++;
    while (step(e, &stop) && !stop) {
    }
    int left = e->outstanding;
    pthread_mutex_unlock(&e->drive);
    if (!left)
        return;
    /* The step may have drained the poke of the post that made work
     * outstanding while the thread sat in listen_idle, which polls no
     * stream: without a new one the message would wait in its socket for
     * a look nobody takes (a test loop then spins until the timeout). */
    pthread_mutex_lock(&e->mu);
    int wake = e->listening || e->parked;
    if (wake) {
        e->kick = 1;
        pthread_cond_broadcast(&e->idle);
    }
    pthread_mutex_unlock(&e->mu);
    if (wake)
        poke(e);
}

int p2p_create(p2p_engine **out, weft_comm *c, const char *ip, char addr_out[SOCK_ADDR_MAX],
               char *err, size_t errlen)
{
    p2p_engine *e = calloc(1, sizeof *e);
    int rc;
    *out = NULL;
    if (!e)
        return WEFT_ENOMEM;
    e->c = c;
    e->rank = c->rank;
    e->size = c->size;
    e->wake[0] = e->wake[1] = -1;
    e->net.lfd = -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->drive, NULL);
    pthread_cond_init(&e->idle, NULL);
    size_t npf = 4 + TCP_PEND_MAX + 2 * (size_t)c->size;
    e->peer = calloc((size_t)c->size, sizeof *e->peer);
    e->reg = p2p_reg_new(c->size);
    for (int k = 0; k < 2; k++) {
        e->ps[k].pf = malloc(npf * sizeof *e->ps[k].pf);
        e->ps[k].peer = malloc(npf * sizeof *e->ps[k].peer);
        e->ps[k].dir = malloc(npf);
    }
    if (!e->peer || !e->reg || !e->ps[0].pf || !e->ps[0].peer || !e->ps[0].dir || !e->ps[1].pf ||
        !e->ps[1].peer || !e->ps[1].dir) {
        p2p_destroy(e);
        return WEFT_ENOMEM;
    }
    for (int q = 0; q < c->size; q++) {
        e->peer[q].wfd = -1;
        e->peer[q].writable = 1;
    }
    if (pipe2(e->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "point-to-point: pipe: %s", strerror(errno));
        e->wake[0] = e->wake[1] = -1;
        p2p_destroy(e);
        return WEFT_ESYS;
    }
    rc = tcp_net_init(&e->net, c->rank, c->size, c->id ^ P2P_SALT, ip, addr_out, err, errlen);
    if (rc) {
        p2p_destroy(e);
        return rc;
    }
    e->net.loglevel = c->loglevel;
    e->net.connect_timeout_s = c->connect_timeout_s;
    e->net.secret = c->secret;
    e->spin_s = c->spin_s;
    e->shm_on = c->params.p2p_shm && c->params.shm;
    e->share_min = (uint64_t)c->params.p2p_share;
    e->pid = (int)getpid();
    e->last = clock_now();
    e->next_probe = e->last + PROBE_S;
    *out = e;
    return 0;
}

void p2p_set_addr(p2p_engine *e, int peer, const char *addr)
{
    snprintf(e->net.addr[peer], SOCK_ADDR_MAX, "%s", addr);
}

static int start_locked(p2p_engine *e)
{
    if (e->started)
        return 0;
    e->spin_yields = comm_yields_for(e->c);
    if (pthread_create(&e->thr, NULL, engine, e))
        return WEFT_ESYS;
    e->started = 1;
    return 0;
}

int p2p_start(p2p_engine *e)
{
    pthread_mutex_lock(&e->mu);
    int rc = start_locked(e);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int p2p_post(p2p_engine *e, weft_request *r, int wake)
{
    pthread_mutex_lock(&e->mu);
    int rc = start_locked(e);
    if (!rc) {
        r->next = NULL;
        if (e->post_tail)
            e->post_tail->next = r;
        else
            e->post_head = r;
        e->post_tail = r;
    }
    pthread_mutex_unlock(&e->mu);
    if (rc || !wake)
        return rc;
    /* A small send that can move at once (room in its ring or socket)
     * moves here, on the caller's thread, and the engine's thread is not
     * woken for it: a wake-up is a pipe write, a futex and the thread's
     * own rounds, several us on this guest, where the message takes one.
     * Whatever is left wakes it, as does a post that finds another
     * driver (which may be about to leave without taking it). A large
     * send is the thread's from the start, so the caller computes while
     * it moves. */
    if (r->a.kind == WEFT_COLL_SEND && r->bytes <= INLINE_MAX &&
        !pthread_mutex_trylock(&e->drive)) {
        int stop = 0;
        e->epoch++;
        step(e, &stop);
        int left = e->outstanding;
        pthread_mutex_unlock(&e->drive);
        if (!left && !stop)
            return 0;
    }
    pthread_mutex_lock(&e->mu);
    e->kick = 1;
    pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->mu);
    poke(e);
    return 0;
}

void p2p_sever(p2p_engine *e, int code)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    if (!e->sever_rc)
        e->sever_rc = code ? code : WEFT_EPEER;
    if (!e->started) /* no thread owns the sockets yet */
        for (int q = 0; q < e->size; q++)
            tcp_drop(&e->net, q);
    e->kick = 1;
    pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->mu);
    poke(e);
}

void p2p_destroy(p2p_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    int running = e->started;
    pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->mu);
    if (running) {
        poke(e);
        pthread_join(e->thr, NULL);
    }
    /* posted after the thread's last look, or never taken */
    for (weft_request *r = e->post_head, *next; r; r = next) {
        next = r->next;
        snprintf(r->err, sizeof r->err, "communicator destroyed with the message outstanding");
        req_complete(r, WEFT_EABORTED);
    }
    p2p_free_parked(e);
    p2p_shm_close(e, running);
    p2p_reg_free_all(e->reg);
    p2p_net_close(e);
    tcp_net_close(&e->net);
    if (e->wake[0] >= 0) {
        close(e->wake[0]);
        close(e->wake[1]);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->drive);
    pthread_cond_destroy(&e->idle);
    free(e->peer);
    for (int k = 0; k < 2; k++) {
        free(e->ps[k].pf);
        free(e->ps[k].peer);
        free(e->ps[k].dir);
    }
    free(e);
}

/* A communicator alone has no engine, and nobody to copy to: plain
 * memory then (the choice is the communicator's for its whole life, so
 * weft_mem_free knows which). */
int weft_mem_alloc(weft_comm *c, size_t bytes, void **out)
{
    char err[200];
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    if (!c || c->magic != COMM_MAGIC || !bytes)
        return WEFT_EINVAL;
    if (!c->p2p) {
        if (posix_memalign(out, 64, bytes))
            return comm_fail(c, WEFT_ENOMEM, "weft_mem_alloc: out of memory for %zu bytes",
                             bytes);
        return 0;
    }
    int rc = p2p_reg_alloc(c->p2p->reg, bytes, out, err, sizeof err);
    return rc ? comm_fail(c, rc, "weft_mem_alloc: %s", err) : 0;
}

int weft_mem_free(weft_comm *c, void *p)
{
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    if (!p)
        return 0;
    if (!c->p2p) {
        free(p);
        return 0;
    }
    if (p2p_reg_release(c->p2p->reg, p))
        return comm_fail(c, WEFT_EINVAL, "weft_mem_free: %p is not from weft_mem_alloc on "
                                         "this communicator", p);
    return 0;
}
