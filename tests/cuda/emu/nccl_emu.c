/* nccl_emu: the NCCL calls engine/comm_nccl.c makes, for atoll-train-emu's
 * ranks, each a process with its own emulated device (ATOLL_EMU_GPUS,
 * cudart_emu.c). Defined in the program, these take the place of libnccl's.
 *
 * A communicator is a shared-memory segment its ranks map: a counter per rank
 * for barriers, a slot per rank that a collective's pieces pass through, and a
 * byte ring per ordered pair of ranks for sends and receives. Collectives and
 * send/receive groups are queued on the caller's stream and run there, behind
 * the host (emu_stream.h), as NCCL's kernels run on a GPU: a result is there
 * only for work the host has ordered after it. Sums are added in rank order, so
 * every rank gets the same bits (as NCCL's all-reduce gives every rank).
 *
 * What NCCL would do wrong loudly, this does loudly: a receive whose size is
 * not the size sent (sends and receives between two ranks matched out of
 * order) or a rank waiting EMU_NCCL_HANG_S for its peers (a hang on NCCL)
 * aborts the process with a line that says which. Types: ncclFloat32 (sum and
 * average) and ncclUint8 (broadcast, send, receive), what atoll uses; others
 * are refused with ncclInvalidArgument. */
#include <nccl.h>

#include "emu_stream.h"
#include "errf.h"

#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EMU_NCCL_SLOT ((size_t)1 << 20) /* bytes a rank passes in one round of a collective */
#define EMU_NCCL_RING ((size_t)256 << 10) /* bytes in flight from one rank to another */
#define EMU_NCCL_HANG_S 120.0
#define EMU_NCCL_MAGIC "atoll-nccl-emu"
#define LINE 64

struct ncclComm {
    char name[200]; /* the segment's, for messages too */
    int rank, nranks;
    uint8_t *base;
    size_t bytes;
    uint64_t phase; /* barriers passed */
    int splits;     /* ncclCommSplits of this communicator so far */
    cudaStream_t stream; /* where its work was last queued: drained before host-side use */
};

/* ---- the segment ---- */

static uint64_t *arrive(ncclComm_t c, int r) { return (uint64_t *)(c->base + (size_t)r * LINE); }
static uint8_t *slot(ncclComm_t c, int r) { return c->base + (size_t)c->nranks * LINE + (size_t)r * EMU_NCCL_SLOT; }
static uint8_t *ring(ncclComm_t c, int from, int to)
{
    size_t at = (size_t)c->nranks * (LINE + EMU_NCCL_SLOT) + (size_t)(from * c->nranks + to) * (2 * LINE + EMU_NCCL_RING);
    return c->base + at; /* the count of bytes written, of bytes read, then the bytes */
}
enum { WRITTEN = 0, READ = 1 };
static uint64_t *ring_count(ncclComm_t c, int from, int to, int which)
{
    return (uint64_t *)(ring(c, from, to) + (size_t)which * LINE);
}

