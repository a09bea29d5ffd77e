/* kcu_entries: the CUDA backend's entry points, one declaration each: what
 * ops_table.cu puts in the k_ops table and what the CPU emulation test
 * (tests/cuda/cuda_emu_kernels.cpp) calls directly. Shapes and rules are
 * kernels.h's for the entry of the same name. */
#ifndef ATOLL_KCU_ENTRIES_H
#define ATOLL_KCU_ENTRIES_H

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels.h"
}

int kcu_init(void);

void *kcu_alloc(size_t bytes);
void kcu_free(void *p);
void kcu_to_device(void *dst, const void *src, size_t bytes);
void kcu_to_host(void *dst, const void *src, size_t bytes);
void kcu_to_host_later(void *dst, const void *src, size_t bytes);
void kcu_copy(void *dst, const void *src, size_t bytes);
void kcu_zero(void *p, size_t bytes);
void kcu_sync(void);
/* forgets every GEMM algorithm chosen so far (matmul.cu), for the tests */
void kcu_gemm_choices_clear(void);

void kcu_embedding_forward(float *, const int32_t *, const float *, int, int, int, int);
void kcu_embedding_backward(float *, const float *, const int32_t *, int, int, int, int);
void kcu_position_forward(float *, const float *, const int32_t *, int, int, int);
void kcu_position_backward(float *, const float *, int, int, int);
void kcu_layernorm_forward(float *, float *, float *, const float *, const float *, const float *, int, int, float);
void kcu_layernorm_backward(float *, float *, float *, float *, const float *, const float *, const float *,
                            const float *, const float *, int, int);
void kcu_matmul_forward(float *, const float *, const float *, const float *, int, int, int);
void kcu_matmul_backward(float *, float *, float *, const float *, const float *, const float *, int, int, int);
void kcu_attention_forward(float *, float *, const float *, const int32_t *, int, int, int, int, int,
                           const k_dropout *);
void kcu_attention_backward(float *, float *, const float *, const float *, const float *, int, int, int, int, int,
                            const k_dropout *);
void kcu_attention_decode(float *, const float *, int, int, int, int, int);
void kcu_gelu_forward(float *, const float *, size_t);
void kcu_gelu_backward(float *, const float *, const float *, size_t);
void kcu_relu2_forward(float *, const float *, size_t);
void kcu_relu2_backward(float *, const float *, const float *, size_t);
void kcu_residual_forward(float *, const float *, const float *, size_t);
void kcu_add_inplace(float *, const float *, size_t);
void kcu_scale(float *, float, size_t);
void kcu_xent_max(float *, const float *, int, int);
void kcu_xent_sumexp_target(float *, float *, const float *, const float *, const int32_t *, int, int, int);
void kcu_xent_loss(float *, const float *, const float *, const float *, const int32_t *, int);
void kcu_xent_backward(float *, const float *, const float *, const float *, const int32_t *, float, int, int, int);
double kcu_sumsq(const float *, size_t);
uint64_t kcu_nonzeros(const float *, size_t);
void kcu_sumsq_begin(const float *, size_t, double);
double kcu_sumsq_end(void);
void kcu_adamw(float *, const float *, float *, float *, size_t, float, float, float, float, float, float, int);

void kcu_to_bf16(uint16_t *, const float *, size_t);
void kcu_from_bf16(float *, const uint16_t *, size_t);
void kcu_embedding_forward_bf16(uint16_t *, const int32_t *, const uint16_t *, int, int, int, int);
void kcu_embedding_backward_bf16(float *, const uint16_t *, const int32_t *, int, int, int, int);
void kcu_position_forward_bf16(uint16_t *, const uint16_t *, const int32_t *, int, int, int);
void kcu_position_backward_bf16(float *, const uint16_t *, int, int, int);
void kcu_residual_layernorm_forward_bf16(uint16_t *res, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                         const uint16_t *b, const uint16_t *w, const uint16_t *bias,
                                         int N, int C, float eps);
