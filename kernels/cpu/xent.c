#include "cpu.h"

#include <math.h>

void kc_xent_max(float *rowmax, const float *logits, int N, int V)
{
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float m = -INFINITY;
        for (int j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
        rowmax[n] = m;
    }
}

void kc_xent_sumexp_target(float *sumexp, float *target_logit, const float *logits,
                           const float *rowmax, const int32_t *targets, int N, int V,
                           int vocab_offset)
{
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float s = 0.0f;
        for (int j = 0; j < V; j++) s += expf(l[j] - rowmax[n]);
        sumexp[n] = s;
        int r = targets[n] - vocab_offset;
        target_logit[n] = (targets[n] >= 0 && r >= 0 && r < V) ? l[r] : 0.0f;
    }
}

void kc_xent_loss(float *loss, const float *rowmax, const float *sumexp,
                  const float *target_logit, const int32_t *targets, int N)
{
    for (int n = 0; n < N; n++)
        loss[n] = targets[n] < 0 ? 0.0f : logf(sumexp[n]) + rowmax[n] - target_logit[n];
}

void kc_xent_backward(float *dlogits, const float *logits, const float *rowmax,
                      const float *sumexp, const int32_t *targets, float dloss,
                      int N, int V, int vocab_offset)
{
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        if (targets[n] < 0) {
            for (int j = 0; j < V; j++) d[j] = 0.0f;
            continue;
        }
        float inv = 1.0f / sumexp[n];
        int r = targets[n] - vocab_offset;
        for (int j = 0; j < V; j++) {
            float p = expf(l[j] - rowmax[n]) * inv;
            d[j] = dloss * (p - (j == r ? 1.0f : 0.0f));
        }
    }
}

void kc_xent_fused(float *loss, float *logits, const int32_t *targets, float dloss, int N, int V)
{
    for (int n = 0; n < N; n++) {
        float mx, se, tl;
        int32_t t = targets[n];
        kc_xent_max(&mx, logits + (size_t)n * V, 1, V);
        kc_xent_sumexp_target(&se, &tl, logits + (size_t)n * V, &mx, &t, 1, V, 0);
        kc_xent_loss(&loss[n], &mx, &se, &tl, &t, 1);
        if (dloss != 0.0f) kc_xent_backward(logits + (size_t)n * V, logits + (size_t)n * V, &mx, &se, &t, dloss, 1, V, 0);
    }
}
