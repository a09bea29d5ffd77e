/* kcuda: shared pieces of the CUDA backend's .cu files (not a public header).
 *
 * Every kernel here is written once over its storage type T (float or bf16)
 * and computes in fp32: ldf/stf convert at the load and the store, so the
 * fp32 entry and the *_bf16 entry of an op are the same code. Launches go on
 * kcu_stream() and are followed by kcu_launched() (cudaGetLastError). */
#ifndef ATOLL_KCUDA_CUH
#define ATOLL_KCUDA_CUH

#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>

extern "C" {
#include "kernels.h"
}
#include "cuda_check.h"
#include "k_cuda.h"

typedef __nv_bfloat16 bf16;

/* ---- backend state (memory.cu) ---- */
cudaStream_t kcu_stream(void);
cublasHandle_t kcu_cublas(void);
cublasLtHandle_t kcu_cublaslt(void);
void *kcu_workspace(size_t *bytes);
/* The device's multiprocessor count (grids sized to fill it). */
int kcu_sms(void);
/* Reduction scratch owned by the backend, grown on demand (the first step sets
 * its size; later steps reuse it). Valid until the next kcu_scratch call. */
void *kcu_scratch(size_t bytes);
#define kcu_launched() cudaCheck(cudaGetLastError())
/* Arrival counters (kcu_arrive_last) owned by the backend: zero, for kernels on kcu_stream() only, and each
 * kernel leaves those it used zero again. NULL when n are more than it has: the caller goes without. */
unsigned *kcu_counters(size_t n);
/* The weight gradients' stream (memory.cu, k_cuda_overlap_wgrad): _fork
 * returns it, ordered after the work queued on kcu_stream() so far, and its
 * own cuBLASLt workspace, or NULL when it is off; a caller that queued there
 * then calls _queued. _join: kcu_stream() waits for all queued there so far. */
cudaStream_t kcu_wgrad_fork(void **ws, size_t *ws_bytes);
void kcu_wgrad_queued(void);
void kcu_wgrad_join(void);
/* The host waits for everything queued on the stream, and the reads queued
 * by to_host_later land (memory.cu). Every wait of the backend goes here
 * but kcu_reads_land's. */
void kcu_wait(void);
/* A wait for what is queued now, not for what is queued after: kcu_reads_mark
 * notes the point (and the reads later queued before it), kcu_reads_land
 * waits for it alone and lands those reads (memory.cu). One mark at a time. */
void kcu_reads_mark(void);
void kcu_reads_land(void);
/* While a graph is being captured (k_cuda_graph_begin): records why the
 * capture cannot hold what the caller is about to do, and returns 1: the
 * caller skips it (nothing captured runs; the ops are called again without
 * capture). Otherwise 0. */
int kcu_capture_broken(const char *why);
/* The backend replaced one of its buffers: graphs recorded before are stale. */
void kcu_buffers_moved(void);
/* ops_table.cu's attention counters moved by (fused, flash) */
void kcu_attention_calls_add(long fused, long flash);

/* v, as far as the compiler can tell a new value each time this runs: keeps
 * arithmetic on it (addresses) from being hoisted out of a loop into
 * registers held across the loop. */
__device__ __forceinline__ int kcu_opaque(int v)
{
#ifdef __CUDA_ARCH__
    asm volatile("mov.u32 %0, %0;" : "+r"(v));
#endif
    return v;
}

/* For a block whose writes other blocks of the launch read: called by every thread of the block once its
 * writes are done. *cnt counts the arrivals of `expected` blocks; returns true, in every thread, in the one
 * block that arrives last (any one: blocks run in no set order), which leaves *cnt zero for the next launch
 * and may then read every other block's writes, with __ldcg (from L2, past its own SM's L1). Each thread
 * fences its writes before the block arrives (the CUDA guide's pattern for a last block, as in its
 * threadFenceReduction sample). */
__device__ __forceinline__ bool kcu_arrive_last(unsigned *cnt, unsigned expected)
{
    __threadfence();
    __syncthreads();
    int last = 0;
    if (threadIdx.x == 0) {
        last = atomicAdd(cnt, 1u) == expected - 1;
        if (last) atomicExch(cnt, 0u);
    }
    bool r = __syncthreads_or(last) != 0;
    if (r) __threadfence();
    return r;
}
/* ---- fp32 <-> storage type ---- */
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* 8 consecutive elements as fp32 through 16-byte accesses (one for bf16, two
 * for fp32); p must be 16-byte aligned (vec8_ok on the host checks). */
