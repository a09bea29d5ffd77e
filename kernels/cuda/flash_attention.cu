/* flash_attention: causal attention in bf16 that never writes the [T, T]
 * matrix (FlashAttention-2's schedule, written from the paper's equations):
 * each block takes a 64-row tile of queries (forward, dQ) or keys (dK/dV) of
 * one (sequence, head), walks the tiles on the other side that the causal
 * mask leaves, and keeps running row statistics in shared memory. Products
 * run on the tensor cores through WMMA (bf16 in, fp32 accumulate); softmax
 * and its gradient are fp32. The forward saves lse = max + log(sum) per row,
 * from which the backward recomputes the probabilities.
 *
 * Four warps per block, each owning 16 rows of the block's tile, so within
 * one tile a warp only reads what it wrote (__syncwarp) and block barriers
 * are needed only around the shared K/V (or Q/dO) tile loads. No atomics:
 * dK/dV and dQ come from two kernels that each own their output rows.
 * Head dims 64 and 128 (templates); T any length (tiles are zero-padded and
 * padded rows are never written). */
#include "kcuda.cuh"

#include <mma.h>

using namespace nvcuda;

#define FT 64     /* tile rows, both sides */
#define FWARPS 4  /* 16 rows each */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows [t0, t0+FT) of one head's q, k or v (part 0, 1, 2) into smem [FT][HD],
 * zeros past T. Rows of qkv are 3*NH*HD long; the head's part starts at
 * column (h*3 + part)*HD. */
template <int HD>
__device__ void load_tile(bf16 *dst, const bf16 *qkv, int b, int h, int part, int t0, int T, int NH)
{
    size_t ld = (size_t)3 * NH * HD;
    const bf16 *src = qkv + (size_t)b * T * ld + (size_t)(h * 3 + part) * HD;
    for (int i = threadIdx.x; i < FT * HD; i += blockDim.x) {
        int r = i / HD, d = i % HD, t = t0 + r;
        dst[i] = t < T ? src[(size_t)t * ld + d] : __float2bfloat16_rn(0.0f);
    }
}

/* Rows of a [B, T, NH*HD] tensor (out, dout) for head h. */
template <int HD>
__device__ void load_rows(bf16 *dst, const bf16 *x, int b, int h, int t0, int T, int NH)
{
    size_t ld = (size_t)NH * HD;
    const bf16 *src = x + (size_t)b * T * ld + (size_t)h * HD;
    for (int i = threadIdx.x; i < FT * HD; i += blockDim.x) {
        int r = i / HD, d = i % HD, t = t0 + r;
        dst[i] = t < T ? src[(size_t)t * ld + d] : __float2bfloat16_rn(0.0f);
    }
}

/* C[16 x 64] (fp32, row stride 64) = A[16 x HD] (row-major, stride HD) times
 * the transpose of B[64 x HD] (row-major, stride HD): rows of A against rows of B. */
template <int HD> __device__ void rows_dot_rows(float *C, const bf16 *A, const bf16 *B)
{
#pragma unroll
    for (int cf = 0; cf < FT / 16; cf++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD; kk += 16) {
            frag_a a;
            frag_b_col bt;
            wmma::load_matrix_sync(a, A + kk, HD);
            wmma::load_matrix_sync(bt, B + cf * 16 * HD + kk, HD);
            wmma::mma_sync(acc, a, bt, acc);
        }
        wmma::store_matrix_sync(C + cf * 16, acc, FT, wmma::mem_row_major);
    }
}

/* acc[df] += A[16 x 64] (row-major, stride 64) times B[64 x HD] (row-major, stride HD). */
template <int HD> __device__ void rows_times_tile(frag_c *acc, const bf16 *A, const bf16 *B)
{
#pragma unroll
    for (int df = 0; df < HD / 16; df++)
#pragma unroll
        for (int kk = 0; kk < FT; kk += 16) {
            frag_a a;
            frag_b_row bm;
            wmma::load_matrix_sync(a, A + kk, FT);
            wmma::load_matrix_sync(bm, B + kk * HD + df * 16, HD);
            wmma::mma_sync(acc[df], a, bm, acc[df]);
        }
}

template <int HD> static size_t fwd_smem(void)
{
    return sizeof(bf16) * (3 * FT * HD + FT * FT) + sizeof(float) * (FT * FT + FT * HD + 2 * FT);
}

