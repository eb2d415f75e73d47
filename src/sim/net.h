/* Flow-level network: links with a capacity, flows that cross a few links
 * and share them max-min fairly. When a flow starts or ends, the flows
 * that share a link with it are re-balanced by progressive filling against
 * what the other flows on their links hold (a local max-min step: exact
 * when those flows are the whole contention, and the other flows catch up
 * at their own next event). Finish times sit in an indexed heap. */
#ifndef WEFT_SIM_NET_H
#define WEFT_SIM_NET_H

#include <stdint.h>

#define NET_MAXPATH 6

typedef struct {
    double cap;        /* bytes per microsecond */
    double alloc;      /* sum of the rates of its flows */
    double bytes;      /* carried so far */
    uint32_t *fl;      /* flows on it */
    uint32_t n, capn;
    uint32_t mark;
    double resid;
    uint32_t nun;
    int cls;
} net_link;

typedef struct {
    int32_t link[NET_MAXPATH];
    uint32_t slot[NET_MAXPATH]; /* index in each link's fl */
    int nl;
    double rate, rem, tlast, len, tfin;
    uint32_t mark, frozen;
    uint32_t hpos;              /* index in the heap + 1; 0: not there */
    uint64_t tag;               /* the caller's */
} net_flow;

typedef struct {
    net_link *links;
    uint32_t nlinks;
    net_flow *flows;
    uint32_t nflows, capflows;
    uint32_t *freel;            /* free flow slots */
    uint32_t nfree, capfree;
    uint32_t *heap;             /* flow ids by finish time */
    uint32_t nheap;
    uint32_t epoch;
    uint32_t *aset, *lset;      /* scratch */
    uint32_t capa, capl;
} net;

int sim_net_init(net *n, uint32_t nlinks);
void sim_net_free(net *n);
/* Start a flow of len bytes over links[0..nl) at time now; returns its id
 * or a negative error. */
int64_t sim_net_add(net *n, double now, const int32_t *links, int nl, double len, uint64_t tag);
/* The flow that finishes first and when; -1 when none. */
int64_t sim_net_next(const net *n, double *t);
/* Remove a finished flow at time now (its bytes are counted on its links). */
int sim_net_finish(net *n, double now, uint32_t id);

#endif
