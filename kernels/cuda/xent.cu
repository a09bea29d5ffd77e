/* xent: softmax cross-entropy over a vocab slice as partial reductions (see
 * kernels.h): row max, then sum of exp and the target logit with the global
 * max, then the loss, then the logit gradient written over the logits in the
 * same pass that reads them (no second [N, V] buffer). One block per row.
 *
 * xent_fused (one rank holds the whole vocab): the row is read from device
 * memory once into shared memory (when it fits), max, sum-exp, loss and the
 * gradient come from there, and the gradient is written over the logits: one
 * read and one write of [N, V] where the partials take three reads and a
 * write. Where two bf16 rows fit (GPT-2's 50304: 2 x 98 KiB), a block an SM
 * goes through its rows with the next row's copy in flight while it works on
 * this one (xent_pipe_k), so the SM's reads and writes never wait on its
 * arithmetic. */
#include "kcuda.cuh"
#include "kcuda_mma.cuh" /* cp_async16 */

#define XENT_BLOCK 512

/* A row of nc chunks of 8 elements (16-byte accesses: one in bf16, two in
 * fp32; vec8_ok), the block's threads a chunk at a time:
 * its max M and sum S of exp(x - M) in one pass (each thread a running max m
 * and a sum s of exp(x - m), rescaled by exp(m_old - m_new) when its max
 * grows: the online softmax), combined as S = sum s_t exp(m_t - M). */
template <typename T> __device__ void xent_row_stats(const T *row, int nc, float *sh, float *M, float *S)
{
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < nc; i += blockDim.x) {
        float v[8];
        ld8(row + i * 8, v);
        float mx = v[0];
        for (int k = 1; k < 8; k++) mx = fmaxf(mx, v[k]);
        if (mx > m) {
            s *= __expf(m - mx); /* 0 on the first chunk: exp(-inf) */
            m = mx;
        }
        for (int k = 0; k < 8; k++) s += __expf(v[k] - m);
    }
    *M = block_max(m, sh);
    *S = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - *M), sh); /* a thread with no chunk adds 0 */
}

/* The row's logit gradient dloss (softmax - onehot(tgt)) into g (which may be
 * row: each chunk is read, then written), chunk by chunk as xent_row_stats
 * reads; inv = 1/S (0 for an ignored token); tgt outside [0, 8 nc) marks no
 * column. FAST: __expf (the fused kernels'), else expf (the partials'). */
template <bool FAST, typename T>
__device__ void xent_row_grad(T *g, const T *row, int nc, float M, float inv, int tgt, float dloss)
{
    for (int i = threadIdx.x; i < nc; i += blockDim.x) {
        float v[8];
        ld8(row + i * 8, v);
        for (int k = 0; k < 8; k++) {
            int j = i * 8 + k;
            v[k] = dloss * ((FAST ? __expf(v[k] - M) : expf(v[k] - M)) * inv - (j == tgt ? 1.0f : 0.0f));
        }
        st8(g + i * 8, v);
    }
}

/* The vocab-parallel partials, a block a row. chunks: the row is whole 16-byte
 * chunks (V % 8 == 0, aligned: vec8_ok), read 8 elements an access; bf16 read
 * an element at a time ran at ~30% of the memory's rate on an H200. */
template <typename T> __global__ void xent_max_k(float *rowmax, const T *logits, int V, int chunks)
{
    __shared__ float sh[32];
    const T *l = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    if (chunks) {
        for (int i = threadIdx.x; i < V / 8; i += blockDim.x) {
            float v[8];
            ld8(l + i * 8, v);
            for (int k = 0; k < 8; k++) m = fmaxf(m, v[k]);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(l + j));
    }
    m = block_max(m, sh);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

template <typename T>
__global__ void xent_sumexp_k(float *sumexp, float *target_logit, const T *logits, const float *rowmax,
                              const int32_t *targets, int V, int off, int chunks)
{
    __shared__ float sh[32];
    int n = blockIdx.x;
    const T *l = logits + (size_t)n * V;
    float mx = rowmax[n], s = 0.0f;
    if (chunks) {
        for (int i = threadIdx.x; i < V / 8; i += blockDim.x) {
            float v[8];
            ld8(l + i * 8, v);
            for (int k = 0; k < 8; k++) s += expf(v[k] - mx);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ldf(l + j) - mx);
    }
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
                           const int32_t *targets, float dloss, int V, int off, int chunks)
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
    if (chunks) {
        xent_row_grad<false>(d, l, V / 8, mx, inv, r, dloss);
        return;
    }
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(ldf(l + j) - mx) * inv;
        stf(d + j, dloss * (p - (j == r ? 1.0f : 0.0f)));
    }
}

