#include "cpu.h"

#include <math.h>

void kc_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, float eps)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= (float)C;
        float s = 1.0f / sqrtf(var + eps);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* With xhat = (x - mean) * rstd and g = dout * w:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
void kc_layernorm_backward(float *dinp, float *dw, float *db, float *dsum, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float gmean = 0.0f, gxmean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float gw = g[c] * w[c];
            gmean += gw;
            gxmean += gw * xhat;
        }
        gmean /= (float)C;
        gxmean /= (float)C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            db[c] += g[c];
            dw[c] += g[c] * xhat;
            dx[c] += s * (g[c] * w[c] - gmean - xhat * gxmean);
        }
        if (dsum)
            for (int c = 0; c < C; c++) dsum[c] += dx[c];
    }
}
