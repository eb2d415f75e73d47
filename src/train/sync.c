/* Sync modes other than full sync (docs/TRAINING.md). In the first three
 * each rank trains on its own part of every global batch with its own
 * optimiser, exchanging no gradients, and the ranks' models are pulled
 * together now and then; the last averages gradients with a delay.
 *
 *   local:H   every H steps the parameters are averaged (local SGD)
 *   diloco:H  every H steps the averaged pseudo-gradient theta_old - theta
 *             drives an outer SGD step (Nesterov momentum 0.9, lr 0.7)
 *   gossip    every step a rank averages with one peer on the one-peer
 *             exponential graph: at step t it sends to r + 2^k and receives
 *             from r - 2^k (k = t mod ceil(log2 p)); each round is doubly
 *             stochastic, and for p a power of two log2 p rounds give the
 *             exact average.
 *   stale:s   gradients are averaged every step, but a step applies the
 *             average of the gradients of s steps before, whose all-reduce
 *             has been running in the background meanwhile: a rank may run
 *             at most s steps ahead of the slowest (bounded staleness);
 *             no gradient is dropped. stale:0 is full sync.
 *   backup:b  each step averages the gradients of the first N - b ranks
 *             to arrive and drops the rest (sync_backup.c).
 * DiLoCo compressed or across clusters, and streaming DiLoCo, take their
 * outer steps in sync_outer.c. */
#include "sync_backup.h"
#include "sync_outer.h"

#include <stdlib.h>
#include <string.h>

struct weft_sync {
    weft_comm *comm;
    weft_model *model;
    weft_sync_config cfg;
    float *anchor, *velocity; /* diloco: theta_old and the outer momentum */
    float *buf;               /* a peer's parameters, or the pseudo-gradient */
    long steps;
    int rounds;               /* gossip: ceil(log2 p) */
    uint64_t bytes;
    float **slot;             /* stale: s + 1 gradient copies in flight */
    weft_request **req;
    long pushed, popped;
    backup *bk;
    outer_sync *outer;        /* streaming, hier, compressed diloco */
};

static int uses_outer(const weft_sync_config *c)
{
    return c->mode == WEFT_SYNC_STREAMING ||
           (c->mode == WEFT_SYNC_DILOCO && (c->hier || c->compressed));
}

/* "H:F[:T]": F fragments, each synced every H steps and staggered by H/F,
 * reductions T steps in flight (at most H/F, so that one fragment's lands
 * before the next one's starts). */
static int parse_streaming(const char *s, weft_sync_config *c)
{
    char *end;
    long h = strtol(s, &end, 10), f, t = 1;
    if (end == s || *end != ':' || h < 1 || h > 1000000)
        return WEFT_EINVAL;
    s = end + 1;
    f = strtol(s, &end, 10);
    if (end == s || f < 1 || f > h || f > 4096)
        return WEFT_EINVAL;
    if (*end == ':') {
        s = end + 1;
        t = strtol(s, &end, 10);
        if (end == s || t < 0)
            return WEFT_EINVAL;
    }
    if (*end || t > h)
        return WEFT_EINVAL;
    c->mode = WEFT_SYNC_STREAMING;
    c->period = (int)h;
    c->fragments = (int)f;
    c->overlap = (int)t;
    return 0;
}

