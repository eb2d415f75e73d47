/* Many ranks on one host, as a user with a big server starts them: one a
 * core.
 *
 * 1. every_algo: 64 ranks (24 under sanitizers) run an all-reduce, a
 *    broadcast, an all-gather and an all-to-all under every algorithm that
 *    does the collective, with the right results. At 24 ranks a full-mesh
 *    exchange (direct's, naive's, any all-to-all's) once pushed members'
 *    connections out of a 16-slot table of handshakes and read as a dead
 *    peer; at 64, rings of 2 MiB to every peer took 8 GiB of memory.
 * 2. out_of_descriptors: a rank whose RLIMIT_NOFILE is too small for an
 *    all-to-all (a socket each way to every peer) fails it with an error
 *    that names the limit; the others fail it or the barrier after it
 *    (one may have had all it needed before the failure); none says a
 *    peer died. */
#include "mp.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/resource.h>

TEST_TIMEOUT(240);

static const weft_algo algos[] = { WEFT_ALGO_AUTO, WEFT_ALGO_NAIVE, WEFT_ALGO_RING,
                                   WEFT_ALGO_TREE, WEFT_ALGO_RD, WEFT_ALGO_RABENSEIFNER,
                                   WEFT_ALGO_HIER, WEFT_ALGO_DIRECT, WEFT_ALGO_FLAT };
#define NALGO (int)(sizeof algos / sizeof algos[0])
#define COUNT 1000 /* elements a rank: more than a slice each at 64 ranks */

/* rc of a collective the algorithm may not do: 1 ran (CHECK its result),
 * 0 not done by this algorithm. */
static int ran(weft_comm *c, int rc, const char *what)
{
    if (rc == WEFT_ENOTSUP)
        return 0;
    CHECKF(rc == 0, "rank %d, %s, %s: %s", weft_comm_rank(c), weft_algo_name(weft_comm_algo(c)),
           what, weft_comm_error(c));
    return rc == 0;
}

static void every_algo(weft_comm *c, void *arg)
{
    int P = weft_comm_size(c), r = weft_comm_rank(c);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)COUNT * (size_t)P);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)COUNT * (size_t)P);
    (void)arg;
    for (int k = 0; k < NALGO && x && y; k++) {
        int ok = 1;
        weft_comm_set_algo(c, algos[k]);
        for (int i = 0; i < COUNT; i++)
            x[i] = r + i;
        if (ran(c, weft_allreduce(c, x, y, COUNT, WEFT_I32, WEFT_SUM), "allreduce")) {
            for (int i = 0; i < COUNT; i++)
                ok &= y[i] == P * i + P * (P - 1) / 2;
            CHECKF(ok, "rank %d, %s: all-reduce", r, weft_algo_name(algos[k]));
        }
        x[0] = r == P - 1 ? 12345 : -1;
        if (ran(c, weft_broadcast(c, x, 1, WEFT_I32, P - 1), "broadcast"))
            CHECKF(x[0] == 12345, "rank %d, %s: broadcast", r, weft_algo_name(algos[k]));
        x[0] = r;
        x[1] = -r;
        if (ran(c, weft_allgather(c, x, y, 2, WEFT_I32), "allgather")) {
            ok = 1;
            for (int q = 0; q < P; q++)
                ok &= y[2 * q] == q && y[2 * q + 1] == -q;
            CHECKF(ok, "rank %d, %s: all-gather", r, weft_algo_name(algos[k]));
        }
        for (int q = 0; q < P; q++)
            x[q] = r * 1000 + q;
        if (ran(c, weft_alltoall(c, x, y, 1, WEFT_I32), "alltoall")) {
            ok = 1;
            for (int q = 0; q < P; q++)
                ok &= y[q] == q * 1000 + r;
            CHECKF(ok, "rank %d, %s: all-to-all", r, weft_algo_name(algos[k]));
        }
    }
    free(x);
    free(y);
}

TEST(every_algo)
{
    CHECK(mp_run(mp_thin() ? 24 : 64, 120, every_algo, NULL) == 0);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory's own */
}

#define STARVED 5 /* the rank left a few descriptors short */

static void starved(weft_comm *c, void *arg)
{
    int P = weft_comm_size(c), r = weft_comm_rank(c);
    int32_t x[64], y[64];
    (void)arg;
    for (int q = 0; q < P; q++)
        x[q] = q;
    /* every rank past init (which would fail otherwise), with connections
     * to its ring neighbours only; a rank's barrier ends before its
     * neighbours', so one of theirs may fail with rank STARVED's error */
    weft_comm_set_algo(c, WEFT_ALGO_RING);
    int rc = weft_barrier(c);
    CHECKF(rc == 0 || r != STARVED, "rank %d: barrier: %s", r, weft_comm_error(c));
    if (rc == 0 && r == STARVED) {
        /* a socket each way to each of P - 1 peers does not fit in 8 more */
        struct rlimit low;
        CHECK(getrlimit(RLIMIT_NOFILE, &low) == 0);
        low.rlim_cur = (rlim_t)open_fds() + 8;
        CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    }
    weft_comm_set_algo(c, WEFT_ALGO_NAIVE);
    if (rc == 0)
        rc = weft_alltoall(c, x, y, 1, WEFT_I32);
    /* A peer whose data the starved rank sent before it ran out, and
     * whose own reached the starved rank's socket queue, is done before the
     * failure: its next collective must learn of it. */
    if (rc == 0 && r != STARVED)
        rc = weft_barrier(c);
    const char *e = weft_comm_error(c);
    CHECKF(rc != 0, "rank %d: an all-to-all with too few descriptors succeeded", r);
    CHECKF(!strstr(e, "died"), "rank %d blames a peer: %s", r, e);
    if (r == STARVED)
        CHECKF(strstr(e, "RLIMIT_NOFILE"), "rank %d does not name the limit: %s", r, e);
}

TEST(out_of_descriptors)
{
    CHECK(mp_run(24, 30, starved, NULL) == 0);
}
