/* Growing a running communicator: a new process asks to join
 * (weft_comm_join) and is admitted when the members next call
 * weft_comm_grow, at a step boundary of theirs, as torchrun's rendezvous
 * admits a new node at the next round. All of it goes through the job's
 * store:
 *   joiner:  t = ADD ticket 1; SET req/t; wait for admit/t = "id size rank"
 *   members: rank 0 reads and broadcasts admitted; all wait for
 *            req/admitted+want when the caller wants that many; rank 0
 *            reads ticket, broadcasts how many join, SETs admit/t for each
 *            and ADDs them to admitted;
 *   all:     the new communicator (members keep their ranks, joiners follow
 *            in ticket order) rendezvous as weft_comm_init does.
 * A joiner's ticket is a place in a queue: one that dies while waiting is
 * admitted anyway and the new communicator's rendezvous times out, the
 * members' grow failing with WEFT_ETIMEDOUT naming it (shrink then). The
 * keys are the job's, not a communicator's: grow one communicator per
 * job (the one its training runs on), and give each job its own store. */
#include "coll/comm_child.h"
#include "coll/comm_rdv.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOIN "weft/elastic/join/"

static void join_key(char key[96], const char *what, int64_t t)
{
    snprintf(key, 96, JOIN "%s/%" PRId64, what, t);
}

/* The new communicator's rendezvous, as weft_comm_init's: in the store,
 * the child's own (comm_child_plan's exchange). */
static int grow_exchange(void *arg, weft_comm *c, weft_comm *child, const comm_addr *mine,
                         comm_addr *all)
{
    char where[300];
    rdv_record r;
    int rc;
    (void)arg;
    (void)all;
    memset(&r, 0, sizeof r);
    memcpy(r.tcp, mine->tcp, sizeof r.tcp);
    memcpy(r.p2p, mine->p2p, sizeof r.p2p);
    memcpy(r.ofi, mine->ofi, sizeof r.ofi);
    memcpy(r.p2p_ofi, mine->p2p_ofi, sizeof r.p2p_ofi);
    r.shm = mine->shm != 0;
    snprintf(where, sizeof where, "%s:%d", child->store_host, child->store_port);
    if ((rc = comm_rdv_exchange(child, &r, where)))
        return comm_fail(c, rc, "grow: %s", child->err);
    return 0;
}

/* The new communicator, this rank being rank of n. */
static int grow_build(weft_comm *c, int rank, int n, uint64_t id, weft_comm **out)
{
    comm_child_plan plan = { .exchange = grow_exchange, .what = "grow" };
    return comm_child_make(c, rank, n, id, &plan, out);
}

/* How many wait beyond those admitted, and the first one's ticket, after
 * waiting (every member, up to the rendezvous timeout: a member waiting in
 * a collective instead would time out sooner) until want of them do. */
static int count_waiting(weft_comm *c, int want, int64_t v[2])
{
    int64_t admitted = 0, tickets = 0;
    int rc = 0, st;
    if (c->rank == 0 && (rc = store_add(c->store, JOIN "admitted", 0, &admitted)))
        admitted = -1; /* the others hear of it through the broadcast */
    if ((st = weft_broadcast(c, &admitted, 1, WEFT_I64, 0)))
        return st;
    if (admitted < 0)
        return comm_fail(c, WEFT_EPEER, "grow: rank 0 could not read the store");
    if (want > 0) {
        char key[96];
        void *val;
        join_key(key, "req", admitted + want);
        if ((rc = store_get(c->store, key, &val, NULL, c->connect_timeout_s)))
            return comm_fail(c, rc, "grow: %d joiner(s) wanted, not there within %.0f s: %s",
                             want, c->connect_timeout_s, store_error(c->store));
        free(val);
    }
    if (c->rank == 0 && (rc = store_add(c->store, JOIN "ticket", 0, &tickets)))
        tickets = -1;
    v[0] = tickets < 0 ? -1 : tickets - admitted;
    v[1] = admitted + 1;
    if ((st = weft_broadcast(c, v, 2, WEFT_I64, 0)))
        return st;
    if (v[0] < 0)
        return comm_fail(c, WEFT_EPEER, "grow: rank 0 could not read the store");
    return 0;
}