/* One block per row. `cached`: the row fits in dynamic shared memory (V
 * elements), else the passes read device memory. bf16 rows of whole 16-byte
 * chunks (the vocab is padded to a multiple of 128) take max and sum-exp in
 * one pass (xent_row_stats). A cached row is
 * requested all at once with asynchronous copies (the whole row in flight
 * rather than one load per thread) and that pass reads shared memory; a row
 * too large for it (LLaMA-3's 128256) is read twice from device memory, for
 * the statistics and for the gradient, instead of three times. */
template <typename T>
__global__ void xent_fused_k(float *loss, T *logits, const int32_t *targets, float dloss, int V, int cached)
{
    extern __shared__ __align__(16) unsigned char xent_smem[];
    __shared__ float sh[32];
    int n = blockIdx.x, tgt = targets[n];
    T *g = logits + (size_t)n * V;
    const T *row = g;
    /* the target's logit, read before the block's first barrier: past the last
     * one the gradient pass may already have overwritten it in device memory */
    float xt = threadIdx.x == 0 && tgt >= 0 ? ldf(g + tgt) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    bool chunks = sizeof(T) == 2 && V % 8 == 0;
    if (chunks) {
        if (cached) {
            T *c = (T *)xent_smem;
            for (int i = threadIdx.x; i < V / 8; i += blockDim.x) cp_async16(c + i * 8, g + i * 8, true);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
            row = c;
        }
        xent_row_stats(row, V / 8, sh, &m, &s);
    } else {
        if (cached) {
            T *c = (T *)xent_smem;
            for (int j = threadIdx.x; j < V; j += blockDim.x) {
                c[j] = g[j];
                m = fmaxf(m, ldf(c + j));
            }
            row = c;
        } else {
            for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(row + j));
        }
        m = block_max(m, sh); /* its barriers also publish the cached row */
        for (int j = threadIdx.x; j < V; j += blockDim.x) s += __expf(ldf(row + j) - m);
        s = block_sum(s, sh);
    }
    if (threadIdx.x == 0) loss[n] = tgt < 0 ? 0.0f : logf(s) + m - xt;
    if (dloss == 0.0f) return;
    float inv = 1.0f / s;
    if (tgt < 0) inv = 0.0f; /* an ignored token: gradient 0 */
    if (chunks) {
        xent_row_grad<true>(g, row, V / 8, m, inv, tgt, dloss);
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            stf(g + j, dloss * (__expf(ldf(row + j) - m) * inv - (j == tgt ? 1.0f : 0.0f)));
    }
}

/* xent_fused_k's 16-byte form as a pipeline. Floor at GPT-2 (16384 rows of
 * 50304 bf16): the logits read once and the gradient written once, 3.30 GB,
 * 0.78 ms at the H200's 4236 GB/s copy rate; xent_fused_k measured 0.957 ms
 * (81%). Its block loads a row, waits, computes, then writes: two blocks an
 * SM (98 KiB each), and while both compute, the SM's memory traffic stops.
 * Here one block of up to XENT_PIPE_BLOCK threads (a chunk a thread at
 * most: a short row takes fewer) an SM takes rows blockIdx.x,
 * blockIdx.x + gridDim.x, ... and requests row k + 1 into the other half of
 * its shared memory before it works on row k: the SM always has a row's reads
 * in flight beside the current row's writes. The same online softmax and
 * gradient as xent_fused_k, over a block of twice its threads. */
