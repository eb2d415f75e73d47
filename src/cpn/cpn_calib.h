/* Calibration: a few real training steps of a job's model timed on this
 * rank, so that the planner prices a step from measurement rather than
 * from a fraction of the matmul peak (docs/CPN.md, "The plan's model"). */
#ifndef WEFT_CPN_CALIB_H
#define WEFT_CPN_CALIB_H

#include "weft.h"

typedef struct {
    double sample_s; /* forward and backward, each further sample of the batch */
    double fixed_s;  /* forward and backward, the part no sample adds to */
    double update_s; /* the optimiser's update of every parameter (AdamW) */
    double core_share; /* (0, 1]: CPU over wall seconds of the timed steps */
} cpn_calib;

/* Times the model's forward and backward at two batch sizes (batch / 4
 * and batch, sequences of seq tokens, taken in turn) on one thread, the
 * fastest of a few steps each, and an AdamW update; the straight line
 * through the two gives the per-sample and the fixed part, and the
 * steps' CPU over their wall time the share of a core the rank had. */
int cpn_calib_measure(const weft_model_config *cfg, int seq, int batch, cpn_calib *out);

#endif
