/* The store server: one thread, poll() over the listening socket, the
 * clients and a wake-up pipe. A GET for a missing key parks its client
 * (nothing more is read from it) until the key is set or its deadline
 * passes, so waiting costs no CPU. */
#include "bootstrap/store.h"
#include "bootstrap/store_wire.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "transport/sock.h"
#include "transport/tls.h"
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

enum { ST_HELLO = 0, ST_PROOF, ST_READY };

typedef struct {
    int fd;             /* with TLS, once authenticated: the pump's end */
    char *buf;          /* bytes of the request (or auth message) being read */
    size_t have, cap;
    int parked;         /* waiting in GET for `buf`'s key */
    double deadline;
    int stage;          /* ST_*: authentication first, when there is a secret */
    double auth_deadline;
    uint8_t expect[AUTH_MAC_LEN];
    uint8_t key[AUTH_MAC_LEN]; /* TLS key of this connection */
    char *hold_key;     /* STORE_HOLD: set to hold_val when this client goes */
    void *hold_val;
    size_t hold_len;
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
    char *secret;       /* NULL: no authentication */
    int loglevel;
    int tls;            /* WEFT_TLS=1: clients continue in TLS once authenticated */
    tls_pump *pump;
    int spare;          /* a descriptor held back (/dev/null; -1: none), given up
                           to accept and close a connection when this process is
                           out of descriptors, so that the rank hears it at once */
    int accept_errno;   /* the accept failure last logged (0: none since a success) */
    double accept_retry; /* after a failed accept: listen again from then */
};

static const char store_bind[] = "weft-store";

/* A parked client sends nothing until answered, so all poll need report
 * for it is its end: a process that died while waiting (a rank parked on
 * its failure watch) must still release the key it holds. */
#ifdef POLLRDHUP
#define PARKED_EVENTS POLLRDHUP
#else
#define PARKED_EVENTS 0 /* POLLHUP and POLLERR only: a death shows at the reply */
#endif

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

/* Returns 1 when the client held a key, now set: parked clients may be
 * waiting for it. */
static int drop(store_server *s, size_t i)
{
    client *c = &s->cl[i];
    int held = c->hold_key != NULL;
    if (held && put(s, c->hold_key, c->hold_val, c->hold_len))
        log_msg(s->loglevel, LOG_WARN, -1, "store: out of memory setting %s", c->hold_key);
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    free(c->hold_key);
    free(c->hold_val);
    s->cl[i] = s->cl[--s->ncl];
    return held;
}

/* STORE_HOLD: the connection's end is the event; a later HOLD replaces it. */
static int hold(client *c, const char *key, const void *val, size_t len)
{
    char *k = strdup(key);
    void *v = malloc(len ? len : 1);
    if (!k || !v) {
        free(k);
        free(v);
        return WEFT_ENOMEM;
    }
    memcpy(v, val, len);
    free(c->hold_key);
    free(c->hold_val);
    c->hold_key = k;
    c->hold_val = v;
    c->hold_len = len;
    return 0;
}

/* Bytes still missing from client c's current message; 0 when complete,
 * negative when the header is invalid. */
static long missing(const client *c)
{
    store_req q;
    const char *why;
    if (c->stage == ST_HELLO) {
        uint32_t magic;
        if (c->have >= sizeof magic) {
            memcpy(&magic, c->buf, sizeof magic);
            if (magic != AUTH_MAGIC)
                return -1; /* a client that does not authenticate: drop it now */
        }
        return (long)(sizeof(auth_hello) - c->have);
    }
    if (c->stage == ST_PROOF)
        return (long)(AUTH_MAC_LEN - c->have);
    if (c->have < sizeof q)
        return (long)(sizeof q - c->have);
    if (store_req_decode(c->buf, c->have, &q, &why))
        return -1;
    return (long)(sizeof q + q.keylen + q.vallen - c->have);
}