/* grid (query tiles, B*NH), FWARPS*32 threads */
template <int HD>
__global__ void __launch_bounds__(FWARPS * 32) flash_fwd_k(bf16 *out, float *lse, const bf16 *qkv, int T, int NH,
                                                           float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + FT * HD, *Vs = Ks + FT * HD, *Ps = Vs + FT * HD;
    float *Ss = (float *)(Ps + FT * FT), *Os = Ss + FT * FT, *rowm = Os + FT * HD, *rowl = rowm + FT;
    int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * FT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;

    load_tile<HD>(Qs, qkv, b, h, 0, q0, T, NH);
    for (int i = threadIdx.x; i < FT * HD; i += blockDim.x) Os[i] = 0.0f;
    for (int i = threadIdx.x; i < FT; i += blockDim.x) {
        rowm[i] = -INFINITY;
        rowl[i] = 0.0f;
    }
    for (int kt = 0; kt <= qt; kt++) { /* causal: key tiles up to the diagonal one */
        int k0 = kt * FT;
        __syncthreads(); /* previous tile's K/V reads are done */
        load_tile<HD>(Ks, qkv, b, h, 1, k0, T, NH);
        load_tile<HD>(Vs, qkv, b, h, 2, k0, T, NH);
        __syncthreads();
        rows_dot_rows<HD>(Ss + r0 * FT, Qs + r0 * HD, Ks);
        __syncwarp();
        for (int r = r0; r < r0 + 16; r++) {
            int t = q0 + r, j0 = k0 + lane, j1 = j0 + 32;
            float s0 = j0 <= t ? Ss[r * FT + lane] * scale : -INFINITY;
            float s1 = j1 <= t ? Ss[r * FT + lane + 32] * scale : -INFINITY;
            float mold = rowm[r], lold = rowl[r];
            float mnew = fmaxf(mold, warp_max(fmaxf(s0, s1))); /* finite: key k0 <= t always */
            bf16 p0 = __float2bfloat16_rn(expf(s0 - mnew)), p1 = __float2bfloat16_rn(expf(s1 - mnew));
            Ps[r * FT + lane] = p0;
            Ps[r * FT + lane + 32] = p1;
            /* the sum of the rounded values, so that O / l normalises what P V adds */
            float psum = warp_sum(__bfloat162float(p0) + __bfloat162float(p1));
            float alpha = expf(mold - mnew); /* 0 on the first tile (mold = -inf) */
            for (int d = lane; d < HD; d += 32) Os[r * HD + d] *= alpha;
            __syncwarp(); /* every lane has read rowm/rowl[r] */
            if (lane == 0) {
                rowm[r] = mnew;
                rowl[r] = lold * alpha + psum;
            }
        }
        __syncwarp();
        frag_c acc[HD / 16];
#pragma unroll
        for (int df = 0; df < HD / 16; df++) wmma::load_matrix_sync(acc[df], Os + r0 * HD + df * 16, HD, wmma::mem_row_major);
        rows_times_tile<HD>(acc, Ps + r0 * FT, Vs);
#pragma unroll
        for (int df = 0; df < HD / 16; df++) wmma::store_matrix_sync(Os + r0 * HD + df * 16, acc[df], HD, wmma::mem_row_major);
    }
    __syncthreads();
    size_t ldo = (size_t)NH * HD;
    for (int i = threadIdx.x; i < FT * HD; i += blockDim.x) {
        int r = i / HD, d = i % HD, t = q0 + r;
        if (t < T) out[((size_t)b * T + t) * ldo + (size_t)h * HD + d] = __float2bfloat16_rn(Os[i] / rowl[r]);
    }
    for (int r = threadIdx.x; r < FT; r += blockDim.x)
        if (q0 + r < T) lse[(size_t)blockIdx.y * T + q0 + r] = rowm[r] + logf(rowl[r]);
}

/* D[bh, t] = sum_d dout[t, h, d] * out[t, h, d]: the softmax gradient's row term. */
__global__ void flash_rowdot_k(float *D, const bf16 *dout, const bf16 *out, int B, int T, int NH, int HD)
{
    size_t n = (size_t)B * NH * T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i % T), bh = (int)(i / T), b = bh / NH, h = bh % NH;
        size_t off = ((size_t)b * T + t) * NH * HD + (size_t)h * HD;
        float s = 0.0f;
        for (int d = 0; d < HD; d++) s += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
        D[i] = s;
    }
}

template <int HD> static size_t bwd_smem(void)
{
    return sizeof(bf16) * (4 * FT * HD + 2 * FT * FT) + sizeof(float) * (2 * FT * FT + 2 * FT);
}

/* Writes rows [t0, t0+FT) < T of acc (the warp's 16 rows, times `mul`) into part
 * `part` of dqkv, staging through the warp's rows of `stage` (fp32 [FT][HD]). */