/* Between looks at shared memory: yield a while, then sleep (ranks outnumber cores). */
static void pause_a_little(unsigned *spins)
{
    if (++*spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = { 0, 20000 };
    nanosleep(&ts, NULL);
}

static void hang(ncclComm_t c, const char *what, int peer)
{
    fprintf(stderr, "nccl emulation: rank %d of %s waited %.0f s for rank %d in %s: on NCCL this hangs\n", c->rank,
            c->name, EMU_NCCL_HANG_S, peer, what);
    abort();
}

static void barrier(ncclComm_t c, const char *what)
{
    uint64_t ph = ++c->phase;
    __atomic_store_n(arrive(c, c->rank), ph, __ATOMIC_RELEASE);
    for (int r = 0; r < c->nranks; r++) {
        double t0 = atoll_mono_s();
        unsigned spins = 0;
        while (__atomic_load_n(arrive(c, r), __ATOMIC_ACQUIRE) < ph) {
            pause_a_little(&spins);
            if (atoll_mono_s() - t0 > EMU_NCCL_HANG_S) hang(c, what, r);
        }
    }
}

static size_t segment_bytes(int n)
{
    return (size_t)n * (LINE + EMU_NCCL_SLOT) + (size_t)n * (size_t)n * (2 * LINE + EMU_NCCL_RING);
}

/* Maps the segment `name` (made zero by the first rank to open it), waits for
 * every rank to have it, and removes its name (the mappings stay). */
static ncclResult_t comm_open(const char *name, int nranks, int rank, ncclComm_t *out)
{
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->rank = rank;
    c->nranks = nranks;
    c->bytes = segment_bytes(nranks);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->bytes)) {
        fprintf(stderr, "nccl emulation: shared memory %s: %m\n", name);
        if (fd >= 0) close(fd);
        free(c);
        return ncclSystemError;
    }
    c->base = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->base == MAP_FAILED) {
        free(c);
        return ncclSystemError;
    }
    barrier(c, "setting up the communicator");
    if (rank == 0) shm_unlink(name);
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    uint64_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r) r = (uint64_t)getpid() * 2654435761u ^ (uint64_t)atoll_mono_s();
    if (fd >= 0) close(fd);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "%s-%d-%016llx", EMU_NCCL_MAGIC, (int)getpid(), (unsigned long long)r);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (strncmp(id.internal, EMU_NCCL_MAGIC, strlen(EMU_NCCL_MAGIC)) || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    char name[200];
    snprintf(name, sizeof name, "/%.100s", id.internal);
    return comm_open(name, nranks, rank, comm);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    (void)config;
    if (!comm) return ncclInvalidArgument;
    emu_stream_drain(comm->stream); /* the slots are the host's now */
    int mine[2] = { color, key };
    memcpy(slot(comm, comm->rank), mine, sizeof mine);
    barrier(comm, "ncclCommSplit");
    int n = 0, newrank = 0;
    for (int r = 0; r < comm->nranks; r++) {
        int theirs[2];
        memcpy(theirs, slot(comm, r), sizeof theirs);
        if (color == NCCL_SPLIT_NOCOLOR || theirs[0] != color) continue;
        n++;
        if (theirs[1] < key || (theirs[1] == key && r < comm->rank)) newrank++;
    }
    barrier(comm, "ncclCommSplit");
    int split = comm->splits++;
    *newcomm = NULL;
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    char name[200];
    snprintf(name, sizeof name, "%.150s.%d.%d", comm->name, split, color);
    return comm_open(name, n, newrank, newcomm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    emu_stream_drain(comm->stream);
    munmap(comm->base, comm->bytes);
    free(comm);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (emulated NCCL: shared memory)";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL: atoll's types and operations only)";
    case ncclInvalidUsage: return "invalid usage";
    default: return "emulated NCCL error";
    }
}

/* ---- collectives, run on the stream ---- */

typedef enum { OP_ALLREDUCE, OP_REDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_P2P } op_kind;

typedef struct {
    int send, peer;
    uint8_t *buf;
    size_t bytes, moved;
    int header;   /* the size has gone (send) or come (receive) */
    uint64_t end; /* send: the ring's read count once the receiver has taken it all (set with the size) */
    int done;
} p2p;

typedef struct {
    op_kind kind;
    ncclComm_t c;
    const void *in;
    void *out;
    size_t count; /* elements (bytes for ncclUint8) */
    size_t esize;
    int avg, root;
    p2p *ops;
    int nops;
} op;

/* out[i] = the sum over ranks of their slot's float at `at + i`, in rank order. */
static void sum_slots(ncclComm_t c, size_t at, size_t n, float *out, int avg)
{
    for (size_t i = 0; i < n; i++) {
        float s = ((const float *)slot(c, 0))[at + i];
        for (int r = 1; r < c->nranks; r++) s += ((const float *)slot(c, r))[at + i];
        out[i] = avg ? s / (float)c->nranks : s;
    }
}

static void run_allreduce(op *o)
{
    ncclComm_t c = o->c;
    size_t step = EMU_NCCL_SLOT / sizeof(float);
    for (size_t off = 0; off < o->count; off += step) {
        size_t n = o->count - off < step ? o->count - off : step;
        memcpy(slot(c, c->rank), (const float *)o->in + off, n * sizeof(float));
        barrier(c, o->kind == OP_REDUCE ? "reduce" : "all-reduce");
        if (o->kind == OP_ALLREDUCE || c->rank == o->root) sum_slots(c, 0, n, (float *)o->out + off, o->avg);
        barrier(c, o->kind == OP_REDUCE ? "reduce" : "all-reduce");
    }
}

static void run_reduce_scatter(op *o)
{
    ncclComm_t c = o->c;
    size_t step = EMU_NCCL_SLOT / sizeof(float) / (size_t)c->nranks;
    for (size_t off = 0; off < o->count; off += step) {
        size_t n = o->count - off < step ? o->count - off : step;
        for (int j = 0; j < c->nranks; j++)
            memcpy((float *)slot(c, c->rank) + (size_t)j * n, (const float *)o->in + (size_t)j * o->count + off,
                   n * sizeof(float));
        barrier(c, "reduce-scatter");
        sum_slots(c, (size_t)c->rank * n, n, (float *)o->out + off, o->avg);
        barrier(c, "reduce-scatter");
    }
}

/* All-gather (each rank's bytes to every rank, in rank order) and broadcast
 * (the root's bytes to every rank). */
