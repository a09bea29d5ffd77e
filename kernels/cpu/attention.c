#include "cpu.h"
#include "k_dropout.h"
#include "k_qkv.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per (batch, head): S = q k^T (one GEMM over strided rows of qkv), a causal
 * row softmax over keys lo..t (lo = the first position of t's document, 0
 * without documents), then out = P v (a second GEMM). Rows of qkv are (NH + 2 NG) * HD
 * floats, a group g after another: its Q = NH/NG queries, its key, its value
 * (k_qkv_offsets, kernels/k_qkv.h). With dropout, P v uses P * mask / (1 - p) while att keeps P. */

/* dst[T, T] = P * the dropout mask of (sample, head) */
void kc_attention_drop(float *dst, const float *P, int T, const k_dropout *d, int64_t sample, int head)
{
    uint64_t rk = k_dropout_row_key(d->key, sample, head);
    uint32_t th = k_dropout_threshold(d->p);
    float sc = k_dropout_scale(d->p);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < T; j++)
            dst[(size_t)t * T + j] = j <= t ? P[(size_t)t * T + j] * k_dropout_mul(rk, (uint64_t)t * T + j, th, sc) : 0.0f;
}

static float *scratch_tt(int T)
{
    float *p = malloc((size_t)T * T * sizeof(float));
    if (!p) abort();
    return p;
}

/* x[0..n) -> softmax(x) in place: minus the max, exp, then times 1 / sum. */
static void softmax_span(float *x, int n)
{
    float mx = x[0], sum = 0.0f;
    for (int j = 1; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < n; j++) {
        x[j] = expf(x[j] - mx);
        sum += x[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) x[j] *= inv;
}

void kc_attention_forward(float *out, float *att, const float *qkv, const int32_t *doc, int B, int T, int NH, int NG,
                          int HD, const k_dropout *drop)
{
    int ld = (int)k_qkv_row(NH, NG, HD), ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    int dropping = drop && drop->p > 0.0f;
    float *Pd = dropping ? scratch_tt(T) : NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t oq, ok, ov;
            k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
            const float *base = qkv + (size_t)b * T * ld, *q = base + oq, *k = base + ok, *v = base + ov;
            float *P = att + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, q, ld, k, ld,
                        0.0f, P, T);
            for (int t = 0; t < T; t++) {
                float *row = P + (size_t)t * T;
                int lo = kc_doc_first(doc, b, T, t);
                softmax_span(row + lo, t - lo + 1);
                for (int j = 0; j < lo; j++) row[j] = 0.0f;
                for (int j = t + 1; j < T; j++) row[j] = 0.0f;
            }
            if (dropping) kc_attention_drop(Pd, P, T, drop, drop->row0 + b, drop->head0 + h);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, dropping ? Pd : P, T, v, ld,
                        0.0f, out + (size_t)b * T * ldo + (size_t)h * HD, ldo);
        }
    free(Pd);
}

/* Per head: s = scale K q over keys k0..n-1 (a GEMV over strided rows of qkv,
 * as the forward's GEMM), p = softmax(s) as the forward takes it
 * (softmax_span), out = V^T p (a second GEMV). */
void kc_attention_decode(float *out, const float *qkv, int n, int k0, int NH, int NG, int HD)
{
    int ld = (int)k_qkv_row(NH, NG, HD), nk = n - k0;
    float scale = 1.0f / sqrtf((float)HD);
    float *p = malloc((size_t)nk * sizeof(float));
    if (!p) abort();
    for (int h = 0; h < NH; h++) {
        size_t oq, ok, ov;
        k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
        const float *q = qkv + (size_t)(n - 1) * ld + oq, *rows = qkv + (size_t)k0 * ld;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, nk, HD, scale, rows + ok, ld, q, 1, 0.0f, p, 1);
        softmax_span(p, nk);
        cblas_sgemv(CblasRowMajor, CblasTrans, nk, HD, 1.0f, rows + ov, ld, p, 1, 0.0f, out + (size_t)h * HD, 1);
    }
    free(p);
}

/* With M the dropout mask (times 1/(1-p), all ones without dropout):
 * dP' = dO v^T; dv += (P M)^T dO; dS = P * (M dP' - rowsum(P M dP'));
 * dq = scale dS k; dk += scale dS^T q. The masked entries of P are zero, so
 * dS is zero there too. Keys and values sum over the group's heads. */
void kc_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int NH, int NG, int HD, const k_dropout *drop)
{
    int ld = (int)k_qkv_row(NH, NG, HD), ldo = NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    int dropping = drop && drop->p > 0.0f;
    float *Pd = dropping ? scratch_tt(T) : NULL;
    memset(dqkv, 0, (size_t)B * T * ld * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t oq, ok, ov;
            k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
            size_t off = (size_t)b * T * ld;
            const float *q = qkv + off + oq, *k = qkv + off + ok, *v = qkv + off + ov;
            float *dq = dqkv + off + oq, *dk = dqkv + off + ok, *dv = dqkv + off + ov;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * ldo + (size_t)h * HD;
            float *dS = scratch + ((size_t)b * NH + h) * T * T;
            if (dropping) kc_attention_drop(Pd, P, T, drop, drop->row0 + b, drop->head0 + h);
            const float *PM = dropping ? Pd : P;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dO, ldo, v, ld,
                        0.0f, dS, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, PM, T, dO, ldo,
                        1.0f, dv, ld);
            for (int t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T, *pm = PM + (size_t)t * T;
                float *d = dS + (size_t)t * T;
                float dot = 0.0f;
                for (int j = 0; j <= t; j++) dot += pm[j] * d[j];
                if (dropping)
                    for (int j = 0; j <= t; j++) d[j] = pm[j] * d[j] - p[j] * dot;
                else
                    for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot);
                for (int j = t + 1; j < T; j++) d[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, scale, dS, T, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, scale, dS, T, q, ld,
                        1.0f, dk, ld);
        }
    free(Pd);
}
