/* Hints: a rank that has waited STRAY_AFTER_S for a peer's message over
 * TCP sends that peer a bare header (FRAME_HINT, no payload) naming the
 * call it is in, once per operation. Two ranks that only wait to receive
 * from each other (both the root of a reduce whose roots disagree) would
 * otherwise never put a byte on the wire, and only the timeout would end
 * them; with the hint the peer compares the call with its own, as it
 * compares every header, and a mismatch names both sides. A hint goes
 * only between messages: on a connection this round is not writing and
 * whose queue is empty, so it is never torn (the kernel takes a whole
 * small write into an empty buffer). Pairs that talk through rings or
 * libfabric get none: the call board and their own checks cover them. */
#include "coll/exec/exec_hint.h"

#include "coll/exec/exec_int.h"
#include "coll/exec/exec_ofi.h"
#include "coll/exec/exec_shm.h"

#include "coll/exec/callboard.h"
#include "coll/exec/mismatch.h"

#include "coll/exec/live.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>

int exec_hint_send(weft_comm *c, int q, const frame_hdr *call)
{
    int fd, queued = 0;
    char e[200];
    if (q == c->rank || exec_ofi_pair(c, q) || live_hinted(c, q, call->seq, 0))
        return 0;
    int rc = tcp_out(&c->net, q, &fd, e, sizeof e);
    if (rc <= 0)
        return 0; /* not connected yet (a failure is the ops' to report) */
    if (exec_same_host(c, q) && (rc = exec_shm_hello_tcp(c, q, fd, 1, call)) != 1)
        return rc < 0 ? rc : 0;
    if (ioctl(fd, TIOCOUTQ, &queued) != 0 || queued != 0)
        return 0;
    frame_hdr h = *call;
    h.flags |= FRAME_HINT;
    h.len = 0;
    ssize_t n = send(fd, &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof h)
        live_hinted(c, q, call->seq, 1);
    else if (n > 0)
        return comm_fail(c, WEFT_ESYS, "a hint to rank %d went out torn", q);
    return 0; /* not sent (a full or closed socket): the ops will see why */
}

int exec_hint_check(weft_comm *c, int q, const frame_hdr *h)
{
    frame_hdr theirs = *h;
    theirs.flags &= (uint16_t)~FRAME_HINT;
    theirs.len = 0;
    const frame_hdr *then = live_past(c, theirs.seq);
    if (!then)
        return 0; /* this rank is not that far yet, or long past it */
    frame_hdr mine = *then;
    mine.len = 0;
    if (exec_same_call(&theirs, &mine))
        return 0;
    const frame_hdr *now = live_past(c, c->seq);
    char t[200], m[200], d[200];
    exec_describe(&theirs, t, sizeof t);
    exec_describe(&mine, m, sizeof m);
    c->fail_peer = q;
    if (now && now->seq != mine.seq) {
        exec_describe(now, d, sizeof d);
        return comm_fail(c, WEFT_EMISMATCH,
                         "rank %d is in %s while this rank (%d) was in %s (and is now in %s)",
                         q, t, c->rank, m, d);
    }
    return callboard_mismatch(c, q, &theirs, &mine);
}

int exec_hint_take(weft_comm *c, int q, const frame_hdr *raw)
{
    frame_hdr h;
    const char *why;
    if (frame_decode(raw, sizeof *raw, &h, &why) || !(h.flags & FRAME_HINT))
        return 0;
    int rc = exec_hint_check(c, q, &h);
    return rc ? rc : 1;
}
