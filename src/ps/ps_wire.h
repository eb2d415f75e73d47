/* The parameter server's wire format: one fixed header per message, then
 * len payload bytes (floats, or an error's text). Whatever arrives from a
 * peer passes ps_msg_decode before anything looks at it. Little-endian and
 * packed by construction, as core/frame.h. */
#ifndef WEFT_PS_WIRE_H
#define WEFT_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PS_MAGIC 0x50544657u /* "WFTP" */
#define PS_MAX_CHUNK (1u << 24)          /* elements */
#define PS_MAX_PAYLOAD ((uint64_t)PS_MAX_CHUNK * 4)
#define PS_ERR_MAX 400                   /* bytes of an error's text */

enum {
    /* worker -> server */
    PS_INIT = 1,  /* key, chunk, total = tensor elements; payload: initial values or none */
    PS_PUSH,      /* key, chunk, clock; total = this worker's sequence number for
                     the chunk (1, 2, ...: a server drops one it has taken in);
                     payload: gradient */
    PS_PULL,      /* key, chunk, clock; total = the sequence number of this
                     worker's last push to the chunk (taken in before the pull) */
    PS_CLOCK,     /* clock = the worker's new clock */
    PS_BARRIER,
    PS_CKPT,
    PS_BYE,
    PS_PING,      /* are you there? answered at once, whatever waits (a worker that has
                     waited long tells a stopped server from one that waits itself) */
    PS_REQ_LAST = PS_PING,
    /* server -> worker */
    PS_ACK = 16,  /* echoes id, key, chunk; to an init: clock = where this worker's
                     clock starts, total = its last push sequence number */
    PS_DATA,      /* payload: the chunk; clock = its update count; total = the
                     oldest live worker clock when it was read */
    PS_ERR,       /* status < 0; payload: text */
    PS_HELLO,     /* first message on every connection, unasked: id = the
                     server's incarnation (a new one: it restarted), total = 1
                     when its updates are durable, clock = the clock it holds
                     for this worker */
    PS_PONG,      /* to a ping: echoes id */
    PS_REPLY_LAST = PS_PONG
};

typedef struct {
    uint32_t magic;
    uint8_t type;
    uint8_t pad[3];
    int32_t status;  /* replies: 0 or WEFT_E*; requests: 0 */
    uint32_t key;
    uint32_t chunk;
    uint32_t pad2;
    uint64_t id;     /* request id, echoed in replies */
    int64_t clock;
    uint64_t total;
    uint64_t len;    /* payload bytes */
} ps_msg;

_Static_assert(sizeof(ps_msg) == 56, "ps_msg layout");

/* Fills a header with magic and type, everything else zero. */
ps_msg ps_msg_make(int type);
/* Reads n bytes at buf (unaligned is fine); 0, or WEFT_EPROTO with *why
 * pointing at a static reason. */
int ps_msg_decode(const void *buf, size_t n, ps_msg *out, const char **why);
const char *ps_msg_name(int type);

#endif
