/* A store out of descriptors: a rank that connects is dropped at once,
 * not left to wait for an answer that never comes (and then told the
 * store never arrived). */
#include "test.h"

#include "bootstrap/store.h"
#include "core/clock.h"
#include "weft.h"

#include <errno.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

TEST_TIMEOUT(60);

/* What the connecting rank waits at most for an answer. */
#define WAIT_S 8.0

TEST(out_of_descriptors_drops_at_once)
{
    store_server *srv;
    char err[256];
    int port, go[2], res[2];
    CHECKF(store_server_start(&srv, "127.0.0.1", 0, &port, "fds-secret", err, sizeof err) == 0,
           "%s", err);
    CHECK(pipe(go) == 0 && pipe(res) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char b;
        store_client *c = NULL;
        double t0, spent;
        int rc;
        if (read(go[0], &b, 1) != 1)
            _exit(3);
        t0 = clock_now();
        rc = store_connect_within(&c, "127.0.0.1", port, WAIT_S, "fds-secret", err, sizeof err);
        if (!rc) { /* built without authentication: the first request waits instead */
            store_set_answer_timeout(c, WAIT_S);
            rc = store_set(c, "k", "v", 1);
            store_close(c);
        }
        spent = clock_now() - t0;
        double out[2] = { rc, spent };
        _exit(write(res[1], out, sizeof out) == sizeof out ? 0 : 3);
    }
    /* this process (the store's thread with it) runs out of descriptors */
    struct rlimit old, rl;
    int fds[256], n = 0;
    getrlimit(RLIMIT_NOFILE, &old);
    rl = old;
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    while (n < 256 && (fds[n] = dup(0)) >= 0)
        n++;
    CHECKF(n < 256 && errno == EMFILE, "%d descriptors taken", n);
    CHECK(write(go[1], "g", 1) == 1);
    double out[2] = { 0, -1 };
    CHECK(read(res[0], out, sizeof out) == sizeof out);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    while (n > 0)
        close(fds[--n]);
    setrlimit(RLIMIT_NOFILE, &old);
    /* dropped, and well before the wait's end (a generous bound on a
     * loaded machine: the store lets go within milliseconds) */
    CHECKF(out[0] != 0, "connected to a store out of descriptors");
    CHECKF(out[1] >= 0 && out[1] < WAIT_S / 2, "the rank waited %.2f s", out[1]);
    /* and the store still serves once descriptors are back */
    store_client *c;
    CHECKF(store_connect_within(&c, "127.0.0.1", port, WAIT_S, "fds-secret", err, sizeof err) == 0,
           "%s", err);
    if (c) {
        CHECK(store_set(c, "k", "v", 1) == 0);
        store_close(c);
    }
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
    store_server_stop(srv);
}
