/* Authentication: proofs check out only with the same secret and the same
 * connection; the store refuses strangers and clients with the wrong
 * secret and keeps serving the others; a 4-rank job with a secret computes
 * correct all-reduces while a stranger knocks on a rank's data port (with
 * garbage, and with a well-formed hello but no secret) and on the store. */
#include "test.h"

#include "coll/comm.h"
#include "bootstrap/store.h"
#include "core/auth.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SECRET "0123456789abcdef-test-secret"

static void proofs(void)
{
    auth_hello h;
    auth_challenge ch;
    uint8_t expect[AUTH_MAC_LEN], proof[AUTH_MAC_LEN];
    const char bind[] = "bind", other[] = "bond";
    CHECK(auth_start(&h, AUTH_ROLE_DATA) == 0);
    CHECK(auth_challenge_make(SECRET, &h, bind, sizeof bind, &ch, expect) == 0);
    CHECK(auth_answer(SECRET, &h, &ch, bind, sizeof bind, proof) == 0);
    CHECK(auth_check(proof, expect) == 0);
    /* a wrong secret fails on the connector's side already */
    CHECK(auth_answer("wrong", &h, &ch, bind, sizeof bind, proof) == WEFT_EAUTH);
    /* a proof for another connection is worthless */
    CHECK(auth_answer(SECRET, &h, &ch, other, sizeof other, proof) == WEFT_EAUTH);
    /* a fresh nonce each time */
    auth_hello h2;
    CHECK(auth_start(&h2, AUTH_ROLE_DATA) == 0 && memcmp(h.nonce, h2.nonce, AUTH_NONCE_LEN));
}

/* 1 when the other end closes fd within 15 s. */
static int closed_by_peer(int fd)
{
    char b[128];
    for (;;) {
        int rc = sock_read_full(fd, b, 1, clock_now() + 15);
        if (rc)
            return rc == WEFT_EPEER;
    }
}

static void store_refusals(void)
{
    store_server *srv;
    store_client *c, *bad;
    char err[256];
    int port, fd;
    void *v;
    size_t len;
    CHECK(store_server_start(&srv, "127.0.0.1", 0, &port, SECRET, err, sizeof err) == 0);
    /* a silent stranger holds a connection open: nobody else may wait on it */
    int silent = sock_connect("127.0.0.1", port, clock_now() + 5, err, sizeof err);
    CHECK(silent >= 0);
    CHECKF(store_connect(&c, "127.0.0.1", port, 5, SECRET, err, sizeof err) == 0, "%s", err);
    CHECK(store_set(c, "k", "v", 1) == 0);
    CHECK(store_get(c, "k", &v, &len, 1) == 0 && len == 1);
    free(v);
    /* the wrong secret */
    CHECK(store_connect(&bad, "127.0.0.1", port, 5, "wrong", err, sizeof err) == WEFT_EAUTH);
    CHECKF(strstr(err, "secret") != NULL, "%s", err);
    /* no authentication at all: the first request gets the connection closed */
    CHECK(store_connect(&bad, "127.0.0.1", port, 5, NULL, err, sizeof err) == 0);
    CHECK(store_get(bad, "k", &v, &len, 1) != 0);
    store_close(bad);
    /* a well-formed hello and a made-up proof */
    fd = sock_connect("127.0.0.1", port, clock_now() + 5, err, sizeof err);
    auth_hello h;
    auth_challenge ch;
    uint8_t junk[AUTH_MAC_LEN] = { 1, 2, 3 };
    CHECK(auth_start(&h, AUTH_ROLE_STORE) == 0);
    CHECK(sock_write_full(fd, &h, sizeof h, clock_now() + 5) == 0);
    CHECK(sock_read_full(fd, &ch, sizeof ch, clock_now() + 5) == 0);
    CHECK(sock_write_full(fd, junk, sizeof junk, clock_now() + 5) == 0);
    CHECK(closed_by_peer(fd));
    close(fd);
    /* the others are still served */
    CHECK(store_get(c, "k", &v, &len, 1) == 0 && len == 1 && !memcmp(v, "v", 1));
    free(v);
    close(silent);
    store_close(c);
    store_server_stop(srv);
}

/* ---- a job with a secret, and a stranger ---------------------------------- */

typedef struct {
    weft_comm *c;
    atomic_int done;
    int garbage_closed, impostor_closed, store_closed;
} stranger_arg;

