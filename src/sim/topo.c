/* Topologies: the text format, its parser and the built-in presets (which
 * are written in that same format, so each doubles as an example). */
#include "sim/topo.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const lc_names[LC_COUNT] = { "intra", "nic", "pod", "wan", "cpu" };
static const char *const proto_names[SIM_PROTO_COUNT] = { "auto", "ll", "ll128", "simple" };
static const char *const sim_only_names[] = {
#define SIM_NAME(id, name, build, kinds) name,
    COLL_SIM_ALGOS(SIM_NAME)
#undef SIM_NAME
};

const char *sim_lclass_name(int c) { return c >= 0 && c < LC_COUNT ? lc_names[c] : "?"; }

const char *sim_protocol_name(int proto)
{
    return proto >= 0 && proto < SIM_PROTO_COUNT ? proto_names[proto] : "?";
}

int sim_protocol_parse(const char *s, int *proto)
{
    for (int i = 0; i < SIM_PROTO_COUNT; i++)
        if (!strcmp(s, proto_names[i])) {
            *proto = i;
            return 0;
        }
    return WEFT_EINVAL;
}

const char *sim_algo_name(int algo)
{
    if (algo == SIM_ALGO_PS)
        return "ps";
    if (algo > SIM_ALGO_PS && algo < SIM_ALGO_COUNT)
        return sim_only_names[algo - SIM_ALGO_PS - 1];
    return weft_algo_name((weft_algo)algo);
}

int sim_algo_parse(const char *s, int *algo)
{
    weft_algo a;
    for (int i = SIM_ALGO_PS; i < SIM_ALGO_COUNT; i++)
        if (!strcmp(s, sim_algo_name(i))) {
            *algo = i;
            return 0;
        }
    if (weft_algo_parse(s, &a) || a == WEFT_ALGO_AUTO)
        return WEFT_EINVAL;
    *algo = (int)a;
    return 0;
}

/* This host: every rank a process on one 2-core machine, talking through
 * weft's shared-memory rings (docs/SIMULATION.md, "This host", says where
 * each number comes from). A message in the node is core work: the
 * sender's overhead and its copy into the ring, then the receiver's copy
 * or reduction out of it; the cpu line shares the 2 cores among the ranks
 * that have work. A rank with a core to itself sees a message 0.7 us
 * after it is published; one that shares its core first waits for a
 * switch (1.7 us of core work) and for the turns of the other ranks of
 * its core that wait too. While a core's part of the working set fits its
 * own 1 MiB cache a core copies and reduces at 13 GB/s, in the shared
 * cache (a node working set up to 16 MiB) at 8 GB/s; beyond, the cores
 * share 10 GB/s of memory. The nic line is not measured (no second host here): a 1 Gbit/s
 * link. */
static const char host_topo[] =
    "name host\n"
    "note calibrated to bench/sim_calibrate.sh on the idle machine (docs/sim/host-measured.dat)\n"
    "ranks_per_node 64\nnodes_per_pod 1\npods_per_cluster 1\nclusters 1\n"
    "link intra lat_us 0.7 bw_GBps 2.5 ovh_us 0.8\n"
    "link nic lat_us 50 bw_GBps 0.12 ovh_us 10\n"
    "compute reduce_GBps 8 copy_GBps 8 local_us 1\n"
    "cpu cores 2 mem_GBps 10 cache_MiB 16 ring_MiB 2 switch_us 1.7 l2_MiB 1 l2_GBps 13\n";

/* DGX-H100: 8 GPUs on NVLink 4 (450 GB/s per direction per GPU), 8 x 400
 * Gb/s NDR InfiniBand per node, 32-node scalable units on a non-blocking
 * fat tree. */
