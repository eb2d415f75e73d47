/* Communicator life cycle: rendezvous through the store, split, destroy. */
#include "coll/comm.h"

#include "bootstrap/world.h"

#include "coll/algo.h"
#include "coll/comm_cluster.h"
#include "coll/comm_net.h"
#include "coll/exec/exec.h"
#include "coll/exec/live.h"
#include "coll/exec/p2p.h"

#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORE_WAIT_DEFAULT_S 60.0
#define COLL_TIMEOUT_DEFAULT_S 300.0
#define NOTICE_GRACE_MS 100
#define STORE_ANSWER_MAX_S 30.0 /* the store client's own default */

int comm_fail(weft_comm *c, int code, const char *fmt, ...)
{
    char msg[sizeof c->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(c->err, msg, sizeof msg);
    log_msg(c->loglevel, LOG_DEBUG, c->rank, "%s", msg);
    return code;
}

/* FNV-1a: a stable id that every member computes from the same inputs. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    if (!h)
        h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* WEFT_SPIN_US: how long a waiting rank polls (yielding) before it
 * sleeps; 0 sleeps at once. */
static double spin_from_env(const param_set *p)
{
    double us = p->spin_us;
    return us > 0 ? us * 1e-6 : 0;
}

static weft_comm *comm_alloc(int rank, int size, const param_set *p)
{
    weft_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->size = size;
    c->local_rank = -1;
    c->params = *p;
    c->spin_s = spin_from_env(p);
    c->spin_yields = -1;
    c->shm_on = p->shm;
    c->shm_bytes = shm_ring_bytes(p);
    c->net.lfd = -1;
    c->fail_peer = -1;
    c->store_rank = -1;
    c->host = calloc((size_t)size, sizeof *c->host);
    c->nhosts = 1;
    c->stage = calloc((size_t)size, sizeof *c->stage);
    sched_init(&c->sched);
    pthread_mutex_init(&c->amu, NULL);
    pthread_cond_init(&c->acv, NULL);
    pthread_cond_init(&c->dcv, NULL);
    if (pipe2(c->abort_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        c->abort_pipe[0] = c->abort_pipe[1] = -1;
    if (!c->host || !c->stage) {
        free(c->host);
        free(c->stage);
        free(c);
        return NULL;
    }
    return c;
}

static void comm_free(weft_comm *c)
{
    async_stop(c);
    p2p_destroy(c->p2p);
    c->p2p = NULL;
    async_free_retired(c);
    free(c->group);
    if (c->abort_pipe[0] >= 0) {
        close(c->abort_pipe[0]);
        close(c->abort_pipe[1]);
    }
    pthread_mutex_destroy(&c->amu);
    pthread_cond_destroy(&c->acv);
    pthread_cond_destroy(&c->dcv);
    exec_shm_reap(c, c->broken || atomic_load(&c->aborted));
    tcp_net_close(&c->net);
    ofi_close(c->ofi);
    shm_links_free(c->shm_out, c->size);
    shm_links_free(c->shm_in, c->size);
    coll_algo_free_all(c); /* the state each algorithm keeps (coll/algo_table.h) */
    coll_tuner_destroy(c->tune);
    live_free(c);
    if (c->watch)
        store_close(c->watch);
    if (c->store)
        store_close(c->store);
    free(c->secret);
    if (c->server)
        store_server_stop(c->server);
    for (int i = 0; c->stage && i < c->size; i++)
        free(c->stage[i]);
    free(c->stage);
    free(c->host);
    free(c->tmp);
    sched_free(&c->sched);
    c->magic = COMM_DEAD;
    free(c);
}

/* Connect this communicator to the store, and arm the watch on its
 * failure key. */
static int store_join(weft_comm *c, char *err, size_t errlen)
{
    char key[64];
    int rc;
    if (!c->store && (rc = store_connect(&c->store, c->store_host, c->store_port,
                                         c->connect_timeout_s, c->secret, err, errlen)))
        return rc;
    if ((rc = store_connect(&c->watch, c->store_host, c->store_port, c->connect_timeout_s,
                            c->secret, err, errlen)))
        return rc;
    /* the watch connection lives as long as this rank's membership: its
     * end tells the store, and every survivor in weft_comm_shrink, that
     * this rank is gone */
    world_gone_key(c->id, c->rank, key);
    if ((rc = store_hold(c->watch, key, "gone", 4))) {
        snprintf(err, errlen, "%s", store_error(c->watch));
        return rc;
    }
    world_fail_key(c->id, key);
    if ((rc = store_watch_arm(c->watch, key))) {
        snprintf(err, errlen, "%s", store_error(c->watch));
        return rc;
    }
    return 0;
}

/* Publish this rank's data addresses (collectives, point-to-point,
 * libfabric) and host, learn everyone else's. */
static int exchange_addresses(weft_comm *c, const char *addr, const char *p2p_addr,
                              const char *ofi_addr, const char *p2p_ofi_addr, const char *where)
{
    char rec[2 * SOCK_ADDR_MAX + 2 * OFI_ADDR_MAX + 80], me[64], err[200], **recs;
    char **ofi;
    const char **ids;
    int missing, rc;
    world_host_id(c->params.host_id, me);
    comm_cluster_tag(c, me);
    snprintf(rec, sizeof rec, "%s\n%s\n%s\n%s\n%d\n%s", addr, p2p_addr, me, ofi_addr, c->shm_on,
             p2p_ofi_addr);
    rc = world_exchange(c->store, c->id, c->rank, c->size, rec, c->connect_timeout_s, &recs,
                        &missing, err, sizeof err);
    if (rc == WEFT_ETIMEDOUT && missing >= 0)
        return comm_fail(c, rc,
                         "rendezvous: rank %d never arrived (waited %.0f s at the store %s)",
                         missing, c->connect_timeout_s, where);
    if (rc == WEFT_ECONFIG && c->server) /* the others find the same fault: let them read */
        world_linger(c->store, c->id, c->rank, c->size, c->connect_timeout_s);
    if (rc)
        return comm_fail(c, rc, "rendezvous: %s", err);
    ids = calloc((size_t)c->size, sizeof *ids);
    ofi = calloc((size_t)c->size, sizeof *ofi);
    if (!ids || !ofi) {
        free(ids);
        free(ofi);
        world_records_free(recs, c->size);
        return comm_fail(c, WEFT_ENOMEM, "rendezvous: out of memory");
    }
    /* "addr\np2p addr\nhost id\nofi addr\nshm\np2p ofi addr" */
    for (int i = 0; i < c->size; i++) {
        char *pa = strchr(recs[i], '\n'), *id = pa ? strchr(pa + 1, '\n') : NULL;
        if (pa)
            *pa++ = 0;
        if (id)
            *id++ = 0;
        if ((ofi[i] = id ? strchr(id, '\n') : NULL))
            *ofi[i]++ = 0;
        snprintf(c->net.addr[i], SOCK_ADDR_MAX, "%s", recs[i]);
        p2p_set_addr(c->p2p, i, pa ? pa : "");
        ids[i] = id ? id : "";
    }
    c->nhosts = world_number_hosts(ids, c->size, c->host);
    rc = comm_cluster_learn(c, ids);
    for (int i = 0; i < c->size && !rc; i++) {
        char *shm = ofi[i] ? strchr(ofi[i], '\n') : NULL;
        if (shm)
            *shm++ = 0;
        char *po = shm ? strchr(shm, '\n') : NULL;
        if (po)
            *po++ = 0;
        if (!(rc = comm_net_peer(c, i, ofi[i] ? ofi[i] : "", shm ? atoi(shm) : 1)))
            rc = p2p_net_peer(c->p2p, i, po ? po : "");
    }
    free(ids);
    free(ofi);
    world_records_free(recs, c->size);
    return rc;
}

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
            fprintf(stderr, "weft[%d] error: refusing a multi-host job (store at %s) without "
                            "authentication; rebuild with libcrypto (libssl-dev) or set "
                            "WEFT_INSECURE=1\n", c->rank, host);
            return WEFT_ECONFIG;
        }
        return 0;
    }
    if (cfg->job_secret && *cfg->job_secret) {
        if (!(c->secret = strdup(cfg->job_secret)))
            return WEFT_ENOMEM;
    } else if (!local && c->rank == 0) {
        log_msg(c->loglevel, LOG_WARN, c->rank,
                "no WEFT_JOB_SECRET: connections of this multi-host job are not "
                "authenticated (weftrun sets one)");
    }
    return 0;
}

