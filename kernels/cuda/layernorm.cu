/* layernorm: LayerNorm (and RMSNorm, below) forward and backward, in fp32
 * arithmetic over T storage.
 *
 * Rows of C elements with C a multiple of 8 (every model here) take the fast
 * kernels: a warp per row, 16-byte accesses, the row's sums by warp shuffles
 * (no block barriers), so every SM keeps many rows in flight:
 *   forward: mean, then the variance about it (two passes, as the CPU
 *   reference), then the output; the row is re-read from L1/L2, not DRAM.
 *   backward: dinp per row the same way, and in the same pass each block's
 *   column partials of dw and db over its rows (ln_fused_rows splits the rows
 *   so that every SM gets as many blocks as it can hold at once): every warp adds
 *   its rows into its own slice of shared memory, the block adds the slices
 *   in warp order, a second kernel (kcu_colsum_finish) adds the blocks' partials in a fixed order.
 *   dout and x are read once (the floor: dout, x, dinp read and written).
 *   Rows wider than 3072 (four warps' dw and db slices in 96 KiB) take two passes: dinp by one kernel,
 *   dw/db by a second over row chunks (16-byte column strips per thread).
 * Other C take the general kernels (a block per row; the backward a fixed
 * grid of LN_PARTS blocks with dw/db in shared memory). No atomics anywhere:
 * the same inputs give the same bits on every run. */
#include "kcuda.cuh"
#include "kcu_entries.h"

#define LN_BLOCK 256
#define LN_PARTS 256
#define LN_WARPS 8        /* rows per block in the warp-per-row kernels */
#define LN_ROW_CHUNK 32   /* rows per partial sum in the dw/db column kernel */
#define LN_FUSED_SMEM (96 * 1024) /* the most shared memory it asks for */

/* ---- warp per row (C % 8 == 0) ---- */

/* A float as T would store it (bf16: rounded to nearest even). */
__device__ __forceinline__ float as_stored(const bf16 *, float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float as_stored(const float *, float v) { return v; }

/* RES: the residual add first, inp = ra + rb written to inp (which may be ra or
 * rb): the first pass sums the stored values it has in registers, the later
 * passes read inp back as the plain kernel does, so the bits are those of
 * residual_forward followed by layernorm_forward. RMS: RMSNorm instead (no
 * mean, no bias: out = x rstd w, rstd = 1/sqrt(mean(x^2) + eps)). */
template <typename T, bool RES, bool RMS>
__global__ void __launch_bounds__(LN_WARPS * 32) ln_fwd_warp_k(T *out, float *mean, float *rstd, T *inp,
                                                               const T *w, const T *b, int N, int C, float eps,
                                                               const T *ra, const T *rb)
{
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (n >= N) return; /* whole warps */
    T *x = inp + (size_t)n * C;
    float s = 0.0f, v[8];
    for (int c = lane * 8; c < C; c += 256) {
        if (RES) {
            float u[8];
            ld8(ra + (size_t)n * C + c, v);
            ld8(rb + (size_t)n * C + c, u);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = as_stored(x, v[k] + u[k]);
            st8(x + c, v);
        } else {
            ld8(x + c, v);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) s += RMS ? v[k] * v[k] : v[k];
    }
    float m = 0.0f, q = warp_sum(s);
    if (!RMS) { /* the variance about the mean, in a second pass */
        m = q / (float)C, q = 0.0f;
        for (int c = lane * 8; c < C; c += 256) {
            ld8(x + c, v);
#pragma unroll
            for (int k = 0; k < 8; k++) q += (v[k] - m) * (v[k] - m);
        }
        q = warp_sum(q);
    }
    float rs = 1.0f / sqrtf(q / (float)C + eps), ww[8], bb[8];
    for (int c = lane * 8; c < C; c += 256) {
        ld8(x + c, v);
        ld8(w + c, ww);
        if (!RMS) ld8(b + c, bb);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = RMS ? v[k] * rs * ww[k] : (v[k] - m) * rs * ww[k] + bb[k];
        st8(out + (size_t)n * C + c, v);
    }
    if (lane == 0) {
        if (!RMS) mean[n] = m;
        rstd[n] = rs;
    }
}

/* This lane's part of a row's sums for the backward: sum of g w and of
 * g w xhat over its columns (lane*8 + 256j + k), xhat = (x - m) rs, in that
 * order; one 8-column piece of them. */
__device__ __forceinline__ void ln_bwd_piece_sums(const float xv[8], const float gv[8], const float wv[8], float m,
                                                  float rs, float *a, float *b)
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float gw = gv[k] * wv[k];
        *a += gw;
        *b += gw * (xv[k] - m) * rs;
    }
}