int weft_sync_parse(const char *s, weft_sync_config *c)
{
    char *end;
    long h = 0;
    if (!s || !c)
        return WEFT_EINVAL;
    memset(c, 0, sizeof *c);
    c->outer_lr = 0.7f;
    c->outer_momentum = 0.9f;
    c->fragments = 1;
    c->mix = 0.5f;
    if (strncmp(s, "hier:full/", 10) == 0) {
        int rc = weft_sync_parse(s + 10, c);
        if (rc || (c->mode != WEFT_SYNC_DILOCO && c->mode != WEFT_SYNC_STREAMING) || c->hier) {
            memset(c, 0, sizeof *c);
            return WEFT_EINVAL;
        }
        c->hier = 1;
        return 0;
    }
    if (strncmp(s, "streaming:", 10) == 0)
        return parse_streaming(s + 10, c);
    if (strcmp(s, "full") == 0) {
        c->mode = WEFT_SYNC_FULL;
        return 0;
    }
    if (strcmp(s, "gossip") == 0) {
        c->mode = WEFT_SYNC_GOSSIP;
        c->period = 1;
        return 0;
    }
    if (strncmp(s, "local:", 6) == 0) {
        c->mode = WEFT_SYNC_LOCAL;
        s += 6;
    } else if (strncmp(s, "diloco:", 7) == 0) {
        c->mode = WEFT_SYNC_DILOCO;
        s += 7;
    } else if (strncmp(s, "stale:", 6) == 0 || strncmp(s, "backup:", 7) == 0) {
        c->mode = s[0] == 's' ? WEFT_SYNC_STALE : WEFT_SYNC_BACKUP;
        s += s[0] == 's' ? 6 : 7;
        h = strtol(s, &end, 10);
        if (end == s || *end || h < 0 || h > (c->mode == WEFT_SYNC_STALE ? 64 : 65535))
            return WEFT_EINVAL;
        c->period = (int)h;
        return 0;
    } else {
        return WEFT_EINVAL;
    }
    h = strtol(s, &end, 10);
    if (end == s || *end || h < 1 || h > 1000000)
        return WEFT_EINVAL;
    c->period = (int)h;
    return 0;
}

void weft_sync_destroy(weft_sync *s)
{
    if (!s)
        return;
    train_backup_destroy(s->bk);
    outer_destroy(s->outer);
    free(s->anchor);
    free(s->velocity);
    free(s->buf);
    if (s->slot) {
        for (int i = 0; i <= s->cfg.period; i++) {
            if (s->req && s->req[i])
                weft_wait(s->req[i]);
            free(s->slot[i]);
        }
    }
    free(s->slot);
    free(s->req);
    free(s);
}

