/* One parameter-server connection: a queue of outgoing messages written
 * without blocking (header, then a payload that may point into the
 * caller's buffer: zero-copy), and an incremental reader that asks its
 * owner where each payload goes, so a pulled chunk lands straight in the
 * worker's parameter buffer. */
#ifndef WEFT_PS_LINK_H
#define WEFT_PS_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "ps/ps_wire.h"

typedef struct ps_out {
    struct ps_out *next;
    ps_msg hdr;
    const void *data; /* payload: borrowed, or own */
    void *own;        /* freed once sent */
    size_t off;       /* bytes of header + payload written */
} ps_out;

typedef struct ps_link ps_link;

/* Where the payload of header m goes: *dst (len bytes; NULL when len is 0),
 * or a negative WEFT_E* with err filled to reject the message. When *own is
 * set the link frees it if the message is dropped. */
typedef int (*ps_dest_fn)(void *arg, ps_link *l, const ps_msg *m, void **dst, char *err,
                          size_t errlen);
/* A whole message has arrived (payload at dst). Nonzero stops reading. */
typedef int (*ps_done_fn)(void *arg, ps_link *l, const ps_msg *m, void *dst);

struct ps_link {
    int fd;         /* -1: closed */
    int peer;       /* worker or server index, for messages */
    ps_out *qh, *qt;
    uint8_t hbuf[sizeof(ps_msg)];
    size_t hhave;
    ps_msg cur;
    int in_body;
    uint8_t *dst;
    int owns_dst;   /* set by a dest callback: freed if the link closes mid-body */
    size_t phave;
    uint64_t sent, recvd;
};

void ps_link_init(ps_link *l, int fd, int peer);
/* Frees the queue and closes the socket. */
void ps_link_close(ps_link *l);
/* Queue m (copied) with payload data of m->len bytes (own: freed after
 * sending), then write what the socket takes. */
int ps_link_send(ps_link *l, const ps_msg *m, const void *data, void *own);
/* Queue a message without payload (a pull request) ahead of everything
 * not yet started, behind earlier such messages: it then reaches the
 * server while the gradients queued before it are still going out, and
 * replies for early chunks stream back while later chunks are sent. */
int ps_link_send_front(ps_link *l, const ps_msg *m);
/* Write queued bytes without blocking: 0 (maybe some left), WEFT_EPEER. */
int ps_link_flush(ps_link *l, char *err, size_t errlen);
int ps_link_pending(const ps_link *l);
/* Read everything available: 0 (would block), WEFT_EPEER (closed or
 * reset), WEFT_EPROTO (bad header), or what dest or done returned. */
int ps_link_read(ps_link *l, ps_dest_fn dest, ps_done_fn done, void *arg, char *err,
              size_t errlen);

#endif