/* Where a warp's slices (ln_bwd_fused_k) keep column c = 256 j + 8 l + k
 * (chunk j, lane l, k < 8): at 256 j + k L + l, L the lanes chunk j spans (32
 * but in a last, partial chunk), so a slice is C floats and for each k the
 * lanes touch consecutive words (no bank conflicts). ln_slice_lanes is L. */
__device__ __forceinline__ int ln_slice_lanes(int C, int j) { return min(32, (C - 256 * j) / 8); }

/* One 8-column piece of a row's backward: dv += rs (g w - gmean - xhat gxmean),
 * and the warp's slices (dw at `at` = 256 j + l, k at stride L; db and the
 * bias sum of dinp as stored a slice of C further each) gain this row's terms. */
template <typename T, bool RMS>
__device__ __forceinline__ void ln_bwd_piece(const T *dx, float dv[8], const float xv[8], const float gv[8],
                                             const float wv[8], float m, float rs, float gmean, float gxmean,
                                             float *slice, int C, int S, int at, int L)
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float xh = (xv[k] - m) * rs;
        dv[k] += rs * (gv[k] * wv[k] - gmean - xh * gxmean);
        slice[at + k * L] += gv[k] * xh;
        if (!RMS) slice[C + at + k * L] += gv[k];
        if (!RMS && S == 3) slice[2 * C + at + k * L] += as_stored(dx, dv[k]);
    }
}

/* ln_bwd_piece for this lane's piece of chunk j. PK (C not a whole number of
 * chunks): the stride is ln_slice_lanes, made opaque: known to the compiler,
 * every (chunk, k) address of the slices was hoisted out of the row loop into
 * registers (560 bytes of spills at 1600 columns). Otherwise it is 32, so the
 * offsets sit in the instructions. */
template <typename T, bool RMS, bool PK>
__device__ __forceinline__ void ln_bwd_piece_at(const T *dx, float dv[8], const float xv[8], const float gv[8],
                                                const float wv[8], float m, float rs, float gmean, float gxmean,
                                                float *slice, int C, int S, int j)
{
    ln_bwd_piece<T, RMS>(dx, dv, xv, gv, wv, m, rs, gmean, gxmean, slice, C, S, 256 * j + (threadIdx.x & 31),
                         PK ? kcu_opaque(ln_slice_lanes(C, j)) : 32);
}

template <typename T>
__device__ __forceinline__ void ln_bwd_row_sums(const T *x, const T *g, const T *w, float m, float rs, int C,
                                                int lane, float *gs, float *gxs)
{
    float a = 0.0f, b = 0.0f, xv[8], gv[8], wv[8];
    for (int c = lane * 8; c < C; c += 256) {
        ld8(x + c, xv);
        ld8(g + c, gv);
        ld8(w + c, wv);
        ln_bwd_piece_sums(xv, gv, wv, m, rs, &a, &b);
    }
    *gs = a;
    *gxs = b;
}

/* dinp += rstd * (g w - mean(g w) - xhat mean(g w xhat)), a warp per row */
template <typename T>
__global__ void __launch_bounds__(LN_WARPS * 32) ln_bwd_dx_k(T *dinp, const T *dout, const T *inp, const T *w,
                                                             const float *mean, const float *rstd, int N, int C)
{
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
    T *dx = dinp + (size_t)n * C;
    float m = mean[n], rs = rstd[n], gs, gxs, xv[8], gv[8], wv[8], dv[8];
    ln_bwd_row_sums(x, g, w, m, rs, C, lane, &gs, &gxs);
    float gmean = warp_sum(gs) / (float)C, gxmean = warp_sum(gxs) / (float)C;
    for (int c = lane * 8; c < C; c += 256) {
        ld8(x + c, xv);
        ld8(g + c, gv);
        ld8(w + c, wv);
        ld8(dx + c, dv);
#pragma unroll
        for (int k = 0; k < 8; k++) dv[k] += rs * (gv[k] * wv[k] - gmean - (xv[k] - m) * rs * gxmean);
        st8(dx + c, dv);
    }
}

