/* Calls kept for hints, and liveness records in the store (see live.h). */
#include "coll/exec/live.h"

#include "core/clock.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct live_state {
    frame_hdr past[LIVE_HIST];  /* this rank's calls, by seq % LIVE_HIST */
    uint64_t *hinted;           /* per peer: the operation it was last told of */
    store_client *st;           /* this rank's own connection for its record */
    int silent;                 /* the store stopped answering */
    int gone;                   /* the store is gone (refused, closed): no records */
    double silent_at;           /* when it was found silent */
    double pub_at;              /* last record written */
    uint64_t pub_seq;
};

static struct live_state *state(weft_comm *c)
{
    if (!c->live)
        c->live = calloc(1, sizeof *c->live);
    return c->live;
}

void live_call(weft_comm *c, const frame_hdr *fp)
{
    struct live_state *l = state(c);
    if (l && fp->seq)
        l->past[fp->seq % LIVE_HIST] = *fp;
}

const frame_hdr *live_past(const weft_comm *c, uint64_t seq)
{
    const frame_hdr *h = c->live && seq ? &c->live->past[seq % LIVE_HIST] : NULL;
    return h && h->seq == seq ? h : NULL;
}

int live_hinted(weft_comm *c, int peer, uint64_t seq, int mark)
{
    struct live_state *l = state(c);
    if (!l || peer < 0 || peer >= c->size)
        return 1;
    if (!l->hinted && !(l->hinted = calloc((size_t)c->size, sizeof *l->hinted)))
        return 1;
    if (l->hinted[peer] == seq)
        return 1;
    if (mark)
        l->hinted[peer] = seq;
    return 0;
}

/* ---- liveness records --------------------------------------------------- */

/* How long a record's write may wait for the store: long enough for a
 * loaded host, short enough that a rank learns of a stopped store well
 * within the half timeout left after its first record. */
