/* New communicators from running ones (comm_child.h). */
#include "coll/comm_child.h"

#include "coll/comm_cluster.h"
#include "coll/comm_net.h"
#include "coll/comm_rdv.h"
#include "coll/comm_teardown.h"
#include "coll/exec/p2p.h"

#include <stdlib.h>
#include <string.h>

/* The child opened: its listeners where the parent listens, its store
 * joined; *addr gets what to publish. Errors recorded on c. */
static int child_open(weft_comm *c, int rank, int n, uint64_t id, comm_addr *addr,
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
    if (n > 1 && (c->store || c->watch) && (rc = comm_rdv_join(child, err, sizeof err))) {
        rc = comm_fail(c, rc, "new communicator: cannot reach the store: %s", err);
        goto fail;
    }
    *out = child;
    return 0;
fail:
    comm_free(child);
    return rc;
}

/* Every member's published address known: member i of child is rank
 * members[i] of c, whose address is addrs[members[i]]. Errors on c. */
static int child_link(weft_comm *c, weft_comm *child, const int *members,
                      const comm_addr *addrs)
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

/* One routine for every child: open, exchange, link; freed on failure. */
int comm_child_make(weft_comm *c, int rank, int n, uint64_t id, const comm_child_plan *p,
                    weft_comm **out)
{
    comm_addr *all = calloc((size_t)c->size, sizeof *all), mine;
    weft_comm *child = NULL;
    int rc;
    *out = NULL;
    memset(&mine, 0, sizeof mine);
    if (!all)
        return comm_fail(c, WEFT_ENOMEM, "%s: out of memory", p->what);
    if (rank >= 0 && (rc = child_open(c, rank, n, id, &mine, &child)))
        goto out;
    mine.has_ofi = mine.ofi[0] != 0;
    if (!p->exchange)
        all[c->rank] = mine; /* alone: nobody to tell */
    else if ((rc = p->exchange(p->arg, c, p->members ? NULL : child, &mine, all)))
        goto out;
    if (child && p->members && (rc = child_link(c, child, p->members, all)))
        goto out;
    if (child && child->p2p && (rc = p2p_start(child->p2p))) {
        rc = comm_fail(c, rc, "%s: point-to-point: cannot start its thread", p->what);
        goto out;
    }
    *out = child;
    child = NULL;
    rc = 0;
out:
    if (child)
        comm_free(child);
    free(all);
    return rc;
}
