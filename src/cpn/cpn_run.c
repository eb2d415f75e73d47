/* weft-cpn run: one training job across the clusters of a plan. It serves
 * the job's store (one secret for every part), starts each part through
 * its cluster's launcher with its ranks, batch share, speed and the plan's
 * sync (WEFT_CLUSTER k for part k), and watches them: the store's
 * rendezvous holds every rank until all have come, the parts' first ranks
 * keep their progress in the run's folder, and a part that ends early is
 * reported as lost. Whether the others go on is the training's matter:
 * with --elastic and diloco:H (or hier) a lost cluster is dropped at the
 * next outer step (docs/WAN.md, "Churn"); without it the job fails. It
 * re-plans when a part is lost, falls silent, when the job's outer sync
 * is slower than planned, when the parts' speeds differ from the plan's
 * (the shares by the measured rates), and when a cluster that makes the plan faster
 * appears (cpn_watch.c), whose part it starts to join the running job. */
#include "cpn/cpn_joined.h"
#include "cpn/cpn_launch.h"
#include "cpn/cpn_loss.h"
#include "cpn/cpn_replan.h"
#include "cpn/cpn_status.h"
#include "cpn/cpn_watch.h"

#include "core/clock.h"

#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *plan, *dir, *train, *host, *ifname, *wan, *kill_part, *stall_part;
    const char *clusters, *job, *links;
    int port;
    long kill_step, stall_step;
    double timeout, silent_after, drift, speed_drift, margin;
    char *const *extra;
} run_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-cpn run --plan PLAN.json --dir RUNDIR [--host ADDR] [--port N]\n"
        "                    [--train PATH] [--ifname IF] [--wan SPEC] [--timeout S]\n"
        "                    [--silent-after S] [--drift F] [--speed-drift F]\n"
        "                    [--clusters C.json --job J.json\n"
        "                    [--links L.json] [--join-margin M]] [--kill-at CLUSTER:STEP]\n"
        "                    [--stall-at CLUSTER:STEP] [-- more weft-train arguments]\n"
        "  Starts each part of the plan through its launcher (local, slurm, ssh) as one\n"
        "  job: the store here on ADDR (the address every part reaches; 127.0.0.1),\n"
        "  weft-train (PATH; beside weft-cpn) with the plan's sync, each part's batch\n"
        "  share and speed; watches them until all end. RUNDIR keeps the scripts, the\n"
        "  parts' output and progress (weft-cpn status). --ifname: WEFT_SOCKET_IFNAME,\n"
        "  --wan: WEFT_WAN for the ranks. Re-plans when a part ends early, when one's\n"
        "  progress stands still S s (60; 0: never; it is ended as lost), when the\n"
        "  measured outer sync is F times the plan's (--drift, 2; 0: never), when the\n"
        "  parts' measured seconds a step are F times apart against the plan's (the\n"
        "  shares by the measured rates; --speed-drift, 2; 0: never), and when a cluster appears in C.json that makes\n"
        "  the step M faster (0.1): it joins the job.\n"
        "  Tests: --kill-at ends part CLUSTER once the job reaches STEP, --stall-at\n"
        "  stops its processes there (local parts).\n");
}