/* The fused backward: dinp as ln_bwd_dx_k, plus part[blockIdx.x] = (dw, db)
 * summed over the block's rows. Lane l owns columns l*8 + 256*j + k (k < 8);
 * a warp's slices in shared memory hold them as ln_slice_lanes says, C floats
 * a slice (a partial last chunk packed: the 1.5B model's 1600 columns take
 * 1600, not 1792), S slices a warp, W warps per block.
 * RMS: RMSNorm, the same with no mean, no db (S = 1; part rows of C):
 * dinp += rstd (g w - xhat mean(g w xhat)), xhat = x rstd.
 * NCH > 0, the registers form (rows of at most NCH 256-column chunks; NCH up to
 * ln_reg_chunks): a row's x, dout and dinp are loaded at once into registers,
 * as stored (bf16: 4 registers a chunk of each), so a row waits for memory
 * once (at GPT-2's 768 columns, gpu_bench's 8192 rows on an H200: 32 -> 29 us
 * a call, holding them in fp32). NCH = 0, wider rows: the sums a chunk at a
 * time, then dinp a chunk at a time with x and dout again, so a row waits for
 * memory twice a chunk (the 1.5B model's 1600 columns took 83 us a call on an
 * H200 holding 4 chunks of each in fp32, which spilled; the floor is ~25). The
 * same arithmetic in the same order either way.
 * S = 3 (LayerNorm with a bias sum): a third slice sums dinp after the update,
 * as stored, into part rows of 3C (dw | db | dsum). The bounds (ln_fused_bound)
 * hold registers to what the shared memory allows an SM at GPT-2's and the
 * 1.5B model's widths: the loop form 3 blocks (it takes ~56 registers); the
 * registers form in bf16 6 blocks (80 registers; sm_80 5) up to 768 columns,
 * where a row as stored takes 36, 5 (96) at 1024, 3 up to 2048 (the 1.5B
 * model's 1600: 75 KiB of three slices a block, 3 an SM in 228 KiB with the
 * 1 KiB the GPU reserves a block; slices of 1792 took 86 KiB, 2 an SM, so its
 * bias sums ran as two column sums a layer), and in fp32 4 (128). A kernel
 * whose registers a bound cannot hold spills, which fails the build. */