int weft_comm_grow(weft_comm *c, int want, weft_comm **out)
{
    int64_t v[2] = { 0, 0 }; /* joining, first ticket */
    int rc = 0, n;
    uint64_t id;
    double t0 = clock_now();
    if (!c || !out || want < 0 || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *out = NULL;
    if (!c->store)
        return comm_fail(c, WEFT_ENOTSUP, "grow: a communicator without a store (a "
                                          "singleton) cannot be joined");
    if ((rc = count_waiting(c, want, v)))
        return rc;
    if (v[0] == 0)
        return 0;
    n = c->size + (int)v[0];
    id = comm_derive_id(c->id, v, sizeof v);
    if (c->rank == 0) {
        for (int64_t i = 0; i < v[0] && !rc; i++) {
            char key[96], val[64];
            join_key(key, "admit", v[1] + i);
            snprintf(val, sizeof val, "%016" PRIx64 " %d %d", id, n, c->size + (int)i);
            rc = store_set(c->store, key, val, strlen(val) + 1);
        }
        if (!rc)
            rc = store_add(c->store, JOIN "admitted", v[0], NULL);
        if (rc)
            return comm_fail(c, rc, "grow: %s", store_error(c->store));
    }
    if ((rc = grow_build(c, c->rank, n, id, out)))
        return rc;
    if (c->server) /* the store this rank serves lives as long as the larger one */
        (*out)->server = c->server, c->server = NULL;
    (*out)->store_rank = c->store_rank;
    log_msg(c->loglevel, c->rank == 0 ? LOG_WARN : LOG_INFO, c->rank,
            "grow: %d rank(s) joined as rank %d..%d; %d ranks now (%.3f s)", (int)v[0],
            c->size, n - 1, n, clock_now() - t0);
    return 0;
}

/* A communicator of this process alone that can reach the job's store and
 * listens where the store's peers can reach it: the parent of the one it
 * joins. */
static int seed_open(const weft_config *cfg, weft_comm **out)
{
    weft_config one = *cfg;
    const char *secret = cfg->job_secret;
    char err[256], ip[64];
    weft_comm *s;
    int rc;
    one.rank = 0;
    one.world_size = 1;
    one.host_store = 0;
    if ((rc = weft_comm_init(&s, &one)))
        return rc;
    if (!secret || !*secret)
        secret = s->params.job_secret;
    if (secret && *secret && !(s->secret = strdup(secret))) {
        weft_comm_destroy(s);
        return WEFT_ENOMEM;
    }
    if ((rc = store_connect(&s->store, s->store_host, s->store_port, s->connect_timeout_s,
                            s->secret, err, sizeof err)) ||
        (rc = store_local_ip(s->store, ip, sizeof ip))) {
        log_msg(s->loglevel, LOG_ERROR, -1, "join: cannot reach the job's store at %s:%d: %s",
                s->store_host, s->store_port, rc == WEFT_ESYS ? "no local address" : err);
        weft_comm_destroy(s);
        return rc;
    }
    /* new listeners open on this address's host (comm_child_make); its
     * port is the singleton's own and stays unused */
    char host[64];
    int port;
    if (sock_split_addr(s->net.addr[0], host, sizeof host, &port) == 0)
        snprintf(s->net.addr[0], SOCK_ADDR_MAX, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
    *out = s;
    return 0;
}

int weft_comm_join(const weft_config *cfg, weft_comm **out)
{
    weft_comm *s;
    char key[96], *val = NULL;
    unsigned long long id;
    int64_t t;
    int rc, n, rank;
    if (!cfg || !out)
        return WEFT_EINVAL;
    *out = NULL;
    if ((rc = seed_open(cfg, &s)))
        return rc;
    if ((rc = store_add(s->store, JOIN "ticket", 1, &t)))
        goto store_fail;
    join_key(key, "req", t);
    if ((rc = store_set(s->store, key, "1", 2)))
        goto store_fail;
    join_key(key, "admit", t);
    if ((rc = store_get(s->store, key, (void **)&val, NULL, s->connect_timeout_s))) {
        if (rc == WEFT_ETIMEDOUT)
            log_msg(s->loglevel, LOG_ERROR, -1,
                    "join: not admitted within %.0f s (no weft_comm_grow on the job's members)",
                    s->connect_timeout_s);
        goto store_fail;
    }
    if (sscanf(val, "%llx %d %d", &id, &n, &rank) != 3 || n < 2 || rank < 0 || rank >= n) {
        log_msg(s->loglevel, LOG_ERROR, -1, "join: malformed admission '%.60s'", val);
        rc = WEFT_EPROTO;
        goto out;
    }
    if ((rc = grow_build(s, rank, n, (uint64_t)id, out)))
        log_msg(s->loglevel, LOG_ERROR, rank, "join: %s", s->err);
    goto out;
store_fail:
    if (rc != WEFT_ETIMEDOUT)
        log_msg(s->loglevel, LOG_ERROR, -1, "join: %s", store_error(s->store));
out:
    free(val);
    weft_comm_destroy(s);
    return rc;
}
