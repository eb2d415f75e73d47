/* What the layout planner knows of the machine it plans for, measured
 * rather than assumed (docs/SIMULATION.md, "Calibrating the planner"):
 *   - the cores the ranks share (those this process may run on), so that 8 ranks on 2
 *     cores are priced as sharing them;
 *   - the collective constants weft-tune measures (its file: a "tune"
 *     line of the calibration, else WEFT_TUNE_FILE, else the host's
 *     cache tune-HOST), priced by the library's own closed forms;
 *   - each block's forward, input backward and weight backward seconds
 *     at each micro-batch shape a layout uses, from a short probe of the
 *     engine on one thread (weft-train's own pipeline measurement),
 *     cached per host (plan-HOST beside the peak cache) and per model;
 *   - a step's work a parameter after its backward (the clipping norm's
 *     squares, the scaling, the optimiser's update, the gradients zeroed),
 *     timed on the library's own functions over the model's parameter count;
 *   - with a tensor group, one rank's slice of each block as the group
 *     runs it ("tpblock", measured by `weftrun -n N weft-sim sync --model`):
 *     the LayerNorms, residuals and row-parallel biases that every rank
 *     computes whole, and the group's collectives, are not 1/tp;
 *   - with more ranks than cores, what a synchronisation between two ranks
 *     waits while the others compute ("sync N SECONDS") and the cores a
 *     chain of ranks handing work on gets ("chain N CORES"), and the CPU
 *     each message's end costs that chain's threads ("msgcpu N SECONDS"), and the
 *     CPU a rank spends in a gradient all-reduce with every rank in one ("arcpu N DP
 *     FLOATS SECONDS"), all measured by `weftrun -n N weft-sim sync`.
 * Anything not measured is assumed as before: FLOPs at --gflops, the
 * topology's simulated links and cores. */
#ifndef WEFT_SIM_PLAN_CALIB_H
#define WEFT_SIM_PLAN_CALIB_H

#include <stddef.h>

#include "coll/tune/cost.h"
#include "weft.h"

/* Seconds of one block kind (0 embedding, 1 a transformer block, 2 the
 * head) on a micro-batch of rows sequences of seq tokens, one thread. */
typedef struct {
    char model[96];  /* sim_calib_model_key's, the layer count left out */
    int rows, seq, kind;
    int tp;          /* 1: the whole block on one thread ("block" lines, ranks 0;
                        "tpblock" lines of TP 1, ranks > 0: every rank of the node
                        running its own at once, weft-sim sync --model); > 1: one
                        rank's slice of a tensor group of tp, its CPU seconds with
                        the group's collectives, every group of the node running
                        at once ("tpblock" lines, weftrun -n N weft-sim sync
                        --model) */
    int sp;          /* tp > 1: with sequence parallelism */
    int ranks;       /* tp > 1: the ranks of the node that ran at once when it
                        was measured (a rank's CPU for the same slice is more
                        with more ranks sharing the cores); 0: not said */
    double fwd, bwd_i, bwd_w;
} sim_calib_block;

#define SIM_CALIB_AR_MAX 64

typedef struct {
    int cores;            /* > 0: the ranks' cores, measured or from the file */
    int have_coll;        /* coll holds weft-tune's constants */
    cost_params coll;
    char coll_from[300];  /* the file they came from */
    sim_calib_block *b;
    int nb, cap;
    int probe;            /* measure a missing shape (sim_calib_block_get) */
    int probed;           /* shapes measured since the load: save them */
    int missed;           /* shapes asked for and not there (probe off) */
    int hits;             /* shapes asked for and there (or probed) */
    double gflops;        /* a core's GFLOP/s the blocks imply; 0: none measured */
    double sync_s[65];    /* [n]: seconds a synchronisation of two ranks waits
                             on this host with n ranks while the others compute
                             (weft-sim sync); 0: not measured */
    double msg_cpu[65];   /* [n]: CPU seconds a message's end (its send or its
                             receive) costs the ranks of such a chain beyond
                             their work, every thread (the progress thread's
                             polls and yields while a receive posted ahead
                             waits), with n ranks on the cores (weft-sim
                             sync); 0: not measured */
    double msg_per[65];   /* [n]: beyond msg_cpu, CPU seconds a message's end
                             costs a second of the piece its receiver waits
                             for (the progress thread polls the whole wait;
                             the line's third number, 0 when left out) */
    double chain[65];     /* [n]: the cores n ranks handing work on from one to
                             the next get, as a pipeline's stages (weft-sim
                             sync); 0: not measured */
    struct {
        int n, dp;        /* the node's ranks at the probe, the group's */
        double floats, s; /* the all-reduce's size, a rank's CPU seconds */
    } ar[SIM_CALIB_AR_MAX]; /* "arcpu N DP FLOATS SECONDS": a rank's CPU, every
                             thread, in a gradient all-reduce of dp ranks with
                             every rank of the node in one at once (weft-sim
                             sync --model, ranks outnumbering the cores) */
    int nar;
    double update_s[3];   /* seconds a step's work after backward takes a
                             parameter (sim_calib_update_get), one thread: [0]
                             SGD, [1] SGD with momentum, [2] AdamW (0: not
                             measured) */
} sim_calib;

