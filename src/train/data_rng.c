#include "train/data_rng.h"

#include <math.h>

uint64_t train_data_rng_below(data_rng *r, uint64_t n)
{
    /* Reject the top partial block of 2^64 so every residue is equally likely. */
    uint64_t excess = (UINT64_MAX % n + 1) % n;
    uint64_t x;
    do
        x = data_rng_u64(r);
    while (x > UINT64_MAX - excess);
    return x % n;
}

double train_data_rng_unit(data_rng *r)
{
    return (double)(data_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double train_data_rng_normal(data_rng *r)
{
    double u1 = train_data_rng_unit(r), u2 = train_data_rng_unit(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
