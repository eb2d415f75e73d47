/* Communicator life cycle: rendezvous through the store, split, destroy. */
#include "bootstrap/comm.h"

#include "core/clock.h"
#include "core/log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORE_WAIT_DEFAULT_S 60.0
#define COLL_TIMEOUT_DEFAULT_S 300.0

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

static weft_comm *comm_alloc(int rank, int size)
{
    weft_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->rank = rank;
    c->size = size;
    c->local_rank = -1;
    c->net.lfd = -1;
    c->host = calloc((size_t)size, sizeof *c->host);
    c->nhosts = 1;
    c->p2p_sent = calloc((size_t)size, sizeof *c->p2p_sent);
    c->p2p_recvd = calloc((size_t)size, sizeof *c->p2p_recvd);
    c->stage = calloc((size_t)size, sizeof *c->stage);
    sched_init(&c->sched);
    pthread_mutex_init(&c->amu, NULL);
    pthread_cond_init(&c->acv, NULL);
    pthread_cond_init(&c->dcv, NULL);
    if (pipe2(c->abort_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        c->abort_pipe[0] = c->abort_pipe[1] = -1;
    if (!c->host || !c->p2p_sent || !c->p2p_recvd || !c->stage) {
        free(c->host);
        free(c->p2p_sent);
        free(c->p2p_recvd);
        free(c->stage);
        free(c);
        return NULL;
    }
    return c;
}

/* Renumber host ids in order of first appearance (0, 1, ...). */
static void number_hosts(weft_comm *c, char (*ids)[64])
{
    c->nhosts = 0;
    for (int i = 0; i < c->size; i++) {
        int j = 0;
        while (j < i && strcmp(ids[i], ids[j]))
            j++;
        c->host[i] = j < i ? c->host[j] : c->nhosts++;
    }
}

static void comm_free(weft_comm *c)
{
    async_stop(c);
    if (c->abort_pipe[0] >= 0) {
        close(c->abort_pipe[0]);
        close(c->abort_pipe[1]);
    }
    pthread_mutex_destroy(&c->amu);
    pthread_cond_destroy(&c->acv);
    pthread_cond_destroy(&c->dcv);
    tcp_net_close(&c->net);
    if (c->store)
        store_close(c->store);
    if (c->server)
        store_server_stop(c->server);
    for (int i = 0; c->stage && i < c->size; i++)
        free(c->stage[i]);
    free(c->stage);
    free(c->host);
    free(c->p2p_sent);
    free(c->p2p_recvd);
    free(c->tmp);
    sched_free(&c->sched);
    free(c);
}

static int is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "localhost") || !strcmp(host, "::1");
}

/* This host's identity: WEFT_HOST_ID (lets one machine stand for several
 * hosts in tests), else the host name. */
static void host_id(char out[64])
{
    const char *v = getenv("WEFT_HOST_ID");
    if (v && *v)
        snprintf(out, 64, "%s", v);
    else if (gethostname(out, 64) != 0)
        snprintf(out, 64, "localhost");
    out[63] = 0;
}

/* Publish this rank's data address and host, learn everyone else's. */
static int exchange_addresses(weft_comm *c, const char *addr, const char *where)
{
    char key[128], val[SOCK_ADDR_MAX + 72], me[64], (*ids)[64];
    double deadline = clock_now() + c->connect_timeout_s;
    int rc;
    host_id(me);
    snprintf(val, sizeof val, "%s\n%s", addr, me);
    snprintf(key, sizeof key, "weft/%016llx/addr/%d", (unsigned long long)c->id, c->rank);
    if ((rc = store_set(c->store, key, val, strlen(val) + 1)))
        return comm_fail(c, rc, "rendezvous: %s", store_error(c->store));
    if (!(ids = calloc((size_t)c->size, sizeof *ids)))
        return comm_fail(c, WEFT_ENOMEM, "rendezvous: out of memory");
    for (int i = 0; i < c->size; i++) {
        void *v;
        size_t len;
        double left = deadline - clock_now();
        snprintf(key, sizeof key, "weft/%016llx/addr/%d", (unsigned long long)c->id, i);
        rc = store_get(c->store, key, &v, &len, left > 0 ? left : 0);
        if (rc == WEFT_ETIMEDOUT)
            rc = comm_fail(c, rc,
                           "rendezvous: rank %d never arrived (waited %.0f s at the store %s)",
                           i, c->connect_timeout_s, where);
        else if (rc)
            rc = comm_fail(c, rc, "rendezvous: %s", store_error(c->store));
        if (rc) {
            free(ids);
            return rc;
        }
        char *nl = strchr(v, '\n');
        if (nl)
            *nl++ = 0;
        snprintf(c->net.addr[i], SOCK_ADDR_MAX, "%s", (char *)v);
        snprintf(ids[i], sizeof ids[i], "%s", nl ? nl : "");
        free(v);
    }
    number_hosts(c, ids);
    free(ids);
    return 0;
}

