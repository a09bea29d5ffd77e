/* bf16.c: the bf16 entries of the CPU reference (kernels.h, "bf16 extension").
 *
 * Each entry widens its bf16 inputs to fp32, runs the fp32 reference op (or the
 * plain loops below where the bf16 entry saves other statistics), and rounds
 * its bf16 outputs to nearest even: storage in bf16, arithmetic in fp32, which
 * is the contract the CUDA entries keep. fp32 outputs (weight gradients,
 * statistics) follow the fp32 entries' overwrite/accumulate rules unchanged.
 * This makes `--bf16` run on the CPU too, so the engine's bf16 path is tested
 * without a GPU, and the CUDA bf16 kernels have a twin to compare with. */
#include "cpu.h"
#include "k_qkv.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

float kc_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t kc_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* nearest even */
    return (uint16_t)(u >> 16);
}

void kc_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = kc_f32_to_bf16(src[i]);
}

void kc_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = kc_bf16_to_f32(src[i]);
}

/* fp32 scratch: widened copies of bf16 inputs. Aborts on out of memory like
 * any allocation failure inside a kernel call would on a device. */
static float *wide(const uint16_t *x, size_t n)
{
    /* Zeroed, so an output buffer (x NULL) holds nothing uninitialised (gcc -O3 checks). */
    float *f = calloc(n ? n : 1, sizeof(float));
    if (!f) abort();
    if (x) kc_from_bf16(f, x, n);
    return f;
}

void kc_embedding_forward_bf16(uint16_t *out, const int32_t *tokens, const uint16_t *wte, int N, int C,
                               int vocab_offset, int V)
{
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - vocab_offset;
        uint16_t *o = out + (size_t)n * C;
        if (r >= 0 && r < V) memcpy(o, wte + (size_t)r * C, (size_t)C * sizeof(uint16_t));
        else memset(o, 0, (size_t)C * sizeof(uint16_t));
    }
}

void kc_embedding_backward_bf16(float *dwte, const uint16_t *dout, const int32_t *tokens, int N, int C,
                                int vocab_offset, int V)
{
    float *d = wide(dout, (size_t)N * C);
    kc_embedding_backward(dwte, d, tokens, N, C, vocab_offset, V);
    free(d);
}

void kc_position_forward_bf16(uint16_t *out, const uint16_t *wpe, const int32_t *pos, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t p = pos ? (size_t)pos[(size_t)b * T + t] : (size_t)t;
            for (int c = 0; c < C; c++) {
                uint16_t *o = out + ((size_t)b * T + t) * C + c;
                *o = kc_f32_to_bf16(kc_bf16_to_f32(*o) + kc_bf16_to_f32(wpe[p * C + c]));
            }
        }
}

void kc_position_backward_bf16(float *dwpe, const uint16_t *dout, int B, int T, int C)
{
    float *d = wide(dout, (size_t)B * T * C);
    kc_position_backward(dwpe, d, B, T, C);
    free(d);
}

void kc_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *w,
                               const uint16_t *b, int N, int C, float eps)
{
    size_t NC = (size_t)N * C;
    float *x = wide(inp, NC), *wf = wide(w, (size_t)C), *bf = wide(b, (size_t)C), *y = wide(NULL, NC);
    kc_layernorm_forward(y, mean, rstd, x, wf, bf, N, C, eps);
    kc_to_bf16(out, y, NC);
    free(x), free(wf), free(bf), free(y);
}

void kc_layernorm_backward_bf16(uint16_t *dinp, float *dw, float *db, float *dsum, const uint16_t *dout,
                                const uint16_t *inp, const uint16_t *w, const float *mean, const float *rstd, int N,
                                int C)
{
    size_t NC = (size_t)N * C;
    float *d = wide(dout, NC), *x = wide(inp, NC), *wf = wide(w, (size_t)C), *dx = wide(dinp, NC);
    kc_layernorm_backward(dx, dw, db, NULL, d, x, wf, mean, rstd, N, C); /* accumulates into dx */
    kc_to_bf16(dinp, dx, NC);
    if (dsum) { /* of dinp as stored: matmul_backward_bf16's bias sum would read these */
        kc_from_bf16(dx, dinp, NC);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) dsum[c] += dx[(size_t)n * C + c];
    }
    free(d), free(x), free(wf), free(dx);
}

void kc_matmul_forward_bf16(uint16_t *out, uint16_t *pre_gelu, const uint16_t *inp, const uint16_t *w,
                            const uint16_t *bias, int N, int C, int OC)
{
    size_t NO = (size_t)N * OC;
    float *x = wide(inp, (size_t)N * C), *wf = wide(w, (size_t)OC * C), *bf = bias ? wide(bias, (size_t)OC) : NULL;
    float *y = wide(NULL, NO);
    kc_matmul_forward(y, x, wf, bf, N, C, OC);
    if (pre_gelu) {
        kc_to_bf16(pre_gelu, y, NO);
        kc_gelu_forward(y, y, NO); /* from the fp32 product, as a fused epilogue does */
    }
    kc_to_bf16(out, y, NO);
    free(x), free(wf), free(bf), free(y);
}

