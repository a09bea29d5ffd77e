#ifndef ATOLL_GEMM_SWEEP_H
#define ATOLL_GEMM_SWEEP_H
/* gemm_sweep: times cuBLASLt's candidate algorithms for each GEMM of a GPT-2
 * 124M step (kernels/cuda/matmul.cu's set-ups) against the heuristic's first
 * choice; prints a table and appends it to md (which stays the caller's).
 * Needs a CUDA device; returns 0, or -1 after saying the operands did not fit
 * (a failing CUDA or cuBLASLt call exits, as cuda_check.h does). */
#include <stdio.h>

int gemm_sweep(FILE *md);

#endif
