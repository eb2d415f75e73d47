/* Pipeline and tensor parallelism (run_pipeline.c): --pp/--tp split the job
 * into pipelines and replicas, the blocks are measured and cut, and
 * checkpoints are assembled in the whole model's layout. Every function
 * that fails records why on the run it was opened for (run_fail). */
#ifndef WEFT_RUN_RUN_PIPELINE_H
#define WEFT_RUN_RUN_PIPELINE_H

#include "run/run_int.h"

/* *out NULL without --pp/--tp (or both 1). Splits the job into pipelines
 * and replicas; t is where its failures go from here on. */
int pipeline_open(weft_run *t, const opts *o, weft_comm *job, pipeline **out);
/* The data-parallel group of this stage (NULL: one replica). */
weft_comm *pipeline_dp_comm(const pipeline *pl);
int pipeline_replica(const pipeline *pl, int *replicas);
/* Measures the blocks (collective over the job) and cuts them. */
int pipeline_plan(pipeline *pl, const opts *o, const weft_model_config *cfg, weft_comm *job);
/* This stage's model: new, or its tensors from a checkpoint. */
int pipeline_model(const pipeline *pl, const opts *o, weft_ckpt *ck, weft_model **out);
int pipeline_attach(pipeline *pl, weft_model *m, weft_zero *z);
/* The layout's banner lines (to the run's log). */
void pipeline_describe(const pipeline *pl, const run_opts *r);
/* A failure: with --elastic the bare code (the survivors rebuild the
 * layout); else the code with the stage's message recorded. */
int pipeline_step(pipeline *pl, weft_zero *z, const weft_batch *b, int image, train_step *st);
/* Collective over the job: on job rank 0 *out is the whole model (and,
 * with opt, *opt the whole optimiser) assembled from the stages; NULL
 * elsewhere. */
int pipeline_gather(const pipeline *pl, weft_model *m, weft_zero *z, weft_optim **opt,
                    weft_model **out);
/* Job rank 0: each stage's predicted and measured share of the work
 * (collective over the job). */
int pipeline_summary(pipeline *pl, const opts *o);
void pipeline_close(pipeline *pl);

/* What a forward-only pass over the layout needs (run_eval_layout.c). */
typedef struct {
    weft_comm *pp_comm, *dp_comm; /* dp_comm NULL: one replica */
    weft_comm *tp_comm;           /* NULL: no tensor parallelism */
    int pp, v, stage, tp, tp_rank, replica, replicas;
    weft_model *model;
    weft_zero *z;
} pipeline_view;
void pipeline_view_of(const pipeline *pl, pipeline_view *v);

/* --elastic. Whether this rank traces its replica's samples (one rank
 * of each replica loads for all). */
int pipeline_traces(const pipeline *pl);
/* The schedule's micro-batches a step. */
int pipeline_micro(const pipeline *pl);
/* Over the layout's job ranks olds[0..n) that survived: *whole whether
 * this rank's replica is whole, *lost one of its ranks that is not (-1),
 * and *wholes the number of whole replicas. */
int pipeline_whole(const pipeline *pl, const int *olds, int n, int *whole, int *lost,
                   int *wholes);
/* After a failure: pipeline_abort fails every operation on the groups;
 * pipeline_abandon destroys them and the pipe. */
void pipeline_abort(pipeline *pl);
void pipeline_abandon(pipeline *pl);
/* The layout over job (whole replicas dropped): new groups, the schedule's
 * micro-batches raised with the replicas lost where that divides, and with
 * --tp this stage's model anew on the new tensor group (*m replaced, its
 * parameters kept). pipeline_attach follows. */
int pipeline_reopen(pipeline *pl, const opts *o, weft_comm *job, weft_model **m);

#endif
