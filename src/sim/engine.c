/* The discrete-event engine: every simulated rank walks its schedule round
 * by round with the semantics of coll/sched/sched.h, messages become flows on the
 * links of the topology, and time advances from event to event.
 *
 * Costs of one message of n bytes from a to b (the alpha-beta-gamma model):
 *   the sender's software overhead o (serialised per rank, as LogP's o:
 *   a rank that sends k messages in a round pays k*o before the last one
 *   leaves), then n bytes at the max-min share of the links on the path
 *   (bandwidth beta, shared), then the path latency alpha; a RECV_REDUCE
 *   adds n / reduce speed (gamma) after arrival. Local COPY and REDUCE ops
 *   take local_us + n / speed each, in order, at the start of their round.
 * A SEND completes when its last byte has left; a round ends when all its
 * ops have; pipelining comes from the schedule itself (many chunks, each a
 * round, several rounds' messages in flight on different links).
 *
 * With a cpu line the software costs are work on cores instead of delays:
 * a send's overhead, the copy of a message that stays in the node into
 * shared memory (by the sender), its copy or reduction out of it (by the
 * receiver) and local ops are jobs of core-microseconds, flows over the
 * rank's core (one core at most) and the node's cores (shared max-min:
 * processor sharing), so ranks beyond the cores slow each other only while
 * they all have work. Copies and reductions run at the in-cache speeds
 * while the node's working set fits the cache, at the memory's share per
 * core beyond it. A receive on a core that other ranks share first costs
 * the switches that get its rank onto the core (switch_work). */
#include "sim/prog.h"
#include "sim/net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_NET = 0, EV_FSTART, EV_ARRIVE, EV_OPDONE };

typedef struct {
    double t;
    uint64_t seq;
    uint32_t id;
    uint8_t type;
} sev;

typedef struct {
    uint64_t len;
    int32_t src, dst;           /* reps */
    int32_t links[NET_MAXPATH];
    int nl;
    double lat;
    double t_arrive;            /* < 0: not yet */
    int32_t recv_rank;          /* matched receiver; -1: none yet */
    uint8_t recv_reduce;
    uint8_t intra;              /* stays in the node */
    uint8_t refs;               /* freed when sender and receiver are done */
    uint32_t next;              /* in the pair's queue */
} smsg;

typedef struct {
    uint64_t key;
    uint32_t sh, st;            /* unmatched sends: head, tail (msg id + 1) */
    uint32_t rh, rt;            /* unmatched receives (waiter id + 1) */
} spair;

typedef struct {
    uint32_t round, nrounds;
    int pending;
    int jobs;                   /* core jobs in progress; none: the rank waits (spins) */
    double cpu, t_done;
} srank;

typedef struct {
    const sim_job *j;
    const sim_topo *t;
    sim_prog *g;
    int p, nreps;
    sim_place *pl;              /* placement of reps */
    srank *rk;
    sev *ev;
    uint64_t nev, capev, seq, events;
    smsg *msg;
    uint32_t nmsg, capmsg, *mfree, nmfree, capmfree;
    spair *pairs;
    uint64_t npairs;
    net nt;
    uint32_t nR, nN, nP, nC;    /* reps, nodes, pods, clusters spanned */
    uint32_t base[LC_COUNT];    /* first link id of each class */
    double proto_ovh, proto_eff;
    const sim_hop *hop;         /* the algorithm's costs under its protocol, or NULL */
    int cpu;                    /* the topology has cores: costs are jobs on them */
    uint32_t core0;             /* link of rep 0's core; rep r's is core0 + r */
    double copy_us_B, reduce_us_B; /* a core's time per byte, at this working set */
    double share;               /* of the node's ranks, those that share a core */
    double per_core;            /* ranks per core */
    int on_node;                /* ranks of a node */
} sim;

/* Flows that are core work, not bytes: the tag's top bit, the kind, the id. */
#define JOB_BIT (1ull << 63)
enum { JOB_LOCAL = 0, JOB_SEND, JOB_RECV };

/* ---- event heap ---- */

static int ev_less(const sev *a, const sev *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static int ev_push(sim *s, double t, uint8_t type, uint32_t id)
{
    if (s->nev == s->capev) {
        uint64_t c = s->capev ? s->capev * 2 : 1024;
        sev *x = realloc(s->ev, c * sizeof *x);
        if (!x)
            return WEFT_ENOMEM;
        s->ev = x;
        s->capev = c;
    }
    sev e = { t, s->seq++, id, type };
    uint64_t i = s->nev++;
    while (i > 0 && ev_less(&e, &s->ev[(i - 1) / 2])) {
        s->ev[i] = s->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->ev[i] = e;
    return 0;
}

static sev ev_pop(sim *s)
{
    sev top = s->ev[0], last = s->ev[--s->nev];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= s->nev)
            break;
        if (c + 1 < s->nev && ev_less(&s->ev[c + 1], &s->ev[c]))
            c++;
        if (!ev_less(&s->ev[c], &last))
            break;
        s->ev[i] = s->ev[c];
        i = c;
    }
    if (s->nev)
        s->ev[i] = last;
    return top;
}

