/* comm.c: the backend-independent half of the comm interface: argument checks,
 * group bookkeeping, dispatch through the backend vtable. */
#include "comm.h"

#include "groups.h"
#include "store.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int comm_fail(comm_world *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

static const comm_backend *backend_for(comm_backend_kind kind)
{
    switch (kind) {
    case COMM_BACKEND_HOST:
        return &comm_host_backend;
    case COMM_BACKEND_NCCL:
#ifdef ATOLL_HAVE_NCCL
        return &comm_nccl_backend;
#else
        return NULL;
#endif
    }
    return NULL;
}

/* FNV-1a over the name and member list: members of one group agree on it
 * without talking, and different groups sharing a link almost surely differ.
 * The creation index is mixed in so two groups with the same members and name
 * (e.g. tp and mp when pp = 1 share neither name nor index) never collide. */
static uint32_t group_ctx(const char *name, const int *ranks, int n, int index)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ ((unsigned)ranks[i] >> (8 * b) & 0xff)) * 16777619u;
    h = (h ^ (uint32_t)index) * 16777619u;
    return h & 0x7fffffffu;
}

/* ---- the watchdog's view: written by the calling thread, read by any ---- */

enum { OP_NONE, OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_BARRIER, OP_REDUCE, OP_P2P,
       OP_WAIT };