static int parse(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->host = "127.0.0.1";
    a->silent_after = 60;
    a->drift = 2;
    a->speed_drift = 2;
    a->margin = 0.1;
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--")) {
            a->extra = argv + i + 1;
            break;
        }
        if (!v)
            return -1;
        if (!strcmp(k, "--plan")) a->plan = v;
        else if (!strcmp(k, "--dir")) a->dir = v;
        else if (!strcmp(k, "--train")) a->train = v;
        else if (!strcmp(k, "--host")) a->host = v;
        else if (!strcmp(k, "--ifname")) a->ifname = v;
        else if (!strcmp(k, "--wan")) a->wan = v;
        else if (!strcmp(k, "--port")) a->port = atoi(v);
        else if (!strcmp(k, "--timeout")) a->timeout = atof(v);
        else if (!strcmp(k, "--silent-after")) a->silent_after = atof(v);
        else if (!strcmp(k, "--drift")) a->drift = atof(v);
        else if (!strcmp(k, "--speed-drift")) a->speed_drift = atof(v);
        else if (!strcmp(k, "--join-margin")) a->margin = atof(v);
        else if (!strcmp(k, "--clusters")) a->clusters = v;
        else if (!strcmp(k, "--job")) a->job = v;
        else if (!strcmp(k, "--links")) a->links = v;
        else if (!strcmp(k, "--kill-at") || !strcmp(k, "--stall-at")) {
            const char *c = strrchr(v, ':');
            long at = c ? atol(c + 1) : 0;
            if (at < 1)
                return -1;
            if (k[2] == 'k') {
                a->kill_part = v;
                a->kill_step = at;
            } else {
                a->stall_part = v;
                a->stall_step = at;
            }
        } else
            return -1;
    }
    return a->plan && a->dir && !a->clusters == !a->job ? 0 : -1;
}

/* weft-train beside this program, else on PATH. */
static void default_train(char *out, size_t cap)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    snprintf(out, cap, "weft-train");
    if (n <= 0)
        return;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
        *slash = 0;
        snprintf(out, cap, "%s/weft-train", self);
        if (access(out, X_OK) != 0)
            snprintf(out, cap, "weft-train");
    }
}

/* 32 random bytes as hex, in a file only we can read. */
static int make_secret(const char *path, char *hex, size_t cap)
{
    unsigned char b[32];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b) {
        if (fd >= 0)
            close(fd);
        return WEFT_ESYS;
    }
    close(fd);
    for (size_t i = 0; i < sizeof b && 2 * i + 2 < cap; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return WEFT_EIO;
    int ok = write(fd, hex, strlen(hex)) == (ssize_t)strlen(hex);
    close(fd);
    return ok ? 0 : WEFT_EIO;
}

static void write_state(const char *dir, const cpn_launched *l)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/part-%s.state", dir, l->part->cluster);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "%s", launch_state_name(l->state));
    if (l->state >= PART_DONE)
        fprintf(f, " (exit %d)", l->status);
    if (l->slurm_job)
        fprintf(f, " job %ld", l->slurm_job);
    fputc('\n', f);
    fclose(f);
}

/* The furthest step any part reported. */
static long job_step(const cpn_plan *p, const char *dir)
{
    long best = 0;
    for (int k = 0; k < p->nparts; k++) {
        cpn_progress pr;
        if (status_progress(dir, k, &pr) == 0 && pr.step > best)
            best = pr.step;
    }
    return best;
}

/* A re-plan with these shares: written, logged, and kept as the run's. */
static int replan(const run_args *a, const cpn_plan *p, cpn_watch *w, const int *batch,
                  const char *why, const char *extra, double t0)
{
    double secs = 0;
    long step = job_step(p, a->dir);
    int rc = cpn_replan_write(a->dir, p, batch, w->H, why, step, w->gen + 1, extra, t0, &secs);
    if (rc) {
        printf("weft-cpn run: %s; the re-plan cannot be written: %s\n", why, weft_strerror(rc));
        return rc;
    }
    w->gen++;
    if (batch != w->batch)
        memcpy(w->batch, batch, sizeof w->batch);
    printf("weft-cpn run: re-planned at step %ld in %.3f ms (%s): %s/replan.json\n", step,
           secs * 1e3, why, a->dir);
    return 0;
}

/* A part lost: the survivors keep their shares' proportion (the
 * planner's, by measured rate) over the whole batch. */
