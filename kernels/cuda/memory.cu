/* memory: the backend's state (device, stream, library handles, workspace,
 * scratch), the memory ops of k_ops, and the step timer. */
#include "kcuda.cuh"

#include <string.h>

#define KCU_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */

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
    /* Earlier kernels may still read the old buffer: cudaFree waits for them. */
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    if (S.scratch) cudaCheck(cudaFree(S.scratch));
    cudaCheck(cudaMalloc(&S.scratch, want));
    S.scratch_bytes = want;
    return S.scratch;
}

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
    cudaCheck(cudaEventCreate(&S.t0));
    cudaCheck(cudaEventCreate(&S.t1));
    kcu_scratch((size_t)16 << 20);
    S.up = 1;
    return 1;
}

extern "C" const char *k_cuda_status(void) { return S.status[0] ? S.status : "k_cuda() not called"; }
extern "C" void *k_cuda_stream(void) { return S.up ? (void *)S.stream : NULL; }
extern "C" size_t k_cuda_reserved_bytes(void) { return S.up ? KCU_WORKSPACE_BYTES + S.scratch_bytes : 0; }

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

/* Pageable host memory: the copy is complete (to_device: the source may be
 * reused) when the call returns, as the table's contract needs. */
void kcu_to_device(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S.stream));
    cudaCheck(cudaStreamSynchronize(S.stream));
}

void kcu_to_host(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S.stream));
    cudaCheck(cudaStreamSynchronize(S.stream));
}

void kcu_copy(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S.stream));
}

void kcu_zero(void *p, size_t bytes) { cudaCheck(cudaMemsetAsync(p, 0, bytes, S.stream)); }
void kcu_sync(void) { cudaCheck(cudaStreamSynchronize(S.stream)); }
