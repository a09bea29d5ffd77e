#include "cblas.h"

#include <stdio.h>
#include <stdlib.h>

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (order != CblasRowMajor) {
        fprintf(stderr, "cblas shim: only CblasRowMajor is implemented\n");
        abort();
    }
    /* row-major: op(A) is M x K, op(B) is K x N */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int p = 0; p < K; p++) {
                float a = ta == CblasNoTrans ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
                float b = tb == CblasNoTrans ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
                s += (double)a * b;
            }
            float c = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = c + alpha * (float)s;
        }
}