int weft_comm_init(weft_comm **out, const weft_config *cfg)
{
    char err[256] = "", ip[64], addr[SOCK_ADDR_MAX], p2p_addr[SOCK_ADDR_MAX], where[128];
    char ofi_addr[OFI_ADDR_MAX], p2p_ofi_addr[OFI_ADDR_MAX];
    const char *host;
    weft_comm *c;
    param_set *p;
    int rc, serve;
    if (!out || !cfg)
        return WEFT_EINVAL;
    *out = NULL;
    if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size ||
        cfg->master_port < 0 || cfg->master_port > 65535 || cfg->algo < 0 ||
        cfg->algo >= WEFT_ALGO_COUNT)
        return WEFT_EINVAL;
    if (!(p = malloc(sizeof *p)))
        return WEFT_ENOMEM;
    if ((rc = param_from_config(p, cfg, err, sizeof err)))
        fprintf(stderr, "weft[%d] error: %s\n", cfg->rank, err);
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
    host = cfg->master_addr && *cfg->master_addr ? cfg->master_addr : "127.0.0.1";
    snprintf(where, sizeof where, "%s:%d", host, cfg->master_port);
    snprintf(c->store_host, sizeof c->store_host, "%s", host);
    c->store_port = cfg->master_port;
    if ((rc = security_policy(c, cfg, host))) {
        comm_free(c);
        return rc;
    }
    c->id = hash_bytes(0, "world", 5);
    c->id = hash_bytes(c->id, where, strlen(where));
    if (cfg->job_secret)
        c->id = hash_bytes(c->id, cfg->job_secret, strlen(cfg->job_secret));

    serve = cfg->host_store < 0 ? cfg->rank == 0 : cfg->host_store;
    c->store_rank = cfg->host_store < 0 ? 0 : -1;
    if (serve && cfg->world_size > 1) {
        rc = store_server_start(&c->server, world_is_loopback(host) ? host : NULL,
                                cfg->master_port, NULL, c->secret, err, sizeof err);
        /* a store of this job (it knows the secret) already there: another
         * process took rank 0 first, and the claim at rendezvous names it */
        if (rc && cfg->host_store < 0 &&
            store_connect(&c->store, host, cfg->master_port,
                          c->connect_timeout_s < 5 ? c->connect_timeout_s : 5, c->secret, ip,
                          sizeof ip) == 0)
            rc = 0;
        if (rc) {
            fprintf(stderr, "weft[%d] error: cannot serve the store: %s\n", c->rank, err);
            comm_free(c);
            return rc;
        }
    }
    if (cfg->world_size == 1) {
        /* a singleton needs no store; it still gets a listening socket so
         * that splits and point-to-point code paths stay uniform */
        rc = tcp_net_init(&c->net, 0, 1, c->id, "127.0.0.1", addr, err, sizeof err);
        if (rc) {
            comm_free(c);
            return rc;
        }
        c->net.loglevel = c->loglevel;
        c->net.connect_timeout_s = c->connect_timeout_s;
        snprintf(c->net.addr[0], SOCK_ADDR_MAX, "%s", addr);
        *out = c;
        return 0;
    }
    rc = store_join(c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft[%d] error: rendezvous: %s\n", c->rank, err);
        comm_free(c);
        return rc;
    }
    if (cfg->ifname)
        rc = sock_iface_ip(cfg->ifname, ip, sizeof ip);
    else
        rc = store_local_ip(c->store, ip, sizeof ip);
    if (rc) {
        fprintf(stderr, "weft[%d] error: no address on interface %s\n", c->rank,
                cfg->ifname ? cfg->ifname : "(route to the store)");
        comm_free(c);
        return WEFT_ECONFIG;
    }
    rc = tcp_net_init(&c->net, c->rank, c->size, c->id, ip, addr, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft[%d] error: %s\n", c->rank, err);
        comm_free(c);
        return rc;
    }
    c->net.loglevel = c->loglevel;
    c->net.connect_timeout_s = c->connect_timeout_s;
    c->net.secret = c->secret;
    if ((rc = p2p_create(&c->p2p, c, ip, p2p_addr, err, sizeof err))) {
        fprintf(stderr, "weft[%d] error: %s\n", c->rank, err);
        comm_free(c);
        return rc;
    }
    if ((rc = comm_net_open(c, ip, ofi_addr)) || (rc = p2p_net_open(c->p2p, ip, p2p_ofi_addr)) ||
        (rc = exchange_addresses(c, addr, p2p_addr, ofi_addr, p2p_ofi_addr, where))) {
        fprintf(stderr, "weft[%d] error: %s\n", c->rank, c->err);
        comm_free(c);
        return rc;
    }
    log_sub(c->loglevel, LOG_INFO, LOG_SUB_INIT, c->rank,
            "joined: rank %d of %d, data at %s, store %s, %d host(s), connections %s", c->rank,
            c->size, addr, where, c->nhosts,
            c->secret ? "authenticated (HMAC-SHA256)" : "NOT authenticated");
    *out = c;
    return 0;
}

