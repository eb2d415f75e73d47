/* Costing schedules: constants, their parsing, and the walk. */
#include "coll/tune/cost.h"

#include "core/vec.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cost_default(cost_params *c) { cost_default_for(c, 1); }

void cost_default_for(cost_params *c, int shm)
{
    /* bench/calibrate.sh on the 2-core build machine, 8 B .. 2 MiB, under
     * load from other jobs (docs/TUNING.md); msg could not be measured
     * there (no third core) and alpha_inter/beta_inter are a 10 Gbit/s
     * TCP link's, not measured. Ranks on one host talk through shared
     * memory (transport/shm.h) unless WEFT_SHM=0, and then through TCP
     * over loopback: each has its own constants. */
    c->shm = shm;
    if (!shm) {
        c->alpha = 10e-6;
        c->alpha_over = 12e-6;
        c->msg = 2e-6;
        c->msg_over = 20e-6;
        c->beta = 8.4e-10;
    } else {
        c->alpha = 1.5e-6;
        c->alpha_over = 2.5e-6;
        c->msg = 0.5e-6;
        c->msg_over = 2.5e-6;
        c->beta = 1.25e-10;
    }
    c->gamma = 7.2e-11;
    c->alpha_inter = 60e-6;
    c->beta_inter = 1.0 / 1.1e9;
    c->alpha_wan = c->beta_wan = -1; /* the emulation's, or the tuner's default */
    c->cores = 0;
}

typedef struct {
    const char *name;
    size_t off;
} key;

static const key keys[] = {
    { "alpha", offsetof(cost_params, alpha) },
    { "alpha_over", offsetof(cost_params, alpha_over) },
    { "msg", offsetof(cost_params, msg) },
    { "msg_over", offsetof(cost_params, msg_over) },
    { "beta", offsetof(cost_params, beta) },
    { "gamma", offsetof(cost_params, gamma) },
    { "alpha_inter", offsetof(cost_params, alpha_inter) },
    { "beta_inter", offsetof(cost_params, beta_inter) },
    { "alpha_wan", offsetof(cost_params, alpha_wan) },
    { "beta_wan", offsetof(cost_params, beta_wan) },
};

static int is_sep(char ch)
{
    return ch == ',' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ';';
}

int cost_parse(cost_params *c, const char *s, const char **where)
{
    const char *p = s;
    while (p && *p) {
        if (is_sep(*p)) {
            p++;
            continue;
        }
        if (*p == '#') {
            while (*p && *p != '\n')
                p++;
            continue;
        }
        const char *start = p, *eq = p;
        while (*eq && *eq != '=' && !is_sep(*eq))
            eq++;
        if (*eq != '=')
            goto bad;
        size_t klen = (size_t)(eq - p);
        char *end;
        errno = 0;
        double v = strtod(eq + 1, &end);
        if (end == eq + 1 || errno || !(v >= 0) || v > 1e9 || (*end && !is_sep(*end) && *end != '#'))
            goto bad;
        if (klen == 5 && !strncmp(p, "cores", 5)) {
            if (v != (double)(int)v)
                goto bad;
            c->cores = (int)v;
        } else {
            size_t i;
            for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
                if (strlen(keys[i].name) == klen && !strncmp(p, keys[i].name, klen))
                    break;
            if (i == sizeof keys / sizeof keys[0])
                goto bad;
            *(double *)((char *)c + keys[i].off) = v;
        }
        p = end;
        continue;
    bad:
        if (where)
            *where = start;
        return WEFT_ECONFIG;
    }
    return 0;
}

int cost_format(const cost_params *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "alpha=%.6g,alpha_over=%.6g,msg=%.6g,msg_over=%.6g,beta=%.6g,gamma=%.6g,"
                     "alpha_inter=%.6g,beta_inter=%.6g,cores=%d",
                     c->alpha, c->alpha_over, c->msg, c->msg_over, c->beta, c->gamma,
                     c->alpha_inter, c->beta_inter, c->cores);
    /* unset wan constants are left out, so that the line parses back */
    if (n >= 0 && (size_t)n < cap && c->alpha_wan >= 0)
        n += snprintf(buf + n, cap - (size_t)n, ",alpha_wan=%.6g", c->alpha_wan);
    if (n >= 0 && (size_t)n < cap && c->beta_wan >= 0)
        n += snprintf(buf + n, cap - (size_t)n, ",beta_wan=%.6g", c->beta_wan);
    return n;
}

