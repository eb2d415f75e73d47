/* The launchers of weft-cpn run (cpn_launch.h). Every part runs one
 * script per rank, whatever starts it, so that the ranks' variables are
 * written once and each launcher only has to start the script ranks times:
 * a scheduler's own way (srun's SLURM_PROCID) or ours (the index as the
 * first argument). A rank writes its exit status beside the script, which
 * is how a part ended under a scheduler is told from one that was killed
 * (no status file). */
#include "cpn/cpn_launch.h"

#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *launch_state_name(int state)
{
    static const char *const names[] = { "waiting", "running", "done", "failed" };
    return state >= 0 && state <= PART_FAILED ? names[state] : "?";
}

/* s as one shell word. */
static void q(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++)
        fputs(*s == '\'' ? "'\\''" : (char[2]){ *s, 0 }, f);
    fputc('\'', f);
}

static void arg(FILE *f, const char *key, const char *v)
{
    fprintf(f, " \\\n    %s ", key);
    q(f, v);
}

/* The part's shares in cluster order: every part's batch. */
static void shares(FILE *f, const cpn_plan *p)
{
    char buf[512];
    size_t n = 0;
    for (int k = 0; k < p->nparts && n < sizeof buf; k++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%d", k ? "," : "", p->parts[k].batch);
    arg(f, "--batch-shares", buf);
}

static void train_line(FILE *f, const cpn_launched *l, const cpn_plan *p, const cpn_job_env *e)
{
    char num[64];
    q(f, e->train);
    arg(f, "--model", p->model);
    arg(f, "--data", p->data);
    snprintf(num, sizeof num, "%ld", p->steps);
    arg(f, "--steps", num);
    snprintf(num, sizeof num, "%d", p->global_batch);
    arg(f, "--batch", num);
    if (p->seq > 0) {
        snprintf(num, sizeof num, "%d", p->seq);
        arg(f, "--seq", num);
    }
    arg(f, "--sync", p->sync);
    if (p->compress[0])
        arg(f, "--compress", p->compress);
    shares(f, p);
    snprintf(num, sizeof num, "%.6g", l->part->speed);
    arg(f, "--speed", num);
    fprintf(f, " \\\n    --progress %s/progress", e->dir);
    if (e->metrics)
        arg(f, "--metrics", e->metrics);
    for (int i = 0; i < p->ntrain; i++) {
        fputc(' ', f);
        q(f, p->train_args[i]);
    }
    for (char *const *x = e->extra; x && *x; x++) {
        fputc(' ', f);
        q(f, *x);
    }
    fputc('\n', f);
}

static int write_rank_script(cpn_launched *l, const cpn_plan *p, const cpn_job_env *e)
{
    FILE *f = fopen(l->script, "w");
    if (!f)
        return WEFT_EIO;
    fprintf(f, "#!/bin/sh\n# weft-cpn run: part %d (cluster %s), ranks %d..%d of %d\n",
            l->index, l->part->cluster, l->base, l->base + l->part->ranks - 1, e->world);
    fprintf(f, "i=${SLURM_PROCID:-${1:-0}}\n");
    fprintf(f, "export WEFT_RANK=$((%d + i)) WEFT_WORLD_SIZE=%d WEFT_LOCAL_RANK=$i "
            "WEFT_LOCAL_SIZE=%d\n", l->base, e->world, l->part->ranks);
    fprintf(f, "export WEFT_MASTER_ADDR=%s WEFT_MASTER_PORT=%d WEFT_STORE_EXTERNAL=1 "
            "WEFT_CLUSTER=%d\n", e->master, e->port, l->index);
    if (l->join) /* admitted at the members' next outer step (weft_comm_join) */
        fprintf(f, "export WEFT_JOIN=1\n");
    fprintf(f, "WEFT_JOB_SECRET=$(cat %s) && export WEFT_JOB_SECRET || exit 1\n",
            e->secret_file);
    if (e->ifname)
        fprintf(f, "export WEFT_SOCKET_IFNAME=%s\n", e->ifname);
    if (e->wan)
        fprintf(f, "export WEFT_WAN=%s\n", e->wan);
    train_line(f, l, p, e);
    fprintf(f, "rc=$?\necho $rc >%s.rc.$i\nexit $rc\n", l->script);
    return fclose(f) ? WEFT_EIO : 0;
}

static int write_batch_script(const cpn_launched *l)
{
    char path[1300];
    snprintf(path, sizeof path, "%s.sbatch", l->script);
    FILE *f = fopen(path, "w");
    if (!f)
        return WEFT_EIO;
    fprintf(f, "#!/bin/sh\n#SBATCH --job-name=weft-%s\n#SBATCH --ntasks=%d\n"
            "#SBATCH --output=%s\n#SBATCH --open-mode=append\n"
            "srun --kill-on-bad-exit=0 sh %s\n", l->part->cluster, l->part->ranks, l->out,
            l->script);
    return fclose(f) ? WEFT_EIO : 0;
}

int launch_write(cpn_launched *l, const cpn_plan *p, const cpn_job_env *e)
{
    snprintf(l->script, sizeof l->script, "%s/part-%s.sh", e->dir, l->part->cluster);
    snprintf(l->out, sizeof l->out, "%s/part-%s.out", e->dir, l->part->cluster);
    if (!(l->pids = calloc((size_t)l->part->ranks, sizeof *l->pids)))
        return WEFT_ENOMEM;
    int rc = write_rank_script(l, p, e);
    if (rc == 0 && !strcmp(l->part->launcher, "slurm"))
        rc = write_batch_script(l);
    return rc;
}

/* A command's first line of output; 0 when it ran and printed one. */
static int first_line(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    out[0] = 0;
    if (!f)
        return -1;
    if (!fgets(out, (int)cap, f))
        out[0] = 0;
    while (fgetc(f) != EOF)
        ;
    int st = pclose(f);
    out[strcspn(out, "\n")] = 0;
    return st == 0 && out[0] ? 0 : -1;
}

static int start_slurm(cpn_launched *l)
{
    char cmd[3000], line[256];
    snprintf(cmd, sizeof cmd, "SLURM_CONF='%s' sbatch --parsable '%s.sbatch' 2>&1",
             l->part->slurm_conf, l->script);
    if (first_line(cmd, line, sizeof line) || atol(line) <= 0) {
        fprintf(stderr, "weft-cpn run: part %s: sbatch failed: %s\n", l->part->cluster, line);
        return WEFT_ESYS;
    }
    l->slurm_job = atol(line);
    return 0;
}

/* local and ssh: a process per rank, its output appended to the part's. */
static int start_procs(cpn_launched *l)
{
    int ssh = !strcmp(l->part->launcher, "ssh");
    for (int i = 0; i < l->part->ranks; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        pid_t pid = fork();
        if (pid < 0)
            return WEFT_ESYS;
        if (pid == 0) {
            setpgid(0, 0); /* the rank's script and its training go together */
            int fd = open(l->out, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
            if (ssh)
                execlp("ssh", "ssh", "-o", "BatchMode=yes", l->part->host, "sh", l->script, idx,
                       (char *)NULL);
            else
                execl("/bin/sh", "sh", l->script, idx, (char *)NULL);
            _exit(127);
        }
        l->pids[i] = pid;
    }
    return 0;
}

int launch_start(cpn_launched *l)
{
    l->state = PART_WAITING;
    return !strcmp(l->part->launcher, "slurm") ? start_slurm(l) : start_procs(l);
}

/* Under a scheduler: the worst status the ranks wrote; 128 + 9 where a
 * rank wrote none (killed before it could). */
static int rank_statuses(const cpn_launched *l)
{
    int worst = 0;
    for (int i = 0; i < l->part->ranks; i++) {
        char path[1300];
        int st = 137;
        snprintf(path, sizeof path, "%s.rc.%d", l->script, i);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &st) != 1)
                st = 137;
            fclose(f);
        }
        worst = st > worst ? st : worst;
    }
    return worst;
}

