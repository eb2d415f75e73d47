/* Interleaved 1F1B (Megatron's virtual pipeline): rank r holds v chunks
 * r, r+p, ..., and walks the micro-batches in groups of p, running a
 * group through its first chunk, then its second, and so on; backwards
 * walk the chunks the other way. Warm-up is 2(p-1-r) + (v-1)p forwards
 * (all of them when m == p), then one forward and one backward in turn.
 * Each chunk is 1/v of a stage, so the fill and drain shrink v-fold:
 * bubble (p-1)/(v*m+p-1). Megatron's grouping needs m % p == 0. */
#include "train/pipe_gen.h"

/* The k-th forward (or backward) of a rank: which chunk, which mb. */
static void nth(const pipe_spec *s, int r, int k, int fwd, int *chunk, int *mb)
{
    int p = s->p, v = s->v, in_group = k % (p * v);
    int local = in_group / p;
    if (!fwd)
        local = v - 1 - local;
    *chunk = local * p + r;
    *mb = k / (p * v) * p + in_group % p;
}

static int push_nth(const pipe_spec *s, int r, int k, int fwd, pipe_list *out)
{
    int chunk, mb;
    nth(s, r, k, fwd, &chunk, &mb);
    return pipe_list_push(out, fwd ? PIPE_FWD : PIPE_BWD, chunk, mb, -1);
}

int pipe_gen_interleaved(const pipe_spec *s, int r, pipe_list *out)
{
    int total = s->m * s->v, rc = 0;
    int warm = s->m == s->p ? total : 2 * (s->p - 1 - r) + (s->v - 1) * s->p;
    if (warm > total)
        warm = total;
    for (int k = 0; k < warm && !rc; k++)
        rc = push_nth(s, r, k, 1, out);
    for (int i = 0; i < total - warm && !rc; i++) {
        rc = push_nth(s, r, warm + i, 1, out);
        if (!rc)
            rc = push_nth(s, r, i, 0, out);
    }
    for (int k = total - warm; k < total && !rc; k++)
        rc = push_nth(s, r, k, 0, out);
    return rc;
}
