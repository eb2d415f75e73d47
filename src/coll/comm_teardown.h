/* The end of a communicator: weft_comm_destroy (include/weft.h) and what
 * every path that made one and will not hand it out needs to free it. */
#ifndef WEFT_COLL_COMM_TEARDOWN_H
#define WEFT_COLL_COMM_TEARDOWN_H

#include "coll/comm_core.h"

/* Stop c's worker threads, close everything it holds and free it, at
 * once: no barrier, no notice. */
void comm_free(weft_comm *c);

#endif
