/* weft-train: train an MLP or a GPT, on one process or data-parallel on many.
 *
 *   weft-train --model mlp --data builtin                 (no download needed)
 *   weftrun -n 4 weft-train --model mlp --data builtin    (4 ranks, data parallel)
 *   weft-train --model mlp --data fashion-mnist --epochs 1 --batch 256
 *   weft-train --model gpt --data builtin --steps 2000
 *   weft-train --model gpt --data corpus.tok --seq 64     (from weft-tokenize)
 *   weft-train --resume run.ckpt --steps 4000             (continue a run)
 *
 * Every option that shapes the run (model, data, optimiser, schedule,
 * batch, seed, precision, steps) is saved in the checkpoint; --resume takes
 * them from there unless given again on the command line.
 *
 * Under a launcher (weftrun, torchrun, mpirun, srun) each rank takes its
 * part of every global batch, gradients are averaged over the ranks before
 * the optimiser step, and rank 0 reports, evaluates and saves. Checkpoints
 * do not depend on the number of ranks or the ZeRO stage.
 *
 *   weftrun -n 4 weft-train --zero 3 --accum 4      (sharded state, micro-steps)
 *   weftrun -n 4 weft-train --sync diloco:50 --straggle 1:20
 *   weftrun -n 4 weft-train --sync backup:1 --straggle 1:20   (drop the latest)
 *
 *   weftrun -n 4 --servers 2 weft-train --mode ps --consistency ssp:2
 *                                          (4 workers, 2 parameter servers)
 *
 * --zero, --accum, --sync and --straggle belong to the launch, not the
 * run: a checkpoint does not keep them (docs/TRAINING.md).
 *
 * The run itself is the library's (weft_run_* in weft.h): this program
 * reads the command line (options.c), joins the job, steps the run and
 * draws its progress (report.c); inspect.c lists a checkpoint. */
#include "train.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The handler's only way to the communicator; membership changes replace it. */
static _Atomic(weft_comm *) dump_comm;

/* SIGUSR1 (weftrun forwards it): write the flight recorder to stderr. The
 * dump takes no lock and allocates nothing, so a handler may call it. */
static void on_sigusr1(int sig)
{
    (void)sig;
    weft_comm *c = atomic_load(&dump_comm);
    if (c)
        weft_comm_dump(c, 2);
}

/* A job of several ranks trains on the job's communicator; a lone process
 * on none (NULL). The options are checked against each other first, so a
 * contradiction stops every rank before any of them joins. */
static weft_comm *join_job(weft_run_config *cfg, int elastic, int *joined)
{
    weft_config jc;
    weft_comm *comm = NULL;
    const char *j = getenv("WEFT_JOIN");
    weft_config_default(&jc);
    int several = weft_config_from_env(&jc) == 0 && jc.world_size > 1;
    /* weftrun --elastic --restarts: a replacement joins the running job */
    *joined = several && elastic && j && strcmp(j, "1") == 0;
    if (weft_run_config_check(cfg, *joined) != 0)
        die("%s", weft_run_config_error(cfg));
    if (several) {
        signal(SIGUSR1, on_sigusr1);
        int rc = *joined ? weft_comm_join(&jc, &comm) : weft_comm_init(&comm, &jc);
        if (rc != 0)
            die("cannot join the job: %s", weft_strerror(rc));
        atomic_store(&dump_comm, comm);
    }
    return comm;
}

static void leave_job(weft_comm *comm, int elastic)
{
    int rc;
    atomic_store(&dump_comm, NULL);
    if (comm && (rc = weft_comm_destroy(comm)) != 0) {
        /* --elastic: a rank that dies after the last step loses nothing */
        if (!elastic)
            die("leaving the job: %s", weft_strerror(rc));
        fprintf(stderr, "weft-train: leaving the job: %s (the training is complete)\n",
                weft_strerror(rc));
    }
}

/* The run stops here: its own account of why. */
static void fail(const weft_run *run, int rc)
{
    const char *why = run ? weft_run_error(run) : NULL;
    die("%s", why && why[0] ? why : weft_strerror(rc));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--inspect") == 0)
        return inspect_ckpt(argv[2]);
    weft_run_config *cfg;
    if (weft_run_config_new(&cfg) != 0)
        die("%s", weft_strerror(WEFT_ENOMEM));
    weft_run_config_log(cfg, log_line, NULL);
    tool_opts o;
    parse_args(argc, argv, cfg, &o);
    fit_rings(&o);
    int joined;
    weft_comm *comm = join_job(cfg, o.elastic, &joined);

    weft_run *run = NULL;
    int rc = weft_run_open(cfg, comm, joined, &run);
    weft_run_config_free(cfg);
    if (rc < 0)
        fail(run, rc);
    atomic_store(&dump_comm, weft_run_comm(run));
    progress pg;
    progress_start(&pg);
    /* RECOVERED: the membership changed and the same step is taken again */
    while ((rc = weft_run_step(run)) == 0 || rc == WEFT_RUN_RECOVERED) {
        atomic_store(&dump_comm, weft_run_comm(run));
        weft_run_info in;
        if (rc == 0 && weft_run_info_get(run, &in) == 0)
            progress_step(&pg, &in);
    }
    if (rc < 0)
        fail(run, rc);
    /* its cluster lost a rank: gone as a failed rank would be, so that a
     * launcher restarting the dead starts the cluster again whole */
    if (rc == WEFT_RUN_REJOIN)
        exit(WEFT_RUN_REJOIN_STATUS);
    /* LEFT: this rank's replica is gone and the others finish the run */
    if (rc == WEFT_RUN_DONE && (rc = weft_run_finish(run)) < 0)
        fail(run, rc);
    comm = weft_run_comm(run);
    if ((rc = weft_run_close(run)) < 0)
        die("closing the run: %s", weft_strerror(rc));
    leave_job(comm, o.elastic);
    return 0;
}
