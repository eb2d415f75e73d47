/* The executor's libfabric half: a pair that talks libfabric
 * (coll/comm_net.h) moves each message as tagged sends and receives
 * (transport/ofi.h) instead of bytes on a socket; the header is checked
 * as on TCP, and a receive that reduces does so chunk by chunk as each
 * lands. */
#include "coll/exec/exec_ofi.h"

#include "coll/exec/exec_int.h"

#include "coll/exec/exec_check.h"

#include "coll/exec/callboard.h"
#include "coll/exec/mismatch.h"

#include "coll/comm_net.h"
#include "coll/reduce.h"

#include <poll.h>
#include <stdio.h>

int exec_ofi_pair(const weft_comm *c, int peer) { return comm_net_ofi(c, peer); }

/* What the op waits for when it cannot move: the completion queue. */
static void waits_on_cq(weft_comm *c, opstate *st)
{
    st->wfd = ofi_wait_fd(c->ofi);
    st->wev = POLLIN;
    st->lk = NULL;
    st->ofi = 1;
}

static int failed(weft_comm *c, int peer, int rc, const char *e, const frame_hdr *fp)
{
    char d[160];
    if (rc == WEFT_EPEER) {
        char what[360];
        snprintf(what, sizeof what, "failed in libfabric: %s", e);
        return exec_fail_peer(c, peer, fp, what);
    }
    exec_describe(fp, d, sizeof d);
    c->fail_peer = peer;
    return comm_fail(c, rc, "%s, during %s", e, d);
}

int exec_ofi_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp)
{
    char e[300];
    waits_on_cq(c, st);
    int rc = ofi_send(c->ofi, o->peer, OFI_CH_COLL, &st->h, bufs[o->buf] + o->off, o->len, e,
                      sizeof e);
    if (rc < 0)
        return failed(c, o->peer, rc, e, fp);
    st->complete = rc == 1;
    return rc > 0;
}

typedef struct {
    weft_comm *c;
    const sched_op *o;
    char **bufs;
    const frame_hdr *fp;
    int failed;          /* the error is the reduction's, recorded already */
} reduce_ctx;

static int reduce_chunk(void *arg, uint64_t off, const void *p, size_t n)
{
    reduce_ctx *x = arg;
    const sched_op *o = x->o;
    size_t es = weft_dtype_size((weft_dtype)x->fp->dtype);
    int rc = reduce_apply(x->bufs[o->buf] + o->off + off, x->bufs[o->src_buf] + o->src_off + off,
                          p, n / es, (weft_dtype)x->fp->dtype, (weft_op)x->fp->op);
    x->failed = rc != 0;
    return rc ? comm_fail(x->c, rc, "bad reduction") : 0;
}

int exec_ofi_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp)
{
    char e[300];
    int rc, moved = 0;
    waits_on_cq(c, st);
    if (st->hdr < sizeof st->h) {
        if ((rc = ofi_recv_hdr(c->ofi, o->peer, OFI_CH_COLL, &st->h, e, sizeof e)) < 0)
            return failed(c, o->peer, rc, e, fp);
        if (rc == 0)
            return 0;
        st->hdr = sizeof st->h;
        if ((rc = exec_check_header(c, o, st, fp)))
            return rc;
        moved = 1;
    }
    reduce_ctx x = { c, o, bufs, fp, 0 };
    int reduce = o->kind == SOP_RECV_REDUCE;
    rc = ofi_recv_body(c->ofi, o->peer, OFI_CH_COLL, reduce ? NULL : bufs[o->buf] + o->off,
                       o->len, reduce ? reduce_chunk : NULL, &x, e, sizeof e);
    if (rc < 0)
        return x.failed ? rc : failed(c, o->peer, rc, e, fp);
    if (rc == 1) {
        st->done = o->len;
        st->complete = 1;
    }
    return moved || rc > 0;
}

int exec_ofi_stray(weft_comm *c, const weft_sched *s, uint32_t b, uint32_t e,
                   const opstate *st, const frame_hdr *fp, int q)
{
    char err[200];
    const char *why;
    frame_hdr h;
    for (uint32_t i = b; i < e; i++)
        if (s->ops[i].peer == q && s->ops[i].kind != SOP_SEND && st[i - b].hdr &&
            !st[i - b].complete)
            return 0; /* a message from q is under way: its next header is not due */
    /* posts the header receive the next op from q would post anyway, and
     * keeps what arrives for it; a failure here is that op's to report */
    if (ofi_recv_hdr(c->ofi, q, OFI_CH_COLL, &h, err, sizeof err) != 1 ||
        frame_decode(&h, sizeof h, &h, &why) || h.seq != fp->seq || h.kind == WEFT_COLL_SEND)
        return 0;
    /* Unlike TCP's peek this compares root and op too: the sub-steps
     * that vary them (direct's) run on shared memory, never here, and a
     * large libfabric send waits for its receive (a socket's buffers
     * would have taken it), so a root that only sends must learn here. */
    if (!exec_same_call(&h, fp))
        return callboard_mismatch(c, q, &h, fp);
    return 0;
}
