/* The link endpoint and its measurement. One request at a time per
 * endpoint: links are measured seldom and one pair at a time, and a
 * second transfer at once would share the link and halve both figures.
 * With a secret, a client proves it as every store client does (core/auth:
 * HMAC challenge, both ways) before the endpoint answers anything; the
 * proofs are bound to "weft-cpn-link", so a store's are worthless here. */
#include "cpn/cpn_link.h"

#include "core/auth.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "transport/wan.h"
#include "weft.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cpn_link_ep {
    int fd;
    char secret[256]; /* "": no authentication */
    atomic_int stop;
    pthread_t thread;
};

#define CHUNK (64 << 10)
#define PINGS 10
#define AUTH_S 5.0 /* for a client's hello and proof: one at a time is served */

static const char link_bind[] = "weft-cpn-link";

/* The endpoint's side: 0 when the client proved the secret. */
static int auth_accept(int fd, const char *secret)
{
    uint8_t raw[sizeof(auth_hello)], expect[AUTH_MAC_LEN], proof[AUTH_MAC_LEN];
    double deadline = clock_now() + AUTH_S;
    auth_hello h;
    auth_challenge ch;
    const char *why;
    if (sock_read_full(fd, raw, sizeof raw, deadline) ||
        auth_hello_decode(raw, sizeof raw, &h, &why) || h.role != AUTH_ROLE_STORE ||
        auth_challenge_make(secret, &h, link_bind, sizeof link_bind, &ch, expect) ||
        sock_write_full(fd, &ch, sizeof ch, deadline) ||
        sock_read_full(fd, proof, sizeof proof, deadline))
        return WEFT_EAUTH;
    return auth_check(proof, expect) ? WEFT_EAUTH : 0;
}

/* The measuring side: proves the secret and checks the endpoint's proof. */
static int auth_connect(int fd, const char *secret, char *err, size_t errlen)
{
    uint8_t raw[sizeof(auth_challenge)], proof[AUTH_MAC_LEN];
    double deadline = clock_now() + AUTH_S;
    auth_hello h;
    auth_challenge ch;
    const char *why = "the endpoint closed the connection (another secret?)";
    int rc = auth_start(&h, AUTH_ROLE_STORE);
    if (!rc)
        rc = sock_write_full(fd, &h, sizeof h, deadline);
    if (!rc && (rc = sock_read_full(fd, raw, sizeof raw, deadline)) == 0 &&
        auth_challenge_decode(raw, sizeof raw, &ch, &why))
        rc = WEFT_EAUTH;
    if (!rc && auth_answer(secret, &h, &ch, link_bind, sizeof link_bind, proof)) {
        why = "the endpoint does not know the secret";
        rc = WEFT_EAUTH;
    }
    if (!rc)
        rc = sock_write_full(fd, proof, sizeof proof, deadline);
    if (rc)
        snprintf(err, errlen, "link endpoint authentication: %s", why);
    return rc;
}

/* The secret to use: s, else WEFT_JOB_SECRET; "" in a build that cannot
 * authenticate (as the store does). */
static const char *secret_or_env(const char *s)
{
    if (!auth_compiled())
        return "";
    if (!s || !s[0])
        s = getenv("WEFT_JOB_SECRET");
    return s ? s : "";
}

/* One side of a measured connection. Under WEFT_WAN (docs/WAN.md: the
 * emulated link of tests and benchmarks) what this side writes goes
 * through weft's WAN pump, delayed and paced as a wan-class connection of
 * the library's is, so the figures see the emulation as well as any
 * kernel shaping (tbf between namespaces); reads stay on the socket. */
typedef struct {
    int rfd, wfd;
    wan_net *wan;
} conn;