/* ---- messages and pairs ---- */

static int64_t msg_new(sim *s)
{
    uint32_t id;
    if (s->nmfree)
        id = s->mfree[--s->nmfree];
    else {
        if (s->nmsg == s->capmsg) {
            uint32_t c = s->capmsg ? s->capmsg * 2 : 1024;
            smsg *x = realloc(s->msg, (size_t)c * sizeof *x);
            if (!x)
                return WEFT_ENOMEM;
            s->msg = x;
            s->capmsg = c;
        }
        id = s->nmsg++;
    }
    memset(&s->msg[id], 0, sizeof s->msg[id]);
    return id;
}

static int msg_unref(sim *s, uint32_t id)
{
    if (--s->msg[id].refs)
        return 0;
    if (s->nmfree == s->capmfree) {
        uint32_t c = s->capmfree ? s->capmfree * 2 : 1024;
        uint32_t *x = realloc(s->mfree, (size_t)c * sizeof *x);
        if (!x)
            return WEFT_ENOMEM;
        s->mfree = x;
        s->capmfree = c;
    }
    s->mfree[s->nmfree++] = id;
    return 0;
}

static spair *pair_get(sim *s, int src, int dst)
{
    uint64_t key = (((uint64_t)(uint32_t)src << 32) | (uint32_t)dst) + 1;
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    uint64_t i = (h ^ (h >> 29)) & (s->npairs - 1);
    while (s->pairs[i].key && s->pairs[i].key != key)
        i = (i + 1) & (s->npairs - 1);
    s->pairs[i].key = key;
    return &s->pairs[i];
}

/* ---- topology ---- */

static int fold(const sim *s, int r) { return s->g->period ? r % s->g->period : r; }

/* Links and latency of a message from rep a to true rank q. */
static void route(sim *s, int a, int q, smsg *m)
{
    const sim_topo *t = s->t;
    sim_place pa = s->pl[a], pq, fq;
    int b = fold(s, q);
    sim_topo_place(t, s->p, q, &pq);
    fq = s->pl[b];
    int lv = pa.cluster != pq.cluster ? LC_WAN : pa.pod != pq.pod ? LC_POD
           : pa.node != pq.node ? LC_NIC : LC_INTRA;
    m->nl = 0;
    m->lat = 0;
#define ADD(cls, idx) do { if (t->lc[cls].bw_GBps > 0) m->links[m->nl++] = (int32_t)(s->base[cls] + (idx)); } while (0)
    /* a rank's NIC: the rail nearest to it, ranks spread over the rails in order */
    uint32_t na = (uint32_t)t->nics_per_node;
    uint32_t ra = (uint32_t)pa.local * na / (uint32_t)t->ranks_per_node;
    uint32_t rb = (uint32_t)fq.local * na / (uint32_t)t->ranks_per_node;
    m->intra = lv == LC_INTRA;
    if (lv == LC_INTRA) {
        if (!s->cpu) { /* with cores, the copies are the transfer (cpu jobs) */
            ADD(LC_INTRA, 2 * (uint32_t)a);
            ADD(LC_INTRA, 2 * (uint32_t)b + 1);
        }
        m->lat = t->lc[LC_INTRA].lat_us;
    } else {
        ADD(LC_NIC, 2 * ((uint32_t)pa.node * na + ra));
        ADD(LC_NIC, 2 * ((uint32_t)fq.node * na + rb) + 1);
        m->lat = t->lc[LC_NIC].lat_us;
        if (lv >= LC_POD) {
            ADD(LC_POD, 2 * (uint32_t)pa.pod);
            ADD(LC_POD, 2 * (uint32_t)fq.pod + 1);
            m->lat += t->lc[LC_POD].lat_us;
        }
        if (lv == LC_WAN) {
            ADD(LC_WAN, 2 * (uint32_t)pa.cluster);
            ADD(LC_WAN, 2 * (uint32_t)fq.cluster + 1);
            m->lat += t->lc[LC_WAN].lat_us;
        }
    }
#undef ADD
    if (s->hop) /* NCCL's hop cost stands for the link's latency and the protocol's */
        m->lat += (lv == LC_INTRA ? s->hop->intra_us : s->hop->nic_us) -
                  (lv == LC_INTRA ? t->lc[LC_INTRA].lat_us : t->lc[LC_NIC].lat_us);
    m->dst = b;
}

static double msg_ovh(const sim *s, int a, int q)
{
    sim_place pq;
    const sim_place *pa = &s->pl[a];
    sim_topo_place(s->t, s->p, q, &pq);
    int lv = pa->cluster != pq.cluster ? LC_WAN : pa->node != pq.node ? LC_NIC : LC_INTRA;
    if (s->hop) /* the whole hop is latency (route): a GPU does not wait */
        return 0;
    return s->t->lc[lv].ovh_us + s->proto_ovh;
}

static int job_done(sim *s, uint64_t tag, double now);

