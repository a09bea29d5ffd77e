/* flash_attention: causal attention in bf16 that never writes the [T, T]
 * matrix (FlashAttention-2's schedule, written from the paper's equations).
 *
 * Forward, per block: 64 query rows of one (sequence, head), 16 per warp. The
 * warp keeps its rows' scores, probabilities and output accumulator in
 * registers (mma.sync m16n8k16, bf16 in, fp32 accumulate); K/V tiles of 64
 * keys stream through shared memory with cp.async, two buffers deep, so the
 * next tile loads while this one is multiplied. Online softmax in base 2
 * (scores pre-multiplied by log2(e)/sqrt(HD)); the probabilities are rounded
 * to bf16 for the P V product and the row sum adds the rounded values, so
 * O / l normalises exactly what P V added. Saves lse = max + log(sum) per row
 * (natural log), from which the backward recomputes the probabilities.
 *
 * Backward: D = rowsum(dO * O), then two kernels that each own their outputs
 * (no atomics, same bits every run): per key tile, dK and dV (each warp owns
 * 16 keys and walks the query tiles the causal mask leaves: S^T, P^T, dV +=
 * P^T dO, dP^T = V dO^T, dS^T, dK += dS^T Q); per query tile, dQ (S, P, dP,
 * dS, dQ += dS K). That is 7 tile products against FlashAttention-2's 5 (S and
 * dP are recomputed for dQ), the price of no atomics.
 *
 * Grouped-query attention: qkv is [B, T, NG, Q+2, HD] (kernels.h); a block
 * of the forward and dQ kernels reads its head's queries and its group's
 * keys and values, and the dK/dV kernel owns a key tile of one group and walks
 * the query tiles of each of the group's Q heads in turn, so the group's dK
 * and dV still sum in registers, without atomics.
 *
 * Dropout on the probabilities (a template flag, so the kernels without it are
 * unchanged): the mask bit of (sample, head, query, key) is k_dropout.h's,
 * recomputed wherever it is needed. The forward's P V uses P * mask / (1-p)
 * while the row sum, lse, uses P; backward dV += (P M)^T dO and
 * dS = P * (M dP' - D) with dP' = dO V^T and D = rowsum(dO * O) as before (O
 * already holds the dropped product, so D = sum_j P_ij M_ij dP'_ij).
 *
 * Documents (Megatron's --reset-attention-mask): with doc[b*T + t], the first
 * key of query t's document, keys before it are masked like the ones after t.
 * doc never decreases along t, so the forward and dQ kernels start at the key
 * tile of their first row's document and the dK/dV kernel stops before the
 * query tile where a later document begins (a binary search of doc); a row may
 * meet tiles with no key it sees, whose exponentials are taken against 0
 * instead of an infinite maximum.
 *
 * Head dims 64 and 128 (templates); T any length (tiles past T load zeros and
 * their rows are never written). Tiles in shared memory are padded by 8
 * elements per row, so the 8 rows an ldmatrix reads fall in distinct banks.
 * The warp-level instructions are in kcuda_mma.cuh, whose CPU stand-in lets
 * these kernels run under tests/cuda/emu. */
#include "kcuda.cuh"
#include "kcuda_mma.cuh"
#include "k_dropout.h"
#include "k_qkv.h"

#define FA_BK 64   /* keys per K/V tile */
#define FA_WARPS 4 /* 16 rows each: 64-row blocks */
#define FA_PAD 8   /* bf16 elements of padding per shared-memory row */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* Rows [t0, t0 + R) of a [T, ld] tensor, HD columns from `src` (row 0 of the
 * head's columns), into a shared tile [R][HD + FA_PAD]; rows >= T are zeros.
 * Every thread of the block issues its share of 16-byte copies. */
template <int HD, int R> __device__ __forceinline__ void tile_async(bf16 *dst, const bf16 *src, size_t ld, int t0, int T)
{
    constexpr int CH = HD / 8; /* 16-byte chunks per row */
    for (int i = threadIdx.x; i < R * CH; i += blockDim.x) {
        int r = i / CH, col = (i % CH) * 8, t = t0 + r;
        bool ok = t < T;
        cp_async16(dst + r * (HD + FA_PAD) + col, src + (size_t)(ok ? t : 0) * ld + col, ok);
    }
}

/* A fragment (16x16) of a row-major shared tile at rows r0.., columns k0.. */
template <int LD> __device__ __forceinline__ void ld_a(uint32_t a[4], const bf16 *tile, int r0, int k0)
{
    int l = threadIdx.x & 31, j = l >> 3, r = l & 7;
    ldsm_x4(a, tile + (r0 + r + (j & 1) * 8) * LD + k0 + (j >> 1) * 8);
}

