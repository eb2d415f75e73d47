/* weft_comm_shrink: after a failure, the survivors agree on who is left
 * and build a communicator of just them.
 *
 * The agreement runs in the rendezvous store, which is one server and so
 * linearizable: a key set first by one client is seen set by every later
 * reader. Two things make it an agreement that survives deaths during it:
 *  - every fact is a key written with SETNX, so the first writer wins and
 *    all readers see the same value: a rank writes "in" for itself, a
 *    rank that has waited for it in vain writes "out" in its place;
 *  - the store is the failure detector: each rank holds a key on its
 *    watch connection (store_hold, armed when the communicator is made),
 *    which the store sets when that connection ends, i.e. when the process
 *    dies. A waiter that sees it, or whose WEFT_TIMEOUT passes (a frozen
 *    rank, a lost host), writes the absent rank's key for it.
 * Round r, candidates = the old ranks (round 0) or the last round's
 * members: (1) each sets in/me and resolves in/j of every candidate: the
 * members are those "in", the same list everywhere; (2) each opens its
 * new listeners and sets rec/me to their addresses, then resolves every
 * member's rec; (3) each sets rdy/me and resolves every member's rdy. A
 * member found dead in (2) or (3) fails the round for everyone alike (the
 * same keys), and round r + 1 runs without it; a round removes one rank
 * at least, so there are at most size rounds, each bounded by WEFT_TIMEOUT.
 * A death after (3) is a failure of the new communicator, found by its
 * first operation (as in MPI ULFM: shrink it in turn).
 *
 * Where the store lives: by default in rank 0's process, and then the
 * agreement cannot outlive rank 0 (nothing else could either: the new
 * communicator's rendezvous needs a store). Replicating the store among
 * the ranks would be a consensus protocol of its own; like torchrun,
 * whose c10d store lives in its agent, an elastic job runs its store
 * outside the ranks instead: weftrun --elastic serves it, or weft-store
 * with WEFT_STORE_EXTERNAL=1. With the store in rank 0, shrinking works
 * while rank 0 lives, and rank 0's store moves to the new communicator.
 */
#include "coll/comm_child.h"

#include "bootstrap/world.h"
#include "coll/exec/async.h"
#include "core/clock.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_S 0.05 /* how often a waiter looks at the absent rank's held key */
#define STORE_GONE_S 3.0

/* What a resolved key holds, first byte. */
enum { V_IN = 'I', V_REC = 'R', V_READY = 'K', V_DEAD = 'X' };

typedef struct {
    weft_comm *c;
    store_client *s;
    int round;
    double deadline;
    int *ranks, n;            /* the round's candidates */
    int *alive;               /* per candidate: its fact stands */
} shrink_ctx;

static void fault(const shrink_ctx *x, int phase)
{
    if (x->c->shrink_fault)
        x->c->shrink_fault(x->c->shrink_fault_arg, phase);
}

static void key_of(const shrink_ctx *x, const char *what, int rank, char key[96])
{
    snprintf(key, 96, "weft/%016llx/shrink/%d/%s/%d", (unsigned long long)x->c->id, x->round,
             what, rank);
}

static int store_err(const shrink_ctx *x, int rc)
{
    return comm_fail(x->c, rc, "shrink: the store failed: %s", store_error(x->s));
}

/* This rank's own fact: 0 when it stands, WEFT_EPEER when another rank
 * wrote this rank off first (it was too slow, WEFT_TIMEOUT). */
static int claim(shrink_ctx *x, const char *what, const void *val, size_t len)
{
    char key[96];
    void *v;
    int won, rc;
    key_of(x, what, x->c->rank, key);
    if ((rc = store_setnx(x->s, key, val, len, &v, NULL, &won)))
        return store_err(x, rc);
    free(v);
    if (!won)
        return comm_fail(x->c, WEFT_EPEER,
                         "shrink: this rank (%d) was counted out by the others (it came "
                         "later than WEFT_TIMEOUT, %.0f s, after them)", x->c->rank,
                         x->c->timeout_s);
    return 0;
}

/* The value that stands for rank j's fact: j's own, or V_DEAD written by
 * this rank or another once j's held key showed it gone or the round's
 * deadline passed. *v malloc'd. */
