/* cublas_mock: the cuBLAS / cuBLASLt calls of matmul.cu and attention.cu on
 * the CPU, for the emulated build (see emu_cuda.h). Column-major BLAS
 * semantics in double (the operands widened, the product by OpenBLAS's
 * dgemm); epilogues BIAS, GELU(_AUX)(_BIAS) and DGELU as cuBLASLt
 * documents them (bias per row of D, the GELU input kept in D's type). The
 * heuristic offers no algorithm for a fused epilogue when D has an odd
 * dimension, so odd test shapes exercise matmul.cu's fallbacks. Shapes and
 * leading dimensions are checked; a mismatch aborts. */
#ifndef ATOLL_CUBLAS_MOCK_H
#define ATOLL_CUBLAS_MOCK_H
#include "emu_cuda.h"
#include <cblas.h>
#include <cmath>
extern "C" int k_cpu_blas_threads(int n); /* kernels.h */
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
enum { CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12 } cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 } cublasLtMatmulPreferenceAttributes_t;
struct mock_desc { int ta = 0, tb = 0; int epi = 1; const void *bias = nullptr; void *aux = nullptr; int64_t ldaux = 0; };
struct mock_layout { cudaDataType_t t; uint64_t rows, cols; int64_t ld; };
typedef mock_desc *cublasLtMatmulDesc_t;
typedef mock_layout *cublasLtMatrixLayout_t;
typedef enum { CUBLASLT_REDUCTION_SCHEME_NONE = 0, CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
  CUBLASLT_REDUCTION_SCHEME_MASK = 7 } cublasLtReductionScheme_t;
struct mock_pref { size_t max_ws = 0; uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK; };
typedef mock_pref *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; } cublasLtMatmulHeuristicResult_t;
inline int mock_fused_calls, mock_rejected_calls; /* how often each path ran */
/* Algorithms: asked for more than one, the heuristic offers mock_candidates, algorithm i
 * with data[0] = i; each run of algorithm i charges mock_algo_ms[i] to the emulated clock
 * (emu_clock_ms), counts in mock_algo_runs[i], and the last one run is mock_last_algo. Every
 * one computes the same. Told that there is no workspace (MAX_WORKSPACE_BYTES 0), it offers
 * the mock_nows_candidates listed in mock_nows (none by default); told to split K only in place
 * (REDUCTION_SCHEME_MASK without the two out-of-place schemes), the mock_inplace_candidates
 * listed in mock_inplace (none by default). */
#define MOCK_ALGOS 8
inline int mock_candidates = 3, mock_last_algo = -1, mock_nows_candidates, mock_nows[MOCK_ALGOS];
inline int mock_inplace_candidates, mock_inplace[MOCK_ALGOS];
inline bool mock_inplace_refused; /* the question about in place answered with an error, as a library might */
inline double mock_algo_ms[MOCK_ALGOS];
inline long mock_algo_runs[MOCK_ALGOS];
/* A GPU's clocks coming up from idle: from each heuristic query on, a run costs mock_ramp_ms more, less
 * mock_ramp_step for each run before it, down to nothing (none by default). */
inline double mock_ramp_ms, mock_ramp_step, mock_ramp_left;
/* The host's time to make a call, which the device sees only when nothing was queued ahead of it (the
 * host has waited since the last GEMM: emu_host_waited): charged to the clock before such a GEMM runs
 * (none by default). */
