/* emu_cuda: runs the kernels of kernels/cuda on the CPU, for CI machines with
 * no GPU. The .cu files are compiled as C++ (translate.cmake rewrites each
 * `kernel<<<grid, block, smem, stream>>>(args)` as `emu_launch(kernel, grid,
 * block, smem, stream, args)`), against these stand-ins for the CUDA headers.
 *
 * Model: each CUDA thread of a block is a fiber (its own stack) on the
 * launching thread, run in turn until it meets a barrier or ends; the blocks
 * of a launch run one after another, so `__shared__` (a function-level static
 * here, in a section of its own) is the block's shared memory. __syncthreads
 * is a barrier over the block, __syncwarp one over the warp: a fiber that
 * arrives yields until the last one of its group arrives; each waiting fiber
 * hands over to the next live one in turn order. A GPU promises no order of
 * blocks, nor of threads between barriers, so here each launch runs its
 * blocks in a shuffled order and each block its threads in a shuffled turn
 * order (seeded by the launch's number: a run repeats itself). Shuffles and
 * ballots exchange through one of two per-warp areas, used in turn, at one
 * warp barrier. WMMA fragments hold the whole 16x16 tile in every thread, and
 * each WMMA call is warp-collective (barriers around it), which is faithful
 * for code that only loads, stores, fills and multiplies fragments. The
 * mma.sync / ldmatrix / cp.async functions of kcuda_mma.cuh have a stand-in
 * in include/kcuda_mma.cuh that exchanges each lane's registers and
 * addresses through the warp and computes from the PTX fragment layouts.
 *
 * What it checks: indexing, tiling, masks, reductions, the order of
 * operations (same results as the GPU up to expf/tanhf rounding), that every
 * output element is written, that no block reads shared memory it has not
 * written (each block's, dynamic and the kernels' own arrays, starts as NaN
 * bytes, and a cp.async lands only at the wait that covers it), that no
 * result depends on the order of blocks, and that no thread reads what
 * another writes without a barrier between (in the shuffled turns the reader
 * comes first in about half the blocks, whichever thread index it has). What
 * it cannot: the GPU memory model beyond barriers, atomics and fences
 * (threads here never run at once), registers and the launch limits other
 * than threads and shared memory, timing, cuBLAS itself (emu/cublas_mock.h
 * computes what the calls ask for). A barrier reached by only part of a
 * block, undefined on the GPU, stops the program here with a message. */
#ifndef ATOLL_EMU_CUDA_H
#define ATOLL_EMU_CUDA_H

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "emu_device.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sys/mman.h>
#include <type_traits>
#include <unordered_map>
#include <vector>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
/* Under AddressSanitizer the switches are announced, so that it checks each
 * fiber against its own stack. */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* A kernel's own __shared__ arrays: function-level statics, all in one section (emu_shared), so that
 * each block can start with them undefined, as on a GPU (emu_shared_poison). */
#define __shared__ static __attribute__((section("emu_shared")))
#define __launch_bounds__(...)
#define __align__(n)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

/* A barrier over `expected` fibers: the last to arrive opens it (gen moves on). */
struct emu_bar {
    unsigned expected, arrived, gen;
};

/* What the lanes of a warp exchange, by lane: shuffled values, ballot bits, mma operands and
 * ldmatrix row addresses (include/kcuda_mma.cuh). */
struct emu_xchg {
    float f[32];
    unsigned u[32];
    uint32_t a[32][4], b[32][2];
    const void *p[32];
    bool unpacked;         /* the mma's operands below, from a and b */
    float A[16][16], B[8][16]; /* by row of A, by column of B */
};
/* Two exchange areas, used in turn (emu_xchg_begin). */
struct emu_warp {
    emu_bar bar;
    emu_xchg x[2];
};

/* ---- fibers: the CUDA threads of one block, switched on the launching thread ---- */
#if defined(__x86_64__)
/* Saves the callee-saved registers on the current stack, stores its pointer in
 * *from and resumes the stack `to` (SysV x86-64: rbx, rbp, r12-r15). Weak: one
 * copy for every file that includes this header. */
