/* k_cuda: what the CUDA backend offers beyond the k_ops table (kernels.h).
 *
 * k_cuda() binds the backend to the device current at its first call (the
 * engine calls cudaSetDevice(local_rank) before it), creates one stream, the
 * cuBLAS/cuBLASLt handles and a 32 MiB GEMM workspace, and returns the table;
 * every op is queued on that one stream, in call order. Nothing here is freed:
 * the backend lives as long as the process, like the table.
 *
 * Ownership: the strings and the stream belong to the backend. */
#ifndef ATOLL_K_CUDA_H
#define ATOLL_K_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* After k_cuda(): the device name ("NVIDIA H100 80GB HBM3") when the backend is
 * up, else why it is not ("no CUDA device (<cudaGetErrorString>)"). */
const char *k_cuda_status(void);

/* The cudaStream_t every op runs on (as void * so C callers need no CUDA
 * headers); NCCL collectives on the backend's buffers go on this stream, or on
 * one ordered after it with events. NULL before a successful k_cuda(). */
void *k_cuda_stream(void);

/* Which kernels run the bf16 attention entries (--attention-backend):
 * K_CUDA_ATTN_FLASH atoll's own flash kernels (flash_attention.cu);
 * K_CUDA_ATTN_FUSED cuDNN's fused attention (cudnn_sdpa.h) where it applies,
 * -1 with err when cuDNN cannot be loaded; K_CUDA_ATTN_AUTO cuDNN's where it
 * loads and applies, else the flash kernels (measured faster on an H200 at
 * GPT-2 124M and at 1.5B: bench/results/gpu.md). 0, or -1 with err. */
enum { K_CUDA_ATTN_FLASH, K_CUDA_ATTN_FUSED, K_CUDA_ATTN_AUTO };
int k_cuda_fused_attention(int mode, char *err, size_t errlen);
/* How many bf16 attention calls (forward and backward) ran on cuDNN's fused
 * attention and how many on the flash kernels, since the process started. */
void k_cuda_attention_calls(long *fused, long *flash);
/* --nondeterministic-attention: cuDNN's attention backward sums dQ by atomic
 * adds into an fp32 buffer (faster, no [B, NH, T, T] dS in memory; the low
 * bits of dQ change from run to run) instead of the deterministic product of
 * dS and K, from the next call on. Off by default; the flash kernels are
 * deterministic either way. _atomic_plans: how many backward plans summing dQ
 * by atomic adds cuDNN has built (0: every backward so far deterministic). */
void k_cuda_attention_atomic_dq(int on);
long k_cuda_attention_atomic_plans(void);
/* Device memory cuDNN's fused attention needs for calls of this shape (its
 * plans' workspace, kcudnn_attention_workspace), dQ by atomic adds or not, on
 * the current device: 0 where the shape would run on the flash kernels
 * (grouped-query attention, dropout, no cuDNN), or when cuDNN refuses it. */
size_t k_cuda_attention_workspace_need(int B, int T, int NH, int NG, int HD, float attention_dropout, int atomic_dq);
/* Bytes of device memory this process holds for cuDNN's attention now. */
size_t k_cuda_attention_workspace_held(void);

/* GEMM algorithms chosen by time (--tune-gemms). With tuning on, each new GEMM
 * problem (shapes, layouts, epilogue, operand alignment) runs every algorithm
 * cuBLASLt's heuristic offers (up to 8) a few times on its first call, on the
 * call's own operands (what the call computes is unchanged), and keeps the
 * fastest; off (the default), the heuristic's first. Different algorithms sum
 * in different orders, so a run resumed with other choices would not repeat
 * the uninterrupted run bit for bit: _text gives every choice made so far as
 * the text of a choices file (malloc'd, the caller's: the engine writes it
 * durably beside its checkpoints; NULL when out of memory), _load reads such
 * a file back, and its choices
 * are then used as they stand (each checked with cublasLtMatmulAlgoCheck at its
 * first use, chosen anew if the library refuses it). _load returns 0; 1 with
 * err when the file was written on another device or cuBLASLt version (nothing
 * is read: choose anew); -1 with err when it cannot be read or is malformed.
 * k_cuda_gemm_choices says what the choices held are (below). */