static int conn_open(conn *c, int fd, int me, char *err, size_t errlen)
{
    c->rfd = c->wfd = fd;
    c->wan = NULL;
    const char *spec = getenv("WEFT_WAN");
    wan_cfg cfg;
    if (!spec || !spec[0] || wan_parse(spec, &cfg) != 0)
        return 0;
    const int32_t cluster[2] = { 0, 1 };
    int rc = wan_net_new(&c->wan, me, 2, cluster, &cfg, 0, NULL);
    if (rc)
        return rc;
    c->rfd = dup(fd);
    if (c->rfd < 0) {
        c->rfd = fd;
        return WEFT_ESYS;
    }
    /* the pump takes fd (and closes it); c->wfd becomes the owner's end */
    return wan_take(c->wan, 1 - me, &c->wfd, err, errlen);
}

static void conn_close(conn *c)
{
    if (c->wfd >= 0 && c->wfd != c->rfd)
        close(c->wfd);
    if (c->wan)
        wan_net_free(c->wan, 1.0);
    if (c->rfd >= 0)
        close(c->rfd);
}

/* One client: 'P' echoed; 'B' and 8 bytes of length: that many bytes
 * read, then one byte back; anything else or the end closes. */
static void serve_one(const conn *c, char *buf)
{
    for (;;) {
        unsigned char op;
        double deadline = clock_now() + 30;
        if (sock_read_full(c->rfd, &op, 1, deadline))
            return;
        if (op == 'P') {
            if (sock_write_full(c->wfd, &op, 1, deadline))
                return;
            continue;
        }
        uint64_t n;
        if (op != 'B' || sock_read_full(c->rfd, &n, sizeof n, deadline))
            return;
        while (n > 0) {
            size_t take = n < CHUNK ? (size_t)n : CHUNK;
            if (sock_read_full(c->rfd, buf, take, deadline))
                return;
            n -= take;
        }
        if (sock_write_full(c->wfd, &op, 1, deadline))
            return;
    }
}

static void *ep_main(void *arg)
{
    cpn_link_ep *ep = arg;
    char *buf = malloc(CHUNK);
    while (buf && !atomic_load(&ep->stop)) {
        struct pollfd p = { .fd = ep->fd, .events = POLLIN };
        if (poll(&p, 1, 200) <= 0)
            continue;
        int c = accept(ep->fd, NULL, NULL);
        if (c < 0)
            continue;
        sock_tune(c);
        if (ep->secret[0] && auth_accept(c, ep->secret)) {
            close(c); /* nothing said to who cannot prove the secret */
            continue;
        }
        conn cn;
        char err[256];
        if (conn_open(&cn, c, 1, err, sizeof err) == 0)
            serve_one(&cn, buf);
        conn_close(&cn);
    }
    free(buf);
    return NULL;
}

int cpn_link_serve(cpn_link_ep **out, const char *host, int port, const char *secret,
                   int *port_out, char *err, size_t errlen)
{
    cpn_link_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return WEFT_ENOMEM;
    snprintf(ep->secret, sizeof ep->secret, "%s", secret_or_env(secret));
    ep->fd = sock_listen(host, port, 8, port_out, err, errlen);
    if (ep->fd < 0) {
        int rc = ep->fd;
        free(ep);
        return rc;
    }
    if (pthread_create(&ep->thread, NULL, ep_main, ep)) {
        close(ep->fd);
        free(ep);
        snprintf(err, errlen, "link endpoint: no thread");
        return WEFT_ESYS;
    }
    *out = ep;
    return 0;
}

