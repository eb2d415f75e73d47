/* Configuration, roles and rendezvous: who is a worker and who a server,
 * and how workers find the servers (their addresses in the job's store). */
#include "ps/ps.h"

#include "coll/comm.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void weft_ps_config_default(weft_ps_config *c)
{
    memset(c, 0, sizeof *c);
    c->role = WEFT_PS_ROLE_AUTO;
    c->consistency = WEFT_PS_BSP;
    weft_optim_config_default(&c->optim, WEFT_OPTIM_SGD);
    c->lr.kind = WEFT_LR_CONSTANT;
    c->lr.lr = 0.1f;
    c->dead_worker_wait_s = 60;
    c->ckpt_interval = 1000;
}

int weft_ps_consistency_parse(const char *s, weft_ps_config *c)
{
    char *end;
    long v;
    if (!s || !c)
        return WEFT_EINVAL;
    if (!strcasecmp(s, "bsp")) {
        c->consistency = WEFT_PS_BSP;
        c->staleness = 0;
        return 0;
    }
    if (!strcasecmp(s, "asp")) {
        c->consistency = WEFT_PS_ASP;
        return 0;
    }
    if (strncasecmp(s, "ssp:", 4))
        return WEFT_EINVAL;
    v = strtol(s + 4, &end, 10);
    if (end == s + 4 || *end || v < 0 || v > 1000000)
        return WEFT_EINVAL;
    c->consistency = WEFT_PS_SSP;
    c->staleness = (int32_t)v;
    return 0;
}

int ps_fail(weft_ps *ps, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err, sizeof ps->err, fmt, ap);
    va_end(ap);
    log_sub(ps->loglevel, LOG_ERROR, LOG_SUB_NET, ps->world_rank, "parameter server: %s",
            ps->err);
    return code;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    if (!h)
        h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Rank, size, store and secret: from the world communicator or the
 * environment. */
static int locate(weft_ps *ps, weft_comm *world)
{
    if (world) {
        ps->world_rank = world->rank;
        ps->world_size = world->size;
        snprintf(ps->store_host, sizeof ps->store_host, "%s", world->store_host);
        ps->store_port = world->store_port;
        if (world->secret && !(ps->secret = strdup(world->secret)))
            return WEFT_ENOMEM;
        ps->connect_timeout_s = world->connect_timeout_s;
        return 0;
    }
    const param_set *p = &ps->params;
    char why[300];
    /* as weft_config_from_env: both or neither (a one-rank job) */
    if (param_check_job(p, why, sizeof why))
        return ps_fail(ps, WEFT_ECONFIG, "%s", why);
    ps->world_rank = p->rank;
    ps->world_size = p->world_size;
    snprintf(ps->store_host, sizeof ps->store_host, "%.255s", p->master_addr);
    ps->store_port = p->master_port;
    /* as the communicator: a build without libcrypto cannot authenticate
     * (the store it talks to does not either) */
    if (*p->job_secret && auth_compiled() && !(ps->secret = strdup(p->job_secret)))
        return WEFT_ENOMEM;
    ps->connect_timeout_s = p->connect_timeout;
    return 0;
}

static int roles(weft_ps *ps)
{
    int want = ps->cfg.role, w = ps->cfg.num_workers;
    if (w <= 0)
        w = ps->params.num_workers > 0 ? ps->params.num_workers : ps->world_size - 1;
    if (w < 1 || w >= ps->world_size)
        return ps_fail(ps, WEFT_ECONFIG,
                       "%d workers in a world of %d leaves no server or no worker "
                       "(WEFT_NUM_WORKERS; launch with weftrun -n W --servers K)",
                       w, ps->world_size);
    ps->nworkers = w;
    ps->nservers = ps->world_size - w;
    if (want == WEFT_PS_ROLE_AUTO)
        want = ps->params.role; /* the table's words are in weft_ps_role_kind's order */
    ps->role = ps->world_rank < w ? WEFT_PS_ROLE_WORKER : WEFT_PS_ROLE_SERVER;
    if (want != WEFT_PS_ROLE_AUTO && want != ps->role)
        return ps_fail(ps, WEFT_ECONFIG,
                       "rank %d is asked to be a %s, but with %d workers ranks 0..%d are "
                       "workers and the rest servers",
                       ps->world_rank, want == WEFT_PS_ROLE_SERVER ? "server" : "worker", w,
                       w - 1);
    ps->rank = ps->role == WEFT_PS_ROLE_WORKER ? ps->world_rank : ps->world_rank - w;
    return 0;
}

