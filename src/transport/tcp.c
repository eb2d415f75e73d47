#include "transport/tcp.h"

#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "weft.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* how long an accepted connection may take to introduce itself: a member
 * sends its hello right after connecting */
#define HELLO_WAIT_S 5.0

int tcp_net_init(tcp_net *n, int rank, int size, uint64_t comm_id, const char *bind_ip,
                 char addr_out[SOCK_ADDR_MAX], char *err, size_t errlen)
{
    int port;
    memset(n, 0, sizeof *n);
    n->rank = rank;
    n->size = size;
    n->comm_id = comm_id;
    n->lfd = -1;
    n->addr = calloc((size_t)size, sizeof *n->addr);
    n->out_fd = malloc((size_t)size * sizeof(int));
    n->in_fd = malloc((size_t)size * sizeof(int));
    n->out_hs = calloc((size_t)size, sizeof *n->out_hs);
    if (!n->addr || !n->out_fd || !n->in_fd || !n->out_hs) {
        tcp_net_close(n);
        return WEFT_ENOMEM;
    }
    for (int i = 0; i < size; i++)
        n->out_fd[i] = n->in_fd[i] = -1;
    n->lfd = sock_listen(bind_ip, 0, 4096, &port, err, errlen);
    if (n->lfd < 0) {
        int rc = n->lfd;
        n->lfd = -1;
        tcp_net_close(n);
        return rc;
    }
    sock_set_nonblock(n->lfd, 1);
    if (bind_ip && strchr(bind_ip, ':'))
        snprintf(addr_out, SOCK_ADDR_MAX, "[%s]:%d", bind_ip, port);
    else
        snprintf(addr_out, SOCK_ADDR_MAX, "%s:%d", bind_ip ? bind_ip : "127.0.0.1", port);
    return 0;
}

void tcp_drop(tcp_net *n, int peer)
{
    if (n->out_fd && n->out_fd[peer] >= 0)
        close(n->out_fd[peer]);
    if (n->in_fd && n->in_fd[peer] >= 0)
        close(n->in_fd[peer]);
    if (n->out_fd)
        n->out_fd[peer] = n->in_fd[peer] = -1;
    if (n->out_hs)
        memset(&n->out_hs[peer], 0, sizeof n->out_hs[peer]);
}

void tcp_net_close(tcp_net *n)
{
    for (int i = 0; n->out_fd && n->in_fd && i < n->size; i++)
        tcp_drop(n, i);
    for (int i = 0; i < n->npend; i++)
        close(n->pend[i].fd);
    n->npend = 0;
    if (n->lfd >= 0)
        close(n->lfd);
    free(n->addr);
    free(n->out_fd);
    free(n->in_fd);
    free(n->out_hs);
    memset(n, 0, sizeof *n);
    n->lfd = -1;
}

/* Reads what is there of the want bytes into hs->buf. 1: complete, 0: would
 * block, WEFT_EPEER: closed. */
