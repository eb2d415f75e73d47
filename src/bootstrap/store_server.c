/* The store server: one thread, poll() over the listening socket, the
 * clients and a wake-up pipe. A GET for a missing key parks its client
 * (nothing more is read from it) until the key is set or its deadline
 * passes, so waiting costs no CPU. */
#include "bootstrap/store.h"
#include "bootstrap/store_wire.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    char *key;
    void *val;
    size_t len;
} entry;

typedef struct {
    int fd;
    char *buf;          /* bytes of the request being read */
    size_t have, cap;
    int parked;         /* waiting in GET for `buf`'s key */
    double deadline;
} client;

struct store_server {
    int lfd;
    int wake[2];
    pthread_t thread;
    int threaded;
    entry *kv;
    size_t nkv, kvcap;
    client *cl;
    size_t ncl, clcap;
};

static entry *find(store_server *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (!strcmp(s->kv[i].key, key))
            return &s->kv[i];
    return NULL;
}

static int put(store_server *s, const char *key, const void *val, size_t len)
{
    entry *e = find(s, key);
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return WEFT_ENOMEM;
    memcpy(copy, val, len);
    if (!e) {
        if (s->nkv == s->kvcap) {
            size_t cap = s->kvcap ? 2 * s->kvcap : 64;
            entry *n = realloc(s->kv, cap * sizeof *n);
            if (!n) {
                free(copy);
                return WEFT_ENOMEM;
            }
            s->kv = n;
            s->kvcap = cap;
        }
        e = &s->kv[s->nkv];
        e->key = strdup(key);
        if (!e->key) {
            free(copy);
            return WEFT_ENOMEM;
        }
        s->nkv++;
    } else {
        free(e->val);
    }
    e->val = copy;
    e->len = len;
    return 0;
}

static void del(store_server *s, const char *key)
{
    entry *e = find(s, key);
    if (!e)
        return;
    free(e->key);
    free(e->val);
    *e = s->kv[--s->nkv];
}

static int reply(client *c, int status, const void *val, size_t len, int64_t value)
{
    store_resp r = { .magic = STORE_MAGIC, .status = status, .vallen = len, .value = value };
    double dl = clock_now() + 10.0;
    int rc = sock_write_full(c->fd, &r, sizeof r, dl);
    if (!rc && len)
        rc = sock_write_full(c->fd, val, len, dl);
    return rc;
}

static void drop(store_server *s, size_t i)
{
    close(s->cl[i].fd);
    free(s->cl[i].buf);
    s->cl[i] = s->cl[--s->ncl];
}

/* Bytes still missing from client c's current request; 0 when complete,
 * negative when the header is invalid. */
static long missing(const client *c)
{
    const store_req *q = (const store_req *)c->buf;
    if (c->have < sizeof *q)
        return (long)(sizeof *q - c->have);
    if (q->magic != STORE_MAGIC || q->keylen == 0 || q->keylen > STORE_MAX_KEY ||
        q->vallen > STORE_MAX_VALUE || q->cmd < STORE_SET || q->cmd > STORE_DEL)
        return -1;
    return (long)(sizeof *q + q->keylen + q->vallen - c->have);
}

/* Execute the complete request in c->buf. Returns 1 if the client parked,
 * 0 when answered, negative to drop the client. */
static int serve(store_server *s, client *c)
{
    store_req *q = (store_req *)c->buf;
    char key[STORE_MAX_KEY + 1];
    const char *val = c->buf + sizeof *q + q->keylen;
    entry *e;
    int rc = 0;
    memcpy(key, c->buf + sizeof *q, q->keylen);
    key[q->keylen] = 0;
    switch (q->cmd) {
    case STORE_SET:
        rc = reply(c, put(s, key, val, q->vallen), NULL, 0, 0);
        break;
    case STORE_GET:
        e = find(s, key);
        if (e) {
            rc = reply(c, 0, e->val, e->len, 0);
        } else if (c->parked && clock_now() >= c->deadline) {
            rc = reply(c, WEFT_ETIMEDOUT, NULL, 0, 0);
        } else {
            if (!c->parked)
                c->deadline = clock_now() + (double)q->arg / 1e3;
            c->parked = 1;
            return 1;
        }
        break;
    case STORE_ADD: {
        int64_t v = 0;
        e = find(s, key);
        if (e && e->len == sizeof v)
            memcpy(&v, e->val, sizeof v);
        v += q->arg;
        rc = reply(c, put(s, key, &v, sizeof v), NULL, 0, v);
        break;
    }
    case STORE_CHECK:
        rc = reply(c, 0, NULL, 0, find(s, key) != NULL);
        break;
    case STORE_DEL:
        del(s, key);
        rc = reply(c, 0, NULL, 0, 0);
        break;
    }
    c->parked = 0;
    c->have = 0;
    return rc < 0 ? rc : 0;
}

