/* memory: the backend's state (device, stream, library handles, workspace,
 * scratch), the memory ops of k_ops, and the step timer. */
#include "kcuda.cuh"

#ifdef ATOLL_HAVE_CUDNN
#include "cudnn_sdpa.h"
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KCU_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */
#define KCU_COUNTERS 16384                      /* kcu_counters: 64 KiB */

static struct {
    int up;
    int sms;
    char status[256];
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    void *workspace;
    void *scratch;
    size_t scratch_bytes;
    unsigned *counters; /* KCU_COUNTERS, zero between kernels */
    cudaEvent_t t0, t1;
} S;

cudaStream_t kcu_stream(void) { return S.stream; }
cublasHandle_t kcu_cublas(void) { return S.cublas; }
cublasLtHandle_t kcu_cublaslt(void) { return S.lt; }
int kcu_sms(void) { return S.sms > 0 ? S.sms : 1; }

void *kcu_workspace(size_t *bytes)
{
    *bytes = KCU_WORKSPACE_BYTES;
    return S.workspace;
}

void *kcu_scratch(size_t bytes)
{
    if (bytes <= S.scratch_bytes) return S.scratch;
    if (kcu_capture_broken("the backend's scratch memory grows")) return S.scratch; /* never run: see kcu_capture_broken */
    kcu_buffers_moved(); /* graphs recorded on the old buffer are stale */
    /* Earlier kernels may still read the old buffer: cudaFree waits for them. */
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    if (S.scratch) cudaCheck(cudaFree(S.scratch));
    cudaCheck(cudaMalloc(&S.scratch, want));
    S.scratch_bytes = want;
    return S.scratch;
}

unsigned *kcu_counters(size_t n) { return n <= KCU_COUNTERS ? S.counters : NULL; }

/* Probe without aborting: a machine with no device (CI) must get NULL and a
 * message, never an exit. */
