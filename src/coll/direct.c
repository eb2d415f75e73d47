/* Not yet: every call says so. */
#include "coll/direct.h"

int direct_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp)
{
    (void)a;
    (void)fp;
    return comm_fail(c, WEFT_ENOTSUP, "the direct algorithm is not available");
}

int direct_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
              uint64_t bytes, uint32_t esize, double *seconds)
{
    (void)c; (void)l; (void)kind; (void)bytes; (void)esize; (void)seconds;
    return WEFT_ENOTSUP;
}

void direct_free(weft_comm *c) { (void)c; }