int weft_comm_init_env(weft_comm **out)
{
    weft_config cfg;
    int rc;
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    weft_config_default(&cfg);
    if ((rc = weft_config_from_env(&cfg)))
        return rc;
    if (param_env(PARAM_join) && atoi(param_env(PARAM_join)) == 1)
        return weft_comm_join(&cfg, out); /* a replacement in an elastic job */
    return weft_comm_init(out, &cfg);
}

typedef struct {
    int32_t color, key;
} split_entry;

int comm_child_open(weft_comm *c, int rank, int n, uint64_t id, comm_addr *addr,
                    weft_comm **out)
{
    char ip[64], err[256];
    weft_comm *child;
    int rc, port;
    *out = NULL;
    if (!(child = comm_alloc(rank, n, &c->params)))
        return comm_fail(c, WEFT_ENOMEM, "new communicator: out of memory");
    child->id = id;
    child->local_rank = -1;
    child->algo = c->algo;
    child->timeout_s = c->timeout_s;
    child->connect_timeout_s = c->connect_timeout_s;
    child->loglevel = c->loglevel;
    child->may_lose = c->may_lose;
    /* listen where the parent listens: that address is known to work */
    if (sock_split_addr(c->net.addr[c->rank], ip, sizeof ip, &port)) {
        rc = comm_fail(c, WEFT_EPROTO, "new communicator: bad own address");
        goto fail;
    }
    rc = tcp_net_init(&child->net, rank, n, child->id, ip, addr->tcp, err, sizeof err);
    if (rc) {
        rc = comm_fail(c, rc, "new communicator: %s", err);
        goto fail;
    }
    child->net.loglevel = c->loglevel;
    child->net.connect_timeout_s = c->connect_timeout_s;
    if (c->secret && !(child->secret = strdup(c->secret))) {
        rc = comm_fail(c, WEFT_ENOMEM, "new communicator: out of memory");
        goto fail;
    }
    child->net.secret = child->secret;
    if (n > 1 && (rc = p2p_create(&child->p2p, child, ip, addr->p2p, err, sizeof err))) {
        rc = comm_fail(c, rc, "new communicator: %s", err);
        goto fail;
    }
    /* libfabric where the parent has it, with the same choice */
    addr->shm = child->shm_on;
    if (c->ofi && ((rc = comm_net_open(child, ip, addr->ofi)) ||
                   (child->p2p && (rc = p2p_net_open(child->p2p, ip, addr->p2p_ofi))))) {
        rc = comm_fail(c, rc, "new communicator: %s", child->err);
        goto fail;
    }
    memcpy(child->store_host, c->store_host, sizeof child->store_host);
    child->store_port = c->store_port;
    child->store_rank = -1; /* its own ranks need not include the store's host */
    if (n > 1 && (c->store || c->watch) && (rc = store_join(child, err, sizeof err))) {
        rc = comm_fail(c, rc, "new communicator: cannot reach the store: %s", err);
        goto fail;
    }
    *out = child;
    return 0;
fail:
    comm_free(child);
    return rc;
}

