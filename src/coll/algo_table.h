/* The algorithms: one line each, and the only list of them. Each room
 * expands the columns it needs, so none of them names an algorithm:
 * coll/sched/sched.c (sched_build: the generators), coll/algo.c (dispatch
 * and teardown, for coll/coll.c and the tuner), coll/algo_names.c
 * (weft_algo_name, weft_algo_parse, so WEFT_ALGO and every tool), and
 * through those the simulator. Adding an algorithm: its value in
 * include/weft.h, its own file, its function's declaration in its room's
 * header, and one line here.
 *
 * X(id, name, alias, build, run, price, free, flags, kinds):
 *   id     the weft_algo value is WEFT_ALGO_<id>
 *   name   weft_algo_name's; alias: another spelling WEFT_ALGO takes, or 0
 *   build  its schedule generator (sched.h's contract), or 0 when it runs
 *          without a schedule
 *   run    how it runs without one (coll/algo.h), or 0
 *   price  its predicted seconds for the tuner (coll/algo.h), or 0 to
 *          walk its schedule (cost_predict)
 *   free   releases what a communicator keeps for it, or 0
 *   flags  COLL_ACROSS_HOSTS: auto offers it only when the ranks span
 *          several hosts (on one it would be another algorithm by name)
 *   kinds  the collectives it runs, as COLL_K bits; the others fail with
 *          WEFT_ENOTSUP before anything is built */
#ifndef WEFT_COLL_ALGO_TABLE_H
#define WEFT_COLL_ALGO_TABLE_H

#include "weft.h"

#define COLL_K(kind) (1u << WEFT_COLL_##kind)
/* every collective: barrier .. alltoall (send and receive are not) */
#define COLL_EVERY ((1u << WEFT_COLL_KIND_COUNT) - (2u << WEFT_COLL_RECV))
#define COLL_ROOTED3 (COLL_K(ALLREDUCE) | COLL_K(BROADCAST) | COLL_K(REDUCE))
#define COLL_ACROSS_HOSTS 1

/* clang-format off */
#define COLL_ALGOS(X) \
  /* id          name            alias                 build               run         price        free         flags              kinds */ \
  X(NAIVE,       "naive",        0,                    sched_naive,        0,          0,           0,           0,                 COLL_EVERY) \
  X(RING,        "ring",         0,                    sched_ring,         0,          0,           0,           0,                 COLL_EVERY) \
  X(TREE,        "tree",         0,                    sched_tree,         0,          0,           0,           0,                 COLL_ROOTED3) \
  X(RD,          "rd",           "recursive_doubling", sched_rd,           0,          0,           0,           0,                 COLL_K(ALLREDUCE)) \
  X(RABENSEIFNER,"rabenseifner", 0,                    sched_rabenseifner, 0,          0,           0,           0,                 COLL_ROOTED3 | COLL_K(REDUCE_SCATTER) | COLL_K(ALLGATHER)) \
  X(HIER,        "hier",         "hierarchical",       sched_hier,         0,          0,           0,           COLL_ACROSS_HOSTS, COLL_ROOTED3) \
  X(DIRECT,      "direct",       0,                    0,                  direct_run, direct_cost, direct_free, 0,                 COLL_EVERY) \
  X(FLAT,        "flat",         0,                    0,                  flat_run,   flat_cost,   flat_free,   0,                 COLL_EVERY)
/* clang-format on */

/* Schedules only the simulator runs: NCCL's structures (coll/sched/nccl.h),
 * kept to predict what NCCL does on machines weft-sim models. They have no
 * weft_algo value, so no room above expands them: coll.c, the tuner,
 * WEFT_ALGO and weft_algo_parse never see them. sim/ expands this list
 * into its own algorithm numbers, after the weft_algo ones.
 *
 * S(id, name, build, kinds): build has nccl.h's signature. */
/* clang-format off */
#define COLL_SIM_ALGOS(S) \
  /* id          name          build              kinds */ \
  S(NCCL_RING,   "nccl-ring",  sched_nccl_ring,   COLL_K(ALLREDUCE)) \
  S(NCCL_TREE,   "nccl-tree",  sched_nccl_tree,   COLL_K(ALLREDUCE))
/* clang-format on */

#endif
