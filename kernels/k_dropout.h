/* k_dropout: the dropout masks, one definition for every backend.
 *
 * Plain integer arithmetic, compiled as C (CPU reference, engine) and as CUDA
 * device code, so a mask bit is the same on the CPU and the GPU. An element is
 * dropped when the top 32 bits of mix64(key + id * golden) fall below
 * p * 2^32 (k_dropout_threshold); kept elements are multiplied by
 * 1 / (1 - p) (k_dropout_scale). See kernels.h, k_dropout. */
#ifndef ATOLL_K_DROPOUT_H
#define ATOLL_K_DROPOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define K_DROP_FN static __host__ __device__ __forceinline__
#else
#define K_DROP_FN static inline
#endif

/* SplitMix64's finaliser: a bijective 64-bit mix */
K_DROP_FN uint64_t k_drop_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

K_DROP_FN uint32_t k_dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t <= 0.0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

K_DROP_FN float k_dropout_scale(float p) { return 1.0f / (1.0f - p); }

/* 0 (dropped) or `scale` (kept) for element `id` under `key` */
K_DROP_FN float k_dropout_mul(uint64_t key, uint64_t id, uint32_t threshold, float scale)
{
    uint32_t u = (uint32_t)(k_drop_mix64(key + id * 0x9E3779B97F4A7C15ULL) >> 32);
    return u < threshold ? 0.0f : scale;
}

/* attention: the key of one (global sample, global head) probability matrix */
K_DROP_FN uint64_t k_dropout_row_key(uint64_t key, int64_t sample, int head)
{
    return k_drop_mix64(key ^ k_drop_mix64(((uint64_t)sample << 16) ^ (uint64_t)(uint32_t)head));
}

#endif
