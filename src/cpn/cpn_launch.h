/* Starting a plan's parts through each cluster's own launcher, watching
 * them and stopping them (cpn_launch.c). A part is a script in the run's
 * folder that starts one rank (its index from SLURM_PROCID or its first
 * argument) with the job's variables; the launcher starts it ranks times:
 *   local  fork and exec here, one process a rank
 *   slurm  sbatch of a batch script whose srun starts the ranks, with the
 *          part's SLURM_CONF (that cluster's slurmctld)
 *   ssh    ssh HOST sh SCRIPT I for each rank: the folder must be shared;
 *          the command line is all weft gives (untested without a server) */
#ifndef WEFT_CPN_CPN_LAUNCH_H
#define WEFT_CPN_CPN_LAUNCH_H

#include "cpn/cpn_run_plan.h"

#include <sys/types.h>

enum { PART_WAITING = 0, PART_RUNNING, PART_DONE, PART_FAILED };

typedef struct {
    const cpn_part *part;
    int index, base;       /* its number in the plan, its first rank */
    int join;              /* 1: its ranks join the running job (WEFT_JOIN=1) */
    char script[1200], out[1200];
    long slurm_job;        /* slurm: the job id; 0: none */
    pid_t *pids;           /* local and ssh: a process per rank; 0: ended */
    int state;             /* PART_* */
    int status;            /* the worst exit status of its ranks once ended */
} cpn_launched;

/* What every part's ranks share. */
typedef struct {
    const char *dir, *train, *master, *secret_file, *ifname, *wan, *metrics;
    int port, world;
    char *const *extra;   /* more training arguments (NULL-terminated) */
} cpn_job_env;

/* Writes the part's script (and slurm's batch script) into dir. */
int launch_write(cpn_launched *l, const cpn_plan *p, const cpn_job_env *e);
int launch_start(cpn_launched *l);
/* Updates l->state without blocking. */
void launch_poll(cpn_launched *l);
/* Ends the part (SIGTERM to its processes, or scancel). */
void launch_kill(cpn_launched *l);
/* Ends a part that may be stopped or hung: SIGKILL (and SIGCONT, so a
 * stopped process takes it), or scancel. */
void launch_kill_hard(cpn_launched *l);
/* Stops the part's processes where it runs here (local: SIGSTOP), as a
 * cluster that goes silent without its part ending; WEFT_ENOTSUP for the
 * other launchers. For tests. */
int launch_stop(cpn_launched *l);
const char *launch_state_name(int state);

#endif