void kc_matmul_backward_bf16(uint16_t *dinp, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                             const uint16_t *w, int N, int C, int OC)
{
    float *d = wide(dout, (size_t)N * OC), *x = wide(inp, (size_t)N * C), *wf = wide(w, (size_t)OC * C);
    float *dx = dinp ? wide(NULL, (size_t)N * C) : NULL;
    kc_matmul_backward(dx, dw, dbias, d, x, wf, N, C, OC);
    if (dinp) kc_to_bf16(dinp, dx, (size_t)N * C);
    free(d), free(x), free(wf), free(dx);
}

void kc_matmul_backward_gelu_bf16(uint16_t *dpre, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                                  const uint16_t *w, const uint16_t *pre_gelu, int N, int C, int OC)
{
    size_t NC = (size_t)N * C;
    float *d = wide(dout, (size_t)N * OC), *x = wide(inp, NC), *wf = wide(w, (size_t)OC * C);
    float *dx = wide(NULL, NC), *pre = wide(pre_gelu, NC);
    kc_matmul_backward(dx, dw, dbias, d, x, wf, N, C, OC);
    kc_gelu_backward(dx, pre, dx, NC); /* in fp32, rounded once below, as the fused epilogue does */
    kc_to_bf16(dpre, dx, NC);
    free(d), free(x), free(wf), free(dx), free(pre);
}

/* An MLP activation's fp32 forward (out = f(x)) and backward (dinp = f'(x) dout)
 * on bf16 values, an element at a time: widened, computed, rounded once. */
static void act_forward_bf16(void (*f)(float *, const float *, size_t), uint16_t *out, const uint16_t *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = kc_bf16_to_f32(inp[i]), y;
        f(&y, &x, 1);
        out[i] = kc_f32_to_bf16(y);
    }
}

static void act_backward_bf16(void (*df)(float *, const float *, const float *, size_t), uint16_t *dinp,
                              const uint16_t *inp, const uint16_t *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = kc_bf16_to_f32(inp[i]), d = kc_bf16_to_f32(dout[i]), y;
        df(&y, &x, &d, 1);
        dinp[i] = kc_f32_to_bf16(y);
    }
}

void kc_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n) { act_forward_bf16(kc_gelu_forward, out, inp, n); }

void kc_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n)
{
    act_backward_bf16(kc_gelu_backward, dinp, inp, dout, n);
}

void kc_relu2_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n)
{
    act_forward_bf16(kc_relu2_forward, out, inp, n);
}

void kc_relu2_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n)
{
    act_backward_bf16(kc_relu2_backward, dinp, inp, dout, n);
}

void kc_residual_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = kc_f32_to_bf16(kc_bf16_to_f32(a[i]) + kc_bf16_to_f32(b[i]));
}

void kc_add_inplace_bf16(uint16_t *acc, const uint16_t *x, size_t n) { kc_residual_forward_bf16(acc, acc, x, n); }

void kc_residual_layernorm_forward_bf16(uint16_t *res, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                        const uint16_t *b, const uint16_t *w, const uint16_t *bias,
                                        int N, int C, float eps)
{
    kc_residual_forward_bf16(res, a, b, (size_t)N * C);
    kc_layernorm_forward_bf16(out, mean, rstd, res, w, bias, N, C, eps);
}

void kc_xent_max_bf16(float *rowmax, const uint16_t *logits, int N, int V)
{
    float *l = wide(logits, (size_t)N * V);
    kc_xent_max(rowmax, l, N, V);
    free(l);
}

void kc_xent_sumexp_target_bf16(float *sumexp, float *target_logit, const uint16_t *logits, const float *rowmax,
                                const int32_t *targets, int N, int V, int vocab_offset)
{
    float *l = wide(logits, (size_t)N * V);
    kc_xent_sumexp_target(sumexp, target_logit, l, rowmax, targets, N, V, vocab_offset);
    free(l);
}

void kc_xent_backward_bf16(uint16_t *dlogits, const uint16_t *logits, const float *rowmax, const float *sumexp,
                           const int32_t *targets, float dloss, int N, int V, int vocab_offset)
{
    size_t n = (size_t)N * V;
    float *l = wide(logits, n);
    kc_xent_backward(l, l, rowmax, sumexp, targets, dloss, N, V, vocab_offset);
    kc_to_bf16(dlogits, l, n);
    free(l);
}

