#include "transport/tcp.h"

#include "core/clock.h"
#include "core/log.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    if (!n->addr || !n->out_fd || !n->in_fd) {
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
    if (bind_ip && strchr(bind_ip, ':'))
        snprintf(addr_out, SOCK_ADDR_MAX, "[%s]:%d", bind_ip, port);
    else
        snprintf(addr_out, SOCK_ADDR_MAX, "%s:%d", bind_ip ? bind_ip : "127.0.0.1", port);
    return 0;
}

void tcp_net_close(tcp_net *n)
{
    for (int i = 0; n->out_fd && i < n->size; i++)
        if (n->out_fd[i] >= 0)
            close(n->out_fd[i]);
    for (int i = 0; n->in_fd && i < n->size; i++)
        if (n->in_fd[i] >= 0)
            close(n->in_fd[i]);
    if (n->lfd >= 0)
        close(n->lfd);
    free(n->addr);
    free(n->out_fd);
    free(n->in_fd);
    memset(n, 0, sizeof *n);
    n->lfd = -1;
}

int tcp_out(tcp_net *n, int peer, char *err, size_t errlen)
{
    char host[SOCK_ADDR_MAX];
    int port, fd, rc;
    hello_msg h = { .magic = HELLO_MAGIC, .version = WIRE_VERSION, .comm_id = n->comm_id,
                    .src = n->rank, .dst = peer };
    if (n->out_fd[peer] >= 0)
        return n->out_fd[peer];
    if (sock_split_addr(n->addr[peer], host, sizeof host, &port)) {
        snprintf(err, errlen, "rank %d published a bad address '%s'", peer, n->addr[peer]);
        return WEFT_EPROTO;
    }
    fd = sock_connect(host, port, clock_now() + n->connect_timeout_s, err, errlen);
    if (fd < 0)
        return fd;
    rc = sock_write_full(fd, &h, sizeof h, clock_now() + n->connect_timeout_s);
    if (rc) {
        close(fd);
        snprintf(err, errlen, "cannot introduce this rank to rank %d at %s: %s", peer,
                 n->addr[peer], weft_strerror(rc));
        return rc;
    }
    sock_set_nonblock(fd, 1);
    n->out_fd[peer] = fd;
    return fd;
}

int tcp_accept_one(tcp_net *n, char *err, size_t errlen)
{
    hello_msg h;
    int fd = sock_accept(n->lfd, clock_now() + n->connect_timeout_s, err, errlen);
    int rc;
    if (fd < 0)
        return fd;
    /* a member sends its hello right after connecting; a stranger that
     * sends nothing is dropped after a short wait */
    rc = sock_read_full(fd, &h, sizeof h, clock_now() + 5.0);
    if (rc || h.magic != HELLO_MAGIC || h.version != WIRE_VERSION ||
        h.comm_id != n->comm_id || h.dst != n->rank || h.src < 0 || h.src >= n->size ||
        h.src == n->rank || n->in_fd[h.src] >= 0) {
        log_msg(n->loglevel, LOG_WARN, n->rank,
                "dropped a connection that is not a member of this communicator");
        close(fd);
        return 0;
    }
    sock_set_nonblock(fd, 1);
    n->in_fd[h.src] = fd;
    return 0;
}