static const char *const OP_NAMES[] = { NULL, "all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                        "barrier", "reduce", "send/recv", "wait" };

struct comm_watch {
    atomic_int op;            /* OP_* */
    atomic_ullong seq;        /* collectives entered */
    atomic_llong since_ns;
    atomic_int npeers;
    atomic_int peers[COMM_WATCH_PEERS];
};

static _Thread_local double thread_comm_s;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Marks c as inside `op` (nested calls keep the outer mark); returns the entry time. */
static int64_t watch_enter(comm *c, int op, const comm_p2p *ops, int n)
{
    int64_t t = mono_ns();
    struct comm_watch *w = c->watch;
    if (!w || atomic_load(&w->op) != OP_NONE) return -t; /* nested: the outer call owns the mark */
    if (op != OP_P2P && op != OP_WAIT) atomic_fetch_add(&w->seq, 1);
    int k = 0;
    for (int i = 0; i < n && k < COMM_WATCH_PEERS; i++) /* a bad peer is refused by the call itself */
        if (ops[i].peer >= 0 && ops[i].peer < c->size) atomic_store(&w->peers[k++], c->ranks[ops[i].peer]);
    atomic_store(&w->npeers, k);
    atomic_store(&w->since_ns, t);
    atomic_store(&w->op, op);
    return t;
}

static int watch_leave(comm *c, int64_t t0, int rc)
{
    if (t0 < 0) return rc; /* nested */
    if (c->watch) atomic_store(&c->watch->op, OP_NONE);
    thread_comm_s += (double)(mono_ns() - t0) * 1e-9;
    return rc;
}

int comm_watch_get(comm *c, comm_watch_view *v)
{
    struct comm_watch *w = c->watch;
    int op = w ? atomic_load(&w->op) : OP_NONE;
    if (op <= OP_NONE || op > OP_WAIT) return 0;
    memset(v, 0, sizeof *v);
    v->op = OP_NAMES[op];
    v->seq = op == OP_P2P || op == OP_WAIT ? 0 : (uint64_t)atomic_load(&w->seq);
    v->waited_s = (double)(mono_ns() - atomic_load(&w->since_ns)) * 1e-9;
    if (v->waited_s < 0) v->waited_s = 0;
    v->npeers = op == OP_P2P ? atomic_load(&w->npeers) : 0;
    for (int i = 0; i < v->npeers && i < COMM_WATCH_PEERS; i++) v->peers[i] = atomic_load(&w->peers[i]);
    return 1;
}

double comm_thread_comm_s(void) { return thread_comm_s; }
void comm_thread_waited(double s) { thread_comm_s += s; }

int comm_world_ncomms(const comm_world *w) { return 1 + w->ngroups; }

comm *comm_world_nth(comm_world *w, int i)
{
    if (i == 0) return w->world_comm;
    return i > 0 && i <= w->ngroups ? w->groups[i - 1] : NULL;
}

static comm *group_alloc(comm_world *w, const char *name, const int *ranks, int n, int index)
{
    comm *c = calloc(1, sizeof *c);
    c->watch = calloc(1, sizeof *c->watch);
    c->world = w;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->ranks = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (n) memcpy(c->ranks, ranks, sizeof(int) * (size_t)n);
    c->size = n;
    c->pos = -1;
    for (int i = 0; i < n; i++)
        if (ranks[i] == w->rank) c->pos = i;
    c->ctx = group_ctx(name, ranks, n, index);
    return c;
}

static void stage_release(void *p);

static void group_free(comm *c)
{
    if (!c) return;
    if (c->impl && c->world->be->group_free) c->world->be->group_free(c);
    stage_release(c->stage);
    free(c->watch);
    free(c->ranks);
    free(c);
}

int comm_world_init(comm_world **out, comm_backend_kind kind, int rank, int world,
                    struct store_client *store, const char *prefix, int flags, int timeout_ms,
                    char *err, size_t errlen)
{
    *out = NULL;
    const comm_backend *be = backend_for(kind);
    if (!be) {
        snprintf(err, errlen, "comm: the %s backend is not built into this binary",
                 kind == COMM_BACKEND_NCCL ? "nccl" : "requested");
        return -1;
    }
    if (world < 1 || rank < 0 || rank >= world) {
        snprintf(err, errlen, "comm: rank %d is outside world size %d (RANK must be 0..WORLD_SIZE-1)",
                 rank, world);
        return -1;
    }
    if (!store && world > 1) {
        snprintf(err, errlen, "comm: %d ranks need a rendezvous store to meet through", world);
        return -1;
    }
    if (kind == COMM_BACKEND_NCCL && !(flags & COMM_DEVICE_BUFFERS)) {
        snprintf(err, errlen, "comm: the nccl backend needs COMM_DEVICE_BUFFERS (device pointers)");
        return -1;
    }
    comm_world *w = calloc(1, sizeof *w);
    w->be = be;
    w->kind = kind;
    w->rank = rank;
    w->size = world;
    w->flags = flags;
    w->timeout_ms = timeout_ms > 0 ? timeout_ms : 300000;
    w->store = store;
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix ? prefix : "atoll");
    if (be->world_init(w, err, errlen) != 0) {
        free(w);
        return -1;
    }
    int *all = malloc(sizeof(int) * (size_t)world);
    for (int i = 0; i < world; i++) all[i] = i;
    w->world_comm = group_alloc(w, "world", all, world, 0);
    free(all);
    if (be->group_init(w->world_comm) != 0) {
        snprintf(err, errlen, "%s", w->err);
        comm_world_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

static int env_int(const char *name, int *v, char *err, size_t errlen)
{
    const char *s = getenv(name);
    char *end = NULL;
    long x = s ? strtol(s, &end, 10) : -1;
    if (!s || !*s || *end || x < 0 || x > 1 << 20) {
        snprintf(err, errlen, "comm: environment %s must be a non-negative integer (got '%s'); "
                 "start ranks with atoll-train --nproc-per-node or a launcher that sets it",
                 name, s ? s : "(unset)");
        return -1;
    }
    *v = (int)x;
    return 0;
}

int comm_world_init_env(comm_world **out, comm_backend_kind kind, int flags, char *err,
                        size_t errlen)
{
    int rank, world, timeout_ms = 0;
    if (!getenv("RANK") && !getenv("WORLD_SIZE"))
        return comm_world_init(out, kind, 0, 1, NULL, NULL, flags, 0, err, errlen);
    if (env_int("RANK", &rank, err, errlen) || env_int("WORLD_SIZE", &world, err, errlen))
        return -1;
    if (getenv("ATOLL_COMM_TIMEOUT_MS") && env_int("ATOLL_COMM_TIMEOUT_MS", &timeout_ms, err, errlen))
        return -1;
    store_client *sc = NULL;
    if (store_connect_env(30000, &sc, err, errlen) != STORE_OK) return -1;
    if (comm_world_init(out, kind, rank, world, sc, NULL, flags, timeout_ms, err, errlen) != 0) {
        store_close(sc);
        return -1;
    }
    (*out)->owns_store = 1;
    return 0;
}

void comm_world_free(comm_world *w)
{
    if (!w) return;
    for (int i = 0; i < w->ngroups; i++) group_free(w->groups[i]);
    group_free(w->world_comm);
    w->be->world_free(w);
    if (w->owns_store) store_close(w->store);
    free(w);
}

int comm_world_rank(const comm_world *w) { return w->rank; }
int comm_world_size(const comm_world *w) { return w->size; }
comm_backend_kind comm_world_backend(const comm_world *w) { return w->kind; }
const char *comm_error(const comm_world *w) { return w->err; }
comm *comm_world_comm(comm_world *w) { return w->world_comm; }

int comm_group_new(comm_world *w, const char *name, const int *ranks, int n, comm **out)
{
    *out = NULL;
    int index = ++w->nsplits;
    if (n < 0 || n > w->size)
        return comm_fail(w, "comm: group '%s' has %d ranks; world size is %d", name, n, w->size);
    if (w->ngroups >= COMM_MAX_GROUPS)
        return comm_fail(w, "comm: more than %d groups", COMM_MAX_GROUPS);
    int self = 0;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= w->size)
            return comm_fail(w, "comm: group '%s' names rank %d outside world size %d", name,
                             ranks[i], w->size);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return comm_fail(w, "comm: group '%s' lists rank %d twice", name, ranks[i]);
        self += ranks[i] == w->rank;
    }
    if (n > 0 && !self)
        return comm_fail(w, "comm: rank %d called group '%s' with a group that does not contain it",
                         w->rank, name);
    comm *c = group_alloc(w, name, ranks, n, index);
    /* n == 0 still reaches the backend: NCCL's split is collective over the world. */
    if (w->be->group_init(c) != 0) {
        group_free(c);
        return -1;
    }
    if (n == 0) {
        group_free(c);
        return 0;
    }
    w->groups[w->ngroups++] = c;
    *out = c;
    return 0;
}