static void *stranger(void *p)
{
    stranger_arg *s = p;
    weft_comm *c = s->c;
    char host[SOCK_ADDR_MAX], err[256];
    int port, fd;
    sock_split_addr(c->net.addr[1], host, sizeof host, &port);
    /* garbage on rank 1's data port */
    fd = sock_connect(host, port, clock_now() + 5, err, sizeof err);
    if (fd >= 0) {
        char junk[64];
        memset(junk, 0xa5, sizeof junk);
        sock_write_full(fd, junk, sizeof junk, clock_now() + 5);
        s->garbage_closed = closed_by_peer(fd);
        close(fd);
    }
    /* a hello that names the communicator right (as if sniffed off the wire)
     * and claims to be rank 3, but cannot prove the secret */
    fd = sock_connect(host, port, clock_now() + 5, err, sizeof err);
    if (fd >= 0) {
        struct {
            hello_msg h;
            auth_hello a;
        } intro;
        auth_challenge ch;
        uint8_t junk[AUTH_MAC_LEN] = { 9 };
        memset(&intro, 0, sizeof intro);
        intro.h = (hello_msg){ .magic = HELLO_MAGIC, .version = WIRE_VERSION, .auth = 1,
                               .comm_id = c->id, .src = 3, .dst = 1 };
        auth_start(&intro.a, AUTH_ROLE_DATA);
        sock_write_full(fd, &intro, sizeof intro, clock_now() + 5);
        int rc = sock_read_full(fd, &ch, sizeof ch, clock_now() + 15);
        if (rc == 0) {
            sock_write_full(fd, junk, sizeof junk, clock_now() + 5);
            s->impostor_closed = closed_by_peer(fd);
        } else {
            /* rank 3 got there first and proved itself: refused at once */
            s->impostor_closed = rc == WEFT_EPEER;
        }
        close(fd);
    }
    /* the store, with a plain request and no authentication */
    fd = sock_connect(c->store_host, c->store_port, clock_now() + 5, err, sizeof err);
    if (fd >= 0) {
        store_req q = { .magic = STORE_MAGIC, .cmd = STORE_CHECK, .keylen = 1 };
        sock_write_full(fd, &q, sizeof q, clock_now() + 5);
        sock_write_full(fd, "k", 1, clock_now() + 5);
        s->store_closed = closed_by_peer(fd);
        close(fd);
    }
    atomic_store(&s->done, 1);
    return NULL;
}

static int rank_main(int r, int n, int port, const char *secret, int report)
{
    weft_config cfg;
    weft_comm *c;
    weft_config_default(&cfg);
    cfg.rank = r;
    cfg.world_size = n;
    cfg.master_addr = "127.0.0.1";
    cfg.master_port = port;
    cfg.job_secret = secret;
    cfg.timeout_s = 30;
    cfg.connect_timeout_s = 5;
    alarm(60);
    int rc = weft_comm_init(&c, &cfg);
    if (rc) {
        if (write(report, &rc, sizeof rc) != sizeof rc)
            return 4;
        return 3;
    }
    stranger_arg s = { .c = c };
    pthread_t th;
    if (r == 0)
        pthread_create(&th, NULL, stranger, &s);
    float x[1000];
    int ok = 1, iters = 0;
    for (;;) {
        float flag = r == 0 ? (float)atomic_load(&s.done) : 0;
        for (int i = 0; i < 1000; i++)
            x[i] = (float)(r + i);
        x[999] = flag;
        if ((rc = weft_allreduce(c, x, x, 1000, WEFT_F32, WEFT_SUM)))
            break;
        for (int i = 0; i < 999; i++)
            ok &= x[i] == (float)(n * i + n * (n - 1) / 2);
        iters++;
        if (x[999] > 0 || iters > 20000)
            break;
        usleep(1000);
    }
    int res[5] = { rc, ok, iters, 0, 0 };
    if (r == 0) {
        pthread_join(th, NULL);
        res[3] = s.garbage_closed + 2 * s.impostor_closed + 4 * s.store_closed;
    }
    res[4] = weft_comm_destroy(c);
    if (write(report, res, sizeof res) != sizeof res)
        return 4;
    return 0;
}

static void job(void)
{
    int n = 4, port = fx_free_port(), fds[2];
    pid_t pid[4];
    CHECK(pipe(fds) == 0);
    for (int r = 0; r < n; r++)
        if ((pid[r] = fork()) == 0) {
            close(fds[0]);
            _exit(rank_main(r, n, port, SECRET, fds[1]));
        }
    close(fds[1]);
    int res[5], got = 0;
    while (read(fds[0], res, sizeof res) == sizeof res) {
        got++;
        CHECKF(res[0] == 0, "allreduce: %s", weft_strerror(res[0]));
        CHECK(res[1] == 1);
        CHECK(res[4] == 0);
        if (res[3] || res[2] > 0) {
            /* rank 0 reports what the stranger saw; others report 0 */
        }
        if (res[3]) {
            CHECKF(res[3] == 7, "stranger: garbage %s, impostor %s, store %s",
                   res[3] & 1 ? "refused" : "NOT refused", res[3] & 2 ? "refused" : "NOT refused",
                   res[3] & 4 ? "refused" : "NOT refused");
        }
    }
    close(fds[0]);
    CHECK(got == n);
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* A rank with the wrong secret cannot join. */
static void wrong_secret_job(void)
{
    int port = fx_free_port(), fds[2];
    pid_t pid[2];
    CHECK(pipe(fds) == 0);
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) {
            close(fds[0]);
            _exit(rank_main(r, 2, port, r == 0 ? SECRET : "not-the-secret", fds[1]));
        }
    close(fds[1]);
    int res[5], got = 0, eauth = 0;
    memset(res, 0, sizeof res);
    while (read(fds[0], res, sizeof res) >= (ssize_t)sizeof(int)) {
        got++;
        eauth += res[0] == WEFT_EAUTH;
        memset(res, 0, sizeof res);
    }
    close(fds[0]);
    CHECKF(eauth >= 1, "the rank with the wrong secret was let in (%d reports)", got);
    for (int r = 0; r < 2; r++) {
        int st;
        waitpid(pid[r], &st, 0);
    }
}

/* Without libcrypto there is nothing to check: each case says so. */
static int skipped(void)
{
    if (auth_compiled())
        return 0;
    printf("skip: built without libcrypto\n");
    return 1;
}

TEST(proofs) { if (!skipped()) proofs(); }
TEST(store) { if (!skipped()) store_refusals(); }
TEST(job_with_strangers) { if (!skipped()) job(); }
TEST(wrong_secret) { if (!skipped()) wrong_secret_job(); }