static void run_gather(op *o)
{
    ncclComm_t c = o->c;
    int bcast = o->kind == OP_BROADCAST;
    int lo = bcast ? o->root : 0, hi = bcast ? o->root + 1 : c->nranks;
    size_t total = o->count * o->esize;
    for (size_t off = 0; off < total; off += EMU_NCCL_SLOT) {
        size_t n = total - off < EMU_NCCL_SLOT ? total - off : EMU_NCCL_SLOT;
        if (!bcast || c->rank == o->root) memcpy(slot(c, c->rank), (const uint8_t *)o->in + off, n);
        barrier(c, bcast ? "broadcast" : "all-gather");
        for (int j = lo; j < hi; j++) memmove((uint8_t *)o->out + (bcast ? 0 : (size_t)j * total) + off, slot(c, j), n);
        barrier(c, bcast ? "broadcast" : "all-gather");
    }
}

/* Bytes that can move through a pair's ring now: room to write (send) or bytes to read. */
static size_t ring_room(ncclComm_t c, int from, int to, int send)
{
    uint64_t w = __atomic_load_n(ring_count(c, from, to, WRITTEN), __ATOMIC_ACQUIRE);
    uint64_t rd = __atomic_load_n(ring_count(c, from, to, READ), __ATOMIC_ACQUIRE);
    return send ? EMU_NCCL_RING - (size_t)(w - rd) : (size_t)(w - rd);
}

/* Copies up to n bytes into (send) or out of a pair's ring; how many moved. */
static size_t ring_move(ncclComm_t c, int from, int to, uint8_t *buf, size_t n, int send)
{
    size_t room = ring_room(c, from, to, send);
    if (n > room) n = room;
    uint64_t *mine = ring_count(c, from, to, send ? WRITTEN : READ); /* this side alone moves it */
    uint64_t at = __atomic_load_n(mine, __ATOMIC_RELAXED);
    uint8_t *data = ring(c, from, to) + 2 * LINE;
    for (size_t done = 0; done < n;) {
        size_t i = (size_t)((at + done) % EMU_NCCL_RING), k = EMU_NCCL_RING - i;
        if (k > n - done) k = n - done;
        if (send) memcpy(data + i, buf + done, k);
        else memcpy(buf + done, data + i, k);
        done += k;
    }
    __atomic_store_n(mine, at + n, __ATOMIC_RELEASE);
    return n;
}

/* One step of a send or receive: the size first (8 bytes, all at once), then
 * the bytes. 1 if anything moved or it is done. A send is done once the
 * receiver has taken every byte (NCCL's send is blocking: it may wait for the
 * receive), so an order of sends and receives that needs buffering to finish
 * hangs here too. */
static int p2p_step(ncclComm_t c, p2p *p)
{
    int from = p->send ? c->rank : p->peer, to = p->send ? p->peer : c->rank;
    int moved = 0;
    if (!p->header) {
        uint64_t size = p->bytes;
        if (ring_room(c, from, to, p->send) < sizeof size) return 0;
        if (p->send) p->end = __atomic_load_n(ring_count(c, from, to, WRITTEN), __ATOMIC_RELAXED) + sizeof size + p->bytes;
        ring_move(c, from, to, (uint8_t *)&size, sizeof size, p->send);
        if (!p->send && size != p->bytes) {
            fprintf(stderr, "nccl emulation: rank %d of %s posted a receive of %zu bytes from rank %d, which sent %llu: "
                    "the sends and receives between the two are matched out of order\n", c->rank, c->name, p->bytes,
                    p->peer, (unsigned long long)size);
            abort();
        }
        p->header = moved = 1;
    }
    size_t n = ring_move(c, from, to, p->buf + p->moved, p->bytes - p->moved, p->send);
    p->moved += n;
    p->done = p->moved == p->bytes && (!p->send || __atomic_load_n(ring_count(c, from, to, READ), __ATOMIC_ACQUIRE) >= p->end);
    return moved || n > 0 || p->done;
}

/* A group's sends and receives, all progressing together (as in ncclGroupEnd);
 * between one pair of ranks, in the order they were posted. */
static void run_p2p(op *o)
{
    ncclComm_t c = o->c;
    double t0 = atoll_mono_s();
    unsigned spins = 0;
    for (;;) {
        int left = 0, moved = 0, stuck = -1;
        for (int i = 0; i < o->nops; i++) {
            p2p *p = &o->ops[i];
            if (p->done) continue;
            int first = 1; /* the first unfinished op of its kind to its peer */
            for (int j = 0; j < i && first; j++) {
                p2p *q = &o->ops[j];
                if (q->send == p->send && q->peer == p->peer && !q->done) first = 0;
            }
            left++;
            if (!first) continue;
            if (p2p_step(c, p)) moved = 1;
            else stuck = p->peer;
        }
        if (!left) return;
        if (moved) {
            t0 = atoll_mono_s();
            spins = 0;
            continue;
        }
        pause_a_little(&spins);
        if (atoll_mono_s() - t0 > EMU_NCCL_HANG_S) hang(c, "a send/receive group", stuck);
    }
}