extern "C" void emu_ctx_switch(void **from, void *to);
asm(".text\n"
    ".weak emu_ctx_switch\n"
    ".type emu_ctx_switch,@function\n"
    "emu_ctx_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch, .-emu_ctx_switch\n");
struct emu_ctx {
    void *sp;
};
/* Saves where this code runs into *from and resumes *to. */
inline void emu_switch(emu_ctx *from, emu_ctx *to) { emu_ctx_switch(&from->sp, to->sp); }
#else
struct emu_ctx {
    ucontext_t uc;
};
inline void emu_switch(emu_ctx *from, emu_ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

enum { EMU_STACK = 256 << 10 };

struct emu_fiber {
    char *stack; /* EMU_STACK bytes, the lowest page a guard */
    bool done;
    emu_ctx ctx;
};

/* Launch state: one launch at a time, one block at a time. `inline` variables: one definition across files. */
inline dim3 threadIdx, blockIdx;
inline emu_warp *emu_my_warp;
inline dim3 blockDim, gridDim;
inline void *emu_dyn_smem;
inline emu_bar *emu_block_bar;
inline int emu_or_flags[1024];
inline emu_fiber emu_fibers[1024];
inline emu_fiber *emu_cur;
inline emu_warp emu_warps[32]; /* the block's warps: each block sets their barriers; their exchanges
                                  * are written before they are read, so nothing clears them (a zeroed
                                  * vector a launch cost sanitized runs more than the mma unpacking saved) */
inline unsigned char emu_xchg_turn[1024]; /* each thread's next exchange area (emu_xchg_begin) */
/* cp.async in flight (include/kcuda_mma.cuh): a thread's copies not yet landed, in issue order,
 * and its commits in this block. A block's start drops the last block's: never waited for, they
 * are gone with its shared memory. */
struct emu_cp {
    void *dst;
    unsigned group; /* the thread's commits before the issue: the group it joins at the next commit */
    unsigned char data[16];
};
inline std::vector<emu_cp> emu_cp_pending[1024];
inline unsigned emu_cp_commits[1024];
inline unsigned emu_threads, emu_live; /* the block's threads, those not ended */
inline unsigned long emu_events;      /* arrivals and ends: a pass over the fibers without one is a deadlock */
inline unsigned long emu_pass_events; /* emu_events when the pass began */
inline void (*emu_body)(void *);
inline void *emu_body_arg;
inline emu_ctx emu_sched; /* the launch's loop, while the block's fibers run */

#ifdef EMU_ASAN
inline const void *emu_sched_bottom;
inline size_t emu_sched_size;
#endif

/* Fiber f's registers: its thread and warp. */
inline void emu_enter(emu_fiber *f)
{
    unsigned t = (unsigned)(f - emu_fibers);
    emu_cur = f;
    threadIdx = dim3(t);
    emu_my_warp = &emu_warps[t / 32];
}

/* The order the block's threads take turns in: a shuffle a block (emu_launch_now), so that between
 * two barriers a thread runs before some of its warp and after others; a kernel that reads what
 * another thread writes without a barrier between gets a wrong answer, whichever of the two comes
 * first in thread order. */
inline unsigned emu_turn[1024];     /* the threads in turn order */
inline unsigned emu_turn_of[1024];  /* each thread's place in it */

/* The live fiber after the running one, in turn order. Passing the first turn ends a pass over the
 * block: with no arrival and no end since the last, no barrier can open, and the launch stops. */
inline emu_fiber *emu_next()
{
    unsigned i = emu_turn_of[emu_cur - emu_fibers];
    for (;;) {
        if (++i == emu_threads) {
            i = 0;
            if (emu_events == emu_pass_events) {
                fprintf(stderr, "emu_launch: block (%u, %u) of %u threads: a barrier that not all of its "
                                "threads reach (%u still waiting)\n", blockIdx.x, blockIdx.y, emu_threads, emu_live);
                abort();
            }
            emu_pass_events = emu_events;
        }
        if (!emu_fibers[emu_turn[i]].done) return &emu_fibers[emu_turn[i]];
    }
}

/* From `from` (a fiber's context or the launch loop's) into fiber `to`. `returns`: whether
 * `from` is resumed later; under AddressSanitizer an ended fiber's fake stack goes with it. */
inline void emu_switch_into(emu_ctx *from, bool returns, emu_fiber *to)
{
    emu_enter(to);
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(returns ? &fake : nullptr, to->stack + 4096, EMU_STACK - 4096);
#else
    (void)returns;
#endif
    emu_switch(from, &to->ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

/* From the running fiber straight into fiber `to`. */
inline void emu_switch_to(emu_fiber *to) { emu_switch_into(&emu_cur->ctx, !emu_cur->done, to); }

/* A fiber waiting at a barrier lets the next live one run. */
inline void emu_yield()
{
    emu_fiber *to = emu_next();
    if (to != emu_cur) emu_switch_to(to);
}

inline void emu_bar_wait(emu_bar *b)
{
    emu_events++;
    if (++b->arrived == b->expected) {
        b->arrived = 0;
        b->gen++;
        return;
    }
    unsigned gen = b->gen;
    do emu_yield();
    while (b->gen == gen);
}

/* A fiber's life: the kernel, then the next live fiber, or the launch's loop after the last. */
inline void emu_fiber_main()
{
#ifdef EMU_ASAN
    /* the first turn starts from the launch's loop, whose stack the last fiber goes back to */
    if (emu_cur == &emu_fibers[emu_turn[0]]) __sanitizer_finish_switch_fiber(nullptr, &emu_sched_bottom, &emu_sched_size);
    else __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    emu_body(emu_body_arg);
    emu_cur->done = true;
    emu_events++;
    if (--emu_live) emu_switch_to(emu_next());
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, emu_sched_bottom, emu_sched_size);
#endif
    emu_switch(&emu_cur->ctx, &emu_sched);
    abort(); /* an ended fiber is never resumed */
}

inline void emu_fiber_start(emu_fiber *f)
{
    bool fresh = !f->stack;
    if (fresh) {
        void *p = mmap(nullptr, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            perror("emu: fiber stack");
            abort();
        }
        mprotect(p, 4096, PROT_NONE); /* an overflow faults instead of writing the next stack */
        f->stack = (char *)p;
    }
    f->done = false;
    emu_xchg_turn[f - emu_fibers] = 0;
    emu_cp_pending[f - emu_fibers].clear();
    emu_cp_commits[f - emu_fibers] = 0;
    /* The stacks lie EMU_STACK apart, so their tops would all fall in the same sets of the
     * CPU's caches and evict each other at every switch: each starts 17 cache lines further
     * down than the last, over 64 KB (of the 256). */
    char *top = f->stack + EMU_STACK - ((f - emu_fibers) * 1088) % 65536;
#if defined(__x86_64__)
#ifdef EMU_ASAN
    /* What the last block's frames left poisoned: those that had not returned when the fiber
     * ended, above the stack pointer its last switch saved (frames below it returned, and
     * returning unpoisons). Not the whole stack: that was a third of a sanitized run. */
    if (!fresh) {
        char *lo = (char *)f->ctx.sp - 256;
        __asan_unpoison_memory_region(lo, (size_t)(top - lo));
    }
#endif
    /* the switch pops six registers and returns into emu_fiber_main with the stack
     * as after a call: 8 bytes past a 16-byte boundary */
    void **sp = (void **)top;
    *--sp = nullptr;                   /* emu_fiber_main's return address: never used */
    *--sp = (void *)&emu_fiber_main;   /* where the switch's ret goes */
    for (int i = 0; i < 6; i++) *--sp = nullptr;
    f->ctx.sp = sp;
#else
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(f->stack + 4096, EMU_STACK - 4096); /* what the last block's frames left */
#endif
    getcontext(&f->ctx.uc);
    f->ctx.uc.uc_stack.ss_sp = f->stack + 4096;
    f->ctx.uc.uc_stack.ss_size = (size_t)(top - (f->stack + 4096));
    f->ctx.uc.uc_link = nullptr;
    makecontext(&f->ctx.uc, emu_fiber_main, 0);
#endif
}

inline void __syncthreads() { emu_bar_wait(emu_block_bar); }
inline int __syncthreads_or(int p)
{
    emu_or_flags[threadIdx.x] = p;
    __syncthreads();
    int r = 0;
    for (unsigned i = 0; i < blockDim.x; i++) r |= emu_or_flags[i];
    __syncthreads();
    return r != 0;
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu_bar_wait(&emu_my_warp->bar); }

/* A warp-collective exchange: each lane writes its slots of the area emu_xchg_begin returns,
 * calls __syncwarp once, then reads the others' slots. One barrier is enough because a warp's
 * exchanges alternate between its two areas: a lane writes an area again only two exchanges
 * later, after the barrier of the exchange in between, which no lane reaches before it has read
 * the area. (All lanes of a warp take part in each exchange, as the full-mask intrinsics ask.) */
inline emu_xchg *emu_xchg_begin()
{
    emu_xchg *x = &emu_my_warp->x[emu_xchg_turn[threadIdx.x]];
    emu_xchg_turn[threadIdx.x] ^= 1;
    return x;
}
inline float __shfl_xor_sync(unsigned, float v, int o)
{
    int lane = threadIdx.x & 31;
    emu_xchg *x = emu_xchg_begin();
    x->f[lane] = v;
    __syncwarp();
    return x->f[lane ^ o];
}
/* lane src's v (int or float: through the exchange's u array) */
template <typename V> inline V __shfl_sync(unsigned, V v, int src)
{
    static_assert(sizeof(V) == 4, "__shfl_sync of a 4-byte value");
    int lane = threadIdx.x & 31;
    emu_xchg *x = emu_xchg_begin();
    memcpy(&x->u[lane], &v, 4);
    __syncwarp();
    V r;
    memcpy(&r, &x->u[src & 31], 4);
    return r;
}
inline unsigned __ballot_sync(unsigned, int p)
{
    int lane = threadIdx.x & 31;
    emu_xchg *x = emu_xchg_begin();
    x->u[lane] = p ? 1u : 0u;
    __syncwarp();
    unsigned m = 0;
    for (int i = 0; i < 32; i++) m |= x->u[i] << i;
    return m;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
/* Device-wide memory: one thread runs at a time here, so an atomic is a plain read-modify-write and a fence
 * orders nothing that is not already in order. What the emulation does check about blocks that talk
 * through memory is that no result depends on the order the blocks run in (emu_launch_now). */
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}
inline unsigned atomicExch(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = v;
    return old;
}
inline void __threadfence() {}
template <typename V> inline V __ldcg(const V *p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline int min(int a, int b) { return a < b ? a : b; }

/* ---- bf16: round to nearest even, as __float2bfloat16_rn ---- */
struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f)
    {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) { x = 0x7fc0; return; }
        u += 0x7fffu + ((u >> 16) & 1u);
        x = (uint16_t)(u >> 16);
    }
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- runtime: device memory is host memory; every call completes at once ---- */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorIllegalState = 401,
       cudaErrorNotReady = 600, cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;

/* Stream capture (CUDA graphs): between cudaStreamBeginCapture and
 * cudaStreamEndCapture the stream's work (launches, memsets, copies, events,
 * the cuBLAS mock's GEMMs) is recorded, not run, each call with its arguments
 * as they were; launching the graph runs the records in order. A call that
 * would wait for the device or allocate while capturing is refused, as CUDA
 * refuses it in its global and thread-local modes, and the capture is invalid:
 * EndCapture then returns cudaErrorStreamCaptureInvalidated and no graph. */
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone, cudaStreamCaptureStatusActive,
                               cudaStreamCaptureStatusInvalidated };