/* B fragments of two n-tiles (n0, n0 + 8) at k-chunk k0 where B[k][n] =
 * tile[n][k] (the tile's rows are the n index: K rows for Q K^T):
 * b[0..1] for n0, b[2..3] for n0 + 8. */
template <int LD> __device__ __forceinline__ void ld_b_rows(uint32_t b[4], const bf16 *tile, int n0, int k0)
{
    int l = threadIdx.x & 31, j = l >> 3, r = l & 7;
    ldsm_x4(b, tile + (n0 + r + (j >> 1) * 8) * LD + k0 + (j & 1) * 8);
}

/* The same where B[k][n] = tile[k][n] (the tile's rows are the k index: V rows
 * for P V), through the transposing ldmatrix. */
template <int LD> __device__ __forceinline__ void ld_b_cols(uint32_t b[4], const bf16 *tile, int k0, int n0)
{
    int l = threadIdx.x & 31, j = l >> 3, r = l & 7;
    ldsm_x4_t(b, tile + (k0 + r + (j & 1) * 8) * LD + n0 + (j >> 1) * 8);
}

/* acc[NT][4] += A (16 x K, fragments a[K/16]) times B given as shared-tile rows
 * (ld_b_rows: the result's NT*8 columns are tile rows n0..) */
template <int LD, int K, int NT>
__device__ __forceinline__ void mma_rows(float acc[][4], const bf16 *A, int ar0, const bf16 *Bt, int bn0)
{
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t a[4];
        ld_a<LD>(a, A, ar0, kk * 16);
#pragma unroll
        for (int n = 0; n < NT / 2; n++) {
            uint32_t b[4];
            ld_b_rows<LD>(b, Bt, bn0 + n * 16, kk * 16);
            mma_bf16_16816(acc[2 * n], a, b);
            mma_bf16_16816(acc[2 * n + 1], a, b + 2);
        }
    }
}

/* acc[HD/8][4] += P (16 x K, register fragments p[K/16]) times the shared
 * tile [K][HD] (ld_b_cols) */
template <int LD, int K, int HD>
__device__ __forceinline__ void mma_cols(float acc[][4], const uint32_t p[][4], const bf16 *Bt)
{
#pragma unroll
    for (int kc = 0; kc < K / 16; kc++)
#pragma unroll
        for (int d = 0; d < HD / 16; d++) {
            uint32_t b[4];
            ld_b_cols<LD>(b, Bt, kc * 16, d * 16);
            mma_bf16_16816(acc[2 * d], p[kc], b);
            mma_bf16_16816(acc[2 * d + 1], p[kc], b + 2);
        }
}

/* C fragments (fp32, NT n-tiles of 8 columns) -> A fragments (bf16, NT/2
 * k-chunks of 16): the m16n8 accumulator layout is the m16k16 operand layout
 * of two adjacent n-tiles. */