static void replan_lost(const run_args *a, const cpn_plan *p, cpn_watch *w, int lost,
                        const char *how)
{
    double t0 = clock_now(), weight[CPN_REPLAN_MAX];
    int batch[CPN_REPLAN_MAX];
    char why[160];
    for (int k = 0; k < CPN_REPLAN_MAX; k++)
        weight[k] = k == lost ? 0 : w->batch[k];
    snprintf(why, sizeof why, "part %s %s", p->parts[lost].cluster, how);
    if (cpn_replan_shares(p, weight, batch) == 0)
        replan(a, p, w, batch, why, NULL, t0);
    else
        printf("weft-cpn run: %s; no part left to re-plan for\n", why);
}

/* Whether the training takes a cluster in, or a new period, while it
 * runs: --elastic over diloco (the churn mode's outer-step boundaries). */
static int takes_changes(const cpn_plan *p)
{
    int elastic = 0;
    for (int i = 0; i < p->ntrain; i++)
        elastic |= !strcmp(p->train_args[i], "--elastic");
    return elastic && !strncmp(p->sync, "diloco:", 7);
}

/* The outer sync took meas s an outer step against the plan's: the same
 * shares, and the period that pays for the slower link as the period now
 * paid for its own (the planner's choices of H). The training takes it at
 * its next outer step (--elastic diloco), else it is the next launch's. */
static void replan_drift(const run_args *a, const cpn_plan *p, cpn_watch *w, double meas)
{
    static const int hs[] = { 10, 20, 50, 100, 200, 500 };
    double t0 = clock_now(), f = meas / w->sync_ref;
    int H = w->H > 0 ? w->H : p->H > 0 ? p->H : 1, h = hs[5], was = w->H;
    for (int i = 5; i >= 0; i--)
        h = hs[i] >= H * f ? hs[i] : h;
    h = h > p->steps ? (int)p->steps : h;
    char why[200], extra[160];
    snprintf(why, sizeof why, "the outer sync measured %.4g s against %.4g s planned (%.3gx): "
             "the link is slower than planned", meas, w->sync_ref, f);
    snprintf(extra, sizeof extra, ", \"outer_sync_s\": %.6g, \"planned_sync_s\": %.6g, "
             "\"H\": %d", meas, w->sync_ref, h);
    w->H = h;
    if (replan(a, p, w, w->batch, why, extra, t0) != 0) {
        w->H = was;
        return;
    }
    w->sync_ref = meas; /* the next drift is from here */
    if (takes_changes(p))
        printf("weft-cpn run: the running job takes period %d at its next outer step\n", h);
    else
        printf("weft-cpn run: period %d is the next launch's (the training takes a new one "
               "while it runs under --elastic with diloco)\n", h);
}

/* The parts' own seconds a step differ from the plan's by more than the
 * drift factor (a part slower or faster than planned): the shares by the
 * measured rates, the period kept. The training takes them at its next
 * outer step (--elastic diloco), else they are the next launch's. Shares
 * the rounding leaves as they are make no re-plan. */
static void replan_speed(const run_args *a, const cpn_plan *p, cpn_watch *w, const double *rate,
                         double off, int slow)
{
    double t0 = clock_now();
    int batch[CPN_REPLAN_MAX];
    char why[200], extra[64 + CPN_REPLAN_MAX * 16];
    if (cpn_replan_shares(p, rate, batch) != 0 ||
        !memcmp(batch, w->batch, (size_t)p->nparts * sizeof *batch))
        return;
    snprintf(why, sizeof why, "the parts' speeds measured %.3gx apart against the plan's: "
             "part %s the slowest", off, p->parts[slow].cluster);
    size_t len = (size_t)snprintf(extra, sizeof extra, ", \"samples_per_s\": [");
    for (int k = 0; k < p->nparts && k < CPN_REPLAN_MAX && len < sizeof extra; k++)
        len += (size_t)snprintf(extra + len, sizeof extra - len, "%s%.6g", k ? ", " : "",
                                rate[k]);
    if (len < sizeof extra)
        snprintf(extra + len, sizeof extra - len, "]");
    if (replan(a, p, w, batch, why, extra, t0) != 0)
        return;
    if (takes_changes(p))
        printf("weft-cpn run: the running job takes the new shares at its next outer step\n");
    else
        printf("weft-cpn run: the new shares are the next launch's (the training takes them "
               "while it runs under --elastic with diloco)\n");
}

