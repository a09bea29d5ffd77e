/* rng: counter-based random numbers. A value is a pure function of
 * (key, counter), so any rank can compute element i of any tensor, or the
 * position of sample i in epoch e, without generating what comes before it. */
#ifndef ATOLL_ENGINE_RNG_H
#define ATOLL_ENGINE_RNG_H

#include <stdint.h>

/* SplitMix64 finaliser: a bijective 64-bit mix. */
uint64_t rng_mix64(uint64_t x);
/* A key from a seed and a stream id (e.g. the FNV hash of a tensor name). */
uint64_t rng_key(uint64_t seed, uint64_t stream);
/* 64 random bits for (key, counter). */
uint64_t rng_u64(uint64_t key, uint64_t counter);
/* Uniform in (0, 1]. */
double rng_uniform(uint64_t key, uint64_t counter);
/* Standard normal for element `index` (Box-Muller on counters 2i and 2i+1). */
double rng_normal(uint64_t key, uint64_t index);
/* A bijection of [0, n) keyed by `key` (Feistel network + cycle walking):
 * the permutation without materialising it. n >= 1, i < n. */
uint64_t rng_permute(uint64_t key, uint64_t i, uint64_t n);

#endif
