/* 1F1B (PipeDream-flush): rank r runs min(p-1-r, m) forwards to fill the
 * pipe, then one forward and one backward in turn, then drains the
 * backwards left. At most min(p-r, m) micro-batches wait for their
 * backward at once, against m for GPipe, for the same bubble. */
#include "train/pipe_gen.h"

int pipe_gen_1f1b(const pipe_spec *s, int r, pipe_list *out)
{
    int m = s->m, warm = s->p - 1 - r < m ? s->p - 1 - r : m, rc = 0;
    for (int mb = 0; mb < warm && !rc; mb++)
        rc = pipe_list_push(out, PIPE_FWD, r, mb, -1);
    for (int i = 0; i < m - warm && !rc; i++) {
        rc = pipe_list_push(out, PIPE_FWD, r, warm + i, -1);
        if (!rc)
            rc = pipe_list_push(out, PIPE_BWD, r, i, -1);
    }
    for (int mb = m - warm; mb < m && !rc; mb++)
        rc = pipe_list_push(out, PIPE_BWD, r, mb, -1);
    return rc;
}
