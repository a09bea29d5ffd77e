/* memory_check: whether a layout fits before atoll-train allocates anything.
 *
 * The need per rank is the planner's memory model (common/plan_mem.c) with the
 * engine's precision: PLAN_PRECISION_FP32 (fp32 weights, grads, Adam moments,
 * activations and logits, the attention probabilities kept), or with --bf16
 * PLAN_PRECISION_BF16_FLASH (bf16 weights, activations and logits beside fp32
 * master weights, grads and moments; flash attention keeps no probabilities),
 * each with the engine's backward workspace, plus the
 * workspace cuDNN's fused attention reports for this rank's shape where it
 * runs. The room is the device's: for cuda the GPU's free memory, for cpu the
 * host's available memory (MemAvailable, lowered by a cgroup v2 limit and by
 * RLIMIT_AS), shared by the ranks this host runs. */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "plan.h"

#ifdef ATOLL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef ATOLL_HAVE_CUDA_KERNELS
#include "cuda/k_cuda.h"
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A number from a one-value file ("max" and absent files give -1). */
static double read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = "";
    double v = -1;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3)) v = strtod(buf, NULL);
    fclose(f);
    return v;
}

double eng_host_memory_available(void)
{
    double avail = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[128];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "MemAvailable:", 13)) avail = strtod(line + 13, NULL) * 1024.0;
        fclose(f);
    }
    double limit = read_number("/sys/fs/cgroup/memory.max"), used = read_number("/sys/fs/cgroup/memory.current");
    if (limit > 0 && used >= 0 && (avail < 0 || limit - used < avail)) avail = limit - used;
    struct rlimit rl;
    if (!getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY && (avail < 0 || (double)rl.rlim_cur < avail))
        avail = (double)rl.rlim_cur;
    return avail;
}

void eng_memory_need(const atoll_config *c, int world, double attn_workspace_bytes, eng_memory *out)
{
    int dp = cfg_data_parallel_size(c, world);
    if (dp < 1) dp = 1;
    plan_memory mem;
    plan_memory_estimate(c, dp, plan_engine_precision(c), &mem);
    out->params = mem.params_per_gpu;
    out->state_bytes = mem.state_bytes;
    out->act_bytes = mem.act_bytes;
    out->attn_workspace_bytes = attn_workspace_bytes;
    out->total_bytes = mem.total_bytes + out->attn_workspace_bytes;
}

/* eng_memory_verdict on the need m, counted already */
static int verdict_of(const atoll_config *c, int world, int local_ranks, const char *device, double room,
                      const eng_memory *m, char *err, size_t errlen)
{
    int cuda = !strcmp(device, "cuda"), sharers = !cuda && local_ranks > 1 ? local_ranks : 1;
    double need = m->total_bytes;
    if (room < 0 || need * sharers <= room) return 0; /* unknown room: the allocations will tell */
    char ws[160] = "";
    if (m->attn_workspace_bytes > 0)
        snprintf(ws, sizeof ws, ", %.2f GiB of cuDNN attention workspace (none with --attention-backend flash)",
                 m->attn_workspace_bytes / GIB);
    char parts[400], advice[1024];
    plan_memory_parts(parts, sizeof parts, c, m->params, m->state_bytes, m->act_bytes, ws);
    int dp = cfg_data_parallel_size(c, world);
    plan_memory_advice(c, dp < 1 ? 1 : dp, room / sharers - m->attn_workspace_bytes, advice, sizeof advice);
    snprintf(err, errlen,
             "the layout needs about %.2f GiB per rank (%s) x %d rank%s here = %.2f GiB, more than the %.2f GiB of %s; %s",
             need / GIB, parts, sharers, sharers > 1 ? "s" : "", need * sharers / GIB, room / GIB,
             cuda ? "free memory of this rank's GPU" : "host memory available", advice);
    return -1;
}

int eng_memory_verdict(const atoll_config *c, int world, int local_ranks, const char *device, double room,
                       double attn_workspace_bytes, char *err, size_t errlen)
{
    eng_memory m;
    eng_memory_need(c, world, attn_workspace_bytes, &m);
    return verdict_of(c, world, local_ranks, device, room, &m, err, errlen);
}

int eng_memory_check(const atoll_config *c, int world, int local_ranks, const char *device, eng_memory *need,
                     double *in_use, char *err, size_t errlen)
{
    double room = -1, attn_ws = 0;
    if (in_use) *in_use = -1;
    if (!strcmp(device, "cuda")) {
#ifdef ATOLL_HAVE_CUDA
        eng_cuda_select_device();
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
            room = (double)free_b;
            if (in_use) *in_use = (double)(total_b - free_b);
        } else {
            (void)cudaGetLastError();
        }
#endif
#ifdef ATOLL_HAVE_CUDA_KERNELS
        /* cuDNN's fused attention: the workspace its plans for this rank's
         * shape report (the plans are built now and kept for the run) */
        if (room >= 0 && c->bf16 && strcmp(c->attention_backend, "flash")) { /* fused, or auto */
            int tp = c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1;
            attn_ws = (double)k_cuda_attention_workspace_need(
                c->micro_batch_size, c->seq_length, c->num_attention_heads / tp, cfg_kv_groups(c) / tp,
                cfg_head_dim(c), (float)c->attention_dropout, c->nondeterministic_attention);
        }
#endif
    } else {
        room = eng_host_memory_available();
    }
    eng_memory m;
    eng_memory_need(c, world, attn_ws, &m);
    if (need) *need = m;
    return verdict_of(c, world, local_ranks, device, room, &m, err, errlen);
}
