/* The libfabric transport on its own (transport/ofi.h), on the tcp and
 * shm providers: two endpoints in one process, each the other's peer.
 * Messages small and large arrive whole and in order; a large one goes
 * straight from the sender's memory into the receiver's (no bounce
 * bytes); a reducing receive sees every chunk once; a sender without the
 * secret is refused before any data is taken; a buffer is registered
 * once however often it is used. Skips (passing) in a build without
 * libfabric or where a provider is missing. */
#include "test.h"

#include "transport/ofi.h"
#include "weft.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

TEST_TIMEOUT(120);

typedef struct {
    ofi_net *n[2];
} pair;

static int open_pair_with(pair *p, const char *prov, const char *s0, const char *s1, int no_rma)
{
    char addr[2][OFI_ADDR_MAX], err[300];
    const char *secret[2] = { s0, s1 };
    for (int r = 0; r < 2; r++) {
        ofi_opts o = { .rank = r, .size = 2, .comm_id = 42, .provider = prov, .must = 1,
                       .bind_ip = "127.0.0.1", .secret = secret[r], .no_rma = no_rma };
        int rc = ofi_open(&p->n[r], &o, addr[r], err, sizeof err);
        if (rc) {
            printf("  (%s: %s; skipped)\n", prov, err);
            if (r)
                ofi_close(p->n[0]);
            return rc;
        }
    }
    for (int r = 0; r < 2; r++) {
        int rc = ofi_set_peer(p->n[r], 1 - r, addr[1 - r], err, sizeof err);
        CHECKF(rc == 0, "%s: set_peer: %s", prov, err);
    }
    return 0;
}

static int open_pair(pair *p, const char *prov, const char *s0, const char *s1)
{
    return open_pair_with(p, prov, s0, s1, 0);
}

static void close_pair(pair *p)
{
    ofi_close(p->n[0]);
    ofi_close(p->n[1]);
}

typedef struct {
    uint64_t bytes, calls;
    unsigned char *seen;
} chunk_log;

static int on_chunk(void *arg, uint64_t off, const void *data, size_t n)
{
    chunk_log *l = arg;
    for (size_t i = 0; i < n; i++)
        l->seen[off + i] = ((const unsigned char *)data)[i];
    l->bytes += n;
    l->calls++;
    return 0;
}

/* Send len bytes 0 -> 1 and receive them (into dst, or chunk by chunk
 * when dst is NULL); returns the receiver's first error, or 0. */
static int transfer(pair *p, const void *src, void *dst, uint64_t len, chunk_log *l)
{
    frame_hdr h, got;
    char err[300] = "";
    int sent = 0, hdr = 0, body = 0, rc;
    memset(&h, 0, sizeof h);
    h.len = len;
    h.seq = len;
    for (long spins = 0; !(sent && body); spins++) {
        if (!sent && (rc = ofi_send(p->n[0], 1, OFI_CH_COLL, &h, src, len, err, sizeof err)) < 0)
            return rc;
        sent = sent || rc == 1;
        if (!hdr) {
            if ((rc = ofi_recv_hdr(p->n[1], 0, OFI_CH_COLL, &got, err, sizeof err)) < 0)
                return rc;
            hdr = rc == 1;
            if (hdr && (got.len != len || got.seq != len))
                return WEFT_EPROTO;
        }
        if (hdr && !body) {
            rc = ofi_recv_body(p->n[1], 0, OFI_CH_COLL, dst, len, on_chunk, l, err, sizeof err);
            if (rc < 0)
                return rc;
            body = rc == 1;
        }
        if (spins > 50000000)
            return WEFT_ETIMEDOUT;
        sched_yield();
    }
    return 0;
}

/* Every size on both paths: rma 1 expects a provider with RMA writes
 * (tcp's rxm and shm both have them) and bodies of 256 KiB and more
 * written into dst; rma 0 the same with RMA turned off (tagged chunks). */
