/* What coll/flat.c (the calls) and coll/flat_wait.c (waiting on the
 * board) share. Internal to those two files. */
#ifndef WEFT_COLL_FLAT_INT_H
#define WEFT_COLL_FLAT_INT_H

#include "coll/flat.h"
#include "coll/flat_board.h"

enum { FLAT_NEW = 0, FLAT_ON, FLAT_FALLBACK };
#define FLAT_NAP_MS 10 /* a sleeping rank looks around this often */
enum { FLAT_PID_UNKNOWN = -1, FLAT_PID_DEAD = -2 };

struct flat_state {
    int mode;          /* FLAT_*: the board is made at the first call that needs it */
    flat_board b;
    uint64_t calls;    /* calls posted on the board */
    int *pidfd;        /* per rank: a pidfd, or FLAT_PID_* */
    double next_tend;  /* when to look at the listening socket again */
    weft_sched sched;  /* setting the board up, and calls where it is refused */
    void *tmp;
    size_t tmp_cap;
};

/* Open a pidfd for every other rank (their pids are on the board); where
 * one cannot be opened, that rank's death shows as a timeout. */
void flat_pids_open(weft_comm *c, struct flat_state *fs);
void flat_pids_close(weft_comm *c, struct flat_state *fs);

/* Wait until every rank has posted call k (0: at once). Errors (abort, a
 * dead or silent rank, another rank's failure notice) are recorded on c. */
int flat_wait(weft_comm *c, struct flat_state *fs, uint64_t k, const frame_hdr *fp);
/* What the executor does for the network while it waits, and calls on
 * the board never would: accept members' connections, drop strangers and
 * handshakes past their deadline. Every FLAT_NAP_MS, from flat_run. */
int flat_tend(weft_comm *c, struct flat_state *fs);
/* After a post that completes a call: wake the ranks asleep on the
 * board, if any. */
void flat_ring(struct flat_state *fs);

/* Has every rank posted call k? (Reading every post is what the call
 * does next anyway: its lines are then at hand.) */
static inline int flat_posted(const struct flat_state *fs, uint64_t k)
{
    for (int r = 0; r < fs->b.nranks; r++)
        if (atomic_load(&fs->b.ranks[r].post[k & 1].seq) != k)
            return 0;
    return 1;
}

#endif
