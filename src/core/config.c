/* Configuration from the environment. Every launcher names rank and size
 * differently; the first one found wins, weft's own names first. */
#include "weft.h"

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

static const char *first_env(const char *const *names)
{
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v)
            return v;
    }
    return NULL;
}

static int env_int(const char *const *names, int *out)
{
    const char *v = first_env(names);
    char *end;
    long x;
    if (!v)
        return 0;
    x = strtol(v, &end, 10);
    if (*end || x < -1 || x > 1L << 30)
        return WEFT_ECONFIG;
    *out = (int)x;
    return 1;
}

int weft_config_from_env(weft_config *cfg)
{
    static const char *const rank_names[] = { "WEFT_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
                                              "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", NULL };
    static const char *const size_names[] = { "WEFT_WORLD_SIZE", "WORLD_SIZE",
                                              "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                              "SLURM_NTASKS", NULL };
    static const char *const local_names[] = { "WEFT_LOCAL_RANK", "LOCAL_RANK",
                                               "OMPI_COMM_WORLD_LOCAL_RANK",
                                               "MPI_LOCALRANKID", "SLURM_LOCALID", NULL };
    static const char *const addr_names[] = { "WEFT_MASTER_ADDR", "MASTER_ADDR", NULL };
    static const char *const port_names[] = { "WEFT_MASTER_PORT", "MASTER_PORT", NULL };
    static const char *const ext_names[] = { "WEFT_STORE_EXTERNAL", NULL };
    const char *v;
    int x, rc;

    if ((rc = env_int(rank_names, &cfg->rank)) < 0 ||
        (rc = env_int(size_names, &cfg->world_size)) < 0 ||
        (rc = env_int(local_names, &cfg->local_rank)) < 0 ||
        (rc = env_int(port_names, &cfg->master_port)) < 0)
        return rc;
    if ((v = first_env(addr_names)))
        cfg->master_addr = v;
    if (env_int(ext_names, &x) == 1 && x)
        cfg->host_store = 0;
    if ((v = getenv("WEFT_SOCKET_IFNAME")) && *v)
        cfg->ifname = v;
    if ((v = getenv("WEFT_ALGO")) && *v) {
        weft_algo a;
        if (weft_algo_parse(v, &a))
            return WEFT_ECONFIG;
        cfg->algo = a;
    }
    if ((v = getenv("WEFT_TIMEOUT")) && *v) {
        double t = strtod(v, NULL);
        if (t <= 0)
            return WEFT_ECONFIG;
        cfg->timeout_s = t;
    }
    if ((v = getenv("WEFT_CONNECT_TIMEOUT")) && *v) {
        double t = strtod(v, NULL);
        if (t <= 0)
            return WEFT_ECONFIG;
        cfg->connect_timeout_s = t;
    }
    if ((v = getenv("WEFT_JOB_SECRET")) && *v)
        cfg->job_secret = v;
    /* nothing set at all: a singleton job, as MPI_Init does without mpirun */
    if (cfg->rank < 0 && cfg->world_size < 0) {
        cfg->rank = 0;
        cfg->world_size = 1;
    }
    if (cfg->rank < 0 || cfg->world_size < 1 || cfg->rank >= cfg->world_size ||
        cfg->master_port < 1 || cfg->master_port > 65535)
        return WEFT_ECONFIG;
    return 0;
}