static double answer_s(const weft_comm *c)
{
    double s = c->timeout_s / 4;
    return s > 1.0 ? 1.0 : s < 0.2 ? 0.2 : s;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void key_of(const weft_comm *c, int rank, char *key, size_t len)
{
    snprintf(key, len, "weft/%016" PRIx64 "/live/%d", c->id, rank);
}

static void went_silent(weft_comm *c, struct live_state *l)
{
    if (!l->silent) {
        l->silent = 1;
        l->silent_at = clock_now() - answer_s(c);
        log_msg(c->loglevel, LOG_INFO, c->rank,
                "the store (%s:%d) did not answer a liveness record within %.1f s",
                c->store_host, c->store_port, answer_s(c));
    }
}

/* The connection for records, made on first use. 0: ready. */
static int connected(weft_comm *c, struct live_state *l)
{
    char err[200];
    if (l->st)
        return 0;
    if (l->silent || l->gone || !c->store_port)
        return -1;
    int rc = store_connect_within(&l->st, c->store_host, c->store_port, answer_s(c), c->secret,
                                  err, sizeof err);
    if (rc) {
        l->st = NULL;
        if (rc == WEFT_ETIMEDOUT)
            went_silent(c, l);
        else
            l->gone = 1;
        return -1;
    }
    store_set_answer_timeout(l->st, answer_s(c));
    return 0;
}

/* A store call failed: silent (no answer) or gone. */
static void call_failed(weft_comm *c, struct live_state *l)
{
    if (store_broken(l->st) == WEFT_ETIMEDOUT)
        went_silent(c, l);
    else
        l->gone = 1;
    store_close(l->st);
    l->st = NULL;
}

void live_waiting(weft_comm *c, uint64_t seq, const int32_t *wait, int nw, double since)
{
    struct live_state *l = c->live;
    double now = clock_now();
    if (now - since < c->timeout_s / 2 || c->size < 2)
        return;
    if (!l && !(l = state(c)))
        return;
    if (l->pub_seq == seq && now - l->pub_at < LIVE_BEAT_S)
        return;
    l->pub_seq = seq;
    l->pub_at = now;
    if (connected(c, l))
        return;
    char val[256], key[64];
    size_t n = (size_t)snprintf(val, sizeof val, "%" PRIu64 " %" PRId64 " %d", seq, wall_ms(),
                                nw < LIVE_WAIT_MAX ? nw : LIVE_WAIT_MAX);
    for (int i = 0; i < nw && i < LIVE_WAIT_MAX && n < sizeof val - 16; i++)
        n += (size_t)snprintf(val + n, sizeof val - n, " %d", (int)wait[i]);
    key_of(c, c->rank, key, sizeof key);
    if (store_set(l->st, key, val, n))
        call_failed(c, l);
}

/* Rank q's record: 1 and its waits when fresh, 0 when absent or stale
 * (*age_s: how old, or -1 when absent), -1 when the store failed. */
static int record_of(weft_comm *c, struct live_state *l, int q, int32_t *wait, int *nw,
                     double *age_s)
{
    char key[64];
    void *v = NULL;
    size_t len = 0;
    key_of(c, q, key, sizeof key);
    int rc = store_get(l->st, key, &v, &len, 0);
    *nw = 0;
    *age_s = -1;
    if (rc) {
        free(v);
        if (store_broken(l->st)) {
            call_failed(c, l);
            return -1;
        }
        return 0; /* no record */
    }
    uint64_t seq;
    int64_t ms;
    int k = 0, used = 0;
    const char *p = v;
    if (sscanf(p, "%" SCNu64 " %" SCNd64 " %d%n", &seq, &ms, &k, &used) != 3 || k < 0 ||
        k > LIVE_WAIT_MAX) {
        free(v);
        return 0;
    }
    p += used;
    for (int i = 0; i < k; i++) {
        int w;
        if (sscanf(p, " %d%n", &w, &used) != 1)
            break;
        p += used;
        if (w >= -c->size && w < c->size)
            wait[(*nw)++] = w;
    }
    free(v);
    *age_s = (double)(wall_ms() - ms) / 1000.0;
    return *age_s <= LIVE_STALE_S;
}

int live_store_silent(const weft_comm *c) { return c->live && c->live->silent; }

static int peer_of(int32_t w) { return w < 0 ? -w - 1 : w; }

int live_blame(weft_comm *c, const int32_t *wait, int nw, char *why, size_t len)
{
    struct live_state *l = state(c);
    why[0] = 0;
    if (!l || c->size < 2)
        return -1;
    int *via = NULL, *queue = NULL, culprit = -1;
    if (!l->silent && connected(c, l) == 0) {
        /* breadth first from the ranks this rank waits on: the first with
         * no fresh record is the one everybody behind it waits for */
        via = malloc((size_t)c->size * sizeof *via);
        queue = malloc((size_t)c->size * sizeof *queue);
        int head = 0, tail = 0;
        for (int q = 0; via && q < c->size; q++)
            via[q] = -2;
        if (via && queue) {
            via[c->rank] = c->rank;
            for (int i = 0; i < nw; i++) {
                int q = peer_of(wait[i]);
                if (q >= 0 && q < c->size && via[q] == -2) {
                    via[q] = c->rank;
                    queue[tail++] = q;
                }
            }
        }
        while (head < tail && culprit < 0 && !l->silent) {
            int q = queue[head++], qn;
            int32_t qw[LIVE_WAIT_MAX];
            double age;
            int fresh = record_of(c, l, q, qw, &qn, &age);
            if (fresh < 0)
                break;
            if (fresh == 0) {
                culprit = q;
                int n = age < 0 ? snprintf(why, len, "rank %d stopped making progress (it "
                                                     "has not been seen waiting", q)
                                : snprintf(why, len, "rank %d stopped making progress (last "
                                                     "seen waiting %.0f s ago", q, age);
                if (n > 0 && (size_t)n < len)
                    snprintf(why + n, len - (size_t)n, "; rank %d waits on it)", via[q]);
                break;
            }
            for (int i = 0; i < qn; i++) {
                int p = peer_of(qw[i]);
                if (p >= 0 && p < c->size && via[p] == -2) {
                    via[p] = q;
                    queue[tail++] = p;
                }
            }
        }
    }
    free(via);
    free(queue);
    if (culprit < 0 && l->silent && c->store_rank >= 0) {
        culprit = c->store_rank;
        live_store_why(c, why, len);
    }
    return culprit;
}

void live_store_why(const weft_comm *c, char *why, size_t len)
{
    double for_s = c->live ? clock_now() - c->live->silent_at : 0;
    snprintf(why, len, "rank %d stopped responding (the store, served by rank %d at %.64s:%d, "
                       "did not answer for %.0f s)",
             c->store_rank, c->store_rank, c->store_host, c->store_port, for_s);
}

int live_store_check(weft_comm *c)
{
    struct live_state *l = state(c);
    int exists;
    if (!l || c->size < 2)
        return 0;
    if (!l->silent && connected(c, l) == 0 && store_check(l->st, "weft/flush", &exists))
        call_failed(c, l);
    return l->silent;
}

void live_free(weft_comm *c)
{
    struct live_state *l = c->live;
    if (!l)
        return;
    if (l->st)
        store_close(l->st);
    free(l->hinted);
    free(l);
    c->live = NULL;
}
