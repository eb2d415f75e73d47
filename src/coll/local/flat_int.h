/* What coll/local/flat.c (the calls), coll/local/flat_pipe.c (large all-reduce) and
 * coll/local/flat_wait.c (waiting on the board) share. Internal to those. */
#ifndef WEFT_COLL_FLAT_INT_H
#define WEFT_COLL_FLAT_INT_H

#include "coll/comm_core.h"
#include "coll/tune/cost.h"
#include "coll/local/flat_board.h"

enum { FLAT_NEW = 0, FLAT_ON, FLAT_FALLBACK };
#define FLAT_NAP_MS 10 /* a sleeping rank looks around this often */
enum { FLAT_PID_UNKNOWN = -1, FLAT_PID_DEAD = -2 };

struct flat_state {
    int mode;          /* FLAT_*: the board is made at the first call that needs it */
    flat_board b;
    int pipe_mode;     /* FLAT_*: the pipe, at the first large all-reduce */
    flat_pipe pipe;
    uint64_t steps;    /* pipeline steps every rank has done */
    uint64_t calls;    /* calls posted on the board */
    int *pidfd;        /* per rank: a pidfd, or FLAT_PID_* */
    double next_tend;  /* when to look at the listening socket again */
    weft_sched sched;  /* setting the board up, and calls where it is refused */
    void *tmp;
    size_t tmp_cap;
    cost_params cost;  /* what picks the schedule of those calls */
};

/* Open a pidfd for every other rank (their pids are on the board); where
 * one cannot be opened, that rank's death shows as a timeout. */
void flat_pids_open(weft_comm *c, struct flat_state *fs);
void flat_pids_close(weft_comm *c, struct flat_state *fs);

/* A counter per rank, stride bytes apart from base, each only growing;
 * a wait is for all of them to reach want. */
typedef struct {
    const char *base;
    size_t stride;
    uint64_t want;
    int n;
} flat_ctr;

static inline uint64_t flat_ctr_get(const flat_ctr *w, int r)
{
    return atomic_load((const _Atomic uint64_t *)(const void *)(w->base + (size_t)r * w->stride));
}

/* Has every rank reached w->want? (Reading every counter is what the
 * call does next anyway: its lines are then at hand.) */
static inline int flat_reached(const flat_ctr *w)
{
    for (int r = 0; r < w->n; r++)
        if (flat_ctr_get(w, r) < w->want)
            return 0;
    return 1;
}

/* Call k's posts on the board: a post's seq reads k or k-2 during call k
 * (flat.c), so "all at least k" is "all posted k". */
static inline flat_ctr flat_posts(const struct flat_state *fs, uint64_t k)
{
    flat_ctr w = { (const char *)&fs->b.ranks[0].post[k & 1].seq, sizeof(flat_rank), k,
                   fs->b.nranks };
    return w;
}

/* Wait until every counter of w has reached w->want (0: at once). Errors
 * (abort, a dead or silent rank, another rank's failure notice) are
 * recorded on c. */
int flat_wait(weft_comm *c, struct flat_state *fs, const flat_ctr *w, const frame_hdr *fp);
/* What the executor does for the network while it waits, and calls on
 * the board never would: accept members' connections, drop strangers and
 * handshakes past their deadline. Every FLAT_NAP_MS, from flat_run. */
int flat_tend(weft_comm *c, struct flat_state *fs);
/* After a post that completes a call: wake the ranks asleep on the
 * board, if any. */
void flat_ring(struct flat_state *fs);

/* Has every rank posted call k? */
static inline int flat_posted(const struct flat_state *fs, uint64_t k)
{
    flat_ctr w = flat_posts(fs, k);
    return flat_reached(&w);
}

/* Make the pipe (coll/local/flat_pipe.c) at the first large all-reduce,
 * agreeing on the board: fs->pipe_mode is then FLAT_ON, or FLAT_FALLBACK
 * on every rank when some rank could not map it. */
int flat_pipe_setup(weft_comm *c, struct flat_state *fs, const frame_hdr *fp);
/* A large all-reduce (bytes per rank beyond a board slot) through the
 * pipe. */
int flat_pipe_run(weft_comm *c, struct flat_state *fs, const weft_coll_args *a,
                  const frame_hdr *fp);
/* Check every rank's post of call k against fp (WEFT_EMISMATCH). */
int flat_check_posts(weft_comm *c, struct flat_state *fs, uint64_t k, const frame_hdr *fp);
/* Post call k (fp) on the board, with no payload, ringing if it completes it. */
void flat_post_call(struct flat_state *fs, int me, uint64_t k, const frame_hdr *fp);

#endif
