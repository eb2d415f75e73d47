/* The small all-reduce (small.h). A call is what the flat algorithm does
 * with it (coll/local/flat.c): this rank copies its contribution into its
 * post on the board, publishes the post (the call's fingerprint in the
 * same cache line as the sequence number and, up to 32 bytes, the data),
 * waits until every rank has posted the call, compares every post's
 * fingerprint with its own, and reduces the p posts in rank order, so
 * every rank gets the same bits, flat's bits. What it leaves out is the
 * engine's work around that: at 8 bytes a clock read (a few hundred ns
 * on a virtual machine's clock source), a tuner lookup or a flight
 * record cost more than the data.
 *
 * The wait looks at the posts without a system call or a clock read for
 * a bounded number of turns (pause, then a yield when the host has more
 * ranks than cores, so the rank that still has to post gets the core),
 * then hands over to flat_wait: its clock-bound spin, its futex sleep and
 * everything that ends a wait early (abort, a dead peer's pidfd, another
 * rank's failure notice, a peer in a different call, the timeout).
 *
 * With more ranks than cores, a yield is worth its cost only when a rank
 * that has not posted shares this rank's core: only then does giving up
 * the core bring the post closer. A rank that waits only on ranks of
 * other cores looks a while first, once a call (they post from there, a
 * cache line away), then yields all the same: where a rank last posted
 * from is a hint, not a promise, and a rank preempted there by another
 * job is not worth a longer look. Each rank writes the CPU it posts from into
 * its board entry when it changes (a few ns: glibc reads it from rseq).
 * Counted at 4 ranks on 2 cores: yields that found nobody to run, and
 * context switches that handed the core to a rank with nothing to post,
 * were most of a call's time (docs/BENCHMARKS.md, "Small messages"). */
#include "coll/exec/small.h"

#include "coll/exec/callboard.h"
#include "coll/local/flat.h"
#include "coll/local/flat_int.h"
#include "coll/reduce.h"

#include <sched.h>
#include <string.h>

/* Turns of looking before flat_wait takes over, for a rank with a core
 * of its own: SMALL_LOOKS looks (a few hundred ns) and a yield each. A
 * rank that shares its core yields at every turn instead, and takes
 * comm_spin_yields turns: enough for every other rank of the host to
 * have run once. */
#define SMALL_LOOKS 32
#define SMALL_TURNS 16
/* Looks (a pause each, ~25 ns on the Zen 4 guest) before a shared-core
 * rank that waits only on other cores yields anyway: about 3 us, two
 * context switches' worth there (bench/cacheline_rtt.c -y: 2.97 us for
 * two, idle), the longest the missing rank should take to get its turn
 * on its core and post. */
#define SMALL_FAR_LOOKS 128
/* Every this many calls, tend the listening socket as flat_run does on
 * its clock (flat_tend): the waits that sleep tend it too. */
#define SMALL_TEND_EVERY 64

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int small_fits(const weft_comm *c, const weft_coll_args *a)
{
    size_t es = weft_dtype_size(a->dtype);
    return a->kind == WEFT_COLL_ALLREDUCE && c->nhosts == 1 && c->shm_on && c->size > 1 &&
           a->count > 0 && es && a->count <= SMALL_MAX / es;
}

int small_ready(const weft_comm *c)
{
    return flat_mode(c) == 1;
}

/* Does a rank that has not reached w->want post from this rank's CPU
 * (cpu: 1 + it)? Unknown (0) on either side counts as yes. */
static int mate_missing(const struct flat_state *fs, const flat_ctr *w, uint32_t cpu)
{
    for (int r = 0; r < w->n; r++) {
        if (flat_ctr_get(w, r) >= w->want)
            continue;
        uint32_t at = atomic_load_explicit(&fs->b.ranks[r].cpu, memory_order_relaxed);
        if (!cpu || !at || at == cpu)
            return 1;
    }
    return 0;
}

/* Has every rank posted? Looks without a clock; 0 when the turns ran
 * out, and flat_wait must decide. */
static int spin(weft_comm *c, const struct flat_state *fs, const flat_ctr *w, uint32_t cpu)
{
    if (c->spin_s <= 0)
        return flat_reached(w); /* WEFT_SPIN_US=0: sleep at once */
    int yields = comm_spin_yields(c);
    int far = !!yields; /* the long look, at most once a call */
    for (int i = 0; i < (yields ? yields : SMALL_TURNS); i++) {
        int looks = !yields ? SMALL_LOOKS : 1;
        if (far && !mate_missing(fs, w, cpu)) {
            looks = SMALL_FAR_LOOKS;
            far = 0;
        }
        for (int j = 0; j < looks; j++) {
            if (flat_reached(w))
                return 1;
            relax();
        }
        sched_yield();
    }
    return flat_reached(w);
}

/* Ask for this rank's post line of the next call in the exclusive state
 * now: its peers read it (shared) while they waited on this call, and the
 * sequentially consistent store that publishes the next post otherwise
 * waits for the line to come back from their cores (half a cache line's
 * round trip) on every call. */
static inline void own_line(const flat_post *x)
{
#if defined(__x86_64__) || defined(__i386__)
    /* a no-op hint where the CPU lacks it */
    __asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)x));
#else
    __builtin_prefetch(x, 1, 3);
#endif
}

static int reduce_posts(weft_comm *c, const flat_board *b, int q, const weft_coll_args *a)
{
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    /* rank order, as flat: the same bits on every rank */
    int rc = reduce_apply(a->recv, flat_board_slot(b, 0, q, bytes),
                          flat_board_slot(b, 1, q, bytes), a->count, a->dtype, a->op);
    for (int r = 2; r < c->size && !rc; r++)
        rc = reduce_apply(a->recv, a->recv, flat_board_slot(b, r, q, bytes), a->count,
                          a->dtype, a->op);
    return rc ? comm_fail(c, rc, "bad reduction (dtype %d, op %d)", a->dtype, a->op) : 0;
}

int small_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    struct flat_state *fs = c->flat;
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    uint64_t k = ++fs->calls;
    int q = (int)(k & 1), rc;
    c->fail_peer = -1;
    if (!(k % SMALL_TEND_EVERY) && (rc = flat_tend(c, fs)))
        return rc;
    memcpy(flat_board_slot(&fs->b, c->rank, q, bytes), a->send, bytes);
    uint32_t cpu = (uint32_t)(sched_getcpu() + 1); /* 0 when it fails: unknown */
    _Atomic uint32_t *at = &fs->b.ranks[c->rank].cpu;
    if (atomic_load_explicit(at, memory_order_relaxed) != cpu)
        atomic_store_explicit(at, cpu, memory_order_relaxed);
    flat_post_call(fs, c->rank, k, fp);
    flat_ctr posts = flat_posts(fs, k);
    if (!spin(c, fs, &posts, cpu)) {
        /* a long wait: from here on it shows in the flight recorder */
        if (!c->cur)
            c->cur = flight_new(&c->fl, fp, FL_RUNNING);
        if ((rc = flat_wait(c, fs, &posts, fp)))
            return rc;
    }
    if ((rc = flat_check_posts(c, fs, k, fp)))
        return rc;
    callboard_verified(c, fp->seq);
    rc = reduce_posts(c, &fs->b, q, a);
    own_line(&fs->b.ranks[c->rank].post[q ^ 1]);
    return rc;
}
