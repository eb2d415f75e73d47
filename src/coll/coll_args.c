/* Checks of a collective's arguments (coll_args.h). */
#include "coll/coll_args.h"

#include <stdint.h>
#include <string.h>

/* Elements of the largest buffer the call touches, as a multiple of count. */
static int span(weft_coll_kind k, int size)
{
    switch (k) {
    case WEFT_COLL_GATHER: case WEFT_COLL_SCATTER: case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_REDUCE_SCATTER: case WEFT_COLL_ALLTOALL:
        return size;
    default:
        return 1;
    }
}

int coll_check_args(weft_comm *c, const weft_coll_args *a)
{
    const char *name = weft_coll_name(a->kind);
    size_t es;
    if (!name)
        return comm_fail(c, WEFT_EINVAL, "unknown collective kind %d", (int)a->kind);
    if (!(es = weft_dtype_size(a->dtype)))
        return comm_fail(c, WEFT_EINVAL, "%s: unknown dtype %d", name, (int)a->dtype);
    if (coll_is_reduction(a->kind) && (a->op < 0 || a->op >= WEFT_OP_COUNT))
        return comm_fail(c, WEFT_EINVAL, "%s: unknown reduction op %d", name, (int)a->op);
    if (a->algo < 0 || a->algo >= WEFT_ALGO_COUNT)
        return comm_fail(c, WEFT_EINVAL, "%s: unknown algorithm %d", name, (int)a->algo);
    if (coll_is_rooted(a->kind) && (a->root < 0 || a->root >= c->size))
        return comm_fail(c, WEFT_EINVAL, "%s: %s %d out of range [0, %d)", name,
                         a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV ? "peer" : "root",
                         a->root, c->size);
    if ((a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV) && a->root == c->rank)
        return comm_fail(c, WEFT_EINVAL, "%s: rank %d cannot message itself", name, c->rank);
    if (a->count > SIZE_MAX / es / (size_t)span(a->kind, c->size))
        return comm_fail(c, WEFT_EINVAL, "%s: count %zu overflows the address space", name,
                         a->count);
    if (a->count == 0 || a->kind == WEFT_COLL_BARRIER)
        return 0;
    int root = a->root == c->rank;
    int need_send = 1, need_recv = 1;
    switch (a->kind) {
    case WEFT_COLL_SEND: need_recv = 0; break;
    case WEFT_COLL_RECV: need_send = 0; break;
    case WEFT_COLL_BROADCAST: need_send = 0; break;
    case WEFT_COLL_REDUCE: case WEFT_COLL_GATHER: need_recv = root; break;
    case WEFT_COLL_SCATTER: need_send = root; break;
    default: break;
    }
    if ((need_send && !a->send) || (need_recv && !a->recv))
        return comm_fail(c, WEFT_EINVAL, "%s: NULL %s buffer with count %zu", name,
                         need_send && !a->send ? "send" : "receive", a->count);
    return 0;
}

#define BROKEN "communicator unusable after an earlier error (destroy it): "

#define BROKEN "communicator unusable after an earlier error (destroy it): "

/* The cause stays in the message: a caller that learns of the error only
 * at its next call (a wait, a loop's next step) must still see why. */
int coll_refuse_broken(weft_comm *c)
{
    if (strncmp(c->err, BROKEN, sizeof BROKEN - 1)) {
        char cause[sizeof c->err];
        memcpy(cause, c->err, sizeof cause);
        comm_fail(c, c->broken, BROKEN "%s", cause[0] ? cause : weft_strerror(c->broken));
    }
    return c->broken;
}

int coll_check_p2p(weft_comm *c, const weft_coll_args *a, int tag)
{
    if (atomic_load(&c->aborted))
        return comm_fail(c, WEFT_EABORTED, "communicator aborted");
    if (c->broken)
        return coll_refuse_broken(c);
    if (tag < 0)
        return comm_fail(c, WEFT_EINVAL, "%s: tag %d is negative",
                         weft_coll_name(a->kind), tag);
    return coll_check_args(c, a);
}