int comm_child_link(weft_comm *c, weft_comm *child, const int *members, const comm_addr *addrs)
{
    int rc = 0;
    child->nhosts = 0;
    for (int i = 0; i < child->size; i++) {
        int j = 0;
        memcpy(child->net.addr[i], addrs[members[i]].tcp, SOCK_ADDR_MAX);
        if (child->p2p)
            p2p_set_addr(child->p2p, i, addrs[members[i]].p2p);
        while (j < i && c->host[members[j]] != c->host[members[i]])
            j++;
        child->host[i] = j < i ? child->host[j] : child->nhosts++;
    }
    rc = comm_cluster_inherit(c, child, members);
    for (int i = 0; i < child->size && !rc; i++)
        if (!(rc = comm_net_peer(child, i, addrs[members[i]].ofi, addrs[members[i]].shm)))
            rc = p2p_net_peer(child->p2p, i, addrs[members[i]].p2p_ofi);
    if (rc)
        return comm_fail(c, rc, "new communicator: %s", child->err);
    return 0;
}

void comm_child_free(weft_comm *child) { comm_free(child); }


/* The library's own exchanges run the ring whatever algorithm the caller
 * forced: a forced algorithm may not apply to the layout (flat across
 * hosts), and these must work wherever the communicator does. */
static int own_allgather(weft_comm *c, const void *send, void *recv, size_t count,
                         weft_dtype t)
{
    weft_coll_args a = { .kind = WEFT_COLL_ALLGATHER, .send = send, .recv = recv,
                         .count = count, .dtype = t, .algo = WEFT_ALGO_RING };
    return weft_collective(c, &a);
}