#define XENT_PIPE_BLOCK 1024
template <typename T>
__global__ void __launch_bounds__(XENT_PIPE_BLOCK) xent_pipe_k(float *loss, T *logits, const int32_t *targets,
                                                               float dloss, int N, int V)
{
    extern __shared__ __align__(16) unsigned char xent_smem[];
    __shared__ float sh[32];
    T *buf = (T *)xent_smem; /* rows in turn at buf and buf + V (V % 8 == 0: both 16-byte aligned) */
    int n = blockIdx.x, nc = V / 8;
    for (int i = threadIdx.x; i < nc; i += blockDim.x) cp_async16(buf + i * 8, logits + (size_t)n * V + i * 8, true);
    cp_async_commit();
    for (int it = 0; n < N; it++, n += gridDim.x) {
        T *row = buf + (size_t)(it & 1) * V, *next = buf + (size_t)((it + 1) & 1) * V;
        int nn = n + gridDim.x, tgt = targets[n];
        if (nn < N)
            for (int i = threadIdx.x; i < nc; i += blockDim.x)
                cp_async16(next + i * 8, logits + (size_t)nn * V + i * 8, true);
        cp_async_commit(); /* empty after the last row: the wait below still means "all but the newest" */
        cp_async_wait<1>();
        __syncthreads(); /* every thread's part of `row` has landed */
        float M, S;
        xent_row_stats(row, nc, sh, &M, &S);
        if (threadIdx.x == 0) loss[n] = tgt < 0 ? 0.0f : logf(S) + M - ldf(row + tgt);
        if (dloss != 0.0f) /* an ignored token: gradient 0 */
            xent_row_grad<true>(logits + (size_t)n * V, row, nc, M, tgt < 0 ? 0.0f : 1.0f / S, tgt, dloss);
        __syncthreads(); /* all reads of `row` done: the next turn's copies go into it */
    }
}

template <typename T> static void xent_fused(float *loss, T *logits, const int32_t *targets, float dloss, int N, int V)
{
    if (N <= 0) return;
    static int max_smem = -1;
    if (max_smem < 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    size_t bytes = (size_t)V * sizeof(T);
    if constexpr (sizeof(T) == 2) {
        if (vec8_ok((size_t)V, logits) && 2 * bytes + 1024 <= (size_t)max_smem) { /* two rows fit: the pipeline */
            cudaCheck(cudaFuncSetAttribute(xent_pipe_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(2 * bytes)));
            int grid = N < kcu_sms() ? N : kcu_sms();
            int nc = V / 8, threads = nc >= XENT_PIPE_BLOCK ? XENT_PIPE_BLOCK : (nc + 31) / 32 * 32;
            xent_pipe_k<T><<<grid, threads, 2 * bytes, kcu_stream()>>>(loss, logits, targets, dloss, N, V);
            kcu_launched();
            return;
        }
    }
    int cached = bytes + 1024 <= (size_t)max_smem; /* + the block reductions' static shared memory */
    if (cached)
        cudaCheck(cudaFuncSetAttribute(xent_fused_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    xent_fused_k<T><<<N, XENT_BLOCK, cached ? bytes : 0, kcu_stream()>>>(loss, logits, targets, dloss, V, cached);
    kcu_launched();
}

void kcu_xent_fused(float *loss, float *logits, const int32_t *targets, float dloss, int N, int V)
{
    xent_fused(loss, logits, targets, dloss, N, V);
}
void kcu_xent_fused_bf16(float *loss, uint16_t *logits, const int32_t *targets, float dloss, int N, int V)
{
    xent_fused(loss, as_bf(logits), targets, dloss, N, V);
}

template <typename T> static void xent_max(float *rowmax, const T *logits, int N, int V)
{
    if (N <= 0) return;
    xent_max_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(rowmax, logits, V, vec8_ok((size_t)V, logits));
    kcu_launched();
}

template <typename T>
static void xent_sumexp(float *sumexp, float *tl, const T *logits, const float *rowmax, const int32_t *targets,
                        int N, int V, int off)
{
    if (N <= 0) return;
    xent_sumexp_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(sumexp, tl, logits, rowmax, targets, V, off,
                                                        vec8_ok((size_t)V, logits));
    kcu_launched();
}

template <typename T>
static void xent_backward(T *dlogits, const T *logits, const float *rowmax, const float *sumexp,
                          const int32_t *targets, float dloss, int N, int V, int off)
{
    if (N <= 0) return;
    xent_bwd_k<T><<<N, XENT_BLOCK, 0, kcu_stream()>>>(dlogits, logits, rowmax, sumexp, targets, dloss, V, off,
                                                     vec8_ok((size_t)V, logits, dlogits));
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
