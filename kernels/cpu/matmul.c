#include "cpu.h"

#include <cblas.h>
#include <stdlib.h>

int k_cpu_blas_threads(int n)
{
    if (n > 0 && !getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) openblas_set_num_threads(n);
    return openblas_get_num_threads();
}

void kc_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC)
{
    /* Start from the broadcast bias so the GEMM can accumulate onto it (beta 1). */
    float beta = 0.0f;
    if (bias) {
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias[o];
        beta = 1.0f;
    }
    /* one row (a decode step): a GEMV reads w once, where the GEMM would pack it first */
    if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, w, C, inp, 1, beta, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

void kc_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC)
{
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dw, C);
    if (dbias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) dbias[o] += dout[(size_t)n * OC + o];
}