int weft_sync_create(weft_sync **out, weft_comm *c, weft_model *m, const weft_sync_config *cfg)
{
    weft_sync *s;
    size_t n;
    float *p;
    int rc;
    int zero_ok = cfg && (cfg->mode == WEFT_SYNC_STALE || cfg->mode == WEFT_SYNC_BACKUP);
    if (!out || !c || !m || !cfg || cfg->mode < WEFT_SYNC_LOCAL || cfg->mode > WEFT_SYNC_STREAMING ||
        cfg->period < (zero_ok ? 0 : 1) ||
        (cfg->mode == WEFT_SYNC_BACKUP && cfg->period >= weft_comm_size(c)))
        return WEFT_EINVAL;
    *out = NULL;
    if (!(s = calloc(1, sizeof *s)))
        return WEFT_ENOMEM;
    s->comm = c;
    s->model = m;
    s->cfg = *cfg;
    p = weft_model_params(m, &n);
    while ((1 << s->rounds) < weft_comm_size(c))
        s->rounds++;
    s->buf = malloc((cfg->mode == WEFT_SYNC_BACKUP ? 1 : n) * sizeof *s->buf);
    if (cfg->mode == WEFT_SYNC_STALE) {
        s->slot = calloc((size_t)cfg->period + 1, sizeof *s->slot);
        s->req = calloc((size_t)cfg->period + 1, sizeof *s->req);
        if (!s->slot || !s->req) {
            weft_sync_destroy(s);
            return WEFT_ENOMEM;
        }
        for (int i = 0; i <= cfg->period; i++)
            if (!(s->slot[i] = malloc(n * sizeof(float)))) {
                weft_sync_destroy(s);
                return WEFT_ENOMEM;
            }
    }
    if (cfg->mode == WEFT_SYNC_DILOCO && !uses_outer(cfg)) {
        s->anchor = malloc(n * sizeof *s->anchor);
        s->velocity = calloc(n, sizeof *s->velocity);
    }
    if (!s->buf || (s->cfg.mode == WEFT_SYNC_DILOCO && !uses_outer(cfg) &&
                    (!s->anchor || !s->velocity))) {
        weft_sync_destroy(s);
        return WEFT_ENOMEM;
    }
    /* one starting point */
    if ((rc = weft_broadcast(c, p, n, WEFT_F32, 0))) {
        weft_sync_destroy(s);
        return rc;
    }
    if (s->anchor)
        memcpy(s->anchor, p, n * sizeof *p);
    if (uses_outer(cfg) && (rc = outer_create(&s->outer, c, m, cfg))) {
        weft_sync_destroy(s);
        return rc;
    }
    if (cfg->mode == WEFT_SYNC_BACKUP && (rc = train_backup_create(&s->bk, c, m, cfg->period))) {
        weft_sync_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int average(weft_sync *s, float *x, size_t n)
{
    s->bytes += n * sizeof *x;
    return weft_allreduce(s->comm, x, x, n, WEFT_F32, WEFT_AVG);
}

static int outer_step(weft_sync *s, float *p, size_t n)
{
    float mu = s->cfg.outer_momentum, lr = s->cfg.outer_lr;
    float *d = s->buf, *v = s->velocity, *a = s->anchor;
    int rc;
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] - p[i];
    if ((rc = average(s, d, n)))
        return rc;
    /* torch.optim.SGD(nesterov=True) on the pseudo-gradient d */
    for (size_t i = 0; i < n; i++) {
        v[i] = mu * v[i] + d[i];
        a[i] -= lr * (d[i] + mu * v[i]);
    }
    memcpy(p, a, n * sizeof *p);
    return 0;
}

/* One round on the exponential graph. Blocking sends cannot all go first
 * (a ring of rendezvous would wait forever), so in each cycle of the shift
 * its smallest rank sends first and the others receive first. */
static int gossip_round(weft_sync *s, float *p, size_t n)
{
    int r = weft_comm_rank(s->comm), w = weft_comm_size(s->comm), rc;
    int k = (int)(s->steps % s->rounds), shift = (1 << k) % w;
    int to = (r + shift) % w, from = (r - shift + w) % w;
    int g = w, b = shift;
    while (b) { /* gcd: the shift splits the ranks into g cycles */
        int t = g % b;
        g = b;
        b = t;
    }
    if (r < g) {
        if ((rc = weft_send(s->comm, p, n, WEFT_F32, to)) ||
            (rc = weft_recv(s->comm, s->buf, n, WEFT_F32, from)))
            return rc;
    } else {
        if ((rc = weft_recv(s->comm, s->buf, n, WEFT_F32, from)) ||
            (rc = weft_send(s->comm, p, n, WEFT_F32, to)))
            return rc;
    }
    s->bytes += n * sizeof *p;
    for (size_t i = 0; i < n; i++)
        p[i] = 0.5f * (p[i] + s->buf[i]);
    return 0;
}

int weft_sync_after_step(weft_sync *s)
{
    size_t n;
    float *p;
    int rc = 0;
    if (!s)
        return WEFT_EINVAL;
    p = weft_model_params(s->model, &n);
    s->steps++;
    if (s->outer)
        return outer_after_step(s->outer, s->steps);
    switch (s->cfg.mode) {
    case WEFT_SYNC_LOCAL:
        if (s->steps % s->cfg.period == 0)
            rc = average(s, p, n);
        break;
    case WEFT_SYNC_DILOCO:
        if (s->steps % s->cfg.period == 0)
            rc = outer_step(s, p, n);
        break;
    case WEFT_SYNC_STALE:
    case WEFT_SYNC_BACKUP:
    case WEFT_SYNC_STREAMING:
        break;
    case WEFT_SYNC_GOSSIP:
        if (weft_comm_size(s->comm) > 1)
            rc = gossip_round(s, p, (size_t)n);
        break;
    }
    return rc;
}

int weft_sync_finish(weft_sync *s)
{
    size_t n;
    float *p;
    if (!s)
        return WEFT_EINVAL;
    p = weft_model_params(s->model, &n);
    if (s->cfg.mode == WEFT_SYNC_BACKUP)
        return train_backup_finish(s->bk);
    if (s->outer)
        return outer_finish(s->outer, s->steps);
    if (s->cfg.mode == WEFT_SYNC_DILOCO)
        return s->steps % s->cfg.period ? outer_step(s, p, n) : 0;
    if (s->cfg.mode == WEFT_SYNC_STALE ||
        (s->cfg.mode == WEFT_SYNC_LOCAL && s->steps % s->cfg.period == 0))
        return 0;
    return average(s, p, n);
}

/* The oldest gradient average in flight, into the model's gradients. */
static int stale_pop(weft_sync *s, float *g, size_t n)
{
    int i = (int)(s->popped % (s->cfg.period + 1));
    int rc = weft_wait(s->req[i]);
    s->req[i] = NULL;
    s->popped++;
    if (rc == 0)
        memcpy(g, s->slot[i], n * sizeof *g);
    return rc;
}

int weft_sync_push_grads(weft_sync *s, float share, int *ready)
{
    size_t n;
    float *g;
    int i, rc;
    if (!s || !ready || s->cfg.mode != WEFT_SYNC_STALE)
        return WEFT_EINVAL;
    *ready = 0;
    g = weft_model_grads(s->model, &n);
    i = (int)(s->pushed % (s->cfg.period + 1));
    for (size_t k = 0; k < n; k++)
        s->slot[i][k] = g[k] * share;
    if ((rc = weft_iallreduce(s->comm, s->slot[i], s->slot[i], n, WEFT_F32, WEFT_AVG,
                              &s->req[i])))
        return rc;
    s->pushed++;
    s->bytes += n * sizeof *g;
    if (s->pushed - s->popped <= s->cfg.period)
        return 0;
    *ready = 1;
    return stale_pop(s, g, n);
}

int weft_sync_pop_grads(weft_sync *s, int *ready)
{
    size_t n;
    float *g;
    if (!s || !ready)
        return WEFT_EINVAL;
    *ready = 0;
    if (s->cfg.mode != WEFT_SYNC_STALE || s->popped == s->pushed)
        return 0;
    g = weft_model_grads(s->model, &n);
    *ready = 1;
    return stale_pop(s, g, n);
}

int weft_sync_backup_begin(weft_sync *s, int *skip)
{
    if (!s || !skip || !s->bk)
        return WEFT_EINVAL;
    return train_backup_begin(s->bk, skip);
}

int weft_sync_backup_grads(weft_sync *s, int n, const float in[2], float out[3])
{
    if (!s || !in || !out || !s->bk)
        return WEFT_EINVAL;
    return train_backup_grads(s->bk, n, in, out);
}

uint64_t weft_sync_included(const weft_sync *s)
{
    return s && s->bk ? train_backup_included(s->bk) : 0;
}

uint64_t weft_sync_bytes(const weft_sync *s)
{
    if (!s)
        return 0;
    if (s->outer) {
        uint64_t a, i;
        outer_bytes(s->outer, &a, &i);
        return a + i;
    }
    return s->bk ? train_backup_bytes(s->bk) : s->bytes;
}

const outer_sync *sync_outer_of(const weft_sync *s)
{
    return s ? s->outer : NULL;
}

void sync_state(weft_sync *s, long **steps, float **anchor, float **velocity)
{
    *steps = &s->steps;
    *anchor = s->anchor;
    *velocity = s->velocity;
}

weft_comm *weft_sync_inner_comm(const weft_sync *s)
{
    return s ? outer_inner_comm(s->outer) : NULL;
}

void weft_sync_bytes_split(const weft_sync *s, uint64_t *across, uint64_t *inside)
{
    if (s && s->outer) {
        outer_bytes(s->outer, across, inside);
        return;
    }
    if (across)
        *across = weft_sync_bytes(s);
    if (inside)
        *inside = 0;
}
