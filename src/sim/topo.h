/* Topology model of the simulator: ranks on nodes, nodes in pods (a leaf
 * switch or a scalable unit), pods in clusters, clusters joined by WAN
 * links; one class of link per level, each with a latency, a bandwidth and
 * a per-message overhead, plus constants per algorithm (its protocol) and
 * the speed of local reductions. Text format: docs/SIMULATION.md. */
#ifndef WEFT_SIM_TOPO_H
#define WEFT_SIM_TOPO_H

#include <stdio.h>
#include "weft.h"

enum sim_lclass {
    LC_INTRA = 0, /* rank <-> rank in a node (NVLink, shared memory); per rank */
    LC_NIC,       /* node <-> network; bandwidth of all the node's NICs */
    LC_POD,       /* pod uplink to the next switch level; per pod */
    LC_WAN,       /* cluster <-> wide-area link; per cluster */
    LC_COUNT
};

typedef struct {
    double lat_us;   /* one-way latency added when a message crosses this level */
    double bw_GBps;  /* per link and direction, 1 GB = 1e9 bytes; 0: unlimited */
    double ovh_us;   /* software cost of one message whose path tops out here */
} sim_lclass_t;

typedef struct {
    double ovh_us;   /* extra per message (the algorithm's protocol) */
    double bw_eff;   /* fraction of link bandwidth the protocol delivers */
} sim_proto;

typedef struct {
    char name[64];
    int ranks_per_node, nodes_per_pod, pods_per_cluster, clusters;
    sim_lclass_t lc[LC_COUNT];
    double reduce_GBps, copy_GBps; /* local reductions and copies */
    double local_us;               /* fixed cost of one local op */
    sim_proto proto[WEFT_ALGO_COUNT];
    char note[200];
} sim_topo;

const char *sim_lclass_name(int c);
/* Names of the built-in topologies, NULL-terminated. */
extern const char *const sim_topo_presets[];
int sim_topo_preset(sim_topo *t, const char *name);
/* Parse the text format; on failure err says which line and why. */
int sim_topo_parse(sim_topo *t, const char *text, char *err, size_t errlen);
/* A preset name, or a file in the text format. */
int sim_topo_load(sim_topo *t, const char *name_or_path, char *err, size_t errlen);
void sim_topo_write(const sim_topo *t, FILE *f);

/* Where rank r of p sits. */
typedef struct { int node, pod, cluster; } sim_place;
void sim_topo_place(const sim_topo *t, int p, int r, sim_place *out);

#endif