static int resolve(shrink_ctx *x, const char *what, int j, void **v, size_t *len)
{
    char key[96], gone[64];
    key_of(x, what, j, key);
    world_gone_key(x->c->id, j, gone);
    for (;;) {
        double left = x->deadline - clock_now();
        int rc = store_get(x->s, key, v, len, left < POLL_S ? (left > 0 ? left : 0) : POLL_S);
        int dead = 0;
        if (rc == 0)
            return 0;
        if (rc != WEFT_ETIMEDOUT)
            return store_err(x, rc);
        if ((rc = store_check(x->s, gone, &dead)))
            return store_err(x, rc);
        if (dead || clock_now() >= x->deadline) {
            char d = V_DEAD;
            if ((rc = store_setnx(x->s, key, &d, 1, v, len, NULL)))
                return store_err(x, rc);
            return 0;
        }
    }
}

/* Resolve what/m for every m in ranks[0..n); alive[i] 1 when m's own
 * value stands (recs[m] gets it, sized rec_len, when recs is given). */
static int resolve_all(shrink_ctx *x, const char *what, const int *ranks, int n, int *alive,
                       comm_addr *recs)
{
    for (int i = 0; i < n; i++) {
        void *v = NULL;
        size_t len = 0;
        int rc = resolve(x, what, ranks[i], &v, &len);
        if (rc)
            return rc;
        alive[i] = len > 0 && *(char *)v != V_DEAD;
        if (alive[i] && recs) {
            if (len != 1 + sizeof *recs) {
                free(v);
                return comm_fail(x->c, WEFT_EPROTO, "shrink: rank %d's record is malformed",
                                 ranks[i]);
            }
            memcpy(&recs[ranks[i]], (char *)v + 1, sizeof *recs);
        }
        free(v);
    }
    return 0;
}

/* Keep ranks[i] where keep[i]; returns the new count. */
static int filter(int *ranks, int n, const int *keep)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (keep[i])
            ranks[m++] = ranks[i];
    return m;
}

static uint64_t child_id(const weft_comm *c, int round)
{
    int32_t salt[2] = { 0x5348524b /* "SHRK" */, round };
    return comm_derive_id(c->id, salt, sizeof salt);
}

static void say_who_left(weft_comm *c, const int *members, int n, int rounds, double t0)
{
    char gone[256] = "";
    size_t o = 0;
    for (int r = 0, i = 0; r < c->size && o + 12 < sizeof gone; r++) {
        if (i < n && members[i] == r) {
            i++;
            continue;
        }
        o += (size_t)snprintf(gone + o, sizeof gone - o, "%s%d", o ? "," : "", r);
    }
    /* a membership change is news: the new rank 0 says it by default */
    log_msg(c->loglevel, members[0] == c->rank && o ? LOG_WARN : LOG_INFO, c->rank,
            "shrink: rank(s) %s gone; %d of %d remain (%d round(s), %.3f s)",
            o ? gone : "none", n, c->size, rounds, clock_now() - t0);
}

/* The new communicator's addresses, published and agreed on (phases 2
 * and 3 of a round, comm_child_plan's exchange): 1 when a member was
 * found dead on the way, x->ranks[0..x->n) then the next round's
 * candidates. */
static int publish(void *arg, weft_comm *c, weft_comm *child, const comm_addr *mine,
                   comm_addr *recs)
{
    shrink_ctx *x = arg;
    char rec[1 + sizeof(comm_addr)], tag;
    int rc, failed = 0;
    (void)c;
    (void)child;
    rec[0] = V_REC;
    memcpy(rec + 1, mine, sizeof *mine);
    if ((rc = claim(x, "rec", rec, sizeof rec)))
        return rc;
    fault(x, SHRINK_PH_PUBLISHED);
    if ((rc = resolve_all(x, "rec", x->ranks, x->n, x->alive, recs)))
        return rc;
    for (int i = 0; i < x->n; i++)
        failed |= !x->alive[i];
    if (!failed) {
        tag = V_READY;
        if ((rc = claim(x, "rdy", &tag, 1)))
            return rc;
        fault(x, SHRINK_PH_READY);
        if ((rc = resolve_all(x, "rdy", x->ranks, x->n, x->alive, NULL)))
            return rc;
        for (int i = 0; i < x->n; i++)
            failed |= !x->alive[i];
    }
    if (failed) {
        x->n = filter(x->ranks, x->n, x->alive);
        return 1;
    }
    return 0;
}