/* work core-microseconds on rep r's core, then job_done */
static int cpu_job(sim *s, int r, double now, double work, int kind, uint32_t id)
{
    uint64_t tag = JOB_BIT | (uint64_t)kind << 32 | id;
    if (work <= 0)
        return job_done(s, tag, now);
    int32_t links[2] = { (int32_t)(s->core0 + (uint32_t)r),
                         (int32_t)(s->base[LC_CPU] + (uint32_t)s->pl[r].node) };
    int64_t f = sim_net_add(&s->nt, now, links, 2, work, tag);
    if (f < 0)
        return (int)f;
    s->rk[r].jobs++;
    return 0;
}

/* Core work to get rank r onto its core for a message that has arrived.
 * The executor waits by looking and yielding (sched_yield), so a rank that
 * has its own core sees the message at once, but one that shares its core
 * runs only once the rank holding the core yields: one switch, plus, on
 * average, the turns of half the other ranks of its core that are waiting
 * too (each a switch in, a look, a yield); ranks with work are already
 * costed as core work. Which ranks share a core is the scheduler's choice:
 * the expectation over an even spread, with the node's ranks that wait now
 * standing for those of r's core. */
static double switch_work(const sim *s, int r)
{
    if (s->share <= 0 || s->t->cpu_switch_us <= 0)
        return 0;
    int waiting = 0, first = r - s->pl[r].local; /* a node's ranks are a block */
    for (int q = first; q < first + s->on_node && q < s->nreps; q++)
        waiting += q != r && s->pl[q].node == s->pl[r].node && !s->rk[q].jobs &&
                   s->rk[q].round < s->rk[q].nrounds;
    double others = s->on_node > 1 ? (double)waiting / (s->on_node - 1) : 0;
    return s->share * s->t->cpu_switch_us * (1 + (s->per_core - 1) / 2 * others);
}

/* ---- ranks ---- */

static int round_begin(sim *s, int r, double now);

static int op_done(sim *s, int r, double now)
{
    if (--s->rk[r].pending > 0)
        return 0;
    s->rk[r].round++;
    return round_begin(s, r, now);
}

static double recv_cost(const sim *s, const smsg *m)
{
    if (s->cpu) /* out of shared memory: a reduction, or a copy */
        return (double)m->len * (m->recv_reduce ? s->reduce_us_B : m->intra ? s->copy_us_B : 0);
    return m->recv_reduce ? (double)m->len / (s->t->reduce_GBps * 1e3) : 0;
}

static int recv_complete(sim *s, uint32_t id, double now)
{
    smsg *m = &s->msg[id];
    double c = recv_cost(s, m);
    int r = m->recv_rank, rc;
    if ((rc = msg_unref(s, id)))
        return rc;
    if (s->cpu)
        return cpu_job(s, r, now, c + switch_work(s, r), JOB_RECV, (uint32_t)r);
    if (c > 0)
        return ev_push(s, now + c, EV_OPDONE, (uint32_t)r);
    return op_done(s, r, now);
}

/* Post the network ops of rep r's current round. */
static int post_net(sim *s, int r, double now)
{
    srank *k = &s->rk[r];
    const sim_prog *g = s->g;
    uint64_t o0 = g->op0[r];
    uint32_t b = k->round ? g->rend[g->rd0[r] + k->round - 1] : 0;
    uint32_t e = g->rend[g->rd0[r] + k->round];
    int rc;
    k->pending = 1; /* held until every op is posted */
    for (uint32_t i = b; i < e; i++) {
        const sim_op *o = &g->ops[o0 + i];
        if (o->kind == SOP_SEND) {
            int64_t id = msg_new(s);
            if (id < 0)
                return (int)id;
            smsg *m = &s->msg[id];
            m->len = o->len;
            m->src = r;
            m->t_arrive = -1;
            m->recv_rank = -1;
            m->refs = 2;
            route(s, r, o->peer, m);
            /* a CPU posts its sends one after the other; a GPU's channels
             * and peers are served by different warps at once */
            double ts = (s->hop ? now : now > k->cpu ? now : k->cpu) + msg_ovh(s, r, o->peer);
            k->cpu = ts;
            k->pending++;
            spair *pr = pair_get(s, r, m->dst);
            if (pr->rh) { /* a receive is waiting */
                uint32_t w = pr->rh - 1;
                m->recv_rank = s->msg[w].recv_rank;
                m->recv_reduce = s->msg[w].recv_reduce;
                pr->rh = s->msg[w].next;
                if (!pr->rh)
                    pr->rt = 0;
                s->msg[w].refs = 1;
                if ((rc = msg_unref(s, w)))
                    return rc;
            } else {
                if (pr->st)
                    s->msg[pr->st - 1].next = (uint32_t)id + 1;
                else
                    pr->sh = (uint32_t)id + 1;
                pr->st = (uint32_t)id + 1;
            }
            if (s->cpu) {
                double w = msg_ovh(s, r, o->peer) + (m->intra ? (double)m->len * s->copy_us_B : 0);
                if ((rc = cpu_job(s, r, now, w, JOB_SEND, (uint32_t)id)))
                    return rc;
            } else if ((rc = ev_push(s, ts, EV_FSTART, (uint32_t)id)))
                return rc;
        } else if (o->kind == SOP_RECV || o->kind == SOP_RECV_REDUCE) {
            spair *pr = pair_get(s, fold(s, o->peer), r);
            k->pending++;
            if (pr->sh) {
                uint32_t id = pr->sh - 1;
                smsg *m = &s->msg[id];
                pr->sh = m->next;
                if (!pr->sh)
                    pr->st = 0;
                m->recv_rank = r;
                m->recv_reduce = o->kind == SOP_RECV_REDUCE;
                if (m->t_arrive >= 0 && (rc = recv_complete(s, id, now)))
                    return rc;
            } else { /* wait: a message slot stands for the receive */
                int64_t w = msg_new(s);
                if (w < 0)
                    return (int)w;
                s->msg[w].recv_rank = r;
                s->msg[w].recv_reduce = o->kind == SOP_RECV_REDUCE;
                if (pr->rt)
                    s->msg[pr->rt - 1].next = (uint32_t)w + 1;
                else
                    pr->rh = (uint32_t)w + 1;
                pr->rt = (uint32_t)w + 1;
            }
        }
    }
    return op_done(s, r, now);
}

