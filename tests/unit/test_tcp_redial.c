/* A handshake the dialling rank left unanswered until the listener gave
 * up on it (a hint's, whose round ended before the challenge came) is
 * dialled again on the next send: the data then arrives, and the peer,
 * alive all along, is not reported dead. */
#include "test.h"

#include "core/auth.h"
#include "core/clock.h"
#include "transport/tcp.h"
#include "weft.h"

#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TEST_TIMEOUT(60);

/* Runs the listener's side until it has a connection from rank 0, or
 * until the deadline. */
static int listen_until(tcp_net *b, double until)
{
    char err[200];
    int fd;
    while (clock_now() < until) {
        tcp_accept_one(b, err, sizeof err);
        tcp_check_pending(b);
        if (tcp_in(b, 0, &fd, err, sizeof err) > 0)
            return fd;
        usleep(2000);
    }
    return -1;
}

TEST(unanswered_handshake_redialled)
{
    if (!auth_compiled()) {
        CHECK(1); /* no authentication built: no handshake to leave unanswered */
        return;
    }
    tcp_net a, b;
    char err[200], addr_a[SOCK_ADDR_MAX], addr_b[SOCK_ADDR_MAX];
    CHECKF(tcp_net_init(&a, 0, 2, 77, "127.0.0.1", addr_a, err, sizeof err) == 0, "%s", err);
    CHECKF(tcp_net_init(&b, 1, 2, 77, "127.0.0.1", addr_b, err, sizeof err) == 0, "%s", err);
    a.secret = b.secret = "redial-secret";
    a.connect_timeout_s = 5;
    /* the listener's allowance for a member's proof, made short */
    b.connect_timeout_s = b.hello_wait_s = 0.2;
    memcpy(a.addr[1], addr_b, SOCK_ADDR_MAX);
    memcpy(b.addr[0], addr_a, SOCK_ADDR_MAX);
    int fd, rc = tcp_out(&a, 1, &fd, err, sizeof err);
    CHECKF(rc == 0, "first tcp_out: %d %s", rc, err); /* its hello sent, the challenge owed */
    /* the listener takes the hello, sends its challenge, waits for the proof
     * past its allowance and drops the connection */
    CHECK(listen_until(&b, clock_now() + 0.6) < 0);
    /* the dialler comes back to it: not ready on a dead socket, and no death */
    double until = clock_now() + 5;
    int in = -1;
    rc = 0;
    while (clock_now() < until && (rc = tcp_out(&a, 1, &fd, err, sizeof err)) == 0) {
        b.connect_timeout_s = b.hello_wait_s = 5;
        if (in < 0)
            in = listen_until(&b, clock_now() + 0.01);
    }
    CHECKF(rc == 1, "tcp_out after the listener gave up: %d %s", rc, rc < 0 ? err : "");
    const char msg[] = "after the redial";
    CHECK(rc == 1 && send(fd, msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg);
    if (in < 0)
        in = listen_until(&b, clock_now() + 5);
    CHECK(in >= 0);
    char got[sizeof msg] = { 0 };
    size_t have = 0;
    while (in >= 0 && have < sizeof got && clock_now() < until) {
        struct pollfd p = { .fd = in, .events = POLLIN };
        if (poll(&p, 1, 100) > 0) {
            ssize_t k = recv(in, got + have, sizeof got - have, 0);
            if (k <= 0)
                break;
            have += (size_t)k;
        }
    }
    CHECKF(have == sizeof msg && !memcmp(got, msg, sizeof msg), "received %zu bytes", have);
    a.secret = b.secret = NULL;
    tcp_net_close(&a);
    tcp_net_close(&b);
}
