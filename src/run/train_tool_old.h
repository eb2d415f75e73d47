/* weft-train's internal header: the types its files share and what each
 * file offers the others (main.c's loop reads them). */
#ifndef WEFT_TRAIN_TOOL_H
#define WEFT_TRAIN_TOOL_H

#include "weft.h"

#include <stdio.h>

/* ---- options (options.c) ------------------------------------------------- */

/* What shapes the run; a checkpoint carries these as "key=value" lines. */
typedef struct {
    char model[256], data[1024], optim[16], precision[16], schedule[16];
    long steps;
    double epochs;
    int batch;
    double lr, min_lr, momentum, weight_decay, clip;
    long warmup;
    unsigned long long seed, data_seed;
    int seq, digits, layers, heads, dim;
    long train_size;
    char format[64];
} run_opts;

typedef struct {
    run_opts r;
    char save[1024], resume[1024], metrics[1024];
    long save_every, log_every, stop_at;
    int threads, eval_prompts, no_eval, quiet;
    double bucket_mb;
    int zero, accum, straggle_rank, straggle_ms;
    char sync[64];
    char compress[32];    /* --compress: the gradients' (full) or outer step's compressor */
    double outer_lr, outer_momentum; /* --outer-lr, --outer-momentum (< 0: the sync's own) */
    int ps;               /* --mode ps: parameter server instead of data parallel */
    char consistency[32];
    int pp, micro;        /* --pp stages, --micro-batches per step */
    int tp;               /* --tp tensor-parallel ranks */
    int sp;               /* --sp: sequence parallelism over the tensor group */
    int recompute;        /* --recompute: blocks' activations rebuilt in backward */
    char order[16];       /* --order of the tp, dp, pp dimensions, fastest first */
    char pp_schedule[32], pp_partition[256], pp_costs[1024];
    double pp_memory_mb;  /* --pp-memory: a stage's cap for the partition */
    double mem_limit;     /* --mem-limit: bytes a rank may hold (0: none) */
    int layout_auto;      /* --layout auto: the planner picks tp, pp, schedule, ZeRO */
    int elastic;          /* --elastic: a dead rank costs the step, joiners come in */
    char kill_at[128];    /* --kill-at (tests): RANK:STEP[:recover],... launch ranks die */
    char trace[1024];     /* --trace-samples (tests): each rank's committed sample ids */
    unsigned set; /* bit per run option given on the command line */
} opts;

/* The run options in the order of their keys; bit k of opts.set is O_k. */
enum { O_MODEL, O_DATA, O_OPTIM, O_PRECISION, O_SCHEDULE, O_STEPS, O_EPOCHS, O_BATCH, O_LR,
       O_MIN_LR, O_MOMENTUM, O_WD, O_CLIP, O_WARMUP, O_SEED, O_DATA_SEED, O_SEQ, O_DIGITS,
       O_LAYERS, O_HEADS, O_DIM, O_TRAIN_SIZE, O_FORMAT, O_COUNT };

void parse_args(opts *o, int argc, char **argv);
/* --kill-at and --trace-samples (elastic.c); 0: not one of them. */
int elastic_option(opts *o, const char *key, const char *v);
void run_opts_defaults(run_opts *r);
weft_ckpt *resolve_options(opts *o, long *start_step);
int run_opts_is_gpt(const run_opts *r);
int run_opts_format_code(const char *f);
void run_opts_format(const run_opts *r, char *buf, size_t cap);
void run_opts_merge(run_opts *r, unsigned set, char *saved);
/* --straggle: sleeps when this rank (of n) is the slow one at this step. */
void straggle(const opts *o, long step, int me, int n);

/* ---- data and model (data.c, model.c) ------------------------------------- */

typedef struct {
    weft_dataset *train, *eval;
    weft_dataset_info ti, ei;
    double mean, std; /* pixel statistics used to standardise images */
} data_sets;

void data_open(const run_opts *r, data_sets *d);
void data_free(data_sets *d);
/* This rank's part of every global batch; who names the ranks in errors. */
weft_loader *data_loader(const run_opts *r, const data_sets *d, int rank, int world, int accum,
                         const char *who);

weft_model *model_new(const run_opts *r, const data_sets *d);
void model_config(const run_opts *r, const data_sets *d, weft_model_config *cfg);
/* Dies naming both shapes when cfg (from source) cannot read d's samples. */
void model_check_fit(const weft_model_config *cfg, const data_sets *d, const char *source);
void model_tune(weft_model *m, const opts *o);
void model_optim_config(const run_opts *r, weft_optim_config *oc);
weft_lr_schedule model_lr_schedule(const run_opts *r, long steps);

/* ---- progress, metrics and messages (report.c) ---------------------------- */

