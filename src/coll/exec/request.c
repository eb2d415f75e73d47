/* Completion of a non-blocking operation (request.h). */
#include "coll/exec/request.h"

void req_complete(weft_request *r, int rc)
{
    weft_comm *c = r->c;
    pthread_mutex_lock(&c->amu);
    r->rc = rc;
    atomic_store(&r->done, 1);
    pthread_cond_broadcast(&c->dcv);
    pthread_mutex_unlock(&c->amu);
}
