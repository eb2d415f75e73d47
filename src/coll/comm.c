/* weft_comm_init: a rank joins its job through the rendezvous store.
 * Nothing here prints: a reason for failing is c->err's, and the log's
 * (at ERROR, which every WEFT_DEBUG level shows) for the caller that gets
 * no communicator to ask. */
#include "coll/comm.h"

#include "bootstrap/world.h"
#include "coll/comm_net.h"
#include "coll/comm_rdv.h"
#include "coll/comm_teardown.h"
#include "coll/exec/p2p.h"

#include "core/auth.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_WAIT_DEFAULT_S 60.0
#define COLL_TIMEOUT_DEFAULT_S 300.0

/* Who may connect: with a secret, only those who prove they know it
 * (core/auth.h). A build without libcrypto cannot check, and says so; it
 * runs a job that leaves this machine only with WEFT_INSECURE=1. */
static int security_policy(weft_comm *c, const weft_config *cfg, const char *host)
{
    int local = world_is_loopback(host), allow = c->params.insecure;
    if (cfg->world_size <= 1)
        return 0;
    if (!auth_compiled()) {
        if (c->rank == 0 || !local)
            log_msg(c->loglevel, LOG_WARN, c->rank,
                    "THIS BUILD OF WEFT HAS NO LIBCRYPTO: connections are NOT authenticated; "
                    "anyone who can reach this job's ports can join it or feed it data");
        if (!local && !allow) {
            return comm_fail(c, WEFT_ECONFIG,
                             "refusing a multi-host job (store at %s) without authentication; "
                             "rebuild with libcrypto (libssl-dev) or set WEFT_INSECURE=1",
                             host);
        }
        return 0;
    }
    if (cfg->job_secret && *cfg->job_secret) {
        if (!(c->secret = strdup(cfg->job_secret)))
            return comm_fail(c, WEFT_ENOMEM, "out of memory");
    } else if (!local && c->rank == 0) {
        log_msg(c->loglevel, LOG_WARN, c->rank,
                "no WEFT_JOB_SECRET: connections of this multi-host job are not "
                "authenticated (weftrun sets one)");
    }
    return 0;
}

/* The communicator cfg describes, nothing open yet: its parameters, its
 * timeouts, its id (from the store's address and the job's secret). */
static int comm_of_config(const weft_config *cfg, weft_comm **out)
{
    char err[256] = "";
    param_set *p = malloc(sizeof *p);
    weft_comm *c;
    int rc;
    *out = NULL;
    if (!p)
        return WEFT_ENOMEM;
    if ((rc = param_from_config(p, cfg, err, sizeof err)))
        log_msg(log_level_from_env(), LOG_ERROR, cfg->rank, "%s", err);
    c = rc ? NULL : comm_alloc(cfg->rank, cfg->world_size, p);
    free(p);
    if (rc)
        return rc;
    if (!c)
        return WEFT_ENOMEM;
    c->local_rank = cfg->local_rank;
    c->algo = cfg->algo;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : COLL_TIMEOUT_DEFAULT_S;
    c->connect_timeout_s = cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s
                                                      : STORE_WAIT_DEFAULT_S;
    c->loglevel = log_level_of(&c->params);
    param_log(&c->params, c->loglevel, c->rank);
    snprintf(c->store_host, sizeof c->store_host, "%s",
             cfg->master_addr && *cfg->master_addr ? cfg->master_addr : "127.0.0.1");
    c->store_port = cfg->master_port;
    *out = c;
    return 0;
}

static uint64_t world_id(const weft_config *cfg, const char *where)
{
    uint64_t id = comm_derive_id(0, "world", 5);
    id = comm_derive_id(id, where, strlen(where));
    if (cfg->job_secret)
        id = comm_derive_id(id, cfg->job_secret, strlen(cfg->job_secret));
    return id;
}

