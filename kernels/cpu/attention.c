#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Per (batch, head): S = q k^T (one GEMM over strided rows of qkv), a causal
 * row softmax, then out = P v (a second GEMM). Rows of qkv are NH*3*HD floats;
 * head h's q, k, v start at columns h*3*HD, +HD, +2*HD. */

void kc_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int HD)
{
    int ld = 3 * NH * HD, ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * 3 * HD;
            const float *k = q + HD, *v = q + 2 * HD;
            float *P = att + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, q, ld, k, ld,
                        0.0f, P, T);
            for (int t = 0; t < T; t++) {
                float *row = P + (size_t)t * T;
                float mx = row[0];
                for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
                float sum = 0.0f;
                for (int j = 0; j <= t; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j <= t; j++) row[j] *= inv;
                for (int j = t + 1; j < T; j++) row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, v, ld,
                        0.0f, out + (size_t)b * T * ldo + (size_t)h * HD, ldo);
        }
}

/* dP = dO v^T; dv = P^T dO; dS = P * (dP - rowsum(P * dP)); dq = scale dS k;
 * dk = scale dS^T q. The masked entries of P are zero, so dS is zero there too. */
void kc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int NH, int HD)
{
    int ld = 3 * NH * HD, ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * ld + (size_t)h * 3 * HD;
            const float *q = qkv + off, *k = q + HD, *v = q + 2 * HD;
            float *dq = dqkv + off, *dk = dq + HD, *dv = dq + 2 * HD;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * ldo + (size_t)h * HD;
            float *dS = scratch + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dO, ldo, v, ld,
                        0.0f, dS, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, dO, ldo,
                        0.0f, dv, ld);
            for (int t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T;
                float *d = dS + (size_t)t * T;
                float dot = 0.0f;
                for (int j = 0; j <= t; j++) dot += p[j] * d[j];
                for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot);
                for (int j = t + 1; j < T; j++) d[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, scale, dS, T, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, scale, dS, T, q, ld,
                        0.0f, dk, ld);
        }
}
