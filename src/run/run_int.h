/* The training run's shared types: what the files of src/run/ hand each
 * other. Each file's functions are declared in its own header; this one
 * holds the structures they all see and the run's error and log sinks. */
#ifndef WEFT_RUN_RUN_INT_H
#define WEFT_RUN_RUN_INT_H

#include "weft.h"

#include <stdint.h>
#include <stdio.h>

/* ---- options ---------------------------------------------------------------- */

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
    char init_from[1024], export_dir[1024]; /* --init-from, --export: Hugging Face dirs */
    long save_every, log_every, stop_at;
    int keep;             /* --keep N: a sharded --save keeps the newest N (0: all) */
    int save_cached;      /* --save-cached: a sharded save's files through the page cache */
    int threads, eval_prompts, no_eval, eval_only, quiet;
    double bucket_mb;
    int zero, accum, straggle_rank, straggle_ms;
    char sync[64];
    char compress[32];    /* --compress: the gradients' (full) or outer step's compressor */
    double outer_lr, outer_momentum; /* --outer-lr, --outer-momentum (< 0: the sync's own) */
    int ps;               /* --mode ps: parameter server instead of data parallel */
    char consistency[32];
    int pp, micro;        /* --pp stages, --micro-batches per step */
    int tp;               /* --tp tensor-parallel ranks */
    int ep;               /* --ep: experts over groups of this many data-parallel ranks */
    int cp;               /* --cp: each sequence over groups of this many consecutive ranks */
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
    char batch_shares[256]; /* --batch-shares S0,S1,..: cluster k's samples of a batch */
    double speed;         /* --speed (0, 1]: emulated compute speed (run_shares.c) */
    char progress[1024];  /* --progress PATH: each cluster's first rank's PATH.K */
    unsigned set; /* bit per run option given on the command line */
} opts;

/* The run options in the order of their keys; bit k of opts.set is O_k. */
enum { O_MODEL, O_DATA, O_OPTIM, O_PRECISION, O_SCHEDULE, O_STEPS, O_EPOCHS, O_BATCH, O_LR,
       O_MIN_LR, O_MOMENTUM, O_WD, O_CLIP, O_WARMUP, O_SEED, O_DATA_SEED, O_SEQ, O_DIGITS,
       O_LAYERS, O_HEADS, O_DIM, O_TRAIN_SIZE, O_FORMAT, O_COUNT };

/* ---- data ------------------------------------------------------------------- */

typedef struct {
    weft_dataset *train, *eval;
    weft_dataset_info ti, ei;
    double mean, std; /* pixel statistics used to standardise images */
} data_sets;

/* ---- a step's outcome and the metrics file ----------------------------------------- */

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
    /* copies, not pointers: elastic recovery replaces the model */
    weft_model_config cfg;        /* MFU (progress_model): the model, */
    int has_cfg;
    double peak;                  /* FLOP/s of the job's compute ranks; 0: no MFU */
    int tell_choice;              /* the run's model's auto matmul choice is to be told */
    double rate, elapsed, mfu;    /* the last step's, for weft_run_info */
} progress;

/* ---- sync modes --------------------------------------------------------------- */

typedef struct train_sync train_sync;

/* A sync mode: how the ranks' gradients or parameters meet, as hooks the
 * loop calls through sync_* (run_sync.c). open, step and bytes are
 * required; a NULL hook has nothing to do in that mode. Adding a mode: its
 * ops in its own file and one line of sync_table.h. */
typedef struct {
    int weigh_global; /* losses and gradients weighted by the global batch */
    int zero, accum;  /* takes --zero, --accum > 1 */
    int outer_compress; /* --compress is its outer step's compressor */
    /* the launch options it refuses (run_fail's message), asked by
     * sync_pick and, before anything is set up, by elastic_check */
    int (*check)(const opts *o, const weft_sync_config *cfg, weft_comm *comm, weft_run *t);
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
    weft_run *run;   /* where failures and lines go */
    weft_comm *comm; /* NULL: one process */
    int world;
    weft_sync_config cfg;
    weft_zero *z;    /* every mode's optimiser step (over the job in full sync) */
    weft_sync *sy;   /* the modes that average parameters */
    struct sync_churn *churn; /* --elastic diloco and hier: an outer step that outlives a
                               * cluster (run_churn.h) */
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
     * steps' own split when the loop ended (run_sync_time.c) */
    double step_s, optim_s, after_s, final_s;
    double loop_outer[3];
    double paced_s;  /* --speed: forward + backward seconds already paced */
    double progress_t0, progress_at; /* --progress: the first step's start, last write */
};

