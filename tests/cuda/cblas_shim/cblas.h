/* cblas shim: the one CBLAS call the CPU reference makes (row-major sgemm),
 * for building the CUDA kernel tests on a GPU machine that has no BLAS
 * package (bench/gpu/run.sh uses it only when no <cblas.h> is installed).
 * Plain loops with fp32 products summed in double: a reference, not fast. */
#ifndef ATOLL_CBLAS_SHIM_H
#define ATOLL_CBLAS_SHIM_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
