/* What weft-cpn run watches besides the launchers (cpn_watch.c): the
 * triggers of a re-plan other than a part that ended. Each look reads
 * files only (the parts' progress, the clusters' descriptions).
 *   silent  a part whose progress has not moved for silent_after seconds
 *           while its launcher says it runs: a cluster cut off or hung
 *   drift   the job's measured outer sync (the parts' own seconds blocked
 *           on the outer reduction) past drift times the plan's
 *   speed   the parts' measured seconds a step (their own, the outer
 *           steps' waits left out) against one another speed_drift times
 *           off the plan's (a part slower or faster than planned)
 *   join    a cluster in the clusters file that the plan lacks, with
 *           which the planner's step is faster by the margin */
#ifndef WEFT_CPN_CPN_WATCH_H
#define WEFT_CPN_CPN_WATCH_H

#include "cpn/cpn_launch.h"
#include "cpn/cpn_plan.h"
#include "cpn/cpn_replan.h"

typedef struct {
    const char *dir;
    double silent_after;     /* seconds; <= 0: not watched */
    double drift;            /* factor; <= 0: not watched */
    double speed_drift;      /* the speed trigger's; <= 0: not watched */
    const char *clusters, *job, *links; /* --clusters: watched for joiners */
    double margin;           /* a joiner's plan must be this much faster */
    /* what the looks keep */
    int gen;                 /* re-plans so far */
    int batch[CPN_REPLAN_MAX];          /* the shares now; 0: out of the job */
    long seen[CPN_REPLAN_MAX];          /* each part's last step */
    double moved[CPN_REPLAN_MAX];       /* when it last moved */
    double done[CPN_REPLAN_MAX];        /* the fraction of its steps then */
    long outer0[CPN_REPLAN_MAX];        /* drift: outer steps and wait at the */
    double wait0[CPN_REPLAN_MAX];       /* window's start */
    double per[CPN_REPLAN_MAX];         /* seconds an outer step in the last window */
    /* speed: each part's samples a second a rank as the plan (or the last
     * speed re-plan) has it, the window's start (step, seconds, seconds
     * blocked on outer steps, outer steps), and the last window's seconds
     * a step of its own (-1: none yet) and the share of its time they took */
    double speed[CPN_REPLAN_MAX];
    long sstep0[CPN_REPLAN_MAX], souter0[CPN_REPLAN_MAX];
    double sel0[CPN_REPLAN_MAX], swait0[CPN_REPLAN_MAX], stime[CPN_REPLAN_MAX];
    double sbusy[CPN_REPLAN_MAX];       /* the window's share of its own steps */
    double sync_ref;         /* an outer sync's seconds as the plan (or the
                                last re-plan) expects; 0: the plan says none */
    int H;                   /* the outer period a drift re-planned; 0: the plan's */
    double clusters_mtime;   /* the clusters file's when last read */
    char tried[CPN_PLAN_MAX_CLUSTERS * 2][64]; /* clusters seen: known or priced */
    int ntried, known;
} cpn_watch;

void watch_init(cpn_watch *w, const cpn_plan *p, double now);
/* The part silent past silent_after and furthest behind, or -1. */
int watch_silent(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double now);
/* 1 when the measured outer sync drifted: *meas its seconds an outer step. */
int watch_drift(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double *meas);
/* 1 when the parts' speeds drifted from the plan's: rate[k] each running
 * part's measured samples a second (0 for the others), *off how far the
 * furthest apart are against the plan, *slow the part slowest against it. */
int watch_speed(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double *rate,
                double *off, int *slow);
/* The plan's speeds again, every window restarted (after a join). */
void watch_speed_reset(cpn_watch *w, const cpn_plan *p);
/* 1 when a cluster should join: *pt the new part (launcher, ranks, batch,
 * speed), batch[] every part's new share (the new one's at p->nparts),
 * why the reason. */
int watch_joiner(cpn_watch *w, const cpn_plan *p, cpn_part *pt, int *batch, char *why,
                 size_t cap);

#endif