static const char dgx_topo[] =
    "name dgx-h100\n"
    "ranks_per_node 8\nnodes_per_pod 32\npods_per_cluster 1024\nclusters 1\n"
    "link intra lat_us 0.8 bw_GBps 450 ovh_us 0.5\n"
    "link nic lat_us 2.0 bw_GBps 400 ovh_us 1.0\n"
    "link pod lat_us 0.5 bw_GBps 0\n"
    "compute reduce_GBps 1500 copy_GBps 1500 local_us 2\n"
    "proto tree ovh_us 3.0\n"
    "nics_per_node 8\nchannels 16\n"
    "protocol ll bw_eff 0.5 chunk_bytes 32768\n"
    "protocol ll128 bw_eff 0.9375 chunk_bytes 131072\n"
    "protocol simple bw_eff 0.92 chunk_bytes 524288\n"
    "hop nccl-ring ll intra_us 0.6 nic_us 2.7 base_us 6.6\n"
    "hop nccl-ring ll128 intra_us 1.9 nic_us 4 base_us 14\n"
    "hop nccl-ring simple intra_us 3.4 nic_us 14 base_us 8.4\n"
    "hop nccl-tree ll intra_us 0.6 nic_us 5 base_us 6.8\n"
    "hop nccl-tree ll128 intra_us 1.25 nic_us 8.5 base_us 14\n"
    "hop nccl-tree simple intra_us 4 nic_us 14 base_us 8.4\n";

/* Summit (ORNL): 6 V100 per node on NVLink 2 (50 GB/s per direction per
 * GPU), dual-rail EDR InfiniBand (2 x 100 Gb/s per node, one rail per
 * socket), non-blocking fat tree of up to 4,608 nodes. The one
 * calibration behind docs/SIMULATION.md figure 1 and `weft-sim validate`;
 * see there for where each number comes from. The link and proto lines
 * drive weft's own schedules; the protocol and hop lines NCCL's (NCCL 2.4
 * had LL and Simple, LL128 came later).
 * Channels 4: NCCL 2.4 finds one channel per rail and then duplicates
 * each (init.cc, connectTrees), the copy taking the mirrored tree of the
 * double binary tree through the same NIC, so each rail carries both
 * trees and no NIC is interior in both; with one tree per rail an
 * interior node's NIC carries 1.5x a leaf's and the tree lost a third of
 * its bandwidth. LL at a quarter of the link: NCCL's own tuner takes a
 * ring's LL bandwidth across nodes or in an all-reduce as busBw / 4
 * (tuning.cc, "model refinements"), not the 1/2 that the flag bytes of
 * each 8-byte line alone would leave; at 1/2 LL won 64 MB rings from 768
 * GPUs on at about twice the bandwidth of the published figure. */
static const char summit_topo[] =
    "name summit\n"
    "ranks_per_node 6\nnodes_per_pod 4608\npods_per_cluster 1\nclusters 1\n"
    "nics_per_node 2\nchannels 4\n"
    "link intra lat_us 0.25 bw_GBps 50 ovh_us 0.35\n"
    "link nic lat_us 1.2 bw_GBps 25 ovh_us 1.1\n"
    "compute reduce_GBps 700 copy_GBps 700 local_us 0.5\n"
    "proto ring ovh_us 0 bw_eff 1\n"
    "proto tree ovh_us 4.0 bw_eff 1\n"
    "protocol ll bw_eff 0.25 chunk_bytes 32768\n"
    "protocol simple bw_eff 0.92 chunk_bytes 524288\n"
    "hop nccl-ring ll intra_us 0.6 nic_us 2.7 base_us 6.6\n"
    "hop nccl-ring simple intra_us 3.4 nic_us 14 base_us 8.4\n"
    "hop nccl-tree ll intra_us 0.6 nic_us 9.5 base_us 6.8\n"
    "hop nccl-tree simple intra_us 4 nic_us 14 base_us 8.4\n";

/* Two DGX-H100 clusters joined by one 100 Gb/s wide-area link, 10 ms one
 * way. */
static const char wan2_topo[] =
    "name wan2\n"
    "ranks_per_node 8\nnodes_per_pod 32\npods_per_cluster 1024\nclusters 2\n"
    "link intra lat_us 0.8 bw_GBps 450 ovh_us 0.5\n"
    "link nic lat_us 2.0 bw_GBps 400 ovh_us 1.0\n"
    "link pod lat_us 0.5 bw_GBps 0\n"
    "link wan lat_us 10000 bw_GBps 12.5 ovh_us 20\n"
    "compute reduce_GBps 1500 copy_GBps 1500 local_us 2\n"
    "proto tree ovh_us 3.0\n";

/* The overview's communication wall: one model replica per node, each
 * behind one 800 Gb/s InfiniBand link. */