struct emu_graph {
    std::vector<std::function<void()>> ops;
};
typedef emu_graph *cudaGraph_t;
typedef emu_graph *cudaGraphExec_t;
inline emu_graph *emu_capture; /* the capture under way, or null */
inline bool emu_capture_invalid;
/* Work queued on the stream: run now, or while capturing kept for the graph
 * (f holds the call's arguments by value). */
template <typename F> void emu_stream_op(F f)
{
    if (emu_capture) emu_capture->ops.push_back(std::function<void()>(f));
    else f();
}

/* A stream made by cudaStreamCreateWithFlags (the backend's second stream: the
 * weight gradients beside the kernels', kernels/cuda/memory.cu) keeps its work
 * and runs it, in order, only when something waits for it: the kernels' stream
 * waiting for an event recorded on it, a sync of that event or of the stream,
 * a cudaFree. That is as late as a GPU may run it, so a call on the kernels'
 * stream that changes what the kept work reads, or reads what it writes, before
 * such a wait gives other results than the same calls in order, where on a GPU
 * it would race. Items are numbered from the stream's first (an event keeps the number it follows). */
struct emu_deferred {
    std::vector<std::function<void()>> q;
    size_t base = 0, ran = 0; /* q[i] is item base + i; q[0..ran) have run */
};
inline std::vector<emu_deferred *> emu_deferred_streams;
inline emu_deferred *emu_deferred_of(cudaStream_t s)
{
    for (emu_deferred *d : emu_deferred_streams)
        if ((void *)d == s) return d;
    return nullptr;
}
/* Runs d's items up to (not including) item number `upto`. */
inline void emu_deferred_run(emu_deferred *d, size_t upto)
{
    while (d->base + d->ran < upto && d->ran < d->q.size()) {
        std::function<void()> f = std::move(d->q[d->ran]);
        d->ran++;
        f();
    }
    if (d->ran == d->q.size()) d->base += d->q.size(), d->q.clear(), d->ran = 0;
}
inline void emu_deferred_run_all()
{
    for (emu_deferred *d : emu_deferred_streams) emu_deferred_run(d, (size_t)-1);
}
/* The same on stream s: kept there when s is a deferred stream (not while capturing: a graph records every
 * stream's work in the order it was queued). */
