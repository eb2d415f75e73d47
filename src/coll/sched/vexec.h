/* Virtual executor: runs the schedules of all p ranks of one collective in
 * one process, on real buffers, with the round semantics of coll/sched/sched.h.
 * It is the reference that says whether a schedule is right: results on the
 * buffers, and every rule broken on the way (out-of-bounds ranges, sends
 * and receives whose lengths differ, messages nobody receives, ops of one
 * round racing on the same bytes, rounds where no rank can progress). */
#ifndef WEFT_SIM_VEXEC_H
#define WEFT_SIM_VEXEC_H

#include "coll/sched/sched.h"

/* dst = op(a, b) over `bytes` bytes; dst may alias a or b. */
typedef int (*vexec_reduce_fn)(void *dst, const void *a, const void *b,
                               size_t bytes, void *ctx);

/* One rank's three buffers; a NULL buffer of size 0 is fine when the
 * schedule never touches it. */
typedef struct {
    unsigned char *buf[SB_COUNT];
    uint64_t size[SB_COUNT];
} vexec_mem;

enum vexec_mode {
    VEXEC_EAGER = 0,  /* a send completes once posted (buffered transport) */
    VEXEC_RENDEZVOUS  /* a send completes only when its receive is posted:
                         a schedule that passes runs on any transport */
};

typedef struct {
    int mode;              /* enum vexec_mode */
    int check_hazards;     /* 1: fail when ops of one round touch the same bytes */
    vexec_reduce_fn reduce;/* NULL: f32 sum */
    void *reduce_ctx;
} vexec_opts;

typedef struct {
    uint64_t messages, bytes;  /* all sends */
    uint32_t max_rounds;       /* longest schedule */
    char err[256];             /* why vexec_run failed */
} vexec_stats;

/* Runs scheds[0..p-1] on mem[0..p-1]. 0, or WEFT_EINVAL (a broken rule,
 * described in st->err), WEFT_ENOMEM. p is limited to 4096. */
int vexec_run(int p, const weft_sched *scheds, vexec_mem *mem,
              const vexec_opts *opts, vexec_stats *st);

/* Float sum, the default reduction. */
int vexec_sum_f32(void *dst, const void *a, const void *b, size_t bytes, void *ctx);

#endif
