/* Which network each pair of ranks uses (WEFT_NET): shared memory inside
 * a host unless WEFT_SHM=0 on either end, else libfabric when both ends
 * opened it, else TCP. The rule reads only what both ends published at
 * rendezvous, so the two ends of a pair always agree. */
#ifndef WEFT_COLL_COMM_NET_H
#define WEFT_COLL_COMM_NET_H

#include "coll/comm_core.h"
#include "transport/ofi.h"

/* Open c->ofi as WEFT_NET and WEFT_OFI_PROVIDER say (ip: this rank's data
 * address, whose fabric is preferred); addr gets what to publish ("" when
 * libfabric is not used). Errors recorded on c. */
int comm_net_open(weft_comm *c, const char *ip, char addr[OFI_ADDR_MAX]);
/* After rendezvous: peer published addr and its WEFT_SHM; c->host is
 * known. Enters the peer in c->ofi when the pair talks libfabric. */
int comm_net_peer(weft_comm *c, int peer, const char *addr, int peer_shm);
/* Does this rank talk to peer through libfabric? */
int comm_net_ofi(const weft_comm *c, int peer);

#endif
