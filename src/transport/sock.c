#include "transport/sock.h"

#include "core/clock.h"
#include "weft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static int resolve(const char *host, int port, int passive, struct addrinfo **out,
                   char *err, size_t errlen)
{
    struct addrinfo hints;
    char portstr[16];
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(portstr, sizeof portstr, "%d", port);
    rc = getaddrinfo(host && *host ? host : NULL, portstr, &hints, out);
    if (rc) {
        snprintf(err, errlen, "cannot resolve %s: %s", host ? host : "*", gai_strerror(rc));
        return WEFT_ECONFIG;
    }
    return 0;
}

int sock_listen(const char *host, int port, int backlog, int *port_out,
                char *err, size_t errlen)
{
    struct addrinfo *ai, *p;
    int fd = -1, rc, one = 1, saved = 0;
    if ((rc = resolve(host, port, 1, &ai, err, errlen)))
        return rc;
    for (p = ai; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, p->ai_addr, p->ai_addrlen) == 0 && listen(fd, backlog) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host && *host ? host : "*",
                 port, strerror(saved ? saved : errno));
        return WEFT_ESYS;
    }
    if (port_out) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        *port_out = ntohs(ss.ss_family == AF_INET6
                              ? ((struct sockaddr_in6 *)&ss)->sin6_port
                              : ((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}

/* One connection attempt to one address, never blocking past deadline.
 * Returns fd, or -errno-like: sets *saved to the errno. */
static int connect_addr(const struct addrinfo *p, double deadline, int *saved)
{
    int fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
    if (fd < 0) {
        *saved = errno;
        return -1;
    }
    if (connect(fd, p->ai_addr, p->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            *saved = errno;
            close(fd);
            return -1;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        int n, e = 0;
        socklen_t el = sizeof e;
        do
            n = poll(&pfd, 1, clock_ms_until(deadline));
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
            *saved = n == 0 ? ETIMEDOUT : errno;
            close(fd);
            return -1;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
            *saved = e ? e : errno;
            close(fd);
            return -1;
        }
    }
    sock_set_nonblock(fd, 0);
    sock_tune(fd);
    return fd;
}

static int do_connect(const char *host, int port, double deadline, int retry, char *err,
                      size_t errlen)
{
    struct addrinfo *ai, *p;
    int rc, saved = 0;
    double backoff = 0.005;
    if ((rc = resolve(host, port, 0, &ai, err, errlen)))
        return rc;
    for (;;) {
        for (p = ai; p; p = p->ai_next) {
            int fd = connect_addr(p, deadline, &saved);
            if (fd >= 0) {
                freeaddrinfo(ai);
                return fd;
            }
        }
        if (!retry || clock_now() + backoff > deadline)
            break;
        /* the listener may simply not be up yet: back off and retry */
        usleep((useconds_t)(backoff * 1e6));
        if (backoff < 0.2)
            backoff *= 2;
    }
    freeaddrinfo(ai);
    snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port, strerror(saved));
    sock_limit_note(saved, err, errlen);
    if (!retry && (saved == ECONNREFUSED || saved == ECONNRESET))
        return WEFT_EPEER;
    return saved == ETIMEDOUT || saved == ECONNREFUSED ? WEFT_ETIMEDOUT : WEFT_ESYS;
}

int sock_connect(const char *host, int port, double deadline, char *err, size_t errlen)
{
    return do_connect(host, port, deadline, 1, err, errlen);
}

int sock_connect_once(const char *host, int port, double deadline, char *err, size_t errlen)
{
    return do_connect(host, port, deadline, 0, err, errlen);
}

void sock_tune(int fd)
{
    int one = 1, buf = 4 << 20, idle = 10, intvl = 2, cnt = 3;
    unsigned int user_ms = 30000;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    /* A dead process closes its sockets, but a dead host or a cut cable
     * says nothing: probe idle links after 10 s (every 2 s, 3 tries), and
     * give up on data nobody acknowledges for 30 s. */
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
}

void sock_limit_note(int e, char *msg, size_t len)
{
    size_t used = strlen(msg);
    struct rlimit rl;
    if (used + 1 >= len)
        return;
    if (e == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(msg + used, len - used,
                 " (this process reached RLIMIT_NOFILE, %llu open files; raise it with "
                 "ulimit -n, up to the hard limit %llu)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    else if (e == ENFILE)
        snprintf(msg + used, len - used, " (the system's open files reached fs.file-max)");
    else if (e == ENOBUFS)
        snprintf(msg + used, len - used,
                 " (kernel memory for sockets ran out: net.ipv4.tcp_mem, net.core.*mem)");
    else if (e == ENOMEM)
        snprintf(msg + used, len - used,
                 " (out of memory: the host's, RLIMIT_AS or vm.max_map_count)");
    else if (e == EADDRNOTAVAIL)
        snprintf(msg + used, len - used,
                 " (no local port left: net.ipv4.ip_local_port_range)");
}

int sock_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return WEFT_ESYS;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? WEFT_ESYS : 0;
}

static int wait_fd(int fd, short ev, double deadline)
{
    struct pollfd pfd = { .fd = fd, .events = ev };
    int n;
    do
        n = poll(&pfd, 1, clock_ms_until(deadline));
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return WEFT_ESYS;
    return n == 0 ? WEFT_ETIMEDOUT : 0;
}

int sock_read_full(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return WEFT_EPEER;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc)
                return rc;
            continue;
        }
        return errno == ECONNRESET ? WEFT_EPEER : WEFT_ESYS;
    }
    return 0;
}