template <int NT> __device__ __forceinline__ void c_to_a(uint32_t a[][4], const float s[][4])
{
#pragma unroll
    for (int n = 0; n < NT; n++) {
        a[n >> 1][(n & 1) * 2] = pack_bf16x2(s[n][0], s[n][1]);
        a[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(s[n][2], s[n][3]);
    }
}

/* Where a head's query, and its group's key (the value follows at + HD),
 * start in sequence b's rows of qkv [B, T, NG, Q+2, HD]. */
struct fa_head {
    size_t q, kv;
};
__device__ __forceinline__ fa_head fa_locate(int b, int h, int T, int NH, int NG, int HD)
{
    size_t row = (size_t)b * T * k_qkv_row(NH, NG, HD), q, k, v;
    k_qkv_offsets(h, NH, NG, HD, &q, &k, &v);
    return { row + q, row + k };
}

/* The dropout of one (sample, head) matrix: element (i, j) is kept with
 * k_dropout_mul(key, i * T + j, ...) */
struct fa_drop {
    uint64_t key;
    uint32_t th;
    float sc;
};
__device__ __forceinline__ fa_drop fa_drop_of(const k_dropout &d, int b, int h)
{
    return { k_dropout_row_key(d.key, d.row0 + b, d.head0 + h), k_dropout_threshold(d.p), k_dropout_scale(d.p) };
}
__device__ __forceinline__ float fa_mul(const fa_drop &d, int i, int j, int T)
{
    return k_dropout_mul(d.key, (uint64_t)i * T + j, d.th, d.sc);
}

/* The K/V stream of the forward and dQ kernels, two buffers deep: queues key
 * tile kt+1 (when there is one) into the other buffer, waits until tile kt (and
 * whatever was queued with it) has landed, and returns tile kt's buffer. K
 * starts at kv, V at kv + HD. */
template <int HD>
__device__ __forceinline__ int kv_stream_step(bf16 *Ks, bf16 *Vs, const bf16 *kv, size_t ld, int kt, int nkt, int T)
{
    constexpr int LD = HD + FA_PAD;
    int cur = kt & 1;
    if (kt + 1 < nkt) {
        tile_async<HD, FA_BK>(Ks + (cur ^ 1) * FA_BK * LD, kv, ld, (kt + 1) * FA_BK, T);
        tile_async<HD, FA_BK>(Vs + (cur ^ 1) * FA_BK * LD, kv + HD, ld, (kt + 1) * FA_BK, T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    return cur;
}

/* Forward: each warp owns FA_MT m-tiles of 16 query rows, (i * FA_WARPS +
 * warp) * 16 of the block's FA_MT * 64 rows, so every K/V fragment read from
 * shared memory feeds FA_MT products and each warp has FA_MT independent
 * chains of tensor-core work in flight (2 for head dim 64; 128 would spill). */
template <int HD> struct fa_fwd_mt { static constexpr int value = HD == 64 ? 2 : 1; }; /* HD 128: 1, no spills */

template <int HD> static size_t fwd_smem(void)
{
    return sizeof(bf16) * (fa_fwd_mt<HD>::value * FA_WARPS * 16 + 4 * FA_BK) * (HD + FA_PAD);
}

/* grid (query tiles of FA_MT*64 rows, B*NH), FA_WARPS*32 threads; sl2 = log2(e)/sqrt(HD) */
template <int HD, bool DROP>
__global__ void __launch_bounds__(FA_WARPS * 32) fa_fwd_k(bf16 *out, float *lse, const bf16 *qkv, const int32_t *doc,
                                                          int T, int NH, int NG, float sl2, k_dropout drop)
{
    constexpr int FA_MT = fa_fwd_mt<HD>::value, LD = HD + FA_PAD, QT = FA_MT * FA_WARPS * 16;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + QT * LD, *Vs = Ks + 2 * FA_BK * LD;
    /* the last query tiles have the most keys: start them first */
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = qt * QT;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    size_t ld = k_qkv_row(NH, NG, HD);
    fa_head at = fa_locate(b, h, T, NH, NG, HD);
    const bf16 *base = qkv + at.q, *kvb = qkv + at.kv;
    const int32_t *docb = doc ? doc + (size_t)b * T : nullptr;
    int kt0 = docb ? docb[q0] / FA_BK : 0; /* the block's first key tile */
    tile_async<HD, QT>(Qs, base, ld, q0, T);
    tile_async<HD, FA_BK>(Ks + (kt0 & 1) * FA_BK * LD, kvb, ld, kt0 * FA_BK, T);
    tile_async<HD, FA_BK>(Vs + (kt0 & 1) * FA_BK * LD, kvb + HD, ld, kt0 * FA_BK, T);
    cp_async_commit();
    fa_drop dr = {};
    if (DROP) dr = fa_drop_of(drop, b, h);

    float o[FA_MT][HD / 8][4], m[FA_MT][2], l[FA_MT][2];
    int rbase[FA_MT], lo[FA_MT][2]; /* first row of each m-tile; the first key of the thread's two rows */
#pragma unroll
    for (int i = 0; i < FA_MT; i++) {
        rbase[i] = q0 + (i * FA_WARPS + warp) * 16;
        for (int r = 0; r < 2; r++) {
            int t = rbase[i] + g + r * 8;
            lo[i][r] = docb && t < T ? docb[t] : 0;
        }
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
#pragma unroll
        for (int d = 0; d < HD / 8; d++) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;
    }
    int nkt = (q0 + QT - 1) / FA_BK + 1;
    for (int kt = kt0; kt < nkt; kt++) {
        int k0 = kt * FA_BK, cur = kv_stream_step<HD>(Ks, Vs, kvb, ld, kt, nkt, T); /* Q lands with tile kt0 */
        const bf16 *K = Ks + cur * FA_BK * LD, *V = Vs + cur * FA_BK * LD;

        /* S = Q K^T for every m-tile, each K fragment loaded once */
        float s[FA_MT][FA_BK / 8][4];
#pragma unroll
        for (int i = 0; i < FA_MT; i++)
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t a[FA_MT][4];
#pragma unroll
            for (int i = 0; i < FA_MT; i++) ld_a<LD>(a[i], Qs, rbase[i] - q0, kk * 16);
#pragma unroll
            for (int n = 0; n < FA_BK / 16; n++) {
                uint32_t bb[4];
                ld_b_rows<LD>(bb, K, n * 16, kk * 16);
#pragma unroll
                for (int i = 0; i < FA_MT; i++) {
                    mma_bf16_16816(s[i][2 * n], a[i], bb);
                    mma_bf16_16816(s[i][2 * n + 1], a[i], bb + 2);
                }
            }
        }

        uint32_t p[FA_MT][FA_BK / 16][4];
#pragma unroll
        for (int i = 0; i < FA_MT; i++) {
            /* scale to base 2, causal mask, running max; an m-tile wholly
             * before the tile's keys gets P = 0 (its rows see none of them) */
            int row0 = rbase[i] + g;
            bool diag = k0 + FA_BK - 1 > rbase[i];
            float mx[2] = { m[i][0], m[i][1] };
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = row0 + (e >> 1) * 8, key = k0 + n * 8 + 2 * c + (e & 1);
                    float v = s[i][n][e] * sl2;
                    if ((diag && key > row) || key < lo[i][e >> 1]) v = -INFINITY;
                    s[i][n][e] = v;
                    mx[e >> 1] = fmaxf(mx[e >> 1], v);
                }
            float alpha[2], mref[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                /* Without documents key 0 <= row, so mx is finite from the first
                 * tile on (alpha 0 there). A row whose document has not begun
                 * yet has mx = -inf: its exponentials, taken against 0, are 0. */
                mref[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
                alpha[r] = exp2f(m[i][r] - mref[r]);
                m[i][r] = mx[r];
                l[i][r] *= alpha[r];
            }
#pragma unroll
            for (int d = 0; d < HD / 8; d++) {
                o[i][d][0] *= alpha[0], o[i][d][1] *= alpha[0];
                o[i][d][2] *= alpha[1], o[i][d][3] *= alpha[1];
            }
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++) {
                float e0 = exp2f(s[i][n][0] - mref[0]), e1 = exp2f(s[i][n][1] - mref[0]);
                float e2 = exp2f(s[i][n][2] - mref[1]), e3 = exp2f(s[i][n][3] - mref[1]);
                uint32_t lo = pack_bf16x2(e0, e1), hi = pack_bf16x2(e2, e3);
                l[i][0] += bf16x2_lo(lo) + bf16x2_hi(lo);
                l[i][1] += bf16x2_lo(hi) + bf16x2_hi(hi);
                if (DROP) { /* the row sums keep P; P V takes P * mask */
                    int key = k0 + n * 8 + 2 * c;
                    lo = pack_bf16x2(e0 * fa_mul(dr, row0, key, T), e1 * fa_mul(dr, row0, key + 1, T));
                    hi = pack_bf16x2(e2 * fa_mul(dr, row0 + 8, key, T), e3 * fa_mul(dr, row0 + 8, key + 1, T));
                }
                p[i][n >> 1][(n & 1) * 2] = lo;
                p[i][n >> 1][(n & 1) * 2 + 1] = hi;
            }
        }
        /* O += P V for every m-tile, each V fragment loaded once */
#pragma unroll
        for (int kc = 0; kc < FA_BK / 16; kc++)
#pragma unroll
            for (int d = 0; d < HD / 16; d++) {
                uint32_t bb[4];
                ld_b_cols<LD>(bb, V, kc * 16, d * 16);
#pragma unroll
                for (int i = 0; i < FA_MT; i++) {
                    mma_bf16_16816(o[i][2 * d], p[i][kc], bb);
                    mma_bf16_16816(o[i][2 * d + 1], p[i][kc], bb + 2);
                }
            }
        __syncthreads(); /* this K/V buffer is free for the prefetch two tiles on */
    }
    size_t ldo = (size_t)NH * HD;
#pragma unroll
    for (int i = 0; i < FA_MT; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float lr = l[i][r];
            lr += __shfl_xor_sync(0xffffffffu, lr, 1);
            lr += __shfl_xor_sync(0xffffffffu, lr, 2);
            int t = rbase[i] + g + r * 8;
            if (t >= T) continue;
            float inv = 1.0f / lr;
            bf16 *dst = out + ((size_t)b * T + t) * ldo + (size_t)h * HD + 2 * c;
#pragma unroll
            for (int d = 0; d < HD / 8; d++)
                *reinterpret_cast<uint32_t *>(dst + d * 8) = pack_bf16x2(o[i][d][2 * r] * inv, o[i][d][2 * r + 1] * inv);
            if (c == 0) lse[(size_t)bh * T + t] = (m[i][r] + log2f(lr)) * FA_LN2;
        }
}

/* D[bh, t] = sum_d dout[t, h, d] * out[t, h, d]: the softmax gradient's row
 * term. HD/8 lanes per row, 8 elements each through 16-byte loads. */
template <int HD> __global__ void fa_rowdot_k(float *D, const bf16 *dout, const bf16 *out, int B, int T, int NH)
{
    constexpr int L = HD / 8; /* lanes per row: 8 or 16, rows never straddle a warp */
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / L, n = (size_t)B * NH * T;
    int j = threadIdx.x % L;
    float s = 0.0f;
    if (row < n) {
        int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
        size_t off = ((size_t)b * T + t) * NH * HD + (size_t)h * HD + j * 8;
        float x[8], y[8];
        ld8(dout + off, x);
        ld8(out + off, y);
#pragma unroll
        for (int k = 0; k < 8; k++) s += x[k] * y[k];
    }
    for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < n && j == 0) D[row] = s;
}

