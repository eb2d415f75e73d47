/* The flat algorithm (coll/local/flat.h) at 1..8 ranks: every collective it
 * does, every dtype and op, in place and not, counts 0, 1, 7 and the
 * largest a board slot holds, checked against the ring algorithm on the
 * same communicator and all-reduce against its closed form; results the
 * same to the bit on every rank; thousands of calls back to back with
 * ranks delayed at random, other algorithms mixed in; a barrier that no
 * rank leaves early; a rank killed, stopped or missing while the others
 * wait; an abort; the fallback when the board cannot be made; refusals
 * that leave the communicator usable; sub-communicators and non-blocking
 * calls; no name left in /dev/shm. Large all-reduce (through the pipe):
 * 1..8 ranks, every dtype and op, counts that are multiples of neither
 * the chunk nor the rank count, in place and not, float sums in rank
 * order to the bit, back to back with delays among small calls, a rank
 * killed in the middle, a count mismatch, the fallback when the pipe
 * cannot be made. */
#include "mp.h"

#include "coll/comm.h"
#include "coll/local/flat.h"
#include "coll/local/flat_board.h"
#include "coll/local/flat_int.h"
#include "core/half.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

static const weft_coll_kind kinds[] = {
    WEFT_COLL_BARRIER, WEFT_COLL_ALLREDUCE, WEFT_COLL_BROADCAST,      WEFT_COLL_REDUCE,
    WEFT_COLL_GATHER,  WEFT_COLL_SCATTER,   WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLGATHER,
    WEFT_COLL_ALLTOALL,
};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

static const weft_dtype dtypes[] = { WEFT_F32, WEFT_F64, WEFT_F16, WEFT_BF16,
                                     WEFT_I8,  WEFT_U8,  WEFT_I32, WEFT_I64 };
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

static int is_rooted(weft_coll_kind k)
{
    return k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE || k == WEFT_COLL_GATHER ||
           k == WEFT_COLL_SCATTER;
}

/* Elements in the send and the receive buffer, per count. */
static size_t in_per(weft_coll_kind k, int n)
{
    return k == WEFT_COLL_SCATTER || k == WEFT_COLL_REDUCE_SCATTER || k == WEFT_COLL_ALLTOALL
               ? (size_t)n
               : 1;
}

static size_t out_per(weft_coll_kind k, int n)
{
    return k == WEFT_COLL_GATHER || k == WEFT_COLL_ALLGATHER || k == WEFT_COLL_ALLTOALL
               ? (size_t)n
               : 1;
}

/* The largest count flat takes for k at n ranks. */
static size_t limit(weft_coll_kind k, int n, weft_dtype t)
{
    return FLAT_SLOT / weft_dtype_size(t) / in_per(k, n);
}

static void store(void *b, weft_dtype t, size_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)b)[i] = (float)v; break;
    case WEFT_F64: ((double *)b)[i] = v; break;
    case WEFT_F16: ((uint16_t *)b)[i] = f32_to_f16((float)v); break;
    case WEFT_BF16: ((uint16_t *)b)[i] = f32_to_bf16((float)v); break;
    case WEFT_I8: ((int8_t *)b)[i] = (int8_t)v; break;
    case WEFT_U8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    case WEFT_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: ((int64_t *)b)[i] = (int64_t)v; break;
    }
}

/* Small integers, exact in every dtype and in any order of reduction;
 * negative where the dtype has a sign; a product of 8 stays below 256. */
static double val(weft_dtype t, weft_op op, int r, size_t i, uint64_t salt)
{
    uint64_t h = ((uint64_t)r * 7 + i * 3 + salt * 5) % 4;
    if (op == WEFT_PROD)
        return 1 + (double)(h & 1);
    return (double)h - (t == WEFT_U8 ? 0 : 1);
}

static void fill(void *b, weft_dtype t, weft_op op, size_t n, int r, uint64_t salt)
{
    for (size_t i = 0; i < n; i++)
        store(b, t, i, val(t, op, r, i, salt));
}

/* Runs one collective with algorithm a; the result in out (the receive
 * buffer's bytes this rank defines), or a negative code. */
static int one(weft_comm *c, weft_coll_kind k, weft_algo a, weft_dtype t, weft_op op,
               size_t cnt, int inplace, int root, uint64_t salt, char *out, size_t *outlen)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    size_t es = weft_dtype_size(t), nin = cnt * in_per(k, n), nout = cnt * out_per(k, n);
    size_t cap = (nin > nout ? nin : nout) * es + 8;
    char *send = malloc(cap), *recv = malloc(cap);
    memset(recv, 0x5a, cap);
    fill(send, t, op, nin, r, salt);
    if (k == WEFT_COLL_BROADCAST)
        memcpy(recv, send, nout * es);
    if (inplace)
        memcpy(recv, send, nin * es);
    weft_coll_args args = { .kind = k, .send = inplace ? recv : send, .recv = recv,
                            .count = cnt, .dtype = t, .op = op, .root = root, .algo = a };
    if (k == WEFT_COLL_BARRIER)
        args.count = 0;
    int rc = weft_collective(c, &args);
    *outlen = 0;
    if (!rc && k != WEFT_COLL_BARRIER &&
        (r == root || (k != WEFT_COLL_REDUCE && k != WEFT_COLL_GATHER))) {
        memcpy(out, recv, nout * es);
        *outlen = nout * es;
    }
    free(send);
    free(recv);
    return rc;
}