/* The rank that serves the store starts it. */
static int serve_store(weft_comm *c, const weft_config *cfg)
{
    char err[256] = "", ip[64];
    const char *host = c->store_host;
    int serve = cfg->host_store < 0 ? cfg->rank == 0 : cfg->host_store, rc;
    c->store_rank = cfg->host_store < 0 ? 0 : -1;
    if (!serve || cfg->world_size == 1)
        return 0;
    rc = store_server_start(&c->server, world_is_loopback(host) ? host : NULL,
                            cfg->master_port, NULL, c->secret, err, sizeof err);
    /* a store of this job (it knows the secret) already there: another
     * process took rank 0 first, and the claim at rendezvous names it */
    if (rc && cfg->host_store < 0 &&
        store_connect(&c->store, host, cfg->master_port,
                      c->connect_timeout_s < 5 ? c->connect_timeout_s : 5, c->secret, ip,
                      sizeof ip) == 0)
        rc = 0;
    return rc ? comm_fail(c, rc, "cannot serve the store: %s", err) : 0;
}

/* A singleton needs no store; it still gets a listening socket so that
 * splits and point-to-point code paths stay uniform. */
static int open_alone(weft_comm *c)
{
    char err[256] = "", addr[SOCK_ADDR_MAX];
    int rc = tcp_net_init(&c->net, 0, 1, c->id, "127.0.0.1", addr, err, sizeof err);
    if (rc)
        return comm_fail(c, rc, "%s", err);
    c->net.loglevel = c->loglevel;
    c->net.connect_timeout_s = c->connect_timeout_s;
    snprintf(c->net.addr[0], SOCK_ADDR_MAX, "%s", addr);
    return 0;
}

/* Join the store, open this rank's listeners on the address that reaches
 * it (or on ifname's), and meet the others there. */
static int open_joined(weft_comm *c, const char *ifname, const char *where)
{
    char err[256] = "", ip[64];
    rdv_record me;
    int rc;
    memset(&me, 0, sizeof me);
    if ((rc = comm_rdv_join(c, err, sizeof err)))
        return comm_fail(c, rc, "rendezvous: %s", err);
    if (ifname ? sock_iface_ip(ifname, ip, sizeof ip) : store_local_ip(c->store, ip, sizeof ip))
        return comm_fail(c, WEFT_ECONFIG, "no address on interface %s",
                         ifname ? ifname : "(route to the store)");
    if ((rc = tcp_net_init(&c->net, c->rank, c->size, c->id, ip, me.tcp, err, sizeof err)))
        return comm_fail(c, rc, "%s", err);
    c->net.loglevel = c->loglevel;
    c->net.connect_timeout_s = c->connect_timeout_s;
    c->net.secret = c->secret;
    if ((rc = p2p_create(&c->p2p, c, ip, me.p2p, err, sizeof err)))
        return comm_fail(c, rc, "%s", err);
    if ((rc = comm_net_open(c, ip, me.ofi)) || (rc = p2p_net_open(c->p2p, ip, me.p2p_ofi)))
        return rc;
    me.shm = c->shm_on != 0;
    if ((rc = comm_rdv_exchange(c, &me, where)))
        return rc;
    log_sub(c->loglevel, LOG_INFO, LOG_SUB_INIT, c->rank,
            "joined: rank %d of %d, data at %s, store %s, %d host(s), connections %s", c->rank,
            c->size, me.tcp, where, c->nhosts,
            c->secret ? "authenticated (HMAC-SHA256)" : "NOT authenticated");
    return 0;
}

int weft_comm_init(weft_comm **out, const weft_config *cfg)
{
    char where[300];
    weft_comm *c;
    int rc;
    if (!out || !cfg)
        return WEFT_EINVAL;
    *out = NULL;
    if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size ||
        cfg->master_port < 0 || cfg->master_port > 65535 || cfg->algo < 0 ||
        cfg->algo >= WEFT_ALGO_COUNT)
        return WEFT_EINVAL;
    if ((rc = comm_of_config(cfg, &c)))
        return rc;
    snprintf(where, sizeof where, "%s:%d", c->store_host, c->store_port);
    if (!(rc = security_policy(c, cfg, c->store_host))) {
        c->id = world_id(cfg, where);
        if (!(rc = serve_store(c, cfg)))
            rc = cfg->world_size == 1 ? open_alone(c) : open_joined(c, cfg->ifname, where);
        if (!rc && c->p2p && (rc = p2p_start(c->p2p)))
            comm_fail(c, rc, "point-to-point: cannot start its thread");
    }
    if (rc) {
        log_sub(c->loglevel, LOG_ERROR, LOG_SUB_INIT, c->rank, "%s", c->err);
        comm_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