/* query rows per tile in the dK/dV kernel: fewer for HD 128 to keep the
 * warp's dK, dV, S^T and dP^T accumulators in registers */
template <int HD> struct fa_bwd_q_rows { static constexpr int value = HD == 64 ? 64 : 32; };

template <int HD> static size_t bwd_kv_smem(void)
{
    constexpr int BQ = fa_bwd_q_rows<HD>::value;
    return sizeof(bf16) * (2 * FA_WARPS * 16 + 4 * BQ) * (HD + FA_PAD) + sizeof(float) * 4 * BQ + sizeof(int) * 2 * BQ;
}

/* Stores the thread's rows of acc (times mul) into dqkv's HD columns that
 * start at `col` of sequence row 0 (a fa_locate offset), rows row0, row0 + 8. */
template <int HD>
__device__ __forceinline__ void store_rows(bf16 *dqkv, const float acc[][4], float mul, size_t col, int row0, int T,
                                           size_t ld)
{
    int c = (threadIdx.x & 31) & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t = row0 + i * 8;
        if (t >= T) continue;
        bf16 *dst = dqkv + col + (size_t)t * ld + 2 * c;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *reinterpret_cast<uint32_t *>(dst + d * 8) = pack_bf16x2(acc[d][2 * i] * mul, acc[d][2 * i + 1] * mul);
    }
}

