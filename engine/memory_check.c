/* memory_check: whether a layout fits before atoll-train allocates anything.
 *
 * The need per rank is the planner's memory model (common/plan_mem.c) with the
 * engine's precision: PLAN_PRECISION_FP32 (fp32 weights, grads, Adam moments and
 * activations), or with --bf16 PLAN_PRECISION_BF16 (bf16 weights and
 * activations beside fp32 master weights, grads and moments). The room is the device's: for cuda the GPU's free memory, for cpu
 * the host's available memory (MemAvailable, lowered by a cgroup v2 limit and by
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

int eng_memory_check(const atoll_config *c, int world, int local_ranks, const char *device, char *err,
                     size_t errlen)
{
    int dp = cfg_data_parallel_size(c, world);
    if (dp < 1) dp = 1;
    plan_memory mem;
    plan_memory_estimate(c, dp, c->bf16 ? &PLAN_PRECISION_BF16 : &PLAN_PRECISION_FP32, &mem);
    double need = mem.total_bytes, room = -1;
    const char *where = "host memory available";
    int sharers = 1;
    if (!strcmp(device, "cuda")) {
#ifdef ATOLL_HAVE_CUDA
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) room = (double)free_b;
        else (void)cudaGetLastError();
        where = "free memory of this rank's GPU";
#endif
    } else {
        room = eng_host_memory_available();
        sharers = local_ranks > 1 ? local_ranks : 1;
    }
    if (room < 0 || need * sharers <= room) return 0; /* unknown room: the allocations will tell */
    snprintf(err, errlen,
             "the layout needs about %.2f GiB per rank (%.0f parameters: %.2f GiB of weights, grads and Adam state, "
             "%.2f GiB of activations, %s) x %d rank%s here = %.2f GiB, more than the %.2f GiB of %s; use fewer "
             "or smaller layers, a shorter --seq-length or --micro-batch-size, more ranks (tp/pp), "
             "--recompute-granularity, or --use-distributed-optimizer",
             need / GIB, mem.params_per_gpu, mem.state_bytes / GIB, mem.act_bytes / GIB,
             c->bf16 ? "bf16 with fp32 master weights" : "fp32", sharers,
             sharers > 1 ? "s" : "", need * sharers / GIB, room / GIB, where);
    return -1;
}
