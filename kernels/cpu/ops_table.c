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
};

const k_ops *k_cpu(void) { return &CPU_OPS; }
