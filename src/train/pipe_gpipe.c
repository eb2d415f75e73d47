/* GPipe: every forward, then every backward. The backwards run in
 * micro-batch order (not reversed) so that each weight gradient sums its
 * micro-batches in the same order as under 1F1B and the others: switching
 * schedules then leaves the gradients bit for bit the same. */
#include "train/pipe_gen.h"

int pipe_gen_gpipe(const pipe_spec *s, int r, pipe_list *out)
{
    int rc = 0;
    for (int mb = 0; mb < s->m && !rc; mb++)
        rc = pipe_list_push(out, PIPE_FWD, r, mb, -1);
    for (int mb = 0; mb < s->m && !rc; mb++)
        rc = pipe_list_push(out, PIPE_BWD, r, mb, -1);
    return rc;
}
