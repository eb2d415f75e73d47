/* WEFT_TLS=1: every data and store connection runs through TLS 1.3.
 *
 * 1. The pump alone: two pumps joined through a relay that records what
 *    crosses it. A recognisable pattern arrives intact and never appears
 *    on the wire; closing one end reaches the other as end of stream; a
 *    pump with another key cannot complete the handshake, and its owner
 *    reads end of stream; a cut in the middle of a transfer ends the
 *    stream on both sides, and the pump that was writing into the cut
 *    (EPIPE) does not take the process down with SIGPIPE.
 * 2. Four ranks (each claiming its own host, so every byte goes over TCP)
 *    with WEFT_TLS=1: collectives give the right results, and the data and
 *    store connections are the pump's socketpair ends.
 * 3. A rank dies under TLS: every survivor returns WEFT_EPEER naming it.
 * 4. A rank with the wrong secret is refused (WEFT_EAUTH); TLS without a
 *    secret is a configuration error.
 * A build without libssl checks only that WEFT_TLS=1 is refused at init. */
#include "mp.h"

#include "coll/comm.h"
#include "bootstrap/store.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "transport/tls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>

static const char pattern[] = "weft-plaintext-pattern!";

/* ---- 1. the pump alone -------------------------------------------------- */

typedef struct {
    int a, b;          /* relay between these two sockets */
    char *seen;        /* what went from a to b */
    size_t nseen, cap;
    size_t cut_after;  /* > 0: cut both ways once this much has crossed */
} relay;

static void *relay_run(void *arg)
{
    relay *r = arg;
    int open_a = 1, open_b = 1;
    char buf[65536];
    while (open_a || open_b) {
        struct pollfd p[2] = { { .fd = open_a ? r->a : -1, .events = POLLIN },
                               { .fd = open_b ? r->b : -1, .events = POLLIN } };
        if (poll(p, 2, 20000) <= 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int from = i ? r->b : r->a, to = i ? r->a : r->b;
            ssize_t n = recv(from, buf, sizeof buf, 0);
            if (n <= 0) {
                shutdown(to, SHUT_WR);
                if (i)
                    open_b = 0;
                else
                    open_a = 0;
                continue;
            }
            if (!i && r->nseen + (size_t)n <= r->cap) {
                memcpy(r->seen + r->nseen, buf, (size_t)n);
                r->nseen += (size_t)n;
            }
            if (r->cut_after && r->nseen >= r->cut_after) {
                /* a cable cut: both pumps must see it, and the one still
                 * writing must not be killed by SIGPIPE */
                shutdown(r->a, SHUT_RDWR);
                shutdown(r->b, SHUT_RDWR);
                return NULL;
            }
            if (sock_write_full(to, buf, (size_t)n, clock_now() + 20))
                open_a = open_b = 0;
        }
    }
    return NULL;
}

/* Reads until end of stream (or 20 s); returns the bytes read, -1 on error. */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    double dl = clock_now() + 20;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, clock_ms_until(dl)) <= 0)
            return -1;
        ssize_t n = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) /* a reset ends it too */
            return (ssize_t)got;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return -1;
        got += (size_t)n;
        if (got == cap)
            return (ssize_t)got;
    }
}

typedef struct {
    int fd;
    const char *msg;
    size_t len;
    int rc;
} writer;

static void *write_run(void *arg)
{
    writer *w = arg;
    w->rc = sock_write_full(w->fd, w->msg, w->len, clock_now() + 20);
    close(w->fd);
    return NULL;
}

enum { SAME_KEY, OTHER_KEY, CUT };

