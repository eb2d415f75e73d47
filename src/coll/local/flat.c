/* The flat algorithm: every rank copies its contribution into its slot of
 * the communicator's board (coll/local/flat_board.h), publishes the slot, and,
 * once all p slots hold this call, computes its result from the board
 * alone: all-reduce reduces the p slots in rank order, so every rank gets
 * the same bits. One step whatever p, where recursive doubling or a tree
 * needs log2(p) rounds, each waiting for its partner to be scheduled.
 *
 * Each rank has two slots, used by calls of odd and even number. Why two
 * are enough: a rank posts call k only after every rank has posted call
 * k-1 (every call waits for all posts before it returns), and a rank posts
 * call k-1 only once it has returned from call k-2, having read all it
 * reads of that call. So when call k overwrites the slot of call k-2,
 * nobody reads it any more, and a rank reading call k never sees call k+2
 * land there: that needs its own post of k+1 first. So a post's seq
 * reads either k or k-2 during call k, and "every seq is k" says the call
 * is complete.
 *
 * The board is made at the first call that uses it: rank 0 creates it and
 * broadcasts its pid (which names it), the others map it, and a MIN
 * all-reduce says whether everyone could (both through ordinary
 * schedules). If anyone could not, every rank runs this and later calls
 * with an ordinary algorithm instead.
 *
 * An all-reduce larger than a slot goes through the pipe instead
 * (coll/local/flat_pipe.c), made the same way at the first such call but
 * agreed on the board itself. */
#include "coll/local/flat.h"

#include "coll/local/flat_int.h"

#include "coll/coll_sched.h"
#include "coll/exec/exec.h"
#include "coll/tune/select.h"
#include "coll/reduce.h"
#include "core/clock.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes a rank posts in call a (-1: a collective flat does not do). */
static int64_t posted(weft_coll_kind kind, uint64_t bytes, int nranks, int rank, int root)
{
    switch (kind) {
    case WEFT_COLL_BARRIER:
        return 0;
    case WEFT_COLL_ALLREDUCE: case WEFT_COLL_REDUCE: case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_GATHER:
        return (int64_t)bytes;
    case WEFT_COLL_BROADCAST:
        return rank == root ? (int64_t)bytes : 0;
    case WEFT_COLL_SCATTER:
        return rank == root ? (int64_t)(bytes * (uint64_t)nranks) : 0;
    case WEFT_COLL_REDUCE_SCATTER: case WEFT_COLL_ALLTOALL:
        return (int64_t)(bytes * (uint64_t)nranks);
    default:
        return -1;
    }
}

/* The most any rank posts (rank 0 as the root), or -1. */
static int64_t most_posted(weft_coll_kind kind, uint64_t bytes, int nranks)
{
    int64_t a = posted(kind, bytes > FLAT_SLOT ? FLAT_SLOT + 1 : bytes, nranks, 0, 0);
    return a >= 0 && bytes > FLAT_SLOT ? FLAT_SLOT + 1 : a; /* no overflow for large counts */
}

/* Why flat cannot run this call, or NULL. */
static const char *refusal(const weft_comm *c, weft_coll_kind kind, uint64_t bytes)
{
    int64_t most = most_posted(kind, bytes, c->size);
    if (c->nhosts != 1)
        return "its ranks are on more than one host";
    if (!c->shm_on)
        return "shared memory is off (WEFT_SHM=0)";
    if (most < 0)
        return "it has no such collective";
    if (most > FLAT_SLOT && kind != WEFT_COLL_ALLREDUCE)
        return "the message is larger than a board slot";
    return NULL;
}

/* Run a collective with an ordinary schedule: the algorithm auto would
 * choose without flat, the same on every rank. */
static int scheduled(weft_comm *c, struct flat_state *fs, const weft_coll_args *a,
                     const frame_hdr *fp)
{
    weft_algo algo = coll_select_with(&fs->cost, a->kind,
                                      (uint64_t)a->count * weft_dtype_size(a->dtype), c->size);
    return coll_run_sched(c, a, algo, &fs->sched, &fs->tmp, &fs->tmp_cap, fp);
}

/* A small collective of the board's setup. Its messages carry fp, the
 * caller's operation: that is what a failure here must name. The executor
 * reduces with the header's dtype and op, the caller's, so the setup only
 * moves bytes (a broadcast, an all-gather) and never reduces. */
static int setup_step(weft_comm *c, struct flat_state *fs, weft_coll_kind kind, const void *send,
                      void *recv, size_t count, weft_dtype t, const frame_hdr *fp)
{
    weft_coll_args a = { .kind = kind, .send = send, .recv = recv, .count = count, .dtype = t,
                         .op = WEFT_SUM, .root = 0 };
    return scheduled(c, fs, &a, fp);
}

