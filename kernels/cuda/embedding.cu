/* embedding: token and position embeddings, forward and backward.
 *
 * The token backward is deterministic without float atomics: the positions
 * are sorted by (row, position) on the device, and fixed slices of the sorted
 * list are summed a warp each (below, before emb_sort_chunk_k). */
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

/* ---- token backward: sort the positions by row, then sum fixed slices of the sorted list ----
 *
 * 1. emb_sort_chunk_k: each block orders EMB_SORT positions by the key
 *    (row, position) in shared memory (rows outside the local slice count as
 *    V: they sort last and are skipped). Keys are unique, so the order is the
 *    inputs' alone whatever the sort does. Merge levels: at width w an element
 *    goes to its pair's start + its index in its own run + the number of the
 *    partner run's keys below it (a binary search); 11 levels.
 * 2. emb_sort_merge_k: an element's place in the whole list is its place in
 *    its chunk plus, for every other chunk, the number of that chunk's keys
 *    below it. Writes the sorted positions and rows. (N / EMB_SORT binary
 *    searches an element: a few us at 16K positions, fine to ~10^5; a merge
 *    tree would be the next step past that.)
 * 3. emb_slice_k: warp s sums slice s of the sorted list (EMB_SLICE entries, one
 *    a lane) over one column tile (32 lanes x VEC columns): its runs of one row
 *    in position order, 8 dout rows' loads in flight. A run wholly inside the
 *    slice is added to its dwte row there (that row has no other writer); a
 *    run crossing the slice's start or end leaves its piece in `part` (at most
 *    two a slice: the first sub-run, which began before, and the last, which
 *    goes on after).
 * 4. emb_cross_k: the slice where a crossing run begins sums its pieces in
 *    slice order and adds the sum to the row.
 * A frequent id (" the" or "," is ~4% of English text's positions) is summed
 * 32 positions a warp across many warps, where a block walking one range of
 * rows took 336 us of a 29.6 ms GPT-2 step on an H200. Every dout element is
 * read once; the order of every sum depends only on the ids (EMB_SLICE is
 * fixed), so the same inputs give the same bits. */
#define EMB_SORT 2048 /* keys one block of the sort orders, 8 a thread */
#define EMB_SLICE 32  /* sorted entries a warp sums, one a lane */
#define EMB_WARPS (EMB_BLOCK / 32)

typedef unsigned long long emb_key_t;

/* position n's key: its local row above (V when outside [off, off + V)), n below */
__device__ __forceinline__ emb_key_t emb_key(const int32_t *tokens, int n, int off, int V)
{
    long long r = (long long)tokens[n] - off;
    unsigned row = r >= 0 && r < V ? (unsigned)r : (unsigned)V;
    return ((emb_key_t)row << 32) | (unsigned)n;
}

/* how many of a[0, n) (ascending) are below k */
__device__ __forceinline__ int emb_below(const emb_key_t *a, int n, emb_key_t k)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (a[mid] < k) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

__global__ void __launch_bounds__(EMB_BLOCK) emb_sort_chunk_k(emb_key_t *keys, const int32_t *tokens, int N, int off,
                                                              int V)
{
    constexpr int PER = EMB_SORT / EMB_BLOCK;
    __shared__ emb_key_t s_a[EMB_SORT], s_b[EMB_SORT];
    const int base = blockIdx.x * EMB_SORT, n = min(N - base, EMB_SORT);
    /* a short last chunk is padded with keys above every real one, each its own */
    for (int i = threadIdx.x; i < EMB_SORT; i += EMB_BLOCK)
        s_a[i] = i < n ? emb_key(tokens, base + i, off, V) : ~(emb_key_t)0 - (emb_key_t)i;
    __syncthreads();
    emb_key_t *src = s_a, *dst = s_b;
    for (int w = 1; w < EMB_SORT; w <<= 1) {
#pragma unroll
        for (int j = 0; j < PER; j++) {
            int i = j * EMB_BLOCK + threadIdx.x, pair = i & ~(2 * w - 1);
            int mine = i & w ? pair + w : pair, other = i & w ? pair : pair + w;
            emb_key_t k = src[i];
            dst[pair + (i - mine) + emb_below(src + other, w, k)] = k;
        }
        __syncthreads();
        emb_key_t *t = src;
        src = dst;
        dst = t;
    }
    for (int i = threadIdx.x; i < n; i += EMB_BLOCK) keys[base + i] = src[i];
}

