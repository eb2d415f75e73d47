/* Calls run on schedules (coll_sched.h). */
#include "coll/coll_sched.h"

#include "coll/comm_cluster.h"
#include "coll/exec/exec.h"
#include "coll/sched/sched.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int coll_scratch(weft_comm *c, void **buf, size_t *cap, uint64_t bytes)
{
    if (bytes <= *cap)
        return 0;
    void *t = bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!t)
        return comm_fail(c, WEFT_ENOMEM, "out of memory for %llu bytes of scratch",
                         (unsigned long long)bytes);
    free(*buf);
    *buf = t;
    *cap = (size_t)bytes;
    return 0;
}

/* The schedule parameters and buffers of call a. */
void coll_sched_args(const weft_comm *c, const weft_coll_args *a, sched_params *p,
                     char *bufs[SB_COUNT])
{
    memset(p, 0, sizeof *p);
    p->kind = a->kind;
    p->rank = c->rank;
    p->nranks = c->size;
    p->root = a->root;
    p->count = a->count;
    p->esize = (uint32_t)weft_dtype_size(a->dtype);
    p->host = c->host;
    p->cluster = comm_cluster_index(c);
    bufs[SB_SEND] = (char *)(uintptr_t)a->send;
    bufs[SB_RECV] = a->recv;
    bufs[SB_TMP] = NULL;
    switch (a->kind) {
    case WEFT_COLL_BROADCAST:
        bufs[SB_SEND] = a->recv;
        break;
    case WEFT_COLL_ALLREDUCE: case WEFT_COLL_REDUCE: case WEFT_COLL_ALLTOALL:
        p->inplace = a->send == a->recv;
        break;
    default:
        break;
    }
}

int coll_run_sched(weft_comm *c, const weft_coll_args *a, weft_algo algo, weft_sched *s,
                   void **tmp, size_t *cap, const frame_hdr *fp)
{
    sched_params p;
    char *bufs[SB_COUNT];
    coll_sched_args(c, a, &p, bufs);
    int rc = sched_build(s, algo, &p);
    if (rc)
        return comm_fail(c, rc, "cannot build the %s schedule: %s", weft_algo_name(algo),
                         weft_strerror(rc));
    if ((rc = coll_scratch(c, tmp, cap, s->tmp_bytes)))
        return rc;
    bufs[SB_TMP] = *tmp;
    return exec_run(c, s, bufs, fp);
}