static int setup(weft_comm *c, struct flat_state *fs, const frame_hdr *fp)
{
    int64_t made[2] = { 0, 0 }; /* from rank 0: the board exists; its pid */
    int32_t ok = 0;
    char err[256] = "";
    int rc;
    if (c->rank == 0) {
        ok = flat_board_create(&fs->b, c->id, c->size, err, sizeof err) == 0;
        made[0] = ok;
        made[1] = (int64_t)getpid();
    }
    if ((rc = setup_step(c, fs, WEFT_COLL_BROADCAST, made, made, 2, WEFT_I64, fp)))
        goto failed;
    if (c->rank != 0 && made[0])
        ok = flat_board_attach(&fs->b, c->id, c->size, (long)made[1], err, sizeof err) == 0;
    if (ok)
        flat_board_join(&fs->b, c->rank);
    /* every rank's answer, then their minimum here: the all-gather moves
     * bytes whatever the caller's dtype and op */
    int64_t all = ok, *each = malloc((size_t)c->size * sizeof *each);
    if (!each) {
        rc = comm_fail(c, WEFT_ENOMEM, "out of memory for the flat algorithm");
        goto failed;
    }
    rc = setup_step(c, fs, WEFT_COLL_ALLGATHER, &all, each, 1, WEFT_I64, fp);
    for (int r = 0; rc == 0 && r < c->size; r++)
        all = each[r] < all ? each[r] : all;
    free(each);
    if (rc)
        goto failed;
    if (!all) {
        if (!ok)
            log_sub(c->loglevel, LOG_WARN, LOG_SUB_COLL, c->rank,
                    "flat: no board here (%s); every rank uses ordinary algorithms instead",
                    made[0] ? err : "rank 0 could not make it");
        flat_board_close(&fs->b);
        fs->mode = FLAT_FALLBACK;
        return 0;
    }
    flat_board_unlink(&fs->b); /* everyone has it mapped */
    flat_pids_open(c, fs);
    fs->mode = FLAT_ON;
    return 0;
failed:
    /* The name must not outlive this: a rank that mapped it unlinks it,
     * the others remove any whose creator is gone (rank 0, if it died
     * after making it). */
    flat_board_close(&fs->b);
    if (c->rank != 0)
        flat_board_reap(c->id);
    return rc;
}

/* Reduces n elements at off in every rank's post of size `each`. */
static int reduce_slots(weft_comm *c, struct flat_state *fs, int q, size_t each, size_t off,
                        void *dst, size_t n, const weft_coll_args *a)
{
    int rc = 0, p = c->size;
    /* in rank order: the same bits on every rank (p >= 2 here) */
    rc = reduce_apply(dst, flat_board_slot(&fs->b, 0, q, each) + off,
                      flat_board_slot(&fs->b, 1, q, each) + off, n, a->dtype, a->op);
    for (int r = 2; r < p && !rc; r++)
        rc = reduce_apply(dst, dst, flat_board_slot(&fs->b, r, q, each) + off, n, a->dtype,
                          a->op);
    return rc ? comm_fail(c, rc, "bad reduction (dtype %d, op %d)", a->dtype, a->op) : 0;
}

static int gather(const struct flat_state *fs, int q, char *out, size_t bytes, int p)
{
    for (int r = 0; r < p; r++)
        memcpy(out + (size_t)r * bytes, flat_board_slot(&fs->b, r, q, bytes), bytes);
    return 0;
}

