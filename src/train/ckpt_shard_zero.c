/* What a rank owns of its ZeRO state, as pieces for its checkpoint file
 * (train/ckpt_shard.h): stage 0's whole state is every rank's, so the
 * ranks split it evenly; stages 1-3 own their part of each bucket (ZeRO-3
 * holds only those parameters between steps). */
#include "train/ckpt_shard.h"
#include "train/zero_impl.h"

#include <stdlib.h>

/* One piece per vector of elements [lo, lo + n) of opt's range. */
static void add_range(ckpt_piece *p, int *np, const float *params, weft_optim *opt, size_t lo,
                      size_t n)
{
    size_t base, len;
    weft_optim_range(opt, &base, &len);
    p[(*np)++] = (ckpt_piece){ .vec = 0, .lo = lo, .n = n, .src = params + lo };
    for (int i = 0; i < weft_optim_state_count(opt); i++)
        p[(*np)++] = (ckpt_piece){ .vec = i + 1, .lo = lo, .n = n,
                                   .src = weft_optim_state(opt, i, NULL) + (lo - base) };
}

int ckpt_shard_zero_pieces(weft_zero *z, ckpt_piece **out, int *np)
{
    *out = NULL;
    *np = 0;
    weft_optim *any = weft_zero_optim(z);
    if (!any)
        return WEFT_EINVAL;
    int per = 1 + weft_optim_state_count(any);
    ckpt_piece *p = calloc((size_t)(z->stage == 0 ? 1 : z->nb) * (size_t)per + 1, sizeof *p);
    if (!p)
        return WEFT_ENOMEM;
    const float *params = weft_model_params(z->model, NULL);
    if (z->stage == 0) {
        int w = z->comm ? z->world : 1, r = z->comm ? z->rank : 0;
        size_t lo = z->n * (size_t)r / (size_t)w, hi = z->n * (size_t)(r + 1) / (size_t)w;
        if (hi > lo)
            add_range(p, np, params, z->opt, lo, hi - lo);
    } else {
        for (int k = 0; k < z->nb; k++)
            if (z->b[k].mcnt && z->b[k].opt)
                add_range(p, np, params, z->b[k].opt, z->b[k].mlo, z->b[k].mcnt);
    }
    *out = p;
    return 0;
}
