/* cuda_check: one error-checking macro per GPU API, for C and CUDA sources.
 *
 *   cudaCheck(cudaMalloc(&p, n));      CUDA runtime calls
 *   cudaCheck(cudaGetLastError());     after every kernel launch
 *   cublasCheck(cublasLtMatmul(...));  cuBLAS and cuBLASLt calls
 *
 * A failure prints "file:line: <API>: <library message> (<code>)" and exits:
 * the k_ops entries return nothing, and a half-finished step on a broken
 * device cannot be resumed anyway (the checkpoint is the recovery path).
 * ncclCheck lives in nccl_check.h so this header needs no NCCL. */
#ifndef ATOLL_CUDA_CHECK_H
#define ATOLL_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>
#include <cuda_runtime.h>

static inline void atoll_cuda_check_(cudaError_t e, const char *file, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: CUDA: %s (%s)\n", file, line, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(EXIT_FAILURE);
}

static inline void atoll_cublas_check_(cublasStatus_t s, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "%s:%d: cuBLAS: %s (status %d)\n", file, line, cublasGetStatusString(s),
            (int)s);
    exit(EXIT_FAILURE);
}

#define cudaCheck(call) atoll_cuda_check_((call), __FILE__, __LINE__)
#define cublasCheck(call) atoll_cublas_check_((call), __FILE__, __LINE__)

#endif