void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Dies when path (of option opt) exists but is no regular file (or folder,
 * dir_ok), or when a path to be written lies in a folder it cannot write
 * (paths.c). */
void path_check(const char *opt, const char *path, int dir_ok, int written);
double now_s(void);
void cpu_s(double *process, double *thread);

/* One step's outcome as the loop and the sync mode fill it in. */
typedef struct {
    int n, global_n, width; /* samples of this rank and of the batch; rows per sample */
    int skip;               /* backup: the step was decided without this rank */
    int correct, seen;      /* seen: the samples loss and correct are over */
    float loss, gnorm;      /* gnorm < 0: not measured */
    double epoch;
    double bubble;          /* pipeline: the stages' mean idle share of the step; < 0: none */
} train_step;

typedef struct {
    int tty, quiet, batch;
    long log_every, total, first_step;
    double start, last_draw, loss_sum;
    long loss_n;
    FILE *csv;
    const weft_model_config *cfg; /* MFU (progress_model): the model, */
    double peak;                  /* FLOP/s of the job's compute ranks; 0: no MFU */
    const weft_model *model;      /* set while its auto matmul choice is to be told */
} progress;

/* steps: the planned run; the launch runs first_step..end. */
void progress_start(progress *p, const opts *o, long steps, long first_step, long end,
                    FILE *csv);
/* Model-FLOPs utilisation from here on, against ranks x threads x one
 * thread's measured matmul peak; lead: the rank that reports (the others
 * neither measure nor print it). */
void progress_model(progress *p, const weft_model *m, int ranks, int lead);
/* Stops the run on a loss that is not finite, else a CSV row and progress. */
void report_step(progress *p, long step, const train_step *st, double lr);
FILE *csv_open(const char *path, int append);
void csv_row(FILE *f, long step, double epoch, const char *split, double loss, double acc,
             double lr, double gnorm, double rate, double elapsed);
/* A membership change: a row of split kind ("shrink", "grow") whose last
 * column says what happened. */
void csv_event(FILE *f, long step, double epoch, const char *kind, double elapsed,
               const char *what);
void report_model(const weft_model *m, const run_opts *r, size_t nparams);

/* The final evaluation (eval.c). */
void evaluate(weft_model *m, const data_sets *d, const opts *o, FILE *csv, long step,
              const weft_loader *l);

/* ---- sync modes (sync.c, sync_full.c, sync_params.c) ---------------------- */

typedef struct train_sync train_sync;

/* A sync mode: how the ranks' gradients or parameters meet, as hooks the
 * loop calls through sync_* (sync.c). open, step and bytes are required; a
 * NULL hook has nothing to do in that mode. Adding a mode: its ops and one
 * line of the table in sync.c. */
typedef struct {
    int weigh_global; /* losses and gradients weighted by the global batch */
    int zero, accum;  /* takes --zero, --accum > 1 */
    void (*defaults)(opts *o); /* after the run's defaults, before the model */
    int (*open)(train_sync *s, weft_model *m, const weft_optim_config *oc,
                const weft_ckpt *ck);
    void (*describe)(const train_sync *s);         /* the banner's line */
    int (*begin)(train_sync *s, int *skip);        /* before forward */
    int (*launch)(train_sync *s, train_step *st);  /* after backward */
    int (*step)(train_sync *s, train_step *st, float lr);
    int (*drain)(train_sync *s, const weft_lr_schedule *lr); /* after the last step */
    int (*finish)(train_sync *s);
    void (*summary)(const train_sync *s);          /* after training, when it ran */
    uint64_t (*bytes)(const train_sync *s);        /* handed to the network */
} sync_ops;

struct train_sync {
    const sync_ops *ops;
    const opts *o;
    weft_comm *comm; /* NULL: one process */
    int world;
    weft_sync_config cfg;
    weft_zero *z;    /* every mode's optimiser step (over the job in full sync) */
    weft_sync *sy;   /* the modes that average parameters */
    struct sync_churn *churn; /* --elastic diloco and hier: an outer step that outlives a
                               * cluster (churn.h) */
    int shared;      /* z spans the job: saving is collective, the loader overlaps */
    int prefetch;    /* z spans a cluster: the loader overlaps its reduction too */
    size_t nparams;
    float metrics[2]; /* full sync: the job's loss and correct count, in flight */
    weft_request *mreq;
    uint64_t grad_bytes;
    weft_compressor *cz; /* full sync with --compress, and its model */
    weft_model *cz_model;
    /* sync_finish: means over the ranks of the bytes sent over wan links
     * (measured) and of the sync's bytes across and inside clusters */
    double wan_mean, across_mean, inside_mean;
    uint64_t wan0; /* wan bytes when the mode was open: the start-up's, left out */
    /* this rank's seconds in sync_step, in the optimiser step (its wait for
     * the gradients included), in the parameter sync after it (the outer
     * steps), and in the drain and last sync after the loop; the outer
     * steps' own split when the loop ended (sync_time.c) */
    double step_s, optim_s, after_s, final_s;
    double loop_outer[3];
};