template <typename F> void emu_stream_op(cudaStream_t s, F f)
{
    emu_deferred *d = emu_capture ? nullptr : emu_deferred_of(s);
    if (d) d->q.push_back(std::function<void()>(f));
    else emu_stream_op(f);
}
/* A call CUDA refuses while a capture is under way: the capture becomes invalid. */
inline bool emu_refused_in_capture()
{
    if (!emu_capture) return false;
    emu_capture_invalid = true;
    return true;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode)
{
    if (emu_capture) return cudaErrorIllegalState;
    emu_capture = new emu_graph;
    emu_capture_invalid = false;
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g)
{
    *g = nullptr;
    if (!emu_capture) return cudaErrorIllegalState;
    emu_graph *c = emu_capture;
    emu_capture = nullptr;
    if (emu_capture_invalid) {
        delete c;
        return cudaErrorStreamCaptureInvalidated;
    }
    *g = c;
    return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *st)
{
    *st = !emu_capture ? cudaStreamCaptureStatusNone
          : emu_capture_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long)
{
    *x = new emu_graph(*g);
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t st)
{
    emu_stream_op(st, [x] {
        for (auto &op : x->ops) op();
    });
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) { delete x; return cudaSuccess; }
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout };
enum cudaSharedCarveout { cudaSharedmemCarveoutDefault = -1, cudaSharedmemCarveoutMaxL1 = 0,
                          cudaSharedmemCarveoutMaxShared = 100 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrMultiProcessorCount };
