/* The emulated wide-area link's pump (see wan.h). One thread per wan_net,
 * started with its first link; it sleeps in ppoll until bytes arrive from
 * an owner, a stamped chunk falls due, the token bucket refills or a
 * socket takes more. Each link buffers at most what its rate can carry in
 * twice the delay (plus some): past that it stops reading, and its owner's
 * writes block as they would on a full socket. */
#include "transport/wan.h"

#include "core/clock.h"
#include "core/log.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAN_MARKS 1024        /* stamped chunks in flight per link */
#define WAN_MERGE_S 1e-3      /* reads this close together share a stamp */
#define WAN_WRITE_MAX (256u << 10)

/* A chunk of the stream: bytes up to end were read at t (the latest read
 * merged into it, so none of them leaves before t + delay). */
typedef struct {
    uint64_t end;
    double t, born;
} wan_mark;

typedef struct {
    int app, net, peer;
    uint8_t *buf;
    size_t cap;
    uint64_t head, tail;      /* bytes [head, tail) wait in buf */
    wan_mark mark[WAN_MARKS];
    int m0, mn;
    double next_free;         /* token bucket: the wire is free from then */
    int app_eof, want_out;
} wan_link;

/* Bytes written to wan links, shared by a communicator's nets and those of
 * the communicators split from it (each holds a reference). */
struct wan_count {
    _Atomic uint64_t bytes;
    _Atomic int refs;
};

struct wan_net {
    int rank, size, nclusters, emulate, loglevel;
    int32_t *cluster, *index; /* index: clusters numbered 0.. in order of first rank */
    wan_cfg cfg;
    pthread_mutex_t mu;
    pthread_t th;
    int started, stop;
    double flush_until;
    int wake[2];
    wan_link **link;
    int nlink, cap;
    wan_count *count;
};

/* ---- WEFT_WAN ---- */

static int parse_num(const char *v, size_t len, const char *const *units, const double *mult,
                     double *out)
{
    char tmp[64], *end;
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, v, len);
    tmp[len] = 0;
    errno = 0;
    double x = strtod(tmp, &end);
    if (errno || end == tmp || !(x >= 0) || !isfinite(x))
        return -1;
    for (int i = 0; units[i]; i++)
        if (!strcmp(end, units[i])) {
            *out = x * mult[i];
            return 0;
        }
    return -1;
}

int wan_parse(const char *s, wan_cfg *out)
{
    static const char *const tu[] = { "us", "ms", "s", NULL };
    static const double tm[] = { 1e-6, 1e-3, 1 };
    static const char *const ru[] = { "bit", "kbit", "mbit", "gbit", "bps", "kbps", "mbps",
                                      "gbps", NULL };
    static const double rm[] = { 1.0 / 8, 1e3 / 8, 1e6 / 8, 1e9 / 8, 1, 1e3, 1e6, 1e9 };
    wan_cfg c = { 0, 0 };
    if (!s || !*s)
        return WEFT_EINVAL;
    for (const char *p = s; *p;) {
        const char *comma = strchr(p, ','), *stop = comma ? comma : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (!eq)
            return WEFT_EINVAL;
        size_t klen = (size_t)(eq - p), vlen = (size_t)(stop - eq - 1);
        if (klen == 5 && !strncmp(p, "delay", 5)) {
            if (parse_num(eq + 1, vlen, tu, tm, &c.delay_s) || c.delay_s > 60)
                return WEFT_EINVAL;
        } else if (klen == 4 && !strncmp(p, "rate", 4)) {
            if (parse_num(eq + 1, vlen, ru, rm, &c.rate_Bps) || !(c.rate_Bps > 0))
                return WEFT_EINVAL;
        } else
            return WEFT_EINVAL;
        p = comma ? comma + 1 : stop;
    }
    *out = c;
    return 0;
}

const char *wan_check(const char *s)
{
    wan_cfg c;
    return wan_parse(s, &c) ? "delay=TIME,rate=RATE (e.g. delay=50ms,rate=100mbit)" : NULL;
}

/* ---- the net ---- */

