/* Max-min sharing of links between flows (see net.h). */
#include "sim/net.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "weft.h"

static int grow32(uint32_t **a, uint32_t *cap, uint32_t need)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    uint32_t *x = realloc(*a, (size_t)c * sizeof *x);
    if (!x)
        return WEFT_ENOMEM;
    *a = x;
    *cap = c;
    return 0;
}

int sim_net_init(net *n, uint32_t nlinks)
{
    memset(n, 0, sizeof *n);
    n->links = calloc(nlinks ? nlinks : 1, sizeof *n->links);
    n->nlinks = nlinks;
    return n->links ? 0 : WEFT_ENOMEM;
}

void sim_net_free(net *n)
{
    for (uint32_t i = 0; i < n->nlinks; i++)
        free(n->links[i].fl);
    free(n->links);
    free(n->flows);
    free(n->freel);
    free(n->heap);
    free(n->aset);
    free(n->lset);
    memset(n, 0, sizeof *n);
}

/* ---- indexed heap of flows by finish time ---- */

static int before(const net *n, uint32_t a, uint32_t b)
{
    double x = n->flows[a].tfin, y = n->flows[b].tfin;
    return x < y || (x == y && a < b);
}

static void hset(net *n, uint32_t i, uint32_t f)
{
    n->heap[i] = f;
    n->flows[f].hpos = i + 1;
}

static void sift_up(net *n, uint32_t i)
{
    uint32_t f = n->heap[i];
    while (i > 0) {
        uint32_t up = (i - 1) / 2;
        if (!before(n, f, n->heap[up]))
            break;
        hset(n, i, n->heap[up]);
        i = up;
    }
    hset(n, i, f);
}

static void sift_down(net *n, uint32_t i)
{
    uint32_t f = n->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n->nheap)
            break;
        if (c + 1 < n->nheap && before(n, n->heap[c + 1], n->heap[c]))
            c++;
        if (!before(n, n->heap[c], f))
            break;
        hset(n, i, n->heap[c]);
        i = c;
    }
    hset(n, i, f);
}

static void heap_update(net *n, uint32_t f)
{
    net_flow *x = &n->flows[f];
    x->tfin = x->rate > 0 ? x->tlast + x->rem / x->rate : INFINITY;
    if (!x->hpos) {
        n->heap[n->nheap++] = f;
        x->hpos = n->nheap;
    }
    sift_up(n, x->hpos - 1);
    sift_down(n, n->flows[f].hpos - 1);
}

static void heap_remove(net *n, uint32_t f)
{
    uint32_t i = n->flows[f].hpos - 1;
    n->flows[f].hpos = 0;
    uint32_t last = n->heap[--n->nheap];
    if (i < n->nheap) {
        hset(n, i, last);
        sift_up(n, i);
        sift_down(n, n->flows[last].hpos - 1);
    }
}

int64_t sim_net_next(const net *n, double *t)
{
    if (!n->nheap)
        return -1;
    *t = n->flows[n->heap[0]].tfin;
    return n->heap[0];
}

/* ---- max-min ---- */