static void messages_on(const char *prov, int rma)
{
    pair p;
    if (open_pair_with(&p, prov, "s3cret", "s3cret", !rma))
        return;
    CHECKF(ofi_rma_with(p.n[0], 1) == rma && ofi_rma_with(p.n[1], 0) == rma,
           "%s: RMA %s (%s)", prov, rma ? "not offered" : "used though turned off",
           ofi_describe(p.n[0]));
    static const uint64_t sizes[] = { 0, 1, 8, 8192, 8193, (256u << 10) - 1, 256u << 10,
                                      1 << 20, (3u << 20) + 24 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t len = sizes[k];
        unsigned char *src = malloc(len + 1), *dst = calloc(1, len + 1);
        for (uint64_t i = 0; i < len; i++)
            src[i] = (unsigned char)(i * 7 + k);
        uint64_t b0, d0, b1, d1, w0 = ofi_rma_bytes(p.n[0]);
        ofi_copy_stats(p.n[1], &b0, &d0);
        int rc = transfer(&p, src, dst, len, NULL);
        ofi_copy_stats(p.n[1], &b1, &d1);
        uint64_t wrote = ofi_rma_bytes(p.n[0]) - w0;
        CHECKF(wrote == (rma && len >= (256u << 10) ? len : 0), "%s: %llu bytes: %llu by RMA",
               prov, (unsigned long long)len, (unsigned long long)wrote);
        CHECKF(rc == 0, "%s: %llu bytes: %s", prov, (unsigned long long)len, weft_strerror(rc));
        CHECKF(!memcmp(src, dst, len), "%s: %llu bytes arrived changed", prov,
               (unsigned long long)len);
        if (len > 8192) /* large: straight into dst, nothing through a bounce buffer */
            CHECKF(b1 == b0 && d1 - d0 == len, "%s: %llu bytes: %llu bounced, %llu direct", prov,
                   (unsigned long long)len, (unsigned long long)(b1 - b0),
                   (unsigned long long)(d1 - d0));
        /* the same again chunk by chunk, as a reducing receive takes it */
        chunk_log l = { 0, 0, calloc(1, len + 1) };
        w0 = ofi_rma_bytes(p.n[0]);
        rc = transfer(&p, src, NULL, len, &l);
        CHECKF(ofi_rma_bytes(p.n[0]) == w0, "%s: a reducing receive took RMA writes", prov);
        CHECKF(rc == 0 && l.bytes == len && !memcmp(src, l.seen, len),
               "%s: %llu bytes in chunks: rc %d, %llu bytes in %llu chunks", prov,
               (unsigned long long)len, rc, (unsigned long long)l.bytes,
               (unsigned long long)l.calls);
        free(l.seen);
        free(src);
        free(dst);
    }
    close_pair(&p);
}

static void stranger_on(const char *prov)
{
    pair p;
    if (open_pair(&p, prov, "not-the-secret", "s3cret"))
        return;
    char buf[64] = "data a stranger wants taken", out[64];
    int rc = transfer(&p, buf, out, sizeof buf, NULL);
    CHECKF(rc == WEFT_EAUTH, "%s: a sender with another secret got %s", prov, weft_strerror(rc));
    close_pair(&p);
}

static void registers_once_on(const char *prov)
{
    pair p;
    if (open_pair(&p, prov, NULL, NULL))
        return;
    size_t len = 4u << 20;
    char *grad = malloc(len);
    void *d1, *d2, *d3;
    uint64_t before = ofi_reg_count(p.n[0]);
    int rc1 = ofi_reg(p.n[0], grad, len, &d1);
    int rc2 = ofi_reg(p.n[0], grad, len, &d2);
    int rc3 = ofi_reg(p.n[0], grad + 4096, 1 << 20, &d3); /* inside: the same registration */
    CHECKF(!rc1 && !rc2 && !rc3, "%s: register: %d %d %d", prov, rc1, rc2, rc3);
    CHECKF(ofi_reg_count(p.n[0]) - before == 1, "%s: %llu registrations of one buffer", prov,
           (unsigned long long)(ofi_reg_count(p.n[0]) - before));
    CHECK(d1 == d2 && d2 == d3);
    free(grad);
    close_pair(&p);
}

/* The small path's cost in queue reads: after a warm-up message (rxm
 * connects on the first), each 8-byte message is injected, so its sender
 * reads its queue once, for progress, and its receiver
 * posts the header receive before it reads
 * the queue, so a message that has already landed is found by that one
 * call (the shm provider delivers on the sender's call; on tcp loopback
 * the bytes may still be in flight, so only the sender is checked). */