int kcu_init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(S.status, sizeof S.status, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    int dev = 0;
    cudaDeviceProp p;
    e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&p, dev);
    if (e == cudaSuccess) e = cudaStreamCreate(&S.stream); /* blocking: legacy-stream copies order with it */
    if (e != cudaSuccess) {
        snprintf(S.status, sizeof S.status, "no CUDA device (%s)", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    snprintf(S.status, sizeof S.status, "%s", p.name);
    cudaCheck(cudaDeviceGetAttribute(&S.sms, cudaDevAttrMultiProcessorCount, dev));
    cublasCheck(cublasCreate(&S.cublas));
    cublasCheck(cublasSetStream(S.cublas, S.stream));
    cublasCheck(cublasLtCreate(&S.lt));
    cudaCheck(cudaMalloc(&S.workspace, KCU_WORKSPACE_BYTES));
    cublasCheck(cublasSetWorkspace(S.cublas, S.workspace, KCU_WORKSPACE_BYTES));
    cudaCheck(cudaMalloc((void **)&S.counters, KCU_COUNTERS * sizeof(unsigned)));
    cudaCheck(cudaMemsetAsync(S.counters, 0, KCU_COUNTERS * sizeof(unsigned), S.stream));
    cudaCheck(cudaEventCreate(&S.t0));
    cudaCheck(cudaEventCreate(&S.t1));
    kcu_scratch((size_t)16 << 20);
    S.up = 1;
    return 1;
}

/* ---- the weight gradients' stream (k_cuda_overlap_wgrad) ----
 * With it on, matmul_backward queues its weight gradient's GEMM on a second
 * stream that waits for the kernels' stream where the call is made
 * (kcu_wgrad_fork) and then runs beside what the kernels' stream does next, so
 * the GPU has work for the gaps between the kernels' launches and the tails of
 * their last waves. The kernels' stream waits for it (kcu_wgrad_join) at the
 * next matmul_backward, at the table's wgrad_join, and before anything that
 * waits for the kernels' stream or orders after it: a host wait, a read mark,
 * the step timer, k_cuda_stream (the NCCL streams' order), the start and the
 * end of a graph's capture. The GEMM has a cuBLASLt workspace of its own: two
 * GEMMs at once may not share one. */
static struct {
    int on;
    cudaStream_t s;
    void *ws;
    cudaEvent_t fork, done;
    int pending; /* work queued on s that the kernels' stream has not waited for */
    long queued; /* GEMMs queued on s so far */
} W;

void kcu_wgrad_join(void)
{
    if (!W.pending) return;
    W.pending = 0;
    cudaCheck(cudaStreamWaitEvent(S.stream, W.done, 0));
}

cudaStream_t kcu_wgrad_fork(void **ws, size_t *ws_bytes)
{
    if (!W.on) return NULL;
    cudaCheck(cudaEventRecord(W.fork, S.stream));
    cudaCheck(cudaStreamWaitEvent(W.s, W.fork, 0));
    *ws = W.ws;
    *ws_bytes = KCU_WORKSPACE_BYTES;
    return W.s;
}

void kcu_wgrad_queued(void)
{
    cudaCheck(cudaEventRecord(W.done, W.s));
    W.pending = 1;
    W.queued++;
}

extern "C" int k_cuda_overlap_wgrad(int on)
{
    if (!S.up) return 0;
    kcu_wgrad_join();
    if (on && !W.s) {
        void *ws = NULL;
        if (cudaMalloc(&ws, KCU_WORKSPACE_BYTES) != cudaSuccess) {
            (void)cudaGetLastError(); /* no room: the GEMMs stay on the kernels' stream */
            return 0;
        }
        cudaCheck(cudaStreamCreateWithFlags(&W.s, cudaStreamDefault)); /* blocking, as the kernels' stream */
        cudaCheck(cudaEventCreateWithFlags(&W.fork, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&W.done, cudaEventDisableTiming));
        W.ws = ws;
    }
    W.on = on && W.s;
    return W.on;
}

extern "C" long k_cuda_overlap_wgrad_calls(void) { return W.queued; }

extern "C" const char *k_cuda_status(void) { return S.status[0] ? S.status : "k_cuda() not called"; }
extern "C" void *k_cuda_stream(void)
{
    if (!S.up) return NULL;
    kcu_wgrad_join(); /* what orders after the kernels' stream orders after the weight gradients too */
    return (void *)S.stream;
}
extern "C" size_t k_cuda_reserved_bytes(void)
{
    return S.up ? KCU_WORKSPACE_BYTES * (W.ws ? 2 : 1) + S.scratch_bytes + KCU_COUNTERS * sizeof(unsigned) : 0;
}

extern "C" size_t k_cuda_device_used_bytes(void)
{
    size_t free_b = 0, total_b = 0;
    if (!S.up || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
}

extern "C" void *k_cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void k_cuda_host_free(void *p)
{
    if (p) cudaCheck(cudaFreeHost(p));
}

extern "C" void k_cuda_timer_begin(void) { cudaCheck(cudaEventRecord(S.t0, S.stream)); }

extern "C" float k_cuda_timer_end_ms(void)
{
    float ms = 0.0f;
    kcu_wgrad_join();
    cudaCheck(cudaEventRecord(S.t1, S.stream));
    cudaCheck(cudaEventSynchronize(S.t1));
    cudaCheck(cudaEventElapsedTime(&ms, S.t0, S.t1));
    return ms;
}

/* ---- memory ops of the table ---- */

void *kcu_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is reported by returning NULL */
        return NULL;
    }
    cudaCheck(cudaMemsetAsync(p, 0, bytes, S.stream));
    return p;
}

void kcu_free(void *p)
{
    /* cudaFree waits for the device; queued work that still reads p finishes first. */
    if (p) cudaCheck(cudaFree(p));
}

/* ---- copies between host and device that do not wait for the device ----
 *
 * A copy from pageable memory, followed by a stream sync as the table's
 * contract once needed, stops the host until every kernel queued before it
 * has run, and the GPU then idles while the host catches up: the batch's two
 * uploads and each micro-batch's loss read cost a GPT-2 step on an H200 about
 * 0.2 ms of idle GPU (bench/results/gpu.md). So:
 * - an upload of at most KCU_STAGE_MAX bytes is copied into one of
 *   KCU_STAGE_SLOTS page-locked slots (the caller may reuse its source on
 *   return, as kernels.h asks) and its DMA queued on the stream; an event says
 *   when the slot is free again, and a slot still being read (its copy was
 *   queued KCU_STAGE_SLOTS uploads ago) is waited for. Larger uploads (the
 *   weights at load) go as before.
 * - a read "later" (to_host_later) queues the DMA into a page-locked arena and
 *   notes where it goes; kcu_wait, which every read of device memory and every
 *   sync goes through, copies each noted read to its destination once the
 *   stream is done.
 * Calls come from one thread at a time (the engine's); the mutex keeps the
 * slots whole should another thread copy too. */