/* 16-byte aligned, as CUDA declares them: a GPU faults on a 16-byte access through one that is not
 * ("misaligned address"); here UBSan (the sanitized build) stops at it. */
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct cudaDeviceProp { char name[256]; };
inline const char *cudaGetErrorString(cudaError_t) { return "emulated"; }
inline const char *cudaGetErrorName(cudaError_t) { return "emulated"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int)
{
    *v = a == cudaDevAttrMultiProcessorCount ? 2 : 227 * 1024;
    return cudaSuccess;
}
/* A kernel's limit on dynamic shared memory, as a GPU keeps it: 48 KiB until
 * cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)
 * raises it (to at most 227 KiB). A launch above it fails, and the occupancy
 * query counts no block for it. */
inline std::unordered_map<const void *, int> emu_func_smem;
inline size_t emu_smem_limit(const void *k)
{
    auto it = emu_func_smem.find(k);
    return it == emu_func_smem.end() ? 48u << 10 : (size_t)it->second;
}
template <typename F> cudaError_t cudaFuncSetAttribute(F k, cudaFuncAttribute a, int v)
{
    if (a == cudaFuncAttributePreferredSharedMemoryCarveout) /* a hint: the emulation has no L1 to trade */
        return v < -1 || v > 100 ? cudaErrorInvalidValue : cudaSuccess;
    if (v < 0 || v > (227 << 10)) return cudaErrorInvalidValue;
    emu_func_smem[reinterpret_cast<const void *>(k)] = v;
    return cudaSuccess;
}
/* as many blocks an SM as an H100's 228 KiB of shared memory hold, with the
 * 1 KiB it reserves a block, at most three (as registers would cap a heavy
 * kernel), whatever else the kernel uses (the emulated device has 2 SMs); none
 * above the kernel's limit */