/* Start rep r's rounds from its current one: local ops take time, then
 * the network ops are posted. */
static int round_begin(sim *s, int r, double now)
{
    srank *k = &s->rk[r];
    const sim_prog *g = s->g;
    if (k->round >= k->nrounds) {
        k->t_done = now;
        return 0;
    }
    uint64_t o0 = g->op0[r];
    uint32_t b = k->round ? g->rend[g->rd0[r] + k->round - 1] : 0;
    uint32_t e = g->rend[g->rd0[r] + k->round];
    double dt = 0;
    for (uint32_t i = b; i < e; i++) {
        const sim_op *o = &g->ops[o0 + i];
        if (o->kind == SOP_COPY)
            dt += s->t->local_us + (double)o->len * s->copy_us_B;
        else if (o->kind == SOP_REDUCE)
            dt += s->t->local_us + (double)o->len * s->reduce_us_B;
    }
    if (s->cpu && dt > 0)
        return cpu_job(s, r, now, dt, JOB_LOCAL, (uint32_t)r);
    if (dt > 0) {
        if (now + dt > k->cpu)
            k->cpu = now + dt;
        return ev_push(s, now + dt, EV_NET, (uint32_t)r);
    }
    return post_net(s, r, now);
}

/* ---- flows ---- */

static int flow_start(sim *s, uint32_t id, double now)
{
    smsg *m = &s->msg[id];
    if (m->nl == 0 || m->len == 0) { /* nothing to share: done at once */
        int rc = ev_push(s, now + m->lat, EV_ARRIVE, id);
        return rc ? rc : op_done(s, m->src, now);
    }
    int64_t f = sim_net_add(&s->nt, now, m->links, m->nl, (double)m->len, id);
    return f < 0 ? (int)f : 0;
}

static int job_done(sim *s, uint64_t tag, double now)
{
    uint32_t id = (uint32_t)tag;
    switch ((int)(tag >> 32 & 0xff)) {
    case JOB_LOCAL: return post_net(s, (int)id, now);
    case JOB_SEND: return flow_start(s, id, now);
    default: return op_done(s, (int)id, now);
    }
}

static int flow_end(sim *s, uint32_t f, double now)
{
    uint64_t tag = s->nt.flows[f].tag;
    uint32_t id = (uint32_t)tag;
    int rc = sim_net_finish(&s->nt, now, f);
    if (rc)
        return rc;
    if (tag & JOB_BIT) {
        int kind = (int)(tag >> 32 & 0xff);
        s->rk[kind == JOB_SEND ? s->msg[id].src : (int)id].jobs--;
        return job_done(s, tag, now);
    }
    smsg *m = &s->msg[id];
    if ((rc = ev_push(s, now + m->lat, EV_ARRIVE, id)))
        return rc;
    return op_done(s, m->src, now);
}

static int arrive(sim *s, uint32_t id, double now)
{
    smsg *m = &s->msg[id];
    m->t_arrive = now;
    /* one reference for the arrival, one for the receive; a receive
     * posted later finds the message arrived */
    int rc = m->recv_rank >= 0 ? recv_complete(s, id, now) : 0;
    return rc ? rc : msg_unref(s, id);
}

/* ---- one run ---- */

/* Bytes one rank's call holds in its buffers (input and output). */
static double call_bytes(const sim_job *j, uint64_t count)
{
    double n = (double)count * j->esize, p = j->nranks;
    switch (j->kind) {
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_GATHER:
    case WEFT_COLL_REDUCE_SCATTER:
    case WEFT_COLL_SCATTER: return n + p * n;
    case WEFT_COLL_ALLTOALL: return 2 * p * n;
    default: return 2 * n;
    }
}