/* Names of this communicator's boards in /dev/shm. */
static int board_names(uint64_t id)
{
    char prefix[48];
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    snprintf(prefix, sizeof prefix, "weft-%016llx-flat-", (unsigned long long)id);
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

/* Board names in /dev/shm whose creator has died: leaks. */
static int orphan_boards(void)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *f = strstr(e->d_name, "-flat-");
        long pid = f && !strncmp(e->d_name, "weft-", 5) ? atol(f + 6) : 0;
        /* only this test's ranks: other tests' killed ranks may be being
         * cleaned up at this moment */
        int ours = 0;
        for (int i = 0; pid > 0 && i < mp_forked_n; i++)
            ours |= mp_forked[i] == (pid_t)pid;
        n += ours && kill((pid_t)pid, 0) && errno == ESRCH;
    }
    if (d)
        closedir(d);
    return n;
}

/* A flat f32 all-reduce of count values that round differently in every
 * order: how many differ from the sum taken in rank order (or count + 1
 * when the call failed). */
static size_t rank_order_wrong(weft_comm *c, size_t cnt)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    size_t wrong = 0;
    float *x = malloc(cnt * sizeof *x), *y = malloc(cnt * sizeof *y);
    for (size_t i = 0; i < cnt; i++)
        x[i] = (float)((r + 1) * 0.1 + (double)i * 1e-3 + 1.0 / (3.0 + r));
    int rc = weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_ALLREDUCE, .send = x,
                                                   .recv = y, .count = cnt, .dtype = WEFT_F32,
                                                   .op = WEFT_SUM, .algo = WEFT_ALGO_FLAT });
    for (size_t i = 0; rc == 0 && i < cnt; i++) {
        float sum = 0;
        for (int q = 0; q < n; q++) {
            float v = (float)((q + 1) * 0.1 + (double)i * 1e-3 + 1.0 / (3.0 + q));
            sum = q ? sum + v : v;
        }
        wrong += memcmp(&sum, &y[i], sizeof sum) != 0;
    }
    free(x);
    free(y);
    return rc ? cnt + 1 : wrong;
}

/* ---- every collective, dtype and op, against the ring ------------------- */

static void matrix(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), bad = 0, calls = 0;
    size_t big = FLAT_SLOT * 8 + 64;
    char *a = malloc(big), *b = malloc(big);
    for (int ki = 0; ki < NKINDS; ki++) {
        weft_coll_kind k = kinds[ki];
        for (int di = 0; di < NDTYPES; di++) {
            weft_dtype t = dtypes[di];
            size_t counts[4] = { 0, 1, 7, limit(k, n, t) };
            for (int op = 0; op < (mp_is_reduction(k) ? WEFT_OP_COUNT : 1); op++) {
                /* every op for all-reduce; sum and max for the others */
                if (k != WEFT_COLL_ALLREDUCE && op != WEFT_SUM && op != WEFT_MAX)
                    continue;
                for (int ci = 0; ci < (k == WEFT_COLL_BARRIER ? 1 : 4); ci++)
                    for (int ip = 0; ip < 2; ip++) {
                        if (ip && k != WEFT_COLL_ALLREDUCE && k != WEFT_COLL_REDUCE)
                            continue;
                        int root = is_rooted(k) ? (ci + di) % n : 0;
                        size_t la, lb;
                        uint64_t salt = (uint64_t)(ki * 31 + di * 7 + ci);
                        int ra = one(c, k, WEFT_ALGO_FLAT, t, (weft_op)op, counts[ci], ip,
                                     root, salt, a, &la);
                        int rb = one(c, k, WEFT_ALGO_RING, t, (weft_op)op, counts[ci], ip,
                                     root, salt, b, &lb);
                        calls++;
                        if (ra || rb || la != lb || memcmp(a, b, la)) {
                            if (bad++ < 5)
                                fprintf(stderr,
                                        "rank %d/%d: %s %s op %d count %zu inplace %d: "
                                        "flat %d ring %d (%s)\n",
                                        r, n, weft_coll_name(k), weft_dtype_name(t), op,
                                        counts[ci], ip, ra, rb, weft_comm_error(c));
                        }
                    }
            }
        }
    }
    CHECKF(bad == 0, "rank %d of %d: %d of %d calls differ from the ring's", r, n, bad, calls);
    CHECKF(flat_mode(c) == (n > 1 ? 1 : -1), "rank %d of %d: board mode %d", r, n,
           flat_mode(c));
    /* the board's name went once every rank had mapped it */
    CHECKF(board_names(c->id) == 0, "rank %d of %d: board name left in /dev/shm", r, n);

    /* all-reduce of i32 and f64 sums against the closed form */
    for (int di = 0; di < 2; di++) {
        weft_dtype t = di ? WEFT_F64 : WEFT_I32;
        size_t cnt = limit(WEFT_COLL_ALLREDUCE, n, t), wrong = 0, len;
        one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_FLAT, t, WEFT_SUM, cnt, 0, 0, 99, a, &len);
        for (size_t i = 0; i < cnt; i++) {
            double want = 0;
            for (int q = 0; q < n; q++)
                want += val(t, WEFT_SUM, q, i, 99);
            double got = di ? ((double *)a)[i] : ((int32_t *)a)[i];
            wrong += got != want;
        }
        CHECKF(wrong == 0, "rank %d of %d: %zu wrong sums (%s)", r, n, wrong,
               weft_dtype_name(t));
    }

    /* floats that round: every rank gets the sum in rank order, to the bit */
    CHECKF(rank_order_wrong(c, 1000) == 0, "rank %d of %d: sums not in rank order", r, n);
    free(a);
    free(b);
}