#define KCU_STAGE_SLOTS 16 /* 16 x 64 KiB: 8 micro-batches of uploads ahead of the device */
#define KCU_STAGE_MAX ((size_t)8 << 20)

struct later { /* a read queued by kcu_to_host_later: arena bytes [off, off + bytes) go to dst */
    void *dst;
    size_t off, bytes;
};

static struct {
    pthread_mutex_t mu;
    struct {
        char *buf;
        size_t cap;
        cudaEvent_t free_again;
        int used;
    } slot[KCU_STAGE_SLOTS];
    int next;
    /* the reads later: their arena and where each goes */
    char *arena;
    size_t arena_cap, arena_used;
    size_t asked; /* bytes read later since the last wait the arena did not force */
    size_t want;  /* the most asked between two such waits: what the arena grows to hold */
    later *q;
    int nq, qcap;
    long waits;
    /* kcu_reads_mark: the reads later queued before the mark, and its event */
    int marked;
    cudaEvent_t mark;
} X = { PTHREAD_MUTEX_INITIALIZER, {}, 0, NULL, 0, 0, 0, 0, NULL, 0, 0, 0, -1, NULL };

/* Page-locked memory of at least `bytes` (rounded up to a power of two, 64 KiB
 * at least, so a few sizes recur); NULL when none can be had. */
static char *pinned(size_t bytes, size_t *cap)
{
    size_t want = (size_t)64 << 10;
    while (want < bytes) want *= 2;
    void *p = NULL;
    if (cudaMallocHost(&p, want) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    *cap = want;
    return (char *)p;
}

/* The first n reads later, whose copies are done, land; the rest stay queued.
 * When none is left the arena starts over and, but after a wait a full arena
 * forced (which counts on), the reads asked since the last such wait set what
 * it grows to hold. X.mu held. */
static void land_locked(int n, int forced)
{
    for (int i = 0; i < n; i++) memcpy(X.q[i].dst, X.arena + X.q[i].off, X.q[i].bytes);
    if (X.nq > n) memmove(X.q, X.q + n, (size_t)(X.nq - n) * sizeof *X.q); /* (X.q may be NULL when none) */
    X.nq -= n;
    if (X.marked > 0) X.marked = X.marked > n ? X.marked - n : 0; /* the mark's reads among them */
    if (X.nq) return;
    if (!forced) {
        if (X.want < X.asked) X.want = X.asked;
        X.asked = 0;
    }
    X.arena_used = 0;
}

/* The host waits for the stream; the reads later land. `forced`: by a full
 * arena. X.mu held. */
static void wait_locked(int forced)
{
    kcu_wgrad_join();
    cudaCheck(cudaStreamSynchronize(S.stream));
    X.waits++;
    land_locked(X.nq, forced);
}

void kcu_wait(void)
{
    if (kcu_capture_broken("a read of device memory or a sync")) return;
    pthread_mutex_lock(&X.mu);
    wait_locked(0);
    pthread_mutex_unlock(&X.mu);
}

extern "C" long k_cuda_host_waits(void) { return X.waits; }

/* A wait for the work queued so far without the work queued after it: the
 * mark notes the reads later queued until now and records an event;
 * kcu_reads_land waits for that event alone and lands those reads (the ones
 * queued since stay queued), so the host can read a result while the kernels
 * it queued after the mark (the optimizer's) keep the device busy. One mark
 * at a time. */
void kcu_reads_mark(void)
{
    if (kcu_capture_broken("a read of device memory")) return;
    pthread_mutex_lock(&X.mu);
    if (X.marked >= 0) {
        fprintf(stderr, "kernels/cuda: kcu_reads_mark while the last mark has not landed\n");
        exit(EXIT_FAILURE);
    }
    if (!X.mark) cudaCheck(cudaEventCreateWithFlags(&X.mark, cudaEventDisableTiming));
    kcu_wgrad_join();
    cudaCheck(cudaEventRecord(X.mark, S.stream));
    X.marked = X.nq;
    pthread_mutex_unlock(&X.mu);
}

void kcu_reads_land(void)
{
    if (kcu_capture_broken("a read of device memory")) return;
    pthread_mutex_lock(&X.mu);
    if (X.marked < 0) {
        fprintf(stderr, "kernels/cuda: kcu_reads_land without kcu_reads_mark\n");
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaEventSynchronize(X.mark));
    X.waits++;
    land_locked(X.marked, 0); /* those a wait since the mark has not landed already */
    X.marked = -1;
    pthread_mutex_unlock(&X.mu);
}

void kcu_to_device(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || kcu_capture_broken("an upload")) return;
    pthread_mutex_lock(&X.mu);
    if (bytes <= KCU_STAGE_MAX) {
        int i = X.next;
        cudaError_t q = X.slot[i].used ? cudaEventQuery(X.slot[i].free_again) : cudaSuccess;
        if (q != cudaSuccess) { /* cudaErrorNotReady (not an error), else what the sync reports */
            if (q == cudaErrorNotReady) (void)cudaGetLastError();
            cudaCheck(cudaEventSynchronize(X.slot[i].free_again));
            X.waits++;
        }
        if (!X.slot[i].free_again) cudaCheck(cudaEventCreateWithFlags(&X.slot[i].free_again, cudaEventDisableTiming));
        if (X.slot[i].cap < bytes) {
            if (X.slot[i].buf) cudaCheck(cudaFreeHost(X.slot[i].buf)); /* its last copy is done (above) */
            X.slot[i].buf = pinned(bytes, &X.slot[i].cap);
            if (!X.slot[i].buf) X.slot[i].cap = 0;
        }
        if (X.slot[i].buf) {
            memcpy(X.slot[i].buf, src, bytes);
            cudaCheck(cudaMemcpyAsync(dst, X.slot[i].buf, bytes, cudaMemcpyHostToDevice, S.stream));
            cudaCheck(cudaEventRecord(X.slot[i].free_again, S.stream));
            X.slot[i].used = 1;
            X.next = (i + 1) % KCU_STAGE_SLOTS;
            pthread_mutex_unlock(&X.mu);
            return;
        }
    }
    /* large, or no page-locked memory: from the source itself, complete on return */
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S.stream));
    wait_locked(0);
    pthread_mutex_unlock(&X.mu);
}

