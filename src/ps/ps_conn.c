/* A worker's connections to the servers: the first connection, and the
 * way back after one breaks. A lost connection is not yet a lost server:
 * the worker looks up the server's address in the store again (a
 * restarted server publishes a new one) and retries with backoff for up
 * to timeout_s. On the new connection the server's hello tells whether it
 * is the same process or a restarted one; a restarted server is accepted
 * only when its updates are durable (ckpt_dir). The worker then sends its
 * clock and every request message the server had not answered: what a
 * server took in before it crashed is durable and it drops the repeat
 * (per-worker push sequence numbers), the rest it applies now. */
#include "ps/ps.h"

#include "core/clock.h"
#include "core/log.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BACKOFF_MIN_S 0.05
#define BACKOFF_MAX_S 1.0
#define ATTEMPT_MAX_S 2.0 /* one handshake attempt, at most */

int ps_server_world_rank(const weft_ps *ps, int s)
{
    return ps->nworkers + s;
}

static int handshake(weft_ps *ps, int s, double deadline, char *e, size_t elen)
{
    int peer = ps_server_world_rank(ps, s), fd, rc;
    for (;;) {
        rc = tcp_out(&ps->net, peer, &fd, e, elen);
        if (rc == 1) {
            /* Keep most of a push in this process's queue rather than in
             * the kernel's: a pull request can then go out next to its
             * chunk's gradient instead of behind all of them (the kernel
             * doubles this; ample for the window of a fast link). */
            int sndbuf = ps->params.ps_sndbuf; /* WEFT_PS_SNDBUF; 0: the kernel's own */
            if (sndbuf > 0)
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
            ps_link_init(&ps->srv[s], fd, s);
            ps->net.out_fd[peer] = -1; /* the link owns it now */
            ps->sx[s].hello = 0;
            return 0;
        }
        if (rc < 0)
            return rc;
        if (clock_now() >= deadline) {
            snprintf(e, elen, "no answer to the handshake");
            return WEFT_ETIMEDOUT;
        }
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        int ms = clock_ms_until(deadline);
        poll(&pf, 1, ms < 200 ? ms : 200);
    }
}

/* The server's hello is the first thing on a new connection. */
static int await_hello(weft_ps *ps, int s, double deadline, char *e, size_t elen)
{
    while (!ps->sx[s].hello) {
        struct pollfd pf = { .fd = ps->srv[s].fd, .events = POLLIN };
        int ms = clock_ms_until(deadline), rc;
        if (ms <= 0) {
            snprintf(e, elen, "connected, but no hello from it");
            return WEFT_ETIMEDOUT;
        }
        if (poll(&pf, 1, ms) <= 0)
            continue;
        if ((rc = ps_worker_read(ps, s, e, elen)))
            return rc;
    }
    return 0;
}

/* Address from the store, handshake, hello; 0 or the error of this try. */
static int connect_one(weft_ps *ps, int s, double deadline, char *e, size_t elen)
{
    int peer = ps_server_world_rank(ps, s), rc;
    char key[64];
    void *v = NULL;
    size_t len = 0;
    double left = deadline - clock_now();
    if (!ps->store &&
        (rc = store_connect(&ps->store, ps->store_host, ps->store_port, left > 0 ? left : 0,
                            ps->secret, e, elen)))
        return WEFT_ETIMEDOUT;
    snprintf(key, sizeof key, "ps/addr/%d", s);
    rc = store_get(ps->store, key, &v, &len, left > 0 ? left : 0);
    if (rc) {
        snprintf(e, elen, "it never published its address (%s)", store_error(ps->store));
        /* a broken store connection is made again on the next try */
        store_close(ps->store);
        ps->store = NULL;
        return WEFT_ETIMEDOUT;
    }
    snprintf(ps->net.addr[peer], SOCK_ADDR_MAX, "%.*s", (int)len, (char *)v);
    free(v);
    e[0] = 0;
    if ((rc = handshake(ps, s, deadline, e, elen)) == 0 &&
        (rc = await_hello(ps, s, deadline, e, elen)) != 0) {
        ps->sent += ps->srv[s].sent;
        ps->recvd += ps->srv[s].recvd;
        ps_link_close(&ps->srv[s]);
    }
    if (rc)
        tcp_drop(&ps->net, peer);
    return rc;
}

int ps_worker_connect(weft_ps *ps)
{
    double deadline = clock_now() + ps->connect_timeout_s;
    int k = ps->nservers;
    char e[256];
    if (!ps->srv) {
        if (!(ps->srv = calloc((size_t)k, sizeof *ps->srv)))
            return WEFT_ENOMEM;
        for (int s = 0; s < k; s++)
            ps->srv[s].fd = -1;
    }
    if (!ps->srv_rc && !(ps->srv_rc = calloc((size_t)k, sizeof *ps->srv_rc)))
        return WEFT_ENOMEM;
    if (!ps->sx && !(ps->sx = calloc((size_t)k, sizeof *ps->sx)))
        return WEFT_ENOMEM;
    for (int s = 0; s < k; s++) {
        int rc;
        if (ps->srv[s].fd >= 0)
            continue; /* connected by an earlier, partly failed attempt */
        /* refused: the server may be restarting and about to publish a
         * new address */
        while ((rc = connect_one(ps, s, deadline, e, sizeof e)) != 0) {
            if (rc != WEFT_EPEER || clock_now() >= deadline)
                return ps_fail(ps, rc == WEFT_ETIMEDOUT ? WEFT_EPEER : rc,
                               "cannot connect to parameter server %d (rank %d) at %s: %s", s,
                               ps_server_world_rank(ps, s),
                               ps->net.addr[ps_server_world_rank(ps, s)], e);
            usleep(100 * 1000);
        }
        ps->sx[s].inc = ps->sx[s].inc ? ps->sx[s].inc : ps->sx[s].newinc;
    }
    log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
            "worker %d connected to %d parameter server(s)", ps->rank, k);
    return 0;
}

