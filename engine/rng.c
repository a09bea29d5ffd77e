#include "rng.h"

#include <math.h>

uint64_t rng_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t rng_key(uint64_t seed, uint64_t stream) { return rng_mix64(rng_mix64(seed) ^ stream); }

uint64_t rng_u64(uint64_t key, uint64_t counter) { return rng_mix64(key ^ rng_mix64(counter)); }

double rng_uniform(uint64_t key, uint64_t counter)
{
    return (double)((rng_u64(key, counter) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

double rng_normal(uint64_t key, uint64_t index)
{
    double u1 = rng_uniform(key, 2 * index), u2 = rng_uniform(key, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Four Feistel rounds over the smallest even number of bits covering n; values
 * that land outside [0, n) are walked again until they fall inside, which keeps
 * the map a bijection of [0, n). */
uint64_t rng_permute(uint64_t key, uint64_t i, uint64_t n)
{
    int bits = 2;
    while (bits < 64 && (1ULL << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = (1ULL << half) - 1;
    uint64_t x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = rng_u64(key + (uint64_t)round, r) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}
