/* The server's loop: one thread, one poll over the listening socket,
 * unproven connections and the workers' links. It adopts workers as they
 * connect, feeds their requests to ps_rules.c, counts out workers that die
 * or hang (so the others never wait forever), syncs the log before
 * replies leave, and checkpoints every ckpt_interval updates. */
#include "ps/ps_server.h"

#include "core/clock.h"
#include "core/log.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FLUSH_S 5.0

static void worker_gone(weft_ps *ps, int w, const char *why)
{
    ps_server *sv = ps->srvst;
    ps_wk *k = &sv->wk[w];
    if (k->state == WK_DEAD)
        return;
    if (k->state != WK_BYE) { /* after its goodbye a worker may simply go */
        k->state = WK_DEAD;
        k->died_at = clock_now();
        log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
                "parameter server %d: worker %d (rank %d) died (%s); continuing with the %d "
                "live worker(s): steps average over the workers that pushed",
                ps->rank, w, w, why, ps_wk_live_count(ps));
    }
    k->barrier = 0;
    sv->sent += k->l.sent;
    sv->recvd += k->l.recvd;
    ps_link_close(&k->l);
}

static int req_dest(void *arg, ps_link *l, const ps_msg *m, void **dst, char *e, size_t elen)
{
    if (m->type > PS_REQ_LAST) {
        snprintf(e, elen, "sent a reply (%s) to a server", ps_msg_name(m->type));
        return WEFT_EPROTO;
    }
    if (m->len) {
        if (!(*dst = malloc(m->len)))
            return WEFT_ENOMEM;
        l->owns_dst = 1;
    }
    return 0;
}

static int req_done(void *arg, ps_link *l, const ps_msg *m, void *payload)
{
    weft_ps *ps = arg;
    int rc = ps_rules_handle(ps, l->peer, m, payload);
    if (rc == PARK)
        return ps_rules_park(ps, l->peer, m, payload);
    return rc;
}

/* A worker connects: for the first time, again after its connection broke
 * (the same process), or as a restarted process of a worker counted out
 * as dead, which is re-admitted: from now on BSP steps wait for it and
 * SSP counts its clock, starting from the slowest live worker's. */
static void admit(weft_ps *ps, int w, int fd)
{
    ps_server *sv = ps->srvst;
    ps_wk *k = &sv->wk[w];
    int prev = k->state;
    ps_msg h = ps_msg_make(PS_HELLO);
    if (k->l.fd >= 0) { /* its old connection, not yet seen to close */
        sv->sent += k->l.sent;
        sv->recvd += k->l.recvd;
        ps_link_close(&k->l);
    }
    k->barrier = 0;
    ps_link_init(&k->l, fd, w);
    k->gen++;
    k->state = WK_LIVE;
    k->heard = clock_now();
    if (prev == WK_DEAD) {
        int64_t m = INT64_MAX;
        for (int v = 0; v < ps->nworkers; v++)
            if (v != w && ps_wk_live(&sv->wk[v]) && sv->wk[v].clock < m)
                m = sv->wk[v].clock;
        if (m != INT64_MAX)
            k->clock = m;
        log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
                "parameter server %d: worker %d (rank %d) re-admitted %.2f s after it was "
                "counted out (it connected again); its clock: %lld; %d live worker(s)",
                ps->rank, w, w, k->heard - k->died_at, (long long)k->clock,
                ps_wk_live_count(ps));
    } else if (prev == WK_LIVE) {
        log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
                "parameter server %d: worker %d (rank %d) connected again at clock %lld",
                ps->rank, w, w, (long long)k->clock);
    }
    h.id = sv->incarnation;
    h.total = sv->logfd >= 0;
    h.clock = k->clock;
    ps_link_send(&k->l, &h, NULL, NULL);
}

/* New connections: a worker's, or a stranger's (dropped). */
static void adopt_connections(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    for (int r = 0; r < ps->world_size; r++) {
        int fd = ps->net.in_fd[r];
        if (fd < 0)
            continue;
        ps->net.in_fd[r] = -1;
        if (r >= ps->nworkers || sv->wk[r].state == WK_BYE) {
            log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
                    "parameter server %d: dropped a connection from rank %d (%s)", ps->rank, r,
                    r >= ps->nworkers ? "not a worker" : "it has shut down");
            close(fd);
            continue;
        }
        admit(ps, r, fd);
    }
}

