/* matmul: the linear layers through cuBLASLt, fp32 (full fp32 math, no TF32,
 * so the fp32 entries match the CPU reference) and bf16 (bf16 operands, fp32
 * accumulation and scaling).
 *
 * Row-major X[r, c] is column-major X^T, so with w [OC, C]:
 *   forward  out^T[OC,N] = w_cm^T inp_cm        (A = w, op T;  B = inp, op N)
 *   dinp     dinp^T[C,N] = w_cm dout_cm         (A = w, op N;  B = dout, op N)
 *   dw       dw^T[C,OC] += inp_cm dout_cm^T     (A = inp, op N; B = dout, op T; beta 1)
 * Epilogues: BIAS (forward bias), GELU_AUX_BIAS (bf16 MLP up-projection:
 * writes gelu(out) and keeps the pre-activation for the backward), DGELU (the
 * down-projection's dinp times gelu' of that pre-activation). The bias
 * gradient is a deterministic column sum of dout (kcu_colsum_acc), fp32 and
 * bf16 alike. Not the BGRADB epilogue: on Hopper cuBLASLt runs it as its own
 * reduction kernel after the GEMM anyway (globalKernelBgradAB_v2, measured at
 * about half the memory's rate, then an add into the accumulated dbias).
 * When the library has no algorithm for a fused epilogue on some shape, the
 * plain GEMM plus the separate kernel is used instead. */
#include "kcuda.cuh"
#include "kcu_entries.h"

#include <string.h>

typedef struct {
    const void *A, *B;
    void *D;
    cudaDataType_t ab, d; /* operand type, output type */
    bool ta, tb;
    int m, n, k, lda, ldb, ldd;
    float alpha, beta;
    cublasLtEpilogue_t epi;
    const void *bias;
    void *aux;
    int ldaux;
} lt_call;

/* The heuristic assumes 256-byte aligned pointers unless told: tell it the truth. */
static uint32_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al)) al >>= 1;
    return al;
}

/* Heuristic answers by problem: the query costs tens of microseconds of host
 * time, and a training step asks the same few questions every time. */
typedef struct {
    cudaDataType_t ab, d;
    int ta, tb, m, n, k, lda, ldb, ldd, ldaux, has_bias, has_aux;
    cublasLtEpilogue_t epi;
    uint32_t align[4];
} lt_key;

#define LT_CACHE 128
static struct {
    lt_key key;
    int found;
    cublasLtMatmulAlgo_t algo;
} lt_cache[LT_CACHE];
static int lt_cached;

static lt_key key_of(const lt_call *c)
{
    lt_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
    k.ab = c->ab; k.d = c->d; k.ta = c->ta; k.tb = c->tb;
    k.m = c->m; k.n = c->n; k.k = c->k; k.lda = c->lda; k.ldb = c->ldb; k.ldd = c->ldd;
    k.ldaux = c->ldaux; k.has_bias = c->bias != NULL; k.has_aux = c->aux != NULL; k.epi = c->epi;
    k.align[0] = align_of(c->A); k.align[1] = align_of(c->B); k.align[2] = align_of(c->D);
    k.align[3] = c->aux ? align_of(c->aux) : 0;
    return k;
}

