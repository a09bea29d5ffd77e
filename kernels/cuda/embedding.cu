/* embedding: token and position embeddings, forward and backward.
 *
 * The token backward is deterministic without float atomics: each block owns
 * a range of EMB_ROWS vocab rows, finds the positions whose token falls in it
 * (a block-wide scan of the int32 token list, compacted in position order by
 * ballots), and adds their dout rows into its dwte rows in position order, the
 * order of the CPU reference. V/EMB_ROWS blocks each read the token list from
 * L2 once; every dout row is read once. */
#include "kcuda.cuh"

#define EMB_BLOCK 256
#define EMB_VEC_MAX ((size_t)1 << 30) /* 8-wide kernels index with int: i + the grid's stride stays below 2^31 */

template <typename T>
__global__ void embed_fwd_k(T *out, const int32_t *tokens, const T *wte, int N, int C, int off, int V)
{
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / C), c = (int)(i % C);
        int r = tokens[n] - off;
        out[i] = (r >= 0 && r < V) ? wte[(size_t)r * C + c] : T(0.0f);
    }
}

/* The same, 8 elements a thread through 16-byte accesses (C % 8 == 0): one
 * token read per 8 outputs and 32-bit index math, so the copy runs at the
 * memory's rate rather than the divider's. */
template <typename T>
__global__ void embed_fwd8_k(T *out, const int32_t *tokens, const T *wte, int N, int C, int off, int V)
{
    int C8 = C / 8, total = N * C8;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int n = i / C8, c = (i - n * C8) * 8, r = tokens[n] - off;
        float v[8] = { 0 };
        if (r >= 0 && r < V) ld8(wte + (size_t)r * C + c, v);
        st8(out + (size_t)n * C + c, v);
    }
}

#define EMB_ROWS 128 /* vocab rows owned by one block of the backward */

/* Block b owns dwte rows [b*EMB_ROWS, +EMB_ROWS) of the local slice. The token
 * list is walked a block-width chunk at a time: each thread tests one
 * position, matches are compacted in position order into `list` (ballot +
 * per-warp counts), then the block adds each listed dout row to its row. */
template <typename T>
__global__ void embed_bwd_k(float *dwte, const T *dout, const int32_t *tokens, int N, int C, int off, int V)
{
    __shared__ int list[EMB_BLOCK];
    __shared__ int wcount[EMB_BLOCK / 32];
    int r0 = blockIdx.x * EMB_ROWS, r1 = min(V, r0 + EMB_ROWS);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int m0 = 0; m0 < N; m0 += blockDim.x) {
        int m = m0 + threadIdx.x, r = m < N ? tokens[m] - off : -1;
        bool match = r >= r0 && r < r1;
        unsigned bal = __ballot_sync(0xffffffffu, match);
        if (lane == 0) wcount[warp] = __popc(bal);
        __syncthreads();
        int base = 0, total = 0;
        for (int w = 0; w < nwarps; w++) {
            base += w < warp ? wcount[w] : 0;
            total += wcount[w];
        }
        if (match) list[base + __popc(bal & ((1u << lane) - 1u))] = m;
        __syncthreads();
        for (int i = 0; i < total; i++) {
            int p = list[i];
            float *dst = dwte + (size_t)(tokens[p] - off) * C;
            const T *src = dout + (size_t)p * C;
            for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] += ldf(src + c);
        }
        __syncthreads(); /* list and wcount are rewritten by the next chunk */
    }
}

/* out[n] += wpe[pos[n]] (wpe[t] without pos), n = b*T + t */
template <typename T> __global__ void pos_fwd_k(T *out, const T *wpe, const int32_t *pos, int B, int T_, int C)
{
    size_t total = (size_t)B * T_ * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, t = pos ? (size_t)pos[n] : n % T_;
        stf(out + i, ldf(out + i) + ldf(wpe + t * C + i % C));
    }
}

