/* weft-cpn run: one training job across the clusters of a plan. It serves
 * the job's store (one secret for every part), starts each part through
 * its cluster's launcher with its ranks, batch share, speed and the plan's
 * sync (WEFT_CLUSTER k for part k), and watches them: the store's
 * rendezvous holds every rank until all have come, the parts' first ranks
 * keep their progress in the run's folder, and a part that ends early is
 * reported as lost. Whether the others go on is the training's matter:
 * with --elastic and diloco:H (or hier) a lost cluster is dropped at the
 * next outer step (docs/WAN.md, "Churn"); without it the job fails. */
#include "cpn/cpn_launch.h"
#include "cpn/cpn_replan.h"
#include "cpn/cpn_status.h"

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
    const char *plan, *dir, *train, *host, *ifname, *wan, *kill_part;
    int port;
    long kill_step;
    double timeout;
    char *const *extra;
} run_args;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-cpn run --plan PLAN.json --dir RUNDIR [--host ADDR] [--port N]\n"
        "                    [--train PATH] [--ifname IF] [--wan SPEC] [--timeout S]\n"
        "                    [--kill-at CLUSTER:STEP] [-- more weft-train arguments]\n"
        "  Starts each part of the plan through its launcher (local, slurm, ssh) as one\n"
        "  job: the store here on ADDR (the address every part reaches; 127.0.0.1),\n"
        "  weft-train (PATH; beside weft-cpn) with the plan's sync, each part's batch\n"
        "  share and speed; watches them until all end. RUNDIR keeps the scripts, the\n"
        "  parts' output and progress (weft-cpn status). --ifname: WEFT_SOCKET_IFNAME,\n"
        "  --wan: WEFT_WAN for the ranks; --kill-at (tests): ends part CLUSTER once the\n"
        "  job's progress reaches STEP.\n");
}

static int parse(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->host = "127.0.0.1";
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
        else if (!strcmp(k, "--kill-at")) {
            const char *c = strrchr(v, ':');
            if (!c || (a->kill_step = atol(c + 1)) < 1)
                return -1;
            a->kill_part = v;
        } else
            return -1;
    }
    return a->plan && a->dir ? 0 : -1;
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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

/* A part lost: the survivors' shares again, for status and the log. */
static void replan_lost(const run_args *a, const cpn_plan *p, const cpn_launched *ls, int lost)
{
    int alive[64];
    char why[160];
    double secs = 0;
    for (int k = 0; k < p->nparts && k < 64; k++)
        alive[k] = k != lost && ls[k].state != PART_FAILED;
    snprintf(why, sizeof why, "part %s lost", ls[lost].part->cluster);
    long step = job_step(p, a->dir);
    if (cpn_replan(a->dir, p, alive, why, step, &secs) == 0)
        printf("weft-cpn run: re-planned at step %ld in %.3f ms (%s): %s/replan.json\n", step,
               secs * 1e3, why, a->dir);
    else
        printf("weft-cpn run: %s; no part left to re-plan for\n", why);
}

/* From a loss until the re-plan runs: the survivors drop the lost part
 * at their next outer step, and the job's rank 0 then writes a "shrink"
 * row to the metrics (step N, the first step over the survivors; the
 * row is flushed as written). The new plan runs from the first shrink
 * row after the loss; the loss is the --kill-at's kill, else the moment
 * the part's launcher reported it ended, which can come after the
 * survivors saw it (Slurm's squeue lags). Where the lost part held
 * rank 0, or the training is not elastic, no row comes and nothing is
 * said. */
typedef struct {
    double at;       /* the loss; < 0: none waiting */
    long off;        /* the metrics' bytes read so far */
    long rows;       /* shrink rows seen so far */
    long used;       /* of them, answers to earlier losses */
    double row_at;   /* when the last new one was seen */
    long row_step;   /* and its step */
    char who[64];
} loss_watch;

/* The shrink rows added to the metrics since byte *off (moved past the
 * last whole line read), the last one's step into *step; -1 when the file
 * is shorter than *off (begun again). The file grows a row a step: each
 * look reads only what is new. */
