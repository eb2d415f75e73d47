/* The direct algorithm's cost, in closed form: the latency of its
 * exchanges plus the bytes each rank reads from the others
 * (process_vm_readv) and reduces. */
#include "coll/local/direct.h"

#include <stdlib.h>
#include <string.h>

/* Measured on the 2-core build machine: a byte read from another process
 * and reduced from cache costs DIRECT_BETA_FACTOR times the model's
 * shared-memory beta (CPU time of a 64 MiB all-reduce at 4 ranks, all
 * ranks together, perf stat: 90-95 ms against the ring's 100-110 ms; the
 * ring already reads its all-gather half by single copy), and each read
 * call DIRECT_CALL seconds (a small process_vm_readv: 0.5 to 1 us). With
 * these, auto picks direct from 256 KiB (2, 4 ranks) or 1 MiB (8 ranks)
 * up; bench/direct.sh saw it ahead from 16 KiB (2, 4) or 64 KiB (8) up
 * and level with the ring from about 16 MiB. */
#define DIRECT_BETA_FACTOR 0.85
#define DIRECT_CALL 1e-6
#define DIRECT_PIECE (256.0 * 1024)

static double ceil_div(double a, double b) { return a <= 0 ? 0 : (double)(uint64_t)((a + b - 1) / b); }

int direct_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
                uint64_t bytes, uint32_t esize, double *seconds)
{
    int p = l->nranks;
    if (l->nhosts > 1 || !c->shm)
        return WEFT_ENOTSUP;
    /* the kinds measured to win (bench/direct.sh); the others run only
     * when asked for by name */
    if (kind != WEFT_COLL_ALLREDUCE && kind != WEFT_COLL_REDUCE_SCATTER &&
        kind != WEFT_COLL_ALLGATHER)
        return WEFT_ENOTSUP;
    (void)esize;
    if (p < 2) {
        *seconds = 0;
        return 0;
    }
    int over = c->cores > 0 && p > c->cores;
    double al = over ? c->alpha_over : c->alpha, m = over ? c->msg_over : c->msg;
    double n = (double)bytes, q = p - 1, s = n / p, bc = c->beta * DIRECT_BETA_FACTOR;
    double reads, reduced = 0, calls, nbar = 1;
    switch (kind) {
    case WEFT_COLL_ALLREDUCE:
        reads = 2 * q * s;
        reduced = q * s;
        calls = q * ceil_div(s, DIRECT_PIECE) + q;
        nbar = 2;
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        reads = reduced = q * n;
        calls = q * ceil_div(n, DIRECT_PIECE);
        break;
    default: /* all-gather */
        reads = q * n;
        calls = q;
        break;
    }
    double work = reads * bc + reduced * c->gamma + calls * DIRECT_CALL;
    /* the exchange, then per step of reads a status exchange (a barrier
     * that carries each rank's verdict): one round of p - 1 messages, or
     * beyond DIRECT_MESH_MAX ranks log2(p) rounds of one */
    double rounds = 0;
    for (int k = 1; k < p; k *= 2)
        rounds++;
    double xchg = p <= DIRECT_MESH_MAX ? al + (p - 2) * m : rounds * al;
    double path = (1 + nbar) * xchg + work;
    double t = path;
    if (over && work * p / c->cores > t)
        t = work * p / c->cores;
    *seconds = t + 1e-3 * path;
    return 0;
}
