/* The flight recorder: per communicator, the last FLIGHT_N operations with
 * their state and, for the one in progress, the peers it is waiting on, so
 * that a job that fails or hangs can say what every rank was doing. It is
 * written by the thread running operations and may be read (dumped) from
 * any thread or a signal handler: every field is accessed with relaxed
 * atomics, so a dump racing an update shows a stale field, never a wild
 * pointer (and ThreadSanitizer has nothing to report). */
#ifndef WEFT_CORE_FLIGHT_H
#define WEFT_CORE_FLIGHT_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/frame.h"

#define FLIGHT_N 64
#define FLIGHT_WAIT_MAX 8

enum { FL_EMPTY = 0, FL_QUEUED, FL_RUNNING, FL_DONE, FL_FAILED };

typedef struct {
    uint64_t id;            /* 1, 2, ... in order of creation; 0: empty slot */
    frame_hdr fp;           /* the operation (seq 0 while queued) */
    int state, rc;
    double t_queued, t_start, t_end;
    int nwait;              /* in progress: peers it waits on */
    int32_t wait[FLIGHT_WAIT_MAX]; /* >= 0: receive from; < 0: -(peer+1), send to */
} flight_rec;

typedef struct {
    flight_rec rec[FLIGHT_N];
    atomic_uint_fast64_t next;
} flight;

/* A new record in state (FL_QUEUED or FL_RUNNING), describing fp. */
flight_rec *flight_new(flight *f, const frame_hdr *fp, int state);
/* Updates of a record after flight_new: every field is written and read
 * with relaxed atomics, since a dump may run on any thread at any time. */
void flight_start(flight_rec *r, const frame_hdr *fp);
void flight_finish(flight_rec *r, int rc);
void flight_waiting(flight_rec *r, const int32_t *wait, int n);
/* The record with this id, or NULL when it has been overwritten. */
flight_rec *flight_get(flight *f, uint64_t id);
/* Writes the last `last` records (0: all kept) to fd, one per line,
 * prefixed "weft[rank]". Returns the number of records written. */
int flight_dump(const flight *f, int fd, int rank, int last);

/* "allreduce(count=100, f32, sum) as op #17" */
void frame_describe(const frame_hdr *h, char *buf, size_t len);

#endif
