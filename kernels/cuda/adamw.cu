/* adamw: the reductions of a gradient buffer to the host (sum of squares in
 * double, fixed order; the count of nonzeros for --log-num-zeros-in-grad)
 * and the fused AdamW update: one read of grad, m, v and the master weight,
 * one write of m, v and the master weight (plus the bf16 copy). The segmented
 * form updates a whole flat buffer of tensors in one launch; each thread finds
 * its element's weight decay by walking the segment ends (in shared memory)
 * forward, as its elements only increase. */
#include "kcuda.cuh"
#include "kcu_entries.h"

#define SUMSQ_BLOCK 256
#define SUMSQ_PARTS 1024 /* fixed, so the summation order depends only on n */

/* The two reductions of a gradient buffer to the host: what each element adds. */
struct sumsq_of {                /* the global norm: x^2, in double */
    typedef double T;
    static __device__ double of(float x) { return (double)x * x; }
};
struct nonzero_of {              /* --log-num-zeros-in-grad: 1 where x is not exactly 0 */
    typedef unsigned long long T;
    static __device__ unsigned long long of(float x) { return x != 0.0f; }
};

/* Each thread sums its elements of a grid-stride walk, then the block adds its
 * threads' sums in a fixed tree. With x 16-byte aligned the walk goes over
 * float4s, four of them (64 bytes) loaded before any is added, so the device
 * keeps enough bytes in flight for its memory's rate; the n % 4 last elements
 * go to the first threads of block 0. The order depends only on n and x's
 * alignment. */