template <class K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K k, int, size_t smem)
{
    size_t fit = smem ? (228u << 10) / (smem + 1024) : 3;
    *n = smem > emu_smem_limit(reinterpret_cast<const void *>(k)) ? 0 : fit < 1 ? 1 : fit > 3 ? 3 : (int)fit;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    snprintf(p->name, sizeof p->name, "CPU emulation");
    return cudaSuccess;
}
/* The kernels' stream: its work runs as it is queued. Not null, so code that
 * orders other streams after it (the NCCL backend's events) does so. */
inline char emu_kernel_stream;
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = &emu_kernel_stream; return cudaSuccess; }
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    emu_deferred *d = new emu_deferred;
    emu_deferred_streams.push_back(d);
    *s = d;
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    emu_deferred *d = emu_deferred_of(s);
    if (!d) return cudaSuccess;
    emu_deferred_run(d, (size_t)-1); /* as CUDA: the work queued still runs */
    emu_deferred_streams.erase(std::find(emu_deferred_streams.begin(), emu_deferred_streams.end(), d));
    delete d;
    return cudaSuccess;
}
/* Whether the host has waited for the device since the last GEMM the cuBLASLt mock ran: then nothing
 * was queued ahead of the next one, and a GPU sits idle while the host makes that call (mock_idle_launch_ms). */
inline bool emu_host_waited = true;
inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    if (emu_deferred *d = emu_deferred_of(s)) emu_deferred_run(d, (size_t)-1);
    emu_host_waited = true;
    return cudaSuccess;
}
inline cudaError_t cudaMalloc(void **p, size_t n)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    *p = emu_device_alloc(n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    emu_deferred_run_all(); /* as CUDA's: it waits for the device */
    emu_device_free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    emu_device_mem_info(free_b, total_b);
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void **p, size_t n)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : 2;
}
inline cudaError_t cudaFreeHost(void *p)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    free(p);
    return cudaSuccess;
}
enum { cudaEventDisableTiming = 2 };
/* Emulated time: nothing here takes device time but what a test charges to
 * emu_clock_ms (the cuBLASLt mock charges each algorithm its mock_algo_ms);
 * an event records the clock, ElapsedTime is the difference. */
