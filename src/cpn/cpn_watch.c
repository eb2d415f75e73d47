/* The re-plan triggers of weft-cpn run besides a part that ended.
 *
 * Silence: a part's first rank replaces its progress file at least twice
 * a second while it steps; a part whose step has not moved for
 * silent_after seconds while its launcher still says it runs has stopped
 * reporting (hung, stopped, or cut off: its processes may never end on
 * their own). When the others wait for it at an outer step they fall
 * silent too, but ahead of it (the training writes its progress just
 * before each outer step), so the silent part furthest behind in its
 * steps is the one taken as lost, one a look, and the clocks of the
 * others start again. Two silent at the same step are left to the
 * training's own timeout, which counts the absent one out.
 *
 * Drift: each part's progress says its outer steps and the seconds its
 * first rank was blocked on them. Of the parts that reach an outer step,
 * the last to arrive waits only for the transfer, so the least of the
 * parts' seconds per outer step over a window is the link's part of the
 * outer sync, measured on the job's own traffic; past drift times what
 * the plan expected (its wan_s times H, the step's share of the outer
 * sync), the link is slower than planned (a halved bandwidth doubles it).
 *
 * Speed: a part's own seconds a step are its progress's seconds less
 * those its first rank was blocked on outer steps (where a faster part
 * waits for a slower), over a window of two outer steps and half a
 * second at least (a few ms of scheduling on a loaded host must not read
 * as a slow cluster), and only where a part is busy with its own steps a
 * quarter of the time or more. The plan gave each part its share for its speed,
 * so its seconds a step go as its samples a rank over its speed; where
 * the parts' measured seconds against those differ by speed_drift times
 * or more, a part is slower or faster than planned, and the shares are
 * re-planned by the measured rates (samples a second).
 *
 * Join: the clusters file (what weft-cpn plan --clusters reads, where a
 * cluster that probes or registers appears) is read again when it
 * changes; a cluster the plan lacks is priced with the running parts at
 * all its cores and the running sync and H (the training cannot change
 * them), shares chosen by the planner, against the running parts as they
 * are; it joins when its step is faster by the margin. */
#include "cpn/cpn_watch.h"

#include "cpn/cpn_job.h"
#include "cpn/cpn_status.h"

#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int load(cpn_watch *w, cpn_cluster **cs, int *n, cpn_job *job, cpn_link **links, int *nl);
static int tried(cpn_watch *w, const char *name);

/* The clusters in the file when the watch starts: the plan chose among
 * them. Read at once, not at the first look for joiners (a second on),
 * so that a cluster written in sooner is still a joiner. */
static void known_at_start(cpn_watch *w)
{
    cpn_cluster *cs = NULL;
    cpn_link *links = NULL;
    cpn_job job;
    int n = 0, nl = 0;
    memset(&job, 0, sizeof job);
    if (load(w, &cs, &n, &job, &links, &nl) == 0) {
        for (int i = 0; i < n; i++) {
            tried(w, cs[i].name);
            cpn_cluster_free(&cs[i]);
        }
        w->known = 1;
    }
    free(cs);
    free(links);
    cpn_job_free(&job);
}

void watch_init(cpn_watch *w, const cpn_plan *p, double now)
{
    for (int k = 0; k < CPN_REPLAN_MAX; k++) {
        w->batch[k] = k < p->nparts ? p->parts[k].batch : 0;
        w->seen[k] = -1;
        w->moved[k] = now;
        w->outer0[k] = -1;
        w->per[k] = -1;
    }
    w->sync_ref = p->wan_s * (p->H > 0 ? p->H : 1);
    watch_speed_reset(w, p);
    known_at_start(w);
}

void watch_speed_reset(cpn_watch *w, const cpn_plan *p)
{
    for (int k = 0; k < CPN_REPLAN_MAX; k++) {
        w->speed[k] = k < p->nparts && p->parts[k].speed > 0 ? p->parts[k].speed : 1;
        w->sstep0[k] = -1;
        w->stime[k] = -1;
    }
}

/* Part k's seconds a step of its own over its last window, once one of
 * two outer steps and SPEED_WINDOW_S has passed (-1 until then). */
