#include "cpu.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void kc_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
    }
}

void kc_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void kc_add_inplace(float *acc, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void kc_scale(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
