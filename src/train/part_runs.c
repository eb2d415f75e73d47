/* A tensor part as runs of the whole tensor (train/part_runs.h). */
#include "train/part_runs.h"

int train_part_runs(const weft_model *m, int i, size_t lo, size_t hi, train_run_fn fn,
                    void *arg)
{
    weft_tensor_info ti;
    int rc = weft_model_tensor_info(m, i, &ti);
    if (rc != 0)
        return rc;
    if (hi > ti.numel || lo > hi || !fn)
        return WEFT_EINVAL;
    if (ti.numel == ti.whole_numel)
        return lo < hi ? fn(arg, lo, lo, hi - lo) : 0;
    size_t e = lo;
    while (e < hi) {
        size_t at, next;
        if (weft_model_tensor_whole_elem(m, i, e, &at) != 0) {
            e++;
            continue;
        }
        size_t len = 1;
        while (e + len < hi && weft_model_tensor_whole_elem(m, i, e + len, &next) == 0 &&
               next == at + len)
            len++;
        if ((rc = fn(arg, e, at, len)) != 0)
            return rc;
        e += len;
    }
    return 0;
}