static int fill(int fd, tcp_hs *hs, size_t want)
{
    while (hs->have < want) {
        ssize_t r = recv(fd, hs->buf + hs->have, want - hs->have, MSG_DONTWAIT);
        if (r > 0) {
            hs->have += (uint16_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return WEFT_EPEER;
    }
    return 1;
}

int tcp_out(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    tcp_hs *hs = &n->out_hs[peer];
    int fd = n->out_fd[peer], rc;
    if (fd >= 0 && hs->state == HS_READY) {
        *fdp = fd;
        return 1;
    }
    if (fd < 0) {
        char host[SOCK_ADDR_MAX], e[200];
        int port;
        struct {
            hello_msg h;
            auth_hello a;
        } intro;
        if (sock_split_addr(n->addr[peer], host, sizeof host, &port)) {
            snprintf(err, errlen, "rank %d published a bad address '%s'", peer, n->addr[peer]);
            return WEFT_EPROTO;
        }
        /* the peer listened before it published its address: a refused
         * connection means it is gone, so do not retry */
        fd = sock_connect_once(host, port, clock_now() + n->connect_timeout_s, e, sizeof e);
        if (fd < 0) {
            snprintf(err, errlen, "rank %d died (cannot connect to %s: %s)", peer,
                     n->addr[peer], e);
            return fd == WEFT_ETIMEDOUT || fd == WEFT_EPEER ? WEFT_EPEER : fd;
        }
        memset(&intro, 0, sizeof intro);
        intro.h = (hello_msg){ .magic = HELLO_MAGIC, .version = WIRE_VERSION,
                               .auth = n->secret != NULL, .comm_id = n->comm_id,
                               .src = n->rank, .dst = peer };
        memset(hs, 0, sizeof *hs);
        if (n->secret && (rc = auth_start(&hs->mine, AUTH_ROLE_DATA))) {
            close(fd);
            snprintf(err, errlen, "no random numbers for authentication");
            return rc;
        }
        intro.a = hs->mine;
        rc = sock_write_full(fd, &intro, n->secret ? sizeof intro : sizeof intro.h,
                             clock_now() + n->connect_timeout_s);
        if (rc) {
            close(fd);
            snprintf(err, errlen, "rank %d died (cannot introduce this rank at %s: %s)", peer,
                     n->addr[peer], weft_strerror(rc));
            return rc == WEFT_ETIMEDOUT ? WEFT_EPEER : rc;
        }
        sock_set_nonblock(fd, 1);
        n->out_fd[peer] = fd;
        hs->state = n->secret ? HS_PENDING : HS_READY;
    }
    *fdp = fd;
    if (hs->state == HS_READY)
        return 1;
    /* waiting for the peer's challenge */
    rc = fill(fd, hs, sizeof(auth_challenge));
    if (rc <= 0) {
        if (rc < 0)
            snprintf(err, errlen,
                     "rank %d died (it closed the connection during authentication)", peer);
        return rc;
    }
    auth_challenge ch;
    uint8_t proof[AUTH_MAC_LEN];
    const char *why;
    hello_msg bind = { .magic = HELLO_MAGIC, .version = WIRE_VERSION, .auth = 1,
                       .comm_id = n->comm_id, .src = n->rank, .dst = peer };
    if (auth_challenge_decode(hs->buf, hs->have, &ch, &why) ||
        auth_answer(n->secret, &hs->mine, &ch, &bind, sizeof bind, proof)) {
        snprintf(err, errlen, "the listener of rank %d at %s failed to prove the job secret",
                 peer, n->addr[peer]);
        return WEFT_EAUTH;
    }
    if ((rc = sock_write_full(fd, proof, sizeof proof, clock_now() + n->connect_timeout_s))) {
        snprintf(err, errlen, "rank %d died (authentication: %s)", peer, weft_strerror(rc));
        return WEFT_EPEER;
    }
    hs->state = HS_READY;
    log_sub(n->loglevel, LOG_TRACE, LOG_SUB_AUTH, n->rank, "connection to rank %d authenticated",
            peer);
    return 1;
}

int tcp_in(tcp_net *n, int peer, int *fdp, char *err, size_t errlen)
{
    *fdp = n->in_fd[peer];
    return *fdp >= 0;
}

static void pend_remove(tcp_net *n, int k)
{
    n->pend[k] = n->pend[--n->npend];
}

int tcp_check_pending(tcp_net *n)
{
    int filed = 0;
    double now = clock_now();
    for (int k = n->npend; k-- > 0;) {
        tcp_pend *p = &n->pend[k];
        const char *why = NULL;
        while (p->have < AUTH_MAC_LEN) {
            ssize_t r = recv(p->fd, p->got + p->have, AUTH_MAC_LEN - p->have, MSG_DONTWAIT);
            if (r > 0) {
                p->have += (uint16_t)r;
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
                why = "closed before proving the job secret";
            break;
        }
        if (!why && p->have < AUTH_MAC_LEN) {
            if (now < p->since + HELLO_WAIT_S)
                continue;
            why = "did not prove the job secret in time";
        }
        if (!why && auth_check(p->got, p->expect))
            why = "failed to prove the job secret";
        if (!why && n->in_fd[p->src] >= 0)
            why = "a second proven connection from the same rank";
        if (why) {
            log_msg(n->loglevel, LOG_WARN, n->rank,
                    "dropped a connection claiming to be rank %d: it %s", p->src, why);
            close(p->fd);
        } else {
            n->in_fd[p->src] = p->fd;
            filed++;
            log_sub(n->loglevel, LOG_TRACE, LOG_SUB_AUTH, n->rank,
                    "connection from rank %d authenticated", p->src);
        }
        pend_remove(n, k);
    }
    return filed;
}

static int drop(tcp_net *n, int fd, const char *why)
{
    log_msg(n->loglevel, LOG_WARN, n->rank, "dropped an incoming connection: %s", why);
    close(fd);
    return 0;
}

int tcp_accept_one(tcp_net *n, char *err, size_t errlen)
{
    uint8_t raw[sizeof(hello_msg) + sizeof(auth_hello)];
    hello_msg h;
    auth_hello a;
    const char *why;
    double dl;
    int fd = accept4(n->lfd, NULL, NULL, SOCK_CLOEXEC), rc;
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
            return 0;
        snprintf(err, errlen, "accept: %s", strerror(errno));
        return WEFT_ESYS;
    }
    sock_tune(fd);
    dl = clock_now() + HELLO_WAIT_S;
    if ((rc = sock_read_full(fd, raw, sizeof h, dl))) {
        if (rc == WEFT_EPEER) { /* a liveness probe (tcp_probe), or a port scan */
            close(fd);
            return 0;
        }
        return drop(n, fd, "no hello in time");
    }
    if (hello_decode(raw, sizeof h, n->size, &h, &why))
        return drop(n, fd, why);
    if (h.comm_id != n->comm_id || h.dst != n->rank)
        return drop(n, fd, "not a member of this communicator (or a different job secret)");
    if (n->in_fd[h.src] >= 0)
        return drop(n, fd, "a second connection from the same rank");
    if (h.auth != (n->secret != NULL))
        return drop(n, fd, h.auth ? "peer authenticates but this rank has no job secret"
                                  : "peer does not authenticate (no job secret)");
    if (n->secret) {
        auth_challenge ch;
        tcp_pend p = { .fd = fd, .src = h.src, .since = clock_now() };
        if ((rc = sock_read_full(fd, raw + sizeof h, sizeof a, dl)))
            return drop(n, fd, "no authentication hello in time");
        if (auth_hello_decode(raw + sizeof h, sizeof a, &a, &why) || a.role != AUTH_ROLE_DATA)
            return drop(n, fd, "bad authentication hello");
        if (auth_challenge_make(n->secret, &a, &h, sizeof h, &ch, p.expect))
            return drop(n, fd, "cannot compute a challenge");
        if (sock_write_full(fd, &ch, sizeof ch, dl))
            return drop(n, fd, "closed during authentication");
        sock_set_nonblock(fd, 1);
        if (n->npend == TCP_PEND_MAX) {
            /* under a flood of unproven connections the oldest goes */
            int oldest = 0;
            for (int k = 1; k < n->npend; k++)
                if (n->pend[k].since < n->pend[oldest].since)
                    oldest = k;
            drop(n, n->pend[oldest].fd, "too many unproven connections");
            pend_remove(n, oldest);
        }
        n->pend[n->npend++] = p;
        return tcp_check_pending(n);
    }
    sock_set_nonblock(fd, 1);
    n->in_fd[h.src] = fd;
    return 1;
}

int tcp_pending(const tcp_net *n, void *pfv, int max)
{
    struct pollfd *pf = pfv;
    int k;
    for (k = 0; k < n->npend && k < max; k++)
        pf[k] = (struct pollfd){ .fd = n->pend[k].fd, .events = POLLIN };
    return k;
}

int tcp_probe(tcp_net *n, int peer)
{
    char host[SOCK_ADDR_MAX], e[160];
    int port, fd;
    if (sock_split_addr(n->addr[peer], host, sizeof host, &port))
        return 0;
    /* the kernel completes the connection for a live listener even while
     * its process is busy elsewhere; a dead process's port refuses */
    fd = sock_connect_once(host, port, clock_now() + 1.0, e, sizeof e);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return fd == WEFT_EPEER ? WEFT_EPEER : 0;
}