template <typename T> constexpr int ln_reg_chunks() { return sizeof(T) == 2 ? 8 : 4; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define LN_FUSED_BF16_SMALL 5 /* sm_80's code for the form needs more than 80 registers */
#else
#define LN_FUSED_BF16_SMALL 6
#endif
template <typename T, int NCH> constexpr int ln_fused_bound()
{
    return NCH == 0 ? 3 : sizeof(T) == 4 ? 4 : NCH <= 3 ? LN_FUSED_BF16_SMALL : NCH == 4 ? 5 : 3;
}
template <typename T, bool RMS, int NCH, bool PK>
__global__ void __launch_bounds__(128, ln_fused_bound<T, NCH>())
    ln_bwd_fused_k(T *dinp, float *part, const T *dout, const T *inp, const T *w, const float *mean, const float *rstd,
                   int N, int C, int rows, int S)
{
    extern __shared__ float acc[];
    int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *dwa = acc + (size_t)warp * S * C; /* this warp's slices: dw, then db, then the bias sum */
    for (int i = lane; i < S * C; i += 32) dwa[i] = 0.0f;
    __syncwarp();
    int r1 = min(N, (int)blockIdx.x * rows + rows);
    for (int n = blockIdx.x * rows + warp; n < r1; n += W) {
        const T *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        T *dx = dinp + (size_t)n * C;
        float m = RMS ? 0.0f : mean[n], rs = rstd[n], gs, gxs, wv[8];
        if constexpr (NCH > 0) { /* the row as stored: fp32 only where it is used */
            kcu_raw8<T> xr[NCH] = {}, gr[NCH] = {}, dr[NCH] = {}; /* zeros: lanes past C load none */
#pragma unroll
            for (int j = 0; j < NCH; j++)
                if (lane * 8 + 256 * j < C) {
                    ld8raw(x + lane * 8 + 256 * j, xr[j]);
                    ld8raw(g + lane * 8 + 256 * j, gr[j]);
                    ld8raw(dx + lane * 8 + 256 * j, dr[j]);
                }
            gs = gxs = 0.0f; /* as ln_bwd_row_sums, in its order */
#pragma unroll
            for (int j = 0; j < NCH; j++)
                if (lane * 8 + 256 * j < C) {
                    float xv[8], gv[8];
                    unpack8(xr[j], xv);
                    unpack8(gr[j], gv);
                    ld8(w + lane * 8 + 256 * j, wv);
                    ln_bwd_piece_sums(xv, gv, wv, m, rs, &gs, &gxs);
                }
            float gmean = RMS ? 0.0f : warp_sum(gs) / (float)C, gxmean = warp_sum(gxs) / (float)C;
#pragma unroll
            for (int j = 0; j < NCH; j++)
                if (lane * 8 + 256 * j < C) {
                    float xv[8], gv[8], dv[8];
                    unpack8(xr[j], xv);
                    unpack8(gr[j], gv);
                    unpack8(dr[j], dv);
                    ld8(w + lane * 8 + 256 * j, wv);
                    ln_bwd_piece_at<T, RMS, PK>(dx, dv, xv, gv, wv, m, rs, gmean, gxmean, dwa, C, S, j);
                    st8(dx + lane * 8 + 256 * j, dv);
                }
        } else { /* the sums a chunk at a time, then dinp a chunk at a time (x, dout again from L1) */
            ln_bwd_row_sums(x, g, w, m, rs, C, lane, &gs, &gxs);
            float gmean = RMS ? 0.0f : warp_sum(gs) / (float)C, gxmean = warp_sum(gxs) / (float)C;
            for (int c = lane * 8, j = 0; c < C; c += 256, j++) {
                float xv[8], gv[8], dv[8];
                ld8(x + c, xv);
                ld8(g + c, gv);
                ld8(w + c, wv);
                ld8(dx + c, dv);
                ln_bwd_piece_at<T, RMS, PK>(dx, dv, xv, gv, wv, m, rs, gmean, gxmean, dwa, C, S, j);
                st8(dx + c, dv);
            }
        }
    }
    __syncthreads();
    /* the block's sums: 8 columns a thread, the warps' slices added in warp
     * order; consecutive threads read consecutive lanes' words (a thread a
     * column read 4 banks a warp: 8-way conflicts) */
    float *p = part + (size_t)blockIdx.x * S * C;
    int C8 = C / 8;
    for (int q = threadIdx.x; q < S * C8; q += blockDim.x) {
        int sl = q / C8, c = (q - sl * C8) * 8, j = c / 256, L = ln_slice_lanes(C, j);
        const float *a = acc + (size_t)sl * C + 256 * j + (c % 256) / 8;
        float s[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            s[k] = 0.0f;
            for (int wi = 0; wi < W; wi++) s[k] += a[(size_t)wi * S * C + k * L];
        }
        st8(p + (size_t)sl * C + c, s);
    }
}

/* Partial dw, db over rows [y*LN_ROW_CHUNK, +LN_ROW_CHUNK): each thread owns 8
 * columns; part[y][0..C) = dw, part[y][C..2C) = db. */
template <typename T>
__global__ void ln_bwd_dwdb_k(float *part, const T *dout, const T *inp, const float *mean, const float *rstd, int N,
                              int C)
{
    int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    int r0 = blockIdx.y * LN_ROW_CHUNK, r1 = min(N, r0 + LN_ROW_CHUNK);
    float dw[8] = { 0 }, db[8] = { 0 }, xv[8], gv[8];
    for (int r = r0; r < r1; r++) {
        ld8(inp + (size_t)r * C + c, xv);
        ld8(dout + (size_t)r * C + c, gv);
        float m = mean[r], rs = rstd[r];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            db[k] += gv[k];
            dw[k] += gv[k] * (xv[k] - m) * rs;
        }
    }
    float *p = part + (size_t)blockIdx.y * 2 * C;
    st8(p + c, dw);
    st8(p + C + c, db);
}