/* ---- back to back, with delays and other algorithms in between ---------- */

static void soak(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), iters = *(int *)arg, bad = 0, first = -1;
    unsigned seed = 12345u + (unsigned)r * 7919u;
    int32_t s[64 * 8], o[64 * 8];
    for (int i = 0; i < iters; i++) {
        int cnt = 1 + i % 13, k = i % 6, root = (i / 6) % n, rc = 0;
        if (rand_r(&seed) % 16 == 0) {
            struct timespec ts = { 0, (long)(rand_r(&seed) % 200) * 1000 };
            nanosleep(&ts, NULL);
        }
        for (int j = 0; j < cnt * n; j++)
            s[j] = r * 1000 + i + j;
        weft_algo algo = i % 97 == 0                ? WEFT_ALGO_RING
                         : i % 89 == 0 && k == 0 ? WEFT_ALGO_RD
                                                 : WEFT_ALGO_FLAT;
        int wrong = 0;
        switch (k) {
        case 0: case 5: /* all-reduce, in place every other time */
            if (k == 5)
                memcpy(o, s, (size_t)cnt * sizeof *o);
            rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_ALLREDUCE, k == 5 ? o : s, o,
                                                       (size_t)cnt, WEFT_I32, WEFT_SUM, 0,
                                                       algo });
            for (int j = 0; j < cnt && !rc; j++)
                wrong += o[j] != n * (i + j) + 1000 * n * (n - 1) / 2;
            break;
        case 1:
            rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_BARRIER, NULL, NULL, 0,
                                                       WEFT_U8, WEFT_SUM, 0, algo });
            break;
        case 2:
            memcpy(o, s, (size_t)cnt * sizeof *o);
            rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_BROADCAST, o, o, (size_t)cnt,
                                                       WEFT_I32, WEFT_SUM, root, algo });
            for (int j = 0; j < cnt && !rc; j++)
                wrong += o[j] != root * 1000 + i + j;
            break;
        case 3:
            rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_REDUCE, s, o, (size_t)cnt,
                                                       WEFT_I32, WEFT_MAX, root, algo });
            for (int j = 0; j < cnt && !rc && r == root; j++)
                wrong += o[j] != (n - 1) * 1000 + i + j;
            break;
        case 4:
            rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_ALLGATHER, s, o, (size_t)cnt,
                                                       WEFT_I32, WEFT_SUM, 0, algo });
            for (int q = 0; q < n && !rc; q++)
                for (int j = 0; j < cnt; j++)
                    wrong += o[q * cnt + j] != q * 1000 + i + j;
            break;
        }
        if ((rc || wrong) && first < 0)
            first = i;
        bad += rc || wrong;
        if (rc)
            break;
    }
    CHECKF(bad == 0, "rank %d of %d: %d bad calls of %d, the first #%d (%s)", r, n, bad, iters,
           first, weft_comm_error(c));
}

/* ---- no rank leaves a barrier before every rank entered it ------------- */

static _Atomic int *entered; /* shared by the ranks: one counter per barrier */
#define BARRIERS 300