static void poll_slurm(cpn_launched *l)
{
    char cmd[2000], line[128];
    snprintf(cmd, sizeof cmd, "SLURM_CONF='%s' squeue -h -j %ld -o %%T 2>/dev/null",
             l->part->slurm_conf, l->slurm_job);
    if (first_line(cmd, line, sizeof line) == 0 && strcmp(line, "COMPLETED") &&
        strcmp(line, "FAILED") && strcmp(line, "CANCELLED")) {
        l->state = !strcmp(line, "PENDING") || !strcmp(line, "CONFIGURING") ? PART_WAITING
                                                                             : PART_RUNNING;
        return;
    }
    l->status = rank_statuses(l);
    l->state = l->status ? PART_FAILED : PART_DONE;
}

void launch_poll(cpn_launched *l)
{
    if (l->state >= PART_DONE)
        return;
    if (l->slurm_job) {
        poll_slurm(l);
        return;
    }
    int live = 0;
    for (int i = 0; i < l->part->ranks; i++) {
        int st;
        if (l->pids[i] > 0 && waitpid(l->pids[i], &st, WNOHANG) == l->pids[i]) {
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            l->status = code > l->status ? code : l->status;
            l->pids[i] = 0;
        }
        live += l->pids[i] > 0;
    }
    l->state = live ? PART_RUNNING : l->status ? PART_FAILED : PART_DONE;
}

void launch_kill(cpn_launched *l)
{
    if (l->slurm_job && l->state < PART_DONE) {
        char cmd[2000];
        snprintf(cmd, sizeof cmd, "SLURM_CONF='%s' scancel %ld >/dev/null 2>&1",
                 l->part->slurm_conf, l->slurm_job);
        if (system(cmd) != 0)
            fprintf(stderr, "weft-cpn run: scancel %ld failed\n", l->slurm_job);
        return;
    }
    for (int i = 0; l->pids && i < l->part->ranks; i++)
        if (l->pids[i] > 0)
            kill(-l->pids[i], SIGTERM);
}

void launch_kill_hard(cpn_launched *l)
{
    if (l->slurm_job) {
        launch_kill(l);
        return;
    }
    for (int i = 0; l->pids && i < l->part->ranks; i++)
        if (l->pids[i] > 0) {
            kill(-l->pids[i], SIGKILL);
            kill(-l->pids[i], SIGCONT);
        }
}

int launch_stop(cpn_launched *l)
{
    if (strcmp(l->part->launcher, "local"))
        return WEFT_ENOTSUP;
    for (int i = 0; l->pids && i < l->part->ranks; i++)
        if (l->pids[i] > 0)
            kill(-l->pids[i], SIGSTOP);
    return 0;
}
