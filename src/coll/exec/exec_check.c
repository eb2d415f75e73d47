/* Errors of a message in flight (exec_check.h). */
#include "coll/exec/exec_check.h"

#include "coll/exec/callboard.h"
#include "coll/exec/mismatch.h"

int exec_fail_peer(weft_comm *c, int peer, const frame_hdr *fp, const char *what)
{
    char d[160];
    exec_describe(fp, d, sizeof d);
    c->fail_peer = peer;
    return comm_fail(c, WEFT_EPEER, "rank %d died (its connection to rank %d %s) during %s",
                     peer, c->rank, what, d);
}

int exec_check_header(weft_comm *c, const sched_op *o, opstate *st, const frame_hdr *fp)
{
    frame_hdr *h = &st->h;
    char mine[200];
    const char *why;
    c->fail_peer = o->peer;
    if (frame_decode(&st->h, sizeof st->h, h, &why))
        return comm_fail(c, WEFT_EPROTO, "garbage from rank %d: %s (magic 0x%08x, version %u)",
                         o->peer, why, h->magic, h->version);
    if (!exec_same_call(h, fp))
        return callboard_mismatch(c, o->peer, h, fp);
    if (h->len != o->len) {
        exec_describe(fp, mine, sizeof mine);
        return comm_fail(c, WEFT_EMISMATCH,
                         "rank %d sent %llu bytes where this rank (%d) expects %llu in %s",
                         o->peer, (unsigned long long)h->len, c->rank,
                         (unsigned long long)o->len, mine);
    }
    c->fail_peer = -1;
    return 0;
}