static const char ib800_topo[] =
    "name ib800\n"
    "ranks_per_node 1\nnodes_per_pod 100000\npods_per_cluster 1\nclusters 1\n"
    "link intra lat_us 0.8 bw_GBps 450 ovh_us 0.5\n"
    "link nic lat_us 2.0 bw_GBps 100 ovh_us 1.0\n"
    "compute reduce_GBps 1500 copy_GBps 1500 local_us 2\n";

const char *const sim_topo_presets[] = { "host", "dgx-h100", "summit", "wan2", "ib800", NULL };
static const char *const preset_text[] = { host_topo, dgx_topo, summit_topo, wan2_topo, ib800_topo };

static void defaults(sim_topo *t)
{
    memset(t, 0, sizeof *t);
    strcpy(t->name, "unnamed");
    t->ranks_per_node = t->nodes_per_pod = t->pods_per_cluster = t->clusters = 1;
    t->nics_per_node = 1;
    t->channels = 2;
    t->reduce_GBps = t->copy_GBps = 10;
    for (int a = 0; a < SIM_ALGO_COUNT; a++)
        t->proto[a].bw_eff = 1;
}

static int bad(char *err, size_t n, int line, const char *what)
{
    if (err)
        snprintf(err, n, "line %d: %s", line, what);
    return WEFT_EINVAL;
}

/* key value pairs after a section word: "lat_us 1.2 bw_GBps 25" */
static int pairs(char **tok, int ntok, const char *const *keys, double **dst, int nkeys,
                 char *err, size_t n, int line)
{
    if (ntok % 2)
        return bad(err, n, line, "expected key value pairs");
    for (int i = 0; i < ntok; i += 2) {
        int k = 0;
        while (k < nkeys && strcmp(tok[i], keys[k]))
            k++;
        char *end;
        double v = strtod(tok[i + 1], &end);
        if (k == nkeys)
            return bad(err, n, line, "unknown key");
        if (*end || v < 0)
            return bad(err, n, line, "bad number");
        *dst[k] = v;
    }
    return 0;
}