/* Read what is available from client i and serve complete requests. */
static int pump(store_server *s, client *c)
{
    for (;;) {
        long need = missing(c);
        if (need < 0)
            return WEFT_EPROTO;
        if (need == 0) {
            int rc = serve(s, c);
            if (rc != 0)
                return rc < 0 ? rc : 0;
            continue;
        }
        if (c->have + (size_t)need > c->cap) {
            size_t cap = c->have + (size_t)need;
            char *n = realloc(c->buf, cap);
            if (!n)
                return WEFT_ENOMEM;
            c->buf = n;
            c->cap = cap;
        }
        ssize_t got = recv(c->fd, c->buf + c->have, (size_t)need, MSG_DONTWAIT);
        if (got > 0) {
            c->have += (size_t)got;
            continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        return WEFT_EPEER; /* closed: a normal way for a client to leave */
    }
}

static void *loop(void *arg)
{
    store_server_run(arg);
    return NULL;
}

int store_server_run(store_server *s)
{
    struct pollfd *pf = NULL;
    size_t pfcap = 0;
    for (;;) {
        size_t n = s->ncl + 2;
        double next = clock_now() + 3600;
        if (n > pfcap) {
            struct pollfd *np = realloc(pf, n * 2 * sizeof *np);
            if (!np)
                break;
            pf = np;
            pfcap = n * 2;
        }
        pf[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
        pf[1] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
        for (size_t i = 0; i < s->ncl; i++) {
            pf[i + 2] = (struct pollfd){ .fd = s->cl[i].fd,
                                         .events = s->cl[i].parked ? 0 : POLLIN };
            if (s->cl[i].parked && s->cl[i].deadline < next)
                next = s->cl[i].deadline;
        }
        int nready = poll(pf, n, clock_ms_until(next));
        if (nready < 0 && errno != EINTR)
            break;
        if (nready > 0 && pf[0].revents)
            break;
        if (nready > 0 && (pf[1].revents & POLLIN)) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                if (s->ncl == s->clcap) {
                    size_t cap = s->clcap ? 2 * s->clcap : 16;
                    client *nc = realloc(s->cl, cap * sizeof *nc);
                    if (!nc) {
                        close(fd);
                        continue;
                    }
                    s->cl = nc;
                    s->clcap = cap;
                }
                sock_tune(fd);
                s->cl[s->ncl++] = (client){ .fd = fd };
            }
        }
        /* Walk backwards so that dropping client i (moving the last one into
         * its slot) never skips a client. */
        int changed = 0;
        for (size_t i = s->ncl; i-- > 0;) {
            client *c = &s->cl[i];
            int rc = 0;
            if (i + 2 < n && (pf[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) && !c->parked) {
                size_t before = s->nkv;
                rc = pump(s, c);
                changed |= s->nkv != before || rc == 0;
            }
            if (rc < 0)
                drop(s, i);
        }
        /* New keys or expired deadlines may release parked clients. */
        (void)changed;
        for (size_t i = s->ncl; i-- > 0;) {
            client *c = &s->cl[i];
            if (!c->parked)
                continue;
            int rc = serve(s, c);
            if (rc == 0)
                rc = pump(s, c);
            if (rc < 0)
                drop(s, i);
        }
    }
    free(pf);
    return 0;
}

int store_server_create(store_server **out, const char *host, int port, int *port_out,
                        char *err, size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    s->lfd = sock_listen(host, port, 1024, port_out, err, errlen);
    if (s->lfd < 0) {
        int rc = s->lfd;
        free(s);
        return rc;
    }
    if (pipe2(s->wake, O_CLOEXEC) < 0) {
        close(s->lfd);
        free(s);
        return WEFT_ESYS;
    }
    *out = s;
    return 0;
}

int store_server_start(store_server **out, const char *host, int port, int *port_out,
                       char *err, size_t errlen)
{
    int rc = store_server_create(out, host, port, port_out, err, errlen);
    if (rc)
        return rc;
    if (pthread_create(&(*out)->thread, NULL, loop, *out)) {
        store_server_stop(*out);
        snprintf(err, errlen, "cannot start the store thread");
        return WEFT_ESYS;
    }
    (*out)->threaded = 1;
    return 0;
}

void store_server_stop(store_server *s)
{
    if (!s)
        return;
    if (write(s->wake[1], "x", 1) < 0) {
        /* the loop also ends when the pipe closes */
    }
    if (s->threaded)
        pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->ncl; i++) {
        close(s->cl[i].fd);
        free(s->cl[i].buf);
    }
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->cl);
    free(s->kv);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