static void barriers(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), early = 0, failed = 0;
    unsigned seed = 777u + (unsigned)r;
    for (int i = 0; i < BARRIERS; i++) {
        if (rand_r(&seed) % 4 == 0) {
            struct timespec ts = { 0, (long)(rand_r(&seed) % 300) * 1000 };
            nanosleep(&ts, NULL);
        }
        atomic_fetch_add(&entered[i], 1);
        failed += weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_BARRIER,
                                                        .dtype = WEFT_U8,
                                                        .algo = WEFT_ALGO_FLAT }) != 0;
        early += atomic_load(&entered[i]) != n;
    }
    CHECKF(failed == 0 && early == 0, "rank %d of %d: %d barriers failed, %d left early", r, n,
           failed, early);
}

/* ---- failures ----------------------------------------------------------- */

static int flat_sum(weft_comm *c, int32_t *v)
{
    return weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_ALLREDUCE, .send = v,
                                                 .recv = v, .count = 1, .dtype = WEFT_I32,
                                                 .op = WEFT_SUM, .algo = WEFT_ALGO_FLAT });
}

/* The last rank dies between two calls: the others, waiting on the board,
 * fail with WEFT_EPEER naming it. */
static void death(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    int32_t v = 1;
    char name[32];
    CHECK(flat_sum(c, &v) == 0 && v == n);
    if (r == n - 1)
        raise(SIGKILL);
    v = 1;
    int rc = flat_sum(c, &v);
    snprintf(name, sizeof name, "rank %d", n - 1);
    CHECKF(rc == WEFT_EPEER, "rank %d: %d (%s)", r, rc, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), name) && strstr(weft_comm_error(c), "died"),
           "rank %d: error does not name the dead %s: %s", r, name, weft_comm_error(c));
}

/* The last rank dies before the board is made: the others fail, and
 * rank 0 removes the board's name (the caller checks that none is left). */
static void setup_death(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    int32_t v = 1;
    if (r == n - 1)
        raise(SIGKILL);
    int rc = flat_sum(c, &v);
    CHECKF(rc < 0, "rank %d: a call with a dead rank succeeded", r);
    if (r == 0)
        CHECKF(board_names(c->id) == 0, "rank 0: the board's name outlived a failed setup");
}

/* Rank 2 stops itself before the second call; ranks 0 and 1 time out
 * naming it, then rank 0 lets it go on (it may even finish the call: the
 * others' posts are on the board). */
static void stopped(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    int32_t v = 1, pids[3], me = (int32_t)getpid();
    CHECK(weft_allgather(c, &me, pids, 1, WEFT_I32) == 0);
    CHECK(flat_sum(c, &v) == 0 && v == 3);
    if (r == 2)
        raise(SIGSTOP);
    v = 1;
    int rc = flat_sum(c, &v);
    if (r == 0) { /* once rank 1 has given up too: rank 2 could still complete the call */
        struct timespec ts = { 1, 0 };
        nanosleep(&ts, NULL);
        kill((pid_t)pids[2], SIGCONT);
    }
    if (r < 2) {
        CHECKF(rc == WEFT_ETIMEDOUT, "rank %d: %d (%s)", r, rc, weft_comm_error(c));
        CHECKF(strstr(weft_comm_error(c), "ranks: 2") != NULL,
               "rank %d: error does not name rank 2: %s", r, weft_comm_error(c));
    }
}

/* Rank 1 never joins the second call: rank 0, aborted from another
 * thread, gives up with WEFT_EABORTED; rank 2 gives up too. */
static void aborted(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    int32_t v = 1;
    pthread_t th;
    CHECK(flat_sum(c, &v) == 0 && v == 3);
    if (r == 1) {
        struct timespec ts = { 2, 0 };
        nanosleep(&ts, NULL);
        return;
    }
    if (r == 0)
        pthread_create(&th, NULL, mp_abort_later, c);
    int rc = flat_sum(c, &v);
    CHECKF(rc < 0, "rank %d: an all-reduce without rank 1 succeeded", r);
    if (r == 0) {
        pthread_join(th, NULL);
        CHECKF(rc == WEFT_EABORTED && strstr(weft_comm_error(c), "abort"), "rank 0: %d %s",
               rc, weft_comm_error(c));
    }
}

/* Rank 0 cannot make the board (the file size limit forbids it): every
 * rank agrees to run flat calls with ordinary algorithms, correctly. */
static void no_board(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    if (r == 0) {
        struct rlimit rl = { 64 << 10, 64 << 10 };
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
    }
    int bad = 0;
    for (int i = 0; i < 50; i++) {
        int32_t v[3] = { r + i, 1, -r };
        bad += flat_sum(c, v) != 0 || v[0] != n * (n - 1) / 2 + n * i;
    }
    CHECKF(bad == 0, "rank %d: %d bad calls without a board (%s)", r, bad, weft_comm_error(c));
    CHECKF(flat_mode(c) == 0, "rank %d: board mode %d, not the fallback", r, flat_mode(c));
    CHECKF(board_names(c->id) == 0, "rank %d: board name left", r);
}

/* What flat does not take is refused before anything moves, and the
 * communicator goes on. */