/* Returns false (and does nothing) when no algorithm supports this call. */
static bool lt_matmul(const lt_call *c)
{
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasOperation_t ta = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    size_t ws_bytes;
    void *ws = kcu_workspace(&ws_bytes);

    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi));
    if (c->bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias, sizeof c->bias));
    if (c->aux) {
        int64_t ldaux = c->ldaux;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c->aux, sizeof c->aux));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
    }
    /* Stored shapes (before op): A is m x k (op N) or k x m (op T); likewise B. */
    cublasCheck(cublasLtMatrixLayoutCreate(&la, c->ab, c->ta ? c->k : c->m, c->ta ? c->m : c->k, c->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, c->ab, c->tb ? c->n : c->k, c->tb ? c->k : c->n, c->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, c->d, c->m, c->n, c->ldd));

    lt_key key = key_of(c);
    int slot = -1;
    for (int i = 0; i < lt_cached; i++)
        if (!memcmp(&lt_cache[i].key, &key, sizeof key)) slot = i;
    if (slot < 0) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                         sizeof ws_bytes));
        cublasLtMatmulPreferenceAttributes_t attrs[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES };
        uint32_t als[4] = { key.align[0], key.align[1], key.align[2], key.align[2] };
        for (int i = 0; i < 4; i++)
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &als[i], sizeof als[i]));
        cublasLtMatmulHeuristicResult_t h;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(kcu_cublaslt(), op, la, lb, ld, ld, pref, 1, &h, &found);
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        slot = lt_cached < LT_CACHE ? lt_cached++ : (int)(key.m + key.n + key.k) % LT_CACHE;
        lt_cache[slot].key = key;
        lt_cache[slot].found = st == CUBLAS_STATUS_SUCCESS && found > 0;
        if (lt_cache[slot].found) lt_cache[slot].algo = h.algo;
    }
    bool ok = lt_cache[slot].found;
    if (ok)
        cublasCheck(cublasLtMatmul(kcu_cublaslt(), op, &c->alpha, c->A, la, c->B, lb, &c->beta, c->D, ld, c->D, ld,
                                   &lt_cache[slot].algo, ws, ws_bytes, kcu_stream()));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(op));
    return ok;
}

/* Without an epilogue, classic cuBLAS takes any shape and alignment. */
static void lt_matmul_or_die(const lt_call *c)
{
    if (lt_matmul(c)) return;
    if (c->epi == CUBLASLT_EPILOGUE_DEFAULT) {
        cublasCheck(cublasGemmEx(kcu_cublas(), c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, c->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 c->m, c->n, c->k, &c->alpha, c->A, c->ab, c->lda, c->B, c->ab, c->ldb, &c->beta, c->D,
                                 c->d, c->ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    fprintf(stderr, "kernels/cuda: cuBLASLt has no algorithm for m=%d n=%d k=%d (op %c%c, epilogue %d)\n",
            c->m, c->n, c->k, c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', (int)c->epi);
    exit(EXIT_FAILURE);
}

static lt_call forward_call(void *out, const void *inp, const void *w, cudaDataType_t t, int N, int C, int OC)
{
    lt_call c = {};
    c.A = w; c.B = inp; c.D = out; c.ab = t; c.d = t;
    c.ta = true; c.tb = false;
    c.m = OC; c.n = N; c.k = C; c.lda = C; c.ldb = C; c.ldd = OC;
    c.alpha = 1.0f; c.beta = 0.0f;
    c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return c;
}

template <typename T>
static void matmul_backward(T *dinp, float *dw, float *dbias, const T *dout, const T *inp, const T *w,
                            int N, int C, int OC, cudaDataType_t t)
{
    if (N <= 0 || C <= 0 || OC <= 0) return;
    if (dinp) {
        lt_call c = {};
        c.A = w; c.B = dout; c.D = dinp; c.ab = t; c.d = t;
        c.m = C; c.n = N; c.k = OC; c.lda = C; c.ldb = OC; c.ldd = C;
        c.alpha = 1.0f; c.beta = 0.0f; c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        lt_matmul_or_die(&c);
    }
    lt_call c = {};
    c.A = inp; c.B = dout; c.D = dw; c.ab = t; c.d = CUDA_R_32F; /* fp32 weight gradient */
    c.ta = false; c.tb = true;
    c.m = C; c.n = OC; c.k = N; c.lda = C; c.ldb = OC; c.ldd = C;
    c.alpha = 1.0f; c.beta = 1.0f; c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    lt_matmul_or_die(&c);
    if (dbias) kcu_colsum_acc(dbias, dout, N, OC);
}

/* ---- fp32 entries ---- */

__global__ void bias_bcast_k(float *out, const float *bias, int N, int OC)
{
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

void kcu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0) return;
    lt_call c = forward_call(out, inp, w, CUDA_R_32F, N, C, OC);
    if (bias) {
        c.epi = CUBLASLT_EPILOGUE_BIAS;
        c.bias = bias;
        if (lt_matmul(&c)) return;
        /* no fused algorithm: broadcast the bias, then accumulate onto it */
        size_t n = (size_t)N * OC;
        bias_bcast_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(out, bias, N, OC);
        kcu_launched();
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = NULL;
        c.beta = 1.0f;
    }
    lt_matmul_or_die(&c);
}

void kcu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC)
{
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, CUDA_R_32F);
}

/* ---- bf16 entries ---- */

__global__ void bias_gelu_k(bf16 *out, bf16 *pre, const bf16 *bias, int N, int OC, int gelu)
{
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __bfloat162float(pre[i]) + (bias ? __bfloat162float(bias[i % OC]) : 0.0f);
        if (!gelu) {
            out[i] = __float2bfloat16_rn(x);
            continue;
        }
        pre[i] = __float2bfloat16_rn(x);
        x = __bfloat162float(pre[i]); /* gelu of the stored pre-activation, as the backward sees it */
        out[i] = __float2bfloat16_rn(0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))));
    }
}