extern const sync_ops sync_full, sync_average, sync_diloco, sync_stale, sync_backup;
extern const sync_ops sync_full_compress, sync_hier;

/* Checks the launch options against --sync and picks its mode (full sync
 * for one process, where no mode has anyone to meet). */
void sync_pick(train_sync *s, opts *o, weft_comm *comm);
int sync_open(train_sync *s, weft_model *m, const weft_optim_config *oc, const weft_ckpt *ck);
int sync_zero_open(train_sync *s, weft_comm *c, weft_model *m, const weft_optim_config *oc,
                   const weft_ckpt *ck);
void sync_describe(const train_sync *s);
int sync_begin(train_sync *s, int *skip);
int sync_launch(train_sync *s, train_step *st);
int sync_step(train_sync *s, train_step *st, float lr);
int sync_optim_step(train_sync *s, float lr, float *gnorm);
int sync_drain(train_sync *s, const weft_lr_schedule *lr);
int sync_finish(train_sync *s);
/* The byte means of the end-of-run report (collective; after the timed run). */
int sync_count_bytes(train_sync *s);
void sync_summary(const train_sync *s);
uint64_t sync_bytes(const train_sync *s);
void sync_close(train_sync *s);

/* ---- pipeline parallelism (pipeline.c) ----------------------------------- */

typedef struct pipeline pipeline;

/* NULL without --pp (or --pp 1). Splits the job into pipelines and
 * replicas. */
pipeline *pipeline_open(const opts *o, weft_comm *job);
/* The data-parallel group of this stage (NULL: one replica). */
weft_comm *pipeline_dp_comm(const pipeline *pl);
int pipeline_replica(const pipeline *pl, int *replicas);
/* Measures the blocks (collective over the job) and cuts them. */
void pipeline_plan(pipeline *pl, const opts *o, const weft_model_config *cfg, weft_comm *job);
/* This stage's model: new, or its tensors from a checkpoint. */
weft_model *pipeline_model(const pipeline *pl, const opts *o, weft_ckpt *ck);
void pipeline_attach(pipeline *pl, weft_model *m, weft_zero *z);
void pipeline_describe(const pipeline *pl, const run_opts *r);
int pipeline_step(pipeline *pl, weft_zero *z, const weft_batch *b, int image, train_step *st);
/* Collective over the job: on job rank 0 the whole model (and, with opt,
 * the whole optimiser) assembled from the stages; NULL elsewhere. */
weft_model *pipeline_gather(const pipeline *pl, weft_model *m, weft_zero *z, weft_optim **opt);
/* Job rank 0: each stage's predicted and measured share of the work. */
void pipeline_summary(pipeline *pl, const opts *o);
void pipeline_close(pipeline *pl);
/* --elastic. Whether this rank traces its replica's samples (one rank
 * of each replica loads for all). */
int pipeline_traces(const pipeline *pl);
/* The schedule's micro-batches a step. */
int pipeline_micro(const pipeline *pl);
/* Over the layout's job ranks olds[0..n) that survived: whether this
 * rank's replica is whole, *lost one of its ranks that is not (-1), and
 * *wholes the number of whole replicas. */
int pipeline_whole(const pipeline *pl, const int *olds, int n, int *lost, int *wholes);
/* After a failure: pipeline_abort fails every operation on the groups;
 * pipeline_abandon destroys them and the pipe. */
void pipeline_abort(pipeline *pl);
void pipeline_abandon(pipeline *pl);
/* The layout over job (whole replicas dropped): new groups, the schedule's
 * micro-batches raised with the replicas lost where that divides, and with
 * --tp this stage's model anew on the new tensor group (*m replaced, its
 * parameters kept). pipeline_attach follows. */
int pipeline_reopen(pipeline *pl, const opts *o, weft_comm *job, weft_model **m);

/* ---- elastic membership (elastic.c) ---------------------------------------- */

typedef struct trace_slot trace_slot;

/* What --elastic keeps across membership changes. The global stream
 * position of step k is pos_base + (k - step_base) * batch. */
