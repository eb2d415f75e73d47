/* Building a call's schedule with the generator the table of algorithms
 * names (sched.h). */
#include "coll/sched/sched.h"
#include "coll/algo_table.h"
#include "coll/sched/tree.h"
#include "coll/sched/two_level.h"

#include <stdlib.h>
#include <string.h>

/* The generators and the collectives each does, from the table of
 * algorithms; the algorithms with no generator run without a schedule. */
static const struct {
    int (*build)(weft_sched *s, const sched_params *p);
    unsigned kinds;
} generators[WEFT_ALGO_COUNT] = {
#define GENERATOR(id, name, alias, build, run, price, free, flags, kinds) \
    [WEFT_ALGO_##id] = { build, kinds },
    COLL_ALGOS(GENERATOR)
#undef GENERATOR
};

int sched_has(weft_algo a, weft_coll_kind kind)
{
    return (unsigned)a < WEFT_ALGO_COUNT && generators[a].build &&
           (unsigned)kind < WEFT_COLL_KIND_COUNT && (generators[a].kinds >> kind & 1);
}

int sched_build(weft_sched *s, weft_algo a, const sched_params *p)
{
    sched_reset(s);
    if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks || p->esize == 0)
        return WEFT_EINVAL;
    if (!sched_has(a, p->kind))
        return WEFT_ENOTSUP;
    int rc = generators[a].build(s, p);
    sched_end_round(s);
    if (rc == 0 && s->err)
        rc = s->err;
    return rc;
}
