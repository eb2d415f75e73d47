/* The choice of network per pair (coll/comm_net.h). */
#include "coll/comm_net.h"

#include "core/log.h"

#include <stdio.h>

enum { NET_AUTO = 0, NET_TCP, NET_OFI }; /* the words of WEFT_NET, in order */

int comm_net_open(weft_comm *c, const char *ip, char addr[OFI_ADDR_MAX])
{
    char err[300] = "";
    ofi_opts o = { .rank = c->rank, .size = c->size, .comm_id = c->id,
                   .provider = c->params.ofi_provider, .must = c->params.net == NET_OFI,
                   .bind_ip = ip, .secret = c->secret, .loglevel = c->loglevel,
                   .no_rma = !c->params.ofi_rma };
    addr[0] = 0;
    if (c->params.net == NET_TCP || c->size < 2)
        return 0;
    int rc = ofi_open(&c->ofi, &o, addr, err, sizeof err);
    if (rc < 0)
        return comm_fail(c, rc, "%s", err);
    if (rc > 0)
        log_sub(c->loglevel, LOG_INFO, LOG_SUB_NET, c->rank,
                "network: tcp (WEFT_NET=auto found no RDMA provider in libfabric%s)",
                ofi_compiled() ? "" : ": not built in");
    else
        log_sub(c->loglevel, LOG_INFO, LOG_SUB_NET, c->rank, "network: libfabric, %s",
                ofi_describe(c->ofi));
    return 0;
}

int comm_net_peer(weft_comm *c, int peer, const char *addr, int peer_shm)
{
    char err[200];
    if (!c->ofi || peer == c->rank || !*addr)
        return 0;
    if (c->host[peer] == c->host[c->rank] && (c->shm_on || peer_shm))
        return 0; /* the shared-memory hello decides this pair (coll/exec/exec_shm.c) */
    int rc = ofi_set_peer(c->ofi, peer, addr, err, sizeof err);
    return rc ? comm_fail(c, rc, "rendezvous: %s", err) : 0;
}

int comm_net_ofi(const weft_comm *c, int peer) { return ofi_has_peer(c->ofi, peer); }
