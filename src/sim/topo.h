/* Topology model of the simulator: ranks on nodes, nodes in pods (a leaf
 * switch or a scalable unit), pods in clusters, clusters joined by WAN
 * links; one class of link per level, each with a latency, a bandwidth and
 * a per-message overhead, plus constants per algorithm (its protocol) and
 * the speed of local reductions. Text format: docs/SIMULATION.md. */
#ifndef WEFT_SIM_TOPO_H
#define WEFT_SIM_TOPO_H

#include <stdio.h>
#include "coll/algo_table.h"
#include "weft.h"

/* The algorithms the simulator knows: weft_algo's values, then the
 * parameter server pattern, then the schedules only the simulator runs
 * (COLL_SIM_ALGOS in coll/algo_table.h). */
enum sim_algo_extra {
    SIM_ALGO_PS = WEFT_ALGO_COUNT,
#define SIM_ALGO_ID(id, name, build, kinds) SIM_ALGO_##id,
    COLL_SIM_ALGOS(SIM_ALGO_ID)
#undef SIM_ALGO_ID
    SIM_ALGO_COUNT
};

/* Names of those algorithms, as topology files and weft-sim spell them. */
const char *sim_algo_name(int algo);
int sim_algo_parse(const char *s, int *algo);

/* NCCL's protocols (docs/SIMULATION.md, "Protocols"); 0 lets the
 * simulator choose, as NCCL's tuner does, the one its model says is
 * fastest. */
enum sim_protocol { SIM_PROTO_AUTO = 0, SIM_PROTO_LL, SIM_PROTO_LL128, SIM_PROTO_SIMPLE,
                    SIM_PROTO_COUNT };

enum sim_lclass {
    LC_INTRA = 0, /* rank <-> rank in a node (NVLink, shared memory); per rank */
    LC_NIC,       /* node <-> network; bandwidth of all the node's NICs */
    LC_POD,       /* pod uplink to the next switch level; per pod */
    LC_WAN,       /* cluster <-> wide-area link; per cluster */
    LC_CPU,       /* a node's cores (topologies with a cpu line), shared by
                     the core work of its ranks; in core-microseconds */
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

/* A protocol: what fraction of a link it delivers and the chunk it moves
 * data in. */
typedef struct {
    double bw_eff;
    double chunk_bytes;
    int defined;
} sim_protocol_t;

/* One algorithm under one protocol: the cost of one hop (from posting a
 * message to the peer seeing it, NCCL's hwLat) by the highest level the
 * hop crosses, and a fixed cost per call (NCCL's baseLat). */
typedef struct {
    double intra_us, nic_us, base_us;
    int defined;
} sim_hop;

typedef struct {
    char name[64];
    int ranks_per_node, nodes_per_pod, pods_per_cluster, clusters;
    int nics_per_node;             /* rails; rank i of k uses NIC i*nics/k */
    int channels;                  /* of the NCCL schedules */
    sim_lclass_t lc[LC_COUNT];
    double reduce_GBps, copy_GBps; /* local reductions and copies */
    double local_us;               /* fixed cost of one local op */
    double cpu_cores;              /* 0: ranks never wait for a core */
    double cpu_mem_GBps;           /* a node's copy bandwidth, all cores; 0: none */
    double cpu_cache_MiB;          /* working set beyond which copies run at the
                                      memory's speed; 0: always in cache */
    double cpu_ring_MiB;           /* a shared-memory ring: caps a rank's share of
                                      the working set for its messages; 0: none */
    double cpu_switch_us;          /* core work to switch a waiting rank onto a
                                      core another rank holds; 0: free */
    double cpu_l2_MiB, cpu_l2_GBps; /* a core's own cache: while a core's share of
                                      the working set fits it, copies and
                                      reductions run at l2_GBps; 0: no such level */
    sim_proto proto[SIM_ALGO_COUNT];
    sim_protocol_t protocol[SIM_PROTO_COUNT];
    sim_hop hop[SIM_ALGO_COUNT][SIM_PROTO_COUNT];
    char note[200];
} sim_topo;

const char *sim_lclass_name(int c);
const char *sim_protocol_name(int proto);
int sim_protocol_parse(const char *s, int *proto);
/* Names of the built-in topologies, NULL-terminated. */
extern const char *const sim_topo_presets[];
int sim_topo_preset(sim_topo *t, const char *name);
/* Parse the text format; on failure err says which line and why. */
int sim_topo_parse(sim_topo *t, const char *text, char *err, size_t errlen);
/* A preset name, or a file in the text format. */
int sim_topo_load(sim_topo *t, const char *name_or_path, char *err, size_t errlen);
void sim_topo_write(const sim_topo *t, FILE *f);

/* Where rank r of p sits. */
typedef struct { int node, pod, cluster, local; } sim_place;
void sim_topo_place(const sim_topo *t, int p, int r, sim_place *out);

#endif