/* One round over the candidates x->ranks[0..x->n). 0 with *out: done; 1:
 * the round failed alike for every member, x->n now the next round's
 * candidates; negative: this rank's error. */
static int round_run(shrink_ctx *x, weft_comm **out)
{
    weft_comm *c = x->c;
    int me = -1, rc;
    char tag = V_IN;
    x->deadline = clock_now() + c->timeout_s;
    fault(x, SHRINK_PH_ENTER);
    if ((rc = claim(x, "in", &tag, 1)))
        return rc;
    fault(x, SHRINK_PH_JOINED);
    if ((rc = resolve_all(x, "in", x->ranks, x->n, x->alive, NULL)))
        return rc;
    x->n = filter(x->ranks, x->n, x->alive);
    for (int i = 0; i < x->n; i++)
        if (x->ranks[i] == c->rank)
            me = i;
    fault(x, SHRINK_PH_AGREED);
    comm_child_plan plan = { .exchange = publish, .arg = x, .members = x->ranks,
                             .what = "shrink" };
    return comm_child_make(c, me, x->n, child_id(c, x->round), &plan, out);
}

int weft_comm_shrink(weft_comm *c, weft_comm **out)
{
    shrink_ctx x = { .c = c };
    char err[256];
    int rc;
    double t0 = clock_now();
    if (!c || !out || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    *out = NULL;
    if (c->shrunk)
        return comm_fail(c, WEFT_EINVAL, "shrink: this communicator was shrunk already "
                                         "(shrink the communicator that shrink made)");
    async_drain(c);
    if (c->size == 1 || (!c->store && !c->watch)) { /* alone: nobody to agree with */
        int self = c->rank;
        comm_child_plan plan = { .members = &self, .what = "shrink" };
        if ((rc = comm_child_make(c, 0, 1, child_id(c, 0), &plan, out)))
            return rc;
        c->shrunk = 1;
        return 0;
    }
    /* the store was there when c was made: refused for a few seconds, it
     * is gone (a rendezvous waits longer: its store may not be up yet) */
    if ((rc = store_connect(&x.s, c->store_host, c->store_port,
                            c->connect_timeout_s < STORE_GONE_S ? c->connect_timeout_s
                                                                : STORE_GONE_S,
                            c->secret, err, sizeof err))) {
        char who[48] = "outside the ranks";
        if (c->store_rank >= 0)
            snprintf(who, sizeof who, "by rank %d", c->store_rank);
        return comm_fail(c, WEFT_EPEER,
                         "shrink: the store (%.64s:%d, served %s) is gone: %.100s; an elastic "
                         "job keeps its store outside the ranks (weftrun --elastic, or "
                         "weft-store with WEFT_STORE_EXTERNAL=1)",
                         c->store_host, c->store_port, who, err);
    }
    x.ranks = malloc((size_t)c->size * sizeof *x.ranks);
    x.alive = malloc((size_t)c->size * sizeof *x.alive);
    if (!x.ranks || !x.alive) {
        store_close(x.s);
        free(x.ranks);
        free(x.alive);
        return comm_fail(c, WEFT_ENOMEM, "shrink: out of memory");
    }
    x.n = c->size;
    for (int i = 0; i < x.n; i++)
        x.ranks[i] = i;
    rc = 1;
    for (x.round = 0; rc == 1 && x.round < c->size; x.round++)
        rc = round_run(&x, out);
    store_close(x.s);
    if (rc == 1)
        rc = comm_fail(c, WEFT_EPEER, "shrink: no agreement after %d rounds", x.round);
    if (rc == 0) {
        weft_comm *child = *out;
        c->shrunk = 1;
        if (c->server) { /* the store this rank serves goes on with the new communicator */
            child->server = c->server;
            c->server = NULL;
        }
        for (int i = 0; i < x.n; i++)
            if (x.ranks[i] == c->store_rank)
                child->store_rank = i;
        say_who_left(c, x.ranks, x.n, x.round, t0);
    }
    free(x.ranks);
    free(x.alive);
    return rc;
}
