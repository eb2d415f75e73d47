/* A forward-only pass at ZeRO-3 layer by layer leaves the record of needs
 * as the last step left it: the next step's prefetches follow that step's
 * order, not the pass's. */
#include "train/zero_eval.h"

#include "train/zero_impl.h"

void train_zero_eval_begin(const weft_zero *z, train_zero_mark *m)
{
    m->olen = z ? z->olen[0] : 0;
    m->opos = z ? z->opos : 0;
}

void train_zero_eval_end(weft_zero *z, const train_zero_mark *m)
{
    if (!z || !z->layerwise)
        return;
    z->olen[0] = m->olen;
    z->opos = m->opos;
}
