/* weft's simulator: runs the schedules the library runs (coll/), over a
 * topology model (sim/topo.h) instead of sockets, and says how long they
 * take. See docs/SIMULATION.md for the model and its limits. */
#ifndef WEFT_SIM_SIM_H
#define WEFT_SIM_SIM_H

#include "coll/sched/sched.h"
#include "sim/topo.h"

/* Algorithms the simulator knows (sim_algo_extra in sim/topo.h): the
 * weft_algo values whose table entry (coll/algo_table.h) builds schedules,
 * for the collectives it builds them for (sched_has); the parameter server
 * pattern, which the library runs in ps/ rather than as a collective
 * schedule; and NCCL's structures, which only the simulator runs. */

typedef struct {
    const sim_topo *topo;
    int algo;              /* weft_algo or SIM_ALGO_PS */
    weft_coll_kind kind;
    int nranks;
    uint64_t count;        /* elements per rank, as the API counts them */
    uint32_t esize;        /* bytes per element */
    uint64_t chunk_bytes;  /* 0: the generators' default */
    int ps_servers;        /* SIM_ALGO_PS: servers, on ranks 0..n-1 (0: 1) */
    int no_fold;           /* 1: simulate every rank even when symmetric */
    uint64_t op_budget;    /* ops simulated at most before extrapolating in
                              the count; 0: 1 million */
    const int32_t *host;   /* node of every rank, as the generators see it;
                              NULL: sim_run fills it from the topology */
    int proto;             /* enum sim_protocol, for algorithms with hop lines */
    int channels;          /* of the NCCL schedules; 0: the topology's */
    int calls;             /* back to back, as a benchmark times them (each
                              rank starts the next when its part of the last
                              is done); 0: one. The result is per call: the
                              whole run's time and bytes over calls */
} sim_job;

typedef struct {
    double time_us;        /* until the last rank finishes */
    double algbw_GBps;     /* size / time; size = count * esize, times p for
                              the collectives whose count is per rank (the
                              whole buffer, as nccl-tests counts it) */
    double busbw_GBps;     /* algbw times nccl-tests' bus factor */
    double util[LC_COUNT];     /* mean utilisation of the class's links (-1: none) */
    double util_max[LC_COUNT]; /* the busiest link of the class */
    double bytes[LC_COUNT];    /* carried by all links of the class (all ranks) */
    int fold;              /* ranks simulated stand for p/fold ranks each; 0: none */
    int fold_exact;        /* every op identical up to the shift */
    double fold_err_us;    /* estimated time error of an inexact fold */
    int extrapolated;      /* times from two smaller counts, linearly */
    uint64_t count_sim[2];
    uint64_t ops, events;  /* simulated (both runs when extrapolated) */
    uint32_t max_rounds;   /* longest schedule, in rounds */
    int proto;             /* the protocol simulated; 0: the algorithm has none */
} sim_result;

/* Builds rank p->rank's schedule of the job's algorithm (as sched_build
 * does, for every algorithm the simulator knows). */
int sim_sched_build(weft_sched *s, const sim_job *j, const sched_params *p);
/* The parameter-server all-reduce: workers push shards to servers, servers
 * sum them, workers pull the sums; chunked and pipelined. */
int sim_sched_ps(weft_sched *s, const sched_params *p, int nservers);

int sim_run(const sim_job *job, sim_result *out, char *err, size_t errlen);

/* Whether the simulator can build algo's schedule of kind. */
int sim_algo_has(int algo, weft_coll_kind kind);
/* NCCL's own cost model of an all-reduce (docs/SIMULATION.md): fixed
 * cost + hops x hop cost + bytes / bandwidth, from the topology's hop and
 * protocol lines; what the simulator uses to choose a protocol, and a
 * reference beside it in `weft-sim validate`. WEFT_ENOTSUP when algo has
 * no hop line for proto. */
int sim_nccl_model(const sim_topo *t, int algo, int proto, int p, double bytes, double *us);
/* nccl-tests' bus bandwidth factor for a collective over p ranks. */
double sim_bus_factor(weft_coll_kind k, int p);

#endif
