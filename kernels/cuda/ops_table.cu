/* ops_table: gathers the op families behind k_cuda(). The first call probes
 * the device; without one it returns NULL and k_cuda_status() says why. */
#include "kcuda.cuh"

#include "kcu_entries.h"

#ifdef ATOLL_HAVE_CUDNN
#include "cudnn_sdpa.h"
#endif

static k_ops OPS;

/* --attention-backend fused (and auto where cuDNN loads): the bf16 attention
 * entries try cuDNN's fused attention (cudnn_sdpa.h) and run the own flash
 * kernels for what it does not take (grouped-query attention, dropout,
 * documents), saying so once. */
static bool fused_attention;
static long calls_fused, calls_flash; /* bf16 attention entries run, by kernels */

#ifdef ATOLL_HAVE_CUDNN
static void fused_declined(const char *why)
{
    static bool said;
    if (said) return;
    said = true;
    fprintf(stderr, "kernels/cuda: attention runs on atoll's flash kernels here (cuDNN's fused attention declined: %s)\n",
            why);
}
#define DOC_DECLINED "per-document masks (--reset-attention-mask) are not passed to it"
#endif

static void attention_forward_sel(uint16_t *out, float *lse, const uint16_t *qkv, const int32_t *doc, int B, int T,
                                  int NH, int NG, int HD, const k_dropout *drop)
{
#ifdef ATOLL_HAVE_CUDNN
    if (fused_attention) {
        if (!doc && !kcudnn_attention_forward_bf16(kcu_stream(), out, lse, qkv, B, T, NH, NG, HD, drop)) {
            calls_fused++;
            return;
        }
        if (!doc && kcu_capture_broken("cuDNN's fused attention declined a call being recorded")) return;
        fused_declined(doc ? DOC_DECLINED : kcudnn_why());
    }
#endif
    calls_flash++;
    kcu_attention_forward_bf16(out, lse, qkv, doc, B, T, NH, NG, HD, drop);
}

static void attention_backward_sel(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                   const float *lse, const int32_t *doc, int B, int T, int NH, int NG, int HD,
                                   const k_dropout *drop)
{
#ifdef ATOLL_HAVE_CUDNN
    if (fused_attention) {
        if (!doc && !kcudnn_attention_backward_bf16(kcu_stream(), dqkv, dout, qkv, out, lse, B, T, NH, NG, HD, drop)) {
            calls_fused++;
            return;
        }
        if (!doc && kcu_capture_broken("cuDNN's fused attention declined a call being recorded")) return;
        fused_declined(doc ? DOC_DECLINED : kcudnn_why());
    }
#endif
    calls_flash++;
    kcu_attention_backward_bf16(dqkv, dout, qkv, out, lse, doc, B, T, NH, NG, HD, drop);
}

void kcu_attention_calls_add(long fused, long flash)
{
    calls_fused += fused;
    calls_flash += flash;
}

extern "C" void k_cuda_attention_calls(long *fused, long *flash)
{
    *fused = calls_fused;
    *flash = calls_flash;
}

extern "C" size_t k_cuda_attention_workspace_need(int B, int T, int NH, int NG, int HD, float attention_dropout,
                                                   int atomic_dq)
{
#ifdef ATOLL_HAVE_CUDNN
    k_dropout d = {};
    d.p = attention_dropout;
    size_t bytes = 0;
    return kcudnn_attention_workspace(B, T, NH, NG, HD, &d, atomic_dq, &bytes) ? 0 : bytes;
#else
    (void)B, (void)T, (void)NH, (void)NG, (void)HD, (void)attention_dropout, (void)atomic_dq;
    return 0;
#endif
}

extern "C" void k_cuda_attention_atomic_dq(int on)
{
#ifdef ATOLL_HAVE_CUDNN
    kcudnn_attention_atomic_dq(on);
#else
    (void)on;
#endif
}

