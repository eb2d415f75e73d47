/* The service layer's planner (docs/CPN.md, "Plan"): every subset of the
 * clusters, ranks in each, and cross-cluster sync, priced by one cost
 * model; the best under the job's QoS, and why the others lost. */
#ifndef WEFT_CPN_PLAN_H
#define WEFT_CPN_PLAN_H

#include "cpn/cpn_cluster.h"

#define CPN_PLAN_MAX_CLUSTERS 8
#define CPN_PLAN_MAX_REJECTED 16

typedef enum { CPN_SYNC_FULL = 0, CPN_SYNC_HIER, CPN_SYNC_DILOCO, CPN_SYNC_STREAMING } cpn_sync;
typedef enum { CPN_OBJ_TIME = 0, CPN_OBJ_COST, CPN_OBJ_CARBON } cpn_objective;

typedef struct {
    double flops_per_sample; /* a training step's forward and backward, one sample */
    double grad_bytes;       /* what one all-reduce of the gradients moves (fp32) */
    int global_batch;
    long steps;
    /* QoS; <= 0: none */
    double deadline_s, budget, carbon_cap_g;
    int min_clusters, max_clusters;
    cpn_objective objective;
    int max_compress;        /* 0 none, 1 bf16, 2 int8: the most the job allows */
    int fixed_h;             /* DiLoCo's H from the job; 0: chosen */
    double period_s;         /* the job's outer period in seconds ("H": "30s"),
                                turned into steps by the predicted step; 0: none */
    double now;              /* seconds since the epoch, for availability windows */
    /* the model spec (weft_model_config_format's) and sequence: a cluster
     * whose train_* metrics were timed on the same is priced by them */
    char model[160];
    int seq;
} cpn_job_model;

typedef struct {
    char from[CPN_NAME_CAP], to[CPN_NAME_CAP];
    double bandwidth_bps, rtt_ms, loss;
} cpn_link;

typedef struct {
    int n;                   /* clusters in the plan */
    int idx[CPN_PLAN_MAX_CLUSTERS];   /* into the clusters given */
    int ranks[CPN_PLAN_MAX_CLUSTERS];
    int batch[CPN_PLAN_MAX_CLUSTERS]; /* shares of the global batch */
    cpn_sync sync;
    int H;                   /* outer period in steps (diloco, streaming) */
    int T;                   /* streaming: steps its outer reduction runs beside */
    int compress;            /* 0 none, 1 bf16, 2 int8 (cross-cluster traffic) */
    double step_s, total_s, cost, carbon_g;
    double compute_s, intra_s, wan_s; /* the step's parts */
    int links_assumed;       /* a pair had no measured link: nominal figures */
    int given;               /* 1: price batch and H as set (a plan priced as it
                                stands, weft-cpn plan --price); 0: choose them */
    int calibrated;          /* clusters whose compute was priced from the job's
                                measured step (the others from the peak) */
    char why[160];           /* "" when it meets the QoS; else the first it breaks */
} cpn_candidate;

typedef struct {
    cpn_candidate best;      /* best.n == 0: nothing meets the QoS */
    int nrejected;
    cpn_candidate rejected[CPN_PLAN_MAX_REJECTED];
    long evaluated;
} cpn_plan_result;

/* Prices one candidate (idx, ranks, sync, H, compress set): shares,
 * times, cost, carbon, and why it breaks the QoS ("" if it does not). */
void cpn_plan_price(const cpn_cluster *cs, const cpn_link *links, int nlinks,
                    const cpn_job_model *job, cpn_candidate *c);
/* Whether a is better than b under the objective (both meeting the QoS). */
int cpn_plan_better(const cpn_job_model *job, const cpn_candidate *a, const cpn_candidate *b);
/* Every subset, ranks and sync; WEFT_EINVAL for more clusters than
 * CPN_PLAN_MAX_CLUSTERS or a job that makes no sense. */
int cpn_plan_search(const cpn_cluster *cs, int n, const cpn_link *links, int nlinks,
                    const cpn_job_model *job, cpn_plan_result *out);
const char *cpn_sync_name(cpn_sync s);
const char *cpn_compress_name(int k);
/* A short description of a candidate, "a:4+b:2 diloco H=50 bf16". */
void cpn_candidate_name(const cpn_cluster *cs, const cpn_candidate *c, char *buf, size_t cap);

#endif
