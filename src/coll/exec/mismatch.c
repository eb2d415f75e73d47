/* How a rank says that a peer runs another call than its own
 * (mismatch.h). */
#include "coll/exec/mismatch.h"

#include <stdio.h>

void exec_describe(const frame_hdr *h, char *buf, size_t len)
{
    if (h->flags & FRAME_TRIAL) {
        int n = snprintf(buf, len, "the barrier before a timed ");
        if (n > 0 && (size_t)n < len)
            frame_describe(h, buf + n, len - (size_t)n);
        return;
    }
    frame_describe(h, buf, len);
}

int exec_same_call(const frame_hdr *a, const frame_hdr *b)
{
    return a->kind == b->kind && a->seq == b->seq && a->count == b->count &&
           a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->algo == b->algo && a->flags == b->flags;
}

static const char *algo_of(const frame_hdr *h)
{
    const char *n = weft_algo_name((weft_algo)h->algo);
    return n ? n : "?";
}

int exec_mismatch(weft_comm *c, int peer, const frame_hdr *theirs, const frame_hdr *mine,
                  const frame_hdr *then)
{
    char t[200], m[200];
    if (then && !exec_same_call(then, theirs)) {
        /* a message of an earlier call, which completed here: say what this
         * rank ran in its place */
        char now[200];
        exec_describe(theirs, t, sizeof t);
        exec_describe(then, m, sizeof m);
        exec_describe(mine, now, sizeof now);
        c->fail_peer = peer;
        return comm_fail(c, WEFT_EMISMATCH,
                         "rank %d is in %s while this rank (%d) was in %s (and is now in %s)",
                         peer, t, c->rank, m, now);
    }
    exec_describe(theirs, t, sizeof t);
    exec_describe(mine, m, sizeof m);
    c->fail_peer = peer;
    frame_hdr same = *theirs;
    same.algo = mine->algo;
    if (theirs->algo != mine->algo && exec_same_call(&same, mine))
        return comm_fail(c, WEFT_EMISMATCH,
                         "rank %d runs %s with algorithm %s while this rank (%d) uses %s", peer,
                         m, algo_of(theirs), c->rank, algo_of(mine));
    if (theirs->algo != mine->algo)
        return comm_fail(c, WEFT_EMISMATCH,
                         "rank %d is in %s (algorithm %s) while this rank (%d) is in %s "
                         "(algorithm %s)",
                         peer, t, algo_of(theirs), c->rank, m, algo_of(mine));
    return comm_fail(c, WEFT_EMISMATCH, "rank %d is in %s while this rank (%d) is in %s", peer,
                     t, c->rank, m);
}
