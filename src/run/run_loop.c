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
 * The files of this folder, one job each: options.c, data.c, model.c, the
 * sync modes (sync*.c), trainer.c (a run's set-up and end), report.c,
 * eval.c, ckpt.c, ps.c; train_tool.h is what they share. */
#include "train_tool.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* The handler's only way to the communicator. */
static weft_comm *dump_comm;

/* SIGUSR1 (weftrun forwards it): write the flight recorder to stderr. The
 * dump takes no lock and allocates nothing, so a handler may call it. */
static void on_sigusr1(int sig)
{
    (void)sig;
    if (dump_comm)
        weft_comm_dump(dump_comm, 2);
}

/* A job of several ranks trains data-parallel; a lone process as before
 * (NULL). Rank 0 speaks for the job. */
static weft_comm *join_job(opts *o, int *joined)
{
    weft_config jc;
    weft_comm *comm = NULL;
    const char *j = getenv("WEFT_JOIN");
    weft_config_default(&jc);
    *joined = 0;
    if (weft_config_from_env(&jc) == 0 && jc.world_size > 1) {
        signal(SIGUSR1, on_sigusr1);
        /* weftrun --elastic --restarts: a replacement joins the running job */
        *joined = o->elastic && j && strcmp(j, "1") == 0;
        if (*joined && (o->pp > 1 || o->tp > 1))
            die("elastic: joining a --pp/--tp job is not supported: a joiner would need a "
                "whole replica's worth of ranks at once");
        int rc = *joined ? weft_comm_join(&jc, &comm) : weft_comm_init(&comm, &jc);
        if (rc != 0)
            die("cannot join the job: %s", weft_strerror(rc));
        dump_comm = comm;
        if (weft_comm_rank(comm) != 0)
            o->quiet = 1;
    }
    return comm;
}

static void leave_job(weft_comm *comm, int elastic)
{
    int rc;
    dump_comm = NULL;
    if (comm && (rc = weft_comm_destroy(comm)) != 0) {
        /* --elastic: a rank that dies after the last step loses nothing */
        if (!elastic)
            die("leaving the job: %s", weft_strerror(rc));
        fprintf(stderr, "weft-train: leaving the job: %s (the training is complete)\n",
                weft_strerror(rc));
    }
}

__attribute__((noreturn)) static void die_step(const trainer *t, long step, int rc)
{
    die("step %ld: %s%s%s", step, weft_strerror(rc), t->comm ? ": " : "",
        t->comm ? weft_comm_error(t->comm) : "");
}

static void load_batch(trainer *t, weft_batch *b, long step)
{
    double t0 = now_s();
    int rc = weft_loader_next(t->loader, b);
    t->load_s += now_s() - t0;
    if (rc != 0)
        die("step %ld: %s", step, weft_strerror(rc));
}

/* This rank's part of the batch in --accum micro-steps (weft_zero_micro
 * zeroes the gradients on the first; only the last one's backward
 * communicates). Full sync weighs the gradient by this rank's share of the
 * global batch; the other modes step on the local mean. */
static int forward_backward(trainer *t, const weft_batch *b, train_step *st)
{
    if (t->pl) {
        st->n = b->n;
        st->global_n = b->global_n;
        st->width = t->image ? 1 : b->x_dim;
        st->seen = b->global_n;
        double t0 = now_s();
        int rc = pipeline_step(t->pl, t->sync.z, b, t->image, st);
        t->compute_s += now_s() - t0;
        return rc;
    }
    int accum = t->o->accum, global_n = t->sync.ops->weigh_global ? b->global_n : b->n, rc = 0;
    st->n = b->n;
    st->global_n = b->global_n;
    st->width = t->image ? 1 : b->x_dim;
    st->seen = global_n;
    double t0 = now_s();
    for (int k = 0; k < accum && rc == 0 && !st->skip; k++) {
        int lo = (int)((long)k * b->n / accum), hi = (int)((long)(k + 1) * b->n / accum);
        size_t xo = (size_t)lo * (size_t)b->x_dim;
        const void *x = t->image ? (const void *)(b->x + xo) : (const void *)(b->tokens + xo);
        const int32_t *y = b->y + (t->image ? (size_t)lo : xo);
        float l = 0;
        rc = weft_zero_micro(t->sync.z, hi - lo, global_n, k == accum - 1);
        if (rc == 0)
            rc = weft_model_forward(t->m, x, y, hi - lo, b->x_dim, &l);
        if (rc == 0)
            st->correct += weft_model_count_correct(t->m, y);
        if (rc == 0)
            rc = weft_model_backward(t->m);
        st->loss += l * (float)(hi - lo) / (float)global_n;
    }
    t->compute_s += now_s() - t0;
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (argc == 3 && strcmp(argv[1], "--inspect") == 0)
        return ckpt_inspect(argv[2]);
    parse_args(&o, argc, argv);
    int quiet = o.quiet, joined;
    weft_comm *comm = join_job(&o, &joined); /* reads launch options only */
    long start_step;
    weft_ckpt *ck = resolve_options(&o, &start_step); /* before any check */
    elastic_check(&o, comm);
    data_sets d = { 0 };
    data_open(&o.r, &d);
    long steps = o.r.steps >= 0 ? o.r.steps
                                : (long)ceil(o.r.epochs * (double)d.ti.n / (double)o.r.batch);
    if (o.ps) {
        ps_main(&o, &d, steps, comm);
        leave_job(comm, 0);
        data_free(&d);
        return 0;
    }

    trainer t;
    trainer_open(&t, &o, comm, &d, ck, steps, start_step);
    long first = t.start_step;
    elastic_open(&t, &first, quiet, joined);
    weft_batch b;
    int rc, prefetched = 0, left = 0; /* prefetched: b already holds this step's batch */
    for (long step = first; step < t.end; step++) {
        train_step st = { .gnorm = -1, .bubble = -1 };
        int eb = elastic_boundary(&t, &step); /* joiners came in, or a rank went */
        if (eb)
            prefetched = 0;
        if (eb == 2) {
            step--;
            continue;
        }
        dump_comm = t.job; /* a membership change replaced it */
        if (!prefetched)
            load_batch(&t, &b, step);
        prefetched = 0;
        elastic_trace(&t, step, &b);
        st.epoch = (double)weft_loader_position(t.loader) / (double)d.ti.n;
        rc = sync_begin(&t.sync, &st.skip);
        if (rc == 0 && !st.skip)
            straggle(&o, step, t.rank, t.world);
        if (rc == 0)
            rc = forward_backward(&t, &b, &st);
        if (rc == 0)
            rc = sync_launch(&t.sync, &st);
        /* While full sync (or hier's inside a cluster) reduces the
         * gradients, the next batch: the one
         * piece of the next step that does not depend on them. Not before
         * a checkpoint, which records the loader's place. */
        int saving = o.save[0] && o.save_every > 0 && (step + 1) % o.save_every == 0;
        if (rc == 0 && (t.sync.shared || t.sync.prefetch) && step + 1 < t.end && !saving) {
            load_batch(&t, &b, step + 1);
            prefetched = 1;
        }
        float lr = weft_lr_at(&t.sched, weft_optim_steps(t.opt));
        if (rc == 0)
            rc = sync_step(&t.sync, &st, lr);
        if (rc == 0)
            rc = elastic_step_done(&t, step);
        if (rc != 0) {
            /* --elastic: the survivors go on from the step they agree on */
            int er = elastic_recover(&t, &step, rc);
            if (!er)
                die_step(&t, step, rc);
            if (er == 3) {
                left = 1; /* its replica is gone: the others finish the run */
                break;
            }
            prefetched = 0;
            step--;
            continue;
        }
        report_step(&t.pg, step, &st, lr);
        memory_check_step(&t, step);
        if (saving)
            ckpt_save(&t, step + 1);
    }
    if (!left)
        trainer_finish(&t);
    elastic_close(&t);
    trainer_close(&t);
    leave_job(t.job, o.elastic);
    data_free(&d);
    return 0;
}