int wan_net_new(wan_net **out, int rank, int size, const int32_t *cluster, const wan_cfg *cfg,
                int loglevel, wan_net *share)
{
    wan_net *w = calloc(1, sizeof *w);
    if (!w || !(w->cluster = malloc(2 * (size_t)size * sizeof *w->cluster)) ||
        !(w->count = share ? share->count : calloc(1, sizeof *w->count))) {
        if (w)
            free(w->cluster);
        free(w);
        return WEFT_ENOMEM;
    }
    atomic_fetch_add(&w->count->refs, 1);
    w->rank = rank;
    w->size = size;
    w->loglevel = loglevel;
    memcpy(w->cluster, cluster, (size_t)size * sizeof *cluster);
    w->index = w->cluster + size;
    for (int i = 0; i < size; i++) {
        int j = 0;
        while (j < i && cluster[j] != cluster[i])
            j++;
        w->index[i] = j < i ? w->index[j] : w->nclusters++;
    }
    if (cfg) {
        w->cfg = *cfg;
        w->emulate = 1;
    }
    w->wake[0] = w->wake[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return 0;
}

int wan_cluster_of(const wan_net *w, int peer)
{
    return w && peer >= 0 && peer < w->size ? w->cluster[peer] : 0;
}

const int32_t *wan_cluster_index(const wan_net *w)
{
    return w && w->nclusters > 1 ? w->index : NULL;
}

int wan_emulation(const wan_net *w, wan_cfg *cfg)
{
    if (!w || !w->emulate)
        return 0;
    *cfg = w->cfg;
    return 1;
}

int wan_cluster_count(const wan_net *w)
{
    return w ? w->nclusters : 1;
}

int wan_is_wan(const wan_net *w, int peer)
{
    return w && peer >= 0 && peer < w->size && w->cluster[peer] != w->cluster[w->rank];
}

uint64_t wan_bytes(const wan_net *w)
{
    return w ? atomic_load(&w->count->bytes) : 0;
}

static void link_free(wan_link *l)
{
    if (l->app >= 0)
        close(l->app);
    if (l->net >= 0)
        close(l->net);
    free(l->buf);
    free(l);
}

/* Writes what is due; returns the time something next falls due (or
 * INFINITY), 0 when the link is finished or dead. */
static double link_send(wan_net *w, wan_link *l, double now)
{
    while (l->mn) {
        wan_mark *m = &l->mark[l->m0];
        double due = m->t + w->cfg.delay_s;
        if (now < due)
            return due;
        if (w->cfg.rate_Bps > 0 && now < l->next_free)
            return l->next_free;
        size_t at = (size_t)(l->head % l->cap), len = (size_t)(m->end - l->head);
        if (len > l->cap - at)
            len = l->cap - at;
        /* a burst of at most ~2 ms of the rate, so the bucket stays smooth */
        size_t burst = w->cfg.rate_Bps > 0 ? (size_t)(w->cfg.rate_Bps * 2e-3) : WAN_WRITE_MAX;
        burst = burst < (16u << 10) ? (16u << 10) : burst > WAN_WRITE_MAX ? WAN_WRITE_MAX : burst;
        if (len > burst)
            len = burst;
        /* Counted before the send and corrected after: a peer that has
         * the bytes (and answered) must find them counted here, even when
         * this thread is preempted right after the send. */
        atomic_fetch_add(&w->count->bytes, (uint64_t)len);
        ssize_t n = send(l->net, l->buf + at, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        atomic_fetch_sub(&w->count->bytes, (uint64_t)len - (n > 0 ? (uint64_t)n : 0));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            l->want_out = 1;
            return INFINITY;
        }
        if (n <= 0)
            return 0;
        l->want_out = 0;
        l->head += (uint64_t)n;
        if (w->cfg.rate_Bps > 0)
            l->next_free = fmax(l->next_free, now) + (double)n / w->cfg.rate_Bps;
        if (l->head == m->end) {
            l->m0 = (l->m0 + 1) % WAN_MARKS;
            l->mn--;
        }
    }
    return l->app_eof ? 0 : INFINITY;
}

/* Reads what the owner wrote, as far as there is room. -1: the owner's
 * end failed (not an end of stream, which sets app_eof). */
static int link_read(wan_link *l, double now)
{
    while (!l->app_eof && l->tail - l->head < l->cap) {
        wan_mark *last = l->mn ? &l->mark[(l->m0 + l->mn - 1) % WAN_MARKS] : NULL;
        int merge = last && now - last->born < WAN_MERGE_S && last->end == l->tail;
        if (!merge && l->mn == WAN_MARKS)
            return 0;
        size_t at = (size_t)(l->tail % l->cap), room = l->cap - (size_t)(l->tail - l->head);
        if (room > l->cap - at)
            room = l->cap - at;
        ssize_t n = recv(l->app, l->buf + at, room, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        if (n == 0) {
            l->app_eof = 1;
            return 0;
        }
        l->tail += (uint64_t)n;
        if (merge) {
            last->end = l->tail;
            last->t = now;
        } else {
            l->mark[(l->m0 + l->mn) % WAN_MARKS] = (wan_mark){ l->tail, now, now };
            l->mn++;
        }
    }
    return 0;
}

/* The peer closed or reset its side: nothing more can go, and the owner
 * must learn (its end then reads as closed). */
static int peer_gone(wan_link *l)
{
    char b[256];
    ssize_t n = recv(l->net, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void *pump(void *arg)
{
    wan_net *w = arg;
    struct pollfd *pf = NULL;
    int pcap = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        double now = clock_now(), next = INFINITY;
        if (w->stop && (w->nlink == 0 || now > w->flush_until))
            break;
        if (pcap < 2 * w->nlink + 1) {
            struct pollfd *q = realloc(pf, (size_t)(2 * w->nlink + 1) * sizeof *q);
            if (!q) {
                log_msg(w->loglevel, LOG_WARN, w->rank, "WAN emulation: out of memory");
                break;
            }
            pf = q;
            pcap = 2 * w->nlink + 1;
        }
        int np = 0;
        pf[np++] = (struct pollfd){ .fd = w->wake[0], .events = POLLIN };
        for (int i = 0; i < w->nlink; i++) {
            wan_link *l = w->link[i];
            int bad = link_read(l, now) < 0;
            double due = bad ? 0 : link_send(w, l, now);
            if (due == 0 || peer_gone(l)) {
                w->link[i--] = w->link[--w->nlink];
                link_free(l);
                continue;
            }
            next = fmin(next, due);
            /* full (bytes or stamps): wait for the wire, not the owner */
            int room = l->tail - l->head < l->cap && !l->app_eof && l->mn < WAN_MARKS;
            if (room)
                pf[np++] = (struct pollfd){ .fd = l->app, .events = POLLIN };
            pf[np++] = (struct pollfd){ .fd = l->net, .events = (short)(l->want_out ? POLLOUT : 0) };
        }
        if (w->stop && w->nlink == 0)
            break; /* flushed */
        int stopping = w->stop;
        double until = w->flush_until;
        pthread_mutex_unlock(&w->mu);
        struct timespec ts, *tp = NULL;
        if (next < INFINITY || stopping) {
            double left = stopping ? fmin(next, until) - now : next - now;
            left = left < 0 ? 0 : left;
            ts.tv_sec = (time_t)left;
            ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
            tp = &ts;
        }
        ppoll(pf, (nfds_t)np, tp, NULL);
        if (pf[0].revents & POLLIN) {
            char b[64];
            while (read(w->wake[0], b, sizeof b) > 0) {
            }
        }
        pthread_mutex_lock(&w->mu);
    }
    for (int i = 0; i < w->nlink; i++)
        link_free(w->link[i]);
    w->nlink = 0;
    pthread_mutex_unlock(&w->mu);
    free(pf);
    return NULL;
}

static void wake(wan_net *w)
{
    char b = 1;
    while (write(w->wake[1], &b, 1) < 0 && errno == EINTR) {
    }
}

static size_t link_cap(const wan_cfg *c)
{
    double want = c->rate_Bps > 0 ? 2 * c->rate_Bps * c->delay_s + (4u << 20) : (16u << 20);
    return want > (64u << 20) ? (64u << 20) : (size_t)want;
}

int wan_take(wan_net *w, int peer, int *fd, char *err, size_t errlen)
{
    int sp[2], rc = 0;
    if (!w || !w->emulate || !wan_is_wan(w, peer))
        return 0;
    wan_link *l = calloc(1, sizeof *l);
    if (l)
        l->cap = link_cap(&w->cfg);
    if (!l || !(l->buf = malloc(l->cap))) {
        free(l);
        snprintf(err, errlen, "WAN emulation: out of memory");
        return WEFT_ENOMEM;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
        snprintf(err, errlen, "WAN emulation: socketpair: %s", strerror(errno));
        free(l->buf);
        free(l);
        return WEFT_ESYS;
    }
    l->app = sp[1];
    l->net = *fd;
    l->peer = peer;
    pthread_mutex_lock(&w->mu);
    if (!w->started) {
        if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) < 0)
            rc = WEFT_ESYS;
        else if (pthread_create(&w->th, NULL, pump, w)) {
            close(w->wake[0]);
            close(w->wake[1]);
            w->wake[0] = w->wake[1] = -1;
            rc = WEFT_ESYS;
        } else
            w->started = 1;
    }
    if (!rc && w->nlink == w->cap) {
        int cap = w->cap ? 2 * w->cap : 8;
        wan_link **q = realloc(w->link, (size_t)cap * sizeof *q);
        if (q) {
            w->link = q;
            w->cap = cap;
        } else
            rc = WEFT_ENOMEM;
    }
    if (!rc)
        w->link[w->nlink++] = l;
    pthread_mutex_unlock(&w->mu);
    if (rc) {
        snprintf(err, errlen, "WAN emulation: cannot start its pump");
        close(sp[0]);
        l->net = -1; /* the caller still owns it */
        link_free(l);
        return rc;
    }
    wake(w);
    *fd = sp[0];
    return 0;
}

void wan_net_free(wan_net *w, double flush_s)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        w->flush_until = clock_now() + flush_s;
        pthread_mutex_unlock(&w->mu);
        wake(w);
        pthread_join(w->th, NULL);
        close(w->wake[0]);
        close(w->wake[1]);
    }
    pthread_mutex_destroy(&w->mu);
    if (atomic_fetch_sub(&w->count->refs, 1) == 1)
        free(w->count);
    free(w->link);
    free(w->cluster);
    free(w);
}