static void say(char *err, size_t cap, const char *src, const char *at)
{
    if (err && cap)
        snprintf(err, cap, "%s: cannot parse '%.*s' (keys: alpha alpha_over msg msg_over beta gamma "
                           "alpha_inter beta_inter alpha_wan beta_wan cores)",
                 src, at ? (int)strcspn(at, ", \t\n") : 0, at ? at : "");
}

/* Defaults for shm, then the file at path, then the text s (either may be
 * empty). */
static int cost_load(cost_params *c, int shm, const char *path, const char *s, int nranks,
                     char *err, size_t cap)
{
    const char *at = NULL;
    /* sysconf reads /sys each time: skip it when no machine has fewer cores */
    long n = nranks > 0 && nranks <= 2 ? 2 : sysconf(_SC_NPROCESSORS_ONLN);
    cost_default_for(c, shm);
    c->cores = n > 0 && n < 1 << 20 ? (int)n : 0;
    if (err && cap)
        err[0] = 0;
    if (path && *path) {
        char text[4096];
        FILE *f = fopen(path, "r");
        if (!f) {
            if (err && cap)
                snprintf(err, cap, "WEFT_TUNE_FILE: cannot open %s", path);
            return WEFT_ECONFIG;
        }
        size_t len = fread(text, 1, sizeof text - 1, f);
        int toolong = !feof(f) && fgetc(f) != EOF;
        fclose(f);
        text[len] = 0;
        if (toolong) {
            if (err && cap)
                snprintf(err, cap, "WEFT_TUNE_FILE: %s is longer than %zu bytes", path,
                         sizeof text - 1);
            return WEFT_ECONFIG;
        }
        if (cost_parse(c, text, &at)) {
            say(err, cap, path, at);
            return WEFT_ECONFIG;
        }
    }
    if (s && cost_parse(c, s, &at)) {
        say(err, cap, "WEFT_TUNE", at);
        return WEFT_ECONFIG;
    }
    return 0;
}

int cost_from_params(cost_params *c, const param_set *p, int nranks, char *err, size_t cap)
{
    return cost_load(c, p->shm, p->tune_file, p->tune, nranks, err, cap);
}

int cost_from_env(cost_params *c, char *err, size_t cap)
{
    return cost_from_env_for(c, 0, err, cap);
}

int cost_from_env_for(cost_params *c, int nranks, char *err, size_t cap)
{
    const char *path = NULL, *s = NULL;
    int shm = 1, rc;
    char scratch[8];
    if (!err || !cap) {
        err = scratch;
        cap = sizeof scratch;
    }
    if ((rc = param_read_int(PARAM_shm, &shm, err, cap)) ||
        (rc = param_read_str(PARAM_tune_file, &path, err, cap)) ||
        (rc = param_read_str(PARAM_tune, &s, err, cap))) {
        cost_default_for(c, shm);
        return rc;
    }
    return cost_load(c, shm, path, s, nranks, err, cap);
}

/* The link from a to b: 0 inside a host, LINK_INTER between hosts of a
 * cluster, LINK_WAN between clusters. */
enum { LINK_HOST, LINK_INTER, LINK_WAN };

static int link_of(const cost_layout *l, int a, int b)
{
    if (b < 0 || b >= l->nranks)
        return LINK_HOST;
    if (l->cluster && l->cluster[a] != l->cluster[b])
        return LINK_WAN;
    return l->host && l->host[a] != l->host[b] ? LINK_INTER : LINK_HOST;
}

/* Unset wan constants (no tuner filled them in) price the WAN as a link
 * between hosts. */
static double alpha_of(const cost_params *c, int link)
{
    return link == LINK_WAN && c->alpha_wan >= 0 ? c->alpha_wan : c->alpha_inter;
}

/* A message between hosts waits in socket buffers of megabytes. Up to
 * about a pipelined block the kernel and the receiver copy it while it is
 * still in the cache; beyond, every byte is written to memory and read
 * back: bench/peers_tcp.sh's socket copy through 64 MiB buffers ran at 0.4
 * to 0.7 times the speed of the copy through one 256 KiB buffer in the
 * same runs. So the bytes of one message beyond COST_CACHE_MSG cost
 * COST_MEM_FACTOR times beta_inter (the 64 KiB wavefronts of sched_ring.c
 * and sched_hier.c never pay it; blocks of megabytes do). Shared memory
 * moves large messages in small pieces or by single copy, so links inside
 * a host have no such term. */
