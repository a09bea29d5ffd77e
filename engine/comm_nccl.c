/* comm_nccl.c: the NCCL backend, for ranks that each own a GPU.
 *
 * Rank 0 makes the unique id and publishes it in the store; every rank builds
 * the world communicator from it, and each group is an ncclCommSplit of the
 * world (color = the group's lowest world rank, key = position), which is why
 * comm_group_new is collective over the world.
 *
 * Buffers are device pointers on the current device (the engine selects it,
 * e.g. LOCAL_RANK, before comm_world_init). NCCL runs on the world's own
 * stream, ordered with the kernels' stream (k_cuda_stream) by events, never by
 * a host wait: each call first makes the NCCL stream wait for the work already
 * queued on the kernels' stream, and then the kernels' stream wait for the
 * call, so kernels queued afterwards see its result and the host goes on
 * queueing. comm_allreduce_async leaves out the second wait (the data-parallel
 * all-reduce runs beside the rest of backward) until comm_wait. Send/receive
 * batches are ordered so too (the pipeline's host queues its whole schedule),
 * and each, like each barrier, records a pair of timing events for
 * comm_device_stalls: the pipeline's idle time is measured on the device.
 * Barriers wait on the host: they order host-side work (checkpoint commits).
 * Without the CUDA kernels (no k_cuda_stream) every call waits on the host.
 *
 * Built only with the CUDA toolkit; without NCCL found the file is empty.
 */
#ifdef ATOLL_HAVE_NCCL
#include "comm.h"

#include "store.h"

#include <cuda_runtime.h>
#include <nccl.h>
#ifdef ATOLL_HAVE_CUDA_KERNELS
#include "cuda/k_cuda.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ncclComm_t world;
    cudaStream_t stream;
    cudaEvent_t queued, done; /* kernels' work before a call; the call's completion */
} nccl_world;

/* The kernels' stream stood still from `from` to `to` (comm_device_stalls). */
typedef struct {
    cudaEvent_t from, to;
} nccl_stall;

typedef struct {
    ncclComm_t comm;
    int owned;
    float *one;          /* device scratch for the barrier */
    nccl_stall *stalls;  /* send/receive batches' since the last comm_device_stalls; events kept */
    int nstalls, cap;
    nccl_stall bar;      /* barriers': timed as the host waits, summed in bar_s */
    int have_bar;
    double bar_s;
} nccl_group;

static int cuda_fail(comm_world *w, const char *what, cudaError_t e)
{
    return comm_fail(w, "comm(nccl): %s: %s", what, cudaGetErrorString(e));
}

static int nccl_fail(comm_world *w, const char *what, const char *group, ncclResult_t r)
{
    return comm_fail(w, "comm(nccl): %s on group '%s': %s", what, group, ncclGetErrorString(r));
}

static int nccl_world_init(comm_world *w, char *err, size_t errlen)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        snprintf(err, errlen, "comm(nccl): no CUDA device visible to rank %d (%s); use the host "
                 "backend", w->rank, ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return -1;
    }
    ncclUniqueId id;
    char key[128];
    snprintf(key, sizeof key, "%s/nccl/unique_id", w->prefix);
    if (w->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r == ncclSuccess && !w->store) goto have_id; /* one rank: nobody to tell */
        if (r != ncclSuccess) {
            snprintf(err, errlen, "comm(nccl): ncclGetUniqueId: %s", ncclGetErrorString(r));
            return -1;
        }
        if (store_set(w->store, key, &id, sizeof id) != STORE_OK) {
            snprintf(err, errlen, "comm(nccl): %s", store_error(w->store));
            return -1;
        }
    } else {
        void *val = NULL;
        size_t len = 0;
        if (store_wait(w->store, key, w->timeout_ms, &val, &len) != STORE_OK) {
            snprintf(err, errlen, "comm(nccl): rank %d: %s", w->rank, store_error(w->store));
            return -1;
        }
        if (len != sizeof id) {
            snprintf(err, errlen, "comm(nccl): store key %s holds %zu bytes, not an NCCL id (%zu)",
                     key, len, sizeof id);
            free(val);
            return -1;
        }
        memcpy(&id, val, sizeof id);
        free(val);
    }
