/* Freeing a communicator, and destroying one in step with its peers. */
#include "coll/comm_teardown.h"

#include "coll/algo.h"
#include "coll/exec/async.h"
#include "coll/exec/exec_shm.h"
#include "coll/exec/live.h"
#include "coll/exec/p2p.h"
#include "coll/tune/tuner.h"
#include "core/log.h"

#include <stdlib.h>
#include <unistd.h>

void comm_free(weft_comm *c)
{
    async_stop(c);
    p2p_destroy(c->p2p);
    c->p2p = NULL;
    async_free_retired(c);
    free(c->group);
    if (c->abort_pipe[0] >= 0) {
        close(c->abort_pipe[0]);
        close(c->abort_pipe[1]);
    }
    pthread_mutex_destroy(&c->amu);
    pthread_cond_destroy(&c->acv);
    pthread_cond_destroy(&c->dcv);
    exec_shm_reap(c, c->broken || atomic_load(&c->aborted));
    tcp_net_close(&c->net);
    ofi_close(c->ofi);
    shm_links_free(c->shm_out, c->size);
    shm_links_free(c->shm_in, c->size);
    coll_algo_free_all(c); /* the state each algorithm keeps (coll/algo_table.h) */
    coll_tuner_destroy(c->tune);
    live_free(c);
    if (c->watch)
        store_close(c->watch);
    if (c->store)
        store_close(c->store);
    free(c->secret);
    if (c->server)
        store_server_stop(c->server);
    for (int i = 0; c->stage && i < c->size; i++)
        free(c->stage[i]);
    free(c->stage);
    free(c->host);
    free(c->tmp);
    sched_free(&c->sched);
    c->magic = COMM_DEAD;
    free(c);
}

int weft_comm_destroy(weft_comm *c)
{
    int rc = 0;
    if (!c)
        return 0;
    if (c->magic != COMM_MAGIC)
        return WEFT_EINVAL; /* destroyed already (while its memory lasts) */
    async_drain(c);
    /* Nobody may still be waiting on this rank's store or sockets. */
    if (c->size > 1 && !c->broken && !c->shrunk && !atomic_load(&c->aborted)) {
        weft_coll_args b = { .kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8,
                             .algo = WEFT_ALGO_RING }; /* as in split.c's own_allgather */
        int level = c->loglevel;
        if (c->may_lose && (level & 0xff) == LOG_WARN) /* a loss here is no news: */
            c->loglevel = (level & ~0xff) | LOG_ERROR; /* its INFO line below says it */
        rc = weft_collective(c, &b);
        c->loglevel = level;
        if (rc == WEFT_EPEER && c->may_lose) {
            /* the work is done; a member that died before it (a parameter
             * server's worker) leaves nothing undone here */
            log_sub(c->loglevel, LOG_INFO, LOG_SUB_INIT, c->rank,
                    "leaving without a member that is gone: %s", c->err);
            rc = 0;
        }
    }
    comm_free(c);
    return rc;
}