static int check_config(weft_ps *ps)
{
    weft_ps_config *c = &ps->cfg;
    if (c->consistency < WEFT_PS_BSP || c->consistency > WEFT_PS_ASP || c->staleness < 0)
        return ps_fail(ps, WEFT_EINVAL, "bad consistency %d (staleness %d)", c->consistency,
                       c->staleness);
    if (c->optim.kind == 0)
        weft_optim_config_default(&c->optim, WEFT_OPTIM_SGD);
    if (c->optim.kind != WEFT_OPTIM_SGD && c->optim.kind != WEFT_OPTIM_ADAMW)
        return ps_fail(ps, WEFT_EINVAL, "unknown optimiser kind %d", c->optim.kind);
    if (c->dead_worker_wait_s <= 0)
        c->dead_worker_wait_s = 60;
    if (c->ckpt_interval <= 0)
        c->ckpt_interval = 1000;
    if (c->chunk_min <= 0)
        c->chunk_min = PS_DEFAULT_CHUNK_MIN;
    if (c->chunk_max <= 0)
        c->chunk_max = PS_DEFAULT_CHUNK_MAX;
    if (c->chunk_max > (int32_t)PS_MAX_CHUNK || c->chunk_min > c->chunk_max)
        return ps_fail(ps, WEFT_EINVAL, "chunk sizes %d..%d out of range (1..%u)", c->chunk_min,
                       c->chunk_max, PS_MAX_CHUNK);
    ps->timeout_s = c->timeout_s;
    if (ps->timeout_s <= 0)
        ps->timeout_s = ps->params.timeout;
    if (c->ckpt_dir) {
        if (!(ps->ckpt_dir_buf = strdup(c->ckpt_dir)))
            return WEFT_ENOMEM;
        c->ckpt_dir = ps->ckpt_dir_buf;
    }
    return 0;
}

/* Listen on the address that reaches the store (as the communicator does). */
static int listen_here(weft_ps *ps, store_client *st, weft_comm *world)
{
    char ip[64], e[256] = "";
    int rc;
    if (world && world->net.addr && world->net.addr[world->rank][0]) {
        int port;
        if (sock_split_addr(world->net.addr[world->rank], ip, sizeof ip, &port))
            snprintf(ip, sizeof ip, "127.0.0.1");
    } else if (store_local_ip(st, ip, sizeof ip)) {
        snprintf(ip, sizeof ip, "127.0.0.1");
    }
    rc = tcp_net_init(&ps->net, ps->world_rank, ps->world_size, ps->comm_id, ip, ps->addr, e,
                      sizeof e);
    if (rc)
        return ps_fail(ps, rc, "cannot listen: %s", e);
    ps->net.secret = ps->secret;
    ps->net.connect_timeout_s = ps->connect_timeout_s;
    ps->net.loglevel = ps->loglevel;
    return 0;
}

int weft_ps_init(weft_ps **out, weft_comm *world, const weft_ps_config *cfg)
{
    weft_ps *ps;
    store_client *st = NULL;
    char e[256] = "", where[300], key[64];
    int rc;
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    if (!(ps = calloc(1, sizeof *ps)))
        return WEFT_ENOMEM;
    ps->net.lfd = -1;
    if (world)
        ps->params = world->params;
    else if ((rc = param_load(&ps->params, e, sizeof e))) {
        ps_fail(ps, rc, "%s", e);
        goto fail;
    }
    ps->loglevel = log_level_of(&ps->params);
    if (cfg)
        ps->cfg = *cfg;
    else
        weft_ps_config_default(&ps->cfg);
    if ((rc = check_config(ps)) || (rc = locate(ps, world)) || (rc = roles(ps)))
        goto fail;
    snprintf(where, sizeof where, "weft-ps %s:%d", ps->store_host, ps->store_port);
    ps->comm_id = fnv(0, where, strlen(where));
    if (ps->secret)
        ps->comm_id = fnv(ps->comm_id, ps->secret, strlen(ps->secret));
    rc = store_connect(&st, ps->store_host, ps->store_port, ps->connect_timeout_s, ps->secret, e,
                       sizeof e);
    if (rc) {
        ps_fail(ps, rc, "cannot reach the store at %s:%d: %s", ps->store_host, ps->store_port, e);
        goto fail;
    }
    if ((rc = listen_here(ps, st, world)))
        goto fail;
    if (ps->role == WEFT_PS_ROLE_SERVER) {
        snprintf(key, sizeof key, "ps/addr/%d", ps->rank);
        if ((rc = store_set(st, key, ps->addr, strlen(ps->addr) + 1))) {
            ps_fail(ps, rc, "cannot publish this server's address: %s", store_error(st));
            goto fail;
        }
        log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
                "parameter server %d of %d listening at %s", ps->rank, ps->nservers, ps->addr);
        store_close(st);
    } else {
        /* connections are made on first use, so that the caller may still
         * do collectives with the servers (a split) before they serve */
        ps->store = st;
    }
    if (world) /* servers go on without a dead worker: so may the world's end */
        world->may_lose = 1;
    *out = ps;
    return 0;
fail:
    store_close(st);
    weft_ps_destroy(ps);
    return rc;
}

void weft_ps_destroy(weft_ps *ps)
{
    if (!ps)
        return;
    ps_worker_free(ps);
    ps_server_free(ps);
    store_close(ps->store);
    tcp_net_close(&ps->net);
    free(ps->secret);
    free(ps->ckpt_dir_buf);
    free(ps);
}

int weft_ps_role(const weft_ps *ps)
{
    return ps ? ps->role : WEFT_EINVAL;
}

int weft_ps_rank(const weft_ps *ps)
{
    return ps ? ps->rank : WEFT_EINVAL;
}

int weft_ps_num_workers(const weft_ps *ps)
{
    return ps ? ps->nworkers : WEFT_EINVAL;
}

int weft_ps_num_servers(const weft_ps *ps)
{
    return ps ? ps->nservers : WEFT_EINVAL;
}

const char *weft_ps_error(const weft_ps *ps)
{
    return ps ? ps->err : "";
}
