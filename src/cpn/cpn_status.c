/* weft-cpn status: where each part of a run stands against the plan's
 * prediction. It reads files only, so it works while weft-cpn run runs,
 * after it ended, and from another process on a host that shares the
 * run's folder. */
#include "cpn/cpn_status.h"

#include "cpn/cpn_joined.h"
#include "cpn/cpn_replan.h"

#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int status_progress(const char *dir, int k, cpn_progress *pr)
{
    char path[1200];
    memset(pr, 0, sizeof *pr);
    snprintf(path, sizeof path, "%s/progress.%d", dir, k);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    pr->outer = -1;
    int n = fscanf(f, "step %ld of %ld loss %lf elapsed %lf outer %ld wait %lf", &pr->step,
                   &pr->steps, &pr->loss, &pr->elapsed, &pr->outer, &pr->wait);
    fclose(f);
    if (n < 6)
        pr->outer = -1;
    return n >= 4 ? 0 : -1;
}

static void part_state(const char *dir, const cpn_part *pt, char *out, size_t cap)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/part-%s.state", dir, pt->cluster);
    snprintf(out, cap, "unknown");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, "\n")] = 0;
    fclose(f);
}

/* The shares now, by part: the last re-plan's line ("GEN S0,S1,..."),
 * which a joiner's and a loss's re-plans change; their count, 0 none. */
static int shares_now(const char *dir, int *batch, int cap)
{
    char path[1200], line[1024];
    snprintf(path, sizeof path, "%s/progress.shares", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    char *at = fgets(line, sizeof line, f) ? strchr(line, ' ') : NULL;
    fclose(f);
    while (at && n < cap) {
        char *end;
        long v = strtol(at + 1, &end, 10);
        if (end == at + 1 || v < 0)
            return 0;
        batch[n++] = (int)v;
        at = *end == ',' ? end : NULL;
    }
    return n;
}

void status_print(FILE *f, const cpn_plan *p, const char *dir)
{
    int now[CPN_REPLAN_MAX], nnow = shares_now(dir, now, CPN_REPLAN_MAX);
    fprintf(f, "%-8s %-7s %5s %6s %5s %-22s %13s %9s %8s %8s\n", "cluster", "launch", "ranks",
            "batch", "speed", "state", "step", "loss", "time_s", "plan_s");
    for (int k = 0; k < p->nparts; k++) {
        const cpn_part *pt = &p->parts[k];
        char state[128], step[40] = "-", loss[24] = "-", t[24] = "-", plan[24] = "-";
        cpn_progress pr;
        part_state(dir, pt, state, sizeof state);
        if (status_progress(dir, k, &pr) == 0) {
            snprintf(step, sizeof step, "%ld/%ld", pr.step, pr.steps);
            snprintf(loss, sizeof loss, "%.4f", pr.loss);
            snprintf(t, sizeof t, "%.1f", pr.elapsed);
            /* the plan's step time is the job's: a slow part takes fewer,
             * longer steps in the same time (docs/CPN.md) */
            if (p->step_s > 0 && pr.steps > 0)
                snprintf(plan, sizeof plan, "%.1f",
                         p->step_s * (double)p->steps * (double)pr.step / (double)pr.steps);
        }
        fprintf(f, "%-8s %-7s %5d %6d %5.2f %-22s %13s %9s %8s %8s\n", pt->cluster, pt->launcher,
                pt->ranks, k < nnow ? now[k] : pt->batch, pt->speed, state, step, loss, t, plan);
    }
    char re[2048];
    if (cpn_replan_line(dir, re, sizeof re) == 0)
        fprintf(f, "re-plan: %s\n", re);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-cpn status --plan PLAN.json --dir RUNDIR\n"
               "  Each part of the run weft-cpn run keeps in RUNDIR, the plan's and those\n"
               "  that joined it: its launcher's state, its share now, its step, loss and\n"
               "  seconds, and the plan's predicted seconds for as many steps\n"
               "  (docs/CPN.md).\n");
}

int weft_cpn_status_main(int argc, char **argv)
{
    const char *plan = NULL, *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plan") && i + 1 < argc)
            plan = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return WEFT_EINVAL;
        }
    }
    if (!plan || !dir) {
        usage(stderr);
        return WEFT_EINVAL;
    }
    cpn_plan p;
    char err[1400];
    int rc = cpn_plan_read(plan, &p, err, sizeof err);
    if (rc == 0)
        rc = cpn_joined_read(dir, &p, err, sizeof err); /* the clusters that joined it */
    if (rc) {
        fprintf(stderr, "weft-cpn status: %s\n", err);
        cpn_plan_free(&p);
        return rc;
    }
    status_print(stdout, &p, dir);
    cpn_plan_free(&p);
    return 0;
}
