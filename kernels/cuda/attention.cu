/* attention: causal self-attention as cuBLAS strided-batched GEMMs (one
 * batch of NH heads per sequence) around fused causal-softmax kernels.
 *
 * This is the first step the issue allows: it materialises the [T, T]
 * probabilities (the table's att output needs them), computes the masked upper
 * triangle in the GEMMs and throws it away (2x the useful FLOPs), and is fp32.
 * A flash-style kernel (tiles of q against k/v in shared memory, online
 * softmax, never writing [T, T]) is the goal; it needs a table entry without
 * att, so it comes with the engine's bf16 attention path.
 *
 * Column-major views (see matmul.cu): for one (b, h), q_cm/k_cm/v_cm are
 * HD x T with leading dimension 3*NH*HD; the row-major [T, T] matrix P is the
 * column-major P^T with leading dimension T. Head h's q, k, v start at column
 * h*3*HD (+HD, +2*HD) of a qkv row, so consecutive heads are 3*HD apart. */
#include "kcuda.cuh"

#define SM_BLOCK 128

/* Row t of S (scaled scores) -> probabilities over j <= t, zeros above. */
__global__ void causal_softmax_k(float *att, int T)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    float *r = att + row * T;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, r[j]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) {
        float e = expf(r[j] - mx);
        r[j] = e;
        s += e;
    }
    float inv = 1.0f / block_sum(s, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) r[j] = j <= t ? r[j] * inv : 0.0f;
}

/* In place on dS holding dP: dS = P * (dP - rowsum(P * dP)), zero above the diagonal. */
__global__ void causal_softmax_bwd_k(float *dS, const float *att, int T)
{
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    const float *p = att + row * T;
    float *d = dS + row * T;
    float dot = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) dot += p[j] * d[j];
    dot = block_sum(dot, sh);
    for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

/* C = alpha op(A) op(B) over NH heads of sequence b; strides in elements. */
static void sgemm_heads(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
                        long long sa, const float *B, int ldb, long long sb, float *C, int ldc, long long sc,
                        int NH)
{
    const float beta = 0.0f;
    cublasCheck(cublasSgemmStridedBatched(kcu_cublas(), ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc, NH));
}

void kcu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int HD)
{
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
    int ld = 3 * NH * HD, ldo = NH * HD;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + HD;
        float *P = att + (size_t)b * NH * TT;
        /* P^T = k_cm^T q_cm, scaled */
        sgemm_heads(true, false, T, T, HD, scale, k, ld, 3 * HD, q, ld, 3 * HD, P, T, TT, NH);
    }
    causal_softmax_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(att, T);
    kcu_launched();
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * HD;
        const float *P = att + (size_t)b * NH * TT;
        /* out_cm = v_cm P_cm */
        sgemm_heads(false, false, HD, T, T, 1.0f, v, ld, 3 * HD, P, T, TT, out + (size_t)b * T * ldo, ldo, HD, NH);
    }
}

void kcu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int HD)
{
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
    int ld = 3 * NH * HD, ldo = NH * HD;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * HD;
        const float *dO = dout + (size_t)b * T * ldo;
        const float *P = att + (size_t)b * NH * TT;
        float *dS = scratch + (size_t)b * NH * TT;
        float *dv = dqkv + (size_t)b * T * ld + 2 * HD;
        /* dP^T = v_cm^T dO_cm  (into scratch, row-major [t][j]) */
        sgemm_heads(true, false, T, T, HD, 1.0f, v, ld, 3 * HD, dO, ldo, HD, dS, T, TT, NH);
        /* dv_cm = dO_cm P_cm^T */
        sgemm_heads(false, true, HD, T, T, 1.0f, dO, ldo, HD, P, T, TT, dv, ld, 3 * HD, NH);
    }
    causal_softmax_bwd_k<<<(unsigned)((size_t)B * NH * T), SM_BLOCK, 0, kcu_stream()>>>(scratch, att, T);
    kcu_launched();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + HD;
        const float *dS = scratch + (size_t)b * NH * TT;
        float *dq = dqkv + (size_t)b * T * ld, *dk = dq + HD;
        /* dq_cm = scale k_cm dS_cm;  dk_cm = scale q_cm dS_cm^T */
        sgemm_heads(false, false, HD, T, T, scale, k, ld, 3 * HD, dS, T, TT, dq, ld, 3 * HD, NH);
        sgemm_heads(false, true, HD, T, T, scale, q, ld, 3 * HD, dS, T, TT, dk, ld, 3 * HD, NH);
    }
}