/* Re-balance the flows on the links seed[0..ns). */
static int rebalance(net *n, double now, const int32_t *seed, int ns)
{
    uint32_t ep = ++n->epoch, na = 0, nl = 0;
    for (int i = 0; i < ns; i++) {
        net_link *l = &n->links[seed[i]];
        if (grow32(&n->aset, &n->capa, na + l->n))
            return WEFT_ENOMEM;
        for (uint32_t k = 0; k < l->n; k++) {
            net_flow *f = &n->flows[l->fl[k]];
            if (f->mark != ep) {
                f->mark = ep;
                n->aset[na++] = l->fl[k];
            }
        }
    }
    if (grow32(&n->lset, &n->capl, na * NET_MAXPATH + 1))
        return WEFT_ENOMEM;
    for (uint32_t i = 0; i < na; i++) {
        net_flow *f = &n->flows[n->aset[i]];
        f->rem -= f->rate * (now - f->tlast);
        if (f->rem < 0)
            f->rem = 0;
        f->tlast = now;
        f->frozen = 0;
        for (int k = 0; k < f->nl; k++) {
            net_link *l = &n->links[f->link[k]];
            if (l->mark != ep) {
                l->mark = ep;
                l->resid = l->cap - l->alloc;
                l->nun = 0;
                n->lset[nl++] = (uint32_t)f->link[k];
            }
            l->resid += f->rate;
            l->nun++;
        }
    }
    /* progressive filling: the links with the smallest fair share fix the
     * rate of their flows, which then leave the other links (whose shares
     * can only grow, so every link at that share is done in one pass) */
    uint32_t left = na;
    while (left) {
        double best = INFINITY;
        for (uint32_t i = 0; i < nl; i++) {
            net_link *l = &n->links[n->lset[i]];
            if (l->nun && l->resid / l->nun < best)
                best = l->resid / l->nun;
        }
        if (isinf(best))
            break;
        double thr = best * (1 + 1e-12) + 1e-300;
        for (uint32_t i = 0; i < nl; i++) {
            net_link *l = &n->links[n->lset[i]];
            if (!l->nun || l->resid / l->nun > thr)
                continue;
            double rate = best > l->cap * 1e-9 ? best : l->cap * 1e-9;
            for (uint32_t k = 0; k < l->n && l->nun; k++) {
                uint32_t id = l->fl[k];
                net_flow *f = &n->flows[id];
                if (f->mark != ep || f->frozen)
                    continue;
                f->frozen = 1;
                left--;
                for (int q = 0; q < f->nl; q++) {
                    net_link *m = &n->links[f->link[q]];
                    m->resid -= rate;
                    m->nun--;
                }
                if (f->rate != rate) {
                    f->rate = rate;
                    heap_update(n, id);
                }
            }
        }
    }
    for (uint32_t i = 0; i < nl; i++) {
        net_link *l = &n->links[n->lset[i]];
        l->alloc = l->cap - l->resid;
    }
    return 0;
}

int64_t sim_net_add(net *n, double now, const int32_t *links, int nl, double len, uint64_t tag)
{
    uint32_t id;
    if (n->nfree)
        id = n->freel[--n->nfree];
    else {
        if (n->nflows == n->capflows) {
            uint32_t c = n->capflows ? n->capflows * 2 : 256;
            net_flow *x = realloc(n->flows, (size_t)c * sizeof *x);
            uint32_t *h = realloc(n->heap, (size_t)c * sizeof *h);
            if (x)
                n->flows = x;
            if (h)
                n->heap = h;
            if (!x || !h)
                return WEFT_ENOMEM;
            n->capflows = c;
        }
        id = n->nflows++;
    }
    net_flow *f = &n->flows[id];
    memset(f, 0, sizeof *f);
    f->nl = nl;
    f->rem = f->len = len;
    f->tlast = now;
    f->tag = tag;
    for (int k = 0; k < nl; k++) {
        net_link *l = &n->links[links[k]];
        if (grow32(&l->fl, &l->capn, l->n + 1))
            return WEFT_ENOMEM;
        f->link[k] = links[k];
        f->slot[k] = l->n;
        l->fl[l->n++] = id;
    }
    int rc = rebalance(n, now, links, nl);
    if (rc)
        return rc;
    if (!f->hpos)
        heap_update(n, id);
    return id;
}

int sim_net_finish(net *n, double now, uint32_t id)
{
    net_flow *f = &n->flows[id];
    int32_t links[NET_MAXPATH];
    int nl = f->nl;
    if (f->hpos)
        heap_remove(n, id);
    for (int k = 0; k < nl; k++) {
        net_link *l = &n->links[f->link[k]];
        uint32_t s = f->slot[k], last = l->fl[--l->n];
        if (s < l->n) { /* move the last flow into the hole */
            l->fl[s] = last;
            net_flow *g = &n->flows[last];
            for (int j = 0; j < g->nl; j++)
                if (g->link[j] == f->link[k])
                    g->slot[j] = s;
        }
        l->alloc -= f->rate;
        l->bytes += f->len;
        links[k] = f->link[k];
    }
    f->nl = 0;
    f->rate = 0;
    if (grow32(&n->freel, &n->capfree, n->nfree + 1))
        return WEFT_ENOMEM;
    n->freel[n->nfree++] = id;
    return rebalance(n, now, links, nl);
}
