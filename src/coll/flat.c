/* Not yet: every call says so. */
#include "coll/flat.h"

int flat_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    (void)a;
    (void)fp;
    return comm_fail(c, WEFT_ENOTSUP, "the flat algorithm is not available");
}

int flat_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
              uint64_t bytes, uint32_t esize, double *seconds)
{
    (void)c; (void)l; (void)kind; (void)bytes; (void)esize; (void)seconds;
    return WEFT_ENOTSUP;
}

void flat_free(weft_comm *c) { (void)c; }
