/* k_rope: rotary positions' frequencies, one definition for every backend.
 *
 * Pair i of the RD rotated dims of a head turns by t * k_rope_inv_freq(i) at
 * position t: base^(-2i/RD), computed in double on the CPU and on the GPU alike
 * so both round the same angle. With a LLaMA-3.x scale (Megatron's
 * --use-rope-scaling --rope-scaling-factor F; Hugging Face's rope_type
 * "llama3" with low_freq_factor 1, high_freq_factor 4 and
 * original_max_position_embeddings 8192), frequencies whose wavelength is
 * longer than 8192 positions are divided by F, those shorter than 8192/4 kept,
 * and those between blended smoothly; a scale of 1 leaves every frequency as
 * it is. With Megatron's --rotary-seq-len-interpolation-factor F (position
 * interpolation; Hugging Face's rope_type "linear") position t turns as t / F
 * would. See kernels.h, rope_forward. */
#ifndef ATOLL_K_ROPE_H
#define ATOLL_K_ROPE_H

#include <math.h>

#ifdef __CUDACC__
#define K_ROPE_FN static __host__ __device__ __forceinline__
#else
#define K_ROPE_FN static inline
#endif

#define K_ROPE_LLAMA3_LOW_FREQ_FACTOR 1.0
#define K_ROPE_LLAMA3_HIGH_FREQ_FACTOR 4.0
#define K_ROPE_LLAMA3_ORIGINAL_MAX_POSITIONS 8192.0

K_ROPE_FN double k_rope_inv_freq(int i, int RD, double base, double scale)
{
    double f = pow(base, -2.0 * i / RD);
    if (scale == 1.0) return f;
    const double pi = 3.14159265358979323846, old = K_ROPE_LLAMA3_ORIGINAL_MAX_POSITIONS;
    const double lo = K_ROPE_LLAMA3_LOW_FREQ_FACTOR, hi = K_ROPE_LLAMA3_HIGH_FREQ_FACTOR;
    double wavelen = 2.0 * pi / f;
    if (wavelen < old / hi) return f;
    if (wavelen > old / lo) return f / scale;
    double smooth = (old / wavelen - lo) / (hi - lo);
    return (1.0 - smooth) * f / scale + smooth * f;
}

/* What the rope kernels turn by: --rotary-base, the LLaMA-3.x scale (1: none)
 * and the position interpolation factor (1: none); t0 is the position of each
 * sample's first row (0, but for a decode step's single row). */
typedef struct k_rope_freq {
    float base, scale, interp;
    int t0;
} k_rope_freq;

/* The angle of pair i of RD rotated dims at row t (position t0 + t). */
K_ROPE_FN double k_rope_angle(int t, int i, int RD, k_rope_freq f)
{
    return (double)(f.t0 + t) / (double)f.interp * k_rope_inv_freq(i, RD, (double)f.base, (double)f.scale);
}

#endif
