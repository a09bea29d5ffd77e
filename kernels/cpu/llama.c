/* The LLaMA family's ops (RMSNorm, SwiGLU, rotary embeddings, the q/k/v
 * projections packed into attention's layout) and hidden dropout: plain loops,
 * fp32. See kernels.h for the contracts. */
#include "cpu.h"
#include "k_dropout.h"
#include "k_qkv.h"
#include "k_rope.h"

#include <math.h>
#include <string.h>

void kc_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

/* g = dout * w; dinp += r * (g - x * r^2 * mean(g * x)); dw += dout * x * r */
void kc_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C, r = rstd[n];
        float gx = 0.0f;
        for (int c = 0; c < C; c++) gx += d[c] * w[c] * x[c];
        float k = r * r * gx / (float)C;
        for (int c = 0; c < C; c++) {
            dx[c] += r * (d[c] * w[c] - x[c] * k);
            dw[c] += d[c] * x[c] * r;
        }
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

void kc_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = silu(gate[i]) * up[i];
}

/* silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x) */
void kc_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], s = 1.0f / (1.0f + expf(-x)), u = up[i], d = dout[i];
        dgate[i] = d * u * s * (1.0f + x * (1.0f - s));
        dup[i] = d * x * s;
    }
}

/* The angle's cosine and sine for position t, pair i of RD rotated dims, in
 * double so every backend rounds the same value (k_rope.h). */
void kc_rope_angle(int t, int i, int RD, k_rope_freq f, float *c, float *s)
{
    double a = k_rope_angle(t, i, RD, f);
    *c = (float)cos(a);
    *s = (float)sin(a);
}

static void rope(float *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f, float sign)
{
    int Q = NH / NG, half = RD / 2;
    size_t ld = k_qkv_row(NH, NG, HD);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = qkv + ((size_t)b * T + t) * ld;
            for (int i = 0; i < half; i++) {
                float c, s;
                kc_rope_angle(t, i, RD, f, &c, &s);
                s *= sign;
                for (int g = 0; g < NG; g++)
                    for (int j = 0; j <= Q; j++) { /* Q queries, then the key */
                        float *x = row + k_qkv_slot(g, j, NH, NG, HD);
                        float x1 = x[i], x2 = x[i + half];
                        x[i] = x1 * c - x2 * s;
                        x[i + half] = x2 * c + x1 * s;
                    }
            }
        }
}

void kc_rope_forward(float *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(qkv, B, T, NH, NG, HD, RD, f, 1.0f);
}

void kc_rope_backward(float *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(dqkv, B, T, NH, NG, HD, RD, f, -1.0f);
}

/* q/k/v <-> attention's [N, NG, Q+2, HD] rows, for elements of `esz` bytes:
 * pure moves, so fp32 and bf16 share them (no rounding). */
void kc_qkv_move(void *qkv, void *q, void *k, void *v, int N, int NH, int NG, int HD, size_t esz, int pack)
{
    int Q = NH / NG;
    size_t ld = k_qkv_row(NH, NG, HD) * esz, row = (size_t)HD * esz;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < NG; g++) {
            char *x = (char *)qkv + (size_t)n * ld + k_qkv_slot(g, 0, NH, NG, HD) * esz;
            char *parts[3] = { (char *)q + ((size_t)n * NH + (size_t)g * Q) * row, (char *)k + ((size_t)n * NG + g) * row,
                               (char *)v + ((size_t)n * NG + g) * row };
            size_t len[3] = { (size_t)Q * row, row, row };
            for (int i = 0; i < 3; i++) {
                if (pack) memcpy(x, parts[i], len[i]);
                else memcpy(parts[i], x, len[i]);
                x += len[i];
            }
        }
}

void kc_qkv_pack(float *qkv, const float *q, const float *k, const float *v, int N, int NH, int NG, int HD)
{
    kc_qkv_move(qkv, (void *)q, (void *)k, (void *)v, N, NH, NG, HD, sizeof(float), 1);
}

void kc_qkv_unpack(float *q, float *k, float *v, const float *qkv, int N, int NH, int NG, int HD)
{
    kc_qkv_move((void *)qkv, q, k, v, N, NH, NG, HD, sizeof(float), 0);
}

void kc_dropout(float *x, int N, int C, const k_dropout *d)
{
    if (!d || d->p <= 0.0f) return;
    uint32_t th = k_dropout_threshold(d->p);
    float sc = k_dropout_scale(d->p);
    for (int n = 0; n < N; n++) {
        uint64_t id = (uint64_t)(d->row0 + n) * (uint64_t)C;
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] *= k_dropout_mul(d->key, id + (uint64_t)c, th, sc);
    }
}