#define SPEED_WINDOW_S 0.5
#define SPEED_BUSY 0.25
static void speed_window(cpn_watch *w, int k, const cpn_progress *pr)
{
    if (w->sstep0[k] < 0 || pr->step < w->sstep0[k] || pr->outer < w->souter0[k]) {
        w->sstep0[k] = pr->step;
        w->souter0[k] = pr->outer;
        w->sel0[k] = pr->elapsed;
        w->swait0[k] = pr->wait;
        return;
    }
    if (pr->outer < w->souter0[k] + 2 || pr->elapsed - w->sel0[k] < SPEED_WINDOW_S ||
        pr->step <= w->sstep0[k])
        return;
    double all = pr->elapsed - w->sel0[k], own = all - (pr->wait - w->swait0[k]);
    w->stime[k] = (own > 1e-6 ? own : 1e-6) / (double)(pr->step - w->sstep0[k]);
    w->sbusy[k] = own / all;
    w->sstep0[k] = pr->step;
    w->souter0[k] = pr->outer;
    w->sel0[k] = pr->elapsed;
    w->swait0[k] = pr->wait;
}

int watch_speed(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double *rate,
                double *off, int *slow)
{
    double lo = -1, hi = -1, busy = 0;
    int parts = 0, missing = 0;
    if (w->speed_drift <= 0)
        return 0;
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++) {
        cpn_progress pr;
        rate[k] = 0;
        if (w->batch[k] <= 0 || ls[k].state != PART_RUNNING)
            continue;
        if (status_progress(w->dir, k, &pr) == 0 && pr.outer >= 0)
            speed_window(w, k, &pr);
        if (w->stime[k] < 0) {
            missing++;
            continue;
        }
        /* measured against planned: a share a rank over the speed */
        double r = p->parts[k].ranks > 0 ? p->parts[k].ranks : 1;
        double x = w->stime[k] / ((double)w->batch[k] / r / w->speed[k]);
        rate[k] = (double)w->batch[k] / w->stime[k];
        lo = lo < 0 || x < lo ? x : lo;
        busy = w->sbusy[k] > busy ? w->sbusy[k] : busy;
        if (hi < 0 || x > hi) {
            hi = x;
            *slow = k;
        }
        parts++;
    }
    /* every running part measured, two at least, to compare; and one busy
     * with its own steps a quarter of the time at least: where the outer
     * sync's waits fill the time, a part's own seconds are a remainder
     * too small to compare (and the shares too little to gain) */
    if (missing || parts < 2 || !(lo > 0) || hi < w->speed_drift * lo || busy < SPEED_BUSY)
        return 0;
    *off = hi / lo;
    /* the measured speeds are the plan's from here on; new windows */
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++) {
        double r = p->parts[k].ranks > 0 ? p->parts[k].ranks : 1;
        if (rate[k] > 0)
            w->speed[k] = rate[k] / r;
        w->stime[k] = -1;
        w->sstep0[k] = -1;
    }
    return 1;
}

int watch_silent(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double now)
{
    int worst = -1, tie = 0;
    double least = 2;
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++) {
        cpn_progress pr;
        if (status_progress(w->dir, k, &pr) == 0 && pr.step != w->seen[k]) {
            w->seen[k] = pr.step;
            w->moved[k] = now;
            w->done[k] = pr.steps > 0 ? (double)pr.step / (double)pr.steps : 0;
        }
        /* only a part that has reported and still runs can fall silent */
        if (w->silent_after <= 0 || w->seen[k] < 0 || ls[k].state != PART_RUNNING ||
            now - w->moved[k] < w->silent_after)
            continue;
        /* the one behind: the others wait for it at an outer step */
        tie = worst >= 0 && w->done[k] == least;
        if (w->done[k] < least) {
            least = w->done[k];
            worst = k;
        }
    }
    /* two silent at the same point: no telling the stuck from the waiting;
     * the training's own timeout shrinks one out, and its part goes on */
    if (worst < 0 || tie)
        return -1;
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++)
        w->moved[k] = now;
    return worst;
}