/* Which part --kill-at or --stall-at names ("b:20"); -1 none. */
static int named(const cpn_plan *p, const char *what)
{
    for (int k = 0; what && k < p->nparts; k++) {
        size_t n = strlen(p->parts[k].cluster);
        if (!strncmp(what, p->parts[k].cluster, n) && what[n] == ':')
            return k;
    }
    return -1;
}

static int start_part(const run_args *a, const cpn_plan *p, cpn_launched *l,
                      const cpn_job_env *e)
{
    int rc = launch_write(l, p, e);
    if (rc == 0)
        rc = launch_start(l);
    if (rc) {
        fprintf(stderr, "weft-cpn run: part %s: cannot start it: %s\n", l->part->cluster,
                weft_strerror(rc));
        return rc;
    }
    write_state(a->dir, l);
    printf("weft-cpn run: part %s: %d rank(s) from rank %d via %s%s, batch %d, speed %g%s\n",
           l->part->cluster, l->part->ranks, l->base, l->part->launcher,
           l->slurm_job ? " (sbatch)" : "", l->part->batch, l->part->speed,
           l->join ? ", joining the running job" : "");
    return 0;
}

/* A cluster that makes the plan faster joins: the re-plan (its shares,
 * which the members and the joiner read when it is admitted) first, then
 * its part, whose ranks wait to be admitted at an outer-step boundary. */
static void join(const run_args *a, cpn_plan *p, cpn_launched *ls, cpn_watch *w,
                 const cpn_job_env *e)
{
    cpn_part pt;
    int batch[CPN_REPLAN_MAX], k = p->nparts, base = 0;
    char why[200];
    double t0 = clock_now();
    if (!watch_joiner(w, p, &pt, batch, why, sizeof why))
        return;
    if (!takes_changes(p)) {
        printf("weft-cpn run: %s, but the training takes no cluster in while it runs "
               "(it needs --elastic and diloco)\n", why);
        return;
    }
    p->parts[k] = pt;
    p->nparts++;
    if (replan(a, p, w, batch, why, NULL, t0) != 0) {
        p->nparts--;
        return;
    }
    for (int i = 0; i < p->nparts; i++) {
        p->parts[i].batch = batch[i]; /* the joiner's --batch-shares */
        base += i < k ? p->parts[i].ranks : 0;
    }
    watch_speed_reset(w, p); /* the joiner's speed is the plan's: the others' again too */
    int rc = cpn_joined_write(a->dir, p); /* for weft-cpn status, which reads the plan */
    if (rc)
        printf("weft-cpn run: %s/joined.json not written (%s): weft-cpn status will not show "
               "part %s\n", a->dir, weft_strerror(rc), pt.cluster);
    cpn_job_env je = *e;
    je.world = base + pt.ranks;
    ls[k] = (cpn_launched){ .part = &p->parts[k], .index = k, .base = base, .join = 1 };
    if (start_part(a, p, &ls[k], &je) != 0)
        ls[k].state = PART_FAILED;
}

/* Every look's re-plan triggers besides a part's end. */
static void triggers(const run_args *a, cpn_plan *p, cpn_launched *ls, cpn_watch *w,
                     const cpn_job_env *e, double *joined_at, int *silenced, double *silent_at)
{
    double now = clock_now(), meas = 0, rate[CPN_REPLAN_MAX], off = 0;
    int k = watch_silent(w, p, ls, now), slow = 0;
    if (k >= 0) {
        printf("weft-cpn run: part %s silent for %.1f s (no progress past step %ld): "
               "ended as lost\n", p->parts[k].cluster, a->silent_after, w->seen[k]);
        launch_kill_hard(&ls[k]);
        if (*silenced < 0) {
            *silenced = k;
            *silent_at = now;
        }
    }
    if (watch_drift(w, p, ls, &meas))
        replan_drift(a, p, w, meas);
    if (watch_speed(w, p, ls, rate, &off, &slow))
        replan_speed(a, p, w, rate, off, slow);
    if (a->clusters && now - *joined_at >= 1) {
        *joined_at = now;
        join(a, p, ls, w, e);
    }
}

