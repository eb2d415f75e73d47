/* weft-cpn: the compute power network (docs/CPN.md): measure a cluster,
 * keep a registry of clusters and the links between them, and place one
 * training job across several clusters.
 *
 *   weftrun -n 2 weft-cpn probe --name a --declare price_per_core_hour=0.05 --out a.json
 *   weft-cpn serve --listen 0.0.0.0:7070
 *   weft-cpn report --registry host:7070 --cluster a.json
 *   weft-cpn clusters --registry host:7070
 *   weft-cpn links --registry host:7070
 *   weft-cpn plan --clusters c.json --job job.json [--links links.json]
 */
#include "weft.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *what;
} subcommand;

static const subcommand subcommands[] = {
    {"probe", weft_cpn_probe_main, "measure this cluster; write its description (JSON)"},
    {"serve", weft_cpn_serve_main, "run the registry clusters report to"},
    {"report", weft_cpn_report_main, "publish a cluster's description, then heartbeat"},
    {"clusters", weft_cpn_clusters_main, "the registry's clusters: up or down, age"},
    {"links", weft_cpn_links_main, "the link matrix between the registry's clusters"},
    {"plan", weft_cpn_plan_main, "place a job (JSON intent) on clusters; print the plan"},
    {"run", weft_cpn_run_main, "start a plan's parts through their launchers; watch them"},
    {"status", weft_cpn_status_main, "each part of a run against the plan"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-cpn SUBCOMMAND [options]   (weft-cpn SUBCOMMAND --help)\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "  %-9s %s\n", subcommands[i].name, subcommands[i].what);
    fprintf(f, "docs/CPN.md has the JSON schemas and the layers they belong to.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name))
            return subcommands[i].main(argc - 1, argv + 1) == 0 ? 0 : 1;
    fprintf(stderr, "weft-cpn: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