int watch_drift(cpn_watch *w, const cpn_plan *p, const cpn_launched *ls, double *meas)
{
    double least = -1;
    int missing = 0;
    if (w->drift <= 0 || !(w->sync_ref > 0))
        return 0;
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++) {
        cpn_progress pr;
        if (w->batch[k] <= 0 || ls[k].state != PART_RUNNING)
            continue;
        if (status_progress(w->dir, k, &pr) != 0 || pr.outer < 0) {
            missing++;
            continue;
        }
        if (w->outer0[k] < 0 || pr.outer < w->outer0[k]) {
            w->outer0[k] = pr.outer;
            w->wait0[k] = pr.wait;
        } else if (pr.outer >= w->outer0[k] + 2) { /* a window of two outer steps */
            w->per[k] = (pr.wait - w->wait0[k]) / (double)(pr.outer - w->outer0[k]);
            w->outer0[k] = pr.outer;
            w->wait0[k] = pr.wait;
        }
        if (w->per[k] < 0)
            missing++;
        else if (least < 0 || w->per[k] < least)
            least = w->per[k];
    }
    /* every running part measured: the least is the transfer's */
    if (missing || least < 0 || least < w->drift * w->sync_ref)
        return 0;
    *meas = least;
    for (int k = 0; k < CPN_REPLAN_MAX; k++)
        w->per[k] = -1;
    return 1;
}

/* The clusters file again if it changed: its clusters, the job and links. */
static int load(cpn_watch *w, cpn_cluster **cs, int *n, cpn_job *job, cpn_link **links, int *nl)
{
    struct stat st;
    char *text = NULL, err[512];
    size_t len = 0;
    if (!w->clusters || stat(w->clusters, &st) != 0)
        return -1;
    double at = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
    if (at == w->clusters_mtime)
        return -1;
    w->clusters_mtime = at;
    int rc = cpn_read_file(w->job, &text, &len);
    if (!rc)
        rc = cpn_job_parse(text, len, job, err, sizeof err);
    free(text);
    if (!rc && !(rc = cpn_read_file(w->clusters, &text, &len))) {
        rc = cpn_clusters_parse(text, len, cs, n, err, sizeof err);
        free(text);
    }
    if (!rc && w->links && !(rc = cpn_read_file(w->links, &text, &len))) {
        rc = cpn_links_parse(text, len, links, nl, err, sizeof err);
        free(text);
    }
    if (rc)
        printf("weft-cpn run: the clusters for a join: %s\n", rc == WEFT_EIO ? "cannot read "
               "them" : err);
    return rc ? -1 : 0;
}

static int find(const cpn_cluster *cs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(cs[i].name, name))
            return i;
    return -1;
}

/* The running parts as a candidate (part[i]: the plan's part of each). */
static int running(const cpn_watch *w, const cpn_plan *p, const cpn_cluster *cs, int n,
                   cpn_candidate *c, int *part)
{
    memset(c, 0, sizeof *c);
    c->given = 1;
    c->H = w->H > 0 ? w->H : p->H; /* a drift's period, which the training took */
    c->sync = !strncmp(p->sync, "diloco", 6) ? CPN_SYNC_DILOCO
            : !strncmp(p->sync, "streaming", 9) ? CPN_SYNC_STREAMING : CPN_SYNC_FULL;
    c->compress = !strcmp(p->compress, "int8") ? 2 : !strcmp(p->compress, "bf16") ? 1 : 0;
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX; k++) {
        if (w->batch[k] <= 0)
            continue;
        int i = find(cs, n, p->parts[k].cluster);
        if (i < 0 || c->n == CPN_PLAN_MAX_CLUSTERS - 1)
            return -1;
        part[c->n] = k;
        c->idx[c->n] = i;
        c->ranks[c->n] = p->parts[k].ranks;
        c->batch[c->n++] = w->batch[k];
    }
    return 0;
}

static int tried(cpn_watch *w, const char *name)
{
    for (int i = 0; i < w->ntried; i++)
        if (!strcmp(w->tried[i], name))
            return 1;
    if (w->ntried < (int)(sizeof w->tried / sizeof w->tried[0]))
        snprintf(w->tried[w->ntried++], sizeof w->tried[0], "%s", name);
    return 0;
}

/* Cluster j with the running parts: the planner's shares at the running
 * sync and H. 1 when it meets the QoS and beats cur by the margin. */
