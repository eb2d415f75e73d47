/* Building schedules: append ops and close rounds (plan.h). */
#include "coll/sched/plan.h"

#include <stdlib.h>
#include <string.h>

void sched_init(weft_sched *s) { memset(s, 0, sizeof *s); }

void sched_free(weft_sched *s)
{
    free(s->ops);
    free(s->round_end);
    sched_init(s);
}

void sched_reset(weft_sched *s)
{
    s->nops = 0;
    s->nrounds = 0;
    s->tmp_bytes = 0;
    s->err = 0;
}

static void push(weft_sched *s, const sched_op *op)
{
    if (s->err)
        return;
    if (s->nops == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        sched_op *n = realloc(s->ops, (size_t)cap * sizeof *n);
        if (!n) {
            s->err = WEFT_ENOMEM;
            return;
        }
        s->ops = n;
        s->cap = cap;
    }
    s->ops[s->nops++] = *op;
}

void sched_end_round(weft_sched *s)
{
    uint32_t start = s->nrounds ? s->round_end[s->nrounds - 1] : 0;
    if (s->err || s->nops == start)
        return;
    if (s->nrounds == s->rcap) {
        uint32_t cap = s->rcap ? s->rcap * 2 : 16;
        uint32_t *n = realloc(s->round_end, (size_t)cap * sizeof *n);
        if (!n) {
            s->err = WEFT_ENOMEM;
            return;
        }
        s->round_end = n;
        s->rcap = cap;
    }
    s->round_end[s->nrounds++] = s->nops;
}

static void net(weft_sched *s, int kind, int peer, int buf, uint64_t off,
                int src_buf, uint64_t src_off, uint64_t len)
{
    sched_op op = { .kind = (uint8_t)kind, .buf = (uint8_t)buf,
                    .src_buf = (uint8_t)src_buf, .peer = peer,
                    .off = off, .src_off = src_off, .len = len };
    push(s, &op);
}

void sched_send(weft_sched *s, int peer, int buf, uint64_t off, uint64_t len)
{
    net(s, SOP_SEND, peer, buf, off, buf, 0, len);
}

void sched_recv(weft_sched *s, int peer, int buf, uint64_t off, uint64_t len)
{
    net(s, SOP_RECV, peer, buf, off, buf, 0, len);
}

void sched_recv_reduce(weft_sched *s, int peer, int buf, uint64_t off,
                       int src_buf, uint64_t src_off, uint64_t len)
{
    net(s, SOP_RECV_REDUCE, peer, buf, off, src_buf, src_off, len);
}

void sched_copy(weft_sched *s, int dst_buf, uint64_t dst_off, int src_buf,
                uint64_t src_off, uint64_t len)
{
    if (len == 0 || (dst_buf == src_buf && dst_off == src_off))
        return;
    net(s, SOP_COPY, -1, dst_buf, dst_off, src_buf, src_off, len);
}

void sched_reduce(weft_sched *s, int dst_buf, uint64_t dst_off, int src_buf,
                  uint64_t src_off, uint64_t len)
{
    if (len == 0)
        return;
    net(s, SOP_REDUCE, -1, dst_buf, dst_off, src_buf, src_off, len);
}

void sched_need_tmp(weft_sched *s, uint64_t bytes)
{
    if (bytes > s->tmp_bytes)
        s->tmp_bytes = bytes;
}
