/* A whole number split in proportion to weights (a batch over clusters). */
#ifndef WEFT_CORE_APPORTION_H
#define WEFT_CORE_APPORTION_H

enum { APPORTION_MAX = 64 };

/* out[k] for the n (<= APPORTION_MAX) weights: total * w[k] / (sum of the
 * positive weights), rounded down, then the units left over one each to
 * the largest remainders (the lowest k first on a tie); a weight <= 0
 * gets 0. The positive weights must sum to more than 0. */
void apportion(long total, const double *w, int n, long *out);

#endif
