#include "run/run_ckpt_agree.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int ckpt_agree(weft_comm *c, int rc)
{
    int32_t bad = rc != 0, any = bad;
    int a = c ? weft_allreduce(c, &bad, &any, 1, WEFT_I32, WEFT_MAX) : 0;
    if (rc || a)
        return rc ? rc : a;
    return any ? WEFT_EIO : 0;
}

int ckpt_test_fail(const weft_run *t, const char *where)
{
    const char *v = getenv("WEFT_TEST_SAVE_FAIL"), *at = v ? strchr(v, ':') : NULL;
    int rank = t->job ? weft_comm_rank(t->job) : 0;
    return at && at > v && atoi(v) == rank && strcmp(at + 1, where) == 0;
}
