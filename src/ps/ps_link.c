#include "ps/ps_link.h"

#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

void ps_link_init(ps_link *l, int fd, int peer)
{
    memset(l, 0, sizeof *l);
    l->fd = fd;
    l->peer = peer;
}

static void drop_body(ps_link *l)
{
    l->in_body = 0;
    l->owns_dst = 0;
    l->dst = NULL;
    l->phave = l->hhave = 0;
}

void ps_link_close(ps_link *l)
{
    ps_out *o = l->qh, *next;
    for (; o; o = next) {
        next = o->next;
        free(o->own);
        free(o);
    }
    l->qh = l->qt = NULL;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    if (l->in_body && l->owns_dst)
        free(l->dst);
    drop_body(l);
}

int ps_link_pending(const ps_link *l)
{
    return l->qh != NULL;
}

int ps_link_send(ps_link *l, const ps_msg *m, const void *data, void *own)
{
    ps_out *o = calloc(1, sizeof *o);
    if (!o) {
        free(own);
        return WEFT_ENOMEM;
    }
    o->hdr = *m;
    o->data = data;
    o->own = own;
    if (l->qt)
        l->qt->next = o;
    else
        l->qh = o;
    l->qt = o;
    return 0;
}

int ps_link_send_front(ps_link *l, const ps_msg *m)
{
    ps_out *at = NULL, *o, *p = l->qh;
    if (p && p->off > 0) { /* partly written: it must finish first */
        at = p;
        p = p->next;
    }
    for (; p && p->hdr.type == PS_PULL && p->off == 0; p = p->next)
        at = p;
    if (!(o = calloc(1, sizeof *o)))
        return WEFT_ENOMEM;
    o->hdr = *m;
    if (!at) {
        o->next = l->qh;
        l->qh = o;
    } else {
        o->next = at->next;
        at->next = o;
    }
    if (!o->next)
        l->qt = o;
    return 0;
}

int ps_link_flush(ps_link *l, char *err, size_t errlen)
{
    while (l->qh && l->fd >= 0) {
        ps_out *o = l->qh;
        size_t hl = sizeof o->hdr, total = hl + o->hdr.len;
        struct iovec iov[2];
        int k = 0;
        if (o->off < hl)
            iov[k++] = (struct iovec){ (uint8_t *)&o->hdr + o->off, hl - o->off };
        if (o->hdr.len) {
            size_t p = o->off > hl ? o->off - hl : 0;
            iov[k++] = (struct iovec){ (uint8_t *)o->data + p, o->hdr.len - p };
        }
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)k };
        ssize_t w = sendmsg(l->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            snprintf(err, errlen, "connection lost (send: %s)", strerror(errno));
            return WEFT_EPEER;
        }
        o->off += (size_t)w;
        l->sent += (uint64_t)w;
        if (o->off < total)
            continue;
        l->qh = o->next;
        if (!l->qh)
            l->qt = NULL;
        free(o->own);
        free(o);
    }
    return 0;
}

int ps_link_read(ps_link *l, ps_dest_fn dest, ps_done_fn done, void *arg, char *err,
              size_t errlen)
{
    for (;;) {
        ssize_t r;
        if (l->fd < 0)
            return WEFT_EPEER;
        if (!l->in_body) {
            r = recv(l->fd, l->hbuf + l->hhave, sizeof l->hbuf - l->hhave, MSG_DONTWAIT);
        } else {
            size_t want = l->cur.len - l->phave;
            r = want ? recv(l->fd, l->dst + l->phave, want, MSG_DONTWAIT) : 0;
            if (!want)
                goto complete;
        }
        if (r == 0) {
            snprintf(err, errlen, "connection closed");
            return WEFT_EPEER;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            snprintf(err, errlen, "connection lost (recv: %s)", strerror(errno));
            return WEFT_EPEER;
        }
        l->recvd += (uint64_t)r;
        if (!l->in_body) {
            const char *why;
            void *d = NULL;
            int rc;
            l->hhave += (size_t)r;
            if (l->hhave < sizeof l->hbuf)
                continue;
            if (ps_msg_decode(l->hbuf, l->hhave, &l->cur, &why)) {
                snprintf(err, errlen, "malformed message: %s", why);
                return WEFT_EPROTO;
            }
            if ((rc = dest(arg, l, &l->cur, &d, err, errlen)))
                return rc;
            l->dst = d;
            l->phave = 0;
            l->in_body = 1;
            if (l->cur.len)
                continue;
        } else {
            l->phave += (size_t)r;
            if (l->phave < l->cur.len)
                continue;
        }
    complete : {
        ps_msg m = l->cur;
        void *d = l->dst;
        int rc;
        drop_body(l);
        if ((rc = done(arg, l, &m, d)))
            return rc;
    }
    }
}
