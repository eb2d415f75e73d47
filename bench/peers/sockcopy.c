/* sockcopy: the plain socket copy an all-reduce between two hosts is held
 * against. A ring all-reduce on two ranks sends and receives at once, so
 * this copies in both directions at the same time over two TCP streams,
 * one per direction, with large writes, and prints GB/s per direction.
 *
 *   sockcopy -s [-p PORT]                    (one host: serves one run)
 *   sockcopy -c HOST [-p PORT] [-m MiB] [-w KiB] [-B MiB] [-S KiB]
 *                                            (the other: copies, prints)
 *
 * Defaults: 1024 MiB each way in 256 KiB writes (on the machine this was
 * written on, 256 KiB writes copied fastest of 64 KiB .. 4 MiB), every
 * write from and every read into the same 256 KiB, which stays in the
 * cache; -B walks the writes and reads through a buffer of that many MiB
 * instead, as a program moving a large array does. Socket buffers are the
 * kernel's autotuned ones unless -S sets SO_SNDBUF and SO_RCVBUF (both
 * ends; the client passes it on).
 *
 * The client opens both streams, tells the server how many bytes each way
 * (and -B, -S), and times from the first byte until both directions are
 * done (the last byte sent has been read on the other side: each reader
 * reads to EOF and then answers with one byte). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    uint64_t bytes;
    size_t chunk;
    size_t span;   /* bytes of user memory the writes and reads walk through */
    int sending;
    int err;
    double done_at;
} stream;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t k = recv(fd, c, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One direction: the sender writes its bytes, half-closes and waits for the
 * reader's one-byte receipt; the reader drains to EOF and sends it. */
static void *run(void *arg)
{
    stream *s = arg;
    size_t span = s->span > s->chunk ? s->span : s->chunk, at = 0;
    char *buf = malloc(span), ack = 1;
    if (!buf) {
        s->err = 1;
        return NULL;
    }
    memset(buf, 0x5a, span); /* faulted in before the clock matters */
    if (s->sending) {
        for (uint64_t left = s->bytes; left && !s->err;) {
            size_t n = left < s->chunk ? (size_t)left : s->chunk;
            if (at + n > span)
                at = 0;
            s->err = write_all(s->fd, buf + at, n) != 0;
            at += n;
            left -= n;
        }
        shutdown(s->fd, SHUT_WR);
        if (!s->err)
            s->err = read_all(s->fd, &ack, 1) != 0;
    } else {
        uint64_t got = 0;
        for (;;) {
            if (at + s->chunk > span)
                at = 0;
            ssize_t k = recv(s->fd, buf + at, s->chunk, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                s->err = k < 0;
                break;
            }
            got += (uint64_t)k;
            at += (size_t)k;
        }
        s->err |= got != s->bytes;
        if (!s->err)
            s->err = write_all(s->fd, &ack, 1) != 0;
    }
    s->done_at = now();
    free(buf);
    return NULL;
}

static void tune(int fd, int sockbuf)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sockbuf > 0) { /* else the kernel's autotuning */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf);
    }
}

static int dial(const char *host, const char *port, int sockbuf)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
    int fd = -1;
    if (getaddrinfo(host, port, &hints, &ai))
        return -1;
    for (a = ai; a; a = a->ai_next) {
        for (int tries = 0; tries < 100; tries++) { /* the server may still be starting */
            fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0)
                break;
            if (!connect(fd, a->ai_addr, a->ai_addrlen))
                goto done;
            close(fd);
            fd = -1;
            usleep(50000);
        }
    }
done:
    freeaddrinfo(ai);
    if (fd >= 0)
        tune(fd, sockbuf);
    return fd;
}

/* Both directions at once; the time runs from the start of both until the
 * later one is done. */
