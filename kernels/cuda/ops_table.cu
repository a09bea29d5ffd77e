/* ops_table: gathers the op families behind k_cuda(). The first call probes
 * the device; without one it returns NULL and k_cuda_status() says why. */
#include "kcuda.cuh"

int kcu_init(void);

void *kcu_alloc(size_t bytes);
void kcu_free(void *p);
void kcu_to_device(void *dst, const void *src, size_t bytes);
void kcu_to_host(void *dst, const void *src, size_t bytes);
void kcu_copy(void *dst, const void *src, size_t bytes);
void kcu_zero(void *p, size_t bytes);
void kcu_sync(void);

void kcu_embedding_forward(float *, const int32_t *, const float *, int, int, int, int);
void kcu_embedding_backward(float *, const float *, const int32_t *, int, int, int, int);
void kcu_position_forward(float *, const float *, int, int, int);
void kcu_position_backward(float *, const float *, int, int, int);
void kcu_layernorm_forward(float *, float *, float *, const float *, const float *, const float *, int, int);
void kcu_layernorm_backward(float *, float *, float *, const float *, const float *, const float *, const float *,
                            const float *, int, int);
void kcu_matmul_forward(float *, const float *, const float *, const float *, int, int, int);
void kcu_matmul_backward(float *, float *, float *, const float *, const float *, const float *, int, int, int);
void kcu_attention_forward(float *, float *, const float *, int, int, int, int);
void kcu_attention_backward(float *, float *, const float *, const float *, const float *, int, int, int, int);
void kcu_gelu_forward(float *, const float *, size_t);
void kcu_gelu_backward(float *, const float *, const float *, size_t);
void kcu_residual_forward(float *, const float *, const float *, size_t);
void kcu_add_inplace(float *, const float *, size_t);
void kcu_scale(float *, float, size_t);
void kcu_xent_max(float *, const float *, int, int);
void kcu_xent_sumexp_target(float *, float *, const float *, const float *, const int32_t *, int, int, int);
void kcu_xent_loss(float *, const float *, const float *, const float *, const int32_t *, int);
void kcu_xent_backward(float *, const float *, const float *, const float *, const int32_t *, float, int, int, int);
double kcu_sumsq(const float *, size_t);
void kcu_adamw(float *, const float *, float *, float *, size_t, float, float, float, float, float, float, int);

void kcu_to_bf16(uint16_t *, const float *, size_t);
void kcu_from_bf16(float *, const uint16_t *, size_t);
void kcu_embedding_forward_bf16(uint16_t *, const int32_t *, const uint16_t *, int, int, int, int);
void kcu_embedding_backward_bf16(float *, const uint16_t *, const int32_t *, int, int, int, int);
void kcu_position_forward_bf16(uint16_t *, const uint16_t *, int, int, int);
void kcu_position_backward_bf16(float *, const uint16_t *, int, int, int);
void kcu_layernorm_forward_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *,
                                int, int);
void kcu_layernorm_backward_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *,
                                 const float *, const float *, int, int);
void kcu_matmul_forward_bf16(uint16_t *, uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, int, int,
                             int);
void kcu_matmul_backward_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *, int,
                              int, int);
void kcu_gelu_forward_bf16(uint16_t *, const uint16_t *, size_t);
void kcu_gelu_backward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_residual_forward_bf16(uint16_t *, const uint16_t *, const uint16_t *, size_t);
void kcu_add_inplace_bf16(uint16_t *, const uint16_t *, size_t);
void kcu_xent_max_bf16(float *, const uint16_t *, int, int);
void kcu_xent_sumexp_target_bf16(float *, float *, const uint16_t *, const float *, const int32_t *, int, int, int);
void kcu_xent_backward_bf16(uint16_t *, const uint16_t *, const float *, const float *, const int32_t *, float, int,
                            int, int);
void kcu_attention_forward_bf16(uint16_t *, float *, const uint16_t *, int, int, int, int);
void kcu_attention_backward_bf16(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const float *, int,
                                 int, int, int);
