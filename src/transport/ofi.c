/* The libfabric transport (transport/ofi.h). */
#include "transport/ofi.h"

#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/vec.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_LIBFABRIC

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <unistd.h>

/* A payload up to this size rides in its header's message, copied through
 * a bounce buffer: one message per transfer costs less than a copy of a
 * few KiB. Larger ones go in chunks straight from and into the caller's
 * memory; a chunk is big enough that the per-message cost is noise, and
 * several in flight keep the link busy while one completes. */
#define EAGER_MAX 8192u
#define CHUNK (1u << 20)
#define WIN 4
#define CH_AUTH 7
#define CH_CTS 6     /* a receiver's answer to a large message's header (RMA) */
/* From this size a message's receiver says how its body is to come: RMA
 * writes straight into its destination, or tagged chunks (a reducing
 * receive, which needs each chunk staged). The answer costs a round trip,
 * noise against the body's time from here on. */
#define RMA_MIN (256u << 10)
/* From this size (rxm's default SAR limit, above which its receiver reads
 * the body from the sender) every message asks first; see asks(). */
#define ASK_MIN (128u << 10)
#define CTR_MASK ((1ull << 40) - 1)
#define RANK_MASK 0xfffffull

enum { REQ_FREE = 0, REQ_POSTED, REQ_DONE, REQ_FAILED };

typedef struct {
    struct fi_context2 ctx; /* first: the provider's per-operation space (FI_CONTEXT2) */
    int state;
    int err;                /* FI_E* of a failed completion */
    size_t len;
    uint64_t off;           /* a chunk's place in its message */
    size_t want;
    char why[120];
} ofi_req;

/* A receiver's answer to a large header: where to write, or (mode 0) send
 * tagged chunks as for a peer without RMA. */
typedef struct {
    uint64_t addr, key, len;
    uint32_t mode, pad;
} ofi_cts;

/* Where a large message's answer stands: on the sender, not asked for,
 * its receive to post, posted, then RMA or tagged; on the receiver, not
 * due, to send, sent, then delivered. */
enum { CTS_NONE = 0, CTS_POST, CTS_POSTED, CTS_RMA, CTS_TAGGED, CTS_DONE };

typedef struct {
    int active, posted;     /* a message under way; its header posted */
    uint64_t ctr;           /* the number the next message's header carries */
    uint64_t len, next_off, done;
    const char *buf;
    ofi_req hdr, chunk[WIN];
    int cts;                /* CTS_NONE, _POST, _POSTED, then _RMA or _TAGGED */
    ofi_req cts_req;
    ofi_cts answer;
    uint8_t bounce[sizeof(frame_hdr) + EAGER_MAX];
} ofi_tx;

typedef struct {
    int state;              /* 0 idle, 1 header posted, 2 header handed out, 3 body, 4 RMA */
    uint64_t ctr;
    uint64_t len, next_off, done, got;
    uint64_t written;       /* chunks the sender's RMA writes have placed (state 4) */
    struct fid_mr *rma_mr;  /* the destination's registration for them */
    int cts_sent;           /* CTS_NONE, _POST, _POSTED, _DONE */
    ofi_req hdr, chunk[WIN], cts_req;
    ofi_cts answer;
    uint8_t *stage[WIN];    /* a reducing receive's chunks land here */
    uint8_t bounce[sizeof(frame_hdr) + EAGER_MAX];
} ofi_rx;

typedef struct {
    fi_addr_t fa;
    int have, rma;          /* rma: its endpoint takes RMA writes */
    uint8_t nonce[AUTH_NONCE_LEN];
    int tx_auth, rx_auth;   /* 0 not started, 1 posted, 2 sent / verified */
    ofi_req tx_auth_req, rx_auth_req;
    uint8_t tx_proof[AUTH_MAC_LEN], rx_proof[AUTH_MAC_LEN];
    ofi_tx tx[OFI_CH_COUNT];
    ofi_rx rx[OFI_CH_COUNT];
} ofi_peer;

typedef struct {
    uintptr_t base;
    size_t len;
    struct fid_mr *mr;
} mr_entry;

struct ofi_net {
    int rank, size, loglevel, severed, mr_local, mr_endpoint, wait_fd;
    int enabled;            /* the endpoint took fi_enable: its queue may be read */
    int rma, virt_addr;     /* RMA writes with remote data; keys address virtual memory */
    uint64_t comm_id;
    const char *secret;
    uint8_t nonce[AUTH_NONCE_LEN];
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    size_t inject;
    ofi_peer *peer;
    mr_entry *mrs;
    int nmr, capmr;
    uint64_t mr_key, regs, bounced, direct, rma_bytes;
    /* where a small message's time goes: queue reads (and those that
     * found nothing), completions, and the checks before a sleep (and
     * those that found work); printed at close with WEFT_DEBUG=TRACE */
    uint64_t reads, empty, completions, trywaits, busy;
    char desc[200];
};

int ofi_compiled(void) { return 1; }

static int fi_fail(char *err, size_t errlen, const char *what, int rc)
{
    snprintf(err, errlen, "libfabric %s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
    return WEFT_ESYS;
}

/* channel 3 bits, source rank 20, message number 40 */
static uint64_t tag_in(const ofi_net *n, int ch, int src, uint64_t ctr)
{
    (void)n;
    return ((uint64_t)(ch & 7) << 60) | (((uint64_t)src & RANK_MASK) << 40) | (ctr & CTR_MASK);
}

/* The core provider's name: "tcp" of "tcp;ofi_rxm". */
static void core_name(const struct fi_info *i, char *out, size_t len)
{
    const char *p = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
    size_t k = strcspn(p, ";");
    snprintf(out, len, "%.*s", (int)(k < len ? k : len - 1), p);
}

/* Providers that only re-do what weft already does over sockets or its
 * own rings: auto leaves them for TCP and shared memory. */
static int merely_sockets(const struct fi_info *i)
{
    static const char *const plain[] = { "tcp", "sockets", "udp", "net", "shm" };
    char name[32];
    core_name(i, name, sizeof name);
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
        if (!strcmp(name, plain[k]))
            return 1;
    return 0;
}

static int addr_is(const struct fi_info *i, const char *ip)
{
    char s[INET6_ADDRSTRLEN] = "";
    if (!ip || !*ip || !i->src_addr)
        return 0;
    if (i->addr_format == FI_SOCKADDR_IN && i->src_addrlen >= sizeof(struct sockaddr_in))
        inet_ntop(AF_INET, &((const struct sockaddr_in *)i->src_addr)->sin_addr, s, sizeof s);
    else if (i->addr_format == FI_SOCKADDR_IN6 && i->src_addrlen >= sizeof(struct sockaddr_in6))
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)i->src_addr)->sin6_addr, s,
                  sizeof s);
    return *s && !strcmp(s, ip);
}

