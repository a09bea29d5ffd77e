#include "cpu.h"

#include <math.h>

double kc_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

uint64_t kc_nonzeros(const float *x, size_t n)
{
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++) c += x[i] != 0.0f;
    return c;
}

void kc_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
              float beta1, float beta2, float eps, float wd, float grad_scale, int t)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = m[i] / bc1, vhat = v[i] / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
    }
}

void kc_adamw_segments(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n, int nseg,
                       const size_t *seg_end, const float *seg_wd, float lr, float beta1, float beta2, float eps,
                       float grad_scale, int t)
{
    size_t lo = 0;
    for (int s = 0; s < nseg && lo < n; s++) {
        size_t hi = seg_end[s] < n ? seg_end[s] : n;
        if (param_bf16)
            kc_adamw_bf16(master + lo, param_bf16 + lo, grad + lo, m + lo, v + lo, hi - lo, lr, beta1, beta2, eps,
                          seg_wd[s], grad_scale, t);
        else
            kc_adamw(master + lo, grad + lo, m + lo, v + lo, hi - lo, lr, beta1, beta2, eps, seg_wd[s], grad_scale, t);
        lo = hi;
    }
}