static int copy(int out_fd, int in_fd, uint64_t bytes, size_t chunk, size_t span, double *secs)
{
    stream s[2] = { { .fd = out_fd, .bytes = bytes, .chunk = chunk, .span = span, .sending = 1 },
                    { .fd = in_fd, .bytes = bytes, .chunk = chunk, .span = span, .sending = 0 } };
    pthread_t t[2];
    double t0 = now();
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, run, &s[i]))
            return -1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    secs[0] = s[0].done_at - t0;
    secs[1] = s[1].done_at - t0;
    return s[0].err || s[1].err ? -1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: sockcopy -s [-p PORT]\n"
                    "       sockcopy -c HOST [-p PORT] [-m MiB each way (1024)] [-w KiB per write (256)]\n"
                    "                [-B MiB each side's writes and reads walk through (one write's)]\n"
                    "                [-S KiB SO_SNDBUF and SO_RCVBUF (kernel autotuning)]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *host = NULL, *port = "29600";
    uint64_t mib = 1024;
    size_t chunk = 256u << 10, span = 0;
    int sockbuf = 0;
    int server = 0, ch;
    double secs[2];
    while ((ch = getopt(argc, argv, "sc:p:m:w:B:S:h")) != -1) {
        switch (ch) {
        case 's': server = 1; break;
        case 'c': host = optarg; break;
        case 'p': port = optarg; break;
        case 'm': mib = strtoull(optarg, NULL, 10); break;
        case 'w': chunk = (size_t)strtoull(optarg, NULL, 10) << 10; break;
        case 'B': span = (size_t)strtoull(optarg, NULL, 10) << 20; break;
        case 'S': sockbuf = atoi(optarg) << 10; break;
        default: usage();
        }
    }
    if (server == !!host || !mib || !chunk)
        usage();
    if (server) {
        struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(port)),
                                   .sin6_addr = IN6ADDR_ANY_INIT };
        int one = 1, l = socket(AF_INET6, SOCK_STREAM, 0), fd[2];
        uint64_t hdr[3]; /* bytes each way, span, socket buffer */
        if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
            bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 4)) {
            perror("sockcopy: listen");
            return 1;
        }
        /* The client's first stream carries the size and then its data. */
        for (int i = 0; i < 2; i++) {
            if ((fd[i] = accept(l, NULL, NULL)) < 0) {
                perror("sockcopy: accept");
                return 1;
            }
        }
        if (read_all(fd[0], hdr, sizeof hdr))
            hdr[0] = 0;
        for (int i = 0; i < 2; i++)
            tune(fd[i], (int)hdr[2]);
        if (!hdr[0] ||
            copy(fd[1], fd[0], hdr[0], chunk, (size_t)hdr[1], secs)) {
            fprintf(stderr, "sockcopy: copy failed\n");
            return 1;
        }
        return 0;
    }
    int out_fd = dial(host, port, sockbuf), in_fd = out_fd >= 0 ? dial(host, port, sockbuf) : -1;
    uint64_t bytes = mib << 20, hdr[3] = { bytes, (uint64_t)span, (uint64_t)sockbuf };
    if (in_fd < 0) {
        fprintf(stderr, "sockcopy: cannot connect to %s port %s\n", host, port);
        return 1;
    }
    if (write_all(out_fd, hdr, sizeof hdr) || copy(out_fd, in_fd, bytes, chunk, span, secs)) {
        fprintf(stderr, "sockcopy: copy failed\n");
        return 1;
    }
    /* secs[0]: until our bytes were all read there; secs[1]: until theirs arrived here */
    printf("sockcopy: %llu MiB each way, %zu KiB writes, %zu KiB buffers: out %.3f GB/s, "
           "in %.3f GB/s, both %.3f GB/s per direction\n",
           (unsigned long long)mib, chunk >> 10, (span > chunk ? span : chunk) >> 10,
           bytes / secs[0] / 1e9, bytes / secs[1] / 1e9,
           bytes / (secs[0] > secs[1] ? secs[0] : secs[1]) / 1e9);
    return 0;
}
