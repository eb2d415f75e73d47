/* Checkpoints read by a pipeline stage: the saved optimiser state is laid
 * out as the whole model's buffers, the stage's own are not. */
#ifndef WEFT_TRAIN_CKPT_STAGE_H
#define WEFT_TRAIN_CKPT_STAGE_H
#include "weft.h"

/* An optimiser for m's [base, base + n) with the saved config, step count
 * and state, each tensor's part taken from its place in the whole model
 * (weft_tensor_info.whole_offset). m NULL: the whole model's layout
 * (weft_ckpt_get_optim). */
int train_ckpt_get_optim_stage(const weft_ckpt *c, const weft_model *m, size_t base, size_t n,
                               weft_optim **out);

#endif