void kc_xent_fused_bf16(float *loss, uint16_t *logits, const int32_t *targets, float dloss, int N, int V)
{
    size_t n = (size_t)N * V;
    float *l = wide(logits, n);
    kc_xent_fused(loss, l, targets, dloss, N, V);
    if (dloss != 0.0f) kc_to_bf16(logits, l, n);
    free(l);
}

/* Causal attention keeping lse instead of the probabilities, per (b, h):
 * S = scale q k^T, lse_t = log sum_{lo<=j<=t} exp(S_tj) (lo: the first key of
 * t's document, kc_doc_first), P = exp(S - lse) there and 0 elsewhere,
 * out = (P M) v with M the dropout mask (kc_attention_drop). */
void kc_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int32_t *doc, int B, int T,
                               int NH, int NG, int HD, const k_dropout *drop)
{
    size_t ld = k_qkv_row(NH, NG, HD), ldo = (size_t)NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    int dropping = drop && drop->p > 0.0f;
    float *x = wide(qkv, (size_t)B * T * ld), *P = wide(NULL, (size_t)T * T), *o = wide(NULL, (size_t)T * HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t oq, ok, ov;
            k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
            const float *base = x + (size_t)b * T * ld, *q = base + oq, *k = base + ok, *v = base + ov;
            float *L = lse + ((size_t)b * NH + h) * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, q, (int)ld, k, (int)ld, 0.0f, P, T);
            for (int t = 0; t < T; t++) {
                int lo = kc_doc_first(doc, b, T, t);
                float *row = P + (size_t)t * T, mx = row[lo], sum = 0.0f;
                for (int j = lo + 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
                for (int j = lo; j <= t; j++) sum += expf(row[j] - mx);
                L[t] = mx + logf(sum);
                for (int j = 0; j < T; j++) row[j] = j >= lo && j <= t ? expf(row[j] - L[t]) : 0.0f;
            }
            if (dropping) kc_attention_drop(P, P, T, drop, drop->row0 + b, drop->head0 + h);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, v, (int)ld, 0.0f, o, HD);
            for (int t = 0; t < T; t++)
                kc_to_bf16(out + ((size_t)b * T + t) * ldo + (size_t)h * HD, o + (size_t)t * HD, (size_t)HD);
        }
    free(x), free(P), free(o);
}

/* The fp32 decode step over the n rows widened; the output rounded once. */
void kc_attention_decode_bf16(uint16_t *out, const uint16_t *qkv, int n, int k0, int NH, int NG, int HD)
{
    float *x = wide(qkv, (size_t)n * k_qkv_row(NH, NG, HD)), *o = wide(NULL, (size_t)NH * HD);
    kc_attention_decode(o, x, n, k0, NH, NG, HD);
    kc_to_bf16(out, o, (size_t)NH * HD);
    free(x), free(o);
}

/* P = exp(S - lse) rebuilt; D_t = sum_d dout_td out_td; dv += (P M)^T dO;
 * dS = P (M dO v^T - D); dq = scale dS k; dk += scale dS^T q. */
void kc_attention_backward_bf16(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                const float *lse, const int32_t *doc, int B, int T, int NH, int NG, int HD,
                                const k_dropout *drop)
{
    size_t ld = k_qkv_row(NH, NG, HD), ldo = (size_t)NH * HD, NT = (size_t)B * T;
    float scale = 1.0f / sqrtf((float)HD);
    int dropping = drop && drop->p > 0.0f;
    float *x = wide(qkv, NT * ld), *dO = wide(dout, NT * ldo), *O = wide(out, NT * ldo);
    float *dx = wide(NULL, NT * ld), *P = wide(NULL, (size_t)T * T), *dS = wide(NULL, (size_t)T * T);
    float *PM = dropping ? wide(NULL, (size_t)T * T) : P;
    memset(dx, 0, NT * ld * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t oq, ok, ov;
            k_qkv_offsets(h, NH, NG, HD, &oq, &ok, &ov);
            size_t off = (size_t)b * T * ld, offo = (size_t)b * T * ldo + (size_t)h * HD;
            const float *q = x + off + oq, *k = x + off + ok, *v = x + off + ov, *L = lse + ((size_t)b * NH + h) * T;
            float *dq = dx + off + oq, *dk = dx + off + ok, *dv = dx + off + ov;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, q, (int)ld, k, (int)ld, 0.0f, P, T);
            for (int t = 0; t < T; t++) {
                int lo = kc_doc_first(doc, b, T, t);
                for (int j = 0; j < T; j++)
                    P[(size_t)t * T + j] = j >= lo && j <= t ? expf(P[(size_t)t * T + j] - L[t]) : 0.0f;
            }
            if (dropping) kc_attention_drop(PM, P, T, drop, drop->row0 + b, drop->head0 + h);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dO + offo, (int)ldo, v, (int)ld, 0.0f,
                        dS, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, PM, T, dO + offo, (int)ldo, 1.0f, dv,
                        (int)ld);
            for (int t = 0; t < T; t++) {
                float D = 0.0f;
                for (int d = 0; d < HD; d++) D += dO[offo + (size_t)t * ldo + d] * O[offo + (size_t)t * ldo + d];
                size_t r = (size_t)t * T;
                if (dropping)
                    for (int j = 0; j < T; j++) dS[r + j] = PM[r + j] * dS[r + j] - P[r + j] * D;
                else
                    for (int j = 0; j < T; j++) dS[r + j] = P[r + j] * (dS[r + j] - D);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, scale, dS, T, k, (int)ld, 0.0f, dq, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, scale, dS, T, q, (int)ld, 1.0f, dk, (int)ld);
        }
    kc_to_bf16(dqkv, dx, NT * ld);
    if (dropping) free(PM);
    free(x), free(dO), free(O), free(dx), free(P), free(dS);
}