template <int HD>
__device__ void store_grad(bf16 *dqkv, frag_c *acc, float *stage, float mul, int b, int h, int part, int t0, int T,
                           int NH)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
#pragma unroll
    for (int df = 0; df < HD / 16; df++) wmma::store_matrix_sync(stage + r0 * HD + df * 16, acc[df], HD, wmma::mem_row_major);
    __syncwarp();
    size_t ld = (size_t)3 * NH * HD;
    bf16 *dst = dqkv + (size_t)b * T * ld + (size_t)(h * 3 + part) * HD;
    for (int i = lane; i < 16 * HD; i += 32) {
        int r = r0 + i / HD, d = i % HD, t = t0 + r;
        if (t < T) dst[(size_t)t * ld + d] = __float2bfloat16_rn(stage[r * HD + d] * mul);
    }
    __syncwarp();
}

/* dK, dV for one key tile: grid (key tiles, B*NH). The warp's rows are keys j;
 * the tile products are transposed (S^T[j][t]) so each warp owns its rows. */
template <int HD>
__global__ void __launch_bounds__(FWARPS * 32) flash_bwd_kv_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                              const float *lse, const float *D, int T, int NH,
                                                              float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + FT * HD, *Qs = Vs + FT * HD, *dOs = Qs + FT * HD;
    bf16 *Ps = dOs + FT * HD, *dSs = Ps + FT * FT;
    float *Ss = (float *)(dSs + FT * FT), *dPs = Ss + FT * FT, *lse_s = dPs + FT * FT, *D_s = lse_s + FT;
    int kt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, k0 = kt * FT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    int nqt = (T + FT - 1) / FT;

    load_tile<HD>(Ks, qkv, b, h, 1, k0, T, NH);
    load_tile<HD>(Vs, qkv, b, h, 2, k0, T, NH);
    frag_c dK[HD / 16], dV[HD / 16];
#pragma unroll
    for (int df = 0; df < HD / 16; df++) {
        wmma::fill_fragment(dK[df], 0.0f);
        wmma::fill_fragment(dV[df], 0.0f);
    }
    for (int qt = kt; qt < nqt; qt++) { /* query tiles that see this key tile */
        int q0 = qt * FT;
        __syncthreads();
        load_tile<HD>(Qs, qkv, b, h, 0, q0, T, NH);
        load_rows<HD>(dOs, dout, b, h, q0, T, NH);
        for (int i = threadIdx.x; i < FT; i += blockDim.x) {
            int t = q0 + i;
            lse_s[i] = t < T ? lse[(size_t)blockIdx.y * T + t] : 0.0f;
            D_s[i] = t < T ? D[(size_t)blockIdx.y * T + t] : 0.0f;
        }
        __syncthreads();
        rows_dot_rows<HD>(Ss + r0 * FT, Ks + r0 * HD, Qs);   /* S^T[j][t] */
        rows_dot_rows<HD>(dPs + r0 * FT, Vs + r0 * HD, dOs); /* dP^T[j][t] */
        __syncwarp();
        for (int i = lane; i < 16 * FT; i += 32) {
            int r = r0 + i / FT, c = i % FT, j = k0 + r, t = q0 + c;
            float p = (j <= t && t < T) ? expf(Ss[r * FT + c] * scale - lse_s[c]) : 0.0f;
            Ps[r * FT + c] = __float2bfloat16_rn(p);
            dSs[r * FT + c] = __float2bfloat16_rn(p * (dPs[r * FT + c] - D_s[c]));
        }
        __syncwarp();
        rows_times_tile<HD>(dV, Ps + r0 * FT, dOs); /* dV += P^T dO */
        rows_times_tile<HD>(dK, dSs + r0 * FT, Qs); /* dK += dS^T Q (scaled at the end) */
    }
    __syncthreads(); /* Ss/dPs become the staging area */
    store_grad<HD>(dqkv, dV, Ss, 1.0f, b, h, 2, k0, T, NH);
    store_grad<HD>(dqkv, dK, Ss, scale, b, h, 1, k0, T, NH);
}

