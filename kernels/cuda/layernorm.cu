/* layernorm: fused forward (one block per row, two-pass mean/variance as the
 * CPU reference) and fused backward (dinp, dw and db from one read of dout
 * and inp per row).
 *
 * Backward: a fixed grid of LN_PARTS blocks takes rows round-robin; each
 * thread keeps dw/db of the columns it owns (c = tid + k*blockDim) in shared
 * memory, so no two threads touch one sum and no atomics are needed. The
 * per-block sums go to scratch and a second kernel adds them in block order:
 * the same inputs give the same bits on every run. */
#include "kcuda.cuh"

#define LN_EPS 1e-5f
#define LN_BLOCK 256
#define LN_PARTS 256

template <typename T>
__global__ void ln_fwd_k(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int C)
{
    __shared__ float sh[32];
    int n = blockIdx.x;
    const T *x = inp + (size_t)n * C;
    T *o = out + (size_t)n * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += ldf(x + c);
    float m = block_sum(s, sh) / (float)C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = ldf(x + c) - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(block_sum(v, sh) / (float)C + LN_EPS);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        stf(o + c, (ldf(x + c) - m) * rs * ldf(w + c) + ldf(b + c));
    if (threadIdx.x == 0) {
        mean[n] = m;
        rstd[n] = rs;
    }
}

/* dynamic shared memory: dw[C], db[C] of this block. */
template <typename T>
__global__ void ln_bwd_k(T *dinp, float *part, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C)
{
    extern __shared__ float acc[];
    __shared__ float sh[32];
    float *dw = acc, *db = acc + C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dw[c] = db[c] = 0.0f;
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        const T *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        T *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float gs = 0.0f, gxs = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float gw = ldf(g + c) * ldf(w + c);
            gs += gw;
            gxs += gw * (ldf(x + c) - m) * s;
        }
        float gmean = block_sum(gs, sh) / (float)C;
        float gxmean = block_sum(gxs, sh) / (float)C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float xhat = (ldf(x + c) - m) * s, gc = ldf(g + c);
            db[c] += gc;
            dw[c] += gc * xhat;
            stf(dx + c, ldf(dx + c) + s * (gc * ldf(w + c) - gmean - xhat * gxmean));
        }
    }
    float *p = part + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        p[c] = dw[c];
        p[C + c] = db[c];
    }
}

__global__ void ln_finish_k(float *dw, float *db, const float *part, int parts, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int p = 0; p < parts; p++) {
        sw += part[(size_t)p * 2 * C + c];
        sb += part[(size_t)p * 2 * C + C + c];
    }
    dw[c] += sw;
    db[c] += sb;
}

template <typename T>
static void layernorm_forward(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    ln_fwd_k<T><<<N, LN_BLOCK, 0, kcu_stream()>>>(out, mean, rstd, inp, w, b, C);
    kcu_launched();
}

template <typename T>
static void layernorm_backward(T *dinp, float *dw, float *db, const T *dout, const T *inp, const T *w,
                               const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    int parts = N < LN_PARTS ? N : LN_PARTS;
    size_t smem = sizeof(float) * 2 * (size_t)C;
    if (smem > 48 * 1024) /* above the default limit: ask for it (up to the device's opt-in cap) */
        cudaCheck(cudaFuncSetAttribute(ln_bwd_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    float *part = (float *)kcu_scratch(sizeof(float) * 2 * (size_t)C * parts);
    ln_bwd_k<T><<<parts, LN_BLOCK, smem, kcu_stream()>>>(dinp, part, dout, inp, w, mean, rstd, N, C);
    kcu_launched();
    ln_finish_k<<<(C + 255) / 256, 256, 0, kcu_stream()>>>(dw, db, part, parts, C);
    kcu_launched();
}

void kcu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C)
{
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
void kcu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void kcu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                const uint16_t *w, const uint16_t *b, int N, int C)
{
    layernorm_forward(as_bf(out), mean, rstd, as_bf(inp), as_bf(w), as_bf(b), N, C);
}
void kcu_layernorm_backward_bf16(uint16_t *dinp, float *dw, float *db, const uint16_t *dout,
                                 const uint16_t *inp, const uint16_t *w, const float *mean,
                                 const float *rstd, int N, int C)
{
    layernorm_backward(as_bf(dinp), dw, db, as_bf(dout), as_bf(inp), as_bf(w), mean, rstd, N, C);
}
