/* weft-cpn probe: every rank of the cluster measures, rank 0 writes the
 * description. Run through the cluster's launcher (weftrun, srun, one
 * process per host) or alone. */
#include "cpn/cpn_job.h"
#include "cpn/cpn_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DECLARE 32

typedef struct {
    const char *name, *out, *launcher, *slurm_conf, *job_path;
    cpn_job job;      /* --job: its model timed on every rank */
    const char *declare[MAX_DECLARE];
    int ndeclare;
    int no_allreduce;
} probe_args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft-cpn probe [--name N] [--declare KEY=VALUE ...] [--out FILE]\n"
            "                      [--launcher slurm|ssh|local] [--slurm-conf PATH]\n"
            "                      [--no-allreduce] [--job FILE]\n"
            "  Run on every rank of a cluster (weftrun -n R weft-cpn probe, srun, or one\n"
            "  process per host): measures the hosts, the matmul peak per precision and\n"
            "  the all-reduce constants; rank 0 writes the description (docs/CPN.md).\n"
            "  --declare  price_per_core_hour, gco2_per_kwh, watts_per_core,\n"
            "             available_from, available_until (ISO-8601), speed (0 < s <= 1),\n"
            "             or a measured metric's value from elsewhere (repeatable)\n"
            "  --job      a job intent (weft-cpn-job/1): every rank times a few training\n"
            "             steps of its model on one thread (train_sample_s, train_fixed_s,\n"
            "             train_update_s), which the planner prices that job's steps with\n"
            "  --out      the file (default stdout)\n");
}

static int read_job(probe_args *a)
{
    char *text = NULL, err[512] = "";
    size_t len = 0;
    int rc = cpn_read_file(a->job_path, &text, &len);
    if (!rc)
        rc = cpn_job_parse(text, len, &a->job, err, sizeof err);
    free(text);
    if (rc)
        fprintf(stderr, "weft-cpn probe: --job %s: %s\n", a->job_path,
                err[0] ? err : "cannot read it");
    return rc ? -1 : 0;
}

static int parse(int argc, char **argv, probe_args *a)
{
    memset(a, 0, sizeof *a);
    a->launcher = "local";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(o, "--no-allreduce")) {
            a->no_allreduce = 1;
            continue;
        } else if (!v) {
            fprintf(stderr, "weft-cpn probe: %s needs a value (or is unknown)\n", o);
            return -1;
        } else if (!strcmp(o, "--name")) {
            a->name = v;
        } else if (!strcmp(o, "--out")) {
            a->out = v;
        } else if (!strcmp(o, "--job")) {
            a->job_path = v;
        } else if (!strcmp(o, "--launcher")) {
            a->launcher = v;
        } else if (!strcmp(o, "--slurm-conf")) {
            a->slurm_conf = v;
        } else if (!strcmp(o, "--declare") && a->ndeclare < MAX_DECLARE) {
            a->declare[a->ndeclare++] = v;
        } else {
            fprintf(stderr, "weft-cpn probe: unknown option %s\n", o);
            return -1;
        }
        i++;
    }
    if (strcmp(a->launcher, "slurm") && strcmp(a->launcher, "ssh") &&
        strcmp(a->launcher, "local")) {
        fprintf(stderr, "weft-cpn probe: --launcher is slurm, ssh or local\n");
        return -1;
    }
    return a->job_path ? read_job(a) : 0;
}

/* Rank 0's part: the description from everyone's facts, written out. */
static int describe(const probe_args *a, const cpn_rank_facts *all, int n, double alpha,
                    double beta)
{
    cpn_cluster c;
    memset(&c, 0, sizeof c);
    char host[CPN_NAME_CAP];
    snprintf(host, sizeof host, "%s", all[0].host.name);
    snprintf(c.name, sizeof c.name, "%s", a->name ? a->name : host);
    snprintf(c.launcher, sizeof c.launcher, "%s", a->launcher);
    if (a->slurm_conf)
        snprintf(c.slurm_conf, sizeof c.slurm_conf, "%s", a->slurm_conf);
    if (a->job_path) {
        snprintf(c.calib_model, sizeof c.calib_model, "%s", a->job.m.model);
        c.calib_seq = a->job.m.seq;
    }
    int rc = cpn_probe_describe(all, n, alpha, beta, &c);
    char err[512];
    for (int i = 0; !rc && i < a->ndeclare; i++)
        if ((rc = cpn_probe_declare(&c, a->declare[i], err, sizeof err)))
            fprintf(stderr, "weft-cpn probe: %s\n", err);
    cpn_jo w;
    cpn_jo_init(&w);
    if (!rc) {
        cpn_cluster_write(&w, NULL, &c);
        const char *text = cpn_jo_text(&w, &rc);
        if (!rc && (rc = cpn_write_file(a->out, text)))
            fprintf(stderr, "weft-cpn probe: cannot write %s\n", a->out);
    }
    cpn_jo_free(&w);
    cpn_cluster_free(&c);
    return rc;
}

/* Everyone's facts at rank 0 (all), the all-reduce constants measured. */
static int gather(weft_comm *comm, const probe_args *a, cpn_rank_facts *all, double *alpha,
                  double *beta)
{
    cpn_rank_facts mine = all[weft_comm_rank(comm)];
    int rc = weft_allgather(comm, &mine, all, sizeof mine, WEFT_U8);
    if (!rc && !a->no_allreduce)
        rc = cpn_probe_allreduce(comm, alpha, beta);
    if (rc)
        fprintf(stderr, "weft-cpn probe: rank %d: %s\n", weft_comm_rank(comm),
                weft_comm_error(comm));
    return rc;
}

/* Whether a launcher started this process as one rank of several (the
 * variables weft_config_from_env reads a world size from). */
static int launched(void)
{
    static const char *const vars[] = { "WEFT_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                        "SLURM_NTASKS", "PMI_SIZE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return 1;
    }
    return 0;
}

int weft_cpn_probe_main(int argc, char **argv)
{
    probe_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc > 0 ? 0 : WEFT_EINVAL;
    weft_comm *comm = NULL;
    int alone = launched() == 0;
    if (!alone && (rc = weft_comm_init_env(&comm))) {
        fprintf(stderr, "weft-cpn probe: cannot join the cluster's ranks: %s\n",
                weft_strerror(rc));
        cpn_job_free(&a.job);
        return rc;
    }
    int n = alone ? 1 : weft_comm_size(comm), me = alone ? 0 : weft_comm_rank(comm);
    cpn_rank_facts *all = calloc((size_t)n, sizeof *all);
    double alpha = -1, beta = -1;
    rc = all ? cpn_probe_rank(&all[me]) : WEFT_ENOMEM;
    if (rc)
        fprintf(stderr, "weft-cpn probe: the matmul peak: %s\n", weft_strerror(rc));
    if (!rc && a.job_path &&
        (rc = cpn_calib_measure(&a.job.model, a.job.m.seq, a.job.m.global_batch,
                                &all[me].calib)))
        fprintf(stderr, "weft-cpn probe: timing the job's model: %s\n", weft_strerror(rc));
    if (!rc && !alone)
        rc = gather(comm, &a, all, &alpha, &beta);
    if (!rc && me == 0)
        rc = describe(&a, all, n, n > 1 ? alpha : -1, beta);
    free(all);
    if (comm)
        weft_comm_destroy(comm);
    cpn_job_free(&a.job);
    return rc;
}