static int on_board(weft_comm *c, struct flat_state *fs, const weft_coll_args *a,
                    const frame_hdr *fp)
{
    int p = c->size, me = c->rank, root = a->root, rc;
    size_t es = weft_dtype_size(a->dtype), bytes = a->count * es;
    uint64_t k = fs->calls + 1;
    int q = (int)(k & 1);
    weft_coll_kind kind = a->kind;
    fs->calls = k;

    int64_t mine = posted(kind, bytes, p, me, root);
    char *slot = flat_board_slot(&fs->b, me, q, (size_t)mine);
    if (mine > 0) /* a broadcast's root sends from its one buffer, recv */
        memcpy(slot, kind == WEFT_COLL_BROADCAST ? a->recv : a->send, (size_t)mine);
    flat_post_call(fs, me, k, fp);

    /* Every rank waits for every post, also where it reads fewer (a
     * broadcast's root, a reduce's leaves): then each rank sees what the
     * others called, and a mismatch fails on every rank at once. */
    flat_ctr posts = flat_posts(fs, k);
    if ((rc = flat_wait(c, fs, &posts, fp)) || (rc = flat_check_posts(c, fs, k, fp)))
        return rc;

    char *out = a->recv;
    switch (kind) {
    case WEFT_COLL_REDUCE: case WEFT_COLL_GATHER:
        if (me != root)
            return 0;
        return kind == WEFT_COLL_REDUCE ? reduce_slots(c, fs, q, bytes, 0, out, a->count, a)
                                        : gather(fs, q, out, bytes, p);
    case WEFT_COLL_ALLREDUCE:
        return reduce_slots(c, fs, q, bytes, 0, out, a->count, a);
    case WEFT_COLL_REDUCE_SCATTER:
        return reduce_slots(c, fs, q, bytes * (size_t)p, (size_t)me * bytes, out, a->count, a);
    case WEFT_COLL_BROADCAST:
        if (me != root)
            memcpy(out, flat_board_slot(&fs->b, root, q, bytes), bytes);
        return 0;
    case WEFT_COLL_SCATTER:
        memcpy(out, flat_board_slot(&fs->b, root, q, bytes * (size_t)p) + (size_t)me * bytes,
               bytes);
        return 0;
    case WEFT_COLL_ALLGATHER:
        return gather(fs, q, out, bytes, p);
    case WEFT_COLL_ALLTOALL:
        for (int r = 0; r < p; r++)
            memcpy(out + (size_t)r * bytes,
                   flat_board_slot(&fs->b, r, q, bytes * (size_t)p) + (size_t)me * bytes, bytes);
        return 0;
    default:
        return 0;
    }
}

/* One rank: the result is its own contribution. */
static int alone(const weft_coll_args *a)
{
    size_t bytes = a->count * weft_dtype_size(a->dtype);
    if (a->kind != WEFT_COLL_BARRIER && a->kind != WEFT_COLL_BROADCAST && bytes &&
        a->recv != a->send)
        memmove(a->recv, a->send, bytes);
    return 0;
}

int flat_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    uint64_t bytes = (uint64_t)a->count * weft_dtype_size(a->dtype);
    const char *why = refusal(c, a->kind, bytes);
    int chosen = a->algo == WEFT_ALGO_AUTO && c->algo == WEFT_ALGO_AUTO;
    if (why && !chosen)
        return comm_fail(c, WEFT_ENOTSUP, "flat cannot run this %s: %s",
                         weft_coll_name(a->kind), why);
    if (!c->flat) {
        if (!(c->flat = calloc(1, sizeof *c->flat)))
            return comm_fail(c, WEFT_ENOMEM, "out of memory for the flat algorithm");
        sched_init(&c->flat->sched);
        /* a malformed WEFT_TUNE leaves the keys before the error set, the
         * same on every rank; the communicator's selector reports it */
        (void)cost_from_params(&c->flat->cost, &c->params, c->size, NULL, 0);
    }
    struct flat_state *fs = c->flat;
    c->fail_peer = -1;
    if (why) /* auto chose it where it cannot know (shared memory off) */
        return scheduled(c, fs, a, fp);
    if (c->size == 1)
        return alone(a);
    if (a->count == 0 && a->kind != WEFT_COLL_BARRIER)
        return 0;
    int rc;
    if (fs->mode == FLAT_NEW && (rc = setup(c, fs, fp)))
        return rc;
    if (fs->mode == FLAT_FALLBACK)
        return scheduled(c, fs, a, fp);
    if (clock_now() >= fs->next_tend && (rc = flat_tend(c, fs)))
        return rc;
    if (a->kind == WEFT_COLL_ALLREDUCE && bytes > FLAT_SLOT) {
        if (fs->pipe_mode == FLAT_NEW && (rc = flat_pipe_setup(c, fs, fp)))
            return rc;
        if (fs->pipe_mode == FLAT_FALLBACK)
            return scheduled(c, fs, a, fp);
        return flat_pipe_run(c, fs, a, fp);
    }
    return on_board(c, fs, a, fp);
}

/* Bytes the busiest rank reads off the board in one call, and all ranks
 * together. */
static void reads(weft_coll_kind kind, double n, int p, double *one, double *all)
{
    switch (kind) {
    case WEFT_COLL_ALLREDUCE: case WEFT_COLL_ALLGATHER: case WEFT_COLL_ALLTOALL:
    case WEFT_COLL_REDUCE_SCATTER:
        *one = p * n;
        *all = (double)p * p * n;
        break;
    case WEFT_COLL_REDUCE: case WEFT_COLL_GATHER:
        *one = *all = p * n;
        break;
    default: /* broadcast, scatter: n each; barrier: n is 0 */
        *one = n;
        *all = p * n;
        break;
    }
}

