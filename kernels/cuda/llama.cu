/* llama: the LLaMA family's elementwise ops and hidden dropout (kernels.h):
 * SwiGLU forward and backward, the rotary embedding in place on a qkv buffer,
 * q/k/v packed into attention's layout and back, dropout by counter-based
 * masks (k_dropout.h, the same bits as the CPU reference). Memory-bound, one
 * read and one write per element; RMSNorm is in layernorm.cu. */
#include "kcuda.cuh"
#include "k_dropout.h"
#include "k_qkv.h"
#include "k_rope.h"

#define LL_BLOCK 256

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void swiglu_fwd_k(T *out, const T *gate, const T *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(gate + i);
        stf(out + i, x / (1.0f + expf(-x)) * ldf(up + i));
    }
}

/* dgate = dout up silu'(gate), dup = dout silu(gate); may alias gate / up */
template <typename T> __global__ void swiglu_bwd_k(T *dgate, T *dup, const T *dout, const T *gate, const T *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(gate + i), u = ldf(up + i), d = ldf(dout + i), s = 1.0f / (1.0f + expf(-x));
        stf(dgate + i, d * u * s * (1.0f + x * (1.0f - s)));
        stf(dup + i, d * x * s);
    }
}

/* One thread per (token row, pair i of the RD rotated dims): the angle in
 * double (as the CPU reference computes it, so both round the same value),
 * then every query of the row's groups and every key turned by it; sign -1
 * turns back. Dims RD.. of each head are not touched. */
template <typename T>
__global__ void rope_k(T *qkv, int B, int T_, int NH, int NG, int HD, int RD, k_rope_freq f, float sign)
{
    int Q = NH / NG, half = RD / 2;
    size_t n = (size_t)B * T_ * half, ld = k_qkv_row(NH, NG, HD);
    GRID_STRIDE(idx, n)
    {
        int i = (int)(idx % half);
        size_t row = idx / half;
        int t = (int)(row % T_);
        double a = k_rope_angle(t, i, RD, f);
        float c = (float)cos(a), s = sign * (float)sin(a);
        T *r = qkv + row * ld;
        for (int g = 0; g < NG; g++)
            for (int j = 0; j <= Q; j++) { /* Q queries, then the key */
                T *x = r + k_qkv_slot(g, j, NH, NG, HD);
                float x1 = ldf(x + i), x2 = ldf(x + i + half);
                stf(x + i, x1 * c - x2 * s);
                stf(x + i + half, x2 * c + x1 * s);
            }
    }
}

/* qkv[N, NG, Q+2, HD] <-> q[N, NH*HD], k, v[N, NG*HD], an element per thread
 * of qkv; `pack` picks the direction. */
template <typename T>
__global__ void qkv_move_k(T *qkv, T *q, T *k, T *v, int N, int NH, int NG, int HD, bool pack)
{
    int Q = NH / NG;
    size_t W = k_qkv_row(NH, NG, HD), n = (size_t)N * W;
    GRID_STRIDE(idx, n)
    {
        size_t row = idx / W;
        int col = (int)(idx % W), g = col / ((Q + 2) * HD), slot = col / HD % (Q + 2), d = col % HD;
        T *other = slot < Q ? q + (row * NH + (size_t)g * Q + slot) * HD + d
                 : (slot == Q ? k : v) + (row * NG + g) * HD + d;
        if (pack) qkv[idx] = *other;
        else *other = qkv[idx];
    }
}

template <typename T> __global__ void dropout_k(T *x, int N, int C, k_dropout d)
{
    uint32_t th = k_dropout_threshold(d.p);
    float sc = k_dropout_scale(d.p);
    GRID_STRIDE(i, (size_t)N * C)
    {
        uint64_t id = (uint64_t)(d.row0 + (int64_t)(i / C)) * (uint64_t)C + i % C;
        stf(x + i, ldf(x + i) * k_dropout_mul(d.key, id, th, sc));
    }
}

