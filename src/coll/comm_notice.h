/* What a rank does once an operation has failed: tell the others through
 * the store (unless another rank's notice explains the failure better),
 * and cut its connections so that peers blocked on it learn at once. */
#ifndef WEFT_COLL_COMM_NOTICE_H
#define WEFT_COLL_COMM_NOTICE_H

#include "coll/comm_core.h"

/* Close every data connection, so that peers blocked on this rank learn at
 * once (end of stream) that it has failed. */
void comm_sever(weft_comm *c);

/* After operation fp failed with rc (message in c->err): leave a notice in
 * the store for every other rank (unless this rank learned of the failure
 * from such a notice, or an earlier notice explains it better), dump the
 * flight recorder and sever the connections. Returns the code to report
 * (that of the notice this rank adopted, if any). */
int comm_failed(weft_comm *c, int rc, const frame_hdr *fp);

#endif