/* Every member's addresses to every rank of c: the libfabric part (two
 * thirds of the record) only where some rank has one, since these bytes
 * cross whatever links c spans, the WAN's too. */
static int split_exchange(weft_comm *c, const comm_addr *mine, comm_addr *all)
{
    size_t head = offsetof(comm_addr, ofi), tail = sizeof *mine - head;
    char *buf = malloc((size_t)c->size * tail);
    int rc, any = 0;
    if (!buf)
        return comm_fail(c, WEFT_ENOMEM, "split: out of memory");
    if (!(rc = own_allgather(c, mine, buf, head, WEFT_U8)))
        for (int i = 0; i < c->size; i++) {
            memcpy(&all[i], buf + (size_t)i * head, head);
            any |= all[i].has_ofi;
        }
    if (!rc && any && !(rc = own_allgather(c, (const char *)mine + head, buf, tail, WEFT_U8)))
        for (int i = 0; i < c->size; i++)
            memcpy((char *)&all[i] + head, buf + (size_t)i * tail, tail);
    free(buf);
    return rc;
}

int weft_comm_split(weft_comm *c, int color, int key, weft_comm **out)
{
    split_entry me = { color < 0 ? -1 : color, key }, *all;
    comm_addr *addrs = NULL, addr;
    int *members = NULL, n = 0, newrank = -1, rc;
    weft_comm *child = NULL;
    if (!c || !out)
        return WEFT_EINVAL;
    *out = NULL;
    memset(&addr, 0, sizeof addr);
    all = malloc((size_t)c->size * sizeof *all);
    addrs = calloc((size_t)c->size, sizeof *addrs);
    members = malloc((size_t)c->size * sizeof *members);
    if (!all || !addrs || !members) {
        rc = comm_fail(c, WEFT_ENOMEM, "split: out of memory");
        goto out;
    }
    if ((rc = own_allgather(c, &me, all, 2, WEFT_I32)))
        goto out;
    /* members in (key, old rank) order: insertion sort keeps it stable */
    for (int i = 0; i < c->size; i++) {
        if (me.color < 0 || all[i].color != me.color)
            continue;
        int j = n++;
        while (j > 0 && all[members[j - 1]].key > all[i].key) {
            members[j] = members[j - 1];
            j--;
        }
        members[j] = i;
    }
    for (int i = 0; i < n; i++)
        if (members[i] == c->rank)
            newrank = i;
    if (me.color >= 0) {
        uint64_t salt[2] = { c->split_seq, (uint64_t)me.color };
        if ((rc = comm_child_open(c, newrank, n, hash_bytes(c->id, salt, sizeof salt), &addr,
                                  &child)))
            goto out;
    }
    c->split_seq++;
    addr.has_ofi = addr.ofi[0] != 0;
    if ((rc = split_exchange(c, &addr, addrs)))
        goto out;
    if (child) {
        if ((rc = comm_child_link(c, child, members, addrs)))
            goto out;
        *out = child;
        child = NULL;
    }
out:
    if (child)
        comm_free(child);
    free(all);
    free(addrs);
    free(members);
    return rc;
}