/* The same, 8 elements a thread (C % 8 == 0, N * C / 8 fits an int). */
template <typename T> __global__ void pos_fwd8_k(T *out, const T *wpe, const int32_t *pos, int N, int T_, int C)
{
    int C8 = C / 8, total = N * C8;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int n = i / C8, c = (i - n * C8) * 8, t = pos ? pos[n] : n % T_;
        float v[8], w[8];
        ld8(out + (size_t)n * C + c, v);
        ld8(wpe + (size_t)t * C + c, w);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] += w[k];
        st8(out + (size_t)n * C + c, v);
    }
}

/* Thread per (t, c): the batch sum in batch order, then one +=. */
template <typename T> __global__ void pos_bwd_k(float *dwpe, const T *dout, int B, int T_, int C)
{
    size_t tc_total = (size_t)T_ * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < tc_total;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += ldf(dout + (size_t)b * tc_total + i);
        dwpe[i] += s;
    }
}

template <typename T>
static void embedding_forward(T *out, const int32_t *tokens, const T *wte, int N, int C, int off, int V)
{
    size_t n = (size_t)N * C;
    if (!n) return;
    if (vec8_ok((size_t)C, out, wte) && n / 8 < EMB_VEC_MAX)
        embed_fwd8_k<T><<<kcu_grid(n / 8, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(out, tokens, wte, N, C, off, V);
    else
        embed_fwd_k<T><<<kcu_grid(n, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(out, tokens, wte, N, C, off, V);
    kcu_launched();
}

template <typename T>
static void embedding_backward(float *dwte, const T *dout, const int32_t *tokens, int N, int C, int off, int V)
{
    if (N <= 0 || C <= 0) return;
    embed_bwd_k<T><<<(V + EMB_ROWS - 1) / EMB_ROWS, EMB_BLOCK, 0, kcu_stream()>>>(dwte, dout, tokens, N, C, off, V);
    kcu_launched();
}

template <typename T> static void position_forward(T *out, const T *wpe, const int32_t *pos, int B, int T_, int C)
{
    size_t n = (size_t)B * T_ * C;
    if (!n) return;
    if (vec8_ok((size_t)C, out, wpe) && n / 8 < EMB_VEC_MAX)
        pos_fwd8_k<T><<<kcu_grid(n / 8, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(out, wpe, pos, B * T_, T_, C);
    else
        pos_fwd_k<T><<<kcu_grid(n, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(out, wpe, pos, B, T_, C);
    kcu_launched();
}

template <typename T> static void position_backward(float *dwpe, const T *dout, int B, int T_, int C)
{
    size_t n = (size_t)T_ * C;
    if (!n || B <= 0) return;
    pos_bwd_k<T><<<kcu_grid(n, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(dwpe, dout, B, T_, C);
    kcu_launched();
}

void kcu_embedding_forward(float *out, const int32_t *tokens, const float *wte, int N, int C, int off, int V)
{
    embedding_forward(out, tokens, wte, N, C, off, V);
}
void kcu_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C, int off, int V)
{
    embedding_backward(dwte, dout, tokens, N, C, off, V);
}
void kcu_position_forward(float *out, const float *wpe, const int32_t *pos, int B, int T, int C)
{
    position_forward(out, wpe, pos, B, T, C);
}
void kcu_position_backward(float *dwpe, const float *dout, int B, int T, int C) { position_backward(dwpe, dout, B, T, C); }

void kcu_embedding_forward_bf16(uint16_t *out, const int32_t *tokens, const uint16_t *wte, int N, int C, int off, int V)
{
    embedding_forward(as_bf(out), tokens, as_bf(wte), N, C, off, V);
}
void kcu_embedding_backward_bf16(float *dwte, const uint16_t *dout, const int32_t *tokens, int N, int C, int off, int V)
{
    embedding_backward(dwte, as_bf(dout), tokens, N, C, off, V);
}
void kcu_position_forward_bf16(uint16_t *out, const uint16_t *wpe, const int32_t *pos, int B, int T, int C)
{
    position_forward(as_bf(out), as_bf(wpe), pos, B, T, C);
}
void kcu_position_backward_bf16(float *dwpe, const uint16_t *dout, int B, int T, int C)
{
    position_backward(dwpe, as_bf(dout), B, T, C);
}