/* One line of keyword and values (tok[0] the keyword), into t. */
static int parse_tokens(sim_topo *t, char **tok, int ntok, char *err, size_t errlen, int line)
{
    int *ip = !strcmp(tok[0], "ranks_per_node") ? &t->ranks_per_node
            : !strcmp(tok[0], "nodes_per_pod") ? &t->nodes_per_pod
            : !strcmp(tok[0], "pods_per_cluster") ? &t->pods_per_cluster
            : !strcmp(tok[0], "clusters") ? &t->clusters
            : !strcmp(tok[0], "nics_per_node") ? &t->nics_per_node
            : !strcmp(tok[0], "channels") ? &t->channels : NULL;
    if (ip) {
        char *end;
        long v = ntok == 2 ? strtol(tok[1], &end, 10) : 0;
        if (ntok != 2 || *end || v < 1 || v > 100000000)
            return bad(err, errlen, line, "expected one positive integer");
        *ip = (int)v;
    } else if (!strcmp(tok[0], "link")) {
        int c = 0;
        while (ntok > 1 && c < LC_COUNT && strcmp(tok[1], lc_names[c]))
            c++;
        if (ntok < 2 || c == LC_COUNT)
            return bad(err, errlen, line, "link class must be intra, nic, pod or wan");
        static const char *const keys[] = { "lat_us", "bw_GBps", "ovh_us" };
        double *dst[] = { &t->lc[c].lat_us, &t->lc[c].bw_GBps, &t->lc[c].ovh_us };
        int rc = pairs(tok + 2, ntok - 2, keys, dst, 3, err, errlen, line);
        if (rc)
            return rc;
    } else if (!strcmp(tok[0], "compute")) {
        static const char *const keys[] = { "reduce_GBps", "copy_GBps", "local_us" };
        double *dst[] = { &t->reduce_GBps, &t->copy_GBps, &t->local_us };
        int rc = pairs(tok + 1, ntok - 1, keys, dst, 3, err, errlen, line);
        if (rc)
            return rc;
    } else if (!strcmp(tok[0], "cpu")) {
        static const char *const keys[] = { "cores",    "mem_GBps",  "cache_MiB", "ring_MiB",
                                            "switch_us", "l2_MiB",   "l2_GBps" };
        double *dst[] = { &t->cpu_cores,     &t->cpu_mem_GBps, &t->cpu_cache_MiB,
                          &t->cpu_ring_MiB,  &t->cpu_switch_us, &t->cpu_l2_MiB,
                          &t->cpu_l2_GBps };
        int rc = pairs(tok + 1, ntok - 1, keys, dst, 7, err, errlen, line);
        if (rc)
            return rc;
    } else if (!strcmp(tok[0], "protocol")) {
        int pr;
        if (ntok < 2 || sim_protocol_parse(tok[1], &pr) || pr == SIM_PROTO_AUTO)
            return bad(err, errlen, line, "protocol must be ll, ll128 or simple");
        static const char *const keys[] = { "bw_eff", "chunk_bytes" };
        sim_protocol_t *q = &t->protocol[pr];
        double *dst[] = { &q->bw_eff, &q->chunk_bytes };
        int rc = pairs(tok + 2, ntok - 2, keys, dst, 2, err, errlen, line);
        if (rc)
            return rc;
        if (q->bw_eff <= 0 || q->bw_eff > 1)
            return bad(err, errlen, line, "bw_eff must be in (0, 1]");
        q->defined = 1;
    } else if (!strcmp(tok[0], "hop")) {
        int a, pr;
        if (ntok < 3 || sim_algo_parse(tok[1], &a) || sim_protocol_parse(tok[2], &pr) ||
            pr == SIM_PROTO_AUTO)
            return bad(err, errlen, line, "hop needs an algorithm and a protocol");
        static const char *const keys[] = { "intra_us", "nic_us", "base_us" };
        sim_hop *h = &t->hop[a][pr];
        double *dst[] = { &h->intra_us, &h->nic_us, &h->base_us };
        int rc = pairs(tok + 3, ntok - 3, keys, dst, 3, err, errlen, line);
        if (rc)
            return rc;
        h->defined = 1;
    } else if (!strcmp(tok[0], "proto")) {
        int a;
        if (ntok < 2 || sim_algo_parse(tok[1], &a))
            return bad(err, errlen, line, "proto needs an algorithm name");
        static const char *const keys[] = { "ovh_us", "bw_eff" };
        double *dst[] = { &t->proto[a].ovh_us, &t->proto[a].bw_eff };
        int rc = pairs(tok + 2, ntok - 2, keys, dst, 2, err, errlen, line);
        if (rc)
            return rc;
        if (t->proto[a].bw_eff <= 0 || t->proto[a].bw_eff > 1)
            return bad(err, errlen, line, "bw_eff must be in (0, 1]");
    } else {
        return bad(err, errlen, line, "unknown keyword");
    }
    return 0;
}

int sim_topo_parse(sim_topo *t, const char *text, char *err, size_t errlen)
{
    defaults(t);
    int line = 0;
    const char *p = text;
    while (*p) {
        char buf[512], *tok[24];
        int ntok = 0;
        size_t len = strcspn(p, "\n");
        line++;
        if (len >= sizeof buf)
            return bad(err, errlen, line, "line too long");
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (p[len] == '\n');
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        if (!strncmp(buf, "note ", 5) || !strncmp(buf, "name ", 5)) {
            char *v = buf + 5;
            while (isspace((unsigned char)*v))
                v++;
            size_t l = strlen(v);
            while (l && isspace((unsigned char)v[l - 1]))
                v[--l] = 0;
            if (buf[1] == 'o')
                snprintf(t->note, sizeof t->note, "%s", v);
            else
                snprintf(t->name, sizeof t->name, "%s", v);
            continue;
        }
        for (char *s = strtok(buf, " \t\r"); s && ntok < 24; s = strtok(NULL, " \t\r"))
            tok[ntok++] = s;
        if (ntok == 0)
            continue;
        int rc = parse_tokens(t, tok, ntok, err, errlen, line);
        if (rc)
            return rc;
    }
    if (t->reduce_GBps <= 0 || t->copy_GBps <= 0)
        return bad(err, errlen, line, "compute speeds must be positive");
    for (int a = 0; a < SIM_ALGO_COUNT; a++)
        for (int pr = 1; pr < SIM_PROTO_COUNT; pr++)
            if (t->hop[a][pr].defined && !t->protocol[pr].defined)
                return bad(err, errlen, line, "a hop names a protocol with no protocol line");
    return 0;
}