void kcu_to_host(void *dst, const void *src, size_t bytes)
{
    if (kcu_capture_broken("a read of device memory")) return;
    pthread_mutex_lock(&X.mu);
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S.stream));
    wait_locked(0);
    pthread_mutex_unlock(&X.mu);
}

void kcu_to_host_later(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || kcu_capture_broken("a read of device memory")) return;
    if (bytes > KCU_STAGE_MAX) {
        kcu_to_host(dst, src, bytes);
        return;
    }
    pthread_mutex_lock(&X.mu);
    size_t off = (X.arena_used + 255) & ~(size_t)255;
    X.asked += (bytes + 255) & ~(size_t)255;
    if (X.nq == X.qcap) { /* where they go: host bookkeeping, grown without a wait */
        int cap = X.qcap ? 2 * X.qcap : 16;
        later *q = (later *)realloc(X.q, (size_t)cap * sizeof *q);
        if (q) X.q = q, X.qcap = cap;
    }
    if (off + bytes > X.arena_cap || (X.nq == 0 && X.arena_cap < X.want)) {
        /* full (what is queued lands now: a wait), or empty and smaller than
         * the reads between two waits have been: it grows to hold them */
        if (X.nq) wait_locked(1);
        size_t want = X.want > X.asked ? X.want : X.asked;
        if (X.arena_cap < want) {
            if (X.arena) cudaCheck(cudaFreeHost(X.arena));
            X.arena = pinned(want, &X.arena_cap);
            if (!X.arena) X.arena_cap = 0;
        }
        off = 0;
    }
    if (!X.arena || bytes > X.arena_cap || X.nq == X.qcap) { /* no memory for it: read it now */
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S.stream));
        wait_locked(0);
        pthread_mutex_unlock(&X.mu);
        return;
    }
    cudaCheck(cudaMemcpyAsync(X.arena + off, src, bytes, cudaMemcpyDeviceToHost, S.stream));
    X.q[X.nq++] = later{ dst, off, bytes };
    X.arena_used = off + bytes;
    pthread_mutex_unlock(&X.mu);
}