static int release_held(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    int rc = 0;
    while (sv->held) {
        ps_wait *h = sv->held;
        sv->held = h->next;
        if (ps_wk_reachable(&sv->wk[h->w]) && h->gen == sv->wk[h->w].gen)
            rc = rc ? rc : ps_link_send(&sv->wk[h->w].l, &h->m, h->payload, h->payload);
        else
            free(h->payload);
        free(h);
    }
    sv->held_tail = &sv->held;
    return rc;
}

/* A worker that others wait on and that has said nothing for the dead
 * wait is declared dead: a hung worker must not stall the job forever. */
static void check_silent(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    int n = ps->nworkers, blocked = sv->waits != NULL;
    char *waiting = calloc((size_t)n, 1);
    double now = clock_now();
    if (!waiting)
        return;
    for (ps_wait *p = sv->waits; p; p = p->next)
        waiting[p->w] = 1;
    for (size_t b = 0; b < sv->nbuckets; b++)
        for (ps_chunk *c = sv->bucket[b]; c; c = c->hnext)
            for (int w = 0; c->contrib && w < n; w++)
                if (c->push_id[w]) {
                    waiting[w] = 1;
                    blocked = 1;
                }
    for (int w = 0; w < n; w++)
        if (sv->wk[w].barrier) {
            waiting[w] = 1;
            blocked = 1;
        }
    for (int w = 0; blocked && w < n; w++) {
        ps_wk *k = &sv->wk[w];
        char why[128];
        if (!ps_wk_live(k) || waiting[w] || now - k->heard < ps->cfg.dead_worker_wait_s)
            continue;
        snprintf(why, sizeof why, "%s for %.0f s while other workers wait on it",
                 k->state == WK_EXPECTED ? "never connected" : "silent", now - k->heard);
        worker_gone(ps, w, why);
    }
    free(waiting);
}

/* No worker left. When none of them shut down cleanly they all died, and
 * a restarted one may yet come back: wait dead_worker_wait_s for it. */
static int all_gone(const weft_ps *ps)
{
    double last = 0;
    int bye = 0;
    for (int w = 0; w < ps->nworkers; w++) {
        const ps_wk *k = &ps->srvst->wk[w];
        /* a resumed server does not wait for a worker that never came
         * back once the others are done: it may have finished before the
         * crash */
        if (k->state == WK_LIVE || (k->state == WK_EXPECTED && !ps->srvst->resumed))
            return 0;
        bye |= k->state == WK_BYE;
        last = k->died_at > last ? k->died_at : last;
    }
    return bye || (last > 0 && clock_now() >= last + ps->cfg.dead_worker_wait_s);
}

int ps_server_init(weft_ps *ps)
{
    ps_server *sv = calloc(1, sizeof *sv);
    double now = clock_now();
    if (!sv)
        return WEFT_ENOMEM;
    ps->srvst = sv;
    sv->logfd = -1;
    sv->held_tail = &sv->held;
    /* any value that differs between this process and its restarts */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sv->incarnation = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                      ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)sv;
    if (!sv->incarnation)
        sv->incarnation = 1;
    sv->nbuckets = 4096;
    sv->bucket = calloc(sv->nbuckets, sizeof *sv->bucket);
    sv->wk = calloc((size_t)ps->nworkers, sizeof *sv->wk);
    if (!sv->bucket || !sv->wk)
        return WEFT_ENOMEM;
    for (int w = 0; w < ps->nworkers; w++) {
        sv->wk[w].l.fd = -1;
        sv->wk[w].heard = now;
    }
    int rc = ps_ckpt_recover(ps);
    sv->resumed = sv->nchunks > 0;
    return rc;
}

void ps_server_free(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    if (!sv)
        return;
    for (int w = 0; sv->wk && w < ps->nworkers; w++)
        ps_link_close(&sv->wk[w].l);
    while (sv->waits) {
        ps_wait *p = sv->waits;
        sv->waits = p->next;
        free(p->payload);
        free(p);
    }
    while (sv->held) {
        ps_wait *p = sv->held;
        sv->held = p->next;
        free(p->payload);
        free(p);
    }
    ps_ckpt_close(sv);
    ps_table_free(sv);
    free(sv->wk);
    free(sv);
    ps->srvst = NULL;
}

uint64_t ps_server_bytes(const weft_ps *ps, uint64_t *recvd)
{
    const ps_server *sv = ps->srvst;
    uint64_t s = 0;
    if (!sv)
        return 0;
    s = sv->sent;
    *recvd += sv->recvd;
    for (int w = 0; w < ps->nworkers; w++) {
        s += sv->wk[w].l.sent;
        *recvd += sv->wk[w].l.recvd;
    }
    return s;
}