/* A complete authentication message from c. 0, or negative to drop. */
static int authenticate(store_server *s, client *c)
{
    const char *why;
    if (c->stage == ST_HELLO) {
        auth_hello h;
        auth_challenge ch;
        if (auth_hello_decode(c->buf, c->have, &h, &why) || h.role != AUTH_ROLE_STORE ||
            auth_challenge_make(s->secret, &h, store_bind, sizeof store_bind, &ch, c->expect) ||
            (s->tls &&
             auth_channel_key(s->secret, &h, &ch, store_bind, sizeof store_bind, c->key)) ||
            sock_write_full(c->fd, &ch, sizeof ch, clock_now() + 1.0)) {
            log_msg(s->loglevel, LOG_WARN, -1,
                    "store: dropped a connection that does not authenticate");
            return WEFT_EAUTH;
        }
        c->stage = ST_PROOF;
    } else {
        if (auth_check((const uint8_t *)c->buf, c->expect)) {
            log_msg(s->loglevel, LOG_WARN, -1,
                    "store: dropped a connection that failed to prove the job secret");
            return WEFT_EAUTH;
        }
        if (s->tls) {
            char e[160];
            int app, rc;
            if (!s->pump && (rc = tls_pump_new(&s->pump, s->loglevel, -1, e, sizeof e)))
                return rc;
            if ((rc = tls_pump_add(s->pump, c->fd, 1, c->key, "a store client", &app, e,
                                   sizeof e))) {
                c->fd = -1;
                log_msg(s->loglevel, LOG_WARN, -1, "store: dropped a client: %s", e);
                return rc;
            }
            c->fd = app;
        }
        c->stage = ST_READY;
    }
    c->have = 0;
    return 0;
}

/* Execute the complete request in c->buf. Returns 1 if the client parked,
 * 0 when answered, negative to drop the client. */
static int serve(store_server *s, client *c)
{
    store_req hdr, *q = &hdr;
    char key[STORE_MAX_KEY + 1];
    const void *vp;
    const char *val, *why;
    entry *e;
    int rc = 0;
    if (store_msg_decode(c->buf, c->have, &hdr, key, &vp, &why))
        return WEFT_EPROTO;
    val = vp;
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
    case STORE_HOLD:
        rc = reply(c, hold(c, key, val, q->vallen), NULL, 0, 0);
        break;
    case STORE_SETNX: {
        int set = 0, st = 0;
        if (!(e = find(s, key))) {
            st = put(s, key, val, q->vallen);
            set = !st;
            e = find(s, key);
        }
        rc = e ? reply(c, 0, e->val, e->len, set) : reply(c, st, NULL, 0, 0);
        break;
    }
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
        if (need < 0) {
            if (c->stage != ST_READY)
                log_msg(s->loglevel, LOG_WARN, -1,
                        "store: dropped a connection that does not authenticate");
            return WEFT_EPROTO;
        }
        if (need == 0 && c->stage != ST_READY) {
            int rc = authenticate(s, c);
            if (rc)
                return rc;
            continue;
        }
        if (need == 0) {
            /* one request per turn: parked clients hear of a new key before
             * this client's next request is served (a rank that posts a
             * failure notice and then exits relies on it) */
            int rc = serve(s, c);
            return rc < 0 ? rc : 0;
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

/* Out of descriptors (or socket memory) the listener stays readable and
 * the ranks that connect wait for a store that never answers until their
 * timeout says it never arrived. So: say which limit this process
 * reached, once for each cause, and with the spare descriptor take the
 * connection and close it, so that the rank at its other end learns at
 * once that the store dropped it. */
static void accept_failed(store_server *s, int e)
{
    char msg[300];
    if (e != s->accept_errno) {
        snprintf(msg, sizeof msg, "store: cannot accept a rank's connection: %s", strerror(e));
        sock_limit_note(e, msg, sizeof msg);
        log_msg(s->loglevel, LOG_ERROR, -1, "%s", msg);
        s->accept_errno = e;
    }
    if (e == EMFILE && s->spare >= 0) {
        close(s->spare);
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
        s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    s->accept_retry = clock_now() + 0.05;
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
    if (s->tls && !s->secret) {
        log_msg(s->loglevel, LOG_ERROR, -1,
                "store: WEFT_TLS=1 needs a job secret (WEFT_JOB_SECRET)");
        return WEFT_ECONFIG;
    }
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
        /* a listener that failed to accept is still readable: not looked
         * at for a moment, or the loop would spin on it */
        int resting = clock_now() < s->accept_retry;
        pf[1] = (struct pollfd){ .fd = resting ? -1 : s->lfd, .events = POLLIN };
        if (resting && s->accept_retry < next)
            next = s->accept_retry;
        for (size_t i = 0; i < s->ncl; i++) {
            pf[i + 2] = (struct pollfd){ .fd = s->cl[i].fd,
                                         .events = s->cl[i].parked ? PARKED_EVENTS : POLLIN };
            if (s->cl[i].parked && s->cl[i].deadline < next)
                next = s->cl[i].deadline;
            if (s->cl[i].stage != ST_READY && s->cl[i].auth_deadline < next)
                next = s->cl[i].auth_deadline;
        }
        int nready = poll(pf, n, clock_ms_until(next));
        if (nready < 0 && errno != EINTR)
            break;
        if (nready > 0 && pf[0].revents)
            break;
        if (nready > 0 && (pf[1].revents & POLLIN)) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                accept_failed(s, errno);
            else if (fd >= 0)
                s->accept_errno = 0;
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
                s->cl[s->ncl++] = (client){ .fd = fd, .stage = s->secret ? ST_HELLO : ST_READY,
                                            .auth_deadline = clock_now() + STORE_AUTH_WAIT_S };
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
            } else if (i + 2 < n && c->parked && (pf[i + 2].revents & ~POLLIN)) {
                rc = WEFT_EPEER; /* a parked client that hung up: its process is gone */
            }
            if (rc == 0 && c->stage != ST_READY && clock_now() >= c->auth_deadline) {
                log_msg(s->loglevel, LOG_WARN, -1,
                        "store: dropped a connection that did not authenticate in %.0f s",
                        STORE_AUTH_WAIT_S);
                rc = WEFT_EAUTH;
            }
            if (rc < 0)
                drop(s, i);
        }
        /* New keys or expired deadlines may release parked clients; a
         * dropped one's held key is new too, so go round again then. */
        (void)changed;
        for (int again = 1; again;) {
            again = 0;
            for (size_t i = s->ncl; i-- > 0;) {
                client *c = &s->cl[i];
                if (!c->parked)
                    continue;
                /* anything this client sent meanwhile waits for the next turn:
                 * every parked client hears of a new key before any later
                 * request is served */
                int rc = serve(s, c);
                if (rc < 0)
                    again |= drop(s, i);
            }
        }
    }
    free(pf);
    return 0;
}

