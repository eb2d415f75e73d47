/* How long one chunk's passes take: what weft-train's --layout auto and
 * weft-sim's calibration both measure a block by. */
#include "weft.h"

#include <time.h>

#include "train/matmul.h"
#include "train/model.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int weft_model_time_chunk(weft_model *m, const void *x, const int32_t *y, const float *dout,
                          int B, int T, int reps, double best[3])
{
    if (!m || !best || reps < 2)
        return WEFT_EINVAL;
    best[0] = best[1] = best[2] = 1e30;
    /* the first pass warms caches and the kernel choice: not counted */
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        int rc = weft_model_chunk_forward(m, 0, 0, x, y, B, T, NULL);
        double t1 = now_s();
        if (rc == 0)
            rc = weft_model_chunk_backward(m, 0, 0, dout, 1.0f, WEFT_BACKWARD_INPUT, 0);
        double t2 = now_s();
        if (rc == 0)
            rc = weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_WEIGHT, 0);
        double t3 = now_s();
        if (rc)
            return rc;
        double d[3] = { t1 - t0, t2 - t1, t3 - t2 };
        for (int j = 0; rep > 0 && j < 3; j++)
            best[j] = d[j] < best[j] ? d[j] : best[j];
    }
    return 0;
}

int weft_model_attention_seconds(const weft_model *m, double *seconds)
{
    if (!m || !seconds)
        return WEFT_EINVAL;
    *seconds = train_mm_attention_s(m->mm);
    return 0;
}