static int step(weft_ps *ps, int ms)
{
    ps_server *sv = ps->srvst;
    int n = ps->nworkers, np = 0, rc;
    struct pollfd pf[n + 1 + TCP_PEND_MAX];
    int who[n + 1 + TCP_PEND_MAX];
    char e[256];
    pf[np] = (struct pollfd){ .fd = ps->net.lfd, .events = POLLIN };
    who[np++] = -1;
    np += tcp_pending(&ps->net, pf + np, TCP_PEND_MAX);
    for (int i = 1; i < np; i++)
        who[i] = -2;
    for (int w = 0; w < n; w++) {
        ps_wk *k = &sv->wk[w];
        if (k->state != WK_LIVE && !(k->state == WK_BYE && k->l.fd >= 0))
            continue;
        short ev = (short)(POLLIN | (ps_link_pending(&k->l) ? POLLOUT : 0));
        pf[np] = (struct pollfd){ .fd = k->l.fd, .events = ev };
        who[np++] = w;
    }
    if (poll(pf, (nfds_t)np, ms) < 0)
        return 0;
    for (int i = 0; i < np; i++) {
        if (!pf[i].revents)
            continue;
        if (who[i] == -1) {
            while ((rc = tcp_accept_one(&ps->net, e, sizeof e)) > 0)
                ;
            if (rc < 0)
                return ps_fail(ps, rc, "server %d: %s", ps->rank, e);
            continue;
        }
        if (who[i] == -2) {
            tcp_check_pending(&ps->net);
            continue;
        }
        int w = who[i];
        ps_wk *k = &sv->wk[w];
        e[0] = 0;
        rc = 0;
        if (pf[i].revents & POLLOUT)
            rc = ps_link_flush(&k->l, e, sizeof e);
        if (!rc && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            k->heard = clock_now();
            rc = ps_link_read(&k->l, req_dest, req_done, ps, e, sizeof e);
        }
        if (rc == WEFT_EPEER || rc == WEFT_EPROTO)
            worker_gone(ps, w, e);
        else if (rc)
            return rc;
    }
    tcp_check_pending(&ps->net);
    adopt_connections(ps);
    if ((rc = ps_rules_retry(ps)))
        return rc;
    check_silent(ps);
    if ((rc = ps_rules_retry(ps)) || (rc = ps_ckpt_sync(ps)) || (rc = release_held(ps)))
        return rc;
    if (sv->logfd >= 0 && sv->since_ckpt >= ps->cfg.ckpt_interval && (rc = ps_ckpt_save(ps)))
        return rc;
    for (int w = 0; w < n; w++) {
        ps_wk *k = &sv->wk[w];
        if (k->l.fd >= 0 && ps_link_pending(&k->l) && ps_link_flush(&k->l, e, sizeof e))
            worker_gone(ps, w, e);
    }
    return 0;
}

int weft_ps_serve(weft_ps *ps)
{
    ps_server *sv;
    int rc, clean = 0;
    double until;
    if (!ps || ps->role != WEFT_PS_ROLE_SERVER)
        return ps ? ps_fail(ps, WEFT_EINVAL, "weft_ps_serve on a worker") : WEFT_EINVAL;
    if (ps->srvst)
        return ps_fail(ps, WEFT_EINVAL, "weft_ps_serve called twice");
    if ((rc = ps_server_init(ps)))
        return rc;
    sv = ps->srvst;
    log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
            "parameter server %d serving %d worker(s), %s%s", ps->rank, ps->nworkers,
            ps->cfg.consistency == WEFT_PS_BSP   ? "BSP"
            : ps->cfg.consistency == WEFT_PS_SSP ? "SSP"
                                                 : "ASP",
            sv->logfd >= 0 ? ", durable" : "");
    while (!all_gone(ps)) {
        int blocked = sv->waits != NULL;
        if ((rc = step(ps, blocked ? 200 : 1000)))
            return rc;
    }
    /* let the last acknowledgements out */
    until = clock_now() + EXIT_FLUSH_S;
    for (;;) {
        int left = 0;
        for (int w = 0; w < ps->nworkers; w++)
            left |= sv->wk[w].l.fd >= 0 && ps_link_pending(&sv->wk[w].l);
        if (!left || clock_now() > until)
            break;
        step(ps, 50);
    }
    for (int w = 0; w < ps->nworkers; w++)
        clean |= sv->wk[w].state == WK_BYE;
    if (sv->logfd >= 0 && sv->since_ckpt > 0)
        ps_ckpt_save(ps);
    if (!clean)
        return ps_fail(ps, WEFT_EPEER, "parameter server %d: every worker died", ps->rank);
    log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
            "parameter server %d done", ps->rank);
    return 0;
}