int comm_groups_new(comm_world *w, const struct rank_groups *g, comm **out)
{
    if (g->world != w->size)
        return comm_fail(w, "comm: layout is for %d ranks, the world has %d", g->world, w->size);
    for (int k = 0; k < GROUP_KINDS; k++) {
        int n = 0;
        const int *ranks = groups_find(g, (group_kind)k, w->rank, &n, NULL);
        if (comm_group_new(w, groups_kind_name((group_kind)k), ranks, ranks ? n : 0, &out[k]) != 0)
            return -1;
    }
    return 0;
}

int comm_rank(const comm *c) { return c->pos; }
int comm_size(const comm *c) { return c->size; }
int comm_world_rank_of(const comm *c, int pos) { return c->ranks[pos]; }
const char *comm_name(const comm *c) { return c->name; }

/* ---- staging device buffers through the host backend ---- */

static comm_copy_fn dev_to_host, dev_to_device;
static comm_alloc_fn stage_alloc = malloc;
static comm_free_fn stage_free = free;

static void stage_release(void *p)
{
    if (p) stage_free(p);
}

void comm_set_stage_memory(comm_alloc_fn alloc, comm_free_fn release)
{
    stage_alloc = alloc ? alloc : malloc;
    stage_free = release ? release : free;
}

void comm_set_device_copy(comm_copy_fn to_host, comm_copy_fn to_device)
{
    dev_to_host = to_host;
    dev_to_device = to_device;
}

int comm_world_can_stage(void) { return dev_to_host && dev_to_device; }

static int staged(const comm *c)
{
    return c->world->kind == COMM_BACKEND_HOST && (c->world->flags & COMM_DEVICE_BUFFERS);
}

/* The comm's staging memory, at least `bytes`; NULL when out of memory. */
static void *stage_mem(comm *c, size_t bytes)
{
    if (bytes > c->stage_bytes) { /* grow by half again: a few sizes recur every step */
        size_t want = bytes + bytes / 2;
        void *p = stage_alloc(want);
        if (!p) return NULL;
        stage_release(c->stage);
        c->stage = p;
        c->stage_bytes = want;
    }
    return c->stage;
}

static int stage_oom(comm *c, const char *what, size_t bytes)
{
    return comm_fail(c->world, "comm: %s on '%s': no host memory to stage %zu bytes", what, c->name, bytes);
}

