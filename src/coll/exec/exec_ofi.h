/* The executor's messages between pairs that talk libfabric
 * (exec_ofi.c). */
#ifndef WEFT_COLL_EXEC_OFI_H
#define WEFT_COLL_EXEC_OFI_H

#include "coll/exec/exec_int.h"

/* Does the pair talk libfabric? Then these move the op's message (1:
 * progress, 0: none, st->wfd the completion queue's fd; negative error). */
int exec_ofi_pair(const weft_comm *c, int peer);
int exec_ofi_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp);
int exec_ofi_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp);
/* A header from peer q that waits while no receive of this round takes
 * it (TCP's peek at an unread header): one of this operation's number
 * that names another call is a mismatch (exec_mismatch's code); else 0. */
int exec_ofi_stray(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                   const opstate *st, const frame_hdr *fp, int q);

#endif