int weft_comm_rank(const weft_comm *c) { return c ? c->rank : WEFT_EINVAL; }
int weft_comm_size(const weft_comm *c) { return c ? c->size : WEFT_EINVAL; }
int weft_comm_local_rank(const weft_comm *c) { return c ? c->local_rank : WEFT_EINVAL; }
int weft_comm_host_count(const weft_comm *c) { return c ? c->nhosts : WEFT_EINVAL; }

int weft_comm_host_of(const weft_comm *c, int r)
{
    return c && r >= 0 && r < c->size ? c->host[r] : WEFT_EINVAL;
}
const char *weft_comm_error(const weft_comm *c) { return c ? c->err : "no communicator"; }

int weft_comm_set_algo(weft_comm *c, weft_algo a)
{
    if (!c || a < 0 || a >= WEFT_ALGO_COUNT)
        return WEFT_EINVAL;
    c->algo = a;
    return 0;
}

weft_algo weft_comm_algo(const weft_comm *c) { return c ? c->algo : WEFT_ALGO_AUTO; }

int weft_comm_abort(weft_comm *c)
{
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    atomic_store(&c->aborted, 1);
    if (c->abort_pipe[1] >= 0 && write(c->abort_pipe[1], "a", 1) < 0) {
        /* the pipe is full: a wake-up is already pending */
    }
    return 0;
}

void comm_sever(weft_comm *c)
{
    p2p_sever(c->p2p, c->broken ? c->broken : WEFT_EPEER);
    ofi_sever(c->ofi); /* nothing may land in a buffer after the error is reported */
    exec_shm_reap(c, 0);
    for (int i = 0; i < c->size; i++) {
        if (c->net.out_fd && c->net.out_fd[i] >= 0) {
            close(c->net.out_fd[i]);
            c->net.out_fd[i] = -1;
        }
        if (c->net.in_fd && c->net.in_fd[i] >= 0) {
            close(c->net.in_fd[i]);
            c->net.in_fd[i] = -1;
        }
    }
    /* after the close: a sender that makes a segment for this rank from
     * now on sees the end of stream and unlinks it itself */
    exec_shm_reap(c, 1);
}

int weft_comm_destroy(weft_comm *c)
{
    int rc = 0;
    if (!c)
        return 0;
    if (c->magic != COMM_MAGIC)
        return WEFT_EINVAL; /* destroyed already (while its memory lasts) */
    async_drain(c);
    /* Nobody may still be waiting on this rank's store or sockets. */
    if (c->size > 1 && !c->broken && !c->shrunk && !atomic_load(&c->aborted)) {
        weft_coll_args b = { .kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8,
                             .algo = WEFT_ALGO_RING }; /* as in own_allgather */
        int level = c->loglevel;
        if (c->may_lose && (level & 0xff) == LOG_WARN) /* a loss here is no news: */
            c->loglevel = (level & ~0xff) | LOG_ERROR; /* its INFO line below says it */
        rc = weft_collective(c, &b);
        c->loglevel = level;
        if (rc == WEFT_EPEER && c->may_lose) {
            /* the work is done; a member that died before it (a parameter
             * server's worker) leaves nothing undone here */
            log_sub(c->loglevel, LOG_INFO, LOG_SUB_INIT, c->rank,
                    "leaving without a member that is gone: %s", c->err);
            rc = 0;
        }
    }
    comm_free(c);
    return rc;
}