inline double emu_clock_ms;
/* An event: the clock when its stream got there; on a deferred stream, the item it follows there. */
struct emu_event {
    double t = 0.0;
    emu_deferred *s = nullptr;
    size_t at = 0;
};
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned)
{
    *e = new emu_event;
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete (emu_event *)e;
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
    emu_stream_op(st, [=] { memset(p, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t st)
{
    emu_stream_op(st, [=] { memmove(d, s, n); });
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
    emu_event *ev = (emu_event *)e;
    emu_stream_op(st, [=] { ev->t = emu_clock_ms; });
    emu_deferred *d = emu_capture ? nullptr : emu_deferred_of(st);
    ev->s = d;
    ev->at = d ? d->base + d->q.size() : 0;
    return cudaSuccess;
}
/* What waits for an event recorded on a deferred stream runs that stream up to it. */
inline void emu_event_reached(cudaEvent_t e)
{
    emu_event *ev = (emu_event *)e;
    if (ev->s) emu_deferred_run(ev->s, ev->at);
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned)
{
    /* the kernels' stream runs its work as queued: a deferred stream waiting for it has nothing to wait for */
    if (!emu_capture && !emu_deferred_of(st)) emu_event_reached(e);
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    emu_event_reached(e);
    emu_host_waited = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (emu_refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    emu_event_reached(e);
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(((emu_event *)b)->t - ((emu_event *)a)->t);
    return cudaSuccess;
}

/* ---- cuBLAS: handles only (the GEMM files are not emulated) ---- */
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0 };
typedef void *cublasHandle_t;
typedef void *cublasLtHandle_t;
inline const char *cublasGetStatusString(cublasStatus_t) { return "emulated"; }
inline cublasStatus_t cublasCreate(cublasHandle_t *) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *) { return CUBLAS_STATUS_SUCCESS; }

/* ---- WMMA ---- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename L = void> struct fragment {
    float v[16][16];
};
typedef fragment<accumulator, 16, 16, 16, float> acc_frag;

template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    __syncwarp();
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            f.v[i][j] = __bfloat162float(std::is_same<L, col_major>::value ? p[j * ldm + i] : p[i * ldm + j]);
    __syncwarp();
}
inline void load_matrix_sync(acc_frag &f, const float *p, unsigned ldm, layout_t l)
{
    __syncwarp();
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) f.v[i][j] = l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i];
    __syncwarp();
}
inline void store_matrix_sync(float *p, const acc_frag &f, unsigned ldm, layout_t l)
{
    __syncwarp();
    if ((threadIdx.x & 31) == 0)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) (l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.v[i][j];
    __syncwarp();
}
inline void fill_fragment(acc_frag &f, float x)
{
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) f.v[i][j] = x;
}
template <typename LA, typename LB, typename T>
void mma_sync(acc_frag &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a, const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const acc_frag &c)
{
    float r[16][16];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.v[i][j];
            for (int k = 0; k < 16; k++) s += a.v[i][k] * b.v[k][j];
            r[i][j] = s;
        }
    memcpy(d.v, r, sizeof r);
}
} // namespace wmma
} // namespace nvcuda

/* The emu_shared section's bounds, from the linker (weak: a program without such arrays has none). */
extern "C" char __start_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_emu_shared[] __attribute__((weak, visibility("hidden")));
/* Every __shared__ array of every kernel as NaN bytes: what a block finds there is the last block's or
 * nothing defined on a GPU. A byte loop, not memset, and not instrumented: under AddressSanitizer the
 * section also holds the arrays' redzones, which this may overwrite but must not be reported for. */
__attribute__((no_sanitize("address"))) inline void emu_shared_poison()
{
    char *p = __start_emu_shared, *e = __stop_emu_shared;
    if (!p) return;
    volatile uint64_t *w = (volatile uint64_t *)p; /* the section starts aligned to its arrays (32 bytes) */
    for (; (char *)(w + 1) <= e; w++) *w = ~(uint64_t)0;
    for (volatile char *b = (volatile char *)w; b < e; b++) *b = (char)0xff;
}

inline unsigned long emu_launch_seq; /* launches run so far: each one's orders (emu_launch_now) */

/* v[0..n) in an order drawn from *seed (xorshift64, Fisher-Yates) */
inline void emu_shuffle(unsigned *v, size_t n, uint64_t *seed)
{
    for (size_t i = n; i > 1; i--) {
        *seed ^= *seed << 13, *seed ^= *seed >> 7, *seed ^= *seed << 17;
        size_t j = *seed % i;
        unsigned t = v[i - 1];
        v[i - 1] = v[j], v[j] = t;
    }
}

/* One launch, run: block after block, each block's threads as fibers run in
 * turn from the launching thread. */
template <typename... P, typename... A>
void emu_launch_now(void (*kernel)(P...), dim3 g, dim3 b, size_t smem, A... args)
{
    unsigned nt = b.x * b.y * b.z, nw = (nt + 31) / 32;
    if (nt == 0 || nt > 1024) {
        fprintf(stderr, "emu_launch: %u threads per block\n", nt);
        abort();
    }
    size_t limit = emu_smem_limit(reinterpret_cast<const void *>(kernel));
    if (smem > limit) {
        fprintf(stderr, "emu_launch: %zu bytes of dynamic shared memory, above the kernel's limit of %zu (raise it "
                        "with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)): "
                        "a GPU refuses this launch\n", smem, limit);
        abort();
    }
    blockDim = b;
    gridDim = g;
    std::vector<unsigned char> dyn(smem + 16);
    emu_dyn_smem = dyn.data();
    emu_bar block_bar = { nt, 0, 0 };
    emu_block_bar = &block_bar;
    auto body = [&] { kernel(args...); };
    emu_body = [](void *p) { (*(decltype(body) *)p)(); };
    emu_body_arg = &body;
    emu_threads = nt;
    /* The blocks in an order of their own for each launch (a shuffle seeded by the launch's number, so a
     * run repeats itself): a GPU promises none, so a result that depends on which block runs first or
     * last (a block that finishes what the others left, kcu_arrive_last) must come out the same. */
    std::vector<unsigned> order((size_t)g.x * g.y);
    for (size_t i = 0; i < order.size(); i++) order[i] = (unsigned)i;
    uint64_t seed = 0x9e3779b97f4a7c15ull * ++emu_launch_seq;
    emu_shuffle(order.data(), order.size(), &seed);
    for (unsigned o : order) {
        blockIdx = dim3(o % g.x, o / g.x);
        for (unsigned t = 0; t < nt; t++) emu_turn[t] = t;
        emu_shuffle(emu_turn, nt, &seed);
        for (unsigned i = 0; i < nt; i++) emu_turn_of[emu_turn[i]] = i;
        /* A block's dynamic shared memory starts undefined on a GPU (the last block's, or
         * anything): here all NaN bytes (0xff: NaN as float and bf16, -1 as an integer), so a
         * kernel that reads what it did not write gets a wrong answer every time. */
        memset(dyn.data(), 0xff, dyn.size());
        emu_shared_poison();
        for (unsigned w = 0; w < nw; w++) emu_warps[w].bar = { nt - w * 32 < 32 ? nt - w * 32 : 32, 0, 0 };
        for (unsigned t = 0; t < nt; t++) emu_fiber_start(&emu_fibers[t]);
        /* Into the first turn; from there each fiber hands over to the next live one, at a
         * barrier it waits at or at its end, and the last to end comes back here. */
        emu_live = nt;
        emu_pass_events = emu_events;
        emu_switch_into(&emu_sched, true, &emu_fibers[emu_turn[0]]);
    }
}

/* Kernel launches queued so far (tests count what an op launches). */
inline std::atomic<unsigned long> emu_launches;

/* kernel<<<g, b, smem, stream>>>(args...): run now, or kept for the graph
 * being captured with the arguments' values of now. */
template <typename... P, typename... A>
void emu_launch(void (*kernel)(P...), dim3 g, dim3 b, size_t smem, cudaStream_t st, A... args)
{
    emu_launches++;
    emu_stream_op(st, [=] { emu_launch_now(kernel, g, b, smem, args...); });
}

#endif