#define COST_CACHE_MSG (256.0 * 1024)
#define COST_MEM_FACTOR 2.0

static double inter_wire(const cost_params *c, int link, uint64_t len)
{
    double n = (double)len, over = n > COST_CACHE_MSG ? n - COST_CACHE_MSG : 0;
    /* a WAN's rate, far below memory's, hides the copy: bytes at beta_wan */
    if (link == LINK_WAN && c->beta_wan >= 0)
        return n * c->beta_wan;
    return (n + (COST_MEM_FACTOR - 1) * over) * c->beta_inter;
}

/* Over TCP a message that continues a stream (its sender sent to the same
 * rank earlier in this round or in its previous round, as every round of
 * a pipeline does) finds the connection's window open and the receiver
 * polling, the previous one still draining: its latency overlaps its
 * transfer, so it costs the longer of the two, not their sum. A message
 * that starts a stream pays both; small messages, whose transfer is
 * shorter than the latency, pay the latency either way. The walk of one
 * rank (cost_walk) applies this per round: a round whose sends between
 * hosts all go to ranks it sent to in its previous round. */
#define STREAM_PEERS 16 /* inter-host peers of a round remembered */

typedef struct {
    int32_t peer[STREAM_PEERS];
    int n; /* -1: more than STREAM_PEERS */
} peer_set;

static int peer_in(const peer_set *s, int32_t q)
{
    for (int i = 0; i < s->n; i++)
        if (s->peer[i] == q)
            return 1;
    return 0;
}

static void peer_add(peer_set *s, int32_t q)
{
    if (s->n < 0 || peer_in(s, q))
        return;
    if (s->n == STREAM_PEERS)
        s->n = -1;
    else
        s->peer[s->n++] = q;
}

void cost_walk(const weft_sched *s, const cost_params *c, const cost_layout *l,
               int rank, int over, cost_tally *t)
{
    memset(t, 0, sizeof *t);
    peer_set prev = { .n = 0 }, cur;
    uint32_t i = 0;
    for (uint32_t k = 0; k < s->nrounds; k++) {
        uint64_t si = 0, ri = 0, se = 0, re = 0, red = 0;
        uint32_t nsend = 0, nrecv = 0;
        double we = 0, wr = 0; /* seconds on the wire between hosts, each way */
        int stream = 1, wan = 0;
        cur.n = 0;
        for (; i < s->round_end[k]; i++) {
            const sched_op *o = &s->ops[i];
            int link = o->kind <= SOP_RECV_REDUCE ? link_of(l, rank, o->peer) : LINK_HOST;
            int inter = link != LINK_HOST;
            wan |= link == LINK_WAN;
            switch (o->kind) {
            case SOP_SEND:
                nsend++;
                *(inter ? &se : &si) += o->len;
                if (inter) {
                    we += inter_wire(c, link, o->len);
                    stream &= prev.n >= 0 && peer_in(&prev, o->peer);
                    peer_add(&cur, o->peer);
                }
                break;
            case SOP_RECV_REDUCE:
                red += o->len;
                /* fall through */
            case SOP_RECV:
                nrecv++;
                *(inter ? &re : &ri) += o->len;
                if (inter)
                    wr += inter_wire(c, link, o->len);
                break;
            case SOP_REDUCE:
                red += o->len;
                break;
            default:
                break;
            }
        }
        uint32_t nmsg = nsend > nrecv ? nsend : nrecv;
        double bytes = (double)(si > ri ? si : ri) * c->beta + (double)red * c->gamma;
        double lat = 0, wire = we > wr ? we : wr;
        if (nmsg) {
            lat = wan ? alpha_of(c, LINK_WAN) : se || re ? c->alpha_inter
                                                : over ? c->alpha_over : c->alpha;
            lat += (double)(nmsg - 1) * (over ? c->msg_over : c->msg);
            t->rounds++;
            prev = cur;
        }
        t->msgs += nsend + nrecv;
        t->sent += si + se;
        t->recvd += ri + re;
        t->sent_inter += se;
        t->wire_inter += we;
        t->reduced += red;
        t->work += bytes;
        if (se && stream)
            t->time += bytes + (lat > wire ? lat : wire);
        else
            t->time += lat + bytes + wire;
    }
}

/* Most ops of all ranks' schedules held at once (about 40 bytes each). */
#define SIM_MAX_OPS (1u << 21)

/* Arrival times of the messages from one rank to another, in send order. */
typedef struct {
    double *t;
    uint32_t n, cap, next;
    uint32_t last; /* the sender's round of the latest message, plus one */
} lane;

