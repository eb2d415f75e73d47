/* Same-host pairs' messages through shared-memory rings and single
 * copies (exec_shm.c), for the executor's rounds. */
#ifndef WEFT_COLL_EXEC_SHM_H
#define WEFT_COLL_EXEC_SHM_H

#include "coll/exec/exec_int.h"

int exec_same_host(const weft_comm *c, int peer);
/* The op's bytes, when its pair shares memory; fd is the pair's ready TCP
 * connection (hello, doorbells). 1: progress, 0: none (st->wfd/wev/lk say
 * what to wait for), EXEC_NOT_SHM, or a negative error. */
int exec_shm_send(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd);
int exec_shm_recv(weft_comm *c, const sched_op *o, opstate *st, char **bufs,
                  const frame_hdr *fp, int fd);
/* Without shared memory, the hello that starts a same-host pair's
 * connection (out: send it, else read it) so that a hint may follow: 1
 * once the pair talks TCP, 0 not yet (or it uses a ring), negative error. */
int exec_shm_hello_tcp(weft_comm *c, int peer, int fd, int out, const frame_hdr *fp);

/* Of the ops st[shw[0..nsh)] that wait on rings: can any move now? */
int exec_shm_ready(const opstate *st, const int *shw, int nsh);
/* The same, looked at up to looks times with a pause between: 1 as soon
 * as one can move. */
int exec_shm_look(const opstate *st, const int *shw, int nsh, int looks);
/* Declare them all asleep; 1: the caller may block (each peer now rings
 * on its next move), 0: one can move already (no flag is left set). */
int exec_shm_sleep(opstate *st, const int *shw, int nsh);
void exec_shm_wake(opstate *st, const int *shw, int nsh);
/* After poll(): read the doorbells that rang (noting ends of stream). */
void exec_shm_drain(opstate *st, const int *shw, int nsh, const void *pf);

/* Before the connections close: unlink the shared segments that nobody
 * will map (see transport/shm.h): this rank's own whose receiver's
 * connection has ended and, when this communicator failed, every one
 * addressed to this rank. */
void exec_shm_reap(weft_comm *c, int failed);

#endif