static void refusals(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    size_t cnt = FLAT_SLOT / 4 + 1;
    int32_t *x = calloc(cnt * (size_t)n, sizeof *x), *y = calloc(cnt * (size_t)n, sizeof *y);
    for (size_t i = 0; i < cnt; i++)
        x[i] = 1;
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = x, .recv = y, .count = cnt,
                         .dtype = WEFT_I32, .op = WEFT_SUM, .algo = WEFT_ALGO_FLAT };
    a.kind = WEFT_COLL_REDUCE; /* all-reduce takes any size, the others a slot */
    int rc = weft_collective(c, &a);
    CHECKF(rc == WEFT_ENOTSUP, "rank %d: too large: %d", r, rc);
    CHECKF(strstr(weft_comm_error(c), "slot") != NULL, "rank %d: %s", r, weft_comm_error(c));
    a.kind = WEFT_COLL_ALLTOALL; /* fits alone, not times the ranks */
    a.count = FLAT_SLOT / 4 / (size_t)n + 1;
    CHECKF(weft_collective(c, &a) == WEFT_ENOTSUP, "rank %d: large all-to-all", r);
    a.kind = WEFT_COLL_ALLREDUCE;
    a.count = cnt;
    a.algo = WEFT_ALGO_AUTO;
    CHECKF(weft_collective(c, &a) == 0 && y[0] == n && y[cnt - 1] == n, "rank %d: auto: %s",
           r, weft_comm_error(c));
    a.count = 5;
    a.algo = WEFT_ALGO_FLAT;
    y[0] = 0;
    CHECKF(weft_collective(c, &a) == 0 && y[0] == n && y[4] == n,
           "rank %d: flat after a refusal: %s", r, weft_comm_error(c));
    free(x);
    free(y);
}

/* WEFT_SHM=0: forcing flat is refused; auto does not choose it. */
static void shm_off(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    int32_t v = 1;
    CHECKF(flat_sum(c, &v) == WEFT_ENOTSUP, "rank %d: flat without shared memory", r);
    v = 1;
    CHECKF(weft_allreduce(c, &v, &v, 1, WEFT_I32, WEFT_SUM) == 0 && v == n, "rank %d: %s", r,
           weft_comm_error(c));
    CHECKF(flat_mode(c) == -1, "rank %d: a board was made", r);
}

/* Rank 1 passes a count that sends its all-reduce down a schedule while
 * the others post on the board: a mismatch, not a wait for the timeout. */
static void count_mismatch(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    static float big[100000];
    int32_t v = 1;
    (void)arg;
    CHECK(flat_sum(c, &v) == 0 && v == 3);
    int rc = weft_allreduce(c, big, big, r == 1 ? 100000 : 1, WEFT_F32, WEFT_SUM);
    CHECKF(rc == WEFT_EMISMATCH, "rank %d: %d (%s)", r, rc, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), "allreduce(count=100000") &&
               strstr(weft_comm_error(c), "allreduce(count=1,"),
           "rank %d: error does not name both calls: %s", r, weft_comm_error(c));
}

/* auto: small all-reduces and barriers go to flat where it is priced
 * cheapest; results are right either way. */
static void automatic(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), bad = 0;
    for (int i = 0; i < 200; i++) {
        int64_t v[4] = { r, i, 1, 2 };
        bad += weft_allreduce(c, v, v, 4, WEFT_I64, WEFT_SUM) != 0 || v[0] != n * (n - 1) / 2 ||
               v[1] != (int64_t)n * i || v[2] != n;
        bad += weft_barrier(c) != 0;
    }
    CHECKF(bad == 0, "rank %d of %d: %d bad auto calls (%s)", r, n, bad, weft_comm_error(c));
    /* with the default cost constants, small calls on one host are flat's */
    if (!getenv("WEFT_TUNE") && !getenv("WEFT_TUNE_FILE"))
        CHECKF(flat_mode(c) == 1, "rank %d: auto never used the board", r);
}

/* auto's small path, ranks delayed at random (with more ranks than
 * cores, a wait yields only while a rank that shares its CPU has not
 * posted): right results, and every rank's board entry names the CPU it
 * last posted from. */
static void automatic_delays(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), bad = 0;
    unsigned seed = 777u + (unsigned)r * 131u;
    for (int i = 0; i < 300; i++) {
        if (rand_r(&seed) % 8 == 0) {
            struct timespec ts = { 0, (long)(rand_r(&seed) % 100) * 1000 };
            nanosleep(&ts, NULL);
        }
        int32_t v[2] = { r, i };
        bad += weft_allreduce(c, v, v, 2, WEFT_I32, WEFT_SUM) != 0 || v[0] != n * (n - 1) / 2 ||
               v[1] != n * i;
    }
    CHECKF(bad == 0, "rank %d of %d: %d bad auto calls (%s)", r, n, bad, weft_comm_error(c));
    if (getenv("WEFT_TUNE") || getenv("WEFT_TUNE_FILE") || flat_mode(c) != 1)
        return;
    for (int q = 0; q < n; q++) {
        uint32_t at = atomic_load(&c->flat->b.ranks[q].cpu);
        CHECKF(at >= 1, "rank %d: rank %d's board entry names no CPU", r, q);
    }
}

