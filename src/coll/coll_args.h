/* A collective's arguments checked before anything moves, and the
 * refusal of a communicator an earlier error broke. */
#ifndef WEFT_COLL_COLL_ARGS_H
#define WEFT_COLL_COLL_ARGS_H

#include "coll/comm_core.h"

static inline int coll_is_reduction(weft_coll_kind k)
{
    return k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE || k == WEFT_COLL_REDUCE_SCATTER;
}

static inline int coll_is_rooted(weft_coll_kind k)
{
    return k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE || k == WEFT_COLL_GATHER ||
           k == WEFT_COLL_SCATTER || k == WEFT_COLL_SEND || k == WEFT_COLL_RECV;
}

/* 0, or WEFT_EINVAL recorded on c naming what is wrong with a. */
int coll_check_args(weft_comm *c, const weft_coll_args *a);
/* A call on a communicator an earlier error broke: c->broken, with c->err
 * saying so and still naming that error's cause. */
int coll_refuse_broken(weft_comm *c);
/* Arguments of a message with this tag: 0, or an error recorded on c. */
int coll_check_p2p(weft_comm *c, const weft_coll_args *a, int tag);

#endif