/* dQ for one query tile: grid (query tiles, B*NH). */
template <int HD>
__global__ void __launch_bounds__(FWARPS * 32) flash_bwd_q_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                             const float *lse, const float *D, int T, int NH,
                                                             float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + FT * HD, *Ks = dOs + FT * HD, *Vs = Ks + FT * HD;
    bf16 *Ps = Vs + FT * HD, *dSs = Ps + FT * FT;
    float *Ss = (float *)(dSs + FT * FT), *dPs = Ss + FT * FT, *lse_s = dPs + FT * FT, *D_s = lse_s + FT;
    int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, q0 = qt * FT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    (void)Ps;

    load_tile<HD>(Qs, qkv, b, h, 0, q0, T, NH);
    load_rows<HD>(dOs, dout, b, h, q0, T, NH);
    for (int i = threadIdx.x; i < FT; i += blockDim.x) {
        int t = q0 + i;
        lse_s[i] = t < T ? lse[(size_t)blockIdx.y * T + t] : 0.0f;
        D_s[i] = t < T ? D[(size_t)blockIdx.y * T + t] : 0.0f;
    }
    frag_c dQ[HD / 16];
#pragma unroll
    for (int df = 0; df < HD / 16; df++) wmma::fill_fragment(dQ[df], 0.0f);
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * FT;
        __syncthreads();
        load_tile<HD>(Ks, qkv, b, h, 1, k0, T, NH);
        load_tile<HD>(Vs, qkv, b, h, 2, k0, T, NH);
        __syncthreads();
        rows_dot_rows<HD>(Ss + r0 * FT, Qs + r0 * HD, Ks);   /* S[t][j] */
        rows_dot_rows<HD>(dPs + r0 * FT, dOs + r0 * HD, Vs); /* dP[t][j] */
        __syncwarp();
        for (int i = lane; i < 16 * FT; i += 32) {
            int r = r0 + i / FT, c = i % FT, t = q0 + r, j = k0 + c;
            float p = (j <= t && t < T) ? expf(Ss[r * FT + c] * scale - lse_s[r]) : 0.0f;
            dSs[r * FT + c] = __float2bfloat16_rn(p * (dPs[r * FT + c] - D_s[r]));
        }
        __syncwarp();
        rows_times_tile<HD>(dQ, dSs + r0 * FT, Ks); /* dQ += dS K */
    }
    __syncthreads();
    store_grad<HD>(dqkv, dQ, Ss, scale, b, h, 0, q0, T, NH);
}

static void check_hd(const char *what, int HD)
{
    if (HD == 64 || HD == 128) return;
    fprintf(stderr, "kernels/cuda: %s: head dim %d is not supported (64 or 128)\n", what, HD);
    exit(EXIT_FAILURE);
}

template <int HD> static void flash_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH)
{
    size_t smem = fwd_smem<HD>();
    cudaCheck(cudaFuncSetAttribute(flash_fwd_k<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((T + FT - 1) / FT, B * NH);
    flash_fwd_k<HD><<<grid, FWARPS * 32, smem, kcu_stream()>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HD));
    kcu_launched();
}

template <int HD>
static void flash_backward(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out, const float *lse, int B,
                           int T, int NH)
{
    size_t n = (size_t)B * NH * T;
    float *D = (float *)kcu_scratch(n * sizeof(float));
    flash_rowdot_k<<<kcu_grid(n, 256), 256, 0, kcu_stream()>>>(D, dout, out, B, T, NH, HD);
    kcu_launched();
    size_t smem = bwd_smem<HD>();
    float scale = 1.0f / sqrtf((float)HD);
    dim3 grid((T + FT - 1) / FT, B * NH);
    cudaCheck(cudaFuncSetAttribute(flash_bwd_kv_k<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    flash_bwd_kv_k<HD><<<grid, FWARPS * 32, smem, kcu_stream()>>>(dqkv, dout, qkv, lse, D, T, NH, scale);
    kcu_launched();
    cudaCheck(cudaFuncSetAttribute(flash_bwd_q_k<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    flash_bwd_q_k<HD><<<grid, FWARPS * 32, smem, kcu_stream()>>>(dqkv, dout, qkv, lse, D, T, NH, scale);
    kcu_launched();
}

void kcu_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, int B, int T, int NH, int HD)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    check_hd("attention_forward_bf16", HD);
    if (HD == 64) flash_forward<64>(as_bf(out), lse, as_bf(qkv), B, T, NH);
    else flash_forward<128>(as_bf(out), lse, as_bf(qkv), B, T, NH);
}

void kcu_attention_backward_bf16(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                 const float *lse, int B, int T, int NH, int HD)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    check_hd("attention_backward_bf16", HD);
    if (HD == 64) flash_backward<64>(as_bf(dqkv), as_bf(dout), as_bf(qkv), as_bf(out), lse, B, T, NH);
    else flash_backward<128>(as_bf(dqkv), as_bf(dout), as_bf(qkv), as_bf(out), lse, B, T, NH);
}