static long shrink_rows(const char *dir, long *off, long *step)
{
    char path[1200], line[512];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    long n = 0, s;
    if (!f)
        return 0;
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < *off) {
        fclose(f);
        return -1;
    }
    fseek(f, *off, SEEK_SET);
    while (fgets(line, sizeof line, f)) {
        char kind[16];
        int whole = strchr(line, '\n') != NULL;
        int shrink = sscanf(line, "%ld,%*[^,],%15[^,]", &s, kind) == 2 && !strcmp(kind, "shrink");
        while (!whole && fgets(line, sizeof line, f)) /* the rest of a long row */
            whole = strchr(line, '\n') != NULL;
        if (!whole) /* a row still being written: read again next look */
            break;
        if (shrink) {
            n++;
            *step = s;
        }
        *off = ftell(f);
    }
    fclose(f);
    return n;
}

static void loss_seen(loss_watch *w, const cpn_launched *ls, int lost, double at)
{
    w->at = at;
    snprintf(w->who, sizeof w->who, "%s", ls[lost].part->cluster);
}

/* Every look: new shrink rows, and the pending loss's answer. */
static void loss_check(loss_watch *w, const char *dir)
{
    long step = 0, n = shrink_rows(dir, &w->off, &step);
    if (n < 0) { /* an earlier run's file, begun again */
        w->off = w->rows = w->used = 0;
        n = shrink_rows(dir, &w->off, &step);
    }
    if (n > 0) {
        w->rows += n;
        w->row_at = now_s();
        w->row_step = step;
    }
    if (w->at < 0 || w->rows <= w->used)
        return; /* no row for this loss yet */
    w->used = w->rows;
    double d = w->row_at - w->at;
    if (d >= 0)
        printf("weft-cpn run: the re-plan runs from step %ld, %.1f s after part %s was lost\n",
               w->row_step, d, w->who);
    else
        printf("weft-cpn run: the re-plan runs from step %ld, %.1f s before part %s's launcher "
               "reported it lost\n", w->row_step, -d, w->who);
    w->at = -1;
}

/* Until every part has ended: states, progress lines, the test hook and
 * the time limit. The number of parts that failed, the killed one aside. */
static int watch(const run_args *a, const cpn_plan *p, cpn_launched *ls)
{
    double t0 = now_s(), shown = 0;
    int killed = -1;
    double kill_at = 0;
    loss_watch lw = { .at = -1 };
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
                    replan_lost(a, p, ls, k);
                    loss_seen(&lw, ls, k, k == killed ? kill_at : now_s());
                }
            }
            left += ls[k].state < PART_DONE;
            failed += ls[k].state == PART_FAILED && k != killed;
        }
        loss_check(&lw, a->dir);
        if (!left)
            return failed;
        if (a->kill_part && killed < 0 && job_step(p, a->dir) >= a->kill_step)
            for (int k = 0; k < p->nparts; k++)
                if (!strncmp(a->kill_part, ls[k].part->cluster, strlen(ls[k].part->cluster)) &&
                    a->kill_part[strlen(ls[k].part->cluster)] == ':') {
                    printf("weft-cpn run: ending part %s at step %ld\n", ls[k].part->cluster,
                           job_step(p, a->dir));
                    launch_kill(&ls[k]);
                    killed = k;
                    kill_at = now_s();
                }
        if (a->timeout > 0 && now_s() - t0 > a->timeout) {
            printf("weft-cpn run: %.0f s passed: ending every part\n", a->timeout);
            for (int k = 0; k < p->nparts; k++)
                launch_kill(&ls[k]);
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
        int rc = launch_write(&ls[k], p, e);
        if (rc == 0)
            rc = launch_start(&ls[k]);
        if (rc) {
            fprintf(stderr, "weft-cpn run: part %s: cannot start it: %s\n",
                    p->parts[k].cluster, weft_strerror(rc));
            return rc;
        }
        write_state(a->dir, &ls[k]);
        printf("weft-cpn run: part %s: %d rank(s) from rank %d via %s%s, batch %d, speed %g\n",
               p->parts[k].cluster, p->parts[k].ranks, base, p->parts[k].launcher,
               ls[k].slurm_job ? " (sbatch)" : "", p->parts[k].batch, p->parts[k].speed);
    }
    return 0;
}

static int run_plan(const run_args *a, const cpn_plan *p)
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
    cpn_launched *ls = calloc((size_t)p->nparts, sizeof *ls);
    rc = ls ? launch_all(a, p, ls, &e) : WEFT_ENOMEM;
    int failed = rc ? 0 : watch(a, p, ls);
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