static const struct fi_info *pick(const struct fi_info *list, const ofi_opts *o)
{
    const struct fi_info *first = NULL;
    int named = o->provider && *o->provider;
    for (const struct fi_info *i = list; i; i = i->next) {
        if (!named && !o->must && merely_sockets(i))
            continue;
        if (addr_is(i, o->bind_ip))
            return i;
        if (!first)
            first = i;
    }
    return first;
}

static void hex(char *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
    out[2 * n] = 0;
}

static int unhex(uint8_t *out, size_t max, const char *s, size_t len)
{
    if (len % 2 || len / 2 > max)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return (int)(len / 2);
}

static int open_fids(ofi_net *n, char *err, size_t errlen)
{
    struct fi_av_attr av = { .type = FI_AV_TABLE, .count = (size_t)n->size };
    struct fi_cq_attr cq = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD };
    int rc;
    if ((rc = fi_fabric(n->info->fabric_attr, &n->fabric, NULL)))
        return fi_fail(err, errlen, "fabric", rc);
    if ((rc = fi_domain(n->fabric, n->info, &n->domain, NULL)))
        return fi_fail(err, errlen, "domain", rc);
    if (n->info->domain_attr->av_type != FI_AV_UNSPEC)
        av.type = n->info->domain_attr->av_type;
    if ((rc = fi_av_open(n->domain, &av, &n->av, NULL)))
        return fi_fail(err, errlen, "address vector", rc);
    /* a provider without wait objects: the caller sleeps in short polls */
    if (fi_cq_open(n->domain, &cq, &n->cq, NULL)) {
        cq.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(n->domain, &cq, &n->cq, NULL)))
            return fi_fail(err, errlen, "completion queue", rc);
    }
    n->wait_fd = -1;
    if (cq.wait_obj == FI_WAIT_FD && fi_control(&n->cq->fid, FI_GETWAIT, &n->wait_fd))
        n->wait_fd = -1;
    if ((rc = fi_endpoint(n->domain, n->info, &n->ep, NULL)))
        return fi_fail(err, errlen, "endpoint", rc);
    if ((rc = fi_ep_bind(n->ep, &n->av->fid, 0)) ||
        (rc = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fi_fail(err, errlen, "endpoint bind", rc);
    if ((rc = fi_enable(n->ep)))
        return fi_fail(err, errlen, "endpoint enable", rc);
    n->enabled = 1;
    return 0;
}

/* 1 when dir holds an entry whose name starts with prefix ("" for any). */
static int dir_has(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    if (!d)
        return 0;
    while (!found && (e = readdir(d)))
        found = e->d_name[0] != '.' && !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return found;
}

/* Whether this host shows a device an RDMA provider could drive: verbs
 * (InfiniBand, RoCE, iWARP), efa, usnic and psm3 all appear under
 * /sys/class/infiniband, Slingshot as cxi, Omni-Path as hfi1. Without one,
 * auto goes straight to TCP: fi_getinfo loads every provider, and some read
 * all of /proc/kallsyms while they look, about 0.1 s of system time in every
 * process that opens a communicator. */
static int fabric_device_present(void)
{
    return dir_has("/sys/class/infiniband", "") || dir_has("/sys/class/cxi", "") ||
           dir_has("/dev", "cxi") || dir_has("/dev", "hfi1");
}

int ofi_open(ofi_net **out, const ofi_opts *o, char addr[OFI_ADDR_MAX], char *err,
             size_t errlen)
{
    struct fi_info *hints, *list = NULL;
    uint8_t name[OFI_NAME_MAX];
    size_t namelen = sizeof name;
    auth_hello mine;
    int rc;
    *out = NULL;
    if (!o->must && !(o->provider && *o->provider) && !fabric_device_present())
        return 1;
    if (!(hints = fi_allocinfo()))
        return WEFT_ENOMEM;
    /* rxm (the layer that gives tcp and verbs reliable datagrams) looks at
     * new connections only every 10 ms of queue reads by default, and each
     * pair's first message waits for one; weft reads the queue only when
     * its fd says so, so the default costs a first message 10 ms and more.
     * A value the user set stands. */
    setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100", 0);
    /* RMA writes for large messages where the provider has them */
    hints->caps = FI_TAGGED | (o->no_rma ? 0 : FI_RMA | FI_WRITE | FI_REMOTE_WRITE);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    /* one thread at a time drives a communicator's transfers */
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    if (o->provider && *o->provider)
        hints->fabric_attr->prov_name = strdup(o->provider);
    rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &list);
    const struct fi_info *best = rc ? NULL : pick(list, o);
    if (!best && hints->caps != FI_TAGGED) {
        if (list)
            fi_freeinfo(list);
        list = NULL;
        hints->caps = FI_TAGGED;
        rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &list);
        best = rc ? NULL : pick(list, o);
    }
    fi_freeinfo(hints);
    if (!best) {
        if (list)
            fi_freeinfo(list);
        if (!o->must)
            return 1;
        snprintf(err, errlen, "WEFT_NET=ofi: no libfabric provider%s%s with reliable "
                 "datagrams and tagged messages (%s)", o->provider && *o->provider ? " " : "",
                 o->provider ? o->provider : "", rc ? fi_strerror(-rc) : "none listed");
        return WEFT_ECONFIG;
    }
    ofi_net *n = calloc(1, sizeof *n);
    if (!n || !(n->peer = calloc((size_t)o->size, sizeof *n->peer))) {
        free(n);
        fi_freeinfo(list);
        return WEFT_ENOMEM;
    }
    n->info = fi_dupinfo(best);
    fi_freeinfo(list);
    n->rank = o->rank;
    n->size = o->size;
    n->comm_id = o->comm_id;
    n->secret = o->secret && *o->secret ? o->secret : NULL;
    n->loglevel = o->loglevel;
    n->wait_fd = -1;
    if (!n->info) {
        ofi_close(n);
        return WEFT_ENOMEM;
    }
    n->mr_local = (n->info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
    n->virt_addr = (n->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    /* the receiver learns that a write has landed from its remote data: a
     * write's own completion says only that the sender may reuse its buffer */
    n->rma = (n->info->caps & FI_RMA) && n->info->domain_attr->cq_data_size >= 4 &&
             !(n->info->mode & FI_RX_CQ_DATA);
    n->mr_endpoint = (n->info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
    n->inject = n->info->tx_attr->inject_size;
    if ((rc = open_fids(n, err, errlen)) ||
        (rc = fi_getname(&n->ep->fid, name, &namelen) ? fi_fail(err, errlen, "name", -FI_ETOOSMALL)
                                                       : 0) ||
        (rc = auth_start(&mine, AUTH_ROLE_DATA))) {
        ofi_close(n);
        return rc;
    }
    memcpy(n->nonce, mine.nonce, sizeof n->nonce);
    hex(addr, name, namelen);
    addr[2 * namelen] = '/';
    hex(addr + 2 * namelen + 1, n->nonce, sizeof n->nonce);
    if (n->rma)
        strcat(addr, "/w");
    snprintf(n->desc, sizeof n->desc, "provider %s, fabric %s, domain %s%s%s%s",
             n->info->fabric_attr->prov_name, n->info->fabric_attr->name,
             n->info->domain_attr->name, n->rma ? ", rma" : "",
             n->mr_local ? ", local registration" : "",
             n->wait_fd >= 0 ? ", wait fd" : ", no wait object");
    *out = n;
    return 0;
}

int ofi_set_peer(ofi_net *n, int peer, const char *addr, char *err, size_t errlen)
{
    uint8_t name[OFI_NAME_MAX];
    const char *slash = strchr(addr, '/');
    ofi_peer *p = &n->peer[peer];
    if (!*addr)
        return 0;
    int len = slash ? unhex(name, sizeof name, addr, (size_t)(slash - addr)) : -1;
    const char *flags = slash ? strchr(slash + 1, '/') : NULL;
    size_t nl = slash ? (flags ? (size_t)(flags - slash - 1) : strlen(slash + 1)) : 0;
    if (len <= 0 || unhex(p->nonce, sizeof p->nonce, slash + 1, nl) != (int)sizeof p->nonce) {
        snprintf(err, errlen, "rank %d published a bad libfabric address", peer);
        return WEFT_EPROTO;
    }
    if (fi_av_insert(n->av, name, 1, &p->fa, 0, NULL) != 1) {
        snprintf(err, errlen, "libfabric cannot address rank %d", peer);
        return WEFT_EPROTO;
    }
    p->have = 1;
    p->rma = n->rma && flags && !strcmp(flags, "/w");
    return 0;
}

int ofi_has_peer(const ofi_net *n, int peer) { return n && n->peer[peer].have; }
const char *ofi_describe(const ofi_net *n) { return n ? n->desc : "none"; }
const char *ofi_provider(const ofi_net *n) { return n ? n->info->fabric_attr->prov_name : ""; }

static uint64_t chunks_of(uint64_t len) { return len <= EAGER_MAX ? 0 : (len + CHUNK - 1) / CHUNK; }

/* Cancel r if it is a receive still posted: one no message has matched
 * yet completes as cancelled; one being filled goes on to its end. */
static void cancel_recv(ofi_net *n, ofi_req *r)
{
    if (r->state == REQ_POSTED)
        (void)fi_cancel(&n->ep->fid, &r->ctx);
}

/* Whether data may still be on its way into this end: a receive being
 * filled (for a large tagged chunk rxm reads the sender's memory), this
 * end's own RMA writes, or a peer's writes into a destination this end
 * offered (answered, not all chunks landed). */
static int under_way(const ofi_net *n)
{
    for (int i = 0; i < n->size; i++) {
        const ofi_peer *p = &n->peer[i];
        if (p->rx_auth_req.state == REQ_POSTED)
            return 1;
        for (int ch = 0; ch < OFI_CH_COUNT; ch++) {
            const ofi_tx *t = &p->tx[ch];
            const ofi_rx *r = &p->rx[ch];
            if (r->hdr.state == REQ_POSTED || t->cts_req.state == REQ_POSTED)
                return 1;
            for (int k = 0; k < WIN; k++)
                if (r->chunk[k].state == REQ_POSTED ||
                    (t->active && t->cts == CTS_RMA && t->chunk[k].state == REQ_POSTED))
                    return 1;
            if (r->state == 4 && r->cts_sent != CTS_POST && r->written < chunks_of(r->len))
                return 1;
        }
    }
    return 0;
}

/* Let what is part-way into this end arrive before the endpoint closes.
 * A stream provider under rxm (tcp, 1.17) reports a transfer cut off
 * part-way in by the close as a cancelled completion without a context,
 * and rxm's error handler dereferences that context: the process dies in
 * fi_close. So every posted receive is cancelled (those not yet matched
 * end at once), and the queue is read while something is still arriving:
 * until nothing is under way, or nothing has completed for a while (a
 * peer that stopped writing because it learned of the failure too). */
static void quiesce(ofi_net *n)
{
    const double quiet = 0.2, most = 2.0; /* s: nothing completed; in all */
    double start = clock_now(), last = start;
    uint64_t seen = n->reads - n->empty;
    for (int i = 0; i < n->size; i++) {
        ofi_peer *p = &n->peer[i];
        cancel_recv(n, &p->rx_auth_req);
        for (int ch = 0; ch < OFI_CH_COUNT; ch++) {
            cancel_recv(n, &p->rx[ch].hdr);
            cancel_recv(n, &p->tx[ch].cts_req);
            for (int k = 0; k < WIN; k++)
                cancel_recv(n, &p->rx[ch].chunk[k]);
        }
    }
    while (!ofi_progress(n) && under_way(n)) {
        double now = clock_now();
        if (n->reads - n->empty != seen)
            last = now;
        seen = n->reads - n->empty;
        if (now - last > quiet || now - start > most)
            break;
        struct pollfd pf = { .fd = n->wait_fd, .events = POLLIN };
        if (n->wait_fd >= 0 && ofi_may_sleep(n))
            (void)poll(&pf, 1, 1);
        else
            sched_yield();
    }
}

/* Closing the endpoint ends every posted operation: nothing lands in a
 * buffer whose owner has been told of the error. */
void ofi_sever(ofi_net *n)
{
    if (!n || n->severed)
        return;
    /* an open that failed part-way has nothing under way, and the shm
     * provider crashes on a read of a queue whose endpoint never enabled */
    if (n->enabled) {
        (void)ofi_progress(n);
        quiesce(n);
    }
    n->severed = 1;
    if (n->ep)
        fi_close(&n->ep->fid);
    n->ep = NULL;
}

void ofi_close(ofi_net *n)
{
    if (!n)
        return;
    log_sub(n->loglevel, LOG_DEBUG, LOG_SUB_NET, n->rank,
            "libfabric: %llu queue reads (%llu empty), %llu completions, %llu checks before "
            "a sleep (%llu found work)",
            (unsigned long long)n->reads, (unsigned long long)n->empty,
            (unsigned long long)n->completions, (unsigned long long)n->trywaits,
            (unsigned long long)n->busy);
    ofi_sever(n);
    for (int i = 0; i < n->nmr; i++)
        fi_close(&n->mrs[i].mr->fid);
    free(n->mrs);
    if (n->cq)
        fi_close(&n->cq->fid);
    if (n->av)
        fi_close(&n->av->fid);
    if (n->domain)
        fi_close(&n->domain->fid);
    if (n->fabric)
        fi_close(&n->fabric->fid);
    if (n->info)
        fi_freeinfo(n->info);
    for (int i = 0; n->peer && i < n->size; i++)
        for (int ch = 0; ch < OFI_CH_COUNT; ch++) {
            for (int k = 0; k < WIN; k++)
                free(n->peer[i].rx[ch].stage[k]);
            if (n->peer[i].rx[ch].rma_mr)
                fi_close(&n->peer[i].rx[ch].rma_mr->fid);
        }
    free(n->peer);
    free(n);
}

int ofi_progress(ofi_net *n)
{
    struct fi_cq_tagged_entry ent[16];
    if (n->severed)
        return WEFT_EPEER;
    for (;;) {
        /* every read is a trip through the provider's progress (for tcp
         * an epoll_wait): a read that filled less than ent drained the
         * queue, so it is the last */
        ssize_t got = fi_cq_read(n->cq, ent, 16);
        n->reads++;
        if (got == -FI_EAGAIN) {
            n->empty++;
            return 0;
        }
        if (got == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof ee);
            if (fi_cq_readerr(n->cq, &ee, 0) != 1)
                return 0;
            ofi_req *r = ee.op_context;
            if (!r)
                continue;
            r->state = REQ_FAILED;
            r->err = ee.err;
            r->len = ee.len;
            snprintf(r->why, sizeof r->why, "%s",
                     fi_cq_strerror(n->cq, ee.prov_errno, ee.err_data, NULL, 0));
            continue;
        }
        if (got < 0)
            return WEFT_ESYS;
        n->completions += (uint64_t)got;
        for (ssize_t i = 0; i < got; i++) {
            if (ent[i].flags & FI_REMOTE_CQ_DATA) {
                /* a sender's RMA write has landed: its data names it (a
                 * provider need not say its length: rxm says 0) */
                uint64_t src = ent[i].data >> 3, ch = ent[i].data & 7;
                if (src < (uint64_t)n->size && ch < OFI_CH_COUNT)
                    n->peer[src].rx[ch].written++;
                continue;
            }
            ofi_req *r = ent[i].op_context;
            if (r) {
                r->state = REQ_DONE;
                r->len = ent[i].len;
            }
        }
        if (got < 16)
            return 0;
    }
}

int ofi_poll(ofi_net *n)
{
    uint64_t before = n->completions;
    int rc = ofi_progress(n);
    return rc ? rc : n->completions != before;
}

int ofi_wait_fd(const ofi_net *n) { return n && !n->severed ? n->wait_fd : -1; }

int ofi_may_sleep(ofi_net *n)
{
    struct fid *f = &n->cq->fid;
    if (n->severed || n->wait_fd < 0)
        return 1;
    n->trywaits++;
    if (fi_trywait(n->fabric, &f, 1) == FI_SUCCESS)
        return 1;
    n->busy++;
    return 0;
}

int ofi_reg(ofi_net *n, const void *buf, size_t len, void **desc)
{
    uintptr_t p = (uintptr_t)buf, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    *desc = NULL;
    if (!len)
        return 0;
    for (int i = n->nmr - 1; i >= 0; i--)
        if (n->mrs[i].base <= p && p + len <= n->mrs[i].base + n->mrs[i].len) {
            *desc = fi_mr_desc(n->mrs[i].mr);
            return 0;
        }
    int rc = VEC_RESERVE(n->mrs, n->capmr, (size_t)n->nmr + 1);
    if (rc)
        return rc;
    mr_entry *e = &n->mrs[n->nmr];
    e->base = p & ~(pg - 1);
    e->len = ((p + len + pg - 1) & ~(pg - 1)) - e->base;
    if (fi_mr_reg(n->domain, (void *)e->base, e->len,
                  FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                  n->mr_key++, 0, &e->mr, NULL))
        return WEFT_ESYS;
    if (n->mr_endpoint && (fi_mr_bind(e->mr, &n->ep->fid, 0) || fi_mr_enable(e->mr))) {
        fi_close(&e->mr->fid);
        return WEFT_ESYS;
    }
    n->nmr++;
    n->regs++;
    *desc = fi_mr_desc(e->mr);
    return 0;
}

uint64_t ofi_reg_count(const ofi_net *n) { return n ? n->regs : 0; }

uint64_t ofi_rma_bytes(const ofi_net *n) { return n ? n->rma_bytes : 0; }
int ofi_rma_with(const ofi_net *n, int peer) { return n && n->rma && n->peer[peer].rma; }

void ofi_wait_stats(const ofi_net *n, uint64_t *reads, uint64_t *trywaits)
{
    *reads = n ? n->reads : 0;
    *trywaits = n ? n->trywaits : 0;
}

void ofi_copy_stats(const ofi_net *n, uint64_t *bounced, uint64_t *direct)
{
    *bounced = n ? n->bounced : 0;
    *direct = n ? n->direct : 0;
}

/* The descriptor a posted buffer needs: none unless the provider asks. */
static int desc_of(ofi_net *n, const void *buf, size_t len, void **desc)
{
    *desc = NULL;
    return n->mr_local ? ofi_reg(n, buf, len, desc) : 0;
}

static int req_error(ofi_net *n, int peer, const ofi_req *r, const char *what, char *err,
                     size_t errlen)
{
    snprintf(err, errlen, "%s rank %d failed: %s (%s)", what, peer, fi_strerror(r->err),
             r->why);
    return r->err == FI_ETRUNC ? WEFT_EPROTO : WEFT_EPEER;
}

/* What posting r (len bytes) returned: 1 posted, 0 the queue is full, or
 * the peer is unreachable. */
static int posted(ofi_req *r, size_t len, ssize_t s)
{
    if (s == -FI_EAGAIN)
        return 0;
    if (s)
        return WEFT_EPEER;
    r->state = REQ_POSTED;
    r->want = len;
    return 1;
}

/* Post one tagged send (recv 0) or receive; 1 posted, 0 the queue is
 * full (try again after progress), negative error. */
static int post(ofi_net *n, int peer, int recv, void *buf, size_t len, uint64_t tag,
                ofi_req *r)
{
    void *desc;
    int rc = desc_of(n, buf, len, &desc);
    if (rc)
        return rc;
    fi_addr_t fa = n->peer[peer].fa;
    ssize_t s = recv ? fi_trecv(n->ep, buf, len, desc, fa, tag, 0, &r->ctx)
                     : fi_tsend(n->ep, buf, len, desc, fa, tag, &r->ctx);
    return posted(r, len, s);
}

static int post_send(ofi_net *n, int peer, const void *buf, size_t len, uint64_t tag,
                     ofi_req *r)
{
    return post(n, peer, 0, (void *)buf, len, tag, r);
}

static int post_recv(ofi_net *n, int peer, void *buf, size_t len, uint64_t tag, ofi_req *r)
{
    return post(n, peer, 1, buf, len, tag, r);
}

/* The proof a sender src gives receiver dst: HMAC over both nonces and
 * (communicator, src, dst), computable only with the secret. */
static int proof(const ofi_net *n, int src, int dst, const uint8_t *nsrc, const uint8_t *ndst,
                 uint8_t out[AUTH_MAC_LEN])
{
    uint8_t bind[4 + 8 + 4 + 4] = "ofi"; /* bytes, so no padding enters the MAC */
    int32_t ends[2] = { src, dst };
    memcpy(bind + 4, &n->comm_id, 8);
    memcpy(bind + 12, ends, sizeof ends);
    auth_hello h = { .role = AUTH_ROLE_DATA };
    auth_challenge c = { .role = AUTH_ROLE_DATA };
    memcpy(h.nonce, ndst, AUTH_NONCE_LEN);
    memcpy(c.nonce, nsrc, AUTH_NONCE_LEN);
    return auth_channel_key(n->secret, &h, &c, bind, sizeof bind, out);
}

static int tx_auth(ofi_net *n, int peer, char *err, size_t errlen)
{
    ofi_peer *p = &n->peer[peer];
    int rc;
    if (!n->secret || p->tx_auth == 2)
        return 1;
    if (p->tx_auth == 0) {
        if ((rc = proof(n, n->rank, peer, n->nonce, p->nonce, p->tx_proof)))
            return rc;
        if ((rc = post_send(n, peer, p->tx_proof, sizeof p->tx_proof, tag_in(n, CH_AUTH, n->rank, 0),
                            &p->tx_auth_req)) <= 0) {
            if (rc < 0)
                snprintf(err, errlen, "cannot send to rank %d over libfabric", peer);
            return rc;
        }
        p->tx_auth = 1;
    }
    if (p->tx_auth_req.state == REQ_FAILED)
        return req_error(n, peer, &p->tx_auth_req, "the proof for", err, errlen);
    if (p->tx_auth_req.state == REQ_DONE)
        p->tx_auth = 2;
    return 1; /* data may follow its proof at once: the receiver waits for it */
}

static int rx_auth(ofi_net *n, int peer, char *err, size_t errlen)
{
    ofi_peer *p = &n->peer[peer];
    uint8_t want[AUTH_MAC_LEN];
    int rc;
    if (!n->secret || p->rx_auth == 2)
        return 1;
    if (p->rx_auth == 0) {
        if ((rc = post_recv(n, peer, p->rx_proof, sizeof p->rx_proof, tag_in(n, CH_AUTH, peer, 0),
                            &p->rx_auth_req)) <= 0)
            return rc;
        p->rx_auth = 1;
    }
    if (p->rx_auth_req.state == REQ_FAILED)
        return req_error(n, peer, &p->rx_auth_req, "the proof from", err, errlen);
    if (p->rx_auth_req.state != REQ_DONE)
        return 0;
    if ((rc = proof(n, peer, n->rank, p->nonce, n->nonce, want)))
        return rc;
    if (p->rx_auth_req.len != sizeof want || auth_check(want, p->rx_proof)) {
        snprintf(err, errlen, "rank %d's libfabric endpoint did not prove the job secret", peer);
        return WEFT_EAUTH;
    }
    p->rx_auth = 2;
    log_sub(n->loglevel, LOG_INFO, LOG_SUB_AUTH, n->rank,
            "rank %d proved the job secret over libfabric", peer);
    return 1;
}

/* The answer's tag number: the message's, with its channel. */
static uint64_t cts_ctr(uint64_t ctr, int ch) { return ((ctr << 3) | (uint64_t)ch) & CTR_MASK; }

/* Whether a message of len bytes asks its receiver first, with or without
 * RMA: a body rxm sends by rendezvous, sent before its receiver matched the
 * header, waits unexpected there, and if its sender then closes the
 * endpoint (it met a mismatch with another peer), rxm over tcp
 * dereferences the dead connection when a receive matches it (signal 11
 * inside fi_trecv). Asked first, the body goes only to a receiver that has
 * matched its header. */
static int asks(uint64_t len) { return len >= ASK_MIN; }

/* One RMA write of a chunk; its remote data tells the receiver who wrote
 * on which channel. 1 posted, 0 queue full, negative error. */
static int post_write(ofi_net *n, int peer, int ch, const void *buf, size_t len, uint64_t raddr,
                      uint64_t key, ofi_req *r)
{
    void *desc;
    int rc = desc_of(n, buf, len, &desc);
    if (rc)
        return rc;
    ssize_t s = fi_writedata(n->ep, buf, len, desc, ((uint64_t)n->rank << 3) | (uint64_t)ch,
                             n->peer[peer].fa, raddr, key, &r->ctx);
    return posted(r, len, s);
}

/* Register dst for the sender's writes and fill the answer; mode 0 (tagged
 * chunks) for a body below RMA_MIN, a reducing receive, or when either end
 * or the provider will not. */
static void rma_offer(ofi_net *n, int peer, ofi_rx *r, void *dst, uint64_t len)
{
    r->answer = (ofi_cts){ .len = len, .mode = 0 };
    /* A registration of its own for this message, closed when it is in: a
     * cached one could outlive the memory it names (free, then malloc at
     * the same address). Providers that pin keep their own cache, which
     * watches for that. */
    if (!dst || len < RMA_MIN || !n->rma || !n->peer[peer].rma ||
        fi_mr_reg(n->domain, dst, (size_t)len, FI_REMOTE_WRITE, 0, n->mr_key++, 0,
                  &r->rma_mr, NULL))
        return;
    if (n->mr_endpoint && (fi_mr_bind(r->rma_mr, &n->ep->fid, 0) || fi_mr_enable(r->rma_mr))) {
        fi_close(&r->rma_mr->fid);
        r->rma_mr = NULL;
        return;
    }
    r->answer.mode = 1;
    r->answer.key = fi_mr_key(r->rma_mr);
    r->answer.addr = n->virt_addr ? (uint64_t)(uintptr_t)dst : 0;
}

int ofi_send(ofi_net *n, int peer, int ch, const frame_hdr *h, const void *buf, uint64_t len,
             char *err, size_t errlen)
{
    ofi_peer *p = &n->peer[peer];
    ofi_tx *t = &p->tx[ch];
    int rc, moved = 0;
    /* Read even for a new message that the provider will inject: rxm
     * keeps what its connection cannot take yet until its progress runs. */
    if ((rc = ofi_progress(n))) {
        snprintf(err, errlen, "libfabric completion queue failed");
        return rc;
    }
    if ((rc = tx_auth(n, peer, err, errlen)) <= 0)
        return rc;
    if (!t->active) {
        t->active = 1;
        t->posted = 0;
        t->len = len;
        t->buf = buf;
        t->next_off = t->done = 0;
        t->cts = asks(len) ? CTS_POST : CTS_NONE;
        memcpy(t->bounce, h, sizeof *h);
        if (len <= EAGER_MAX && len) {
            memcpy(t->bounce + sizeof *h, buf, (size_t)len);
            n->bounced += len;
        }
    }
    if (t->cts == CTS_POST) { /* the answer may come before the header has gone */
        if ((rc = post_recv(n, peer, &t->answer, sizeof t->answer,
                            tag_in(n, CH_CTS, peer, cts_ctr(t->ctr, ch)), &t->cts_req)) < 0) {
            snprintf(err, errlen, "receive from rank %d over libfabric failed", peer);
            return rc;
        }
        if (rc == 0)
            return 0;
        t->cts = CTS_POSTED;
    }
    if (t->cts == CTS_POSTED) {
        if (t->cts_req.state == REQ_FAILED)
            return req_error(n, peer, &t->cts_req, "the answer from", err, errlen);
        if (t->cts_req.state == REQ_DONE) {
            t->cts_req.state = REQ_FREE;
            if (t->cts_req.len != sizeof t->answer || t->answer.len != len) {
                snprintf(err, errlen, "rank %d answered a %llu-byte message badly over libfabric",
                         peer, (unsigned long long)len);
                return WEFT_EPROTO;
            }
            t->cts = t->answer.mode == 1 ? CTS_RMA : CTS_TAGGED;
            moved = 1;
        }
    }
    if (!t->posted) {
        size_t size = sizeof *h + (len <= EAGER_MAX ? (size_t)len : 0);
        uint64_t tag = tag_in(n, ch, n->rank, t->ctr);
        if (size <= n->inject && !n->mr_local) {
            ssize_t s = fi_tinject(n->ep, t->bounce, size, p->fa, tag);
            if (s == -FI_EAGAIN)
                return 0;
            if (s) {
                snprintf(err, errlen, "send to rank %d over libfabric: %s", peer,
                         fi_strerror((int)-s));
                return WEFT_EPEER;
            }
            t->hdr.state = REQ_DONE;
        } else if ((rc = post_send(n, peer, t->bounce, size, tag, &t->hdr)) <= 0) {
            if (rc < 0)
                snprintf(err, errlen, "send to rank %d over libfabric failed", peer);
            return rc;
        }
        t->posted = moved = 1;
    }
    for (int k = 0; k < WIN; k++) {
        ofi_req *r = &t->chunk[k];
        if (r->state == REQ_FAILED)
            return req_error(n, peer, r, "send to", err, errlen);
        if (r->state == REQ_DONE) {
            t->done += r->want;
            r->state = REQ_FREE;
            moved = 1;
        }
        if (r->state == REQ_FREE && len > EAGER_MAX && t->next_off < len &&
            (t->cts == CTS_NONE || t->cts == CTS_RMA || t->cts == CTS_TAGGED)) {
            uint64_t left = len - t->next_off;
            size_t sz = left < CHUNK ? (size_t)left : CHUNK;
            uint64_t tag = tag_in(n, ch, n->rank, t->ctr + 1 + t->next_off / CHUNK);
            if (t->cts == CTS_RMA)
                rc = post_write(n, peer, ch, t->buf + t->next_off, sz,
                                t->answer.addr + t->next_off, t->answer.key, r);
            else
                rc = post_send(n, peer, t->buf + t->next_off, sz, tag, r);
            if (rc > 0 && t->cts == CTS_RMA)
                n->rma_bytes += sz;
            if (rc < 0) {
                snprintf(err, errlen, "send to rank %d over libfabric failed", peer);
                return rc;
            }
            if (rc) {
                r->off = t->next_off;
                t->next_off += sz;
                n->direct += sz;
            }
        }
    }
    if (t->hdr.state == REQ_FAILED)
        return req_error(n, peer, &t->hdr, "send to", err, errlen);
    if (t->hdr.state == REQ_DONE && (len <= EAGER_MAX || t->done == len)) {
        t->hdr.state = REQ_FREE;
        t->active = 0;
        t->cts = CTS_NONE;
        t->ctr = (t->ctr + 1 + chunks_of(len)) & CTR_MASK;
        return 1;
    }
    return moved ? 2 : 0;
}

int ofi_recv_hdr(ofi_net *n, int peer, int ch, frame_hdr *h, char *err, size_t errlen)
{
    ofi_rx *r = &n->peer[peer].rx[ch];
    int rc;
    if (n->secret && n->peer[peer].rx_auth != 2) { /* once per peer: the proof first */
        if ((rc = ofi_progress(n))) {
            snprintf(err, errlen, "libfabric completion queue failed");
            return rc;
        }
        if ((rc = rx_auth(n, peer, err, errlen)) <= 0)
            return rc;
    }
    if (r->state == 0) {
        /* posted before the queue is read: a message that came first
         * waits in the provider and matches now, and the read below
         * finds it instead of the next sleep */
        if ((rc = post_recv(n, peer, r->bounce, sizeof r->bounce, tag_in(n, ch, peer, r->ctr),
                            &r->hdr)) < 0) {
            snprintf(err, errlen, "receive from rank %d over libfabric failed", peer);
            return rc;
        }
        r->state = rc; /* 0: the queue is full; again on the next call */
    }
    /* a waiter's spin (ofi_poll) may have read its completion already */
    if ((r->state != 1 || r->hdr.state == REQ_POSTED) && (rc = ofi_progress(n))) {
        snprintf(err, errlen, "libfabric completion queue failed");
        return rc;
    }
    if (r->state == 0)
        return 0;
    if (r->state == 1) {
        if (r->hdr.state == REQ_FAILED)
            return req_error(n, peer, &r->hdr, "receive from", err, errlen);
        if (r->hdr.state != REQ_DONE)
            return 0;
        if (r->hdr.len < sizeof *h) {
            snprintf(err, errlen, "rank %d sent a short message (%zu bytes) over libfabric",
                     peer, r->hdr.len);
            return WEFT_EPROTO;
        }
        r->got = r->hdr.len - sizeof *h;
        r->hdr.state = REQ_FREE;
        r->state = 2;
    }
    memcpy(h, r->bounce, sizeof *h);
    return 1;
}

int ofi_recv_body(ofi_net *n, int peer, int ch, void *dst, uint64_t len, ofi_chunk_fn fn,
                  void *arg, char *err, size_t errlen)
{
    ofi_rx *r = &n->peer[peer].rx[ch];
    int rc, moved = 0;
    if (r->state == 2 && len <= EAGER_MAX) {
        if (r->got != len) {
            snprintf(err, errlen, "rank %d sent %llu bytes where its header says %llu", peer,
                     (unsigned long long)r->got, (unsigned long long)len);
            return WEFT_EPROTO;
        }
        if (dst && len)
            memcpy(dst, r->bounce + sizeof(frame_hdr), (size_t)len);
        else if (len && (rc = fn(arg, 0, r->bounce + sizeof(frame_hdr), (size_t)len)))
            return rc;
        n->bounced += len;
        r->state = 0;
        r->ctr = (r->ctr + 1) & CTR_MASK;
        return 1;
    }
    if (r->state == 2) {
        r->state = 3;
        r->len = len;
        r->next_off = r->done = 0;
        if (asks(len)) {
            rma_offer(n, peer, r, dst, len);
            r->written = 0;
            r->cts_sent = CTS_POST;
            r->state = r->answer.mode ? 4 : 3;
        }
    }
    if (r->cts_sent == CTS_POST) {
        rc = post_send(n, peer, &r->answer, sizeof r->answer,
                       tag_in(n, CH_CTS, n->rank, cts_ctr(r->ctr, ch)), &r->cts_req);
        if (rc < 0) {
            snprintf(err, errlen, "send to rank %d over libfabric failed", peer);
            return rc;
        }
        if (rc)
            r->cts_sent = CTS_POSTED;
        moved |= rc;
    }
    if (r->cts_sent == CTS_POSTED) {
        if (r->cts_req.state == REQ_FAILED)
            return req_error(n, peer, &r->cts_req, "the answer to", err, errlen);
        if (r->cts_req.state == REQ_DONE) {
            r->cts_req.state = REQ_FREE;
            r->cts_sent = CTS_DONE;
        }
    }
    if ((rc = ofi_progress(n))) {
        snprintf(err, errlen, "libfabric completion queue failed");
        return rc;
    }
    if (r->state == 4) {
        if (r->written > chunks_of(len)) {
            snprintf(err, errlen, "rank %d wrote %llu chunks where its header says %llu", peer,
                     (unsigned long long)r->written, (unsigned long long)chunks_of(len));
            return WEFT_EPROTO;
        }
        if (r->written < chunks_of(len) || r->cts_sent != CTS_DONE)
            return moved ? 2 : 0;
        fi_close(&r->rma_mr->fid);
        r->rma_mr = NULL;
        n->direct += len;
        r->state = 0;
        r->cts_sent = CTS_NONE;
        r->ctr = (r->ctr + 1 + chunks_of(len)) & CTR_MASK;
        return 1;
    }
    for (int k = 0; k < WIN; k++) {
        ofi_req *q = &r->chunk[k];
        if (q->state == REQ_FAILED)
            return req_error(n, peer, q, "receive from", err, errlen);
        if (q->state == REQ_DONE) {
            if (q->len != q->want) {
                snprintf(err, errlen, "rank %d sent a chunk of %zu bytes where %zu were due",
                         peer, q->len, q->want);
                return WEFT_EPROTO;
            }
            if (!dst && (rc = fn(arg, q->off, r->stage[k], q->want)))
                return rc;
            r->done += q->want;
            q->state = REQ_FREE;
            moved = 1;
        }
        if (q->state == REQ_FREE && r->next_off < len) {
            uint64_t left = len - r->next_off;
            size_t sz = left < CHUNK ? (size_t)left : CHUNK;
            void *to = dst ? (char *)dst + r->next_off : NULL;
            if (!to && !(to = r->stage[k] ? r->stage[k] : (r->stage[k] = malloc(CHUNK))))
                return WEFT_ENOMEM;
            rc = post_recv(n, peer, to, sz, tag_in(n, ch, peer, r->ctr + 1 + r->next_off / CHUNK), q);
            if (rc < 0) {
                snprintf(err, errlen, "receive from rank %d over libfabric failed", peer);
                return rc;
            }
            if (rc) {
                q->off = r->next_off;
                r->next_off += sz;
                if (dst)
                    n->direct += sz;
            }
        }
    }
    if (r->done == len && (r->cts_sent == CTS_NONE || r->cts_sent == CTS_DONE)) {
        r->state = 0;
        r->cts_sent = CTS_NONE;
        r->ctr = (r->ctr + 1 + chunks_of(len)) & CTR_MASK;
        return 1;
    }
    return moved ? 2 : 0;
}

#else /* no libfabric in this build */

int ofi_compiled(void) { return 0; }

int ofi_open(ofi_net **out, const ofi_opts *o, char addr[OFI_ADDR_MAX], char *err,
             size_t errlen)
{
    *out = NULL;
    addr[0] = 0;
    if (!o->must)
        return 1;
    snprintf(err, errlen, "WEFT_NET=ofi: this build of weft has no libfabric "
                          "(install libfabric-dev and rebuild)");
    return WEFT_ENOTSUP;
}

int ofi_set_peer(ofi_net *n, int peer, const char *addr, char *err, size_t errlen)
{
    return 0;
}
int ofi_has_peer(const ofi_net *n, int peer) { return 0; }
const char *ofi_describe(const ofi_net *n) { return "none"; }
const char *ofi_provider(const ofi_net *n) { return ""; }
void ofi_close(ofi_net *n) {}
void ofi_sever(ofi_net *n) {}
int ofi_progress(ofi_net *n) { return WEFT_ENOTSUP; }
int ofi_wait_fd(const ofi_net *n) { return -1; }
int ofi_may_sleep(ofi_net *n) { return 1; }
int ofi_poll(ofi_net *n) { return WEFT_ENOTSUP; }
int ofi_send(ofi_net *n, int peer, int ch, const frame_hdr *h, const void *buf, uint64_t len,
             char *err, size_t errlen)
{
    return WEFT_ENOTSUP;
}
int ofi_recv_hdr(ofi_net *n, int peer, int ch, frame_hdr *h, char *err, size_t errlen)
{
    return WEFT_ENOTSUP;
}
int ofi_recv_body(ofi_net *n, int peer, int ch, void *dst, uint64_t len, ofi_chunk_fn fn,
                  void *arg, char *err, size_t errlen)
{
    return WEFT_ENOTSUP;
}
int ofi_reg(ofi_net *n, const void *buf, size_t len, void **desc)
{
    *desc = NULL;
    return WEFT_ENOTSUP;
}
uint64_t ofi_reg_count(const ofi_net *n) { return 0; }
void ofi_copy_stats(const ofi_net *n, uint64_t *bounced, uint64_t *direct)
{
    *bounced = *direct = 0;
}
uint64_t ofi_rma_bytes(const ofi_net *n) { return 0; }
int ofi_rma_with(const ofi_net *n, int peer) { return 0; }
void ofi_wait_stats(const ofi_net *n, uint64_t *reads, uint64_t *trywaits)
{
    *reads = *trywaits = 0;
}

#endif
