/* A plan (weft-cpn-plan/1, docs/CPN.md) as weft-cpn run and status need
 * it: the job's training arguments, the cross-cluster sync as a --sync
 * word, and each part's cluster, launcher, ranks, batch share and speed. */
#ifndef WEFT_CPN_CPN_RUN_PLAN_H
#define WEFT_CPN_CPN_RUN_PLAN_H

#include "core/json.h"

#include <stddef.h>

#define CPN_RUN_JOINERS 4 /* clusters that may join a running plan */

typedef struct {
    char cluster[64], launcher[16], slurm_conf[1024];
    char host[256];   /* the first of hosts (ssh: where the part runs); "" none */
    int ranks, batch;
    double speed;
} cpn_part;

typedef struct {
    char model[256], data[1024];
    long steps;
    int global_batch, seq;   /* seq 0: not given */
    char sync[96];           /* --sync's word for the plan's sync */
    char compress[32];       /* "" or "none": not compressed */
    char **train_args;       /* the intent's train_args */
    int ntrain;
    cpn_part *parts;
    int nparts;
    int H;                   /* diloco and streaming: the outer period; 0 */
    double step_s, total_s;  /* predicted; 0: not given */
    double wan_s;            /* predicted: the step's share of the outer sync */
    int cap;                 /* parts there is room for (a joiner takes one) */
    int nlaunch;             /* the plan's own parts; those after them joined */
} cpn_plan;

/* Reads and checks path; err (cap bytes) says what is wrong, with the
 * byte offset for bad JSON. 0 or a WEFT_E* code. */
int cpn_plan_read(const char *path, cpn_plan *p, char *err, size_t cap);
void cpn_plan_free(cpn_plan *p);
/* One of a plan's "parts" (an object: cluster, launcher, slurm_conf,
 * hosts, ranks, batch, speed), checked; err says what is wrong. */
int cpn_part_read(const json_value *v, cpn_part *pt, char *err, size_t cap);

#endif
