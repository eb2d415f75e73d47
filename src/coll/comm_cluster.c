/* Clusters of a communicator (see comm_cluster.h) and the public calls
 * that ask about them. */
#include "coll/comm_cluster.h"

#include "coll/exec/p2p_int.h"
#include "transport/wan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "#c"

void comm_cluster_tag(const weft_comm *c, char id[64])
{
    char tail[16];
    if (c->params.cluster < 0)
        return;
    int n = snprintf(tail, sizeof tail, TAG "%d", c->params.cluster);
    size_t keep = strlen(id);
    if (keep + (size_t)n > 63)
        keep = 63 - (size_t)n; /* a host name that long keeps its start */
    memcpy(id + keep, tail, (size_t)n + 1);
}

static int32_t cluster_in(const char *id)
{
    const char *t = NULL;
    for (const char *p = strstr(id, TAG); p; p = strstr(p + 1, TAG))
        t = p;
    return t ? (int32_t)atoi(t + strlen(TAG)) : -1;
}

/* Both of c's nets get the clusters (and the emulation, when asked); their
 * wan bytes add up with share's (a split's parent), else with each other. */
static int set_clusters(weft_comm *c, const int32_t *cluster, wan_net *share)
{
    wan_cfg cfg, *cp = NULL;
    if (c->params.wan[0]) {
        if (wan_parse(c->params.wan, &cfg))
            return comm_fail(c, WEFT_ECONFIG,
                             "WEFT_WAN=%s: expected delay=TIME,rate=RATE (e.g. "
                             "delay=50ms,rate=100mbit)", c->params.wan);
        cp = &cfg;
    }
    tcp_net *nets[2] = { &c->net, c->p2p ? &c->p2p->net : NULL };
    for (int k = 0; k < 2; k++) {
        if (!nets[k])
            continue;
        int rc = wan_net_new(&nets[k]->wan, c->rank, c->size, cluster, cp, c->loglevel,
                             k ? c->net.wan : share);
        if (rc)
            return comm_fail(c, rc, "clusters: out of memory");
    }
    return 0;
}

int comm_cluster_learn(weft_comm *c, const char *const *ids)
{
    int any = 0, rc;
    int32_t *cl = malloc((size_t)c->size * sizeof *cl);
    if (!cl)
        return comm_fail(c, WEFT_ENOMEM, "clusters: out of memory");
    for (int i = 0; i < c->size; i++)
        any |= (cl[i] = cluster_in(ids[i])) >= 0;
    rc = any || c->params.wan[0] ? set_clusters(c, cl, NULL) : 0;
    free(cl);
    return rc;
}

int comm_cluster_inherit(weft_comm *parent, weft_comm *child, const int *members)
{
    if (!parent->net.wan)
        return 0;
    int32_t *cl = malloc((size_t)child->size * sizeof *cl);
    if (!cl)
        return comm_fail(child, WEFT_ENOMEM, "out of memory");
    for (int i = 0; i < child->size; i++)
        cl[i] = wan_cluster_of(parent->net.wan, members[i]);
    int rc = set_clusters(child, cl, parent->net.wan);
    free(cl);
    return rc;
}

int weft_comm_cluster_count(const weft_comm *c)
{
    return c ? wan_cluster_count(c->net.wan) : WEFT_EINVAL;
}

int weft_comm_cluster_of(const weft_comm *c, int r)
{
    if (!c || r < 0 || r >= c->size)
        return WEFT_EINVAL;
    /* numbered as the ranks set them; a job that sets none is cluster 0 */
    int k = wan_cluster_of(c->net.wan, r);
    return k < 0 ? 0 : k;
}

int weft_comm_link_class(const weft_comm *c, int peer)
{
    if (!c || peer < 0 || peer >= c->size)
        return WEFT_EINVAL;
    if (wan_is_wan(c->net.wan, peer))
        return WEFT_LINK_WAN;
    return c->host[peer] == c->host[c->rank] && c->shm_on ? WEFT_LINK_SHM : WEFT_LINK_LAN;
}

int weft_comm_wan_bytes(const weft_comm *c, uint64_t *sent)
{
    if (!c || !sent)
        return WEFT_EINVAL;
    *sent = wan_bytes(c->net.wan); /* its point-to-point net and its children count there too */
    return 0;
}

const int32_t *comm_cluster_index(const weft_comm *c) { return wan_cluster_index(c->net.wan); }
