/* elementwise: GELU (tanh form), squared ReLU, residual add, in-place add and scale, the
 * fp32 <-> bf16 casts, and the deterministic column sum used for bias
 * gradients. All memory-bound: one read of each input, one write. */
#include "kcuda.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define EW_BLOCK 256

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void gelu_fwd_k(T *out, const T *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp + i);
        stf(out + i, 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))));
    }
}

template <typename T> __global__ void gelu_bwd_k(T *dinp, const T *inp, const T *dout, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp + i);
        float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        stf(dinp + i, g * ldf(dout + i)); /* dinp may alias dout: read before write */
    }
}

/* squared ReLU, 8 elements per thread through 16-byte accesses (n8 = n / 8):
 * out = relu(x)^2, and in backward dinp = 2 relu(x) dout */
template <typename T> __global__ void relu2_fwd8_k(T *out, const T *inp, size_t n8)
{
    GRID_STRIDE(i, n8)
    {
        float x[8];
        ld8(inp + i * 8, x);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = x[k] > 0.0f ? x[k] * x[k] : 0.0f;
        st8(out + i * 8, x);
    }
}

template <typename T> __global__ void relu2_bwd8_k(T *dinp, const T *inp, const T *dout, size_t n8)
{
    GRID_STRIDE(i, n8)
    {
        float x[8], d[8];
        ld8(inp + i * 8, x);
        ld8(dout + i * 8, d);
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] *= x[k] > 0.0f ? 2.0f * x[k] : 0.0f;
        st8(dinp + i * 8, d);
    }
}

template <typename T> __global__ void relu2_fwd_k(T *out, const T *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp + i);
        stf(out + i, x > 0.0f ? x * x : 0.0f);
    }
}

template <typename T> __global__ void relu2_bwd_k(T *dinp, const T *inp, const T *dout, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp + i);
        stf(dinp + i, (x > 0.0f ? 2.0f * x : 0.0f) * ldf(dout + i)); /* dinp may alias dout */
    }
}

template <typename T> __global__ void add_k(T *out, const T *a, const T *b, size_t n)
{
    GRID_STRIDE(i, n) stf(out + i, ldf(a + i) + ldf(b + i));
}

/* The same two, 8 elements per thread through 16-byte accesses (n8 = n / 8). */
template <typename T> __global__ void gelu_bwd8_k(T *dinp, const T *inp, const T *dout, size_t n8)
{
    GRID_STRIDE(i, n8)
    {
        float x[8], d[8];
        ld8(inp + i * 8, x);
        ld8(dout + i * 8, d);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float th = tanhf(GELU_K * (x[k] + 0.044715f * x[k] * x[k] * x[k]));
            float du = GELU_K * (1.0f + 3.0f * 0.044715f * x[k] * x[k]);
            d[k] *= 0.5f * (1.0f + th) + 0.5f * x[k] * (1.0f - th * th) * du;
        }
        st8(dinp + i * 8, d);
    }
}

template <typename T> __global__ void add8_k(T *out, const T *a, const T *b, size_t n8)
{
    GRID_STRIDE(i, n8)
    {
        float x[8], y[8];
        ld8(a + i * 8, x);
        ld8(b + i * 8, y);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] += y[k];
        st8(out + i * 8, x);
    }
}

__global__ void scale_k(float *x, float s, size_t n)
{
    GRID_STRIDE(i, n) x[i] *= s;
}

template <typename D, typename S> __global__ void cast_k(D *dst, const S *src, size_t n)
{
    GRID_STRIDE(i, n) stf(dst + i, ldf(src + i));
}