union kcu_bf16x8 { /* 16 bytes seen as 8 bf16 (a union: no aliasing through casts) */
    uint4 u;
    bf16 h[8];
};
/* ld8 in two steps, the 8 elements kept as stored until they are used (a row
 * held in registers takes half the registers in bf16): ld8raw, then unpack8. */
template <typename T> struct kcu_raw8;
template <> struct kcu_raw8<bf16> {
    uint4 u;
};
template <> struct kcu_raw8<float> {
    float4 a, b;
};
__device__ __forceinline__ void ld8raw(const bf16 *p, kcu_raw8<bf16> &r) { r.u = *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void ld8raw(const float *p, kcu_raw8<float> &r)
{
    r.a = reinterpret_cast<const float4 *>(p)[0];
    r.b = reinterpret_cast<const float4 *>(p)[1];
}
__device__ __forceinline__ void unpack8(const kcu_raw8<bf16> &r, float v[8])
{
    kcu_bf16x8 x;
    x.u = r.u;
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __bfloat162float(x.h[k]);
}
__device__ __forceinline__ void unpack8(const kcu_raw8<float> &r, float v[8])
{
    v[0] = r.a.x, v[1] = r.a.y, v[2] = r.a.z, v[3] = r.a.w, v[4] = r.b.x, v[5] = r.b.y, v[6] = r.b.z, v[7] = r.b.w;
}
template <typename T> __device__ __forceinline__ void ld8(const T *p, float v[8])
{
    kcu_raw8<T> r;
    ld8raw(p, r);
    unpack8(r, v);
}
/* 8 floats written by other blocks (kcu_arrive_last), through L2 (past this SM's L1) */
__device__ __forceinline__ void ldcg8(const float *p, float v[8])
{
    kcu_raw8<float> r;
    r.a = __ldcg(reinterpret_cast<const float4 *>(p));
    r.b = __ldcg(reinterpret_cast<const float4 *>(p) + 1);
    unpack8(r, v);
}
__device__ __forceinline__ void st8(bf16 *p, const float v[8])
{
    kcu_bf16x8 x;
#pragma unroll
    for (int k = 0; k < 8; k++) x.h[k] = __float2bfloat16_rn(v[k]);
    *reinterpret_cast<uint4 *>(p) = x.u;
}
__device__ __forceinline__ void st8(float *p, const float v[8])
{
    float4 a, b;
    a.x = v[0], a.y = v[1], a.z = v[2], a.w = v[3], b.x = v[4], b.y = v[5], b.z = v[6], b.w = v[7];
    reinterpret_cast<float4 *>(p)[0] = a;
    reinterpret_cast<float4 *>(p)[1] = b;
}
/* whether n elements at these pointers can go 8 at a time */
static inline bool vec8_ok(size_t n, const void *a, const void *b = nullptr, const void *c = nullptr)
{
    return n % 8 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)c % 16 == 0;
}

static inline bf16 *as_bf(uint16_t *p) { return reinterpret_cast<bf16 *>(p); }
static inline const bf16 *as_bf(const uint16_t *p) { return reinterpret_cast<const bf16 *>(p); }

/* Grid for a grid-stride loop over n elements: enough blocks to fill the
 * device several times over, never more than the work. */
static inline unsigned kcu_grid(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    if (g > 65535u * 8u) g = 65535u * 8u;
    return g ? (unsigned)g : 1u;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024);
 * every thread gets the result. `sh` holds 32 floats. Deterministic: the
 * order of additions depends only on blockDim. */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

/* dst[C] += column sums of src[N, C] (fp32 accumulation, fixed order: the
 * same inputs always give the same bits). One launch where C % 8 == 0 (its
 * last blocks add the partials, in kcu_scratch), else a second for the
 * partials (kcu_colsum_finish). (elementwise.cu) */
template <typename T> void kcu_colsum_acc(float *dst, const T *src, int N, int C);
/* dst[c] += sum over p < parts of part[p][c], c < C; with dst2, part rows
 * are 2C wide and dst2[c] += those of column C + c; with dst3 (and dst2) 3C
 * wide and dst3[c] += those of column 2C + c (elementwise.cu). The order
 * depends only on parts. */
void kcu_colsum_finish(float *dst, float *dst2, float *dst3, const float *part, int parts, int C);

#endif