/* A core's time per byte copied and reduced. While the node's working set
 * (every rank's buffers, and the part of its shared-memory rings its
 * messages pass through) fits the cache, the in-cache speeds, and while a
 * core's share of it fits the core's own cache (l2), that cache's speed;
 * beyond the shared cache, each core gets its share of the memory's
 * bandwidth at most. The set is
 * one real call's, not that of a smaller count simulated for
 * extrapolation (g at count_sim stands for j->count) nor of all the calls
 * run back to back. */
static void cpu_speeds(sim *s, const sim_job *j, const sim_prog *g, uint64_t count_sim,
                       int on_node)
{
    const sim_topo *t = s->t;
    double copy = t->copy_GBps, red = t->reduce_GBps;
    double sent = 0;
    for (uint64_t i = g->op0[0]; i < g->op0[1]; i++)
        if (g->ops[i].kind == SOP_SEND)
            sent += (double)g->ops[i].len;
    if (count_sim > 0)
        sent *= (double)j->count / (double)count_sim;
    if (j->calls > 1) /* calls back to back reuse the same buffers and rings */
        sent /= j->calls;
    double ring = t->cpu_ring_MiB * 1048576.0;
    double ws = on_node * (call_bytes(j, j->count) + (ring > 0 && sent > ring ? ring : sent));
    double busy = t->cpu_cores < on_node ? t->cpu_cores : on_node;
    if (t->cpu_cache_MiB > 0 && ws > t->cpu_cache_MiB * 1048576.0 && t->cpu_mem_GBps > 0) {
        double share = t->cpu_mem_GBps / busy;
        copy = copy < share ? copy : share;
        red = red < share ? red : share;
    } else if (t->cpu_l2_MiB > 0 && t->cpu_l2_GBps > 0 && busy > 0 &&
               ws / busy <= t->cpu_l2_MiB * 1048576.0) {
        copy = red = t->cpu_l2_GBps; /* every core's part stays in its own cache */
    }
    s->copy_us_B = 1 / (copy * 1e3);
    s->reduce_us_B = 1 / (red * 1e3);
}

static int setup(sim *s, const sim_job *j, sim_prog *g, uint64_t count_sim)
{
    const sim_topo *t = j->topo;
    memset(s, 0, sizeof *s);
    s->j = j;
    s->t = t;
    s->g = g;
    s->p = j->nranks;
    s->nreps = g->nreps;
    s->pl = calloc((size_t)g->nreps, sizeof *s->pl);
    s->rk = calloc((size_t)g->nreps, sizeof *s->rk);
    if (!s->pl || !s->rk)
        return WEFT_ENOMEM;
    for (int r = 0; r < g->nreps; r++) {
        sim_topo_place(t, s->p, r, &s->pl[r]);
        if ((uint32_t)s->pl[r].node + 1 > s->nN)
            s->nN = (uint32_t)s->pl[r].node + 1;
        if ((uint32_t)s->pl[r].pod + 1 > s->nP)
            s->nP = (uint32_t)s->pl[r].pod + 1;
        if ((uint32_t)s->pl[r].cluster + 1 > s->nC)
            s->nC = (uint32_t)s->pl[r].cluster + 1;
        s->rk[r].nrounds = (uint32_t)(g->rd0[r + 1] - g->rd0[r]);
    }
    s->nR = (uint32_t)g->nreps;
    uint32_t nics = (uint32_t)t->nics_per_node;
    uint32_t n[LC_COUNT] = { 2 * s->nR, 2 * s->nN * nics, 2 * s->nP, 2 * s->nC, s->nN }, tot = 0;
    for (int c = 0; c < LC_COUNT; c++) {
        s->base[c] = tot;
        tot += n[c];
    }
    s->cpu = t->cpu_cores > 0;
    s->core0 = tot; /* then one core link per rep, outside the classes */
    tot += s->cpu ? s->nR : 0;
    s->proto_ovh = t->proto[j->algo].ovh_us;
    s->proto_eff = t->proto[j->algo].bw_eff;
    if (j->proto > 0 && t->hop[j->algo][j->proto].defined) {
        s->hop = &t->hop[j->algo][j->proto];
        s->proto_ovh = 0;
        s->proto_eff = t->protocol[j->proto].bw_eff;
    }
    int on_node = j->nranks < t->ranks_per_node ? j->nranks : t->ranks_per_node;
    s->copy_us_B = 1 / (t->copy_GBps * 1e3);
    s->reduce_us_B = 1 / (t->reduce_GBps * 1e3);
    if (s->cpu) {
        double cores = t->cpu_cores;
        cpu_speeds(s, j, g, count_sim, on_node);
        /* spread evenly, a core has one rank or more; the ranks beyond
         * one a core pair up with the ranks of 2 * cores - on_node cores */
        s->on_node = on_node;
        s->per_core = on_node / cores;
        s->share = s->per_core > 1 ? 1 - fmax(0, 2 * cores - on_node) / on_node : 0;
    }
    int rc = sim_net_init(&s->nt, tot);
    if (rc)
        return rc;
    for (int c = 0; c < LC_COUNT; c++)
        for (uint32_t i = 0; i < n[c]; i++) {
            double cap = t->lc[c].bw_GBps * 1e3 * s->proto_eff;
            if (c == LC_NIC)
                cap /= nics;
            if (c == LC_CPU) /* in core-microseconds per microsecond */
                cap = t->cpu_cores;
            s->nt.links[s->base[c] + i].cap = cap;
            s->nt.links[s->base[c] + i].cls = c;
        }
    for (uint32_t r = 0; s->cpu && r < s->nR; r++) {
        s->nt.links[s->core0 + r].cap = 1; /* a rank runs on one core at a time */
        s->nt.links[s->core0 + r].cls = -1;
    }
    uint64_t sends = 0;
    for (uint64_t i = 0; i < g->nops; i++)
        sends += g->ops[i].kind == SOP_SEND;
    s->npairs = 1024;
    while (s->npairs < 2 * sends + 16 && s->npairs < (1ull << 40))
        s->npairs *= 2;
    s->pairs = calloc(s->npairs, sizeof *s->pairs);
    return s->pairs ? 0 : WEFT_ENOMEM;
}

