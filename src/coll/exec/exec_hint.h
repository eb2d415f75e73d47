/* Hints: what this rank waits for in which call, told to the peer it
 * waits on (exec_hint.c). */
#ifndef WEFT_COLL_EXEC_HINT_H
#define WEFT_COLL_EXEC_HINT_H

#include "coll/exec/exec_int.h"

/* Tell peer q, once per operation, that this rank
 * waits for it in call (0, or a negative error). */
int exec_hint_send(weft_comm *c, int q, const frame_hdr *call);
/* A hint's header h came from q: 0, or WEFT_EMISMATCH (recorded on c)
 * when this rank ran another call as that operation. */
int exec_hint_check(weft_comm *c, int q, const frame_hdr *h);
/* A whole header read from q: 1 when it is a hint (consumed, matching),
 * 0 when it is a message's, or WEFT_EMISMATCH. */
int exec_hint_take(weft_comm *c, int q, const frame_hdr *raw);

#endif