/* The test hooks: part --kill-at ended, part --stall-at stopped. */
static void hooks(const run_args *a, const cpn_plan *p, cpn_launched *ls, int *killed,
                  double *kill_at, int *stalled)
{
    int k = named(p, a->kill_part), j = named(p, a->stall_part);
    if (k >= 0 && *killed < 0 && job_step(p, a->dir) >= a->kill_step) {
        printf("weft-cpn run: ending part %s at step %ld\n", ls[k].part->cluster,
               job_step(p, a->dir));
        launch_kill(&ls[k]);
        *killed = k;
        *kill_at = now_s();
    }
    if (j >= 0 && *stalled < 0 && job_step(p, a->dir) >= a->stall_step) {
        int rc = launch_stop(&ls[j]);
        printf("weft-cpn run: stopping part %s at step %ld%s\n", ls[j].part->cluster,
               job_step(p, a->dir), rc ? ": not a local part, left running" : "");
        *stalled = j;
    }
}

/* Until every part has ended: states, progress lines, the re-plan
 * triggers, the test hooks and the time limit. The number of parts that
 * failed, the one a test hook ended aside. */
static int watch(const run_args *a, cpn_plan *p, cpn_launched *ls, const cpn_job_env *e)
{
    double t0 = now_s(), shown = 0, kill_at = 0, joined_at = 0, silent_at = 0;
    int killed = -1, stalled = -1, silenced = -1;
    loss_watch lw = { .at = -1 };
    cpn_watch w = { .dir = a->dir, .silent_after = a->silent_after, .drift = a->drift,
                    .speed_drift = a->speed_drift,
                    .clusters = a->clusters, .job = a->job, .links = a->links,
                    .margin = a->margin };
    watch_init(&w, p, clock_now());
    for (;;) {
        int left = 0, failed = 0;
        for (int k = 0; k < p->nparts; k++) {
            int before = ls[k].state;
            launch_poll(&ls[k]);
            write_state(a->dir, &ls[k]);
            if (ls[k].state != before && ls[k].state >= PART_DONE) {
                printf("weft-cpn run: part %s %s (exit %d)%s\n", ls[k].part->cluster,
                       ls[k].state == PART_DONE ? "done" : "lost", ls[k].status,
                       k == killed ? ", as --kill-at asked" : "");
                if (ls[k].state == PART_FAILED) {
                    replan_lost(a, p, &w, k, k == silenced ? "silent" : "lost");
                    loss_seen(&lw, ls, k, k == killed ? kill_at : k == silenced ? silent_at
                                                                                : now_s());
                }
            }
            left += ls[k].state < PART_DONE;
            failed += ls[k].state == PART_FAILED && k != killed && k != stalled;
        }
        loss_check(&lw, a->dir);
        if (!left)
            return failed;
        triggers(a, p, ls, &w, e, &joined_at, &silenced, &silent_at);
        hooks(a, p, ls, &killed, &kill_at, &stalled);
        if (a->timeout > 0 && now_s() - t0 > a->timeout) {
            printf("weft-cpn run: %.0f s passed: ending every part\n", a->timeout);
            for (int k = 0; k < p->nparts; k++)
                launch_kill_hard(&ls[k]);
        }
        if (now_s() - shown >= 5) {
            shown = now_s();
            status_print(stdout, p, a->dir);
            fflush(stdout);
        }
        usleep(200000);
    }
}