__global__ void emb_sort_merge_k(int32_t *spos, int32_t *srow, const emb_key_t *keys, int N)
{
    const int chunks = (N + EMB_SORT - 1) / EMB_SORT;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        emb_key_t k = keys[i];
        int c = i / EMB_SORT, at = i - c * EMB_SORT;
        for (int d = 0; d < chunks; d++)
            if (d != c) at += emb_below(keys + (size_t)d * EMB_SORT, min(N - d * EMB_SORT, EMB_SORT), k);
        spos[at] = (int32_t)(unsigned)k;
        srow[at] = (int32_t)(k >> 32);
    }
}

/* VEC columns at p as fp32 (VEC 8: 16-byte aligned) */
template <typename T, int VEC> __device__ __forceinline__ void emb_ld(const T *p, float v[VEC])
{
    if constexpr (VEC == 8) ld8(p, v);
    else v[0] = ldf(p);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(EMB_BLOCK) emb_slice_k(float *dwte, float *part, const T *dout, const int32_t *spos,
                                                         const int32_t *srow, int N, int C, int V)
{
    const unsigned FULL = 0xffffffffu;
    const int lane = threadIdx.x & 31, s = blockIdx.x * EMB_WARPS + (threadIdx.x >> 5), i0 = s * EMB_SLICE;
    if (i0 >= N) return; /* the whole warp */
    const int i = i0 + lane, c = blockIdx.y * 32 * VEC + lane * VEC;
    const int row = i < N ? srow[i] : V, pos = i < N ? spos[i] : 0;
    const int len = __popc(__ballot_sync(FULL, row < V)); /* sorted: the live entries are the first lanes */
    if (len == 0) return;
    const int nrow = __shfl_sync(FULL, row, (lane + 1) & 31);
    const unsigned ends = __ballot_sync(FULL, lane < len && (lane == len - 1 || nrow != row));
    /* the first sub-run began in an earlier slice; the last goes on into the next */
    const bool before = i0 > 0 && srow[i0 - 1] == __shfl_sync(FULL, row, 0);
    const bool after = i0 + EMB_SLICE < N && srow[i0 + EMB_SLICE] == __shfl_sync(FULL, row, (len - 1) & 31);
    const bool col = c < C;
    float acc[VEC] = {};
    for (int k0 = 0; k0 < len; k0 += 8) {
        float v[8][VEC] = {}, w[8][VEC] = {};
        int r[8], to[8]; /* to: 0 the row, 1 this slice's first piece, 2 its last piece, -1 not a run's end */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int e = k0 + j, p = __shfl_sync(FULL, pos, e & 31);
            r[j] = __shfl_sync(FULL, row, e & 31);
            to[j] = e >= len || !(ends >> e & 1u)              ? -1
                    : before && !(ends & ((1u << e) - 1u))      ? 1
                    : after && e == len - 1                     ? 2
                                                                : 0;
            if (e < len && col) emb_ld<T, VEC>(dout + (size_t)p * C + c, v[j]);
            if (to[j] == 0 && col) emb_ld<float, VEC>(dwte + (size_t)r[j] * C + c, w[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) { /* no break or continue: the loop stays unrolled */
            if (k0 + j < len) {
#pragma unroll
                for (int q = 0; q < VEC; q++) acc[q] += v[j][q];
            }
            if (to[j] >= 0) { /* a run's last entry (so k0 + j < len) */
                if (col) {
                    float *dst =
                        to[j] == 0 ? dwte + (size_t)r[j] * C + c : part + ((size_t)s * 2 + to[j] - 1) * C + c;
                    if (to[j] == 0)
#pragma unroll
                        for (int q = 0; q < VEC; q++) acc[q] += w[j][q];
                    if constexpr (VEC == 8) st8(dst, acc);
                    else dst[0] = acc[0];
                }
#pragma unroll
                for (int q = 0; q < VEC; q++) acc[q] = 0.0f;
            }
        }
    }
}

template <int VEC>
__global__ void __launch_bounds__(EMB_BLOCK) emb_cross_k(float *dwte, const float *part, const int32_t *srow, int N,
                                                         int C, int V)
{
    const int lane = threadIdx.x & 31, s = blockIdx.x * EMB_WARPS + (threadIdx.x >> 5);
    const int e = s * EMB_SLICE + EMB_SLICE - 1, c = blockIdx.y * 32 * VEC + lane * VEC;
    if (e + 1 >= N || c >= C) return;
    const int r = srow[e];
    /* slice s owns the run of its last entry when that run goes on and began here */
    if (r >= V || srow[e + 1] != r || (s > 0 && srow[s * EMB_SLICE - 1] == r)) return;
    int lo = e + 1, hi = N; /* the first entry past the run */
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (srow[mid] <= r) lo = mid + 1;
        else hi = mid;
    }
    const int t_end = (lo - 1) / EMB_SLICE; /* slices s+1 .. t_end hold its other pieces, each as their first */
    float acc[VEC], v[VEC];
    emb_ld<float, VEC>(part + (size_t)s * 2 * C + C + c, acc);
#pragma unroll 8
    for (int t = s + 1; t <= t_end; t++) {
        emb_ld<float, VEC>(part + (size_t)t * 2 * C + c, v);
#pragma unroll
        for (int q = 0; q < VEC; q++) acc[q] += v[q];
    }
    float *dst = dwte + (size_t)r * C + c;
    emb_ld<float, VEC>(dst, v);
#pragma unroll
    for (int q = 0; q < VEC; q++) v[q] += acc[q];
    if constexpr (VEC == 8) st8(dst, v);
    else dst[0] = v[0];
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

/* The same, 8 columns a thread through 16-byte accesses (C % 8 == 0, T * C / 8
 * fits an int), the batch's loads issued before they are added: the same sums
 * in the same order. (One bf16 column a thread: 10.1 us a GPT-2 step on an
 * H200 against ~6 us of bytes.) */
template <typename T> __global__ void pos_bwd8_k(float *dwpe, const T *dout, int B, int T_, int C)
{
    size_t tc_total = (size_t)T_ * C;
    int total = (int)(tc_total / 8);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        float s[8] = { 0 }, v[8];
        int b = 0;
        for (; b + 4 <= B; b += 4) {
            float u[4][8];
#pragma unroll
            for (int j = 0; j < 4; j++) ld8(dout + (size_t)(b + j) * tc_total + (size_t)i * 8, u[j]);
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int k = 0; k < 8; k++) s[k] += u[j][k];
        }
        for (; b < B; b++) {
            ld8(dout + (size_t)b * tc_total + (size_t)i * 8, v);
#pragma unroll
            for (int k = 0; k < 8; k++) s[k] += v[k];
        }
        ld8(dwpe + (size_t)i * 8, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] += s[k];
        st8(dwpe + (size_t)i * 8, v);
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
    if (N <= 0 || C <= 0 || V <= 0) return;
    const int vec = vec8_ok((size_t)C, dwte, dout) ? 8 : 1;
    const int chunks = (N + EMB_SORT - 1) / EMB_SORT, slices = (N + EMB_SLICE - 1) / EMB_SLICE;
    /* scratch: keys[N], then the sorted positions and rows, then two pieces a slice (16-byte aligned) */
    char *sc = (char *)kcu_scratch((size_t)N * 16 + (size_t)slices * 2 * C * sizeof(float));
    emb_key_t *keys = (emb_key_t *)sc;
    int32_t *spos = (int32_t *)(sc + (size_t)N * 8), *srow = spos + N;
    float *part = (float *)(sc + (size_t)N * 16);
    emb_sort_chunk_k<<<chunks, EMB_BLOCK, 0, kcu_stream()>>>(keys, tokens, N, off, V);
    kcu_launched();
    emb_sort_merge_k<<<kcu_grid((size_t)N, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(spos, srow, keys, N);
    kcu_launched();
    dim3 grid((unsigned)((slices + EMB_WARPS - 1) / EMB_WARPS), (unsigned)((C + 32 * vec - 1) / (32 * vec)));
    if (vec == 8) {
        emb_slice_k<T, 8><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, part, dout, spos, srow, N, C, V);
        kcu_launched();
        emb_cross_k<8><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, part, srow, N, C, V);
    } else {
        emb_slice_k<T, 1><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, part, dout, spos, srow, N, C, V);
        kcu_launched();
        emb_cross_k<1><<<grid, EMB_BLOCK, 0, kcu_stream()>>>(dwte, part, srow, N, C, V);
    }
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
    if (vec8_ok((size_t)C, dwpe, dout) && n / 8 < EMB_VEC_MAX)
        pos_bwd8_k<T><<<kcu_grid(n / 8, EMB_BLOCK), EMB_BLOCK, 0, kcu_stream()>>>(dwpe, dout, B, T_, C);
    else
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