/* ---- deterministic column sums ----
 * Rows are cut into chunks; block (x, y) sums column strip x (8 columns a thread) over chunk y into
 * part[y][c]. With C % 8 == 0 each thread takes 8 columns through 16-byte loads over a chunk of `rows` rows, its loads issued
 * COLSUM_INFLIGHT rows at a time before they are added (in row order). Chunks are COLSUM_ROWS8 rows, halved
 * (down to COLSUM_INFLIGHT) while the grid would have fewer than COLSUM_THREADS threads: a narrow sum (the
 * 1.5B model's 1600 columns over 8192 rows: 25,600 threads at 64 rows, under 200 an SM) then waits for
 * memory 2 times a thread, not 8, with ~100 thousand threads' loads in flight. The chunk size depends only
 * on N and C.
 * The chunks' partials are then added in the same kernel, in two levels, each done by the block that
 * arrives last (kcu_arrive_last): the chunks of column strip x come in groups of `group` (about the square
 * root of their count); the last block of a group adds the group's partials in chunk order into a group
 * sum, and the last of the strip's groups to be summed adds the group sums in group order into dst. So a
 * sum is one launch, not a part kernel and a finish kernel (GPT-2 on an H200: the finish 3.5 us plus a
 * launch gap of 1.7, 24 times a step; the 1.5B model 4.4 and 1.4 us, 768 times a step), and the order of the
 * additions depends only on N and C. Without counters (kcu_counters) a second kernel finishes
 * (kcu_colsum_finish); so it does for C % 8 != 0, whose part kernel cuts the rows into at most
 * COLSUM_PARTS chunks, a thread a column, 256 columns a block. */
#define COLSUM_PARTS 64
#define COLSUM_ROWS8 64
#define COLSUM_INFLIGHT 8
#define COLSUM_THREADS 65536

/* s[8] = the sum over rows [0, n) of the 8 floats load(row, v) gives, in row order, the loads of
 * COLSUM_INFLIGHT rows issued before they are added */
template <typename L> __device__ __forceinline__ void colsum8_rows(float s[8], int n, L load)
{
#pragma unroll
    for (int k = 0; k < 8; k++) s[k] = 0.0f;
    int r = 0;
    for (; r + COLSUM_INFLIGHT <= n; r += COLSUM_INFLIGHT) {
        float v[COLSUM_INFLIGHT][8];
#pragma unroll
        for (int j = 0; j < COLSUM_INFLIGHT; j++) load(r + j, v[j]);
#pragma unroll
        for (int j = 0; j < COLSUM_INFLIGHT; j++)
#pragma unroll
            for (int k = 0; k < 8; k++) s[k] += v[j][k];
    }
    for (; r < n; r++) {
        float v[8];
        load(r, v);
#pragma unroll
        for (int k = 0; k < 8; k++) s[k] += v[k];
    }
}

/* part holds gridDim.y chunk rows then their group sums (rows of C); cnt: a counter a group and one for the
 * group sums, per column strip (NULL: partials only, kcu_colsum_finish adds them) */
template <typename T>
__global__ void colsum8_k(float *dst, float *part, unsigned *cnt, const T *src, int N, int C, int rows, int group)
{
    int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    int parts = gridDim.y, groups = (parts + group - 1) / group;
    float s[8];
    if (c < C) {
        int r0 = blockIdx.y * rows;
        const T *p = src + (size_t)r0 * C + c;
        colsum8_rows(s, min(N - r0, rows), [&](int r, float v[8]) { ld8(p + (size_t)r * C, v); });
        st8(part + (size_t)blockIdx.y * C + c, s);
    }
    if (!cnt) return;
    unsigned *strip = cnt + (size_t)blockIdx.x * (groups + 1);
    int g = blockIdx.y / group, p0 = g * group, n = min(parts - p0, group);
    if (!kcu_arrive_last(strip + g, (unsigned)n)) return;
    float *sums = part + (size_t)parts * C;
    if (c < C) { /* the others' partials, through L2 */
        const float *q = part + (size_t)p0 * C + c;
        colsum8_rows(s, n, [&](int r, float v[8]) { ldcg8(q + (size_t)r * C, v); });
        st8(sums + (size_t)g * C + c, s);
    }
    if (!kcu_arrive_last(strip + groups, (unsigned)groups)) return;
    if (c < C) {
        colsum8_rows(s, groups, [&](int r, float v[8]) { ldcg8(sums + (size_t)r * C + c, v); });
#pragma unroll
        for (int k = 0; k < 8; k++) dst[c + k] += s[k]; /* dst: any float alignment */
    }
}

template <typename T>
__global__ void colsum_part_k(float *part, const T *src, int N, int C, int rows_per)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    float s = 0.0f;
    for (int r = r0; r < r1; r++) s += ldf(src + (size_t)r * C + c);
    part[(size_t)blockIdx.y * C + c] = s;
}

