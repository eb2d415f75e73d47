/* A new communicator made from a running one: a split's, a shrink's, a
 * grow's. Each opens the child's listeners where the parent's are, has
 * its members learn each other's addresses in its own way (an all-gather
 * on the parent, an agreement in the store, a rendezvous), links the
 * child to them, and frees it on any failure: comm_child_make does all of
 * that, given the one step that differs. */
#ifndef WEFT_COLL_COMM_CHILD_H
#define WEFT_COLL_COMM_CHILD_H

#include "coll/comm_core.h"

/* What a member of a new communicator publishes to the others. A split
 * and a shrink send these bytes as they are (every rank runs the same
 * build); a grow's rendezvous sends them as a record (coll/rdv_record.h). */
typedef struct {
    char tcp[SOCK_ADDR_MAX], p2p[SOCK_ADDR_MAX];
    int32_t shm;
    int32_t has_ofi;          /* the libfabric part below is worth sending */
    char ofi[OFI_ADDR_MAX], p2p_ofi[OFI_ADDR_MAX];
} comm_addr;

/* The step that differs. exchange publishes mine (all zero on a rank of
 * the parent that joins no child but takes part) and fills all[] (indexed by
 * the parent's ranks, c->size of them); it returns 0, 1 when the attempt
 * failed alike on every member and nothing is to be made, or an error
 * recorded on the parent. members[i]: the parent's rank that is the
 * child's rank i; NULL when exchange links the child itself (a rendezvous
 * in the store: then it gets the child, else the child is NULL). */
typedef struct {
    int (*exchange)(void *arg, weft_comm *c, weft_comm *child, const comm_addr *mine,
                    comm_addr *all);
    void *arg;
    const int *members;
    const char *what;         /* "split", "shrink", "grow": names errors */
} comm_child_plan;

/* The child of c with id, of n ranks, this rank being rank (-1: this
 * rank joins none and *out stays NULL). 0 with *out, 1 as exchange
 * returned it, or an error recorded on c. */
int comm_child_make(weft_comm *c, int rank, int n, uint64_t id, const comm_child_plan *p,
                    weft_comm **out);

#endif