/* dK, dV of one 64-key tile of one key/value group: grid (key tiles, B*NG).
 * Each warp owns 16 keys; products are transposed (rows are keys) so each warp
 * owns its outputs. The group's Q heads come one after another, each walking
 * the query tiles the causal mask leaves, into the same accumulators. */
template <int HD, bool DROP>
__global__ void __launch_bounds__(FA_WARPS * 32) fa_bwd_kv_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                             const float *lse, const float *D, const int32_t *doc,
                                                             int T, int NH, int NG, float scale, float sl2,
                                                             k_dropout drop)
{
    constexpr int LD = HD + FA_PAD, KT = FA_WARPS * 16, BQ = fa_bwd_q_rows<HD>::value;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + KT * LD, *Qs = Vs + KT * LD, *Os = Qs + 2 * BQ * LD;
    float *Ls = (float *)(Os + 2 * BQ * LD), *Ds = Ls + 2 * BQ;
    int *Lo = (int *)(Ds + 2 * BQ); /* each query row's first key (documents) */
    /* the first key tiles meet the most queries: start them first */
    int kt = blockIdx.x, bg = blockIdx.y, b = bg / NG, grp = bg % NG, Qn = NH / NG, k0 = kt * KT;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    size_t ld = k_qkv_row(NH, NG, HD), ldo = (size_t)NH * HD;
    const fa_head g0 = fa_locate(b, grp * Qn, T, NH, NG, HD);
    const int32_t *docb = doc ? doc + (size_t)b * T : nullptr;
    int qt0 = k0 / BQ, nqt = (T + BQ - 1) / BQ;
    if (docb) { /* queries from the first whose document starts past these keys on see none of them */
        int klast = min(k0 + KT, T) - 1, lo = klast + 1, hi = T;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (docb[mid] > klast) hi = mid;
            else lo = mid + 1;
        }
        nqt = min(nqt, (lo + BQ - 1) / BQ);
    }

    tile_async<HD, KT>(Ks, qkv + g0.kv, ld, k0, T);
    tile_async<HD, KT>(Vs, qkv + g0.kv + HD, ld, k0, T);

    float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
        dk[d][0] = dk[d][1] = dk[d][2] = dk[d][3] = 0.0f;
        dv[d][0] = dv[d][1] = dv[d][2] = dv[d][3] = 0.0f;
    }
    int key0 = k0 + warp * 16 + g; /* this thread's keys: key0 and key0 + 8 */
    for (int j = 0; j < Qn; j++) {
        int h = grp * Qn + j, bh = b * NH + h;
        const bf16 *base = qkv + fa_locate(b, h, T, NH, NG, HD).q;
        const bf16 *obase = dout + (size_t)b * T * ldo + (size_t)h * HD;
        const float *L = lse + (size_t)bh * T, *Dr = D + (size_t)bh * T;
        fa_drop dr = {};
        if (DROP) dr = fa_drop_of(drop, b, h);
        /* this head's first query tile (with K and V, for the first head); the
         * previous head's last step ended in a barrier, so buffer 0 is free */
        tile_async<HD, BQ>(Qs, base, ld, qt0 * BQ, T);
        tile_async<HD, BQ>(Os, obase, ldo, qt0 * BQ, T);
        for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
            int t = qt0 * BQ + i;
            Ls[i] = t < T ? L[t] * FA_LOG2E : INFINITY; /* a row past T: P = 0 */
            Ds[i] = t < T ? Dr[t] : 0.0f;
            Lo[i] = docb && t < T ? docb[t] : 0;
        }
        cp_async_commit();
        for (int qt = qt0; qt < nqt; qt++) {
            int cur = (qt - qt0) & 1, q0 = qt * BQ;
            if (qt + 1 < nqt) {
                int nb = cur ^ 1, n0 = q0 + BQ;
                tile_async<HD, BQ>(Qs + nb * BQ * LD, base, ld, n0, T);
                tile_async<HD, BQ>(Os + nb * BQ * LD, obase, ldo, n0, T);
                for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
                    int t = n0 + i;
                    Ls[nb * BQ + i] = t < T ? L[t] * FA_LOG2E : INFINITY;
                    Ds[nb * BQ + i] = t < T ? Dr[t] : 0.0f;
                    Lo[nb * BQ + i] = docb && t < T ? docb[t] : 0;
                }
            }
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads();
            const bf16 *Q = Qs + cur * BQ * LD, *dO = Os + cur * BQ * LD;
            const float *Lc = Ls + cur * BQ, *Dc = Ds + cur * BQ;
            const int *Loc = Lo + cur * BQ;

            float st[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
                st[n][0] = st[n][1] = st[n][2] = st[n][3] = dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
            mma_rows<LD, HD, BQ / 8>(st, Ks, warp * 16, Q, 0); /* S^T = K Q^T */
            bool diag = q0 < k0 + KT;
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = key0 + (e >> 1) * 8, i = n * 8 + 2 * c + (e & 1);
                    float p = exp2f(st[n][e] * sl2 - Lc[i]);
                    st[n][e] = (diag && key > q0 + i) || key < Loc[i] ? 0.0f : p; /* P^T */
                }
            uint32_t pa[BQ / 16][4];
            if (DROP) { /* dV takes (P M)^T */
#pragma unroll
                for (int n = 0; n < BQ / 8; n++) {
                    int i = q0 + n * 8 + 2 * c;
                    pa[n >> 1][(n & 1) * 2] = pack_bf16x2(st[n][0] * fa_mul(dr, i, key0, T),
                                                          st[n][1] * fa_mul(dr, i + 1, key0, T));
                    pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(st[n][2] * fa_mul(dr, i, key0 + 8, T),
                                                              st[n][3] * fa_mul(dr, i + 1, key0 + 8, T));
                }
            } else {
                c_to_a<BQ / 8>(pa, st);
            }
            mma_cols<LD, BQ, HD>(dv, pa, dO);                  /* dV += P^T dO */
            mma_rows<LD, HD, BQ / 8>(dpt, Vs, warp * 16, dO, 0); /* dP^T = V dO^T */
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = n * 8 + 2 * c + (e & 1);
                    float dp = dpt[n][e];
                    if (DROP) dp *= fa_mul(dr, q0 + i, key0 + (e >> 1) * 8, T);
                    dpt[n][e] = st[n][e] * (dp - Dc[i]); /* dS^T */
                }
            c_to_a<BQ / 8>(pa, dpt);
            mma_cols<LD, BQ, HD>(dk, pa, Q); /* dK += dS^T Q (scaled at the store) */
            __syncthreads();
        }
    }
    store_rows<HD>(dqkv, dk, scale, g0.kv, key0, T, ld);
    store_rows<HD>(dqkv, dv, 1.0f, g0.kv + HD, key0, T, ld);
}