int weft_comm_init(weft_comm **out, const weft_config *cfg)
{
    char err[256] = "", ip[64], addr[SOCK_ADDR_MAX], where[128];
    const char *host;
    weft_comm *c;
    int rc, serve;
    if (!out || !cfg)
        return WEFT_EINVAL;
    *out = NULL;
    if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size ||
        cfg->master_port < 0 || cfg->master_port > 65535 || cfg->algo < 0 ||
        cfg->algo >= WEFT_ALGO_COUNT)
        return WEFT_EINVAL;
    if (!(c = comm_alloc(cfg->rank, cfg->world_size)))
        return WEFT_ENOMEM;
    c->local_rank = cfg->local_rank;
    c->algo = cfg->algo;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : COLL_TIMEOUT_DEFAULT_S;
    c->connect_timeout_s = cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s
                                                      : STORE_WAIT_DEFAULT_S;
    c->loglevel = log_level_from_env();
    host = cfg->master_addr && *cfg->master_addr ? cfg->master_addr : "127.0.0.1";
    snprintf(where, sizeof where, "%s:%d", host, cfg->master_port);
    c->id = hash_bytes(0, "world", 5);
    c->id = hash_bytes(c->id, where, strlen(where));
    if (cfg->job_secret)
        c->id = hash_bytes(c->id, cfg->job_secret, strlen(cfg->job_secret));

    serve = cfg->host_store < 0 ? cfg->rank == 0 : cfg->host_store;
    if (serve && cfg->world_size > 1) {
        rc = store_server_start(&c->server, is_loopback(host) ? host : NULL,
                                cfg->master_port, NULL, err, sizeof err);
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
    rc = store_connect(&c->store, host, cfg->master_port, c->connect_timeout_s, err,
                       sizeof err);
    if (rc) {
        fprintf(stderr, "weft[%d] error: rendezvous: %s\n", c->rank, err);
        comm_free(c);
        return rc;
    }
    if (cfg->ifname)
        rc = sock_iface_ip(cfg->ifname, ip, sizeof ip);
    else
        rc = sock_local_ip(store_fd(c->store), ip, sizeof ip);
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
    if ((rc = exchange_addresses(c, addr, where))) {
        fprintf(stderr, "weft[%d] error: %s\n", c->rank, c->err);
        comm_free(c);
        return rc;
    }
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
    return weft_comm_init(out, &cfg);
}

typedef struct {
    int32_t color, key;
} split_entry;

int weft_comm_split(weft_comm *c, int color, int key, weft_comm **out)
{
    split_entry me = { color < 0 ? -1 : color, key }, *all;
    char (*addrs)[SOCK_ADDR_MAX] = NULL, addr[SOCK_ADDR_MAX] = "", ip[64], err[256];
    int *members = NULL, n = 0, newrank = -1, rc;
    weft_comm *child = NULL;
    if (!c || !out)
        return WEFT_EINVAL;
    *out = NULL;
    all = malloc((size_t)c->size * sizeof *all);
    addrs = calloc((size_t)c->size, sizeof *addrs);
    members = malloc((size_t)c->size * sizeof *members);
    if (!all || !addrs || !members) {
        rc = comm_fail(c, WEFT_ENOMEM, "split: out of memory");
        goto out;
    }
    if ((rc = weft_allgather(c, &me, all, 2, WEFT_I32)))
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
        if (!(child = comm_alloc(newrank, n))) {
            rc = comm_fail(c, WEFT_ENOMEM, "split: out of memory");
            goto out;
        }
        child->id = hash_bytes(c->id, salt, sizeof salt);
        child->local_rank = -1;
        child->algo = c->algo;
        child->timeout_s = c->timeout_s;
        child->connect_timeout_s = c->connect_timeout_s;
        child->loglevel = c->loglevel;
        /* listen where the parent listens: that address is known to work */
        if (sock_split_addr(c->net.addr[c->rank], ip, sizeof ip, &rc)) {
            rc = comm_fail(c, WEFT_EPROTO, "split: bad own address");
            goto out;
        }
        rc = tcp_net_init(&child->net, newrank, n, child->id, ip, addr, err, sizeof err);
        if (rc) {
            rc = comm_fail(c, rc, "split: %s", err);
            goto out;
        }
        child->net.loglevel = c->loglevel;
        child->net.connect_timeout_s = c->connect_timeout_s;
    }
    c->split_seq++;
    if ((rc = weft_allgather(c, addr, addrs, SOCK_ADDR_MAX, WEFT_U8)))
        goto out;
    if (child) {
        child->nhosts = 0;
        for (int i = 0; i < n; i++) {
            int j = 0;
            memcpy(child->net.addr[i], addrs[members[i]], SOCK_ADDR_MAX);
            while (j < i && c->host[members[j]] != c->host[members[i]])
                j++;
            child->host[i] = j < i ? child->host[j] : child->nhosts++;
        }
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
    if (!c)
        return WEFT_EINVAL;
    atomic_store(&c->aborted, 1);
    if (c->abort_pipe[1] >= 0 && write(c->abort_pipe[1], "a", 1) < 0) {
        /* the pipe is full: a wake-up is already pending */
    }
    return 0;
}

void comm_sever(weft_comm *c)
{
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
}

int weft_comm_destroy(weft_comm *c)
{
    int rc = 0;
    if (!c)
        return 0;
    async_drain(c);
    /* Nobody may still be waiting on this rank's store or sockets. */
    if (c->size > 1 && !c->broken && !atomic_load(&c->aborted))
        rc = weft_barrier(c);
    comm_free(c);
    return rc;
}