int comm_yields_for(const weft_comm *c)
{
    /* More ranks than cores on this host: a yield may hand the core to
     * each of the others before the awaited message can come, so the
     * spin lasts long enough for all of them to have had a turn. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = 0;
    for (int r = 0; r < c->size; r++)
        local += c->host[r] == c->host[c->rank];
    return cores > 0 && local > cores ? 2 * local : 0;
}

int comm_spin_yields(weft_comm *c)
{
    if (c->spin_yields < 0)
        c->spin_yields = comm_yields_for(c);
    return c->spin_yields;
}

int comm_watch_fd(const weft_comm *c)
{
    return c->watch ? store_fd(c->watch) : -1;
}

/* Take over another rank's notice as this rank's error. */
static int adopt(weft_comm *c, const void *v, size_t len, const frame_hdr *fp)
{
    fail_note note;
    const char *why;
    char d[200], msg[sizeof c->err];
    if (fail_note_decode(v, len, c->size, &note, &why))
        return 0;
    frame_describe(fp, d, sizeof d);
    if (note.witness == c->rank)
        snprintf(msg, sizeof msg, "%.400s", note.text);
    else
        snprintf(msg, sizeof msg, "%.300s [reported by rank %d; this rank (%d) was in %.150s]",
                 note.text, note.witness, c->rank, d);
    memcpy(c->err, msg, sizeof msg);
    c->fail_learned = 1;
    return note.code;
}

int comm_watch_fired(weft_comm *c, const frame_hdr *fp)
{
    void *v = NULL;
    size_t len = 0;
    int rc = store_watch_read(c->watch, &v, &len), code = 0;
    if (rc == 0)
        code = adopt(c, v, len, fp);
    free(v);
    if (rc != 0 || code == 0) {
        /* the store went away: that alone is no failure (its rank may be
         * done); the data connections will tell */
        store_close(c->watch);
        c->watch = NULL;
    }
    return code;
}

/* A notice on the watch socket, now or within NOTICE_GRACE_MS: adopt it. */
static int watch_now(weft_comm *c, const frame_hdr *fp, int *rc)
{
    struct pollfd pfd = { .fd = store_fd(c->watch), .events = POLLIN };
    int code, n;
    do
        n = poll(&pfd, 1, NOTICE_GRACE_MS);
    while (n < 0 && errno == EINTR);
    if (n == 1 && (code = comm_watch_fired(c, fp))) {
        *rc = code;
        return 1;
    }
    return 0;
}

/* The store did not answer the failure notice in time: its host is
 * stopped or overwhelmed, and the other ranks cannot learn of this
 * failure from it. Each says so itself: no notice can name the one that
 * froze for them. */
static void store_silent(weft_comm *c)
{
    char msg[sizeof c->err], host[48];
    size_t n = strlen(c->err);
    if (c->store_rank >= 0)
        snprintf(host, sizeof host, "rank %d", c->store_rank);
    else
        snprintf(host, sizeof host, "the host of %.24s", c->store_host);
    snprintf(msg, sizeof msg, "%.*s; and the store (served by %s at %.64s:%d) did not answer "
             "for %.0f s either: %s is stopped or overwhelmed",
             (int)(n < 300 ? n : 300), c->err, host, c->store_host, c->store_port,
             c->timeout_s < STORE_ANSWER_MAX_S ? c->timeout_s : STORE_ANSWER_MAX_S, host);
    memcpy(c->err, msg, sizeof msg);
}

int comm_failed(weft_comm *c, int rc, const frame_hdr *fp)
{
    char key[64], d[200];
    if (!c->fail_learned && (rc == WEFT_EPEER || rc == WEFT_ETIMEDOUT) && c->watch) {
        /* a lost peer or a timeout is often the echo of a failure
         * elsewhere: a notice that reached this rank explains it better
         * (and the store may be gone by now: its rank is done). A
         * mismatch or garbage seen here is first-hand and stays. */
        struct pollfd pfd = { .fd = store_fd(c->watch), .events = POLLIN };
        int code, n;
        /* a peer that let go may have done so because of a notice on its
         * way here too: give it a moment */
        do
            n = poll(&pfd, 1, rc == WEFT_EPEER ? NOTICE_GRACE_MS : 0);
        while (n < 0 && errno == EINTR);
        if (n == 1 && (code = comm_watch_fired(c, fp)))
            rc = code;
    }
    if (c->store) /* the notice path waits on the store no longer than a collective may */
        store_set_answer_timeout(c->store, c->timeout_s < STORE_ANSWER_MAX_S
                                               ? c->timeout_s : STORE_ANSWER_MAX_S);
    /* a store already found not answering (its process stopped) would
     * only keep this rank for another timeout: every rank says so itself */
    int silent = live_store_silent(c);
    if (!c->fail_learned && rc == WEFT_EPEER && c->store_rank >= 0 &&
        c->fail_peer != c->store_rank && c->fail_peer >= 0) {
        /* a peer that let go may have timed out on the store's stopped
         * host, and no notice can come from there: ask, briefly */
        if (!silent)
            silent = live_store_check(c);
        if (silent) {
            char why[200], msg[sizeof c->err];
            frame_describe(fp, d, sizeof d);
            live_store_why(c, why, sizeof why);
            snprintf(msg, sizeof msg, "%s; then rank %d let go of this rank (%d) in %.150s", why,
                     c->fail_peer, c->rank, d);
            memcpy(c->err, msg, sizeof msg);
            c->fail_peer = c->store_rank;
            rc = WEFT_ETIMEDOUT;
        }
    }
    if (!c->fail_learned && c->store && !silent) {
        int posted = 0;
        world_fail_key(c->id, key);
        if (rc == WEFT_EPEER && c->fail_peer >= 0) {
            /* the peer may only have severed its links after failing
             * itself: then its notice is already there and says why */
            void *v = NULL;
            size_t len;
            int g = store_get(c->store, key, &v, &len, 0);
            if (store_broken(c->store) == WEFT_ETIMEDOUT) {
                /* no answer: nothing to learn there; the notice below says so */
            } else if (g == 0) {
                int code = adopt(c, v, len, fp);
                if (code) {
                    rc = code;
                    posted = 1;
                }
            } else if (g != WEFT_ETIMEDOUT && c->watch && watch_now(c, fp, &rc)) {
                /* the store is gone, but the notice reached this rank just
                 * before (its rank exits once everyone has been told) */
                posted = 1;
            } else if (g != WEFT_ETIMEDOUT && c->store_rank >= 0 &&
                       c->fail_peer != c->store_rank) {
                /* no store: the rank that served it is gone, and that is
                 * why this peer let go */
                char msg[sizeof c->err];
                frame_describe(fp, d, sizeof d);
                snprintf(msg, sizeof msg,
                         "rank %d died (the store it served is gone; then rank %d let go of "
                         "this rank (%d) in %.150s)", c->store_rank, c->fail_peer, c->rank, d);
                memcpy(c->err, msg, sizeof msg);
                posted = 1;
            }
            free(v);
        }
        if (!posted) {
            fail_note note = { .code = rc, .witness = c->rank };
            note.culprit = rc == WEFT_EABORTED ? c->rank : c->fail_peer;
            snprintf(note.text, sizeof note.text, "%s", c->err);
            if (world_notice_post(c->store, c->id, &note))
                log_msg(c->loglevel, LOG_INFO, c->rank,
                        "could not tell the other ranks through the store: %s",
                        store_error(c->store));
        }
    }
    if (c->store && store_broken(c->store) == WEFT_ETIMEDOUT)
        store_silent(c);
    if (c->server && c->store && !silent) {
        /* This process serves the store and may exit as soon as this
         * returns: one more round trip lets the server finish handing the
         * notice to every waiting rank first. */
        int exists;
        store_check(c->store, "weft/flush", &exists);
    }
    log_sub(c->loglevel, LOG_WARN, LOG_SUB_COLL, c->rank, "%s: %s", weft_strerror(rc), c->err);
    if ((c->loglevel & 0xff) >= LOG_WARN)
        flight_dump(&c->fl, 2, c->rank, (c->loglevel & 0xff) >= LOG_INFO ? 0 : 4);
    comm_sever(c);
    return rc;
}

int weft_comm_dump(const weft_comm *c, int fd)
{
    if (!c || c->magic != COMM_MAGIC || fd < 0)
        return WEFT_EINVAL;
    return flight_dump(&c->fl, fd, c->rank, 0);
}

int comm_exchange(weft_comm *c, const comm_addr *a)
{
    char where[300];
    snprintf(where, sizeof where, "%s:%d", c->store_host, c->store_port);
    return exchange_addresses(c, a->tcp, a->p2p, a->ofi, a->p2p_ofi, where);
}

uint64_t comm_derive_id(uint64_t id, const void *salt, size_t n) { return hash_bytes(id, salt, n); }