void kcu_matmul_forward_bf16(uint16_t *out, uint16_t *pre_gelu, const uint16_t *inp, const uint16_t *w,
                             const uint16_t *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0) return;
    lt_call c = forward_call(out, inp, w, CUDA_R_16BF, N, C, OC);
    if (pre_gelu) {
        c.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        c.bias = bias;
        c.aux = pre_gelu;
        c.ldaux = OC;
        if (OC % 8 == 0 && lt_matmul(&c)) return;
        /* unfused: the GEMM into pre_gelu, then bias + GELU in one pass */
        lt_call p = forward_call(pre_gelu, inp, w, CUDA_R_16BF, N, C, OC);
        lt_matmul_or_die(&p);
        size_t n = (size_t)N * OC;
        bias_gelu_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(as_bf(out), as_bf(pre_gelu), as_bf(bias), N, OC, 1);
        kcu_launched();
        return;
    }
    if (bias) {
        c.epi = CUBLASLT_EPILOGUE_BIAS;
        c.bias = bias;
        if (lt_matmul(&c)) return;
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = NULL;
        lt_matmul_or_die(&c);
        size_t n = (size_t)N * OC;
        bias_gelu_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(as_bf(out), as_bf(out), as_bf(bias), N, OC, 0);
        kcu_launched();
        return;
    }
    lt_matmul_or_die(&c);
}

void kcu_matmul_backward_bf16(uint16_t *dinp, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, int N, int C, int OC)
{
    matmul_backward(dinp ? as_bf(dinp) : (bf16 *)NULL, dw, dbias, as_bf(dout), as_bf(inp), as_bf(w), N, C, OC,
                    CUDA_R_16BF);
}

void kcu_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n);

void kcu_matmul_backward_gelu_bf16(uint16_t *dpre, float *dw, float *dbias, const uint16_t *dout, const uint16_t *inp,
                                   const uint16_t *w, const uint16_t *pre_gelu, int N, int C, int OC)
{
    if (N <= 0 || C <= 0 || OC <= 0) return;
    lt_call c = {};
    c.A = w; c.B = dout; c.D = dpre; c.ab = CUDA_R_16BF; c.d = CUDA_R_16BF;
    c.m = C; c.n = N; c.k = OC; c.lda = C; c.ldb = OC; c.ldd = C;
    c.alpha = 1.0f; c.beta = 0.0f;
    c.epi = CUBLASLT_EPILOGUE_DGELU;
    c.aux = (void *)pre_gelu;
    c.ldaux = C;
    if (C % 8 != 0 || !lt_matmul(&c)) { /* unfused: the product, then GELU's gradient in one pass */
        c.epi = CUBLASLT_EPILOGUE_DEFAULT;
        c.aux = NULL;
        c.ldaux = 0;
        lt_matmul_or_die(&c);
        kcu_gelu_backward_bf16(dpre, pre_gelu, dpre, (size_t)N * C);
    }
    matmul_backward((bf16 *)NULL, dw, dbias, as_bf(dout), as_bf(inp), as_bf(w), N, C, OC, CUDA_R_16BF);
}