/* dst[c] += sum over p of part[p][c] for c < C, and with dst2 (part rows of
 * 2C: the LayerNorm dw/db finish) dst2[c] += the same of part[p][C + c], with
 * dst3 too (rows of 3C: and a bias sum) dst3[c] += that of part[p][2C + c]. A
 * block of FIN_COLS columns x FIN_GROUPS groups: group g sums parts g, g +
 * FIN_GROUPS, ... in order, then the groups' sums are added pairwise in a fixed
 * tree: the order depends only on `parts`. The partials are a few MB (GPT-2's
 * LayerNorm: ~1000 blocks x 2C floats) read once: 16 columns a block give
 * twice the blocks of 32 (96 for GPT-2's 2C = 1536) and 64 groups keep 16
 * loads a thread where 8 groups of 32 columns kept 128 in one chain (5.8 us a
 * call on an H200, bench/results/gpu.md). */
#define FIN_COLS 16
#define FIN_GROUPS 64
__global__ void __launch_bounds__(FIN_COLS *FIN_GROUPS) colsum_finish_k(float *dst, float *dst2, float *dst3,
                                                                        const float *part, int parts, int C, int W)
{
    __shared__ float sh[FIN_GROUPS][FIN_COLS + 1];
    int i = threadIdx.x % FIN_COLS, g = threadIdx.x / FIN_COLS;
    int c = blockIdx.x * FIN_COLS + i; /* in [0, W) */
    float s = 0.0f;
    if (c < W) { /* four loads issued before they are added, in order */
        int p = g;
        for (; p + 3 * FIN_GROUPS < parts; p += 4 * FIN_GROUPS) {
            float a0 = part[(size_t)p * W + c], a1 = part[(size_t)(p + FIN_GROUPS) * W + c];
            float a2 = part[(size_t)(p + 2 * FIN_GROUPS) * W + c], a3 = part[(size_t)(p + 3 * FIN_GROUPS) * W + c];
            s += a0;
            s += a1;
            s += a2;
            s += a3;
        }
        for (; p < parts; p += FIN_GROUPS) s += part[(size_t)p * W + c];
    }
    sh[g][i] = s;
    __syncthreads();
    for (int half = FIN_GROUPS / 2; half > 0; half /= 2) {
        if (g < half) sh[g][i] += sh[g + half][i];
        __syncthreads();
    }
    if (g == 0 && c < W) {
        if (c < C) dst[c] += sh[0][i];
        else if (c < 2 * C) dst2[c - C] += sh[0][i];
        else dst3[c - 2 * C] += sh[0][i];
    }
}

void kcu_colsum_finish(float *dst, float *dst2, float *dst3, const float *part, int parts, int C)
{
    int W = (1 + (dst2 != nullptr) + (dst3 != nullptr)) * C;
    colsum_finish_k<<<(W + FIN_COLS - 1) / FIN_COLS, FIN_COLS * FIN_GROUPS, 0, kcu_stream()>>>(dst, dst2, dst3, part,
                                                                                            parts, C, W);
    kcu_launched();
}

template <typename T> void kcu_colsum_acc(float *dst, const T *src, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    if (vec8_ok((size_t)C, src)) {
        int rows = COLSUM_ROWS8;
        while (rows > COLSUM_INFLIGHT && (size_t)(C / 8) * (size_t)((N + rows - 1) / rows) < COLSUM_THREADS) rows /= 2;
        int parts = (N + rows - 1) / rows, threads = C / 8 < 128 ? C / 8 : 128;
        int group = 1;
        while (group * group < parts) group++;
        int groups = (parts + group - 1) / group;
        dim3 grid((C / 8 + threads - 1) / threads, parts);
        unsigned *cnt = kcu_counters((size_t)grid.x * (groups + 1));
        float *part = (float *)kcu_scratch(sizeof(float) * (size_t)(parts + groups) * C);
        colsum8_k<T><<<grid, threads, 0, kcu_stream()>>>(dst, part, cnt, src, N, C, rows, group);
        kcu_launched();
        if (!cnt) kcu_colsum_finish(dst, NULL, NULL, part, parts, C);
        return;
    }
    int rows_per = (N + COLSUM_PARTS - 1) / COLSUM_PARTS;
    int parts = (N + rows_per - 1) / rows_per;
    float *part = (float *)kcu_scratch(sizeof(float) * (size_t)parts * C);
    dim3 grid((C + 255) / 256, parts);
    colsum_part_k<T><<<grid, 256, 0, kcu_stream()>>>(part, src, N, C, rows_per);
    kcu_launched();
    kcu_colsum_finish(dst, NULL, NULL, part, parts, C);
}
template void kcu_colsum_acc<float>(float *, const float *, int, int);
template void kcu_colsum_acc<bf16>(float *, const bf16 *, int, int);

