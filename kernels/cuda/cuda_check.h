/* cuda_check: one error-checking macro per GPU API, for C and CUDA sources.
 *
 *   cudaCheck(cudaMalloc(&p, n));      CUDA runtime calls
 *   cudaCheck(cudaGetLastError());     after every kernel launch
 *   cublasCheck(cublasLtMatmul(...));  cuBLAS and cuBLASLt calls
 *
 * A failure prints "file:line: <API>: <library message> (<code>)" and exits:
 * the k_ops entries return nothing, and a half-finished step on a broken
 * device cannot be resumed anyway (the checkpoint is the recovery path).
 * Except while the CUDA backend records a graph (k_cuda_graph_begin): CUDA
 * refuses some calls while capturing, nothing captured has run, so the
 * backend's atoll_cuda_capture_refused (memory.cu) takes the failure as the
 * reason the recording gives no graph, and the caller runs the ops again
 * uncaptured. Programs without the backend linked in have no such function
 * (a weak reference): every failure exits there.
 * ncclCheck lives in nccl_check.h so this header needs no NCCL. */
#ifndef ATOLL_CUDA_CHECK_H
#define ATOLL_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>
#include <cuda_runtime.h>

/* 1 when a graph is being recorded: `what` is noted as why it gives none */
#ifdef __cplusplus
extern "C"
#endif
    __attribute__((weak)) int
    atoll_cuda_capture_refused(const char *what);

static inline int atoll_check_in_capture_(const char *api, const char *msg, const char *file, int line)
{
    char what[256];
    if (!atoll_cuda_capture_refused) return 0;
    snprintf(what, sizeof what, "%s refused while recording at %s:%d: %s", api, file, line, msg);
    return atoll_cuda_capture_refused(what);
}

static inline void atoll_cuda_check_(cudaError_t e, const char *file, int line)
{
    if (e == cudaSuccess) return;
    if (atoll_check_in_capture_("CUDA", cudaGetErrorString(e), file, line)) {
        (void)cudaGetLastError();
        return;
    }
    fprintf(stderr, "%s:%d: CUDA: %s (%s)\n", file, line, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(EXIT_FAILURE);
}

static inline void atoll_cublas_check_(cublasStatus_t s, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return;
    if (atoll_check_in_capture_("cuBLAS", cublasGetStatusString(s), file, line)) return;
    fprintf(stderr, "%s:%d: cuBLAS: %s (status %d)\n", file, line, cublasGetStatusString(s),
            (int)s);
    exit(EXIT_FAILURE);
}

#define cudaCheck(call) atoll_cuda_check_((call), __FILE__, __LINE__)
#define cublasCheck(call) atoll_cublas_check_((call), __FILE__, __LINE__)

#endif
