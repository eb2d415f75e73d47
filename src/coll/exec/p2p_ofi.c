/* The point-to-point engine's libfabric half: a pair whose collectives
 * talk libfabric (coll/comm_net.h) sends its messages through the
 * engine's own endpoint too, opened beside the communicator's. Its own,
 * because the communicator's is driven by whoever runs a collective while
 * this one moves under the engine's drive lock; sharing one would put a
 * lock on the collectives' hot path, and two sleepers on one completion
 * queue could each consume the completion the other waits for.
 *
 * The engine's rule (per peer, sends in posting order, one message each
 * way at a time) is the transport's (transport/ofi.h): the head send goes
 * out with ofi_send; the next header comes with ofi_recv_hdr, is matched
 * like a socket's, and its body lands with ofi_recv_body in the receive's
 * buffer (large ones by RMA where the provider offers it) or a parked one. */
#include "coll/exec/p2p.h"

#include "coll/exec/p2p_int.h"

#include "coll/comm_net.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

int p2p_net_open(p2p_engine *e, const char *ip, char addr[OFI_ADDR_MAX])
{
    weft_comm *c = e->c;
    char err[300] = "";
    addr[0] = 0;
    if (!c->ofi)
        return 0;
    /* the provider the communicator's endpoint runs on, whatever chose it */
    ofi_opts o = { .rank = c->rank, .size = c->size, .comm_id = c->id ^ P2P_SALT,
                   .provider = ofi_provider(c->ofi), .must = 1, .bind_ip = ip,
                   .secret = c->secret, .loglevel = c->loglevel, .no_rma = !c->params.ofi_rma };
    int rc = ofi_open(&e->ofi, &o, addr, err, sizeof err);
    if (rc) {
        addr[0] = 0;
        return comm_fail(c, rc < 0 ? rc : WEFT_ECONFIG, "point-to-point: %s", err);
    }
    log_sub(c->loglevel, LOG_INFO, LOG_SUB_NET, c->rank, "point-to-point: libfabric, %s",
            ofi_describe(e->ofi));
    return 0;
}

int p2p_net_peer(p2p_engine *e, int peer, const char *addr)
{
    char err[200];
    if (!e || !e->ofi || peer == e->rank || !comm_net_ofi(e->c, peer))
        return 0;
    if (!*addr) /* both ends opened libfabric for their collectives, so both did here */
        return comm_fail(e->c, WEFT_EPROTO,
                         "rendezvous: rank %d published no point-to-point libfabric address",
                         peer);
    int rc = ofi_set_peer(e->ofi, peer, addr, err, sizeof err);
    if (rc)
        return comm_fail(e->c, rc, "rendezvous: %s", err);
    e->peer[peer].ofi = 1;
    return 0;
}

void p2p_net_close(p2p_engine *e)
{
    if (!e->ofi)
        return;
    log_sub(e->c->loglevel, LOG_INFO, LOG_SUB_NET, e->rank,
            "point-to-point over libfabric: %llu messages, %llu payload bytes",
            (unsigned long long)e->ofi_msgs, (unsigned long long)e->ofi_bytes);
    ofi_close(e->ofi);
    e->ofi = NULL;
}

/* "rank 3 died or cannot be reached (libfabric: ...)" for a peer's
 * failure, the transport's words for anything else */
static void failed(p2p_engine *e, int q, int rc, const char *err)
{
    char why[300];
    if (e->ofi_cut[0])
        snprintf(why, sizeof why, "%s", e->ofi_cut);
    else if (rc == WEFT_EPEER)
        snprintf(why, sizeof why, "rank %d died or cannot be reached (libfabric: %.200s)", q,
                 err);
    else
        snprintf(why, sizeof why, "%.250s", err);
    p2p_peer_gone(e, q, rc, why);
}

int p2p_ofi_read(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    char err[300];
    int progressed = 0, rc;
    while (!p->gone) {
        if (p->hdr < sizeof p->h) {
            if ((rc = ofi_recv_hdr(e->ofi, q, OFI_CH_P2P, &p->h, err, sizeof err)) < 0) {
                failed(e, q, rc, err);
                return 1;
            }
            if (rc == 0)
                return progressed;
            p->hdr = sizeof p->h;
            progressed = 1;
            if (p2p_header_arrived(e, q))
                return 1;
        }
        char *dst = p->into ? (char *)p->into->a.recv : p->park->buf;
        rc = ofi_recv_body(e->ofi, q, OFI_CH_P2P, dst, p->h.len, NULL, NULL, err, sizeof err);
        if (rc < 0) {
            failed(e, q, rc, err);
            return 1;
        }
        if (rc != 1)
            return progressed | (rc > 0);
        p->got = p->h.len;
        e->ofi_msgs++;
        e->ofi_bytes += p->h.len;
        p2p_msg_arrived(e, q);
        progressed = 1;
    }
    return progressed;
}

int p2p_ofi_send(p2p_engine *e, int q)
{
    p2p_peer *p = &e->peer[q];
    weft_request *r;
    char err[300];
    int progressed = 0;
    while (!p->gone && (r = p->sends.head)) {
        p2p_started(e, r);
        int rc = ofi_send(e->ofi, q, OFI_CH_P2P, &r->h, r->a.send, r->bytes, err, sizeof err);
        if (rc < 0) {
            failed(e, q, rc, err);
            return 1;
        }
        if (rc != 1)
            return progressed | (rc > 0);
        r->hdr = sizeof r->h;
        r->moved = r->bytes;
        e->ofi_msgs++;
        e->ofi_bytes += r->bytes;
        p2p_sent(e, q);
        progressed = 1;
    }
    return progressed;
}