void kcu_layernorm_forward_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *,
                                int, int, float);
void kcu_residual_rmsnorm_forward_bf16(uint16_t *res, uint16_t *out, float *rstd, const uint16_t *a,
                                       const uint16_t *b, const uint16_t *w, int N, int C, float eps);
void kcu_layernorm_backward_bf16(uint16_t *, float *, float *, float *, const uint16_t *, const uint16_t *,
                                 const uint16_t *, const float *, const float *, int, int);
void kcu_matmul_forward_bf16(uint16_t *, uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, int, int,
                             int);
void kcu_matmul_backward_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *, int,
                              int, int);
void kcu_gelu_forward_bf16(uint16_t *, const uint16_t *, size_t);
void kcu_gelu_backward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_relu2_forward_bf16(uint16_t *, const uint16_t *, size_t);
void kcu_relu2_backward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_residual_forward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_add_inplace_bf16(uint16_t *, const uint16_t *, size_t);
void kcu_xent_max_bf16(float *, const uint16_t *, int, int);
void kcu_xent_sumexp_target_bf16(float *, float *, const uint16_t *, const float *, const int32_t *, int, int, int);
void kcu_xent_backward_bf16(uint16_t *, const uint16_t *, const float *, const float *, const int32_t *, float, int,
                            int, int);
void kcu_attention_forward_bf16(uint16_t *, float *, const uint16_t *, const int32_t *, int, int, int, int, int,
                                const k_dropout *);
void kcu_attention_backward_bf16(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const float *,
                                 const int32_t *, int, int, int, int, int, const k_dropout *);
void kcu_attention_decode_bf16(uint16_t *, const uint16_t *, int, int, int, int, int);
void kcu_rmsnorm_forward(float *, float *, const float *, const float *, int, int, float);
void kcu_rmsnorm_backward(float *, float *, const float *, const float *, const float *, const float *, int, int);
void kcu_rmsnorm_forward_bf16(uint16_t *, float *, const uint16_t *, const uint16_t *, int, int, float);
void kcu_rmsnorm_backward_bf16(uint16_t *, float *, const uint16_t *, const uint16_t *, const uint16_t *, const float *,
                               int, int);
void kcu_swiglu_forward(float *, const float *, const float *, size_t);
void kcu_swiglu_backward(float *, float *, const float *, const float *, const float *, size_t);
void kcu_swiglu_forward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_swiglu_backward_bf16(uint16_t *, uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_rope_forward(float *, int, int, int, int, int, int, k_rope_freq);
void kcu_rope_backward(float *, int, int, int, int, int, int, k_rope_freq);
void kcu_rope_forward_bf16(uint16_t *, int, int, int, int, int, int, k_rope_freq);
void kcu_rope_backward_bf16(uint16_t *, int, int, int, int, int, int, k_rope_freq);
void kcu_qkv_pack(float *, const float *, const float *, const float *, int, int, int, int);
void kcu_qkv_unpack(float *, float *, float *, const float *, int, int, int, int);
void kcu_qkv_pack_bf16(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, int, int, int, int);
void kcu_qkv_unpack_bf16(uint16_t *, uint16_t *, uint16_t *, const uint16_t *, int, int, int, int);
void kcu_dropout(float *, int, int, const k_dropout *);
void kcu_dropout_bf16(uint16_t *, int, int, const k_dropout *);
void kcu_xent_fused(float *, float *, const int32_t *, float, int, int);
void kcu_xent_fused_bf16(float *, uint16_t *, const int32_t *, float, int, int);
void kcu_matmul_backward_gelu_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *,
                                   const uint16_t *, int, int, int);
void kcu_adamw_segments(float *, uint16_t *, const float *, float *, float *, size_t, int, const size_t *,
                        const float *, float, float, float, float, float, int);
void kcu_adamw_bf16(float *, uint16_t *, const float *, float *, float *, size_t, float, float, float, float, float,
                    float, int);

#endif