static void teardown(sim *s)
{
    free(s->pl);
    free(s->rk);
    free(s->ev);
    free(s->msg);
    free(s->mfree);
    free(s->pairs);
    sim_net_free(&s->nt);
}

/* One simulation at `count`; fills time, bytes and utilisation. */
static int run_once(const sim_job *j, sim_prog *g, uint64_t count, sim_result *res, char *err,
                    size_t errlen)
{
    sim s;
    int rc = setup(&s, j, g, count);
    for (int r = 0; r < s.nreps && !rc; r++)
        rc = round_begin(&s, r, 0);
    while (!rc) {
        double tf = INFINITY;
        int64_t f = sim_net_next(&s.nt, &tf);
        if (f < 0 && s.nev == 0)
            break;
        s.events++;
        if (f >= 0 && (s.nev == 0 || tf <= s.ev[0].t)) {
            rc = flow_end(&s, (uint32_t)f, tf);
            continue;
        }
        sev e = ev_pop(&s);
        switch (e.type) {
        case EV_NET: rc = post_net(&s, (int)e.id, e.t); break;
        case EV_FSTART: rc = flow_start(&s, e.id, e.t); break;
        case EV_ARRIVE: rc = arrive(&s, e.id, e.t); break;
        default: rc = op_done(&s, (int)e.id, e.t); break;
        }
    }
    double T = 0;
    for (int r = 0; r < s.nreps && !rc; r++) {
        if (s.rk[r].round < s.rk[r].nrounds) {
            snprintf(err, errlen, "rank %d stuck in round %u of %u: the schedule deadlocks",
                     r, s.rk[r].round, s.rk[r].nrounds);
            rc = WEFT_EINVAL;
        }
        if (s.rk[r].t_done > T)
            T = s.rk[r].t_done;
    }
    if (!rc) {
        double mult = g->period ? (double)s.p / g->period : 1;
        res->time_us = T;
        for (int c = 0; c < LC_COUNT; c++) {
            double bytes = 0, cap = 0, umax = 0;
            int nlinks = 0;
            uint32_t end = c + 1 < LC_COUNT ? s.base[c + 1] : s.core0;
            for (uint32_t i = s.base[c]; i < end; i++) {
                net_link *l = &s.nt.links[i];
                if (l->cap <= 0)
                    continue;
                nlinks++;
                bytes += l->bytes;
                cap += l->cap;
                if (T > 0 && l->bytes / (l->cap * T) > umax)
                    umax = l->bytes / (l->cap * T);
            }
            res->bytes[c] = bytes * mult;
            res->util[c] = nlinks && T > 0 ? bytes / (cap * T) : -1;
            res->util_max[c] = nlinks ? umax : -1;
        }
        res->ops += g->nops;
        res->events += s.events;
    }
    teardown(&s);
    return rc;
}

double sim_bus_factor(weft_coll_kind k, int p)
{
    switch (k) {
    case WEFT_COLL_ALLREDUCE: return 2.0 * (p - 1) / p;
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_REDUCE_SCATTER:
    case WEFT_COLL_ALLTOALL: return (double)(p - 1) / p;
    default: return 1;
    }
}

static int sim_at(const sim_job *j, uint64_t count, int period, sim_result *res,
                  char *err, size_t errlen)
{
    sim_prog g;
    int rc = sim_prog_build(&g, j, count, period);
    if (rc)
        snprintf(err, errlen, "building the %s schedules failed (%d)", sim_algo_name(j->algo), rc);
    else
        rc = run_once(j, &g, count, res, err, errlen);
    if (!rc && g.max_rounds > res->max_rounds)
        res->max_rounds = g.max_rounds;
    sim_prog_free(&g);
    return rc;
}

static int run_job(const sim_job *j, sim_result *out, char *err, size_t errlen);

/* The generators learn which ranks share a node as the library does (from
 * host names); here the topology says it. */