void ps_srv_down(weft_ps *ps, int s, int rc, const char *why)
{
    ps_srv *x = &ps->sx[s];
    /* only a durable server is worth waiting for (a restarted one without
     * its state would be refused); a goodbye acknowledged (srv_rc 1) or a
     * protocol error ends it too */
    if (ps->srv_rc[s] || rc != WEFT_EPEER || !x->inc || !x->durable || ps->bye) {
        ps_server_lost(ps, s, rc, why);
        return;
    }
    ps->sent += ps->srv[s].sent;
    ps->recvd += ps->srv[s].recvd;
    ps_link_close(&ps->srv[s]);
    tcp_drop(&ps->net, ps_server_world_rank(ps, s));
    x->lost_at = clock_now();
    x->next_try = x->lost_at;
    x->backoff = BACKOFF_MIN_S;
    x->last[0] = 0;
    snprintf(x->why, sizeof x->why, "%s", why);
    log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
            "worker %d: connection to parameter server %d (rank %d) lost (%s) at clock %lld; "
            "reconnecting for up to %.0f s",
            ps->rank, s, ps_server_world_rank(ps, s), why, (long long)ps->clock, ps->timeout_s);
}

static int by_id(const void *a, const void *b)
{
    const weft_ps_request *x = *(weft_ps_request *const *)a, *y = *(weft_ps_request *const *)b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* On a new connection: every unanswered message in the order the
 * requests were made, then the clock. Pushes before the clock, as on the
 * first connection: a restarted server must not take this worker to be
 * at its clock before the pushes of the clocks before it are in (SSP). */
static int resend(weft_ps *ps, int s, int *count)
{
    int n = 0, rc = 0;
    ps_msg m = ps_msg_make(PS_CLOCK);
    m.clock = ps->clock;
    for (weft_ps_request *r = ps->reqs; r; r = r->next)
        n++;
    weft_ps_request **v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return WEFT_ENOMEM;
    n = 0;
    for (weft_ps_request *r = ps->reqs; r; r = r->next)
        v[n++] = r;
    qsort(v, (size_t)n, sizeof *v, by_id);
    *count = 0;
    for (int i = 0; i < n && !rc; i++)
        for (int j = 0; j < v[i]->nparts && !rc; j++) {
            ps_part *p = &v[i]->parts[j];
            if (p->s != s || p->done)
                continue;
            rc = ps_link_send(&ps->srv[s], &p->hdr, p->data, NULL);
            ++*count;
        }
    free(v);
    return rc ? rc : ps_link_send(&ps->srv[s], &m, NULL, NULL);
}

void ps_srv_retry(weft_ps *ps, int s)
{
    ps_srv *x = &ps->sx[s];
    double now = clock_now(), lost_at = x->lost_at, end = lost_at + ps->timeout_s, deadline;
    char e[256], why[400];
    int rc, count = 0;
    if (now < x->next_try)
        return;
    if (now >= end) {
        snprintf(why, sizeof why,
                 "%.150s; it did not come back within %.0f s (last try: %.150s)", x->why,
                 ps->timeout_s, x->last[0] ? x->last : "no answer");
        x->lost_at = 0;
        ps_server_lost(ps, s, WEFT_EPEER, why);
        return;
    }
    deadline = now + ATTEMPT_MAX_S < end ? now + ATTEMPT_MAX_S : end;
    rc = connect_one(ps, s, deadline, e, sizeof e);
    if (rc) {
        /* refused, or whatever answers at the old address: the server may
         * still be on its way back */
        if (rc == WEFT_ENOMEM) {
            x->lost_at = 0;
            ps_server_lost(ps, s, rc, e);
            return;
        }
        snprintf(x->last, sizeof x->last, "%s", e);
        x->next_try = clock_now() + x->backoff;
        x->backoff = x->backoff * 2 < BACKOFF_MAX_S ? x->backoff * 2 : BACKOFF_MAX_S;
        return;
    }
    int restarted = x->newinc != x->inc;
    x->lost_at = 0;
    if (restarted && !x->durable) {
        ps_server_lost(ps, s, WEFT_EPEER,
                       "restarted without a checkpoint directory: its parameters are lost");
        return;
    }
    x->inc = x->newinc;
    if ((rc = resend(ps, s, &count))) {
        ps_server_lost(ps, s, rc, "cannot queue messages to send again");
        return;
    }
    log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
            "worker %d: reconnected to parameter server %d (rank %d)%s %.2f s after the "
            "connection was lost, at clock %lld; %d unanswered message(s) sent again",
            ps->rank, s, ps_server_world_rank(ps, s),
            restarted ? ", which restarted from its checkpoint," : "", clock_now() - lost_at,
            (long long)ps->clock, count);
}
