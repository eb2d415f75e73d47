/* Cutting a model's blocks 0..n-1 into k contiguous stages (k = p*v
 * chunks of a pipeline schedule): exactly balanced by dynamic
 * programming, evenly by block count, or as the user lists them. */
#ifndef TRAIN_PIPE_PARTITION_H
#define TRAIN_PIPE_PARTITION_H

#include <stddef.h>

typedef struct {
    double time;         /* seconds of forward + backward per micro-batch */
    double act_bytes;    /* activations stashed per micro-batch */
    double state_bytes;  /* parameters, gradients and optimiser state */
} pipe_block_cost;

typedef struct {
    const pipe_block_cost *block;  /* [n] */
    int n;                         /* blocks */
    int k;                         /* stages */
    const int *stash;              /* [k] micro-batches stage j stashes at peak
                                      (pipe_sched_chunk_stash); NULL: 1 each */
    double mem_cap;                /* bytes a stage may hold; <= 0: no cap */
} pipe_part_problem;

/* A partition is first[0..k]: stage j holds blocks first[j] .. first[j+1]-1,
 * first[0] = 0 and first[k] = n. */

/* The partition whose slowest stage is fastest among those that fit the
 * cap; among equally slow ones the smallest sum of squared stage times;
 * among those, the one whose cuts come first (each stage as short as the
 * rest allows, from the front). WEFT_EINVAL with the reason in why when no
 * partition fits (naming the stage and the bytes) or the problem is bad. */
int pipe_partition_auto(const pipe_part_problem *pb, int *first, char *why, size_t len);
/* n blocks as evenly as counts allow; the stages at the end get the one
 * block more (the first stages stash the most micro-batches). */
int pipe_partition_uniform(int n, int k, int *first, char *why, size_t len);
/* "3,3,2": k counts, each >= 1, summing to n. */
int pipe_partition_list(const char *s, int n, int k, int *first, char *why, size_t len);
/* "auto", "uniform" or a list, as above. */
int pipe_partition_parse(const char *spec, const pipe_part_problem *pb, int *first, char *why,
                         size_t len);

/* The time and memory of stage j of a partition. */
double pipe_stage_time(const pipe_part_problem *pb, const int *first, int j);
double pipe_stage_bytes(const pipe_part_problem *pb, const int *first, int j);

#endif