static int comm_allreduce_impl(comm *c, float *buf, size_t n, comm_op op)
{
    if (n == 0) return 0;
    if (!staged(c)) return c->world->be->allreduce(c, buf, n, op);
    float *h = stage_mem(c, n * sizeof(float));
    if (!h) return stage_oom(c, "all-reduce", n * sizeof(float));
    dev_to_host(h, buf, n * sizeof(float));
    if (c->world->be->allreduce(c, h, n, op)) return -1;
    dev_to_device(buf, h, n * sizeof(float));
    return 0;
}

static int comm_allreduce_async_impl(comm *c, float *buf, size_t n, comm_op op)
{
    if (n == 0) return 0;
    if (!c->world->be->allreduce_async) return comm_allreduce(c, buf, n, op);
    return c->world->be->allreduce_async(c, buf, n, op);
}

static int comm_reduce_impl(comm *c, float *buf, size_t n, comm_op op, int root, int async)
{
    if (root < 0 || root >= c->size)
        return comm_fail(c->world, "comm: reduce root %d outside group '%s' of size %d", root, c->name, c->size);
    if (n == 0) return 0;
    if (!staged(c)) {
        if (async && c->world->be->reduce_async) return c->world->be->reduce_async(c, buf, n, op, root);
        return c->world->be->reduce(c, buf, n, op, root);
    }
    float *h = stage_mem(c, n * sizeof(float));
    if (!h) return stage_oom(c, "reduce", n * sizeof(float));
    dev_to_host(h, buf, n * sizeof(float));
    if (c->world->be->reduce(c, h, n, op, root)) return -1;
    if (c->pos == root) dev_to_device(buf, h, n * sizeof(float));
    return 0;
}

int comm_wait(comm *c)
{
    if (!c->world->be->wait) return 0;
    int64_t t0 = watch_enter(c, OP_WAIT, NULL, 0);
    return watch_leave(c, t0, c->world->be->wait(c));
}

static int comm_reduce_scatter_impl(comm *c, const float *in, float *out, size_t n, comm_op op)
{
    if (n == 0) return 0;
    if (in == out)
        return comm_fail(c->world, "comm: reduce-scatter on '%s' needs distinct in and out buffers",
                         c->name);
    if (!staged(c)) return c->world->be->reduce_scatter(c, in, out, n, op);
    size_t all = n * (size_t)c->size;
    float *h = stage_mem(c, (all + n) * sizeof(float));
    if (!h) return stage_oom(c, "reduce-scatter", (all + n) * sizeof(float));
    dev_to_host(h, in, all * sizeof(float));
    if (c->world->be->reduce_scatter(c, h, h + all, n, op)) return -1;
    dev_to_device(out, h + all, n * sizeof(float));
    return 0;
}

static int comm_allgather_impl(comm *c, const float *in, float *out, size_t n)
{
    if (n == 0) return 0;
    if (!staged(c)) return c->world->be->allgather(c, in, out, n);
    size_t all = n * (size_t)c->size;
    float *h = stage_mem(c, all * sizeof(float));
    if (!h) return stage_oom(c, "all-gather", all * sizeof(float));
    dev_to_host(h + (size_t)c->pos * n, in, n * sizeof(float));
    if (c->world->be->allgather(c, h + (size_t)c->pos * n, h, n)) return -1;
    dev_to_device(out, h, all * sizeof(float));
    return 0;
}

static int comm_broadcast_impl(comm *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size)
        return comm_fail(c->world, "comm: broadcast root %d outside group '%s' of size %d", root,
                         c->name, c->size);
    if (bytes == 0 || c->size == 1) return 0;
    if (!staged(c)) return c->world->be->broadcast(c, buf, bytes, root);
    void *h = stage_mem(c, bytes);
    if (!h) return stage_oom(c, "broadcast", bytes);
    if (c->pos == root) dev_to_host(h, buf, bytes);
    if (c->world->be->broadcast(c, h, bytes, root)) return -1;
    if (c->pos != root) dev_to_device(buf, h, bytes);
    return 0;
}

static int comm_barrier_impl(comm *c)
{
    if (c->size == 1) return 0;
    return c->world->be->barrier(c);
}