typedef struct {
    int timed;        /* choices made by timing here */
    int loaded;       /* choices read from a file */
    int no_workspace; /* of the timed, algorithms from the heuristic's answers for no workspace */
    int in_place;     /* and from its answers for K split only in place (no reduction kernel after) */
    double first_ms;  /* over the timed problems, a call each: the median time of the heuristic's first */
    double chosen_ms; /* and of the one kept (the saving is what timing found, not a step's) */
} k_cuda_gemm_stats;
void k_cuda_gemm_tuning(int on);
char *k_cuda_gemm_choices_text(void);
int k_cuda_gemm_choices_load(const char *path, char *err, size_t errlen);
void k_cuda_gemm_choices(k_cuda_gemm_stats *s);
/* What timing found, a line a problem timed here (its shape, types and epilogue; cuBLASLt's first
 * choice's median ms and the kept one's, and which candidate that was): malloc'd, the caller's; ""
 * when none was timed, NULL when out of memory or without the backend. */
char *k_cuda_gemm_tuning_report(void);

/* Page-locked host memory (cudaMallocHost), which device copies move at full
 * speed: the host transport's staging buffers. NULL when it cannot be had. */
void *k_cuda_host_alloc(size_t bytes);
void k_cuda_host_free(void *p);

/* How many times the host has waited for the backend's stream since the
 * process started: reads of device memory (to_host, sumsq, nonzeros), syncs,
 * uploads too large to stage or finding their staging slot still in use (the
 * host 16 uploads ahead of the device). A one-rank training step waits once:
 * its gradient norm, which brings the losses queued with to_host_later. */
long k_cuda_host_waits(void);

/* CUDA graphs (--enable-cuda-graph). Between k_cuda_graph_begin and
 * k_cuda_graph_end the ops called on the table are recorded on the backend's
 * stream, not run; _end returns them as a graph ready to launch, or NULL with
 * err when the capture could not hold one of them (a read of device memory, a
 * sync, an upload, a buffer the backend had to grow, a GEMM not yet timed
 * under --tune-gemms, or what CUDA itself refused): then nothing recorded
 * has run or will, and the caller calls the ops again without capture. A
 * graph holds the buffers and arguments of its recording: _launch queues it
 * on the stream, returns 0, or 1 without queuing anything when it is stale
 * (the backend or cuDNN replaced a buffer of theirs since: record anew). The
 * attention call counters count a graph's calls at each launch. _free
 * releases one (the caller's; after its last launch is queued). */
typedef struct k_cuda_graph k_cuda_graph;
int k_cuda_graph_begin(char *err, size_t errlen);
k_cuda_graph *k_cuda_graph_end(char *err, size_t errlen);
int k_cuda_graph_launch(k_cuda_graph *g);
void k_cuda_graph_free(k_cuda_graph *g);

/* --overlap-wgrad: matmul_backward's weight-gradient GEMM runs on a second
 * stream beside the calls after it (kernels.h: matmul_backward, wgrad_join),
 * with a cuBLASLt workspace of its own (counted in k_cuda_reserved_bytes), from
 * the next call on. Off by default. Returns whether it is on (0 without a
 * device, or without room for the workspace). _calls: how many weight
 * gradients have gone there so far. The bits are the same either way. */
int k_cuda_overlap_wgrad(int on);
long k_cuda_overlap_wgrad_calls(void);

/* Step timing for MFU: events recorded on the backend stream. end() waits for
 * the work queued since begin() and returns its device time in milliseconds. */
void k_cuda_timer_begin(void);
float k_cuda_timer_end_ms(void);

/* Bytes the backend holds besides the engine's own allocations (GEMM
 * workspace and reduction scratch), for the memory report. */
size_t k_cuda_reserved_bytes(void);

/* Device memory in use now (total minus free, as cudaMemGetInfo reports: this
 * process's allocations and context, plus any other process on the device);
 * 0 before a successful k_cuda(). */
size_t k_cuda_device_used_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