int sock_write_full(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc)
                return rc;
            continue;
        }
        return (errno == EPIPE || errno == ECONNRESET) ? WEFT_EPEER : WEFT_ESYS;
    }
    return 0;
}

int sock_local_ip(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return WEFT_ESYS;
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
        return WEFT_EINVAL; /* e.g. a TLS pump's end: ask store_local_ip */
    if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, (socklen_t)len);
    else
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, (socklen_t)len);
    return 0;
}

int sock_iface_ip(const char *ifname, char *buf, size_t len)
{
    struct ifaddrs *ifa, *p;
    int rc = WEFT_ECONFIG;
    if (getifaddrs(&ifa) < 0)
        return WEFT_ESYS;
    for (p = ifa; p; p = p->ifa_next) {
        if (!p->ifa_addr || strcmp(p->ifa_name, ifname))
            continue;
        if (p->ifa_addr->sa_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)p->ifa_addr)->sin_addr, buf,
                      (socklen_t)len);
            rc = 0;
            break;
        }
        if (p->ifa_addr->sa_family == AF_INET6 && rc) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr, buf,
                      (socklen_t)len);
            rc = 0; /* keep looking for IPv4 */
        }
    }
    freeifaddrs(ifa);
    return rc;
}

int sock_split_addr(const char *addr, char *host, size_t hostlen, int *port)
{
    const char *colon;
    size_t hl;
    if (addr[0] == '[') {
        const char *close_br = strchr(addr, ']');
        if (!close_br || close_br[1] != ':')
            return WEFT_EINVAL;
        hl = (size_t)(close_br - addr - 1);
        if (hl >= hostlen)
            return WEFT_EINVAL;
        memcpy(host, addr + 1, hl);
        host[hl] = 0;
        colon = close_br + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return WEFT_EINVAL;
        hl = (size_t)(colon - addr);
        if (hl >= hostlen)
            return WEFT_EINVAL;
        memcpy(host, addr, hl);
        host[hl] = 0;
    }
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536 ? 0 : WEFT_EINVAL;
}

static int bindable(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), got = -1;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    close(fd);
    return got;
}

/* Picked outside the kernel's ephemeral range: a port from inside it, once
 * released, can become the source port of any connection opened on the
 * machine, or the answer to any bind to port 0, before its listener binds
 * it (tests in parallel lost their store that way); outside it only
 * another pick like this one can take it. */
int sock_spare_port(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 1024 || hi > 65535 || lo > hi)
            lo = 32768, hi = 60999;
        fclose(f);
    }
    /* below the range, from 10000 where it can (clear of well-known
     * services), and above it */
    int from = lo > 10000 ? 10000 : 1024;
    long below = lo - from, above = 65535 - hi;
    uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(clock_now() * 1e9);
    for (int tries = 0; below + above > 0 && tries < 64; tries++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long k = (long)(x % (uint64_t)(below + above));
        int port = k < below ? from + (int)k : hi + 1 + (int)(k - below);
        if (bindable(port) == port)
            return port;
    }
    return bindable(0);
}