/* ---- elastic membership ----------------------------------------------------------- */

/* What elastic_boundary and elastic_recover (run_elastic.h) answer the
 * step loop, besides a negative WEFT_E* code; the churn mode's recovery
 * (churn_recover) answers with them too. */
typedef enum {
    ELASTIC_NONE = 0,  /* boundary: nothing changed, take the step. recover: not
                        * elastic, the step's failure stands (run_step_failed) */
    ELASTIC_RELOAD = 1, /* boundary: joiners came in: the step's batch is loaded
                        * again (the ranks' parts changed), then the step is taken */
    ELASTIC_AGAIN = 2,  /* a failure was recovered from: no step was taken; the
                        * loop goes on from *step, its batch loaded again
                        * (WEFT_RUN_RECOVERED) */
    ELASTIC_LEFT = 3,   /* recover: this rank's replica is broken and it left the
                        * job (training state closed, t->job NULL); the others
                        * finish the run (WEFT_RUN_LEFT) */
    ELASTIC_REJOIN = 4  /* hier across clusters: this rank's cluster lost a rank,
                        * so this one left too, as a failed rank: the process
                        * ends with status ELASTIC_REJOIN_STATUS (EX_TEMPFAIL)
                        * for a launcher that restarts the cluster whole
                        * (weftrun --restarts). Boundary or recover. */
} elastic_outcome;

#define ELASTIC_REJOIN_STATUS 75

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
    /* --sync diloco:H (flat): joiners grown in at an outer boundary take
     * its state in the background and catch up at the next outer step
     * (run_elastic_late.c). Members until then: */
    int late_was;        /* the world before the grow (0: nobody catching up) */
    double late_s;       /* the seconds the grow held them */
    float *late_buf;     /* rank 0: the state in flight to the joiners */
    weft_request **late_req; /* rank 0: a send per joiner */
    int late_n;
} elastic_state;

/* ---- the run ------------------------------------------------------------------ */

typedef struct pipeline pipeline;

struct weft_run {
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
    /* the library's side of the handle */
    opts own;              /* the configuration (o points here) */
    data_sets own_d;       /* d points here */
    int code;              /* the first failure (0: none) and its message */
    char err[1024];
    weft_run_log_fn log;   /* lines for the user (NULL: none) */
    void *log_arg;
    long next;             /* the next step to take */
    int done, left;        /* every step is done / this rank left the job */
    int opened;            /* the training state is set up (finish and close free it) */
    int finished;          /* weft_run_finish ran */
    int broken;            /* a failure the run cannot go on from (code says which) */
    int joined, quiet0;    /* came in with weft_comm_join; quiet as configured */
    weft_batch b;          /* the batch of step next when prefetched */
    int prefetched;
    train_step last;       /* the last step's outcome and learning rate */
    double last_lr;
    struct run_ps *ps;     /* --mode ps: this rank's worker or server (run_ps.c) */
    struct ckpt_pending *ckpt; /* sharded saves: the one in flight (run_ckpt_shard.c) */
};
typedef struct weft_run trainer; /* the name the modules use for the handle */

/* The configuration behind weft_run_config. */
struct weft_run_config {
    opts o;
    char err[1024];
    weft_run_log_fn log;
    void *log_arg;
};

/* Records the run's first failure (later ones keep the first message) and
 * returns code, so a failing path reads "return run_fail(t, WEFT_EINVAL,
 * ...)". The message has no "weft-train: " prefix: the tool adds it. */
int run_fail(weft_run *t, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* One line (or several, each ended by \n) to the log callback. */
void run_say(const weft_run *t, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends what fmt says to line (of cap, *len used so far), for the
 * reports built a field at a time before run_say; a full line is cut. */
void run_line_add(char *line, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
