/* Zero bubble ZB-H1 (Qi et al., 2023): the backward splits into B, the
 * gradient of the input (on the critical path: the previous rank waits
 * for it), and W, the gradient of the weights (which nobody waits for).
 * Rank r runs 1F1B's order with B in place of the backward, and lets up
 * to r W's lag behind their B: the later ranks, whose 1F1B stash is the
 * smallest, return gradients sooner, and every rank still stashes at most
 * min(p, m) micro-batches (1F1B's peak, on rank 0). In the drain each B
 * is followed by one waiting W, which fills the time 1F1B spends idle
 * there, and the W's left close the step. With F = B = W the bubble is
 * (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W): a third. */
#include "train/pipe_gen.h"

int pipe_gen_zb(const pipe_spec *s, int r, pipe_list *out)
{
    int m = s->m, warm = s->p - 1 - r < m ? s->p - 1 - r : m, rc = 0;
    int next_w = 0; /* oldest micro-batch whose W is still to run */
    for (int mb = 0; mb < warm && !rc; mb++)
        rc = pipe_list_push(out, PIPE_FWD, r, mb, -1);
    for (int i = 0; i < m - warm && !rc; i++) {
        rc = pipe_list_push(out, PIPE_FWD, r, warm + i, -1);
        if (!rc)
            rc = pipe_list_push(out, PIPE_BWD_I, r, i, -1);
        /* i + 1 B's done: keep at most r of their W's waiting */
        if (!rc && i + 1 - next_w > r)
            rc = pipe_list_push(out, PIPE_BWD_W, r, next_w++, -1);
    }
    for (int mb = m - warm; mb < m && !rc; mb++) {
        rc = pipe_list_push(out, PIPE_BWD_I, r, mb, -1);
        if (!rc)
            rc = pipe_list_push(out, PIPE_BWD_W, r, next_w++, -1);
    }
    while (next_w < m && !rc)
        rc = pipe_list_push(out, PIPE_BWD_W, r, next_w++, -1);
    return rc;
}