/* The host's calibration cache (plan-HOST in weft's host cache folder,
 * or WEFT_PEAK_FILE.plan). */
int sim_calib_default_path(char *buf, size_t len);
/* Reads path (lines "cores N", "tune alpha=..,beta=..", "block MODEL
 * ROWS SEQ KIND FWD BWD_I BWD_W"; '#' comments). A missing file is not
 * an error: *found is 0 and c is empty. err names a bad line. */
int sim_calib_load(sim_calib *c, const char *path, int *found, char *err, size_t len);
/* Fills what the file left out from this machine: the online cores, and
 * weft-tune's constants from WEFT_TUNE_FILE or the host's tune cache. */
void sim_calib_measure_host(sim_calib *c);
int sim_calib_save(const sim_calib *c, const char *path, char *err, size_t len);
void sim_calib_free(sim_calib *c);

/* The model's key: its type and widths, without the layer count (a
 * block's cost does not depend on how many there are). */
void sim_calib_model_key(const weft_model_config *m, char *buf, size_t len);
/* The seconds of block kind at (rows, seq): from the file, or measured
 * now when c->probe is set (and kept in c). 1 when found or measured,
 * 0 when not there (counted in c->missed), < 0 a WEFT_E* code. */
int sim_calib_block_get(sim_calib *c, const weft_model_config *m, int rows, int seq, int kind,
                        double out[3]);
/* One rank's seconds of block kind at (rows, seq) as a tensor group of tp
 * runs it (sp: with sequence parallelism) with ranks ranks on the node (a
 * "tpblock" line; never probed here: the group's ranks measure it under
 * weftrun): the line measured at that rank count, else at the nearest
 * count, else one that does not say. tp 1: a rank's whole block with
 * every rank running its own at once (lines that say their count only).
 * 1 when found, 0 when not. */
int sim_calib_tp_block_get(const sim_calib *c, const weft_model_config *m, int rows, int seq,
                           int kind, int tp, int sp, int ranks, double out[3]);
/* Seconds a step's work after its backward takes a parameter with K
 * optimiser bytes each (0 SGD, 4 momentum, 8 AdamW) as weft-train does it:
 * the gradients' squares for the clipping norm, their scaling, the
 * optimiser's update and the gradients zeroed for the next step. From the
 * file ("update K SECONDS"), or measured now on n parameters when c->probe
 * is set. 1 found or measured, 0 not there, < 0 a WEFT_E* code. */
int sim_calib_update_get(sim_calib *c, int optim_bytes, double n, double *sec);
/* The synchronisation delay measured at n ranks on the host, else at the
 * nearest count measured; 0 when none was. */
double sim_calib_sync(const sim_calib *c, int n);
/* The same for the cores a chain of n ranks gets; 0 when none measured. */
double sim_calib_chain(const sim_calib *c, int n);
/* The same for the CPU a message's end costs such a chain ("msgcpu N
 * SECONDS"); 0 when none measured. */
double sim_calib_msg_cpu(const sim_calib *c, int n);
/* Its part a second of the piece waited for, at the count msg_cpu came
 * from ("msgcpu N SECONDS PER_SECOND"); 0 when not measured. */
double sim_calib_msg_cpu_per(const sim_calib *c, int n);
/* A rank's CPU seconds in a data-parallel all-reduce of floats over dp
 * ranks with every rank of the node in one at once ("arcpu" lines): at
 * the nearest count of ranks measured with a group of dp, linear between
 * the sizes measured (and from nothing at 0 floats), the last stretch's
 * rate beyond them; 0 when none measured. */
double sim_calib_ar_cpu(const sim_calib *c, int n, int dp, double floats);
/* One line on where the planner's inputs come from: measured (and from
 * which file) or assumed. */
int sim_calib_describe(const sim_calib *c, char *buf, size_t len);

#endif