void kcu_xent_fused(float *, float *, const int32_t *, float, int, int);
void kcu_xent_fused_bf16(float *, uint16_t *, const int32_t *, float, int, int);
void kcu_matmul_backward_gelu_bf16(uint16_t *, float *, float *, const uint16_t *, const uint16_t *, const uint16_t *,
                                   const uint16_t *, int, int, int);
void kcu_adamw_segments(float *, uint16_t *, const float *, float *, float *, size_t, int, const size_t *,
                        const float *, float, float, float, float, float, int);
void kcu_adamw_bf16(float *, uint16_t *, const float *, float *, float *, size_t, float, float, float, float, float,
                    float, int);

static k_ops OPS;

static void fill(k_ops *k)
{
    k->name = "cuda";
    k->alloc = kcu_alloc;
    k->free = kcu_free;
    k->to_device = kcu_to_device;
    k->to_host = kcu_to_host;
    k->copy = kcu_copy;
    k->zero = kcu_zero;
    k->sync = kcu_sync;
    k->embedding_forward = kcu_embedding_forward;
    k->embedding_backward = kcu_embedding_backward;
    k->position_forward = kcu_position_forward;
    k->position_backward = kcu_position_backward;
    k->layernorm_forward = kcu_layernorm_forward;
    k->layernorm_backward = kcu_layernorm_backward;
    k->matmul_forward = kcu_matmul_forward;
    k->matmul_backward = kcu_matmul_backward;
    k->attention_forward = kcu_attention_forward;
    k->attention_backward = kcu_attention_backward;
    k->gelu_forward = kcu_gelu_forward;
    k->gelu_backward = kcu_gelu_backward;
    k->residual_forward = kcu_residual_forward;
    k->add_inplace = kcu_add_inplace;
    k->scale = kcu_scale;
    k->xent_max = kcu_xent_max;
    k->xent_sumexp_target = kcu_xent_sumexp_target;
    k->xent_loss = kcu_xent_loss;
    k->xent_backward = kcu_xent_backward;
    k->sumsq = kcu_sumsq;
    k->adamw = kcu_adamw;

    k->to_bf16 = kcu_to_bf16;
    k->from_bf16 = kcu_from_bf16;
    k->embedding_forward_bf16 = kcu_embedding_forward_bf16;
    k->embedding_backward_bf16 = kcu_embedding_backward_bf16;
    k->position_forward_bf16 = kcu_position_forward_bf16;
    k->position_backward_bf16 = kcu_position_backward_bf16;
    k->layernorm_forward_bf16 = kcu_layernorm_forward_bf16;
    k->layernorm_backward_bf16 = kcu_layernorm_backward_bf16;
    k->matmul_forward_bf16 = kcu_matmul_forward_bf16;
    k->matmul_backward_bf16 = kcu_matmul_backward_bf16;
    k->gelu_forward_bf16 = kcu_gelu_forward_bf16;
    k->gelu_backward_bf16 = kcu_gelu_backward_bf16;
    k->residual_forward_bf16 = kcu_residual_forward_bf16;
    k->add_inplace_bf16 = kcu_add_inplace_bf16;
    k->xent_max_bf16 = kcu_xent_max_bf16;
    k->xent_sumexp_target_bf16 = kcu_xent_sumexp_target_bf16;
    k->xent_backward_bf16 = kcu_xent_backward_bf16;
    k->attention_forward_bf16 = kcu_attention_forward_bf16;
    k->attention_backward_bf16 = kcu_attention_backward_bf16;
    k->adamw_bf16 = kcu_adamw_bf16;
    k->xent_fused = kcu_xent_fused;
    k->xent_fused_bf16 = kcu_xent_fused_bf16;
    k->adamw_segments = kcu_adamw_segments;
    k->matmul_backward_gelu_bf16 = kcu_matmul_backward_gelu_bf16;
}

/* 0: not probed yet, 1: up, -1: no device. Not thread-safe: the engine calls
 * it once, from its main thread, before any op. */
static int state;

extern "C" const k_ops *k_cuda(void)
{
    if (state == 0) {
        state = kcu_init() ? 1 : -1;
        if (state == 1) fill(&OPS);
    }
    return state == 1 ? &OPS : NULL;
}
