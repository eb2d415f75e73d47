/* xoshiro256** seeded through splitmix64: fast, and its state is four plain
 * words that a checkpoint can store. */
#include <math.h>

#include "weft.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void weft_rng_seed(weft_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t weft_rng_next(weft_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float weft_rng_uniform(weft_rng *r)
{
    return (float)(weft_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float weft_rng_normal(weft_rng *r)
{
    /* Box-Muller; the 53-bit uniform in (0, 1] keeps log() finite */
    double u1 = ((weft_rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u2 = (weft_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t weft_rng_below(weft_rng *r, uint64_t n)
{
    /* rejection keeps it unbiased */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = weft_rng_next(r);
    while (x >= lim);
    return x % n;
}
