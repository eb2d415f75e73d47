/* Internals of the pipeline schedules: the list helpers the generators
 * share and one generator per schedule. A generator writes only the
 * compute actions of one rank, in order; pipe_sched_build then places
 * the sends and receives around them (pipe_gen_comms), so every schedule
 * talks the same way. */
#ifndef TRAIN_PIPE_GEN_H
#define TRAIN_PIPE_GEN_H

#include "train/pipe_types.h"

/* Appends one action (grows the list); 0 or WEFT_ENOMEM. */
int pipe_list_push(pipe_list *l, int op, int chunk, int mb, int peer);

/* The compute actions of rank r, in the order it runs them. */
int pipe_gen_gpipe(const pipe_spec *s, int r, pipe_list *out);
int pipe_gen_1f1b(const pipe_spec *s, int r, pipe_list *out);
int pipe_gen_interleaved(const pipe_spec *s, int r, pipe_list *out);
int pipe_gen_zb(const pipe_spec *s, int r, pipe_list *out);

/* Fills out from one rank's compute list: each compute's receive is
 * posted one compute ahead of it, and its send follows it at once. */
int pipe_gen_comms(const pipe_spec *s, const pipe_list *compute, pipe_list *out);

#endif
