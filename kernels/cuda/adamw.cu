/* adamw: the global-norm reduction (sum of squares in double, fixed order)
 * and the fused AdamW update: one read of grad, m, v and the master weight,
 * one write of m, v and the master weight (plus the bf16 copy). */
#include "kcuda.cuh"

#define SUMSQ_BLOCK 256
#define SUMSQ_PARTS 1024 /* fixed, so the summation order depends only on n */

__global__ void sumsq_part_k(double *part, const float *x, size_t n)
{
    __shared__ double sh[SUMSQ_BLOCK];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

__global__ void sumsq_finish_k(double *part, int parts)
{
    double s = 0.0;
    for (int p = 0; p < parts; p++) s += part[p];
    part[0] = s;
}

double kcu_sumsq(const float *x, size_t n)
{
    if (n == 0) return 0.0;
    size_t blocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    int parts = blocks < SUMSQ_PARTS ? (int)blocks : SUMSQ_PARTS;
    double *part = (double *)kcu_scratch(sizeof(double) * SUMSQ_PARTS);
    sumsq_part_k<<<parts, SUMSQ_BLOCK, 0, kcu_stream()>>>(part, x, n);
    kcu_launched();
    sumsq_finish_k<<<1, 1, 0, kcu_stream()>>>(part, parts);
    kcu_launched();
    double s = 0.0;
    cudaCheck(cudaMemcpyAsync(&s, part, sizeof s, cudaMemcpyDeviceToHost, kcu_stream()));
    cudaCheck(cudaStreamSynchronize(kcu_stream()));
    return s;
}

/* Same operation order as the CPU reference; bc1, bc2 computed on the host. */
__global__ void adamw_k(float *param, bf16 *param_bf16, const float *grad, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, float grad_scale, float bc1, float bc2)
{
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

static void adamw(float *param, bf16 *pbf, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int t)
{
    if (n == 0) return;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(param, pbf, grad, m, v, n, lr, beta1, beta2, eps, wd,
                                                          grad_scale, bc1, bc2);
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
