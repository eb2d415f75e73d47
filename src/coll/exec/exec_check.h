/* What every path of the executor (TCP, rings, libfabric) says of a
 * message that went wrong: a peer gone, a header that is not the one
 * expected. */
#ifndef WEFT_COLL_EXEC_CHECK_H
#define WEFT_COLL_EXEC_CHECK_H

#include "coll/exec/exec_int.h"

/* Record that peer died during fp (what: "closed", "was reset"). */
int exec_fail_peer(weft_comm *c, int peer, const frame_hdr *fp, const char *what);
/* A complete header arrived in st->h: is it the message op o expects? */
int exec_check_header(weft_comm *c, const sched_op *o, opstate *st, const frame_hdr *fp);

#endif
