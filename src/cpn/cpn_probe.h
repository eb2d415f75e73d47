/* What probe measures on every rank of a cluster and how it turns the
 * ranks' figures into one description (weft-cpn probe). */
#ifndef WEFT_CPN_PROBE_H
#define WEFT_CPN_PROBE_H

#include "cpn/cpn_calib.h"
#include "cpn/cpn_cluster.h"

#include "weft.h"

/* One rank's measurements, exchanged as bytes. */
typedef struct {
    cpn_host host;
    double fp32_gflops, bf16_gflops; /* one thread's peak; <= 0: unknown */
    int fp32_declared;               /* WEFT_PEAK_GFLOPS set it */
    cpn_calib calib;                 /* the job's model timed (probe --job); 0: not */
} cpn_rank_facts;

/* This rank's facts (peaks from the engine's per-host cache, measured
 * when it has none). */
int cpn_probe_rank(cpn_rank_facts *out);
/* The all-reduce constants on c (every rank calls it): alpha per round
 * in microseconds and the bus bandwidth in Gbit/s, each the median of a
 * few short batches, the slowest rank's time in each. */
int cpn_probe_allreduce(weft_comm *c, double *alpha_us, double *beta_gbps);
/* The description from every rank's facts: hosts merged by name and
 * address, peaks the median over the ranks (and the job's step times,
 * train_sample_s, train_fixed_s and train_update_s, where timed); alpha_us < 0: no
 * measurement (one rank), the library's nominal constants instead. */
int cpn_probe_describe(const cpn_rank_facts *facts, int n, double alpha_us, double beta_gbps,
                       cpn_cluster *out);
/* "key=value" declared over the description; err says what is wrong. */
int cpn_probe_declare(cpn_cluster *c, const char *kv, char *err, size_t errlen);

#endif
