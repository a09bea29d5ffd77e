/* embedding: token and position embeddings, forward and backward.
 *
 * The token backward is deterministic without float atomics: each block owns
 * a range of EMB_ROWS vocab rows, finds the positions whose token falls in it
 * (a block-wide scan of the int32 token list), sorts them by row in shared
 * memory, and sums each row's dout rows in registers, a chunk of positions at
 * a time (embed_bwd_k). Every dout row is read once. */
#include "kcuda.cuh"

#include <limits.h>

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
#define EMB_CHUNK (4 * EMB_BLOCK) /* positions a block takes at a time, 4 a thread */

/* Block (b, t) owns dwte rows [b*EMB_ROWS, +EMB_ROWS) of the local slice, columns
 * [t*32*VEC, +32*VEC) (one tile: VEC columns a lane), and walks
 * the token list EMB_CHUNK positions at a time (the next chunk's ids loaded
 * while this one is worked, so a block waits on the list once, not per chunk):
 *  1. the chunk's positions whose token is one of its rows are compacted in
 *     position order (ballots, per-warp counts, two barriers);
 *  2. they are sorted by row, stably (each entry's place is the number of
 *     entries with a smaller row plus those before it with its row: no atomics,
 *     so the order is the inputs' alone);
 *  3. a unit of work is one row's run of entries; warp w takes units w, w + 8,
 *     ...: its lanes sum the run's dout rows over the block's tile in position
 *     order in registers (8 independent loads in flight), then add the sum to
 *     dwte once.
 * A frequent token (in English text "," or " the" is ~4% of all positions; a
 * block of 128 ids can hold a quarter of them) costs its warps one pass of
 * pipelined loads per chunk, not one dependent read-modify-write of dwte per
 * position, and its columns are summed by C / (32 * VEC) blocks at once (one
 * block walking all its tiles took 467 us of a 29.7 ms GPT-2 step on an H200).
 * Every block reads the token list (from L2); every dout element is read once.
 * Summation: within a chunk in position order, chunks in order. */
template <typename T, int VEC>
__global__ void __launch_bounds__(EMB_BLOCK) embed_bwd_k(float *dwte, const T *dout, const int32_t *tokens, int N,
                                                         int C, int off, int V)
{
    constexpr int ROUNDS = EMB_CHUNK / EMB_BLOCK, NW = EMB_BLOCK / 32;
    __shared__ int s_pos[EMB_CHUNK], s_row[EMB_CHUNK], s_spos[EMB_CHUNK], s_srow[EMB_CHUNK];
    __shared__ int s_start[EMB_ROWS + 1], s_wcount[ROUNDS * NW];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = blockIdx.x * EMB_ROWS, nrows = min(V - r0, EMB_ROWS);
    const int c = blockIdx.y * 32 * VEC + lane * VEC; /* this block's column tile, this lane's columns */
    int next[ROUNDS]; /* position m0 + j*EMB_BLOCK + threadIdx.x's id, for the coming chunk */
#pragma unroll
    for (int j = 0; j < ROUNDS; j++) {
        int p = j * EMB_BLOCK + threadIdx.x;
        next[j] = p < N ? tokens[p] : INT_MIN;
    }
    for (int m0 = 0; m0 < N; m0 += EMB_CHUNK) {
        int row[ROUNDS];
        unsigned bal[ROUNDS];
#pragma unroll
        for (int j = 0; j < ROUNDS; j++) {
            int r = next[j] == INT_MIN ? -1 : next[j] - off - r0;
            row[j] = r < nrows ? r : -1; /* -1: not one of this block's rows */
            int p = m0 + EMB_CHUNK + j * EMB_BLOCK + threadIdx.x;
            next[j] = p < N ? tokens[p] : INT_MIN;
        }
        /* 1. this block's positions of the chunk, in position order (round-major, then warp, lane) */
#pragma unroll
        for (int j = 0; j < ROUNDS; j++) {
            bal[j] = __ballot_sync(0xffffffffu, row[j] >= 0);
            if (lane == 0) s_wcount[j * NW + warp] = __popc(bal[j]);
        }
        __syncthreads();
        int M = 0, base[ROUNDS];
        for (int q = 0; q < ROUNDS * NW; q++) {
#pragma unroll
            for (int j = 0; j < ROUNDS; j++)
                if (q == j * NW + warp) base[j] = M;
            M += s_wcount[q];
        }
#pragma unroll
        for (int j = 0; j < ROUNDS; j++)
            if (row[j] >= 0) {
                int at = base[j] + __popc(bal[j] & ((1u << lane) - 1u));
                s_pos[at] = m0 + j * EMB_BLOCK + threadIdx.x;
                s_row[at] = row[j];
            }
        __syncthreads();
        if (M == 0) continue; /* M is the same in every thread; s_wcount is next written after a barrier */
        /* 2. stable sort by row */
        for (int i = threadIdx.x; i < M; i += EMB_BLOCK) {
            int r = s_row[i], at = 0;
            for (int k = 0; k < M; k++) {
                int rk = s_row[k];
                at += rk < r || (rk == r && k < i);
            }
            s_spos[at] = s_pos[i];
            s_srow[at] = r;
        }
        __syncthreads();
        /* where each row's run starts (rows without entries: an empty run) */
        for (int r = threadIdx.x; r <= EMB_ROWS; r += EMB_BLOCK) {
            int lo = 0, hi = M; /* first entry with row >= r */
            while (lo < hi) {
                int mid = (lo + hi) >> 1;
                if (s_srow[mid] < r) lo = mid + 1;
                else hi = mid;
            }
            s_start[r] = lo;
        }
        __syncthreads();
        /* 3. runs over the warps, the block's column tile; a run is named by its first entry */
        for (int u = warp; u < M; u += NW) {
            int k = u, r = s_srow[k];
            if (s_start[r] != k || c >= C) continue;
            int e = s_start[r + 1];
            float acc[VEC] = {}, v[VEC];
#pragma unroll 8
            for (; k < e; k++) {
                const T *src = dout + (size_t)s_spos[k] * C + c;
                if constexpr (VEC == 8) ld8(src, v);
                else v[0] = ldf(src);
#pragma unroll
                for (int q = 0; q < VEC; q++) acc[q] += v[q];
            }
            float *dst = dwte + (size_t)(r0 + r) * C + c;
            if constexpr (VEC == 8) {
                ld8(dst, v);
#pragma unroll
                for (int q = 0; q < VEC; q++) v[q] += acc[q];
                st8(dst, v);
            } else {
                dst[0] += acc[0];
            }
        }
        __syncthreads(); /* the shared lists are rewritten by the next chunk */
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
    /* one block per (EMB_ROWS rows, tile of 32 lanes x VEC columns): a frequent id's
     * columns are summed on as many SMs as there are tiles */
    int vec = vec8_ok((size_t)C, dwte, dout) ? 8 : 1;
    dim3 grid((unsigned)((V + EMB_ROWS - 1) / EMB_ROWS), (unsigned)((C + 32 * vec - 1) / (32 * vec)));
    if (vec == 8)
        embed_bwd_k<T, 8><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, dout, tokens, N, C, off, V);
    else
        embed_bwd_k<T, 1><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, dout, tokens, N, C, off, V);
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
