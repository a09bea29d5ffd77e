/* cuda_harness: what the CUDA kernel tests share. Inputs are fresh random
 * numbers (never zeros: they hide unwritten outputs); outputs that an op
 * overwrites are poisoned with NaN bytes first, so an element the kernel
 * never writes shows up as NaN; results are compared with the CPU reference
 * by the norm-wise relative error ||got - ref|| / ||ref||. */
#ifndef ATOLL_CUDA_HARNESS_H
#define ATOLL_CUDA_HARNESS_H

#include "check.h"
#include "k_cuda.h"
#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const k_ops *G, *R; /* GPU under test, CPU reference */
static uint64_t h_rng = 0x9e3779b97f4a7c15ull;

static inline float h_frand(void) /* uniform in [-1, 1) */
{
    h_rng ^= h_rng << 13;
    h_rng ^= h_rng >> 7;
    h_rng ^= h_rng << 17;
    return (float)((h_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline float *h_rand(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) v[i] = h_frand() * scale;
    return v;
}

static inline float *h_copy(const float *x, size_t n)
{
    float *v = malloc(n * sizeof(float) + 1);
    memcpy(v, x, n * sizeof(float));
    return v;
}

/* ---- bf16 on the host: round to nearest even, as __float2bfloat16_rn ---- */
static inline uint16_t h_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float h_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round x to bf16-representable values in place, so the fp32 reference sees
 * exactly the inputs the bf16 kernel sees. */
static inline void h_round_bf(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = h_bf2f(h_f2bf(x[i]));
}

/* Documents for --reset-attention-mask: h_docs(B, T)[b*T + t] is the first
 * position of t's document; sample 0's start at 0, 20, 70, 100 and 140 (a
 * 128-row query block past key tile 0), the others every 13th position
 * offset by the sample. Caller frees. */
static inline int32_t *h_docs(int B, int T)
{
    int32_t *doc = malloc(sizeof(int32_t) * (size_t)B * T + 1);
    for (int b = 0; b < B; b++)
        for (int t = 0, start = 0; t < T; t++) {
            if (b == 0 ? t == 20 || t == 70 || t == 100 || t == 140 : (t + b) % 13 == 0) start = t;
            doc[(size_t)b * T + t] = start;
        }
    return doc;
}

/* ---- device buffers ---- */
static inline void *d_put(const void *host, size_t bytes)
{
    void *d = G->alloc(bytes);
    if (!d) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    G->to_device(d, host, bytes);
    return d;
}

static inline void *d_poison(size_t bytes) /* 0xFF bytes: NaN in fp32 and in bf16 */
{
    void *h = malloc(bytes + 1);
    memset(h, 0xff, bytes);
    void *d = d_put(h, bytes);
    free(h);
    return d;
}

static inline float *d_get(const void *d, size_t n) /* n floats back to the host */
{
    float *h = malloc(n * sizeof(float) + 1);
    G->to_host(h, d, n * sizeof(float));
    return h;
}

static inline uint16_t *d_put_bf(const float *x, size_t n)
{
    uint16_t *h = malloc(n * 2 + 1);
    for (size_t i = 0; i < n; i++) h[i] = h_f2bf(x[i]);
    uint16_t *d = d_put(h, n * 2);
    free(h);
    return d;
}

static inline float *d_get_bf(const void *d, size_t n) /* n bf16 back to the host as floats */
{
    uint16_t *h = malloc(n * 2 + 1);
    G->to_host(h, d, n * 2);
    float *f = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) f[i] = h_bf2f(h[i]);
    free(h);
    return f;
}

/* Norm-wise relative error; every element must be a number. Frees got. */
static inline void h_compare(const char *what, float *got, const float *ref, size_t n, double tol)
{
    double num = 0, den = 0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isinf(got[i])) nan++;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
    CHECK(nan == 0, "%s: %zu of %zu elements NaN/inf (unwritten or overflow)", what, nan, n);
    CHECK(rel <= tol, "%s: relative error %.3g > %.1g (n %zu)", what, rel, tol, n);
    free(got);
}

/* Returns 1 when the GPU is usable; else prints the SKIP line. */
static inline int h_setup(void)
{
    R = k_cpu();
    G = k_cuda();
    if (!G) {
        printf("SKIP: %s\n", k_cuda_status());
        return 0;
    }
    printf("device: %s\n", k_cuda_status());
    return 1;
}

#endif
