/* weft_config from the parameter table, and the table's view of a
 * weft_config: every launcher names rank and size differently; the table
 * reads weft's own names first, then theirs. */
#include "core/log.h"
#include "core/param.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_config_default(weft_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->rank = -1;
    cfg->world_size = -1;
    cfg->local_rank = -1;
    cfg->master_port = 29500;
    cfg->host_store = -1;
    cfg->algo = WEFT_ALGO_AUTO;
}

/* A string entry's value that outlives p: the environment's own text. */
static const char *env_text(const param_set *p, param_id id)
{
    return p->src[id] == PARAM_SRC_ENV ? param_env(id) : NULL;
}

int weft_config_from_env(weft_config *cfg)
{
    if (!cfg)
        return WEFT_EINVAL;
    param_set *p = malloc(sizeof *p);
    char err[300];
    int rc;
    if (!p)
        return WEFT_ENOMEM;
    if ((rc = param_load(p, err, sizeof err)) || (rc = param_check_job(p, err, sizeof err))) {
        log_msg(LOG_ERROR, LOG_ERROR, -1, "%s", err);
        free(p);
        return rc;
    }
    if (p->src[PARAM_rank] == PARAM_SRC_ENV)
        cfg->rank = p->rank;
    if (p->src[PARAM_world_size] == PARAM_SRC_ENV)
        cfg->world_size = p->world_size;
    if (p->src[PARAM_local_rank] == PARAM_SRC_ENV)
        cfg->local_rank = p->local_rank;
    if (p->src[PARAM_master_port] == PARAM_SRC_ENV)
        cfg->master_port = p->master_port;
    if (p->src[PARAM_master_addr] == PARAM_SRC_ENV)
        cfg->master_addr = env_text(p, PARAM_master_addr);
    if (p->store_external)
        cfg->host_store = 0;
    if (p->src[PARAM_socket_ifname] == PARAM_SRC_ENV)
        cfg->ifname = env_text(p, PARAM_socket_ifname);
    if (p->src[PARAM_algo] == PARAM_SRC_ENV)
        cfg->algo = p->algo;
    if (p->src[PARAM_timeout] == PARAM_SRC_ENV)
        cfg->timeout_s = p->timeout;
    if (p->src[PARAM_connect_timeout] == PARAM_SRC_ENV)
        cfg->connect_timeout_s = p->connect_timeout;
    if (p->src[PARAM_job_secret] == PARAM_SRC_ENV)
        cfg->job_secret = env_text(p, PARAM_job_secret);
    free(p);
    /* nothing set at all: a singleton job, as MPI_Init does without mpirun */
    if (cfg->rank < 0 && cfg->world_size < 0) {
        cfg->rank = 0;
        cfg->world_size = 1;
    }
    if (cfg->rank < 0 || cfg->world_size < 1 || cfg->rank >= cfg->world_size) {
        /* the caller's own fields with the environment's: no entry alone is wrong */
        log_msg(LOG_ERROR, LOG_ERROR, -1,
                "rank %d of %d (the config's fields with the environment's): expected a rank "
                "from 0 to the world size - 1", cfg->rank, cfg->world_size);
        return WEFT_ECONFIG;
    }
    return 0;
}

/* Entry id takes cfg's value (given) or, when cfg leaves it unset, the
 * default; one equal to what p holds keeps p's source. */
static int take(param_set *p, param_id id, const char *text, int given, char *err, size_t cap)
{
    const param_info *e = param_info_of(id);
    const char *at = (const char *)p + e->off;
    size_t size = e->type == PARAM_T_DBL ? sizeof(double) : sizeof(int);
    unsigned char src = p->src[id];
    signed char via = p->via[id];
    char was[PARAM_STR_MAX];
    int rc;
    memcpy(was, at, e->type == PARAM_T_STR ? PARAM_STR_MAX : size);
    rc = param_set_text(p, id, given ? text : e->dflt,
                        given ? PARAM_SRC_CONFIG : PARAM_SRC_DEFAULT, err, cap);
    if (!rc && (e->type == PARAM_T_STR ? !strcmp(was, at) : !memcmp(was, at, size))) {
        p->src[id] = src;
        p->via[id] = via;
    }
    return rc;
}

int param_from_config(param_set *p, const weft_config *cfg, char *err, size_t cap)
{
    char n[3][32], t[2][32];
    int rc;
    if ((rc = param_load(p, err, cap)))
        return rc;
    snprintf(n[0], sizeof n[0], "%d", cfg->rank);
    snprintf(n[1], sizeof n[1], "%d", cfg->world_size);
    snprintf(n[2], sizeof n[2], "%d", cfg->master_port);
    snprintf(t[0], sizeof t[0], "%.17g", cfg->timeout_s);
    snprintf(t[1], sizeof t[1], "%.17g", cfg->connect_timeout_s);
    if ((rc = take(p, PARAM_rank, n[0], 1, err, cap)) ||
        (rc = take(p, PARAM_world_size, n[1], 1, err, cap)) ||
        (rc = take(p, PARAM_master_port, n[2], 1, err, cap)) ||
        (rc = take(p, PARAM_master_addr, cfg->master_addr,
                   cfg->master_addr && *cfg->master_addr, err, cap)) ||
        (rc = take(p, PARAM_store_external, cfg->host_store == 0 ? "1" : "0",
                   cfg->host_store >= 0, err, cap)) ||
        (rc = take(p, PARAM_socket_ifname, cfg->ifname, cfg->ifname && *cfg->ifname, err,
                   cap)) ||
        (rc = take(p, PARAM_algo, weft_algo_name(cfg->algo), cfg->algo != WEFT_ALGO_AUTO, err,
                   cap)) ||
        (rc = take(p, PARAM_timeout, t[0], cfg->timeout_s > 0, err, cap)) ||
        (rc = take(p, PARAM_connect_timeout, t[1], cfg->connect_timeout_s > 0, err, cap)) ||
        (rc = take(p, PARAM_job_secret, cfg->job_secret, cfg->job_secret && *cfg->job_secret,
                   err, cap)))
        return rc;
    if (cfg->local_rank != p->local_rank) {
        p->local_rank = cfg->local_rank;
        p->src[PARAM_local_rank] = PARAM_SRC_CONFIG;
        p->via[PARAM_local_rank] = -1;
    }
    return 0;
}