static int launch_all(const run_args *a, const cpn_plan *p, cpn_launched *ls,
                      const cpn_job_env *e)
{
    for (int k = 0, base = 0; k < p->nparts; base += p->parts[k].ranks, k++) {
        ls[k].part = &p->parts[k];
        ls[k].index = k;
        ls[k].base = base;
        int rc = start_part(a, p, &ls[k], e);
        if (rc)
            return rc;
    }
    return 0;
}

static int run_plan(const run_args *a, cpn_plan *p)
{
    char secret[80], secret_file[1100], train[1100], err[256], metrics[1100];
    weft_store_server *srv = NULL;
    int port = 0, world = 0, rc;
    for (int k = 0; k < p->nparts; k++) {
        char old[1200];
        world += p->parts[k].ranks;
        snprintf(old, sizeof old, "%s/progress.%d", a->dir, k); /* an earlier run's */
        unlink(old);
        for (int i = 0; i < p->parts[k].ranks; i++) {
            snprintf(old, sizeof old, "%s/part-%s.sh.rc.%d", a->dir, p->parts[k].cluster, i);
            unlink(old);
        }
    }
    /* an earlier run's re-plan: its period and shares are not this run's */
    static const char *const earlier[] = { "progress.shares", "replan.json", "joined.json" };
    for (size_t i = 0; i < sizeof earlier / sizeof *earlier; i++) {
        char old[1200];
        snprintf(old, sizeof old, "%s/%s", a->dir, earlier[i]);
        unlink(old);
    }
    snprintf(secret_file, sizeof secret_file, "%s/secret", a->dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.csv", a->dir);
    if (a->train)
        snprintf(train, sizeof train, "%s", a->train);
    else
        default_train(train, sizeof train);
    if ((rc = make_secret(secret_file, secret, sizeof secret)) != 0 ||
        (rc = weft_store_server_start(&srv, NULL, a->port, &port, secret, err, sizeof err))) {
        fprintf(stderr, "weft-cpn run: cannot serve the job's store: %s\n",
                rc == WEFT_ESYS || rc == WEFT_EIO ? weft_strerror(rc) : err);
        return rc;
    }
    printf("weft-cpn run: %d ranks in %d part(s), sync %s; store %s:%d\n", world, p->nparts,
           p->sync, a->host, port);
    cpn_job_env e = { a->dir, train, a->host, secret_file, a->ifname, a->wan, metrics,
                      port, world, a->extra };
    cpn_launched *ls = calloc((size_t)p->cap, sizeof *ls); /* room for joiners */
    rc = ls ? launch_all(a, p, ls, &e) : WEFT_ENOMEM;
    int failed = rc ? 0 : watch(a, p, ls, &e);
    for (int k = 0; rc && ls && k < p->nparts; k++)
        launch_kill(&ls[k]);
    if (rc == 0)
        status_print(stdout, p, a->dir);
    for (int k = 0; ls && k < p->nparts; k++)
        free(ls[k].pids);
    free(ls);
    weft_store_server_stop(srv);
    return rc ? rc : failed ? WEFT_EIO : 0;
}

int weft_cpn_run_main(int argc, char **argv)
{
    run_args a;
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (parse(argc, argv, &a)) {
        usage(stderr);
        return WEFT_EINVAL;
    }
    cpn_plan p;
    char err[1400];
    int rc = cpn_plan_read(a.plan, &p, err, sizeof err);
    if (rc) {
        fprintf(stderr, "weft-cpn run: %s\n", err);
        return rc;
    }
    if (mkdir(a.dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "weft-cpn run: cannot make %s: %s\n", a.dir, strerror(errno));
        cpn_plan_free(&p);
        return WEFT_EIO;
    }
    /* the parts may start elsewhere: absolute paths */
    char *dir = realpath(a.dir, NULL), *train = a.train ? realpath(a.train, NULL) : NULL;
    if (dir && strlen(dir) < 800)
        a.dir = dir;
    if (train && strlen(train) < 800)
        a.train = train;
    rc = run_plan(&a, &p);
    free(dir);
    free(train);
    cpn_plan_free(&p);
    return rc;
}