static void small_reads_on(const char *prov)
{
    pair p;
    if (open_pair(&p, prov, "s3cret", "s3cret"))
        return;
    uint64_t msg = 0x0123456789abcdefull, out = 0;
    CHECKF(transfer(&p, &msg, &out, sizeof msg, NULL) == 0 && out == msg, "%s: warm-up", prov);
    enum { N = 100 };
    uint64_t r0, t0, r1, t1, rr0, rt0, rr1, rt1;
    long first = 0, calls = 0;
    ofi_wait_stats(p.n[0], &r0, &t0);
    ofi_wait_stats(p.n[1], &rr0, &rt0);
    for (int i = 0; i < N; i++) {
        frame_hdr h, got;
        char err[300] = "";
        memset(&h, 0, sizeof h);
        h.len = sizeof msg;
        h.seq = (uint64_t)i;
        msg = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        int rc = ofi_send(p.n[0], 1, OFI_CH_COLL, &h, &msg, sizeof msg, err, sizeof err);
        CHECKF(rc == 1, "%s: message %d not sent at once: %d %s", prov, i, rc, err);
        for (long k = 0;; k++) {
            rc = ofi_recv_hdr(p.n[1], 0, OFI_CH_COLL, &got, err, sizeof err);
            calls++;
            if (rc != 0 || k > 10000000)
                break;
            sched_yield();
        }
        first += calls == 1;
        calls = 0;
        CHECKF(rc == 1 && got.seq == (uint64_t)i, "%s: message %d: %d %s", prov, i, rc, err);
        rc = ofi_recv_body(p.n[1], 0, OFI_CH_COLL, &out, sizeof out, NULL, NULL, err, sizeof err);
        CHECKF(rc == 1 && out == msg, "%s: message %d's body: %d %s", prov, i, rc, err);
    }
    ofi_wait_stats(p.n[0], &r1, &t1);
    ofi_wait_stats(p.n[1], &rr1, &rt1);
    printf("  (%s: %d messages: sender %llu queue reads, receiver %llu; %ld found by the "
           "first call)\n", prov, N, (unsigned long long)(r1 - r0),
           (unsigned long long)(rr1 - rr0), first);
    /* once per message: its progress call */
    CHECKF(r1 - r0 <= N, "%s: the sender read its queue %llu times for %d injected messages",
           prov, (unsigned long long)(r1 - r0), N);
    CHECKF(t1 == t0 && rt1 == rt0, "%s: a check before a sleep where nobody sleeps", prov);
    if (!strcmp(prov, "shm"))
        CHECKF(first == N, "%s: %ld of %d landed messages needed a second call", prov,
               N - first, N);
    close_pair(&p);
}

TEST(small_reads_tcp) { small_reads_on("tcp"); }
TEST(small_reads_shm) { small_reads_on("shm"); }
TEST(messages_tcp) { messages_on("tcp", 1); }
TEST(messages_shm) { messages_on("shm", 1); }
TEST(messages_tcp_tagged) { messages_on("tcp", 0); }
TEST(messages_shm_tagged) { messages_on("shm", 0); }
TEST(stranger_tcp) { stranger_on("tcp"); }
TEST(stranger_shm) { stranger_on("shm"); }
TEST(registers_once_tcp) { registers_once_on("tcp"); }

TEST(no_provider)
{
    ofi_net *n;
    char addr[OFI_ADDR_MAX], err[300] = "";
    ofi_opts o = { .rank = 0, .size = 2, .provider = "no-such-provider", .must = 1 };
    int rc = ofi_open(&n, &o, addr, err, sizeof err);
    CHECKF(rc < 0 && n == NULL && *err, "WEFT_NET=ofi with no provider: %d %s", rc, err);
    o.must = 0;
    o.provider = NULL;
    rc = ofi_open(&n, &o, addr, err, sizeof err);
    /* auto: on a machine without an RDMA provider there is nothing to use */
    CHECKF(rc >= 0, "auto: %d %s", rc, err);
    if (rc == 0)
        ofi_close(n);
}
