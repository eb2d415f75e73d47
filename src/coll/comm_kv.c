/* Joining through someone else's key-value store (torch's c10d Store, a
 * scheduler's): rank 0 serves weft's own store on a port the kernel picks
 * and announces where it is, with a fresh job secret, under one key of the
 * caller's store; every rank then joins as weft_comm_init does. weft keeps
 * its own store because its failure notices need a parked GET that wakes
 * a rank asleep in poll(), which a callback interface cannot give. */
#include "coll/comm_core.h"

#include "core/auth.h"
#include "core/log.h"
#include "transport/sock.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define KV_KEY "weft/store"
#define KV_WAIT_DEFAULT_S 60.0

/* An address of this host that other hosts can reach: the interface the
 * caller names, else the address it gives, else the first IPv4 address of
 * an interface that is up and not loopback, else loopback (a job on one
 * machine). Every rank uses this one address, also on rank 0's host: the
 * communicator's id is made from it, and data sockets listen on the
 * address that routes to the store. */
static void kv_my_ip(const weft_config *cfg, char *ip, size_t len)
{
    struct ifaddrs *ifs, *i;
    snprintf(ip, len, "127.0.0.1");
    if (cfg->ifname && *cfg->ifname) {
        sock_iface_ip(cfg->ifname, ip, len);
        return;
    }
    if (cfg->master_addr && *cfg->master_addr) {
        snprintf(ip, len, "%s", cfg->master_addr);
        return;
    }
    if (getifaddrs(&ifs))
        return;
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, ip,
                  (socklen_t)len);
        break;
    }
    freeifaddrs(ifs);
}

/* 32 hex digits from the kernel's generator, or "" when the build cannot
 * authenticate anyway. */
static void kv_secret(char out[33])
{
    unsigned char b[16];
    out[0] = 0;
    if (!auth_compiled() || getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return;
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Rank 0: serve the store, publish "ip\nport\nsecret". */
static int kv_announce(const weft_config *cfg, const weft_kv *kv, const char *secret,
                       store_server **srv, char *ip, size_t iplen, int *port)
{
    char err[256], rec[256];
    int rc = store_server_start(srv, NULL, 0, port, *secret ? secret : NULL, err, sizeof err);
    if (rc) {
        log_msg(log_level_from_env(), LOG_ERROR, 0, "cannot serve the store: %s", err);
        return rc;
    }
    kv_my_ip(cfg, ip, iplen);
    snprintf(rec, sizeof rec, "%s\n%d\n%s", ip, *port, secret);
    if ((rc = kv->set(kv->arg, KV_KEY, rec, strlen(rec))) != 0) {
        log_msg(log_level_from_env(), LOG_ERROR, 0, "the job's key-value store refused key %s",
                KV_KEY);
        store_server_stop(*srv);
        *srv = NULL;
        return rc < 0 ? rc : WEFT_ECONFIG;
    }
    return 0;
}

/* Other ranks: read rank 0's announcement. */
static int kv_learn(const weft_config *cfg, const weft_kv *kv, char *ip, size_t iplen,
                    int *port, char *secret, size_t seclen)
{
    char *val = NULL, *f[3];
    size_t len = 0;
    double wait = cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s : KV_WAIT_DEFAULT_S;
    int rc = kv->get(kv->arg, KV_KEY, (void **)&val, &len, wait);
    if (rc || !val) {
        log_msg(log_level_from_env(), LOG_ERROR, cfg->rank,
                "rendezvous: rank 0 never announced its store under key %s of the job's "
                "key-value store (waited %.0f s)", KV_KEY, wait);
        free(val);
        return rc < 0 ? rc : WEFT_ETIMEDOUT;
    }
    char *rec = malloc(len + 1), *save = NULL;
    if (!rec) {
        free(val);
        return WEFT_ENOMEM;
    }
    memcpy(rec, val, len);
    rec[len] = 0;
    free(val);
    int n = 0;
    for (char *t = strtok_r(rec, "\n", &save); t && n < 3; t = strtok_r(NULL, "\n", &save))
        f[n++] = t;
    if (n < 2) {
        log_msg(log_level_from_env(), LOG_ERROR, cfg->rank,
                "rendezvous: malformed store announcement");
        free(rec);
        return WEFT_EPROTO;
    }
    snprintf(ip, iplen, "%s", f[0]);
    *port = atoi(f[1]);
    snprintf(secret, seclen, "%s", n > 2 ? f[2] : "");
    free(rec);
    return 0;
}

int weft_comm_init_kv(weft_comm **out, const weft_config *cfg, const weft_kv *kv)
{
    weft_config c2;
    store_server *srv = NULL;
    char ip[64], secret[256] = "";
    int port = 0, rc;
    if (!out || !cfg || !kv || !kv->set || !kv->get)
        return WEFT_EINVAL;
    *out = NULL;
    if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return WEFT_EINVAL;
    c2 = *cfg;
    if (cfg->world_size == 1)
        return weft_comm_init(out, &c2);
    if (cfg->job_secret && *cfg->job_secret)
        snprintf(secret, sizeof secret, "%s", cfg->job_secret);
    else if (getenv("WEFT_JOB_SECRET") && *getenv("WEFT_JOB_SECRET"))
        snprintf(secret, sizeof secret, "%s", getenv("WEFT_JOB_SECRET"));
    if (cfg->rank == 0) {
        if (!*secret)
            kv_secret(secret);
        rc = kv_announce(cfg, kv, secret, &srv, ip, sizeof ip, &port);
    } else {
        rc = kv_learn(cfg, kv, ip, sizeof ip, &port, secret, sizeof secret);
    }
    if (rc)
        return rc;
    c2.master_addr = ip;
    c2.master_port = port;
    c2.host_store = 0;
    c2.job_secret = *secret ? secret : NULL;
    rc = weft_comm_init(out, &c2);
    if (rc) {
        if (srv)
            store_server_stop(srv);
        return rc;
    }
    if (srv) { /* as if weft_comm_init had started it: stopped at destroy */
        (*out)->server = srv;
        (*out)->store_rank = 0;
    }
    return 0;
}
