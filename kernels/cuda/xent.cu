/* xent: softmax cross-entropy over a vocab slice as partial reductions (see
 * kernels.h): row max, then sum of exp and the target logit with the global
 * max, then the loss, then the logit gradient written over the logits in the
 * same pass that reads them (no second [N, V] buffer). One block per row. */
#include "kcuda.cuh"

#define XENT_BLOCK 512

template <typename T> __global__ void xent_max_k(float *rowmax, const T *logits, int V)
{
    __shared__ float sh[32];
    const T *l = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(l + j));
    m = block_max(m, sh);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

template <typename T>
__global__ void xent_sumexp_k(float *sumexp, float *target_logit, const T *logits, const float *rowmax,
                              const int32_t *targets, int V, int off)
{
    __shared__ float sh[32];
    int n = blockIdx.x;
    const T *l = logits + (size_t)n * V;
    float mx = rowmax[n], s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ldf(l + j) - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        int r = targets[n] - off;
        sumexp[n] = s;
        target_logit[n] = (targets[n] >= 0 && r >= 0 && r < V) ? ldf(l + r) : 0.0f;
    }
}

__global__ void xent_loss_k(float *loss, const float *rowmax, const float *sumexp, const float *target_logit,
                            const int32_t *targets, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) loss[n] = targets[n] < 0 ? 0.0f : logf(sumexp[n]) + rowmax[n] - target_logit[n];
}

/* dlogits may alias logits: each element is read once, then written. */
template <typename T>
__global__ void xent_bwd_k(T *dlogits, const T *logits, const float *rowmax, const float *sumexp,
                           const int32_t *targets, float dloss, int V, int off)
{
    int n = blockIdx.x;
    const T *l = logits + (size_t)n * V;
    T *d = dlogits + (size_t)n * V;
    if (targets[n] < 0) {
        for (int j = threadIdx.x; j < V; j += blockDim.x) stf(d + j, 0.0f);
        return;
    }
    float mx = rowmax[n], inv = 1.0f / sumexp[n];
    int r = targets[n] - off;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(ldf(l + j) - mx) * inv;
        stf(d + j, dloss * (p - (j == r ? 1.0f : 0.0f)));
    }
}

template <typename T> static void xent_max(float *rowmax, const T *logits, int N, int V)
{
    if (N <= 0) return;
    xent_max_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(rowmax, logits, V);
    kcu_launched();
}

template <typename T>
static void xent_sumexp(float *sumexp, float *tl, const T *logits, const float *rowmax, const int32_t *targets,
                        int N, int V, int off)
{
    if (N <= 0) return;
    xent_sumexp_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(sumexp, tl, logits, rowmax, targets, V, off);
    kcu_launched();
}

template <typename T>
static void xent_backward(T *dlogits, const T *logits, const float *rowmax, const float *sumexp,
                          const int32_t *targets, float dloss, int N, int V, int off)
{
    if (N <= 0) return;
    xent_bwd_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(dlogits, logits, rowmax, sumexp, targets, dloss, V, off);
    kcu_launched();
}

void kcu_xent_max(float *rowmax, const float *logits, int N, int V) { xent_max(rowmax, logits, N, V); }
void kcu_xent_sumexp_target(float *sumexp, float *tl, const float *logits, const float *rowmax,
                            const int32_t *targets, int N, int V, int off)
{
    xent_sumexp(sumexp, tl, logits, rowmax, targets, N, V, off);
}
void kcu_xent_loss(float *loss, const float *rowmax, const float *sumexp, const float *tl, const int32_t *targets,
                   int N)
{
    if (N <= 0) return;
    xent_loss_k<<<(N + 255) / 256, 256, 0, kcu_stream()>>>(loss, rowmax, sumexp, tl, targets, N);
    kcu_launched();
}
void kcu_xent_backward(float *dlogits, const float *logits, const float *rowmax, const float *sumexp,
                       const int32_t *targets, float dloss, int N, int V, int off)
{
    xent_backward(dlogits, logits, rowmax, sumexp, targets, dloss, N, V, off);
}

void kcu_xent_max_bf16(float *rowmax, const uint16_t *logits, int N, int V) { xent_max(rowmax, as_bf(logits), N, V); }
void kcu_xent_sumexp_target_bf16(float *sumexp, float *tl, const uint16_t *logits, const float *rowmax,
                                 const int32_t *targets, int N, int V, int off)
{
    xent_sumexp(sumexp, tl, as_bf(logits), rowmax, targets, N, V, off);
}
void kcu_xent_backward_bf16(uint16_t *dlogits, const uint16_t *logits, const float *rowmax, const float *sumexp,
                            const int32_t *targets, float dloss, int N, int V, int off)
{
    xent_backward(as_bf(dlogits), as_bf(logits), rowmax, sumexp, targets, dloss, N, V, off);
}