template <typename Op> __global__ void reduce_part_k(typename Op::T *part, const float *x, size_t n)
{
    typedef typename Op::T T;
    __shared__ T sh[SUMSQ_BLOCK];
    T s = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if ((uintptr_t)x % 16 == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        size_t n4 = n / 4;
        for (; i + 3 * stride < n4; i += 4 * stride) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = x4[i + j * stride];
#pragma unroll
            for (int j = 0; j < 4; j++) s += Op::of(v[j].x) + Op::of(v[j].y) + Op::of(v[j].z) + Op::of(v[j].w);
        }
        for (; i < n4; i += stride) {
            float4 v = x4[i];
            s += Op::of(v.x) + Op::of(v.y) + Op::of(v.z) + Op::of(v.w);
        }
        if (blockIdx.x == 0 && threadIdx.x < n % 4) s += Op::of(x[n4 * 4 + threadIdx.x]);
    } else {
        for (; i < n; i += stride) s += Op::of(x[i]);
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* Megatron's clip coefficient from the gradient's sum of squares, as the
 * engine's eng_clip_scale(sqrt(sumsq), clip) takes it on the host: the same
 * double operations (IEEE square root and division on both), the same bits. */
__device__ float clip_scale_of(double sumsq, double clip)
{
    if (clip <= 0.0) return 1.0f;
    double c = clip / (sqrt(sumsq) + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

/* part[0] = the sum of part[0, parts), parts <= SUMSQ_PARTS: one block, a
 * thread a partial, the same fixed tree as the blocks' (one thread adding
 * 1024 doubles in a chain took 26.6 us of an H200 step). With clip_scale
 * (sums of squares only), the clip scale from it too. */
template <typename T>
__global__ void __launch_bounds__(SUMSQ_PARTS) reduce_finish_k(T *part, int parts, float *clip_scale, double clip)
{
    __shared__ T sh[SUMSQ_PARTS];
    sh[threadIdx.x] = (int)threadIdx.x < parts ? part[threadIdx.x] : (T)0;
    __syncthreads();
    for (int w = SUMSQ_PARTS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[0] = sh[0];
        if (clip_scale) *clip_scale = clip_scale_of((double)sh[0], clip);
    }
}

/* One read of x[n] (4 bytes an element, the floor), at most SUMSQ_PARTS
 * partials added in a fixed tree on the device: the sum at the returned
 * part[0] (in the scratch) once the queued kernels have run. */
template <typename Op> static typename Op::T *reduce_queue(const float *x, size_t n, float *clip_scale, double clip)
{
    typedef typename Op::T T;
    size_t blocks = (n / 4 + SUMSQ_BLOCK) / SUMSQ_BLOCK; /* a thread per float4 at most, one block at least */
    int parts = blocks < SUMSQ_PARTS ? (int)blocks : SUMSQ_PARTS;
    T *part = (T *)kcu_scratch(sizeof(T) * SUMSQ_PARTS);
    reduce_part_k<Op><<<parts, SUMSQ_BLOCK, 0, kcu_stream()>>>(part, x, n);
    kcu_launched();
    reduce_finish_k<T><<<1, SUMSQ_PARTS, 0, kcu_stream()>>>(part, parts, clip_scale, clip);
    kcu_launched();
    return part;
}

/* The same, its one value to the host (a sync). */
template <typename Op> static typename Op::T reduce_to_host(const float *x, size_t n)
{
    typedef typename Op::T T;
    if (n == 0) return 0;
    T *part = reduce_queue<Op>(x, n, nullptr, 0.0);
    T s = 0;
    cudaCheck(cudaMemcpyAsync(&s, part, sizeof s, cudaMemcpyDeviceToHost, kcu_stream()));
    kcu_wait();
    return s;
}

double kcu_sumsq(const float *x, size_t n) { return reduce_to_host<sumsq_of>(x, n); }
uint64_t kcu_nonzeros(const float *x, size_t n) { return (uint64_t)reduce_to_host<nonzero_of>(x, n); }

/* ---- the norm and the clip scale without a host wait before the optimizer ----
 * The host read the norm before it queued AdamW with the clip scale, so the
 * GPU stood idle from that read until the optimizer's launch: ~150 us a GPT-2
 * step on an H200 (the profile's idle after the norm's copy). Here the scale
 * stays on the device (clip_dev) for adamw_segments, and the host waits for
 * the sum alone (kcu_reads_land) while the optimizer runs. */
static struct {
    float *clip_dev;  /* the last sumsq_begin's clip scale */
    double sum;       /* its sum, once landed */
} NORM;

/* A begin without its end, or an end without its begin, stops at the mark's own check (memory.cu). */
void kcu_sumsq_begin(const float *x, size_t n, double clip)
{
    if (!NORM.clip_dev) cudaCheck(cudaMalloc((void **)&NORM.clip_dev, sizeof(float)));
    NORM.sum = 0.0;
    double *part = reduce_queue<sumsq_of>(x, n, NORM.clip_dev, clip);
    kcu_to_host_later(&NORM.sum, part, sizeof NORM.sum); /* queued before anything that reuses the scratch */
    kcu_reads_mark();
}

double kcu_sumsq_end(void)
{
    kcu_reads_land();
    return NORM.sum;
}

/* Same operation order as the CPU reference; bc1, bc2 computed on the host. */
__global__ void adamw_k(float *param, bf16 *param_bf16, const float *grad, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, float grad_scale, const float *grad_scale_dev,
                        float bc1, float bc2)
{
    if (grad_scale_dev) grad_scale = *grad_scale_dev;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = param[i];
        p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
        param[i] = p;
        if (param_bf16) param_bf16[i] = __float2bfloat16_rn(p);
    }
}

/* grad_scale K_GRAD_SCALE_FROM_NORM: the last sumsq_begin's clip scale, read on the device */
static const float *scale_on_device(float grad_scale)
{
    if (grad_scale != K_GRAD_SCALE_FROM_NORM) return nullptr;
    if (!NORM.clip_dev) {
        fprintf(stderr, "kernels/cuda: AdamW asked for the clip scale of a norm no sumsq_begin computed\n");
        exit(EXIT_FAILURE);
    }
    return NORM.clip_dev;
}

static void adamw(float *param, bf16 *pbf, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int t)
{
    if (n == 0) return;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(param, pbf, grad, m, v, n, lr, beta1, beta2, eps, wd,
                                                          grad_scale, scale_on_device(grad_scale), bc1, bc2);
    kcu_launched();
}

void kcu_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1, float beta2,
               float eps, float wd, float grad_scale, int t)
{
    adamw(param, NULL, grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t);
}

void kcu_adamw_bf16(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float eps, float wd, float grad_scale, int t)
{
    adamw(master, as_bf(param_bf16), grad, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t);
}

/* Four elements per thread step (float4; every segment end is a multiple of
 * 4), a grid of a few blocks per SM so the table load is paid a few thousand
 * times, not once per 256 elements. */
__device__ __forceinline__ void adamw_one(float &p, float &mi, float &vi, float g, float lr, float beta1, float beta2,
                                          float eps, float wd, float bc1, float bc2)
{
    mi = beta1 * mi + (1.0f - beta1) * g;
    vi = beta2 * vi + (1.0f - beta2) * g * g;
    p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
}

__global__ void adamw_seg_k(float *param, bf16 *param_bf16, const float *grad, float *m, float *v, size_t n4, int nseg,
                            const unsigned long long *seg_end, const float *seg_wd, float lr, float beta1, float beta2,
                            float eps, float grad_scale, const float *grad_scale_dev, float bc1, float bc2)
{
    extern __shared__ unsigned long long adamw_smem[];
    if (grad_scale_dev) grad_scale = *grad_scale_dev;
    unsigned long long *ends = adamw_smem;
    float *wds = (float *)(ends + nseg);
    for (int s = threadIdx.x; s < nseg; s += blockDim.x) {
        ends[s] = seg_end[s];
        wds[s] = seg_wd[s];
    }
    __syncthreads();
    int s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        while (s < nseg - 1 && ends[s] <= 4 * i) s++;
        float wd = wds[s];
        float4 g = reinterpret_cast<const float4 *>(grad)[i], p = reinterpret_cast<float4 *>(param)[i];
        float4 mi = reinterpret_cast<float4 *>(m)[i], vi = reinterpret_cast<float4 *>(v)[i];
        adamw_one(p.x, mi.x, vi.x, g.x * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        adamw_one(p.y, mi.y, vi.y, g.y * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        adamw_one(p.z, mi.z, vi.z, g.z * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        adamw_one(p.w, mi.w, vi.w, g.w * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        reinterpret_cast<float4 *>(param)[i] = p;
        reinterpret_cast<float4 *>(m)[i] = mi;
        reinterpret_cast<float4 *>(v)[i] = vi;
        if (param_bf16) {
            bf16 *o = param_bf16 + 4 * i;
            o[0] = __float2bfloat16_rn(p.x), o[1] = __float2bfloat16_rn(p.y);
            o[2] = __float2bfloat16_rn(p.z), o[3] = __float2bfloat16_rn(p.w);
        }
    }
}

void kcu_adamw_segments(float *master, uint16_t *param_bf16, const float *grad, float *m, float *v, size_t n,
                        int nseg, const size_t *seg_end, const float *seg_wd, float lr, float beta1, float beta2,
                        float eps, float grad_scale, int t)
{
    if (n == 0 || nseg <= 0) return;
    bool vec = n % 4 == 0 && (uintptr_t)master % 16 == 0 && (uintptr_t)grad % 16 == 0 && (uintptr_t)m % 16 == 0 &&
               (uintptr_t)v % 16 == 0;
    for (int s = 0; s < nseg && vec; s++) vec = seg_end[s] % 4 == 0;
    if (!vec) { /* a call per segment */
        size_t lo = 0;
        for (int s = 0; s < nseg && lo < n; s++) {
            size_t hi = seg_end[s] < n ? seg_end[s] : n;
            adamw(master + lo, param_bf16 ? as_bf(param_bf16) + lo : NULL, grad + lo, m + lo, v + lo, hi - lo, lr,
                  beta1, beta2, eps, seg_wd[s], grad_scale, t);
            lo = hi;
        }
        return;
    }
    if (nseg > K_ADAMW_MAX_SEGS) {
        fprintf(stderr, "kernels/cuda: adamw_segments: %d segments, at most %d\n", nseg, K_ADAMW_MAX_SEGS);
        exit(EXIT_FAILURE);
    }
    /* the table (segment ends, then weight decays) goes up through the backend's
     * staging: kcu_to_device copies it and does not wait for the device */
    static unsigned long long host[K_ADAMW_MAX_SEGS + K_ADAMW_MAX_SEGS / 2]; /* 12 bytes a segment */
    size_t bytes = (size_t)nseg * (sizeof(unsigned long long) + sizeof(float));
    for (int s = 0; s < nseg; s++) host[s] = seg_end[s];
    memcpy(host + nseg, seg_wd, (size_t)nseg * sizeof(float));
    unsigned long long *dev = (unsigned long long *)kcu_scratch(bytes);
    kcu_to_device(dev, host, bytes);
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    if (bytes > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(adamw_seg_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    int blocks = 8 * kcu_sms();
    size_t need = (n / 4 + 255) / 256;
    unsigned grid = need < (size_t)blocks ? (unsigned)(need ? need : 1) : (unsigned)blocks;
    adamw_seg_k<<<grid, 256, bytes, kcu_stream()>>>(master, as_bf(param_bf16), grad, m, v, n / 4, nseg, dev,
                                                                (const float *)(dev + nseg), lr, beta1, beta2, eps,
                                                                grad_scale, scale_on_device(grad_scale), bc1, bc2);
    kcu_launched();
}