have_id:;
    nccl_world *nw = calloc(1, sizeof *nw);
    ce = cudaStreamCreateWithFlags(&nw->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&nw->queued, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&nw->done, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "comm(nccl): creating the stream and events: %s", cudaGetErrorString(ce));
        free(nw);
        return -1;
    }
    ncclResult_t r = ncclCommInitRank(&nw->world, w->size, id, w->rank);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "comm(nccl): ncclCommInitRank (rank %d of %d): %s", w->rank, w->size,
                 ncclGetErrorString(r));
        cudaStreamDestroy(nw->stream);
        free(nw);
        return -1;
    }
    w->impl = nw;
    return 0;
}

static void nccl_world_free(comm_world *w)
{
    nccl_world *nw = w->impl;
    if (!nw) return;
    ncclCommDestroy(nw->world);
    cudaEventDestroy(nw->queued);
    cudaEventDestroy(nw->done);
    cudaStreamDestroy(nw->stream);
    free(nw);
    w->impl = NULL;
}

static int nccl_group_init(comm *c)
{
    comm_world *w = c->world;
    nccl_world *nw = w->impl;
    nccl_group *g = calloc(1, sizeof *g);
    if (c == w->world_comm) {
        g->comm = nw->world;
    } else {
        int color = NCCL_SPLIT_NOCOLOR;
        for (int i = 0; i < c->size; i++)
            if (color == NCCL_SPLIT_NOCOLOR || c->ranks[i] < color) color = c->ranks[i];
        ncclResult_t r = ncclCommSplit(nw->world, color, c->pos < 0 ? 0 : c->pos, &g->comm, NULL);
        if (r != ncclSuccess) {
            free(g);
            return nccl_fail(w, "ncclCommSplit", c->name, r);
        }
        g->owned = 1;
        if (c->size == 0) { /* NOCOLOR: this rank is in no group of the partition */
            free(g);
            return 0;
        }
    }
    cudaError_t ce = cudaMalloc((void **)&g->one, sizeof(float));
    if (ce != cudaSuccess) {
        if (g->owned) ncclCommDestroy(g->comm);
        free(g);
        return cuda_fail(w, "cudaMalloc", ce);
    }
    c->impl = g;
    return 0;
}

static void nccl_group_free(comm *c)
{
    nccl_group *g = c->impl;
    for (int i = 0; i < g->cap; i++) {
        cudaEventDestroy(g->stalls[i].from);
        cudaEventDestroy(g->stalls[i].to);
    }
    free(g->stalls);
    if (g->have_bar) {
        cudaEventDestroy(g->bar.from);
        cudaEventDestroy(g->bar.to);
    }
    if (g->owned) ncclCommDestroy(g->comm);
    cudaFree(g->one);
    free(g);
    c->impl = NULL;
}

static ncclComm_t gcomm(comm *c) { return ((nccl_group *)c->impl)->comm; }
static nccl_world *gworld(comm *c) { return c->world->impl; }
static cudaStream_t gstream(comm *c) { return gworld(c)->stream; }

/* The kernels' stream, or NULL without the CUDA kernels (then calls wait on the host). */
static cudaStream_t kernels_stream(void)
{
#ifdef ATOLL_HAVE_CUDA_KERNELS
    return (cudaStream_t)k_cuda_stream();
#else
    return NULL;
#endif
}

/* Before a call: the NCCL stream waits for the kernels queued so far, marked
 * by `at` (recorded on the kernels' stream here). */
static int order_after_kernels_at(comm *c, cudaEvent_t at)
{
    cudaStream_t ks = kernels_stream();
    if (!ks) return 0;
    cudaError_t ce = cudaEventRecord(at, ks);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(gstream(c), at, 0);
    return ce == cudaSuccess ? 0 : cuda_fail(c->world, "ordering after the kernels' stream", ce);
}

static int order_after_kernels(comm *c) { return order_after_kernels_at(c, gworld(c)->queued); }

