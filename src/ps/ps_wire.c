#include "ps/ps_wire.h"

#include "weft.h"

#include <string.h>

ps_msg ps_msg_make(int type)
{
    ps_msg m;
    memset(&m, 0, sizeof m);
    m.magic = PS_MAGIC;
    m.type = (uint8_t)type;
    return m;
}

const char *ps_msg_name(int type)
{
    static const char *req[] = { "?", "init", "push", "pull", "clock", "barrier", "checkpoint",
                                 "bye", "ping" };
    static const char *rep[] = { "ack", "data", "error", "hello", "pong" };
    if (type >= PS_INIT && type <= PS_REQ_LAST)
        return req[type];
    if (type >= PS_ACK && type <= PS_REPLY_LAST)
        return rep[type - PS_ACK];
    return "?";
}

static int bad(const char **why, const char *reason)
{
    *why = reason;
    return WEFT_EPROTO;
}

int ps_msg_decode(const void *buf, size_t n, ps_msg *m, const char **why)
{
    int t;
    if (n != sizeof *m)
        return bad(why, "wrong header size");
    memcpy(m, buf, sizeof *m);
    t = m->type;
    if (m->magic != PS_MAGIC)
        return bad(why, "not a parameter-server message (bad magic)");
    if (m->pad[0] || m->pad[1] || m->pad[2] || m->pad2)
        return bad(why, "reserved bytes not zero");
    if (!((t >= PS_INIT && t <= PS_REQ_LAST) || (t >= PS_ACK && t <= PS_REPLY_LAST)))
        return bad(why, "unknown message type");
    if (m->clock < 0)
        return bad(why, "negative clock");
    if (t == PS_ERR) {
        if (m->status >= 0 || m->status < WEFT_EIO)
            return bad(why, "error reply without a valid error code");
        if (m->len > PS_ERR_MAX)
            return bad(why, "error text too long");
        return 0;
    }
    if (m->status != 0)
        return bad(why, "status set on a message that has none");
    if (m->len % 4 || m->len > PS_MAX_PAYLOAD)
        return bad(why, "payload length not a whole number of floats within limits");
    if (m->len && t != PS_INIT && t != PS_PUSH && t != PS_DATA)
        return bad(why, "payload on a message that carries none");
    if (t == PS_PUSH && m->len == 0)
        return bad(why, "push without a gradient");
    if (t == PS_INIT && (m->total == 0 || m->total > ((uint64_t)1 << 48)))
        return bad(why, "init with a bad tensor size");
    return 0;
}