template <int HD> static size_t bwd_q_smem(void) { return sizeof(bf16) * (2 * FA_WARPS * 16 + 4 * FA_BK) * (HD + FA_PAD); }

/* dQ of one 64-query tile: grid (query tiles, B*NH); each warp owns 16 queries. */
template <int HD, bool DROP>
__global__ void __launch_bounds__(FA_WARPS * 32) fa_bwd_q_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                            const float *lse, const float *D, const int32_t *doc,
                                                            int T, int NH, int NG, float scale, float sl2,
                                                            k_dropout drop)
{
    constexpr int LD = HD + FA_PAD, QT = FA_WARPS * 16;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Os = Qs + QT * LD, *Ks = Os + QT * LD, *Vs = Ks + 2 * FA_BK * LD;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = qt * QT;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    size_t ld = k_qkv_row(NH, NG, HD), ldo = (size_t)NH * HD;
    fa_head at = fa_locate(b, h, T, NH, NG, HD);
    const bf16 *base = qkv + at.q, *kvb = qkv + at.kv;
    tile_async<HD, QT>(Qs, base, ld, q0, T);
    tile_async<HD, QT>(Os, dout + (size_t)b * T * ldo + (size_t)h * HD, ldo, q0, T);
    const int32_t *docb = doc ? doc + (size_t)b * T : nullptr;
    int kt0 = docb ? docb[q0] / FA_BK : 0; /* the block's first key tile */
    tile_async<HD, FA_BK>(Ks + (kt0 & 1) * FA_BK * LD, kvb, ld, kt0 * FA_BK, T);
    tile_async<HD, FA_BK>(Vs + (kt0 & 1) * FA_BK * LD, kvb + HD, ld, kt0 * FA_BK, T);
    cp_async_commit();
    fa_drop dr = {};
    if (DROP) dr = fa_drop_of(drop, b, h);

    int row0 = q0 + warp * 16 + g;
    float l2[2], Dv[2];
    int lo[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t = row0 + i * 8;
        l2[i] = t < T ? lse[(size_t)bh * T + t] * FA_LOG2E : INFINITY;
        Dv[i] = t < T ? D[(size_t)bh * T + t] : 0.0f;
        lo[i] = docb && t < T ? docb[t] : 0;
    }
    float dq[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
    int nkt = (q0 + QT - 1) / FA_BK + 1;
    for (int kt = kt0; kt < nkt; kt++) {
        int k0 = kt * FA_BK, cur = kv_stream_step<HD>(Ks, Vs, kvb, ld, kt, nkt, T); /* Q, dO land with tile kt0 */
        const bf16 *K = Ks + cur * FA_BK * LD, *V = Vs + cur * FA_BK * LD;
        float s[FA_BK / 8][4], dp[FA_BK / 8][4];
#pragma unroll
        for (int n = 0; n < FA_BK / 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
        mma_rows<LD, HD, FA_BK / 8>(s, Qs, warp * 16, K, 0);  /* S = Q K^T */
        mma_rows<LD, HD, FA_BK / 8>(dp, Os, warp * 16, V, 0); /* dP = dO V^T */
        bool diag = k0 + FA_BK - 1 > q0 + warp * 16;
#pragma unroll
        for (int n = 0; n < FA_BK / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + (e >> 1) * 8, key = k0 + n * 8 + 2 * c + (e & 1), i = e >> 1;
                float p = (diag && key > row) || key < lo[i] ? 0.0f : exp2f(s[n][e] * sl2 - l2[i]);
                float d = DROP ? dp[n][e] * fa_mul(dr, row, key, T) : dp[n][e];
                s[n][e] = p * (d - Dv[i]); /* dS */
            }
        uint32_t sa[FA_BK / 16][4];
        c_to_a<FA_BK / 8>(sa, s);
        mma_cols<LD, FA_BK, HD>(dq, sa, K); /* dQ += dS K (scaled at the store) */
        __syncthreads();
    }
    store_rows<HD>(dqkv, dq, scale, at.q, row0, T, ld);
}

static void check_hd(const char *what, int HD)
{
    if (HD == 64 || HD == 128) return;
    fprintf(stderr, "kernels/cuda: %s: head dim %d is not supported (64 or 128)\n", what, HD);
    exit(EXIT_FAILURE);
}

template <int HD, bool DROP>
static void flash_forward(bf16 *out, float *lse, const bf16 *qkv, const int32_t *doc, int B, int T, int NH, int NG,
                          const k_dropout &d)
{
    size_t smem = fwd_smem<HD>();
    cudaCheck(cudaFuncSetAttribute(fa_fwd_k<HD, DROP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    constexpr int QT = fa_fwd_mt<HD>::value * FA_WARPS * 16;
    dim3 grid((T + QT - 1) / QT, B * NH);
    fa_fwd_k<HD, DROP><<<grid, FA_WARPS * 32, smem, kcu_stream()>>>(out, lse, qkv, doc, T, NH, NG,
                                                                    FA_LOG2E / sqrtf((float)HD), d);
    kcu_launched();
}

template <int HD, bool DROP>
static void flash_backward(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out, const float *lse,
                           const int32_t *doc, int B, int T, int NH, int NG, const k_dropout &d)
{
    size_t n = (size_t)B * NH * T;
    float *D = (float *)kcu_scratch(n * sizeof(float));
    fa_rowdot_k<HD><<<(unsigned)((n * (HD / 8) + 255) / 256), 256, 0, kcu_stream()>>>(D, dout, out, B, T, NH);
    kcu_launched();
    float scale = 1.0f / sqrtf((float)HD), sl2 = FA_LOG2E * scale;
    size_t smem = bwd_kv_smem<HD>();
    cudaCheck(cudaFuncSetAttribute(fa_bwd_kv_k<HD, DROP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned tiles = (unsigned)((T + FA_WARPS * 16 - 1) / (FA_WARPS * 16));
    fa_bwd_kv_k<HD, DROP><<<dim3(tiles, B * NG), FA_WARPS * 32, smem, kcu_stream()>>>(dqkv, dout, qkv, lse, D, doc, T,
                                                                                      NH, NG, scale, sl2, d);
    kcu_launched();
    smem = bwd_q_smem<HD>();
    cudaCheck(cudaFuncSetAttribute(fa_bwd_q_k<HD, DROP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fa_bwd_q_k<HD, DROP><<<dim3(tiles, B * NH), FA_WARPS * 32, smem, kcu_stream()>>>(dqkv, dout, qkv, lse, D, doc, T,
                                                                                     NH, NG, scale, sl2, d);
    kcu_launched();
}

static void check_shape(const char *what, int NH, int NG)
{
    if (NG >= 1 && NH % NG == 0) return;
    fprintf(stderr, "kernels/cuda: %s: %d heads do not form %d key/value groups\n", what, NH, NG);
    exit(EXIT_FAILURE);
}

void kcu_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int32_t *doc, int B, int T,
                                int NH, int NG, int HD, const k_dropout *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    check_hd("attention_forward_bf16", HD);
    check_shape("attention_forward_bf16", NH, NG);
    k_dropout d = drop && drop->p > 0.0f ? *drop : k_dropout{};
    bool on = d.p > 0.0f;
    if (HD == 64)
        (on ? flash_forward<64, true> : flash_forward<64, false>)(as_bf(out), lse, as_bf(qkv), doc, B, T, NH, NG, d);
    else (on ? flash_forward<128, true> : flash_forward<128, false>)(as_bf(out), lse, as_bf(qkv), doc, B, T, NH, NG, d);
}

void kcu_attention_backward_bf16(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                 const float *lse, const int32_t *doc, int B, int T, int NH, int NG, int HD,
                                 const k_dropout *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    check_hd("attention_backward_bf16", HD);
    check_shape("attention_backward_bf16", NH, NG);
    k_dropout d = drop && drop->p > 0.0f ? *drop : k_dropout{};
    bool on = d.p > 0.0f;
    if (HD == 64)
        (on ? flash_backward<64, true> : flash_backward<64, false>)(as_bf(dqkv), as_bf(dout), as_bf(qkv), as_bf(out),
                                                                    lse, doc, B, T, NH, NG, d);
    else
        (on ? flash_backward<128, true> : flash_backward<128, false>)(as_bf(dqkv), as_bf(dout), as_bf(qkv),
                                                                      as_bf(out), lse, doc, B, T, NH, NG, d);
}
