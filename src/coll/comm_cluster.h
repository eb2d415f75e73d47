/* Clusters as a level above hosts (WEFT_CLUSTER): each rank's cluster
 * travels in its host id at rendezvous ("host#c2"), so ranks of different
 * clusters are never taken for one host (they never share memory), and
 * every rank learns every peer's cluster. The answer goes to the
 * transport (transport/wan.h), which classes links and, with WEFT_WAN,
 * emulates the wide-area ones. */
#ifndef WEFT_COLL_COMM_CLUSTER_H
#define WEFT_COLL_COMM_CLUSTER_H

#include "coll/comm_core.h"

/* Appends this rank's cluster to its host id (id holds 64 bytes). */
void comm_cluster_tag(const weft_comm *c, char id[64]);
/* Every rank's host id, as exchanged: sets up the clusters of c's
 * connections. 0, or an error recorded on c. */
int comm_cluster_learn(weft_comm *c, const char *const *ids);
/* A split's child: its rank i is the parent's members[i]. Errors are
 * recorded on the child. */
int comm_cluster_inherit(weft_comm *parent, weft_comm *child, const int *members);
/* Every rank's cluster numbered from 0 (what schedules take), or NULL
 * when c is one cluster. */
const int32_t *comm_cluster_index(const weft_comm *c);
/* A wide-area link priced without measurement: 25 ms one way, 1 Gbit/s. */
#define COMM_WAN_ALPHA 25e-3
#define COMM_WAN_BETA (8.0 / 1e9)

#endif