/* Sub-communicators have boards of their own, used in turn with the
 * parent's; non-blocking calls run flat on the worker thread. */
static void nested(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), bad = 0;
    weft_comm *half = NULL;
    CHECK(weft_comm_split(c, r % 2, r, &half) == 0 && half);
    if (!half)
        return;
    int hn = weft_comm_size(half);
    for (int i = 0; i < 300; i++) {
        int32_t v = r + i, w = 1;
        bad += flat_sum(half, &w) != 0 || w != hn;
        bad += flat_sum(c, &v) != 0 || v != n * (n - 1) / 2 + n * i;
    }
    weft_request *req[4];
    int32_t in[4] = { 1, 2, 3, 4 }, out[4][4];
    for (int j = 0; j < 4; j++)
        bad += weft_icollective(c, &(weft_coll_args){ WEFT_COLL_ALLGATHER, &in[j], out[j], 1,
                                                      WEFT_I32, WEFT_SUM, 0, WEFT_ALGO_FLAT },
                                &req[j]) != 0;
    for (int j = 0; j < 4; j++) {
        bad += weft_wait(req[j]) != 0;
        for (int q = 0; q < n; q++)
            bad += out[j][q] != j + 1;
    }
    CHECKF(bad == 0, "rank %d: %d bad calls on a split or in the background (%s | %s)", r, bad,
           weft_comm_error(c), weft_comm_error(half));
    CHECK(flat_mode(half) == (hn > 1 ? 1 : -1) && flat_mode(c) == 1);
    CHECK(weft_comm_destroy(half) == 0);
}

/* ---- large all-reduce, through the pipe ---------------------------------- */

/* Elements of a pipeline chunk. */
static size_t per_chunk(weft_dtype t) { return FLAT_CHUNK / weft_dtype_size(t); }

static void big_matrix(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), bad = 0, calls = 0;
    size_t cap = 3 * FLAT_CHUNK + 4096;
    char *a = malloc(cap), *b = malloc(cap);
    for (int di = 0; di < NDTYPES; di++) {
        weft_dtype t = dtypes[di];
        /* just past a slot (one chunk); two chunks and a bit (odd) */
        size_t counts[2] = { FLAT_SLOT / weft_dtype_size(t) + 1, 2 * per_chunk(t) + 37 };
        for (int op = 0; op < WEFT_OP_COUNT; op++)
            for (int ci = 0; ci < 2; ci++) {
                int ip = (op + ci + di) % 2;
                size_t la, lb;
                uint64_t salt = (uint64_t)(di * 7 + op * 3 + ci);
                int ra = one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_FLAT, t, (weft_op)op, counts[ci],
                             ip, 0, salt, a, &la);
                int rb = one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, t, (weft_op)op, counts[ci],
                             ip, 0, salt, b, &lb);
                calls++;
                if (ra || rb || la != lb || memcmp(a, b, la)) {
                    if (bad++ < 5)
                        fprintf(stderr, "rank %d/%d: large %s op %d count %zu inplace %d: "
                                        "flat %d ring %d (%s)\n",
                                r, n, weft_dtype_name(t), op, counts[ci], ip, ra, rb,
                                weft_comm_error(c));
                }
            }
    }
    CHECKF(bad == 0, "rank %d of %d: %d of %d large calls differ from the ring's", r, n, bad,
           calls);
    CHECKF(board_names(c->id) == 0, "rank %d of %d: a name left in /dev/shm", r, n);

    /* floats that round: the sum in rank order, to the bit, on every rank */
    CHECKF(rank_order_wrong(c, per_chunk(WEFT_F32) * 2 + 1001) == 0,
           "rank %d of %d: large sums not in rank order", r, n);
    free(a);
    free(b);
}

/* Large all-reduces of varying counts, in place every other time, among
 * small flat calls and ring calls, ranks delayed at random. */