void kc_adamw_bf16(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n, float lr,
                   float beta1, float beta2, float eps, float wd, float grad_scale, int t)
{
    kc_adamw(master, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t);
    kc_to_bf16(param_bf16, master, n);
}

/* ---- the LLaMA family and hidden dropout (llama.c), widened ---- */

void kc_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w,
                             int N, int C, float eps)
{
    size_t NC = (size_t)N * C;
    float *x = wide(inp, NC), *wf = wide(w, (size_t)C), *y = wide(NULL, NC);
    kc_rmsnorm_forward(y, rstd, x, wf, N, C, eps);
    kc_to_bf16(out, y, NC);
    free(x), free(wf), free(y);
}

void kc_residual_rmsnorm_forward_bf16(uint16_t *res, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                                      const uint16_t *w, int N, int C, float eps)
{
    kc_residual_forward_bf16(res, a, b, (size_t)N * C);
    kc_rmsnorm_forward_bf16(out, rstd, res, w, N, C, eps);
}

void kc_rmsnorm_backward_bf16(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                              const float *rstd, int N, int C)
{
    size_t NC = (size_t)N * C;
    float *d = wide(dout, NC), *x = wide(inp, NC), *wf = wide(w, (size_t)C), *dx = wide(dinp, NC);
    kc_rmsnorm_backward(dx, dw, d, x, wf, rstd, N, C); /* accumulates into dx */
    kc_to_bf16(dinp, dx, NC);
    free(d), free(x), free(wf), free(dx);
}

void kc_swiglu_forward_bf16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n)
{
    float *g = wide(gate, n), *u = wide(up, n);
    kc_swiglu_forward(g, g, u, n);
    kc_to_bf16(out, g, n);
    free(g), free(u);
}

void kc_swiglu_backward_bf16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                             const uint16_t *up, size_t n)
{
    float *g = wide(gate, n), *u = wide(up, n), *d = wide(dout, n);
    kc_swiglu_backward(g, u, d, g, u, n);
    kc_to_bf16(dgate, g, n);
    kc_to_bf16(dup, u, n);
    free(g), free(u), free(d);
}

static void rope_bf16(uint16_t *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f, int back)
{
    size_t n = (size_t)B * T * k_qkv_row(NH, NG, HD);
    float *x = wide(qkv, n);
    if (back) kc_rope_backward(x, B, T, NH, NG, HD, RD, f);
    else kc_rope_forward(x, B, T, NH, NG, HD, RD, f);
    kc_to_bf16(qkv, x, n);
    free(x);
}

void kc_rope_forward_bf16(uint16_t *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope_bf16(qkv, B, T, NH, NG, HD, RD, f, 0);
}

void kc_rope_backward_bf16(uint16_t *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope_bf16(dqkv, B, T, NH, NG, HD, RD, f, 1);
}

void kc_qkv_pack_bf16(uint16_t *qkv, const uint16_t *q, const uint16_t *k, const uint16_t *v, int N, int NH, int NG,
                      int HD)
{
    kc_qkv_move(qkv, (void *)q, (void *)k, (void *)v, N, NH, NG, HD, sizeof(uint16_t), 1);
}

void kc_qkv_unpack_bf16(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int N, int NH, int NG, int HD)
{
    kc_qkv_move((void *)qkv, q, k, v, N, NH, NG, HD, sizeof(uint16_t), 0);
}

void kc_dropout_bf16(uint16_t *x, int N, int C, const k_dropout *d)
{
    if (!d || d->p <= 0.0f) return;
    size_t n = (size_t)N * C;
    float *f = wide(x, n);
    kc_dropout(f, N, C, d);
    kc_to_bf16(x, f, n);
    free(f);
}