typedef struct {
    int slot;            /* the launch rank; -1: this process joined a running job */
    int world0, accum0;  /* the launch's ranks and --accum */
    int quiet0;          /* --quiet as given (rank 0 of a new world speaks) */
    long step_base;
    uint64_t pos_base;
    int64_t opt_steps0;  /* optimiser steps at this step's start */
    int64_t gen;         /* ZeRO 1-3: the last step whose shards were copied */
    int joined_now;      /* a joiner's first step: the members are past their grow */
    FILE *trace;
    struct trace_slot {  /* the step in flight's sample ids (step -1: none) */
        long step;
        int n;
        uint64_t *ids;
    } tr;
    int64_t view;        /* membership changes so far (the same on every rank) */
    long idle_step;      /* the last failure's step, and how many in a row there */
    int idle_fails;      /* took no rank with them */
    float *keep;         /* parameters and optimiser state while the state is rebuilt */
    int64_t keep_steps;
    float *prev;         /* --pp/--tp: keep as of the step before */
    int64_t prev_steps;
    weft_optim_config keep_oc;
} elastic_state;

/* ---- a data-parallel run (trainer.c) -------------------------------------- */

typedef struct {
    opts *o;
    const data_sets *d;
    weft_comm *comm; /* the data-parallel group (the job without --pp) */
    weft_comm *job;
    pipeline *pl;    /* NULL: no pipeline */
    int rank, world, image;
    int lead;        /* job rank 0: reports, evaluates, saves */
    weft_model *m;
    size_t nparams;
    weft_loader *loader;
    train_sync sync;
    weft_optim *opt;
    weft_lr_schedule sched;
    weft_rng rng;
    long steps, start_step, end;
    progress pg; /* and the metrics CSV, rank 0's */
    double load_s, compute_s; /* the loader's and forward + backward's seconds */
    double cpu0_all, cpu0_main;
    elastic_state el;
} trainer;

void trainer_open(trainer *t, opts *o, weft_comm *comm, const data_sets *d, weft_ckpt *ck,
                  long steps, long start_step);
/* After the last step: the last averages, saving, the summary, evaluation;
 * ends the sync mode. trainer_close frees the model and the loader. */
void trainer_finish(trainer *t);
void trainer_close(trainer *t);
void report_run(const trainer *t);
void report_end(const trainer *t, double train_s, double cpu_all, double cpu_main);
/* Where rank 0's wall time of training went, phase by phase, and the two
 * utilisations: forward + backward over the wall time, and the share not
 * blocked on communication across the WAN (sync_time.c). */
void sync_time_mark(train_sync *s);
void sync_time_report(const trainer *t, double train_s);

/* --elastic (elastic.c). elastic_check refuses what it cannot carry
 * through a membership change; elastic_open after trainer_open (a joiner
 * takes the members' state there). elastic_boundary before each step:
 * admits waiting joiners (1: the batch must be loaded again); 2: a
 * failure there was recovered from and the step starts again from *step
 * (as after elastic_recover). elastic_recover after a failed step: 1 when the
 * survivors go on from *step, 3 when this rank leaves the job (its
 * replica is broken; the training state is closed, the job communicator
 * NULL), 0: not elastic; it dies when it cannot. */
void elastic_check(const opts *o, weft_comm *comm);
void elastic_open(trainer *t, long *step, int quiet, int joined);
int elastic_boundary(trainer *t, long *step);
int elastic_recover(trainer *t, long *step, int rc);
/* A step's samples as they are committed (--trace-samples). */
void elastic_trace(trainer *t, long step, const weft_batch *b);
/* The traced step is written when next lies past it, else dropped. */
void elastic_commit(trainer *t, long next);
/* After a step that went through: ZeRO 1-3 copy their shards (a failure
 * there is the step's), and the traced step is written. */
int elastic_step_done(trainer *t, long step);
void elastic_close(trainer *t);

/* ---- --layout auto (layout_auto.c) ----------------------------------------- */

/* Sets o's tp, pp, schedule, micro-batches, ZeRO stage and sp from the
 * planner's fastest layout of this many ranks that fits --mem-limit. */
void layout_auto(opts *o, const weft_model_config *cfg, int ranks);

/* ---- the memory budget (memory.c) ------------------------------------------ */

/* --mem-limit: refuses a layout whose training state does not fit, naming
 * one that would; after the first step, the peak resident memory. */
void memory_check_start(const trainer *t);
void memory_check_step(const trainer *t, long step);

/* ---- checkpoints (ckpt.c) --------------------------------------------------- */

int ckpt_inspect(const char *path);
/* --resume: loads the checkpoint and takes its run options (NULL: none). */
weft_ckpt *ckpt_resume(opts *o, long *start_step);
void ckpt_restore_model(weft_ckpt *ck, const char *path, weft_model **m, weft_optim_config *oc,
                        weft_rng *rng);
void ckpt_restore_data(weft_ckpt *ck, const char *path, weft_loader *l, const data_sets *d);
void ckpt_save(const trainer *t, long step);

/* ---- parameter server (ps.c) ---------------------------------------------- */

void ps_main(opts *o, const data_sets *d, long steps, weft_comm *world);

#endif
