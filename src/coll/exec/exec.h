/* Runs one rank's schedule over the communicator's connections. */
#ifndef WEFT_COLL_EXEC_H
#define WEFT_COLL_EXEC_H

#include "coll/comm_core.h"

/* fp is the fingerprint every message of this operation carries (its len
 * field is ignored); bufs are the SB_SEND, SB_RECV and SB_TMP base
 * addresses. Errors are recorded on c. */
int exec_run(weft_comm *c, const weft_sched *s, char *bufs[SB_COUNT], const frame_hdr *fp);

/* Whether a waiter spins (polls and yields for spin_s before it sleeps)
 * given spin_yields, comm_yields_for's answer: 2 x the host's ranks when
 * they outnumber its cores, else 0. With many ranks to a core every
 * waiter's yield hands the core to another waiter, and the one rank that
 * has work gets its turn only after all of them: on 2 cores an 8-byte
 * ring's second call took 0.16 s at 128 ranks spinning and 0.015 s
 * sleeping at once, 0.021 s and 0.006 s at 64, the same at 32, and less
 * spinning at 8 and 16 (bench/startup.c, second_call_s). Beyond 32 ranks
 * on a host that has fewer cores, a waiter sleeps at once. */
#define EXEC_SPIN_LOCAL_MAX 32
static inline int exec_may_spin(int spin_yields)
{
    return spin_yields <= 2 * EXEC_SPIN_LOCAL_MAX;
}

#endif
