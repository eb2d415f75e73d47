/* The cost model and the reduction kernels as include/weft.h offers them:
 * for programs that measure the constants (weft-tune) or report what auto
 * chose (weft-bench), over coll/tune/cost.h, coll/tune/tuner.h and
 * coll/reduce.h. */
#include "coll/comm_core.h"
#include "coll/reduce.h"
#include "coll/tune/cost.h"
#include "coll/tune/trial.h"
#include "coll/tune/tuner.h"
#include "core/param.h"
#include "weft.h"

_Static_assert(WEFT_AUTO_TRIAL_CALLS == TRIAL_MAX_CALLS, "weft.h's trial calls are the tuner's");

static void to_public(const cost_params *in, weft_cost_params *out)
{
    *out = (weft_cost_params){ .alpha = in->alpha, .alpha_over = in->alpha_over,
                               .msg = in->msg, .msg_over = in->msg_over, .beta = in->beta,
                               .gamma = in->gamma, .alpha_inter = in->alpha_inter,
                               .beta_inter = in->beta_inter, .alpha_wan = in->alpha_wan,
                               .beta_wan = in->beta_wan, .cores = in->cores, .shm = in->shm };
}

/* Over the defaults, so that a constant the public struct does not carry
 * keeps the library's value. */
static void from_public(const weft_cost_params *in, cost_params *out)
{
    cost_default_for(out, in->shm);
    out->alpha = in->alpha;
    out->alpha_over = in->alpha_over;
    out->msg = in->msg;
    out->msg_over = in->msg_over;
    out->beta = in->beta;
    out->gamma = in->gamma;
    out->alpha_inter = in->alpha_inter;
    out->beta_inter = in->beta_inter;
    out->alpha_wan = in->alpha_wan;
    out->beta_wan = in->beta_wan;
    out->cores = in->cores;
}

int weft_cost_default(weft_cost_params *c, int shm)
{
    if (!c)
        return WEFT_EINVAL;
    if (shm < 0) {
        int rc = param_read_int(PARAM_shm, &shm, NULL, 0);
        if (rc)
            return rc;
    }
    cost_params cp;
    cost_default_for(&cp, shm);
    to_public(&cp, c);
    return 0;
}

int weft_cost_parse(weft_cost_params *c, const char *text, const char **where)
{
    if (!c || !text)
        return WEFT_EINVAL;
    cost_params cp;
    from_public(c, &cp);
    int rc = cost_parse(&cp, text, where);
    /* keys parsed before an error stay set, as cost_parse leaves them */
    to_public(&cp, c);
    return rc;
}

int weft_cost_print(const weft_cost_params *c, int nranks, weft_coll_kind kind,
                    uint64_t max_bytes, FILE *f)
{
    if (!c || !f || nranks < 1)
        return WEFT_EINVAL;
    cost_params cp;
    from_public(c, &cp);
    coll_tuner *t;
    int rc = coll_tuner_create_with(&t, nranks, NULL, &cp);
    if (rc)
        return rc;
    coll_tuner_print(t, kind, max_bytes, f);
    coll_tuner_destroy(t);
    return 0;
}

int weft_comm_auto_algo(const weft_comm *c, weft_coll_kind kind, uint64_t bytes,
                        uint32_t esize, weft_algo *out)
{
    if (!c || !out)
        return WEFT_EINVAL;
    *out = c->tune ? coll_tuner_select(c->tune, kind, bytes, esize) : WEFT_ALGO_AUTO;
    return 0;
}

int weft_reduce_local(void *dst, const void *a, const void *b, size_t count, weft_dtype t,
                      weft_op op)
{
    if (!dst || !a || !b)
        return WEFT_EINVAL;
    return reduce_apply(dst, a, b, count, t, op);
}