static int comm_p2p_batch_impl(comm *c, comm_p2p *ops, int n)
{
    for (int i = 0; i < n; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->size || ops[i].peer == c->pos)
            return comm_fail(c->world, "comm: %s peer %d is not another position in group '%s' (size %d)",
                             ops[i].is_send ? "send" : "recv", ops[i].peer, c->name, c->size);
        if (ops[i].tag >= 0x80000000u)
            return comm_fail(c->world, "comm: tag %u on group '%s' is reserved (user tags are < 2^31)",
                             ops[i].tag, c->name);
    }
    if (n == 0) return 0;
    if (!staged(c)) return c->world->be->p2p_batch(c, ops, n);
    /* each op gets its own slice of the staging memory */
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (ops[i].bytes + 63) / 64 * 64;
    char *h = stage_mem(c, total ? total : 64);
    comm_p2p *hops = malloc(sizeof *hops * (size_t)n);
    if (!h || !hops) {
        free(hops);
        return stage_oom(c, "send/recv", total);
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        hops[i] = ops[i];
        hops[i].buf = h + at;
        if (ops[i].is_send) dev_to_host(hops[i].buf, ops[i].buf, ops[i].bytes);
        at += (ops[i].bytes + 63) / 64 * 64;
    }
    int rc = c->world->be->p2p_batch(c, hops, n);
    for (int i = 0; i < n && !rc; i++)
        if (!ops[i].is_send) dev_to_device(ops[i].buf, hops[i].buf, ops[i].bytes);
    free(hops);
    return rc;
}

int comm_device_stalls(comm *c, double *s)
{
    if (s) *s = 0.0;
    if (staged(c) || !c->world->be->stalls || c->size <= 1) return 0;
    double got = 0.0;
    int rc = c->world->be->stalls(c, &got);
    if (s) *s = got;
    return rc;
}

int comm_send(comm *c, const void *buf, size_t bytes, int peer, uint32_t tag)
{
    comm_p2p op = {1, (void *)buf, bytes, peer, tag};
    return comm_p2p_batch(c, &op, 1);
}

int comm_recv(comm *c, void *buf, size_t bytes, int peer, uint32_t tag)
{
    comm_p2p op = {0, buf, bytes, peer, tag};
    return comm_p2p_batch(c, &op, 1);
}

int comm_allreduce(comm *c, float *buf, size_t n, comm_op op)
{
    int64_t t0 = watch_enter(c, OP_ALLREDUCE, NULL, 0);
    return watch_leave(c, t0, comm_allreduce_impl(c, buf, n, op));
}

int comm_allreduce_async(comm *c, float *buf, size_t n, comm_op op)
{
    int64_t t0 = watch_enter(c, OP_ALLREDUCE, NULL, 0);
    return watch_leave(c, t0, comm_allreduce_async_impl(c, buf, n, op));
}

int comm_reduce(comm *c, float *buf, size_t n, comm_op op, int root)
{
    int64_t t0 = watch_enter(c, OP_REDUCE, NULL, 0);
    return watch_leave(c, t0, comm_reduce_impl(c, buf, n, op, root, 0));
}

int comm_reduce_async(comm *c, float *buf, size_t n, comm_op op, int root)
{
    int64_t t0 = watch_enter(c, OP_REDUCE, NULL, 0);
    return watch_leave(c, t0, comm_reduce_impl(c, buf, n, op, root, 1));
}

int comm_reduce_scatter(comm *c, const float *in, float *out, size_t n, comm_op op)
{
    int64_t t0 = watch_enter(c, OP_REDUCE_SCATTER, NULL, 0);
    return watch_leave(c, t0, comm_reduce_scatter_impl(c, in, out, n, op));
}

int comm_allgather(comm *c, const float *in, float *out, size_t n)
{
    int64_t t0 = watch_enter(c, OP_ALLGATHER, NULL, 0);
    return watch_leave(c, t0, comm_allgather_impl(c, in, out, n));
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    int64_t t0 = watch_enter(c, OP_BROADCAST, NULL, 0);
    return watch_leave(c, t0, comm_broadcast_impl(c, buf, bytes, root));
}

int comm_barrier(comm *c)
{
    int64_t t0 = watch_enter(c, OP_BARRIER, NULL, 0);
    return watch_leave(c, t0, comm_barrier_impl(c));
}

int comm_p2p_batch(comm *c, comm_p2p *ops, int n)
{
    int64_t t0 = watch_enter(c, OP_P2P, ops, n);
    return watch_leave(c, t0, comm_p2p_batch_impl(c, ops, n));
}