int sim_run(const sim_job *job, sim_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!job->topo || job->nranks < 1 || job->esize == 0) {
        snprintf(err, errlen, "bad job");
        return WEFT_EINVAL;
    }
    if (job->algo < 0 || job->algo >= SIM_ALGO_COUNT || !sim_algo_has(job->algo, job->kind)) {
        snprintf(err, errlen, "%s has no %s schedule to simulate", sim_algo_name(job->algo),
                 weft_coll_name(job->kind));
        return WEFT_ENOTSUP;
    }
    if (job->host)
        return run_job(job, out, err, errlen);
    sim_job j = *job;
    int32_t *host = malloc((size_t)j.nranks * sizeof *host);
    if (!host)
        return WEFT_ENOMEM;
    for (int r = 0; r < j.nranks; r++) {
        sim_place pl;
        sim_topo_place(j.topo, j.nranks, r, &pl);
        host[r] = pl.node;
    }
    j.host = host;
    int rc = run_job(&j, out, err, errlen);
    free(host);
    return rc;
}

/* What simulating count elements costs: rank 0's ops times the ranks
 * simulated, weighted for ranks that talk to many peers at once (every flow
 * on a shared link is re-balanced when one starts or ends). */
static int work(const sim_job *j, uint64_t count, int reps, double *cost)
{
    uint32_t wide = 0;
    int64_t ops = sim_count_ops(j, count, &wide);
    if (ops < 0)
        return (int)ops;
    *cost = (double)ops * reps * (wide > 8 ? wide / 8.0 : 1.0);
    return 0;
}

/* The protocol and its chunk, for an algorithm with hop lines: the one
 * asked for, else the one NCCL's model says is fastest for this size. */
static void resolve_proto(sim_job *j)
{
    const sim_topo *t = j->topo;
    double best = 0, bytes = (double)j->count * j->esize, us;
    if (j->proto > 0 && !t->hop[j->algo][j->proto].defined)
        j->proto = 0;
    for (int pr = 1; j->proto == 0 && pr < SIM_PROTO_COUNT; pr++)
        if (sim_nccl_model(t, j->algo, pr, j->nranks, bytes, &us) == 0 && (!best || us < best))
            best = us;
    for (int pr = 1; j->proto == 0 && pr < SIM_PROTO_COUNT; pr++)
        if (sim_nccl_model(t, j->algo, pr, j->nranks, bytes, &us) == 0 && us == best)
            j->proto = pr;
    if (j->proto > 0 && !j->chunk_bytes && t->protocol[j->proto].chunk_bytes > 0)
        j->chunk_bytes = (uint64_t)t->protocol[j->proto].chunk_bytes;
    /* as NCCL, no more channels than chunks: a small call on one channel
     * does not wait for the slowest of several */
    if (!j->channels && j->proto > 0) {
        double c = j->chunk_bytes ? bytes / (double)j->chunk_bytes : t->channels;
        j->channels = c < 1 ? 1 : c < t->channels ? (int)c : t->channels;
    }
}

/* The job at counts c1 < c2 (both simulated), extended along the line
 * through them to the real count; *period is the fold of the c2 run. */
static int extrapolate(const sim_job *j, uint64_t count, uint64_t c1, uint64_t c2, int *period,
                       int *exact, uint64_t *dlen, sim_result *out, char *err, size_t errlen)
{
    sim_result r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    int p1 = sim_find_period(j, c1, j->esize, exact, dlen);
    int rc = sim_at(j, c1, p1, &r1, err, errlen);
    int p2 = rc ? 0 : sim_find_period(j, c2, j->esize, exact, dlen);
    if (!rc)
        rc = sim_at(j, c2, p2, &r2, err, errlen);
    if (rc)
        return rc;
    double k = (double)(count - c1) / (double)(c2 - c1);
    *out = r2;
    out->time_us = r1.time_us + k * (r2.time_us - r1.time_us);
    for (int c = 0; c < LC_COUNT; c++) {
        out->bytes[c] = r1.bytes[c] + k * (r2.bytes[c] - r1.bytes[c]);
        if (r2.util[c] >= 0 && out->time_us > 0 && r2.time_us > 0) {
            double scale = (out->bytes[c] / (r2.bytes[c] > 0 ? r2.bytes[c] : 1)) *
                           (r2.time_us / out->time_us);
            out->util[c] = r2.util[c] * scale;
            out->util_max[c] = r2.util_max[c] * scale;
        }
    }
    out->ops = r1.ops + r2.ops;
    out->events = r1.events + r2.events;
    out->extrapolated = 1;
    out->count_sim[0] = c1;
    out->count_sim[1] = c2;
    *period = p2;
    return 0;
}

/* What a simulated run comes to as a result: per call, with the
 * protocol's fixed cost, the fold and its error bound, and bandwidths as
 * nccl-tests reports them. */