void kcu_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
    swiglu_fwd_k<float><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(out, gate, up, n);
    kcu_launched();
}
void kcu_swiglu_forward_bf16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n)
{
    swiglu_fwd_k<bf16><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(as_bf(out), as_bf(gate), as_bf(up), n);
    kcu_launched();
}
void kcu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n)
{
    swiglu_bwd_k<float><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(dgate, dup, dout, gate, up, n);
    kcu_launched();
}
void kcu_swiglu_backward_bf16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                              const uint16_t *up, size_t n)
{
    swiglu_bwd_k<bf16><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(as_bf(dgate), as_bf(dup), as_bf(dout),
                                                                            as_bf(gate), as_bf(up), n);
    kcu_launched();
}

template <typename T>
static void rope(T *qkv, int B, int T_, int NH, int NG, int HD, int RD, k_rope_freq f, float sign)
{
    size_t n = (size_t)B * T_ * (RD / 2);
    if (!n || NG <= 0 || NH % NG || RD > HD) return;
    rope_k<T><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(qkv, B, T_, NH, NG, HD, RD, f, sign);
    kcu_launched();
}
void kcu_rope_forward(float *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(qkv, B, T, NH, NG, HD, RD, f, 1.0f);
}
void kcu_rope_backward(float *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(dqkv, B, T, NH, NG, HD, RD, f, -1.0f);
}
void kcu_rope_forward_bf16(uint16_t *qkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(as_bf(qkv), B, T, NH, NG, HD, RD, f, 1.0f);
}
void kcu_rope_backward_bf16(uint16_t *dqkv, int B, int T, int NH, int NG, int HD, int RD, k_rope_freq f)
{
    rope(as_bf(dqkv), B, T, NH, NG, HD, RD, f, -1.0f);
}

template <typename T> static void qkv_move(T *qkv, T *q, T *k, T *v, int N, int NH, int NG, int HD, bool pack)
{
    size_t n = (size_t)N * k_qkv_row(NH, NG, HD);
    if (!n || NG <= 0 || NH % NG) return;
    qkv_move_k<T><<<kcu_grid(n, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(qkv, q, k, v, N, NH, NG, HD, pack);
    kcu_launched();
}
/* the moves never write through the const inputs: pack writes qkv, unpack q, k, v */
void kcu_qkv_pack(float *qkv, const float *q, const float *k, const float *v, int N, int NH, int NG, int HD)
{
    qkv_move(qkv, const_cast<float *>(q), const_cast<float *>(k), const_cast<float *>(v), N, NH, NG, HD, true);
}
void kcu_qkv_unpack(float *q, float *k, float *v, const float *qkv, int N, int NH, int NG, int HD)
{
    qkv_move(const_cast<float *>(qkv), q, k, v, N, NH, NG, HD, false);
}
void kcu_qkv_pack_bf16(uint16_t *qkv, const uint16_t *q, const uint16_t *k, const uint16_t *v, int N, int NH, int NG,
                       int HD)
{
    qkv_move(as_bf(qkv), const_cast<bf16 *>(as_bf(q)), const_cast<bf16 *>(as_bf(k)), const_cast<bf16 *>(as_bf(v)), N,
             NH, NG, HD, true);
}
void kcu_qkv_unpack_bf16(uint16_t *q, uint16_t *k, uint16_t *v, const uint16_t *qkv, int N, int NH, int NG, int HD)
{
    qkv_move(const_cast<bf16 *>(as_bf(qkv)), as_bf(q), as_bf(k), as_bf(v), N, NH, NG, HD, false);
}

void kcu_dropout(float *x, int N, int C, const k_dropout *d)
{
    if (!d || d->p <= 0.0f || N <= 0 || C <= 0) return;
    dropout_k<float><<<kcu_grid((size_t)N * C, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(x, N, C, *d);
    kcu_launched();
}
void kcu_dropout_bf16(uint16_t *x, int N, int C, const k_dropout *d)
{
    if (!d || d->p <= 0.0f || N <= 0 || C <= 0) return;
    dropout_k<bf16><<<kcu_grid((size_t)N * C, LL_BLOCK), LL_BLOCK, 0, kcu_stream()>>>(as_bf(x), N, C, *d);
    kcu_launched();
}