static void big_soak(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), iters = *(int *)arg, bad = 0, first = -1;
    unsigned seed = 4242u + (unsigned)r * 31u;
    size_t most = 3 * per_chunk(WEFT_I32) + 100;
    int32_t *s = malloc(most * sizeof *s), *o = malloc(most * sizeof *o);
    for (int i = 0; i < iters; i++) {
        size_t cnt = i % 5 == 4 ? 1 + (size_t)(i % 7)
                                : FLAT_SLOT / 4 + 1 + (size_t)(i * 7919) % (most - FLAT_SLOT / 4 - 1);
        int inplace = i % 2, rc, wrong = 0;
        if (rand_r(&seed) % 4 == 0) {
            struct timespec ts = { 0, (long)(rand_r(&seed) % 500) * 1000 };
            nanosleep(&ts, NULL);
        }
        for (size_t j = 0; j < cnt; j++)
            s[j] = r * 1000 + i + (int32_t)j;
        if (inplace)
            memcpy(o, s, cnt * sizeof *o);
        rc = weft_collective(c, &(weft_coll_args){ WEFT_COLL_ALLREDUCE, inplace ? o : s, o, cnt,
                                                   WEFT_I32, WEFT_SUM, 0,
                                                   i % 11 == 10 ? WEFT_ALGO_RING
                                                                : WEFT_ALGO_FLAT });
        for (size_t j = 0; j < cnt && !rc; j++)
            wrong += o[j] != n * (i + (int32_t)j) + 1000 * n * (n - 1) / 2;
        if ((rc || wrong) && first < 0)
            first = i;
        bad += rc || wrong;
        if (rc)
            break;
    }
    CHECKF(bad == 0, "rank %d of %d: %d bad calls of %d, the first #%d (%s)", r, n, bad, iters,
           first, weft_comm_error(c));
    free(s);
    free(o);
}

/* The last rank is killed while large all-reduces run: the others fail
 * with WEFT_EPEER naming it, whatever step they were waiting for. */
static void big_death(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), rc = 0, i;
    size_t cnt = 8 * per_chunk(WEFT_F32) + 5;
    float *x = calloc(cnt, sizeof *x);
    char name[32];
    pthread_t th;
    CHECK(one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_FLAT, WEFT_F32, WEFT_SUM, 1, 0, 0, 0, name,
              &(size_t){ 0 }) == 0);
    if (r == n - 1) {
        intptr_t delay_ms = 20 + getpid() % 7;
        pthread_create(&th, NULL, mp_kill_later, (void *)delay_ms);
    }
    for (i = 0; i < 100000 && !rc; i++)
        rc = weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_ALLREDUCE, .send = x,
                                                   .recv = x, .count = cnt, .dtype = WEFT_F32,
                                                   .op = WEFT_SUM, .algo = WEFT_ALGO_FLAT });
    snprintf(name, sizeof name, "rank %d", n - 1);
    CHECKF(rc == WEFT_EPEER, "rank %d: %d after %d calls (%s)", r, rc, i, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), name) && strstr(weft_comm_error(c), "died"),
           "rank %d: error does not name the dead %s: %s", r, name, weft_comm_error(c));
    free(x);
}

/* Rank 1's large count meets the others' small one on the board. */
static void big_mismatch(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t cnt = r == 1 ? 100000 : 1;
    float *x = calloc(100000, sizeof *x);
    int32_t v = 1;
    CHECK(flat_sum(c, &v) == 0 && v == 3);
    int rc = weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_ALLREDUCE, .send = x,
                                                   .recv = x, .count = cnt, .dtype = WEFT_F32,
                                                   .op = WEFT_SUM, .algo = WEFT_ALGO_FLAT });
    CHECKF(rc == WEFT_EMISMATCH, "rank %d: %d (%s)", r, rc, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), "allreduce(count=100000") &&
               strstr(weft_comm_error(c), "allreduce(count=1,"),
           "rank %d: error does not name both calls: %s", r, weft_comm_error(c));
    free(x);
}

/* Rank 0 can make the board but not the pipe: large all-reduces run
 * with ordinary algorithms on every rank, small ones on the board. */
static void no_pipe(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), bad = 0;
    size_t cnt = 2 * per_chunk(WEFT_I32) + 3;
    int32_t *x = malloc(cnt * sizeof *x), v = 1;
    bad += flat_sum(c, &v) != 0 || v != n; /* the board, before the limit */
    if (r == 0) {
        struct rlimit rl = { 1 << 20, 1 << 20 };
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
    }
    for (int i = 0; i < 5; i++) {
        for (size_t j = 0; j < cnt; j++)
            x[j] = r + i + (int32_t)j;
        int rc = weft_collective(c, &(weft_coll_args){ .kind = WEFT_COLL_ALLREDUCE, .send = x,
                                                       .recv = x, .count = cnt,
                                                       .dtype = WEFT_I32, .op = WEFT_SUM,
                                                       .algo = WEFT_ALGO_FLAT });
        for (size_t j = 0; j < cnt && !rc; j++)
            bad += x[j] != n * (n - 1) / 2 + n * (i + (int32_t)j);
        bad += rc != 0;
        v = 1;
        bad += flat_sum(c, &v) != 0 || v != n;
    }
    CHECKF(bad == 0, "rank %d: %d bad calls without a pipe (%s)", r, bad, weft_comm_error(c));
    CHECKF(flat_mode(c) == 1, "rank %d: board mode %d", r, flat_mode(c));
    CHECKF(board_names(c->id) == 0, "rank %d: a name left", r);
    free(x);
}