extern "C" long k_cuda_attention_atomic_plans(void)
{
#ifdef ATOLL_HAVE_CUDNN
    return kcudnn_attention_atomic_plans();
#else
    return 0;
#endif
}

extern "C" size_t k_cuda_attention_workspace_held(void)
{
#ifdef ATOLL_HAVE_CUDNN
    return kcudnn_workspace_bytes();
#else
    return 0;
#endif
}

extern "C" int k_cuda_fused_attention(int mode, char *err, size_t errlen)
{
    if (mode == K_CUDA_ATTN_FLASH) {
        fused_attention = false;
        return 0;
    }
#ifdef ATOLL_HAVE_CUDNN
    if (mode == K_CUDA_ATTN_AUTO) {
        fused_attention = kcudnn_version() != 0;
        return 0;
    }
    if (!kcudnn_version()) {
        snprintf(err, errlen, "--attention-backend fused: %s", kcudnn_why());
        return -1;
    }
    fused_attention = true;
    return 0;
#else
    fused_attention = false;
    if (mode == K_CUDA_ATTN_AUTO) return 0;
    snprintf(err, errlen, "--attention-backend fused: this build has no cuDNN (cudnn.h was not found)");
    return -1;
#endif
}

static void fill(k_ops *k)
{
    k->name = "cuda";
    k->alloc = kcu_alloc;
    k->free = kcu_free;
    k->to_device = kcu_to_device;
    k->to_host = kcu_to_host;
    k->to_host_later = kcu_to_host_later;
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
    k->attention_decode = kcu_attention_decode;
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
    k->nonzeros = kcu_nonzeros;
    k->sumsq_begin = kcu_sumsq_begin;
    k->sumsq_end = kcu_sumsq_end;
    k->wgrad_join = kcu_wgrad_join;
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
    k->attention_forward_bf16 = attention_forward_sel;
    k->attention_backward_bf16 = attention_backward_sel;
    k->attention_decode_bf16 = kcu_attention_decode_bf16;
    k->adamw_bf16 = kcu_adamw_bf16;
    k->xent_fused = kcu_xent_fused;
    k->xent_fused_bf16 = kcu_xent_fused_bf16;
    k->adamw_segments = kcu_adamw_segments;
    k->matmul_backward_gelu_bf16 = kcu_matmul_backward_gelu_bf16;
    k->residual_layernorm_forward_bf16 = kcu_residual_layernorm_forward_bf16;
    k->rmsnorm_forward = kcu_rmsnorm_forward;
    k->rmsnorm_backward = kcu_rmsnorm_backward;
    k->rmsnorm_forward_bf16 = kcu_rmsnorm_forward_bf16;
    k->rmsnorm_backward_bf16 = kcu_rmsnorm_backward_bf16;
    k->swiglu_forward = kcu_swiglu_forward;
    k->swiglu_backward = kcu_swiglu_backward;
    k->swiglu_forward_bf16 = kcu_swiglu_forward_bf16;
    k->swiglu_backward_bf16 = kcu_swiglu_backward_bf16;
    k->rope_forward = kcu_rope_forward;
    k->rope_backward = kcu_rope_backward;
    k->rope_forward_bf16 = kcu_rope_forward_bf16;
    k->rope_backward_bf16 = kcu_rope_backward_bf16;
    k->qkv_pack = kcu_qkv_pack;
    k->qkv_unpack = kcu_qkv_unpack;
    k->qkv_pack_bf16 = kcu_qkv_pack_bf16;
    k->qkv_unpack_bf16 = kcu_qkv_unpack_bf16;
    k->dropout = kcu_dropout;
    k->dropout_bf16 = kcu_dropout_bf16;
    k->residual_rmsnorm_forward_bf16 = kcu_residual_rmsnorm_forward_bf16;
    k->relu2_forward = kcu_relu2_forward;
    k->relu2_backward = kcu_relu2_backward;
    k->relu2_forward_bf16 = kcu_relu2_forward_bf16;
    k->relu2_backward_bf16 = kcu_relu2_backward_bf16;
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