static void pump_pair(int mode)
{
    int same_key = mode != OTHER_KEY;
    uint8_t k1[TLS_KEY_LEN], k2[TLS_KEY_LEN];
    int x[2], y[2], ca = -1, sa = -1;
    tls_pump *pc = NULL, *ps = NULL;
    char err[256];
    memset(k1, 7, sizeof k1);
    memcpy(k2, k1, sizeof k2);
    if (!same_key)
        k2[5] ^= 1;
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, x) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, y) == 0);
    relay r = { .a = x[1], .b = y[0], .cap = 8u << 20, .cut_after = mode == CUT ? 300000 : 0 };
    r.seen = malloc(r.cap);
    pthread_t th;
    CHECK(r.seen && pthread_create(&th, NULL, relay_run, &r) == 0);
    CHECKF(tls_pump_new(&pc, 1, 0, err, sizeof err) == 0, "%s", err);
    CHECKF(tls_pump_new(&ps, 1, 1, err, sizeof err) == 0, "%s", err);
    CHECKF(tls_pump_add(pc, x[0], 0, k1, "client", &ca, err, sizeof err) == 0, "%s", err);
    CHECKF(tls_pump_add(ps, y[1], 1, k2, "server", &sa, err, sizeof err) == 0, "%s", err);
    size_t len = mode == CUT ? 8u << 20 : 1u << 20;
    char *msg = malloc(len), *got = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        msg[i] = pattern[i % (sizeof pattern - 1)];
    if (mode == CUT) {
        writer w = { .fd = ca, .msg = msg, .len = len };
        pthread_t wt;
        CHECK(pthread_create(&wt, NULL, write_run, &w) == 0);
        ssize_t n = read_all(sa, got, len + 1);
        pthread_join(wt, NULL);
        ca = -1;
        CHECKF(w.rc == WEFT_EPEER, "the writer got %s", weft_strerror(w.rc));
        CHECKF(n >= 0 && (size_t)n < len && !memcmp(got, msg, (size_t)n),
               "received %zd of %zu bytes", n, len);
    } else if (same_key) {
        writer w = { .fd = ca, .msg = msg, .len = len };
        pthread_t wt;
        CHECK(pthread_create(&wt, NULL, write_run, &w) == 0);
        ssize_t n = read_all(sa, got, len + 1);
        pthread_join(wt, NULL);
        ca = -1; /* closed by the writer: end of stream follows the data */
        CHECK(w.rc == 0);
        CHECKF(n == (ssize_t)len && !memcmp(got, msg, len), "received %zd of %zu bytes", n, len);
    } else {
        /* nothing gets through, and both owners read end of stream */
        sock_write_full(ca, msg, 4096, clock_now() + 20);
        CHECK(read_all(sa, got, len) == 0);
        CHECK(read_all(ca, got, len) == 0);
    }
    if (ca >= 0)
        close(ca);
    close(sa);
    tls_pump_free(pc, 5);
    tls_pump_free(ps, 5);
    pthread_join(th, NULL);
    CHECKF(r.nseen > (mode == SAME_KEY ? len : 0), "%zu bytes crossed the wire", r.nseen);
    CHECK(!memmem(r.seen, r.nseen, pattern, sizeof pattern - 1));
    printf("pump pair (%s): %zu bytes crossed the relay, pattern not among them\n",
           mode == SAME_KEY ? "same key" : mode == OTHER_KEY ? "other key" : "cut", r.nseen);
    close(x[1]);
    close(y[0]);
    free(r.seen);
    free(msg);
    free(got);
}

/* ---- 2. collectives over TLS -------------------------------------------- */

static int is_unix(int fd)
{
    int d = 0;
    socklen_t l = sizeof d;
    return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &l) == 0 && d == AF_UNIX;
}

static void colls(weft_comm *c, void *arg)
{
    int P = weft_comm_size(c), r = weft_comm_rank(c);
    size_t sizes[] = { 1, 1000, 1u << 20 };
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *x = malloc(n * sizeof *x), *all = malloc(n * P * sizeof *all);
        int ok = 1;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(r + (int)(i % 1000));
        CHECK(weft_allreduce(c, x, x, n, WEFT_F32, WEFT_SUM) == 0);
        for (size_t i = 0; i < n; i++)
            ok &= x[i] == (float)(P * (int)(i % 1000) + P * (P - 1) / 2);
        CHECKF(ok, "allreduce of %zu over TLS", n);
        for (size_t i = 0; i < n; i++)
            x[i] = r == 2 ? (float)i : -1.0f;
        CHECK(weft_broadcast(c, x, n, WEFT_F32, 2) == 0);
        ok = 1;
        for (size_t i = 0; i < n; i++)
            ok &= x[i] == (float)i;
        CHECKF(ok, "broadcast of %zu over TLS", n);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(r * 7 + (int)(i % 13));
        CHECK(weft_allgather(c, x, all, n, WEFT_F32) == 0);
        ok = 1;
        for (int q = 0; q < P; q++)
            for (size_t i = 0; i < n; i++)
                ok &= all[(size_t)q * n + i] == (float)(q * 7 + (int)(i % 13));
        CHECKF(ok, "allgather of %zu over TLS", n);
        free(x);
        free(all);
    }
    /* every connection this rank made or took is a pump's end */
    int socks = 0, unix_ends = 0;
    for (int q = 0; q < P; q++) {
        for (int k = 0; k < 2; k++) {
            int fd = k ? c->net.in_fd[q] : c->net.out_fd[q];
            if (fd < 0)
                continue;
            socks++;
            unix_ends += is_unix(fd);
        }
    }
    CHECK(socks > 0 && unix_ends == socks);
    CHECK(is_unix(store_fd(c->store)) && is_unix(store_fd(c->watch)));
    /* the address published for this rank is its address on the route to
     * the store, not something read off a pump's end */
    CHECKF(!strncmp(c->net.addr[r], "127.", 4), "rank %d published %s", r, c->net.addr[r]);
}

