/* The public collectives: each waits for the non-blocking queue (a
 * blocking call runs after whatever was issued before it) and hands the
 * call to the engine (coll.c). */
#include "coll/alltoallv.h"
#include "coll/coll.h"
#include "coll/exec/async.h"

#include <stdint.h>
#include <stdlib.h>

int weft_collective(weft_comm *c, const weft_coll_args *a)
{
    if (!c || !a || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    if (a->kind == WEFT_COLL_SEND || a->kind == WEFT_COLL_RECV)
        return coll_p2p(c, a); /* never waits for the collective stream */
    async_drain(c);
    return coll_run(c, a, 0);
}

#define COLL(...) do { weft_coll_args a_ = { __VA_ARGS__ }; return weft_collective(c, &a_); } while (0)

int weft_barrier(weft_comm *c)
{
    COLL(.kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8);
}

int weft_broadcast(weft_comm *c, void *buf, size_t count, weft_dtype t, int root)
{
    COLL(.kind = WEFT_COLL_BROADCAST, .send = buf, .recv = buf, .count = count, .dtype = t,
         .root = root);
}

int weft_reduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                weft_op op, int root)
{
    COLL(.kind = WEFT_COLL_REDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
         .op = op, .root = root);
}

int weft_allreduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                   weft_op op)
{
    COLL(.kind = WEFT_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count, .dtype = t,
         .op = op);
}

int weft_gather(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                int root)
{
    COLL(.kind = WEFT_COLL_GATHER, .send = send, .recv = recv, .count = count, .dtype = t,
         .root = root);
}

int weft_scatter(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                 int root)
{
    COLL(.kind = WEFT_COLL_SCATTER, .send = send, .recv = recv, .count = count, .dtype = t,
         .root = root);
}

int weft_allgather(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t)
{
    COLL(.kind = WEFT_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .dtype = t);
}

int weft_reduce_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                        weft_dtype t, weft_op op)
{
    COLL(.kind = WEFT_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
         .dtype = t, .op = op);
}

int weft_alltoall(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t)
{
    COLL(.kind = WEFT_COLL_ALLTOALL, .send = send, .recv = recv, .count = count, .dtype = t);
}

int weft_alltoallv(weft_comm *c, const void *send, const size_t *send_counts,
                   const size_t *send_displs, void *recv, const size_t *recv_counts,
                   const size_t *recv_displs, weft_dtype t)
{
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    coll_av_args v = { send, recv, t, send_counts, send_displs, recv_counts, recv_displs };
    async_drain(c);
    return coll_alltoallv(c, &v, 0);
}

int weft_ialltoallv(weft_comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv, const size_t *recv_counts,
                    const size_t *recv_displs, weft_dtype t, weft_request **req)
{
    if (!c || c->magic != COMM_MAGIC || !req)
        return WEFT_EINVAL;
    *req = NULL;
    coll_av_args v = { send, recv, t, send_counts, send_displs, recv_counts, recv_displs };
    weft_coll_args a;
    int rc;
    if ((rc = coll_alltoallv_queue(c, &v, &a)))
        return rc;
    if ((rc = weft_icollective(c, &a, req)))
        free((void *)(uintptr_t)a.send);
    return rc;
}
