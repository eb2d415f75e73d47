/* Counter-based randomness for data: every random choice the data layer
 * makes is a pure function of (seed, stream, index), so any sample or any
 * epoch's order can be regenerated on its own, by any rank, after a resume. */
#ifndef WEFT_TRAIN_DATA_RNG_H
#define WEFT_TRAIN_DATA_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s;
} data_rng;

/* A finaliser with full avalanche (splitmix64's). */
static inline uint64_t data_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void data_rng_init(data_rng *r, uint64_t seed, uint64_t stream, uint64_t index)
{
    r->s = data_mix64(data_mix64(seed ^ 0x5745465444415441ull) + stream * 0x9e3779b97f4a7c15ull)
           ^ data_mix64(index + 0x632be59bd9b4e019ull);
}

static inline uint64_t data_rng_u64(data_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return data_mix64(r->s);
}

/* Uniform in [0, n), n > 0, without modulo bias (Lemire's method). */
uint64_t train_data_rng_below(data_rng *r, uint64_t n);
/* Uniform in [0, 1) with 53 random bits. */
double train_data_rng_unit(data_rng *r);
/* Standard normal (Box-Muller; one value per call, the pair's twin dropped
 * so the stream position stays a simple count). */
double train_data_rng_normal(data_rng *r);

#endif
