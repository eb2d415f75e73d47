/* A communicator's rendezvous through the job's store: join the store
 * (arming the watch on the failure key), publish this rank's record
 * (coll/rdv_record.h) and learn every rank's. */
#ifndef WEFT_COLL_COMM_RDV_H
#define WEFT_COLL_COMM_RDV_H

#include "coll/comm_core.h"
#include "coll/rdv_record.h"

/* Connect c to the store at c->store_host:store_port (unless connected)
 * and arm its watch. err (errlen bytes) says why it failed. */
int comm_rdv_join(weft_comm *c, char *err, size_t errlen);
/* Publish me (its host field is filled here: this host's id with its
 * cluster) and learn every rank's addresses and host; where names the
 * store for messages. Errors recorded on c. */
int comm_rdv_exchange(weft_comm *c, rdv_record *me, const char *where);

#endif