static void finish(const sim_job *j, uint64_t count, int period, int exact, uint64_t dlen,
                   sim_result *out)
{
    if (j->calls > 1) {
        out->time_us /= j->calls;
        for (int c = 0; c < LC_COUNT; c++)
            out->bytes[c] /= j->calls;
    }
    out->proto = j->proto;
    if (j->proto > 0)
        out->time_us += j->topo->hop[j->algo][j->proto].base_us;
    out->fold = period;
    out->fold_exact = period && exact;
    if (period && !exact) {
        /* each round of a rep may be off by dlen bytes on its slowest link */
        double minbw = INFINITY;
        for (int c = 0; c < LC_COUNT; c++)
            if (j->topo->lc[c].bw_GBps > 0 && j->topo->lc[c].bw_GBps < minbw)
                minbw = j->topo->lc[c].bw_GBps;
        double rounds = out->max_rounds;
        out->fold_err_us = isinf(minbw) ? 0 : rounds * (double)dlen / (minbw * 1e3);
    }
    /* nccl-tests' size: the whole buffer, all ranks' blocks for the
     * collectives whose count is per rank */
    int blocks = j->kind == WEFT_COLL_ALLGATHER || j->kind == WEFT_COLL_REDUCE_SCATTER ||
                 j->kind == WEFT_COLL_ALLTOALL || j->kind == WEFT_COLL_GATHER ||
                 j->kind == WEFT_COLL_SCATTER;
    double size = (double)count * j->esize * (blocks ? j->nranks : 1);
    out->algbw_GBps = out->time_us > 0 ? size / (out->time_us * 1e3) : 0;
    out->busbw_GBps = out->algbw_GBps * sim_bus_factor(j->kind, j->nranks);
}

static int run_job(const sim_job *job, sim_result *out, char *err, size_t errlen)
{
    sim_job jj = *job;
    const sim_job *j = &jj;
    resolve_proto(&jj);
    uint64_t budget = j->op_budget ? j->op_budget : 1000000;
    uint64_t count = j->count, c1 = 0, c2 = 0;
    uint64_t chunk = j->chunk_bytes ? j->chunk_bytes : SCHED_DEFAULT_CHUNK;
    /* the symmetry, found where every ring block has elements */
    uint64_t x = 16 * chunk / j->esize;
    if (x < 4 * (uint64_t)j->nranks)
        x = 4 * (uint64_t)j->nranks;
    if (x > count)
        x = count;
    int exact = 0;
    uint64_t dlen = 0;
    int period = sim_find_period(j, x, j->esize, &exact, &dlen);
    int reps = period ? period : j->nranks;
    /* Double the count up to the real one while the work fits the budget.
     * Past it, simulate the last two counts that fit and extend the line
     * through them: a pipeline's steady state repeats chunk after chunk,
     * so its time is affine in the count. */
    double cost = 0;
    int rc = work(j, x, reps, &cost);
    if (rc) {
        snprintf(err, errlen, "%s: no %s schedule (%s)", sim_algo_name(j->algo),
                 weft_coll_name(j->kind), weft_strerror(rc));
        return rc;
    }
    /* a pipeline needs a few chunks to reach its steady state */
    uint64_t xmin = 16 * chunk / j->esize;
    while (x < count && cost > (double)budget && x / 2 >= xmin && x / 2 >= 64) {
        x /= 2;
        if ((rc = work(j, x, reps, &cost)))
            return rc;
    }
    if (x < count && cost > (double)budget) {
        c2 = x;
        c1 = x / 2;
    }
    while (!c2 && x < count) {
        uint64_t nx = 2 * x < count ? 2 * x : count;
        if ((rc = work(j, nx, reps, &cost)))
            return rc;
        if (cost > (double)budget) {
            c2 = x;
            c1 = x / 2;
        }
        x = nx;
    }
    /* The line only holds where every pipeline is made of whole chunks:
     * rank 0's op count must already grow linearly (the same increase
     * from c/2 to c as from c/4 to c/2, doubled, and not zero). Grow the
     * sizes until it does, past the budget if need be; a schedule whose
     * ops never grow (an unchunked ring) is then simulated at full size. */
    while (c2 && c2 < count / 2) {
        uint32_t w;
        int64_t o0 = sim_count_ops(j, c1 / 2, &w), o1 = sim_count_ops(j, c1, &w),
                o2 = sim_count_ops(j, c2, &w);
        double d1 = (double)(o1 - o0), d2 = (double)(o2 - o1);
        if (o0 < 0 || o1 < 0 || o2 < 0)
            return WEFT_EINVAL;
        if (d2 > 0 && fabs(d2 - 2 * d1) <= 0.02 * d2 + 2)
            break;
        c1 = c2;
        c2 *= 2;
    }
    if (c2 && (c2 >= count || !(c1 >= 1 && c1 < c2)))
        c2 = 0;
    if (!c2) {
        period = sim_find_period(j, count, j->esize, &exact, &dlen);
        rc = sim_at(j, count, period, out, err, errlen);
    } else {
        rc = extrapolate(j, count, c1, c2, &period, &exact, &dlen, out, err, errlen);
    }
    if (rc)
        return rc;
    finish(j, count, period, exact, dlen, out);
    return 0;
}