/* ---- 3. a rank dies under TLS ------------------------------------------- */

static void dies(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), rc = 0;
    float x[256];
    for (int i = 0; i < 1000; i++) {
        if (r == 3 && i == 5)
            _exit(0); /* like a crash: the kernel closes its sockets */
        for (int k = 0; k < 256; k++)
            x[k] = 1;
        if ((rc = weft_allreduce(c, x, x, 256, WEFT_F32, WEFT_SUM)))
            break;
    }
    CHECKF(rc == WEFT_EPEER && strstr(weft_comm_error(c), "rank 3 died"), "rank %d: %s: %s", r,
           weft_strerror(rc), weft_comm_error(c));
}

/* ---- 4. secrets --------------------------------------------------------- */

static int join(int r, int n, int port, const char *secret)
{
    weft_config cfg;
    weft_comm *c;
    weft_config_default(&cfg);
    cfg.rank = r;
    cfg.world_size = n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.job_secret = secret;
    cfg.connect_timeout_s = 5;
    alarm(60);
    int rc = weft_comm_init(&c, &cfg);
    if (!rc) {
        float x = 1;
        rc = weft_allreduce(c, &x, &x, 1, WEFT_F32, WEFT_SUM);
        weft_comm_destroy(c);
    }
    return rc;
}

static void wrong_secret_job(void)
{
    int port = fx_free_port(), fds[2];
    pid_t pid[2];
    CHECK(pipe(fds) == 0);
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) {
            close(fds[0]);
            int rc = join(r, 2, port, r == 0 ? "tls-test-secret" : "not-the-secret");
            _exit(write(fds[1], &rc, sizeof rc) == sizeof rc ? 0 : 4);
        }
    close(fds[1]);
    int rc, eauth = 0, ok = 0;
    while (read(fds[0], &rc, sizeof rc) == sizeof rc) {
        eauth += rc == WEFT_EAUTH;
        ok += rc == 0;
    }
    close(fds[0]);
    CHECKF(eauth >= 1 && ok == 0, "%d refused, %d let in", eauth, ok);
    for (int r = 0; r < 2; r++)
        waitpid(pid[r], &rc, 0);
}

static void no_secret_job(void)
{
    store_server *s;
    char err[256] = "";
    int port;
    CHECK(store_server_start(&s, "127.0.0.1", 0, &port, NULL, err, sizeof err) == WEFT_ECONFIG);
    CHECKF(strstr(err, "secret") != NULL, "%s", err);
    store_client *cl;
    CHECK(store_connect(&cl, "127.0.0.1", 1, 1, NULL, err, sizeof err) == WEFT_ECONFIG);
    CHECK(cl == NULL);
    /* a job without a secret: refused at init, cleanly (rank 0 would serve
     * the store) */
    weft_config cfg;
    weft_comm *c = NULL;
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.world_size = 2;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = fx_free_port();
    cfg.connect_timeout_s = 1;
    CHECK(weft_comm_init(&c, &cfg) == WEFT_ECONFIG && c == NULL);
}

/* Without libssl only the refusal can be checked: the first case does, the
 * others say so. */
static int skipped(void)
{
    setenv("WEFT_TLS", "1", 1);
    if (tls_compiled())
        return 0;
    printf("built without libssl: only the refusal is checked\n");
    return 1;
}

TEST(refused_without_libssl)
{
    if (!skipped())
        return;
    weft_config cfg;
    weft_comm *c = NULL;
    char err[256];
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.world_size = 1;
    CHECK(weft_comm_init(&c, &cfg) == WEFT_ECONFIG && !c);
    CHECK(tls_wanted(err, sizeof err) == WEFT_ECONFIG && strstr(err, "libssl"));
}

TEST(pump_same_key) { if (!skipped()) pump_pair(SAME_KEY); }
TEST(pump_other_key) { if (!skipped()) pump_pair(OTHER_KEY); }
TEST(pump_cut) { if (!skipped()) pump_pair(CUT); }

/* every pair over TCP, none over shared memory */
TEST(collectives)
{
    if (skipped())
        return;
    mp_ranks_per_host = 1;
    CHECK(mp_run(4, 30, colls, NULL) == 0);
    mp_ranks_per_host = 0;
}

TEST(dead_rank)
{
    if (skipped())
        return;
    mp_ranks_per_host = 1;
    CHECK(mp_run(4, 30, dies, NULL) == 0);
    mp_ranks_per_host = 0;
}

TEST(wrong_secret) { if (!skipped()) wrong_secret_job(); }
TEST(no_secret) { if (!skipped()) no_secret_job(); }