/* ---- general C: a block per row (forward), LN_PARTS blocks (backward) ---- */

template <typename T>
__global__ void ln_fwd_k(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int C, float eps)
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
    float rs = 1.0f / sqrtf(block_sum(v, sh) / (float)C + eps);
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

/* Raises ln_bwd_fused_k's limit on dynamic shared memory (48 KiB until raised)
 * to fsmem, where that is above it (once a size: the limit stays at the largest
 * asked, which every smaller launch is within): before a launch, and before
 * asking how many blocks an SM holds, which counts none above the limit. (Asked before the
 * limit was raised, the 1.5B model's 57 and 86 KiB blocks both counted as
 * none, taken as one an SM: 128 blocks of 64 rows for 8192 rows, 192 us a call
 * on an H200 against 63 with three an SM; bench/results/gpu.md.) */
template <typename T, bool RMS, int NCH, bool PK>
static void ln_fused_smem(size_t fsmem)
{
    static size_t limit = 48 * 1024; /* ranks sharing a process would only raise it again */
    if (fsmem > limit) {
        cudaCheck(cudaFuncSetAttribute(ln_bwd_fused_k<T, RMS, NCH, PK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)fsmem));
        limit = fsmem;
    }
    /* the blocks an SM holds fill its shared memory (GPT-2's 6 of 36 KiB, the
     * 1.5B model's 3 of 75 KiB: 227 and 228 of an H100's 228 KiB with the KiB
     * reserved a block); the kernel reads nothing twice but w, so L1 can be
     * the least the carveout leaves (a hint the driver may overrule) */
    static bool carved;
    if (!carved)
        cudaCheck(cudaFuncSetAttribute(ln_bwd_fused_k<T, RMS, NCH, PK>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       (int)cudaSharedmemCarveoutMaxShared));
    carved = true;
}

/* Rows per block of ln_bwd_fused_k (warps warps, fsmem bytes of shared memory):
 * as many blocks as the SMs hold at once, each a whole number of rows per warp.
 * A fixed 64 rows gave a 1.5B model's 8192 rows 128 blocks of 4 warps, under
 * one per SM on an H200 (183 us a call against a 25 us floor, bench/results/gpu.md). */
template <typename T, bool RMS, int NCH, bool PK>
static int ln_fused_per_sm(size_t fsmem, int warps)
{
    static size_t seen[4] = { 0, 0, 0, 0 }; /* a model has one or two row widths, each with and without a bias sum */
    static int per_sm[4], next;
    for (int i = 0; i < 4; i++)
        if (seen[i] == fsmem) return per_sm[i];
    int i = next++ % 4, n = 0;
    ln_fused_smem<T, RMS, NCH, PK>(fsmem);
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, ln_bwd_fused_k<T, RMS, NCH, PK>, warps * 32, fsmem));
    if (n < 1) { /* the launch would fail too; its callers keep fsmem within LN_FUSED_SMEM */
        fprintf(stderr, "%s:%d: ln_bwd_fused_k: no block of %d threads with %zu bytes of shared memory fits an SM\n",
                __FILE__, __LINE__, warps * 32, fsmem);
        exit(EXIT_FAILURE);
    }
    seen[i] = fsmem;
    per_sm[i] = n;
    return per_sm[i];
}
template <typename T, bool RMS, int NCH, bool PK>
static int ln_fused_rows(int N, size_t fsmem, int warps)
{
    long blocks = (long)kcu_sms() * ln_fused_per_sm<T, RMS, NCH, PK>(fsmem, warps);
    int rows = (int)((N + blocks - 1) / blocks);
    return (rows + warps - 1) / warps * warps;
}

/* Queues ln_bwd_fused_k over the rows (warps a block, each a slice of C
 * floats for dw, and for LayerNorm db and, where it costs no block an SM,
 * dsum) and the finish into them. Returns 1 when the kernel summed dsum, 0
 * when the caller still has to. */