inline double mock_idle_launch_ms;
inline size_t cublasLtGetVersion() { return 130000; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t) { *d = new mock_desc; return 0; }
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n)
{
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&d->ta, v, 4); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&d->tb, v, 4); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&d->epi, v, 4); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&d->bias, v, sizeof(void *)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&d->aux, v, sizeof(void *)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (n != 8) abort(); memcpy(&d->ldaux, v, 8); break;
    }
    return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t r, uint64_t c, int64_t ld)
{
    if (ld < (int64_t)r) { fprintf(stderr, "mock: ld %ld < rows %lu\n", (long)ld, (unsigned long)r); abort(); }
    *l = new mock_layout{t, r, c, ld}; return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new mock_pref; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n)
{
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (n != sizeof(size_t)) abort(); /* the library reads a uint64_t */
        memcpy(&p->max_ws, v, n);
    }
    if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) {
        if (n != sizeof(uint32_t)) abort();
        memcpy(&p->reductions, v, n);
    }
    return 0;
}
/* policy: fused epilogues only when m and n are even, so odd test shapes take the fallbacks */
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int want, cublasLtMatmulHeuristicResult_t *h, int *found)
{
    memset(h, 0, sizeof *h);
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && ((D->rows | D->cols) & 1)) { *found = 0; mock_rejected_calls++; return CUBLAS_STATUS_NOT_SUPPORTED; }
    mock_ramp_left = mock_ramp_ms;
    bool none = p->max_ws == 0;
    bool in_place = !none && !(p->reductions & (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
    if (in_place && mock_inplace_refused) { *found = 0; return CUBLAS_STATUS_INVALID_VALUE; }
    int have = none ? mock_nows_candidates : in_place ? mock_inplace_candidates : mock_candidates;
    if (have == 0) { *found = 0; return CUBLAS_STATUS_NOT_SUPPORTED; }
    *found = want > 1 ? (have < want ? have : want) : 1;
    for (int i = 0; i < *found; i++) {
        memset(&h[i], 0, sizeof h[i]);
        h[i].algo.data[0] = (uint64_t)(none ? mock_nows[i] : in_place ? mock_inplace[i] : i);
    }
    return 0;
}
/* an algorithm this mock did not offer (data[0] past MOCK_ALGOS) is refused, as the library refuses another's */
inline cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *a, cublasLtMatmulHeuristicResult_t *r)
{
    memset(r, 0, sizeof *r);
    return a->data[0] < MOCK_ALGOS ? 0 : CUBLAS_STATUS_NOT_SUPPORTED;
}
inline float mock_ld(const void *p, cudaDataType_t t, size_t i) { return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]); }
inline void mock_st(void *p, cudaDataType_t t, size_t i, float v) { if (t == CUDA_R_32F) ((float *)p)[i] = v; else ((__nv_bfloat16 *)p)[i] = __nv_bfloat16(v); }
inline void mock_gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, cudaDataType_t at, long lda,
                      const void *B, cudaDataType_t bt, long ldb, float beta, void *C, cudaDataType_t ct, long ldc,
                      int epi = 1, const void *bias = nullptr, void *aux = nullptr, long ldaux = 0)
{
    /* One BLAS thread: the emulation runs on the calling thread, and OpenBLAS's other threads
     * would spin (sched_yield) between its small products, taking the cores from the fibers
     * and from the other ranks (the user's OPENBLAS_NUM_THREADS stands). */
    static const bool one_thread = (k_cpu_blas_threads(1), true);
    (void)one_thread;
    /* op(A) [m, k] and op(B) [k, n] widened to column-major doubles, their product S [m, n]. The
     * buffers stay from call to call, each rank's thread its own: new ones a call (mapped, faulted
     * in and zeroed) were a fifth of an emulated training run. */
    thread_local std::vector<double> a, b, S;
    if (a.size() < (size_t)m * k) a.resize((size_t)m * k);
    if (b.size() < (size_t)k * n) b.resize((size_t)k * n);
    if (S.size() < (size_t)m * n) S.resize((size_t)m * n);
    for (int p = 0; p < k; p++)
        for (int i = 0; i < m; i++) a[(size_t)p * m + i] = mock_ld(A, at, ta ? (size_t)i * lda + p : (size_t)p * lda + i);
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++) b[(size_t)j * k + p] = mock_ld(B, bt, tb ? (size_t)p * ldb + j : (size_t)j * ldb + p);
    if (m && n && k)
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a.data(), m, b.data(), k, 0.0, S.data(), m);
    else
        std::fill(S.begin(), S.begin() + (ptrdiff_t)m * n, 0.0); /* an empty sum */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = S[(size_t)j * m + i];
            float v = alpha * (float)s + (beta != 0 ? beta * mock_ld(C, ct, (size_t)j * ldc + i) : 0.0f);
            if (epi & 4) v += mock_ld(bias, ct, i);
            if (epi & 64) { /* DGELU: times gelu' of the kept pre-activation */
                float x = mock_ld(aux, ct, (size_t)j * ldaux + i);
                float th = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
                v *= 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
            }
            if (epi & 32) {
                if (epi & 128) { mock_st(aux, ct, (size_t)j * ldaux + i, v); v = mock_ld(aux, ct, (size_t)j * ldaux + i); }
                v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
            }
            mock_st(C, ct, (size_t)j * ldc + i, v);
        }
}
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t la,
    const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
    const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t st)
{
    if (C != D || lc != ld) abort();
    if (!algo || algo->data[0] >= MOCK_ALGOS) abort(); /* matmul.cu always passes one it was offered */
    int m = ld->rows, n = ld->cols, k = d->ta ? la->rows : la->cols;
    if ((d->ta ? la->cols : la->rows) != (uint64_t)m || (d->tb ? lb->rows : lb->cols) != (uint64_t)n || (d->tb ? lb->cols : lb->rows) != (uint64_t)k) {
        fprintf(stderr, "mock: inconsistent shapes\n"); abort();
    }
    if (d->epi & 128 && d->ldaux < m) abort();
    if (d->epi != 1) mock_fused_calls++;
    /* what it runs, by value (the caller destroys the descriptors after the call; a graph runs it later) */
    mock_desc dv = *d;
    mock_layout av = *la, bv = *lb, dl = *ld;
    float al = *(const float *)alpha, be = *(const float *)beta;
    int algo_i = (int)algo->data[0];
    auto run = [=] {
        mock_last_algo = algo_i;
        mock_algo_runs[algo_i]++;
        if (emu_host_waited) emu_clock_ms += mock_idle_launch_ms;
        emu_host_waited = false;
        emu_clock_ms += mock_algo_ms[algo_i] + mock_ramp_left;
        mock_ramp_left = mock_ramp_left > mock_ramp_step ? mock_ramp_left - mock_ramp_step : 0.0;
        mock_gemm(dv.ta, dv.tb, m, n, k, al, A, av.t, av.ld, B, bv.t, bv.ld, be, D, dl.t, dl.ld, dv.epi, dv.bias, dv.aux,
                  dv.ldaux);
    };
    emu_stream_op(st, run);
    return 0;
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb, long long sb, const float *beta,
    float *C, int ldc, long long sc, int count)
{
    float al = *alpha, be = *beta;
    auto run = [=] {
        for (int i = 0; i < count; i++)
            mock_gemm(ta, tb, m, n, k, al, A + i * sa, CUDA_R_32F, lda, B + i * sb, CUDA_R_32F, ldb, be, C + i * sc, CUDA_R_32F, ldc);
    };
    emu_stream_op(run);
    return 0;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct,
    int ldc, cublasComputeType_t, cublasGemmAlgo_t)
{
    float al = *(const float *)alpha, be = *(const float *)beta;
    auto run = [=] { mock_gemm(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc); };
    emu_stream_op(run);
    return 0;
}

#endif
