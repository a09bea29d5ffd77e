#include "cpu.h"

#include <string.h>

/* Host memory is the "device" here, so both directions are a memcpy. */
static void kc_to_device(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void kc_to_host(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static const k_ops CPU_OPS = {
    .name = "cpu",
    .alloc = kc_alloc,
    .free = kc_free,
    .to_device = kc_to_device,
    .to_host = kc_to_host,
    .copy = kc_copy,
    .zero = kc_zero,
    .sync = kc_sync,
    .embedding_forward = kc_embedding_forward,
    .embedding_backward = kc_embedding_backward,
    .position_forward = kc_position_forward,
    .position_backward = kc_position_backward,
    .layernorm_forward = kc_layernorm_forward,
    .layernorm_backward = kc_layernorm_backward,
    .matmul_forward = kc_matmul_forward,
    .matmul_backward = kc_matmul_backward,
    .attention_forward = kc_attention_forward,
    .attention_backward = kc_attention_backward,
    .gelu_forward = kc_gelu_forward,
    .gelu_backward = kc_gelu_backward,
    .residual_forward = kc_residual_forward,
    .add_inplace = kc_add_inplace,
    .scale = kc_scale,
    .xent_max = kc_xent_max,
    .xent_sumexp_target = kc_xent_sumexp_target,
    .xent_loss = kc_xent_loss,
    .xent_backward = kc_xent_backward,
    .sumsq = kc_sumsq,
    .adamw = kc_adamw,
    .to_bf16 = kc_to_bf16,
    .from_bf16 = kc_from_bf16,
    .embedding_forward_bf16 = kc_embedding_forward_bf16,
    .embedding_backward_bf16 = kc_embedding_backward_bf16,
    .position_forward_bf16 = kc_position_forward_bf16,
    .position_backward_bf16 = kc_position_backward_bf16,
    .layernorm_forward_bf16 = kc_layernorm_forward_bf16,
    .layernorm_backward_bf16 = kc_layernorm_backward_bf16,
    .matmul_forward_bf16 = kc_matmul_forward_bf16,
    .matmul_backward_bf16 = kc_matmul_backward_bf16,
    .gelu_forward_bf16 = kc_gelu_forward_bf16,
    .gelu_backward_bf16 = kc_gelu_backward_bf16,
    .residual_forward_bf16 = kc_residual_forward_bf16,
    .add_inplace_bf16 = kc_add_inplace_bf16,
    .xent_max_bf16 = kc_xent_max_bf16,
    .xent_sumexp_target_bf16 = kc_xent_sumexp_target_bf16,
    .xent_backward_bf16 = kc_xent_backward_bf16,
    .attention_forward_bf16 = kc_attention_forward_bf16,
    .attention_backward_bf16 = kc_attention_backward_bf16,
    .adamw_bf16 = kc_adamw_bf16,
    .xent_fused = kc_xent_fused,
    .xent_fused_bf16 = kc_xent_fused_bf16,
    .adamw_segments = kc_adamw_segments,
};

const k_ops *k_cpu(void) { return &CPU_OPS; }