/* ---- table entries ---- */

template <typename... P, typename... A> static void launch_ew(void (*kernel)(P...), size_t n, A... args)
{
    if (n == 0) return;
    kernel<<<kcu_grid(n, EW_BLOCK), EW_BLOCK, 0, kcu_stream()>>>(args...);
    kcu_launched();
}

void kcu_gelu_forward(float *out, const float *inp, size_t n) { launch_ew(gelu_fwd_k<float>, n, out, inp, n); }
void kcu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    if (vec8_ok(n, dinp, inp, dout)) launch_ew(gelu_bwd8_k<float>, n / 8, dinp, inp, dout, n / 8);
    else launch_ew(gelu_bwd_k<float>, n, dinp, inp, dout, n);
}
void kcu_relu2_forward(float *out, const float *inp, size_t n)
{
    if (vec8_ok(n, out, inp, inp)) launch_ew(relu2_fwd8_k<float>, n / 8, out, inp, n / 8);
    else launch_ew(relu2_fwd_k<float>, n, out, inp, n);
}
void kcu_relu2_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    if (vec8_ok(n, dinp, inp, dout)) launch_ew(relu2_bwd8_k<float>, n / 8, dinp, inp, dout, n / 8);
    else launch_ew(relu2_bwd_k<float>, n, dinp, inp, dout, n);
}
void kcu_relu2_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n)
{
    if (vec8_ok(n, out, inp, inp)) launch_ew(relu2_fwd8_k<bf16>, n / 8, as_bf(out), as_bf(inp), n / 8);
    else launch_ew(relu2_fwd_k<bf16>, n, as_bf(out), as_bf(inp), n);
}
void kcu_relu2_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n)
{
    if (vec8_ok(n, dinp, inp, dout))
        launch_ew(relu2_bwd8_k<bf16>, n / 8, as_bf(dinp), as_bf(inp), as_bf(dout), n / 8);
    else launch_ew(relu2_bwd_k<bf16>, n, as_bf(dinp), as_bf(inp), as_bf(dout), n);
}
void kcu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    if (vec8_ok(n, out, a, b)) launch_ew(add8_k<float>, n / 8, out, a, b, n / 8);
    else launch_ew(add_k<float>, n, out, a, b, n);
}
void kcu_add_inplace(float *acc, const float *x, size_t n) { kcu_residual_forward(acc, acc, x, n); }
void kcu_scale(float *x, float s, size_t n) { launch_ew(scale_k, n, x, s, n); }

void kcu_to_bf16(uint16_t *dst, const float *src, size_t n) { launch_ew(cast_k<bf16, float>, n, as_bf(dst), src, n); }
void kcu_from_bf16(float *dst, const uint16_t *src, size_t n) { launch_ew(cast_k<float, bf16>, n, dst, as_bf(src), n); }

void kcu_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n)
{
    launch_ew(gelu_fwd_k<bf16>, n, as_bf(out), as_bf(inp), n);
}
void kcu_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n)
{
    if (vec8_ok(n, dinp, inp, dout)) launch_ew(gelu_bwd8_k<bf16>, n / 8, as_bf(dinp), as_bf(inp), as_bf(dout), n / 8);
    else launch_ew(gelu_bwd_k<bf16>, n, as_bf(dinp), as_bf(inp), as_bf(dout), n);
}
void kcu_residual_forward_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n)
{
    if (vec8_ok(n, out, a, b)) launch_ew(add8_k<bf16>, n / 8, as_bf(out), as_bf(a), as_bf(b), n / 8);
    else launch_ew(add_k<bf16>, n, as_bf(out), as_bf(a), as_bf(b), n);
}
void kcu_add_inplace_bf16(uint16_t *acc, const uint16_t *x, size_t n) { kcu_residual_forward_bf16(acc, acc, x, n); }