template <typename T, bool RMS, int NCH, bool PK>
static int ln_bwd_fused(T *dinp, float *dw, float *db, float *dsum, const T *dout, const T *inp, const T *w,
                        const float *mean, const float *rstd, int N, int C, int warps)
{
    int S = RMS ? 1 : 2;
    size_t fsmem = sizeof(float) * (size_t)S * C * warps;
    if (dsum && !RMS && fsmem / 2 * 3 <= LN_FUSED_SMEM &&
        ln_fused_per_sm<T, RMS, NCH, PK>(fsmem / 2 * 3, warps) >= ln_fused_per_sm<T, RMS, NCH, PK>(fsmem, warps))
        S = 3, fsmem = fsmem / 2 * 3;
    ln_fused_smem<T, RMS, NCH, PK>(fsmem);
    int rows = ln_fused_rows<T, RMS, NCH, PK>(N, fsmem, warps), parts = (N + rows - 1) / rows;
    float *part = (float *)kcu_scratch(sizeof(float) * S * (size_t)C * parts);
    ln_bwd_fused_k<T, RMS, NCH, PK><<<parts, warps * 32, fsmem, kcu_stream()>>>(dinp, part, dout, inp, w, mean, rstd, N,
                                                                            C, rows, S);
    kcu_launched();
    kcu_colsum_finish(dw, db, S == 3 ? dsum : nullptr, part, parts, C);
    return S == 3;
}
template <typename T, bool RMS, bool PK>
static int ln_bwd_fused_pk(T *dinp, float *dw, float *db, float *dsum, const T *dout, const T *inp, const T *w,
                           const float *mean, const float *rstd, int N, int C, int warps)
{
    /* the registers form with the fewest 256-column chunks that hold the row */
    int n = (C + 255) / 256;
    if (n == 1) return ln_bwd_fused<T, RMS, 1, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    if (n == 2) return ln_bwd_fused<T, RMS, 2, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    if (n == 3) return ln_bwd_fused<T, RMS, 3, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    if (n == 4) return ln_bwd_fused<T, RMS, 4, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    if constexpr (ln_reg_chunks<T>() == 8) {
        if (n <= 6) return ln_bwd_fused<T, RMS, 6, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
        if (n <= 8) return ln_bwd_fused<T, RMS, 8, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    }
    return ln_bwd_fused<T, RMS, 0, PK>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
}
/* rows of whole 256-column chunks take the kernel whose slice strides are
 * constants; others (the 1.5B model's 1600) the one with a packed last chunk */
template <typename T, bool RMS>
static int ln_bwd_fused(T *dinp, float *dw, float *db, float *dsum, const T *dout, const T *inp, const T *w,
                        const float *mean, const float *rstd, int N, int C, int warps)
{
    if (C % 256) return ln_bwd_fused_pk<T, RMS, true>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
    return ln_bwd_fused_pk<T, RMS, false>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, warps);
}

/* ---- RMSNorm (the LLaMA family): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ----
 * A warp per row: ln_fwd_warp_k's RMS form where rows are whole 16-byte
 * chunks, else rms_fwd_k (scalar accesses, coalesced across the warp); the
 * backward for C % 8 == 0 up to 6144 is ln_bwd_fused_k's RMS form (one pass),
 * otherwise dinp by one kernel and dw as per-chunk column partials by another,
 * finished by kcu_colsum_finish; no atomics. */
template <typename T>
__global__ void __launch_bounds__(LN_WARPS * 32) rms_fwd_k(T *out, float *rstd, const T *inp, const T *w, int N, int C,
                                                           float eps)
{
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C;
    float q = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = ldf(x + c);
        q += v * v;
    }
    float rs = 1.0f / sqrtf(warp_sum(q) / (float)C + eps);
    for (int c = lane; c < C; c += 32) stf(out + (size_t)n * C + c, ldf(x + c) * rs * ldf(w + c));
    if (lane == 0) rstd[n] = rs;
}

/* dinp += rstd * (g w - x rstd^2 mean(g w x)) */
template <typename T>
__global__ void __launch_bounds__(LN_WARPS * 32) rms_bwd_dx_k(T *dinp, const T *dout, const T *inp, const T *w,
                                                              const float *rstd, int N, int C)
{
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
    T *dx = dinp + (size_t)n * C;
    float rs = rstd[n], gx = 0.0f;
    for (int c = lane; c < C; c += 32) gx += ldf(g + c) * ldf(w + c) * ldf(x + c);
    float k = rs * rs * warp_sum(gx) / (float)C;
    for (int c = lane; c < C; c += 32)
        stf(dx + c, ldf(dx + c) + rs * (ldf(g + c) * ldf(w + c) - ldf(x + c) * k));
}