static int priced_join(const cpn_watch *w, const cpn_cluster *cs, int n, const cpn_link *links,
                       int nl, const cpn_job *job, const cpn_candidate *cur, int j,
                       cpn_candidate *c)
{
    (void)n;
    *c = *cur;
    c->idx[c->n] = j;
    c->ranks[c->n++] = cpn_cluster_cores(&cs[j]);
    c->given = 0;
    cpn_plan_price(cs, links, nl, &job->m, c); /* the shares */
    c->given = 1;
    c->H = cur->H;
    cpn_plan_price(cs, links, nl, &job->m, c);
    return !c->why[0] && c->step_s < (1 - w->margin) * cur->step_s;
}

static void new_part(const cpn_cluster *cl, const cpn_candidate *c, cpn_part *pt)
{
    memset(pt, 0, sizeof *pt);
    snprintf(pt->cluster, sizeof pt->cluster, "%s", cl->name);
    snprintf(pt->launcher, sizeof pt->launcher, "%s", cl->launcher[0] ? cl->launcher : "local");
    snprintf(pt->slurm_conf, sizeof pt->slurm_conf, "%s", cl->slurm_conf);
    if (cl->nhosts > 0)
        snprintf(pt->host, sizeof pt->host, "%s", cl->hosts[0].name);
    pt->ranks = c->ranks[c->n - 1];
    pt->batch = c->batch[c->n - 1];
    pt->speed = cpn_metric_value(cl, "speed", 1);
}

static int first_joiner(cpn_watch *w, const cpn_plan *p, const cpn_cluster *cs, int n,
                        const cpn_link *links, int nl, const cpn_job *job, cpn_part *pt,
                        int *batch, char *why, size_t cap)
{
    cpn_candidate cur, c;
    int part[CPN_PLAN_MAX_CLUSTERS];
    if (running(w, p, cs, n, &cur, part) != 0) {
        printf("weft-cpn run: a join not priced: the clusters file lacks a running part\n");
        return 0;
    }
    cpn_plan_price(cs, links, nl, &job->m, &cur);
    for (int j = 0; j < n; j++) {
        int in = 0;
        for (int k = 0; k < p->nparts; k++)
            in |= !strcmp(p->parts[k].cluster, cs[j].name);
        if (in || tried(w, cs[j].name))
            continue;
        if (!priced_join(w, cs, n, links, nl, job, &cur, j, &c)) {
            printf("weft-cpn run: cluster %s not taken in: predicted step %.4g s against "
                   "%.4g s%s%s\n", cs[j].name, c.step_s, cur.step_s, c.why[0] ? ", " : "", c.why);
            continue;
        }
        memset(batch, 0, CPN_REPLAN_MAX * sizeof *batch);
        for (int i = 0; i < cur.n; i++)
            batch[part[i]] = c.batch[i];
        batch[p->nparts] = c.batch[c.n - 1];
        new_part(&cs[j], &c, pt);
        snprintf(why, cap, "cluster %s joins: predicted step %.4g s against %.4g s", cs[j].name,
                 c.step_s, cur.step_s);
        return 1;
    }
    return 0;
}

int watch_joiner(cpn_watch *w, const cpn_plan *p, cpn_part *pt, int *batch, char *why,
                 size_t cap)
{
    cpn_cluster *cs = NULL;
    cpn_link *links = NULL;
    cpn_job job;
    int n = 0, nl = 0, got = 0;
    memset(&job, 0, sizeof job);
    if (p->nparts >= p->cap || load(w, &cs, &n, &job, &links, &nl) != 0) {
        cpn_job_free(&job);
        return 0;
    }
    if (!w->known) { /* the clusters at the start: the plan chose among them */
        for (int i = 0; i < n; i++)
            tried(w, cs[i].name);
        w->known = 1;
    } else if (n <= CPN_PLAN_MAX_CLUSTERS) {
        got = first_joiner(w, p, cs, n, links, nl, &job, pt, batch, why, cap);
    }
    for (int i = 0; i < n; i++)
        cpn_cluster_free(&cs[i]);
    free(cs);
    free(links);
    cpn_job_free(&job);
    return got;
}
