/* comm_nccl.c: the NCCL backend, for ranks that each own a GPU.
 *
 * Rank 0 makes the unique id and publishes it in the store; every rank builds
 * the world communicator from it, and each group is an ncclCommSplit of the
 * world (color = the group's lowest world rank, key = position), which is why
 * comm_group_new is collective over the world.
 *
 * Buffers are device pointers on the current device (the engine selects it,
 * e.g. LOCAL_RANK, before comm_world_init). Every call is enqueued on the
 * world's stream and waits for it, so callers see the same synchronous
 * semantics as the host backend; the stream is a blocking stream, ordered with
 * work on the legacy default stream. Asynchronous variants for overlapping the
 * data-parallel all-reduce with backward come with the CUDA engine work.
 *
 * Built only with the CUDA toolkit; without NCCL found the file is empty.
 */
#ifdef ATOLL_HAVE_NCCL
#include "comm.h"

#include "store.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ncclComm_t world;
    cudaStream_t stream;
} nccl_world;

typedef struct {
    ncclComm_t comm;
    int owned;
    float *one; /* device scratch for the barrier */
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
    ce = cudaStreamCreate(&nw->stream);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "comm(nccl): cudaStreamCreate: %s", cudaGetErrorString(ce));
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
    if (g->owned) ncclCommDestroy(g->comm);
    cudaFree(g->one);
    free(g);
    c->impl = NULL;
}

static ncclComm_t gcomm(comm *c) { return ((nccl_group *)c->impl)->comm; }
static cudaStream_t gstream(comm *c) { return ((nccl_world *)c->world->impl)->stream; }

static int finish(comm *c, const char *what, ncclResult_t r)
{
    if (r != ncclSuccess) return nccl_fail(c->world, what, c->name, r);
    cudaError_t ce = cudaStreamSynchronize(gstream(c));
    if (ce != cudaSuccess) return cuda_fail(c->world, what, ce);
    return 0;
}

static ncclRedOp_t red(comm_op op) { return op == COMM_AVG ? ncclAvg : ncclSum; }

static int nccl_allreduce(comm *c, float *buf, size_t n, comm_op op)
{
    return finish(c, "all-reduce",
                  ncclAllReduce(buf, buf, n, ncclFloat32, red(op), gcomm(c), gstream(c)));
}

static int nccl_reduce_scatter(comm *c, const float *in, float *out, size_t n, comm_op op)
{
    return finish(c, "reduce-scatter",
                  ncclReduceScatter(in, out, n, ncclFloat32, red(op), gcomm(c), gstream(c)));
}

static int nccl_allgather(comm *c, const float *in, float *out, size_t n)
{
    return finish(c, "all-gather", ncclAllGather(in, out, n, ncclFloat32, gcomm(c), gstream(c)));
}

static int nccl_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    return finish(c, "broadcast",
                  ncclBroadcast(buf, buf, bytes, ncclUint8, root, gcomm(c), gstream(c)));
}

static int nccl_barrier(comm *c)
{
    nccl_group *g = c->impl;
    return finish(c, "barrier",
                  ncclAllReduce(g->one, g->one, 1, ncclFloat32, ncclSum, g->comm, gstream(c)));
}

static int nccl_p2p_batch(comm *c, comm_p2p *ops, int n)
{
    /* Tags are not an NCCL concept: order between a pair is the match. */
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        if (ops[i].is_send)
            r = ncclSend(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, gcomm(c), gstream(c));
        else
            r = ncclRecv(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, gcomm(c), gstream(c));
    }
    ncclResult_t e = ncclGroupEnd();
    return finish(c, "send/recv", r != ncclSuccess ? r : e);
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
};
#else
/* ISO C forbids an empty translation unit. */
typedef int comm_nccl_not_built;
#endif
