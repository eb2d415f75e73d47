/* The rendezvous of a communicator (comm_rdv.h). */
#include "coll/comm_rdv.h"

#include "bootstrap/world.h"
#include "coll/comm_cluster.h"
#include "coll/comm_net.h"
#include "coll/exec/p2p.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int comm_rdv_join(weft_comm *c, char *err, size_t errlen)
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

/* Every rank's record, decoded; their hosts numbered, their clusters and
 * networks set up. */
static int learn(weft_comm *c, char **recs)
{
    rdv_record *all = calloc((size_t)c->size, sizeof *all);
    const char **ids = calloc((size_t)c->size, sizeof *ids);
    const char *why;
    int rc = 0;
    if (!all || !ids) {
        rc = comm_fail(c, WEFT_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    for (int i = 0; i < c->size && !rc; i++) {
        if (rdv_record_decode(recs[i], strlen(recs[i]), &all[i], &why)) {
            rc = comm_fail(c, WEFT_EPROTO, "rendezvous: rank %d's record is malformed: %s", i,
                           why);
            break;
        }
        snprintf(c->net.addr[i], SOCK_ADDR_MAX, "%s", all[i].tcp);
        p2p_set_addr(c->p2p, i, all[i].p2p);
        ids[i] = all[i].host;
    }
    if (rc)
        goto out;
    c->nhosts = world_number_hosts(ids, c->size, c->host);
    rc = comm_cluster_learn(c, ids);
    for (int i = 0; i < c->size && !rc; i++)
        if (!(rc = comm_net_peer(c, i, all[i].ofi, all[i].shm)))
            rc = p2p_net_peer(c->p2p, i, all[i].p2p_ofi);
out:
    free(all);
    free(ids);
    return rc;
}

int comm_rdv_exchange(weft_comm *c, rdv_record *me, const char *where)
{
    char rec[RDV_RECORD_MAX], err[200], **recs;
    size_t len;
    int missing, rc;
    world_host_id(c->params.host_id, me->host);
    comm_cluster_tag(c, me->host);
    if ((rc = rdv_record_encode(me, rec, sizeof rec, &len)))
        return comm_fail(c, rc, "rendezvous: this rank's own record cannot be encoded");
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
    rc = learn(c, recs);
    world_records_free(recs, c->size);
    return rc;
}
