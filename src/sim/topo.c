/* Topologies: the text format, its parser and the built-in presets (which
 * are written in that same format, so each doubles as an example). */
#include "sim/topo.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const lc_names[LC_COUNT] = { "intra", "nic", "pod", "wan" };

const char *sim_lclass_name(int c) { return c >= 0 && c < LC_COUNT ? lc_names[c] : "?"; }

/* This host: every rank a process on one machine, talking over loopback
 * TCP. The intra link is weft's own transport as bench/sim_calibrate.sh
 * measured it here (2-rank ring all-reduce: 8 B in 9.96 us, 64 MB in
 * 50.5 ms, on a quiet 2-vCPU VM); rerun it on another machine and use the
 * docs/sim/host.topo it writes. The nic line is not measured (no second
 * host here): a 1 Gbit/s link. */
static const char host_topo[] =
    "name host\n"
    "note calibrated by bench/sim_calibrate.sh: 8 B in 9.96 us, 64 MB in 50549 us\n"
    "ranks_per_node 64\nnodes_per_pod 1\npods_per_cluster 1\nclusters 1\n"
    "link intra lat_us 2.490 bw_GBps 1.328 ovh_us 2.490\n"
    "link nic lat_us 50 bw_GBps 0.12 ovh_us 10\n"
    "compute reduce_GBps 4 copy_GBps 8 local_us 1\n";

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
    "proto tree ovh_us 3.0\n";

/* Summit (ORNL): 6 V100 per node on NVLink 2 (50 GB/s per direction per
 * GPU), dual-rail EDR InfiniBand (2 x 100 Gb/s per node), non-blocking fat
 * tree of up to 4,608 nodes. The one calibration behind docs/SIMULATION.md
 * figure 1; see there for where each number comes from. */
static const char summit_topo[] =
    "name summit\n"
    "ranks_per_node 6\nnodes_per_pod 4608\npods_per_cluster 1\nclusters 1\n"
    "link intra lat_us 0.25 bw_GBps 50 ovh_us 0.35\n"
    "link nic lat_us 1.2 bw_GBps 25 ovh_us 1.1\n"
    "compute reduce_GBps 700 copy_GBps 700 local_us 0.5\n"
    "proto ring ovh_us 0 bw_eff 1\n"
    "proto tree ovh_us 4.0 bw_eff 1\n";

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
    t->reduce_GBps = t->copy_GBps = 10;
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
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
        int *ip = !strcmp(tok[0], "ranks_per_node") ? &t->ranks_per_node
                : !strcmp(tok[0], "nodes_per_pod") ? &t->nodes_per_pod
                : !strcmp(tok[0], "pods_per_cluster") ? &t->pods_per_cluster
                : !strcmp(tok[0], "clusters") ? &t->clusters : NULL;
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
        } else if (!strcmp(tok[0], "proto")) {
            weft_algo a;
            if (ntok < 2 || weft_algo_parse(tok[1], &a) || a == WEFT_ALGO_AUTO)
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
    }
    if (t->reduce_GBps <= 0 || t->copy_GBps <= 0)
        return bad(err, errlen, line, "compute speeds must be positive");
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
    fprintf(f, "ranks_per_node %d\nnodes_per_pod %d\npods_per_cluster %d\nclusters %d\n",
            t->ranks_per_node, t->nodes_per_pod, t->pods_per_cluster, t->clusters);
    for (int c = 0; c < LC_COUNT; c++)
        fprintf(f, "link %s lat_us %g bw_GBps %g ovh_us %g\n", lc_names[c],
                t->lc[c].lat_us, t->lc[c].bw_GBps, t->lc[c].ovh_us);
    fprintf(f, "compute reduce_GBps %g copy_GBps %g local_us %g\n", t->reduce_GBps,
            t->copy_GBps, t->local_us);
    for (int a = 1; a < WEFT_ALGO_COUNT; a++)
        if (t->proto[a].ovh_us != 0 || t->proto[a].bw_eff != 1)
            fprintf(f, "proto %s ovh_us %g bw_eff %g\n", weft_algo_name((weft_algo)a),
                    t->proto[a].ovh_us, t->proto[a].bw_eff);
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
}
