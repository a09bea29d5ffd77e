#include "cpu.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf: libm's tanhf costs about three times as much, and GELU
 * was a quarter of a CPU training step. Saturates cleanly: exp -> inf gives 1,
 * exp -> 0 gives -1; absolute error stays at fp32 rounding. */
static inline float tanh_exp(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }

void kc_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_exp(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void kc_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanh_exp(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
    }
}

/* squared ReLU (Megatron's --squared-relu): relu(x)^2, derivative 2 relu(x) */
void kc_relu2_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float r = inp[i] > 0.0f ? inp[i] : 0.0f;
        out[i] = r * r;
    }
}

void kc_relu2_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float r = inp[i] > 0.0f ? inp[i] : 0.0f;
        dinp[i] = 2.0f * r * dout[i];
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