void kcu_copy(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S.stream));
}

void kcu_zero(void *p, size_t bytes) { cudaCheck(cudaMemsetAsync(p, 0, bytes, S.stream)); }
void kcu_sync(void) { kcu_wait(); }

/* ---- CUDA graphs (k_cuda.h) ----
 * Capture is thread-local: only this thread's calls are checked, and the
 * engine makes every CUDA call of a step from one thread. What the backend
 * itself would do that a capture cannot hold (wait, upload, read, grow a
 * buffer) marks the capture broken instead (kcu_capture_broken) and is
 * skipped: nothing recorded runs, and the caller runs the ops again without
 * capture. `moved` counts the backend's buffers replaced (scratch, cuDNN's
 * workspace): a graph recorded before holds the old ones and is stale. */
static struct {
    int on;
    char why[160];
    long moved;
    long fused0, flash0; /* the attention counters at the capture's start */
} G;

/* every buffer replaced so far, the backend's and cuDNN's */
static long moved_all(void)
{
#ifdef ATOLL_HAVE_CUDNN
    return G.moved + kcudnn_buffers_moved();
#else
    return G.moved;
#endif
}

struct k_cuda_graph {
    cudaGraphExec_t exec;
    long moved;
    long fused, flash; /* attention calls recorded in it: added at each launch */
    long launches;
};

int kcu_capture_broken(const char *why)
{
    if (!G.on) return 0;
    if (!G.why[0]) snprintf(G.why, sizeof G.why, "%s", why);
    return 1;
}

void kcu_buffers_moved(void) { G.moved++; }

extern "C" int atoll_cuda_capture_refused(const char *what) { return kcu_capture_broken(what); }

extern "C" int k_cuda_graph_begin(char *err, size_t errlen)
{
    if (!S.up || G.on) {
        snprintf(err, errlen, "%s", !S.up ? "no CUDA device" : "a capture is already under way");
        return -1;
    }
    kcu_wgrad_join(); /* the capture starts with nothing beside it */
    cudaError_t e = cudaStreamBeginCapture(S.stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return -1;
    }
    G.on = 1;
    G.why[0] = '\0';
    k_cuda_attention_calls(&G.fused0, &G.flash0);
    return 0;
}

extern "C" k_cuda_graph *k_cuda_graph_end(char *err, size_t errlen)
{
    if (!G.on) {
        snprintf(err, errlen, "no capture under way");
        return NULL;
    }
    cudaGraph_t g = NULL;
    kcu_wgrad_join(); /* a capture ends with every stream it forked joined */
    cudaError_t e = cudaStreamEndCapture(S.stream, &g);
    G.on = 0;
    long fused, flash; /* the attention calls recorded did not run: a launch counts them */
    k_cuda_attention_calls(&fused, &flash);
    kcu_attention_calls_add(G.fused0 - fused, G.flash0 - flash);
    cudaGraphExec_t x = NULL;
    if (e == cudaSuccess && !G.why[0]) e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaCheck(cudaGraphDestroy(g));
    if (e != cudaSuccess || G.why[0]) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "%s", G.why[0] ? G.why : cudaGetErrorString(e));
        if (x) cudaCheck(cudaGraphExecDestroy(x));
        return NULL;
    }
    k_cuda_graph *kg = (k_cuda_graph *)calloc(1, sizeof *kg);
    if (!kg) {
        cudaCheck(cudaGraphExecDestroy(x));
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *kg = k_cuda_graph{ x, moved_all(), fused - G.fused0, flash - G.flash0, 0 };
    return kg;
}

extern "C" int k_cuda_graph_launch(k_cuda_graph *g)
{
    if (g->moved != moved_all()) return 1;
    cudaCheck(cudaGraphLaunch(g->exec, S.stream));
    kcu_attention_calls_add(g->fused, g->flash);
    g->launches++;
    return 0;
}

extern "C" void k_cuda_graph_free(k_cuda_graph *g)
{
    if (!g) return;
    cudaCheck(cudaGraphExecDestroy(g->exec));
    free(g);
}
