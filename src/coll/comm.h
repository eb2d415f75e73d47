/* weft_comm_init (include/weft.h) and, for code outside coll/ that looks
 * inside a communicator (the parameter server, tools, tests), its state
 * (coll/comm_core.h) and its selector (coll/tune/tuner.h). Inside coll/ a
 * file includes the header of each part it calls instead. */
#ifndef WEFT_COLL_COMM_H
#define WEFT_COLL_COMM_H

#include "coll/comm_core.h"
#include "coll/tune/tuner.h"

#endif