static void run_op(void *arg)
{
    op *o = arg;
    switch (o->kind) {
    case OP_ALLREDUCE:
    case OP_REDUCE: run_allreduce(o); break;
    case OP_REDUCE_SCATTER: run_reduce_scatter(o); break;
    case OP_ALLGATHER:
    case OP_BROADCAST: run_gather(o); break;
    case OP_P2P: run_p2p(o); break;
    }
    free(o->ops);
    free(o);
}

static size_t type_size(ncclDataType_t t)
{
    return t == ncclFloat32 ? 4 : t == ncclUint8 ? 1 : 0;
}

static ncclResult_t queue(op o, cudaStream_t s)
{
    op *q = malloc(sizeof *q);
    if (!q) return ncclSystemError;
    *q = o;
    o.c->stream = s;
    emu_stream_enqueue(s, run_op, q);
    return ncclSuccess;
}

static ncclResult_t reduction(op_kind kind, const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t r,
                              int root, ncclComm_t c, cudaStream_t s)
{
    if (!c || t != ncclFloat32 || (r != ncclSum && r != ncclAvg) || root < 0 || root >= c->nranks)
        return ncclInvalidArgument;
    return queue((op){ .kind = kind, .c = c, .in = in, .out = out, .count = count, .esize = 4, .avg = r == ncclAvg,
                       .root = root }, s);
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t r, ncclComm_t c,
                           cudaStream_t s)
{
    return reduction(OP_ALLREDUCE, in, out, count, t, r, 0, c, s);
}

ncclResult_t ncclReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t r, int root,
                        ncclComm_t c, cudaStream_t s)
{
    return reduction(OP_REDUCE, in, out, count, t, r, root, c, s);
}

ncclResult_t ncclReduceScatter(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t r, ncclComm_t c,
                               cudaStream_t s)
{
    return reduction(OP_REDUCE_SCATTER, in, out, count, t, r, 0, c, s);
}

ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s)
{
    if (!c || !type_size(t)) return ncclInvalidArgument;
    return queue((op){ .kind = OP_ALLGATHER, .c = c, .in = in, .out = out, .count = count, .esize = type_size(t) }, s);
}

ncclResult_t ncclBroadcast(const void *in, void *out, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s)
{
    if (!c || !type_size(t) || root < 0 || root >= c->nranks) return ncclInvalidArgument;
    return queue((op){ .kind = OP_BROADCAST, .c = c, .in = in, .out = out, .count = count, .esize = type_size(t),
                       .root = root }, s);
}

/* ---- groups of sends and receives ---- */

static struct {
    int depth;
    ncclComm_t c;
    cudaStream_t s;
    p2p *ops;
    int n, cap;
    ncclResult_t failed;
} G; /* the host thread's open group (atoll posts from one thread) */

ncclResult_t ncclGroupStart(void)
{
    G.depth++;
    return ncclSuccess;
}

static ncclResult_t post(int send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s)
{
    if (!c || !type_size(t) || peer < 0 || peer >= c->nranks || peer == c->rank) return ncclInvalidArgument;
    int alone = G.depth == 0;
    if (alone) ncclGroupStart();
    if (G.n && (G.c != c || G.s != s)) G.failed = ncclInvalidUsage; /* one communicator and stream a group */
    if (G.n == G.cap && !G.failed) {
        int cap = G.cap ? 2 * G.cap : 8;
        p2p *n = realloc(G.ops, sizeof *n * (size_t)cap);
        if (n) {
            G.ops = n;
            G.cap = cap;
        } else {
            G.failed = ncclSystemError;
        }
    }
    ncclResult_t r = G.failed;
    if (!r) {
        G.c = c;
        G.s = s;
        G.ops[G.n++] = (p2p){ .send = send, .peer = peer, .buf = buf, .bytes = count * type_size(t) };
    }
    if (alone) {
        ncclResult_t e = ncclGroupEnd();
        return r ? r : e;
    }
    return r;
}

ncclResult_t ncclGroupEnd(void)
{
    if (G.depth == 0) return ncclInvalidUsage;
    if (--G.depth) return ncclSuccess;
    ncclResult_t r = G.failed;
    if (r == ncclSuccess && G.n) { /* the group's ops go with it */
        r = queue((op){ .kind = OP_P2P, .c = G.c, .ops = G.ops, .nops = G.n }, G.s);
        if (r == ncclSuccess) {
            G.ops = NULL;
            G.cap = 0;
        }
    }
    G.n = 0;
    G.failed = ncclSuccess;
    return r;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s)
{
    return post(1, (void *)buf, count, t, peer, c, s);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s)
{
    return post(0, buf, count, t, peer, c, s);
}