void cpn_link_stop(cpn_link_ep *ep)
{
    if (!ep)
        return;
    atomic_store(&ep->stop, 1);
    pthread_join(ep->thread, NULL);
    close(ep->fd);
    free(ep);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int rtt(const conn *c, double *ms)
{
    double t[PINGS];
    for (int i = 0; i < PINGS; i++) {
        unsigned char op = 'P';
        double t0 = clock_now();
        int rc = sock_write_full(c->wfd, &op, 1, t0 + 10);
        if (!rc)
            rc = sock_read_full(c->rfd, &op, 1, t0 + 10);
        if (rc)
            return rc;
        t[i] = (clock_now() - t0) * 1e3;
    }
    qsort(t, PINGS, sizeof t[0], cmp_double);
    *ms = t[PINGS / 2];
    return 0;
}

/* Seconds to move n bytes and hear the end's answer. */
static int transfer(const conn *c, uint64_t n, const char *buf, double *secs)
{
    unsigned char op = 'B';
    double t0 = clock_now(), deadline = t0 + 60;
    int rc = sock_write_full(c->wfd, &op, 1, deadline);
    if (!rc)
        rc = sock_write_full(c->wfd, &n, sizeof n, deadline);
    for (uint64_t left = n; !rc && left > 0;) {
        size_t take = left < CHUNK ? (size_t)left : CHUNK;
        rc = sock_write_full(c->wfd, buf, take, deadline);
        left -= take;
    }
    if (!rc)
        rc = sock_read_full(c->rfd, &op, 1, deadline);
    *secs = clock_now() - t0;
    return rc;
}

/* Segments retransmitted so far, and the segment size (glibc's tcp_info
 * lacks the count of segments sent: the bytes over the size stand in). */
static void tcp_counts(int fd, double *retrans, double *mss)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len);
    *retrans = ti.tcpi_total_retrans;
    *mss = ti.tcpi_snd_mss > 0 ? ti.tcpi_snd_mss : 1448;
}

static int measure_on(const conn *c, double seconds, cpn_link_figures *out, char *buf)
{
    int rc = rtt(c, &out->rtt_ms);
    double r0 = 0, s0, r1 = 0, s1 = 1448, secs = 0;
    uint64_t n = 256 << 10;
    /* a first transfer to size the timed one: the link's pace decides how
     * many bytes fill the time asked for */
    if (!rc)
        rc = transfer(c, n, buf, &secs);
    if (!rc) {
        double rate = (double)n / (secs > 1e-6 ? secs : 1e-6);
        double want = rate * seconds;
        n = want < (double)(1 << 20) ? 1 << 20 : want > 1e9 ? (uint64_t)1e9 : (uint64_t)want;
        tcp_counts(c->rfd, &r0, &s0);
        rc = transfer(c, n, buf, &secs);
        tcp_counts(c->rfd, &r1, &s1);
    }
    if (rc)
        return rc;
    /* the answer's half round trip and the request's are not transfer */
    double t = secs - out->rtt_ms * 1e-3;
    out->bandwidth_bps = (double)n * 8 / (t > secs * 0.1 ? t : secs);
    out->bytes = (double)n;
    double segs = (double)n / s1;
    out->loss = r1 > r0 && segs > 0 ? (r1 - r0) / segs : 0;
    return 0;
}

int cpn_link_measure(const char *addr, const char *secret, double seconds,
                     cpn_link_figures *out, char *err, size_t errlen)
{
    char host[SOCK_ADDR_MAX];
    int port;
    memset(out, 0, sizeof *out);
    if (sock_split_addr(addr, host, sizeof host, &port)) {
        snprintf(err, errlen, "link endpoint %s: want host:port", addr);
        return WEFT_EINVAL;
    }
    int fd = sock_connect(host, port, clock_now() + 10, err, errlen);
    if (fd < 0)
        return fd;
    sock_tune(fd);
    secret = secret_or_env(secret);
    if (secret[0] && auth_connect(fd, secret, err, errlen)) {
        close(fd);
        return WEFT_EAUTH;
    }
    char *buf = calloc(1, CHUNK);
    conn c;
    int rc = conn_open(&c, fd, 0, err, errlen);
    if (!rc)
        rc = buf ? measure_on(&c, seconds, out, buf) : WEFT_ENOMEM;
    if (rc)
        snprintf(err, errlen, "link to %s: %s", addr, weft_strerror(rc));
    free(buf);
    conn_close(&c);
    return rc;
}