int store_server_create(store_server **out, const char *host, int port, int *port_out,
                        char *err, size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return WEFT_ENOMEM;
    s->spare = -1;
    s->lfd = sock_listen(host, port, 1024, port_out, err, errlen);
    if (s->lfd < 0) {
        int rc = s->lfd;
        free(s);
        return rc;
    }
    /* a connection reset between poll and accept must not block the loop */
    sock_set_nonblock(s->lfd, 1);
    if (pipe2(s->wake, O_CLOEXEC) < 0) {
        close(s->lfd);
        free(s);
        return WEFT_ESYS;
    }
    s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->loglevel = log_level_from_env();
    if ((s->tls = tls_wanted(err, errlen)) < 0) {
        int rc = s->tls;
        store_server_stop(s);
        return rc;
    }
    const char *secret = param_env(PARAM_job_secret);
    if (secret && *secret && auth_compiled() && !(s->secret = strdup(secret))) {
        store_server_stop(s);
        return WEFT_ENOMEM;
    }
    *out = s;
    return 0;
}

int store_server_start(store_server **out, const char *host, int port, int *port_out,
                       const char *secret, char *err, size_t errlen)
{
    int rc = store_server_create(out, host, port, port_out, err, errlen);
    if (rc)
        return rc;
    free((*out)->secret);
    (*out)->secret = NULL;
    if (secret && auth_compiled() && !((*out)->secret = strdup(secret))) {
        store_server_stop(*out);
        *out = NULL;
        return WEFT_ENOMEM;
    }
    if ((*out)->tls && !(*out)->secret) {
        snprintf(err, errlen, "WEFT_TLS=1 needs a job secret (WEFT_JOB_SECRET; weftrun sets one)");
        store_server_stop(*out);
        *out = NULL;
        return WEFT_ECONFIG;
    }
    if (pthread_create(&(*out)->thread, NULL, loop, *out)) {
        store_server_stop(*out);
        *out = NULL;
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
        if (s->cl[i].fd >= 0)
            close(s->cl[i].fd);
        free(s->cl[i].buf);
        free(s->cl[i].hold_key);
        free(s->cl[i].hold_val);
    }
    tls_pump_free(s->pump, 2.0);
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->cl);
    free(s->kv);
    free(s->secret);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    if (s->spare >= 0)
        close(s->spare);
    free(s);
}