static int lane_push(lane *q, double t)
{
    int rc = VEC_RESERVE(q->t, q->cap, (size_t)q->n + 1);
    if (rc)
        return rc;
    q->t[q->n++] = t;
    return 0;
}

/* The lanes of the pairs that talk, and nothing for those that do not
 * (a ring's p of p*p): the lanes from rank r are lane[first[r] ..
 * first[r+1]), to the ranks in peer[] of the same index, ascending. */
typedef struct {
    lane *lane;
    int32_t *peer;
    uint32_t *first;
    uint32_t n;
} lane_set;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The lane from a to b; NULL when a never sends to b. */
static lane *lane_of(const lane_set *ls, int a, int32_t b)
{
    uint32_t lo = ls->first[a], hi = ls->first[a + 1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ls->peer[mid] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ls->first[a + 1] && ls->peer[lo] == b ? &ls->lane[lo] : NULL;
}

static void lanes_free(lane_set *ls)
{
    for (uint32_t i = 0; ls->lane && i < ls->n; i++)
        free(ls->lane[i].t);
    free(ls->lane);
    free(ls->peer);
    free(ls->first);
}

typedef struct {
    weft_sched s;
    uint32_t round, op; /* next round; its first op */
    int posted;         /* this round's sends are in the lanes */
    double start, send_end;
    int over;
} rank_state;

static int lanes_make(lane_set *ls, const rank_state *rs, int p)
{
    uint64_t sends = 0;
    memset(ls, 0, sizeof *ls);
    for (int r = 0; r < p; r++)
        for (uint32_t i = 0; i < rs[r].s.nops; i++)
            sends += rs[r].s.ops[i].kind == SOP_SEND;
    if (sends > UINT32_MAX)
        return WEFT_ENOMEM;
    ls->first = malloc(((size_t)p + 1) * sizeof *ls->first);
    ls->peer = malloc((sends ? (size_t)sends : 1) * sizeof *ls->peer);
    if (!ls->first || !ls->peer)
        return WEFT_ENOMEM;
    for (int r = 0; r < p; r++) {
        uint32_t from = ls->n, k = from;
        ls->first[r] = from;
        for (uint32_t i = 0; i < rs[r].s.nops; i++)
            if (rs[r].s.ops[i].kind == SOP_SEND)
                ls->peer[k++] = rs[r].s.ops[i].peer;
        qsort(ls->peer + from, k - from, sizeof *ls->peer, cmp_i32);
        for (uint32_t i = from; i < k; i++) /* each peer once */
            if (i == from || ls->peer[i] != ls->peer[ls->n - 1])
                ls->peer[ls->n++] = ls->peer[i];
    }
    ls->first[p] = ls->n;
    ls->lane = calloc(ls->n ? ls->n : 1, sizeof *ls->lane);
    return ls->lane ? 0 : WEFT_ENOMEM;
}

/* Runs every rank's schedule against the others': a round starts when the
 * rank's previous round ended; its sends leave one after another (msg and
 * bytes·β each) and arrive α later; it ends when its last send has left,
 * its last receive has arrived and been taken in (receives also queue on
 * the link), and its reductions are done. The slowest rank's end is the
 * time. */
static int simulate(const cost_params *c, const cost_layout *l, rank_state *rs,
                    const lane_set *lanes, double *end)
{
    int p = l->nranks, left = p;
    *end = 0;
    while (left > 0) {
        int progress = 0;
        for (int r = 0; r < p; r++) {
            rank_state *k = &rs[r];
            while (k->round < k->s.nrounds) {
                uint32_t b = k->op, e = k->s.round_end[k->round];
                double alpha = k->over ? c->alpha_over : c->alpha;
                double msg = k->over ? c->msg_over : c->msg;
                if (!k->posted) {
                    double t = k->start, red = 0;
                    uint32_t nsend = 0;
                    for (uint32_t i = b; i < e; i++) {
                        const sched_op *o = &k->s.ops[i];
                        if (o->kind == SOP_REDUCE)
                            red += (double)o->len * c->gamma;
                    }
                    t += red; /* local ops run first */
                    for (uint32_t i = b; i < e; i++) {
                        const sched_op *o = &k->s.ops[i];
                        if (o->kind != SOP_SEND)
                            continue;
                        int link = link_of(l, r, o->peer);
                        double a_link = alpha_of(c, link);
                        lane *q = lane_of(lanes, r, o->peer);
                        double from = t, at;
                        t += (nsend++ ? msg : 0) +
                             (link ? inter_wire(c, link, o->len) : (double)o->len * c->beta);
                        if (!link)
                            at = t + alpha;
                        else if (q->last && q->last >= k->round) /* continues a stream */
                            at = t > from + a_link ? t : from + a_link;
                        else
                            at = t + a_link;
                        q->last = k->round + 1;
                        if (lane_push(q, at))
                            return WEFT_ENOMEM;
                    }
                    k->send_end = t;
                    k->posted = 1;
                    progress = 1;
                }
                /* take one arrival per receive; give them back if any is missing */
                uint32_t i;
                for (i = b; i < e; i++) {
                    const sched_op *o = &k->s.ops[i];
                    if (o->kind != SOP_RECV && o->kind != SOP_RECV_REDUCE)
                        continue;
                    lane *q = lane_of(lanes, o->peer, r);
                    if (!q || q->next >= q->n)
                        break;
                    q->next++;
                }
                for (uint32_t j = b; j < i; j++) {
                    const sched_op *o = &k->s.ops[j];
                    if (o->kind == SOP_RECV || o->kind == SOP_RECV_REDUCE)
                        lane_of(lanes, o->peer, r)->next--;
                }
                if (i < e)
                    break;
                double t = k->send_end, link = k->start, red = 0;
                uint32_t nrecv = 0;
                for (uint32_t j = b; j < e; j++) {
                    const sched_op *o = &k->s.ops[j];
                    if (o->kind != SOP_RECV && o->kind != SOP_RECV_REDUCE)
                        continue;
                    lane *q = lane_of(lanes, o->peer, r);
                    double at = q->t[q->next++];
                    int lk = link_of(l, r, o->peer);
                    link += (nrecv++ ? msg : 0) +
                            (lk ? inter_wire(c, lk, o->len) : (double)o->len * c->beta);
                    if (at > t)
                        t = at;
                    if (o->kind == SOP_RECV_REDUCE)
                        red += (double)o->len * c->gamma;
                }
                if (link > t)
                    t = link;
                t += red;
                k->start = t;
                k->op = e;
                k->round++;
                k->posted = 0;
                progress = 1;
                if (k->round == k->s.nrounds) {
                    left--;
                    if (t > *end)
                        *end = t;
                }
            }
        }
        if (!progress)
            return WEFT_EINVAL; /* schedules that never match up */
    }
    return 0;
}

int cost_predict(const cost_params *c, const cost_layout *l, weft_algo a,
                 weft_coll_kind kind, uint64_t bytes, uint32_t esize, int max_ranks,
                 double *seconds)
{
    int p = l->nranks, nh = l->host && l->nhosts > 0 ? l->nhosts : 1;
    if (p < 1 || esize == 0)
        return WEFT_EINVAL;
    double *host = calloc((size_t)nh * 4, sizeof *host);
    rank_state *rs = calloc((size_t)p, sizeof *rs);
    lane_set lanes = { 0 };
    int rc = host && rs ? 0 : WEFT_ENOMEM;
    /* per host: ranks, ranks costed, their work, their seconds on the uplink */
    double *ranks = host, *seen = host + nh, *work = host + 2 * nh, *out = host + 3 * nh;
    sched_params sp = { .kind = kind, .nranks = p, .root = 0, .esize = esize,
                        .count = bytes / esize, .host = l->host, .cluster = l->cluster };
    double path = 0, worst;
    for (int r = 0; r < p && !rc; r++)
        ranks[l->host ? l->host[r] : 0] += 1;
    int sim = p <= max_ranks;
    if (sim && !rc) {
        /* running every rank at once holds every schedule: bound the memory */
        weft_sched probe;
        sched_init(&probe);
        sp.rank = 0;
        rc = sched_build(&probe, a, &sp);
        if ((uint64_t)probe.nops * (uint64_t)p > SIM_MAX_OPS)
            sim = 0;
        sched_free(&probe);
    }
    /* Walked alone, a rank of a chain (the ring) that holds no element of
     * a tiny message skips the rounds it only waits in: cost at least one
     * element per rank so that every rank keeps all its rounds. */
    if (!sim && sp.count < (uint64_t)p)
        sp.count = (uint64_t)p;
    for (int r = 0; r < p && !rc; r++) {
        int h = l->host ? l->host[r] : 0;
        cost_tally t;
        /* too many ranks to run them all: the ranks that fold, lead and
         * close trees, each on its own, and the hosts' totals from them */
        if (!sim && r > 1 && r != p / 2 && r != p - 1)
            continue;
        sched_init(&rs[r].s);
        sp.rank = r;
        if ((rc = sched_build(&rs[r].s, a, &sp)))
            break;
        rs[r].over = c->cores > 0 && ranks[h] > c->cores;
        cost_walk(&rs[r].s, c, l, r, rs[r].over, &t);
        seen[h] += 1;
        work[h] += t.work;
        out[h] += t.wire_inter;
        if (!sim) {
            if (t.time > path)
                path = t.time;
            sched_free(&rs[r].s);
        }
    }
    if (!rc && sim)
        if (!(rc = lanes_make(&lanes, rs, p)))
            rc = simulate(c, l, rs, &lanes, &path);
    worst = path;
    for (int h = 0; h < nh && !rc; h++) {
        if (seen[h] > 0 && seen[h] < ranks[h]) { /* a few walked: scale up */
            work[h] *= ranks[h] / seen[h];
            out[h] *= ranks[h] / seen[h];
        }
        /* more ranks than cores: the host's cores share all their work */
        if (c->cores > 0 && ranks[h] > c->cores && work[h] / c->cores > worst)
            worst = work[h] / c->cores;
        /* the host's uplink carries all its ranks' traffic to other hosts */
        if (out[h] > worst)
            worst = out[h];
    }
    for (int r = 0; rs && r < p; r++)
        sched_free(&rs[r].s); /* zeroed by calloc when never built */
    lanes_free(&lanes);
    free(rs);
    free(host);
    if (!rc)
        *seconds = worst + 1e-3 * path;
    return rc;
}

/* Each round of one rank ends no sooner than its start plus the longer of
 * its sends one after another (after its local reductions) and its
 * receives taken in one after another, plus the reductions of what it
 * received: simulate() never ends a round earlier, and cost_walk charges a
 * round at least that much (inside a host, where no stream overlaps). So
 * the sum over rank 0's rounds is at most cost_predict's answer, for the
 * price of one rank's schedule instead of every rank's. */
int cost_floor(const cost_params *c, const cost_layout *l, weft_algo a, weft_coll_kind kind,
               uint64_t bytes, uint32_t esize, int max_ranks, double *seconds)
{
    int p = l->nranks;
    if (p < 1 || esize == 0)
        return WEFT_EINVAL;
    for (int r = 1; l->host && r < p; r++)
        if (l->host[r] != l->host[0])
            return WEFT_ENOTSUP; /* links between hosts: streams overlap */
    if (l->cluster)
        return WEFT_ENOTSUP;
    sched_params sp = { .kind = kind, .nranks = p, .root = 0, .rank = 0, .esize = esize,
                        .count = bytes / esize, .host = l->host, .cluster = l->cluster };
    weft_sched s;
    sched_init(&s);
    int rc = sched_build(&s, a, &sp);
    /* the count cost_predict costs when it walks ranks alone */
    if (!rc && (p > max_ranks || (uint64_t)s.nops * (uint64_t)p > SIM_MAX_OPS) &&
        sp.count < (uint64_t)p) {
        sched_free(&s);
        sched_init(&s);
        sp.count = (uint64_t)p;
        rc = sched_build(&s, a, &sp);
    }
    if (rc) {
        sched_free(&s);
        return rc;
    }
    int over = c->cores > 0 && p > c->cores;
    double msg = over ? c->msg_over : c->msg, total = 0;
    uint32_t i = 0;
    for (uint32_t k = 0; k < s.nrounds; k++) {
        double send = 0, recv = 0, red = 0;
        uint32_t nsend = 0, nrecv = 0;
        for (; i < s.round_end[k]; i++) {
            const sched_op *o = &s.ops[i];
            switch (o->kind) {
            case SOP_SEND:
                send += (nsend++ ? msg : 0) + (double)o->len * c->beta;
                break;
            case SOP_RECV_REDUCE:
                red += (double)o->len * c->gamma;
                /* fall through */
            case SOP_RECV:
                recv += (nrecv++ ? msg : 0) + (double)o->len * c->beta;
                break;
            case SOP_REDUCE:
                send += (double)o->len * c->gamma;
                break;
            default:
                break;
            }
        }
        total += (send > recv ? send : recv) + red;
    }
    sched_free(&s);
    *seconds = total;
    return 0;
}
