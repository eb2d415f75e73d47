/* The watch: a parked GET on the store's failure key of the communicator
 * (armed at rendezvous), through which a rank that waits learns at once
 * of a failure another rank reported. */
#ifndef WEFT_COLL_COMM_WATCH_H
#define WEFT_COLL_COMM_WATCH_H

#include "coll/comm_core.h"

/* The watch socket (poll it for POLLIN), or -1. */
int comm_watch_fd(const weft_comm *c);
/* The watch socket is readable: another rank left a failure notice. Sets
 * c->err ("rank 2 died ... [reported by rank 3; this rank (1) was in ...]")
 * and returns the notice's code; returns 0 when the store merely went away
 * (the watch is then closed). */
int comm_watch_fired(weft_comm *c, const frame_hdr *fp);
/* Take over another rank's notice (v, len bytes as the store holds it) as
 * this rank's error, fp being this rank's operation: its code, or 0 when
 * v is no notice. */
int comm_watch_adopt(weft_comm *c, const void *v, size_t len, const frame_hdr *fp);

#endif