/* One step, but priced in the model's units, whose alpha_over is far
 * below what a round costs on a host with more ranks than cores (every
 * round waits for a partner to get a core; flat waits once for all of
 * them): measured with bench/flat.sh on 2 cores, flat took 0.26..0.37 of
 * rd's time at 8 B from 2 to 16 ranks, so it is priced at FLAT_STEP of
 * rd's predicted latency (ceil(log2 p) rounds). Then the reading: the
 * bytes the busiest rank reads off the board, or all ranks' reads shared
 * by the host's cores when that is more, at FLAT_BYTE of the model's
 * beta + gamma (fitted the same way: flat beat every scheduled algorithm
 * at every size a slot takes, 8 B .. 16 KiB, at 2, 4 and 8 ranks in three
 * runs of four, and this keeps auto on it there; at 16 ranks auto keeps
 * it up to about 2 KiB). */
#define FLAT_STEP 0.5
#define FLAT_BYTE 0.14

/* A large all-reduce through the pipe (coll/local/flat_pipe.c): one wait per
 * chunk, and per rank its n bytes copied in, n read to reduce its
 * slices and n copied out, shared by the host's cores. Of these only the
 * input read and the output written leave the cache, so a byte costs
 * less than a scheduled algorithm's: FLAT_PIPE_BYTE of the model's
 * beta + gamma per byte of a rank's message. Fitted with bench/flat.sh
 * -B -r "2 4 8" on 2 cores (medians of three, load average 8..13): from
 * 16 MiB up the pipe took 0.58..0.73 of direct's time (the best of the
 * others there) at 2, 4 and 8 ranks, and this prices it at 0.53..0.92 of
 * direct's prediction; from 64 KiB to 1 MiB it was level with direct or
 * ahead at 2 ranks and ahead of everything at 4 and 8, where auto now
 * takes it for every all-reduce beyond a slot. Since the copy-out of one
 * chunk and the copy-in of the next run as one loop, a 64 MiB all-reduce
 * at 4 ranks takes about 0.8 of the CPU time it took (user + sys of the
 * ranks, medians of four interleaved runs, load average 9): 0.66 x 0.85,
 * the gain shrinking to none at a single chunk. */
#define FLAT_PIPE_BYTE 0.56

static double pipe_cost(const cost_params *c, uint64_t bytes, int p, int rounds)
{
    int over = c->cores > 0 && p > c->cores;
    double chunks = (double)((bytes + FLAT_CHUNK - 1) / FLAT_CHUNK);
    double step = FLAT_STEP * rounds * (over ? c->alpha_over : c->alpha);
    double work = FLAT_PIPE_BYTE * (c->beta + c->gamma) * (double)bytes;
    return (chunks + 1) * step + (over ? work * p / c->cores : work);
}

int flat_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
              uint64_t bytes, uint32_t esize, double *seconds)
{
    (void)esize;
    if (l->nhosts > 1 || !c->shm)
        return WEFT_ENOTSUP;
    int64_t most = most_posted(kind, bytes, l->nranks);
    int p = l->nranks, rounds = 0;
    while ((1 << rounds) < p)
        rounds++;
    /* the size bucket costed starts at bytes; all of it must fit a slot,
     * or go through the pipe */
    if (kind == WEFT_COLL_ALLREDUCE && most >= FLAT_SLOT) {
        /* every chunk waits for every rank: measured to win up to 8 ranks
         * (on 2 cores); beyond, auto does not offer it (asking by name
         * still runs it) */
        if (p > 8)
            return WEFT_ENOTSUP;
        *seconds = pipe_cost(c, bytes, p, rounds);
        return 0;
    }
    if (most < 0 || most >= FLAT_SLOT)
        return WEFT_ENOTSUP;
    double one, all, step = c->cores > 0 && p > c->cores ? c->alpha_over : c->alpha;
    reads(kind, (double)bytes, p, &one, &all);
    double read = c->cores > 0 && all / c->cores > one ? all / c->cores : one;
    *seconds = FLAT_STEP * rounds * step + FLAT_BYTE * (c->beta + c->gamma) * read;
    return 0;
}

int flat_mode(const weft_comm *c)
{
    int m = c->flat ? c->flat->mode : FLAT_NEW;
    return m == FLAT_ON ? 1 : m == FLAT_FALLBACK ? 0 : -1;
}

void flat_free(weft_comm *c)
{
    struct flat_state *fs = c->flat;
    if (!fs)
        return;
    flat_pids_close(c, fs);
    flat_pipe_close(&fs->pipe);
    flat_board_close(&fs->b);
    sched_free(&fs->sched);
    free(fs->tmp);
    free(fs);
    c->flat = NULL;
}
