/* What the direct algorithm's files share (direct.c: the collectives of
 * equal blocks; direct_av.c: all-to-all with per-peer counts): the
 * per-communicator state, the descriptor exchange, the single-copy read
 * and the synchronisation that ends a step of reads. */
#ifndef WEFT_COLL_DIRECT_INT_H
#define WEFT_COLL_DIRECT_INT_H

#include "coll/comm_core.h"
#include "coll/local/direct_map.h"

#include <stdint.h>

/* What a rank tells the others, per call. A multiple of 8 bytes, so that
 * its frame is a whole number of elements of any dtype. */
typedef struct {
    int32_t pid;
    uint32_t ok;          /* second exchange of the first call: it read every cookie;
                             status: it read everything it had to */
    uint64_t send, recv;  /* addresses in pid; status: the peer it could not read, and
                             whether its input is still as the call found it */
    uint64_t aux;         /* reduce: where this rank's reduced slice waits; all-to-all-v:
                             where its per-peer (bytes, offset) pairs are; status: errno */
    uint64_t cookie_addr; /* status of a count mismatch: the bytes the peer sends */
    uint64_t cookie;      /* status of a count mismatch: the bytes this rank expects */
    direct_region reg;    /* all-to-all-v: the registered region its blocks for the peers
                             lie in (gen 0: none), and its (bytes, offset) pairs' offsets
                             are then the region's */
} desc;

/* All-to-all-v up to DIRECT_MESH_MAX ranks: what a rank sends each peer
 * at the start of a call, its descriptor with its (bytes, offset) pair
 * for that peer, so that the counts travel with the notice that its send
 * buffer is ready and no peer reads them out of its memory. */
typedef struct {
    desc d;
    uint64_t pair[2];
} av_hello;

struct direct_state {
    weft_sched xchg;   /* every rank's descriptor to every rank (xchg_build) */
    weft_sched bar;    /* dissemination barrier */
    int verdict;       /* 0: not yet known; 1: every rank reads every other; -1: not */
    int mesh;          /* the exchanges are one round with every peer (DIRECT_MESH_MAX) */
    int32_t pid;       /* this process's, read once: getpid is a system call, and a call
                          of these would otherwise make two */
    uint64_t cookie;   /* read by peers to check they read this process */
    desc *peers;       /* per rank, filled by the exchange */
    desc *status;      /* per rank, filled by settle */
    char *piece;       /* P - 1 pieces of per_peer bytes */
    size_t per_peer;
    int bad_peer;      /* this call: the first peer this rank could not read, or -1 */
    int bad_errno;     /* EMSGSIZE: bad_peer sends another size than this rank expects */
    uint64_t bad_sent, bad_want; /* with EMSGSIZE: the two sizes, in bytes */
    void *scratch;     /* what must wait for the readers (a result landing in a buffer
                          they read), or be published as a copy */
    size_t scratch_cap;
    uint64_t *pairs;   /* all-to-all-v: per peer, the bytes sent it and their offset */
    uint64_t zero;     /* the barriers' (empty) buffer */
    direct_maps *maps; /* all-to-all-v: peers' registered regions mapped here */
    int av_reg;        /* all-to-all-v under auto: at the last look every rank's blocks lay
                          in registered memory (1) or not (-1); 0: never looked */
    unsigned av_since; /* all-to-all-v calls since that look found them not */
    weft_sched avx;    /* all-to-all-v's exchange of av_hello (made on its first call) */
    av_hello *av_out, *av_in; /* per peer: this rank's, and the peer's */
};

/* The fingerprint of a call's sub-operation step (direct.c). */
frame_hdr direct_step_fp(const frame_hdr *fp, int step);
/* c's state, made on first use. Errors recorded on c. */
int direct_state_get(weft_comm *c, struct direct_state **out);
/* mine to every rank, every rank's into d->peers (step: the call's
 * sub-operation, so that messages of different steps never match). */
int direct_exchange(weft_comm *c, struct direct_state *d, desc *mine, const frame_hdr *fp,
                    int step);
/* After the first exchange: on the communicator's first call the ranks
 * agree whether every one reads every other. 0: go on; 1: single copy
 * is off (every rank alike); or an error. */
int direct_agree(weft_comm *c, struct direct_state *d, desc *mine, const frame_hdr *fp);
/* n bytes at addr in rank q into dst; a refused read is noted in d for
 * direct_settle. Only a dead peer is an error here. */
int direct_pull(weft_comm *c, struct direct_state *d, int q, void *dst, uint64_t addr,
                size_t n, const frame_hdr *fp);
/* The status exchange that ends a step of reads. 0: every rank read
 * everything; 1: some rank could not and the ring ran collective a
 * instead; DIRECT_AGAIN (direct_av.h): the same with a NULL, for the
 * caller to run its own schedule; or an error, alike on every rank.
 * intact: this rank's input is still as the call found it. */
int direct_settle(weft_comm *c, struct direct_state *d, const weft_coll_args *a,
                  const frame_hdr *fp, int step, int intact);

#endif
