/* A cluster's description (docs/CPN.md, "weft-cpn-cluster/1"): its hosts,
 * its metrics each with unit, source and statistic (the CATS metric
 * levels: L0 raw values), and the scores made of them (L1 per category,
 * L2 overall). What probe writes, the registry keeps and plan reads. */
#ifndef WEFT_CPN_CLUSTER_H
#define WEFT_CPN_CLUSTER_H

#include "cpn/cpn_json_out.h"

#include <stddef.h>

#define CPN_NAME_CAP 64
#define CPN_MAX_METRICS 32

typedef struct {
    char name[CPN_NAME_CAP];
    char addr[CPN_NAME_CAP];
    int cores;
    double mem_bytes;
} cpn_host;

typedef struct {
    char name[40];
    double value;
    char text[40];     /* a value that is a string (an ISO time); "" for a number */
    char unit[24];
    char source[12];   /* measured, declared or nominal */
    char statistic[8]; /* median, max, mean or last */
    char at[32];       /* ISO-8601, UTC */
} cpn_metric;

enum { CPN_L1_COMPUTE = 0, CPN_L1_NETWORK, CPN_L1_PRICE, CPN_L1_CARBON, CPN_L1_N };

typedef struct {
    char name[CPN_NAME_CAP];
    char launcher[16];     /* slurm, ssh or local */
    char slurm_conf[256];
    int nhosts;
    cpn_host *hosts;
    int nmetrics;
    cpn_metric metrics[CPN_MAX_METRICS];
    double l1[CPN_L1_N];   /* < 0: the category has no metric to score */
    /* The job the train_* metrics were timed on (probe --job): its model
     * spec as weft_model_config_format writes it, and its sequence; "": none */
    char calib_model[160];
    int calib_seq;
    double l2;
} cpn_cluster;

void cpn_cluster_free(cpn_cluster *c);
/* The metric called name, or NULL. */
const cpn_metric *cpn_metric_find(const cpn_cluster *c, const char *name);
/* Its value, or dflt when absent or a string. */
double cpn_metric_value(const cpn_cluster *c, const char *name, double dflt);
/* Sets (adds or replaces) a metric; WEFT_EINVAL when full. */
int cpn_metric_set(cpn_cluster *c, const cpn_metric *m);
/* Total cores over the hosts. */
int cpn_cluster_cores(const cpn_cluster *c);
/* now as ISO-8601 UTC, "2026-12-06T12:00:00Z". */
void cpn_iso_now(char *buf, size_t cap);

/* The L1 scores and L2 from the metrics (cpn_score.c). */
void cpn_cluster_score(cpn_cluster *c);

/* Reads one description from a parsed JSON object (core/json.h's
 * json_value, passed as void to keep json.h out of this header); err
 * names what is wrong. */
int cpn_cluster_from_json(const void *obj, cpn_cluster *out, char *err, size_t errlen);
/* Reads a text holding one description or an array of them. *out is
 * malloc'd; WEFT_EINVAL/WEFT_EIO with err. */
int cpn_clusters_parse(const char *text, size_t len, cpn_cluster **out, int *n, char *err,
                       size_t errlen);
/* Writes c as one JSON object into w (key NULL at the top or in an array). */
void cpn_cluster_write(cpn_jo *w, const char *key, const cpn_cluster *c);

/* A whole file into a malloc'd NUL-terminated buffer; WEFT_EIO. */
int cpn_read_file(const char *path, char **text, size_t *len);
/* text to path ("-" or NULL: stdout) with a newline; WEFT_EIO. */
int cpn_write_file(const char *path, const char *text);

#endif