static int stall_make(comm *c, nccl_stall *st)
{
    cudaError_t ce = cudaEventCreateWithFlags(&st->from, cudaEventDefault);
    if (ce == cudaSuccess) {
        ce = cudaEventCreateWithFlags(&st->to, cudaEventDefault);
        if (ce != cudaSuccess) cudaEventDestroy(st->from);
    }
    return ce == cudaSuccess ? 0 : cuda_fail(c->world, "creating timing events", ce);
}

/* A send/receive batch's pair of events (made on first use, then reused), or
 * NULL: no kernels' stream (the host waits for the call), or an error. */
static nccl_stall *stall_next(comm *c)
{
    nccl_group *g = c->impl;
    if (!kernels_stream()) return NULL;
    if (g->nstalls == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        nccl_stall *n = realloc(g->stalls, sizeof *n * (size_t)cap);
        if (!n) {
            comm_fail(c->world, "comm(nccl): out of memory for the timing events of group '%s'", c->name);
            return NULL;
        }
        g->stalls = n;
        for (; g->cap < cap; g->cap++)
            if (stall_make(c, &n[g->cap])) return NULL;
    }
    return &g->stalls[g->nstalls++];
}

/* Seconds between a complete pair's events. */
static int stall_s(comm *c, const nccl_stall *st, double *s)
{
    float ms = 0.0f;
    cudaError_t ce = cudaEventSynchronize(st->to);
    if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, st->from, st->to);
    if (ce != cudaSuccess) return cuda_fail(c->world, "timing a send/receive batch or barrier", ce);
    *s += ms > 0.0f ? ms * 1e-3 : 0.0;
    return 0;
}

static int nccl_stalls(comm *c, double *s)
{
    nccl_group *g = c->impl;
    if (!kernels_stream()) return 0;
    double sum = g->bar_s;
    int rc = 0;
    for (int i = 0; i < g->nstalls && !rc; i++) rc = stall_s(c, &g->stalls[i], &sum);
    g->nstalls = 0;
    g->bar_s = 0.0;
    *s = sum;
    return rc ? -1 : 1;
}

/* After a call: kernels queued from now on wait for it (sync = 0), or the host
 * waits (sync = 1, or no kernels' stream). */
static int finish_ordered(comm *c, const char *what, ncclResult_t r, int sync)
{
    if (r != ncclSuccess) return nccl_fail(c->world, what, c->name, r);
    cudaStream_t ks = kernels_stream();
    cudaError_t ce;
    if (sync || !ks) {
        ce = cudaStreamSynchronize(gstream(c));
    } else {
        nccl_world *nw = gworld(c);
        ce = cudaEventRecord(nw->done, gstream(c));
        if (ce == cudaSuccess) ce = cudaStreamWaitEvent(ks, nw->done, 0);
    }
    return ce == cudaSuccess ? 0 : cuda_fail(c->world, what, ce);
}

static int finish(comm *c, const char *what, ncclResult_t r) { return finish_ordered(c, what, r, 0); }

static ncclRedOp_t red(comm_op op) { return op == COMM_AVG ? ncclAvg : ncclSum; }

static int nccl_allreduce(comm *c, float *buf, size_t n, comm_op op)
{
    if (order_after_kernels(c)) return -1;
    return finish(c, "all-reduce",
                  ncclAllReduce(buf, buf, n, ncclFloat32, red(op), gcomm(c), gstream(c)));
}

/* Queued after the kernels so far; the kernels' stream does not wait for it. */
static int nccl_allreduce_async(comm *c, float *buf, size_t n, comm_op op)
{
    if (order_after_kernels(c)) return -1;
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, red(op), gcomm(c), gstream(c));
    return r == ncclSuccess ? 0 : nccl_fail(c->world, "all-reduce", c->name, r);
}

static int nccl_reduce(comm *c, float *buf, size_t n, comm_op op, int root)
{
    if (order_after_kernels(c)) return -1;
    return finish(c, "reduce", ncclReduce(buf, buf, n, ncclFloat32, red(op), root, gcomm(c), gstream(c)));
}