TEST_INIT
{
    unsetenv("WEFT_SHM");
    unsetenv("WEFT_ALGO");
}

/* fn at from, from + step, ... <= 8 ranks */
static void ranks(int from, int step, mp_fn fn, void *arg, const char *what)
{
    for (int n = from; n <= 8; n += step)
        if (mp_size_kept(n) || step > 1)
            CHECKF(mp_run(n, 60, fn, arg) == 0, "%s at %d ranks", what, n);
}

TEST(matrix) { ranks(1, 1, matrix, NULL, "matrix"); }

TEST(soak)
{
    int iters = 3000;
    ranks(2, 3, soak, &iters, "3000 calls back to back");
}

/* no polling: every wait sleeps on the futex */
TEST(soak_no_spin)
{
    int iters = 3000;
    setenv("WEFT_SPIN_US", "0", 1);
    CHECKF(mp_run(5, 60, soak, &iters) == 0, "back to back at 5 ranks, WEFT_SPIN_US=0");
    unsetenv("WEFT_SPIN_US");
}

TEST(nested)
{
    CHECKF(mp_run(4, 60, nested, NULL) == 0, "split and non-blocking at 4 ranks");
    CHECKF(mp_run(3, 60, nested, NULL) == 0, "split and non-blocking at 3 ranks");
}

TEST(barriers)
{
    entered = mmap(NULL, BARRIERS * sizeof *entered, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(entered != MAP_FAILED);
    if (entered == MAP_FAILED)
        return;
    memset((void *)entered, 0, BARRIERS * sizeof *entered);
    CHECKF(mp_run(5, 60, barriers, NULL) == 0, "barrier semantics at 5 ranks");
    memset((void *)entered, 0, BARRIERS * sizeof *entered);
    CHECKF(mp_run(8, 60, barriers, NULL) == 0, "barrier semantics at 8 ranks");
    munmap((void *)entered, BARRIERS * sizeof *entered);
}

TEST(death) { CHECKF(mp_run(4, 60, death, NULL) == 1, "a dead rank at 4 ranks (only it may fail)"); }
TEST(setup_death) { CHECKF(mp_run(3, 60, setup_death, NULL) == 1, "a rank dead before the board is made"); }
TEST(stopped) { CHECKF(mp_run(3, 1, stopped, NULL) == 0, "a stopped rank at 3 ranks"); }
TEST(aborted) { CHECKF(mp_run(3, 1, aborted, NULL) == 0, "abort at 3 ranks"); }
TEST(no_board) { CHECKF(mp_run(4, 60, no_board, NULL) == 0, "no board at 4 ranks"); }
TEST(count_mismatch) { CHECKF(mp_run(3, 60, count_mismatch, NULL) == 0, "count mismatch, flat against a schedule"); }
TEST(refusals) { CHECKF(mp_run(3, 60, refusals, NULL) == 0, "refusals at 3 ranks"); }
TEST(automatic) { CHECKF(mp_run(4, 60, automatic, NULL) == 0, "auto at 4 ranks"); }
TEST(automatic_delays)
{
    CHECKF(mp_run(8, 60, automatic_delays, NULL) == 0, "auto at 8 ranks, delays");
    CHECKF(mp_run(3, 60, automatic_delays, NULL) == 0, "auto at 3 ranks, delays");
}

TEST(big_matrix) { ranks(1, 1, big_matrix, NULL, "large all-reduce"); }

TEST(big_soak)
{
    int big_iters = 200;
    ranks(2, 3, big_soak, &big_iters, "200 large calls back to back");
}

TEST(big_soak_no_spin)
{
    int big_iters = 200;
    setenv("WEFT_SPIN_US", "0", 1);
    CHECKF(mp_run(4, 60, big_soak, &big_iters) == 0, "large back to back, WEFT_SPIN_US=0");
    unsetenv("WEFT_SPIN_US");
}

TEST(big_death) { CHECKF(mp_run(4, 60, big_death, NULL) == 1, "a rank killed in a large all-reduce"); }
TEST(big_mismatch) { CHECKF(mp_run(3, 60, big_mismatch, NULL) == 0, "large against small count on the board"); }
TEST(no_pipe) { CHECKF(mp_run(4, 60, no_pipe, NULL) == 0, "no pipe at 4 ranks"); }

TEST(shm_off)
{
    setenv("WEFT_SHM", "0", 1);
    CHECKF(mp_run(3, 60, shm_off, NULL) == 0, "WEFT_SHM=0 at 3 ranks");
    unsetenv("WEFT_SHM");
}

/* after the cases that kill ranks: none left a board name behind */
TEST(no_orphan_boards)
{
    int left = orphan_boards();
    CHECKF(left == 0, "%d board name(s) of dead ranks left in /dev/shm", left);
}