int sim_topo_preset(sim_topo *t, const char *name)
{
    for (int i = 0; sim_topo_presets[i]; i++)
        if (!strcmp(name, sim_topo_presets[i]))
            return sim_topo_parse(t, preset_text[i], NULL, 0);
    return WEFT_EINVAL;
}

int sim_topo_load(sim_topo *t, const char *name, char *err, size_t errlen)
{
    if (sim_topo_preset(t, name) == 0)
        return 0;
    FILE *f = fopen(name, "r");
    if (!f) {
        snprintf(err, errlen, "%s: no such preset or file", name);
        return WEFT_EIO;
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text)
        return WEFT_ENOMEM;
    text[n] = 0;
    int rc = sim_topo_parse(t, text, err, errlen);
    free(text);
    return rc;
}

void sim_topo_write(const sim_topo *t, FILE *f)
{
    fprintf(f, "name %s\n", t->name);
    if (t->note[0])
        fprintf(f, "note %s\n", t->note);
    fprintf(f, "ranks_per_node %d\nnodes_per_pod %d\npods_per_cluster %d\nclusters %d\n"
               "nics_per_node %d\nchannels %d\n",
            t->ranks_per_node, t->nodes_per_pod, t->pods_per_cluster, t->clusters,
            t->nics_per_node, t->channels);
    for (int c = 0; c < LC_COUNT; c++)
        fprintf(f, "link %s lat_us %g bw_GBps %g ovh_us %g\n", lc_names[c],
                t->lc[c].lat_us, t->lc[c].bw_GBps, t->lc[c].ovh_us);
    fprintf(f, "compute reduce_GBps %g copy_GBps %g local_us %g\n", t->reduce_GBps,
            t->copy_GBps, t->local_us);
    if (t->cpu_cores > 0 || t->cpu_mem_GBps > 0)
        fprintf(f,
                "cpu cores %.17g mem_GBps %.17g cache_MiB %.17g ring_MiB %.17g switch_us %.17g "
                "l2_MiB %.17g l2_GBps %.17g\n",
                t->cpu_cores, t->cpu_mem_GBps, t->cpu_cache_MiB, t->cpu_ring_MiB,
                t->cpu_switch_us, t->cpu_l2_MiB, t->cpu_l2_GBps);
    for (int a = 1; a < SIM_ALGO_COUNT; a++)
        if (t->proto[a].ovh_us != 0 || t->proto[a].bw_eff != 1)
            fprintf(f, "proto %s ovh_us %.17g bw_eff %.17g\n", sim_algo_name(a),
                    t->proto[a].ovh_us, t->proto[a].bw_eff);
    for (int pr = 1; pr < SIM_PROTO_COUNT; pr++)
        if (t->protocol[pr].defined)
            fprintf(f, "protocol %s bw_eff %.17g chunk_bytes %.17g\n", proto_names[pr],
                    t->protocol[pr].bw_eff, t->protocol[pr].chunk_bytes);
    for (int a = 1; a < SIM_ALGO_COUNT; a++)
        for (int pr = 1; pr < SIM_PROTO_COUNT; pr++)
            if (t->hop[a][pr].defined)
                fprintf(f, "hop %s %s intra_us %.17g nic_us %.17g base_us %.17g\n",
                        sim_algo_name(a), proto_names[pr], t->hop[a][pr].intra_us,
                        t->hop[a][pr].nic_us, t->hop[a][pr].base_us);
}

static int per_cluster(const sim_topo *t, int p)
{
    return (p + t->clusters - 1) / t->clusters;
}

void sim_topo_place(const sim_topo *t, int p, int r, sim_place *out)
{
    int per = per_cluster(t, p);
    int npc = (per + t->ranks_per_node - 1) / t->ranks_per_node;
    int ppc = (npc + t->nodes_per_pod - 1) / t->nodes_per_pod;
    int c = r / per, lr = r % per, ln = lr / t->ranks_per_node;
    out->cluster = c;
    out->node = c * npc + ln;
    out->pod = c * ppc + ln / t->nodes_per_pod;
    out->local = lr % t->ranks_per_node;
}
