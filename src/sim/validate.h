/* weft-sim's validation set: predictions against published or measured
 * figures, each with its source (docs/SIMULATION.md, "Validation"). */
#ifndef WEFT_SIM_VALIDATE_H
#define WEFT_SIM_VALIDATE_H

#include <stdio.h>

enum sim_vmetric { SIM_V_TIME_US = 0, SIM_V_BUSBW, SIM_V_RATIO };

typedef struct {
    const char *set;     /* summit, dgx-h100, host */
    const char *topo;    /* preset */
    const char *algo;    /* sim_algo_parse's name; ratio: numerator */
    const char *algo2;   /* ratio: denominator; else NULL */
    int ranks;
    double bytes;
    int metric;          /* enum sim_vmetric */
    double ref;          /* > 0: the published or measured value, or the low
                            end of a published range; 0: none (a prediction,
                            printed but unchecked) */
    double ref_hi;       /* > ref: the high end of that range; else 0 */
    const char *source;
    int cores;           /* > 0: the cores the ranks ran on, where the
                            scheduler kept them on fewer than the preset's */
} sim_vpoint;

typedef struct {
    double pred, ref, ref_hi;
    double err;  /* pred / ref - 1, against the nearer end of a range (0
                    inside it); 0 when unchecked */
    int checked; /* the point has a reference */
    double sim_s;
} sim_vresult;

extern const sim_vpoint sim_vpoints[];
extern const int sim_nvpoints;

/* Predicts point i and sets it against its reference, if it has one. */
int sim_validate_point(int i, sim_vresult *out, char *err, size_t errlen);
/* The table of every point of `set` (NULL: all), with the error per set
 * over the points that have a reference;
 * returns 0, or the first failure. */
int sim_validate(FILE *f, const char *set);

#endif