/* part[y][c] = sum over rows [y*LN_ROW_CHUNK, +LN_ROW_CHUNK) of dout * x * rstd */
template <typename T>
__global__ void rms_bwd_dw_k(float *part, const T *dout, const T *inp, const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int r0 = blockIdx.y * LN_ROW_CHUNK, r1 = min(N, r0 + LN_ROW_CHUNK);
    float s = 0.0f;
    for (int r = r0; r < r1; r++) s += ldf(dout + (size_t)r * C + c) * ldf(inp + (size_t)r * C + c) * rstd[r];
    part[(size_t)blockIdx.y * C + c] = s;
}

template <typename T> static void rmsnorm_forward(T *out, float *rstd, const T *inp, const T *w,
                                                  int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    if (vec8_ok((size_t)C, out, inp) && vec8_ok(8, w)) /* 16-byte accesses */
        ln_fwd_warp_k<T, false, true><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(
            out, nullptr, rstd, (T *)inp, w, nullptr, N, C, eps, nullptr, nullptr);
    else
        rms_fwd_k<T><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(out, rstd, inp, w, N, C, eps);
    kcu_launched();
}

template <typename T>
static void rmsnorm_backward(T *dinp, float *dw, const T *dout, const T *inp, const T *w, const float *rstd, int N,
                             int C)
{
    if (N <= 0 || C <= 0) return;
    size_t fsmem = sizeof(float) * (size_t)C * 4; /* four warps' dw slices */
    if (vec8_ok((size_t)C, dinp, dout, inp) && vec8_ok(8, w) && fsmem <= LN_FUSED_SMEM) {
        ln_bwd_fused<T, true>(dinp, dw, nullptr, nullptr, dout, inp, w, nullptr, rstd, N, C, 4);
        return;
    }
    rms_bwd_dx_k<T><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(dinp, dout, inp, w, rstd, N, C);
    kcu_launched();
    int parts = (N + LN_ROW_CHUNK - 1) / LN_ROW_CHUNK, threads = C < 256 ? (C + 31) / 32 * 32 : 256;
    float *part = (float *)kcu_scratch(sizeof(float) * (size_t)C * parts);
    rms_bwd_dw_k<T><<<dim3((C + threads - 1) / threads, parts), threads, 0, kcu_stream()>>>(part, dout, inp, rstd, N, C);
    kcu_launched();
    kcu_colsum_finish(dw, nullptr, nullptr, part, parts, C);
}

void kcu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
    rmsnorm_forward(out, rstd, inp, w, N, C, eps);
}
void kcu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int N, int C)
{
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
}
void kcu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w,
                              int N, int C, float eps)
{
    rmsnorm_forward(as_bf(out), rstd, as_bf(inp), as_bf(w), N, C, eps);
}
void kcu_rmsnorm_backward_bf16(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                               const uint16_t *w, const float *rstd, int N, int C)
{
    rmsnorm_backward(as_bf(dinp), dw, as_bf(dout), as_bf(inp), as_bf(w), rstd, N, C);
}

template <typename T>
static void layernorm_forward(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b,
                              int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    if (vec8_ok((size_t)C, out, inp) && vec8_ok(8, w, b))
        ln_fwd_warp_k<T, false, false><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(
            out, mean, rstd, (T *)inp, w, b, N, C, eps, nullptr, nullptr);
    else
        ln_fwd_k<T><<<N, LN_BLOCK, 0, kcu_stream()>>>(out, mean, rstd, inp, w, b, C, eps);
    kcu_launched();
}