/* Queued after the kernels so far; the kernels' stream does not wait for it. */
static int nccl_reduce_async(comm *c, float *buf, size_t n, comm_op op, int root)
{
    if (order_after_kernels(c)) return -1;
    ncclResult_t r = ncclReduce(buf, buf, n, ncclFloat32, red(op), root, gcomm(c), gstream(c));
    return r == ncclSuccess ? 0 : nccl_fail(c->world, "reduce", c->name, r);
}

/* The kernels' stream waits for every call queued on this comm's world. */
static int nccl_wait(comm *c) { return finish(c, "wait", ncclSuccess); }

static int nccl_reduce_scatter(comm *c, const float *in, float *out, size_t n, comm_op op)
{
    if (order_after_kernels(c)) return -1;
    return finish(c, "reduce-scatter",
                  ncclReduceScatter(in, out, n, ncclFloat32, red(op), gcomm(c), gstream(c)));
}

static int nccl_allgather(comm *c, const float *in, float *out, size_t n)
{
    if (order_after_kernels(c)) return -1;
    return finish(c, "all-gather", ncclAllGather(in, out, n, ncclFloat32, gcomm(c), gstream(c)));
}

static int nccl_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    if (order_after_kernels(c)) return -1;
    return finish(c, "broadcast",
                  ncclBroadcast(buf, buf, bytes, ncclUint8, root, gcomm(c), gstream(c)));
}

/* The stall: from the kernels' work queued before it to its end on the NCCL
 * stream; the host waits for that, so it is timed at once (any comm may have
 * barriers, and none keeps events for them). */
static int nccl_barrier(comm *c)
{
    nccl_group *g = c->impl;
    int timed = kernels_stream() != NULL;
    if (timed && !g->have_bar) {
        if (stall_make(c, &g->bar)) return -1;
        g->have_bar = 1;
    }
    if (timed && order_after_kernels_at(c, g->bar.from)) return -1; /* untimed: no kernels to wait for */
    ncclResult_t r = ncclAllReduce(g->one, g->one, 1, ncclFloat32, ncclSum, g->comm, gstream(c));
    if (r == ncclSuccess && timed) {
        cudaError_t ce = cudaEventRecord(g->bar.to, gstream(c));
        if (ce != cudaSuccess) return cuda_fail(c->world, "barrier", ce);
    }
    if (finish_ordered(c, "barrier", r, 1)) return -1;
    return timed ? stall_s(c, &g->bar, &g->bar_s) : 0;
}

/* The stall: from the kernels' work queued before the batch to where the
 * kernels' stream has waited for it. */
static int nccl_p2p_batch(comm *c, comm_p2p *ops, int n)
{
    nccl_stall *st = stall_next(c);
    if (kernels_stream() && !st) return -1;
    if (st && order_after_kernels_at(c, st->from)) return -1; /* no st: no kernels to wait for */
    /* Tags are not an NCCL concept: order between a pair is the match. */
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        if (ops[i].is_send)
            r = ncclSend(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, gcomm(c), gstream(c));
        else
            r = ncclRecv(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, gcomm(c), gstream(c));
    }
    ncclResult_t e = ncclGroupEnd();
    if (finish(c, "send/recv", r != ncclSuccess ? r : e)) return -1;
    cudaError_t ce = st ? cudaEventRecord(st->to, kernels_stream()) : cudaSuccess;
    return ce == cudaSuccess ? 0 : cuda_fail(c->world, "send/recv", ce);
}

const comm_backend comm_nccl_backend = {
    .name = "nccl",
    .world_init = nccl_world_init,
    .world_free = nccl_world_free,
    .group_init = nccl_group_init,
    .group_free = nccl_group_free,
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .p2p_batch = nccl_p2p_batch,
    .allreduce_async = nccl_allreduce_async,
    .reduce = nccl_reduce,
    .reduce_async = nccl_reduce_async,
    .wait = nccl_wait,
    .stalls = nccl_stalls,
};
#else
/* ISO C forbids an empty translation unit. */
typedef int comm_nccl_not_built;
#endif