template <typename T>
static void layernorm_backward(T *dinp, float *dw, float *db, float *dsum, const T *dout, const T *inp, const T *w,
                               const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    int fw = 4; /* fewer warps per block would starve the SMs: wide rows go below */
    size_t fsmem = sizeof(float) * 2 * (size_t)C * fw;
    int summed = 0; /* dsum taken in the pass that writes dinp; otherwise summed after it, below */
    if (vec8_ok((size_t)C, dinp, dout, inp) && vec8_ok(8, w) && fsmem <= LN_FUSED_SMEM) {
        summed = ln_bwd_fused<T, false>(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, fw);
    } else if (vec8_ok((size_t)C, dinp, dout, inp) && vec8_ok(8, w)) {
        int parts = (N + LN_ROW_CHUNK - 1) / LN_ROW_CHUNK;
        float *part = (float *)kcu_scratch(sizeof(float) * 2 * (size_t)C * parts);
        ln_bwd_dx_k<T><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(dinp, dout, inp, w, mean,
                                                                                         rstd, N, C);
        kcu_launched();
        int threads = C / 8 < 128 ? C / 8 : 128;
        dim3 grid((C / 8 + threads - 1) / threads, parts);
        ln_bwd_dwdb_k<T><<<grid, threads, 0, kcu_stream()>>>(part, dout, inp, mean, rstd, N, C);
        kcu_launched();
        kcu_colsum_finish(dw, db, nullptr, part, parts, C);
    } else {
        int parts = N < LN_PARTS ? N : LN_PARTS;
        size_t smem = sizeof(float) * 2 * (size_t)C;
        if (smem > 48 * 1024) /* above the default limit: ask for it (up to the device's opt-in cap) */
            cudaCheck(cudaFuncSetAttribute(ln_bwd_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        float *part = (float *)kcu_scratch(sizeof(float) * 2 * (size_t)C * parts);
        ln_bwd_k<T><<<parts, LN_BLOCK, smem, kcu_stream()>>>(dinp, part, dout, inp, w, mean, rstd, N, C);
        kcu_launched();
        kcu_colsum_finish(dw, db, nullptr, part, parts, C);
    }
    if (dsum && !summed) kcu_colsum_acc(dsum, dinp, N, C);
}

void kcu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C, float eps)
{
    layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
}
void kcu_layernorm_backward(float *dinp, float *dw, float *db, float *dsum, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward(dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C);
}
/* res = a + b, then out = LayerNorm(res): one kernel where the row kernels
 * apply, else the two ops. */
void kcu_residual_layernorm_forward_bf16(uint16_t *res, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                         const uint16_t *b, const uint16_t *w, const uint16_t *bias,
                                         int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    if (vec8_ok((size_t)C, out, res) && vec8_ok(8, a, b) && vec8_ok(8, w, bias)) {
        ln_fwd_warp_k<bf16, true, false><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(
            as_bf(out), mean, rstd, as_bf(res), as_bf(w), as_bf(bias), N, C, eps, as_bf(a), as_bf(b));
        kcu_launched();
        return;
    }
    kcu_residual_forward_bf16(res, a, b, (size_t)N * C);
    kcu_layernorm_forward_bf16(out, mean, rstd, res, w, bias, N, C, eps);
}

/* res = a + b, then out = RMSNorm(res): the same, for the LLaMA family. */
void kcu_residual_rmsnorm_forward_bf16(uint16_t *res, uint16_t *out, float *rstd, const uint16_t *a,
                                       const uint16_t *b, const uint16_t *w, int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    if (vec8_ok((size_t)C, out, res) && vec8_ok(8, a, b) && vec8_ok(8, w)) {
        ln_fwd_warp_k<bf16, true, true><<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, kcu_stream()>>>(
            as_bf(out), nullptr, rstd, as_bf(res), as_bf(w), nullptr, N, C, eps, as_bf(a), as_bf(b));
        kcu_launched();
        return;
    }
    kcu_residual_forward_bf16(res, a, b, (size_t)N * C);
    kcu_rmsnorm_forward_bf16(out, rstd, res, w, N, C, eps);
}

void kcu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                const uint16_t *w, const uint16_t *b, int N, int C, float eps)
{
    layernorm_forward(as_bf(out), mean, rstd, as_bf(inp), as_bf(w), as_bf(b), N, C, eps);
}
void kcu_layernorm_backward_bf16(uint16_t *dinp, float *dw, float *db, float *dsum, const uint16_t *dout,
                                 const uint16_t *inp, const uint16_t *w, const float *mean,
                                 const float *rstd, int N, int C)
{
    layernorm_backward(as_bf(dinp), dw, db, dsum, as_bf(dout), as_bf(inp), as_bf(w), mean, rstd, N, C);
}
