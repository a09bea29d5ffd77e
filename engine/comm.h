/* comm: collectives and point-to-point transfers over a group of ranks.
 *
 * One interface, two backends behind a vtable:
 *   - host (comm_host.c): TCP between processes, ring algorithms. For CPU ranks,
 *     and for CUDA ranks that share one GPU (see COMM_DEVICE_BUFFERS).
 *   - nccl (comm_nccl.c, built only with CUDA): one NCCL communicator per group,
 *     split from the world communicator; buffers are device pointers.
 *
 * A comm_world is this process's membership in the job (rank, world size, the
 * transport, the rendezvous store). A comm is a group: an ordered list of world
 * ranks; "position" means an index into that list, and every peer/root argument
 * below is a position, not a world rank. comm_world_comm() is the group of all
 * ranks in rank order.
 *
 * Ownership: the world owns every comm made from it (comm_world_free frees them).
 * Buffers stay the caller's; no call keeps a pointer past its return.
 *
 * Threads: calls on one comm must come from one thread at a time. Different
 * comms of one world may be used from different threads at once (host backend),
 * e.g. a data-parallel all-reduce overlapping pipeline sends.
 *
 * Errors: every call returns 0 or -1; comm_error(world) then holds a one-line
 * message naming the operation, the group and the peer. A dead peer is an error
 * (the launcher stops the job), not a hang.
 *
 * Matching: collectives on a comm must be called by all its members in the same
 * order with the same sizes. Point-to-point messages match by (group, sender,
 * tag) in the order sent; a send completes without waiting for its receive on
 * the host backend (buffered). NCCL has no tags: there, sends and receives
 * between two ranks must be issued in matching order, and pairs that could block
 * each other go in one comm_p2p_batch (NCCL group), as Megatron batches its
 * send_forward_recv_backward.
 */
#ifndef ATOLL_COMM_H
#define ATOLL_COMM_H

#include <stddef.h>
#include <stdint.h>

struct store_client;

typedef enum { COMM_BACKEND_HOST = 0, COMM_BACKEND_NCCL = 1 } comm_backend_kind;
typedef enum { COMM_SUM = 0, COMM_AVG = 1 } comm_op;

/* World options. */
enum {
    /* Buffers are CUDA device pointers. NCCL needs this. The host backend (CUDA
     * ranks sharing one GPU, where NCCL refuses) stages each buffer through host
     * memory with the copies given to comm_set_device_copy: device to host, the
     * TCP algorithm, host to device. Without those copies it refuses at init. */
    COMM_DEVICE_BUFFERS = 1 << 0,
};

/* The process's device<->host copies for staging device buffers through the
 * host backend (the engine passes its backend's to_host / to_device: they
 * complete before returning). Set before comm_world_init. */
typedef void (*comm_copy_fn)(void *dst, const void *src, size_t bytes);
void comm_set_device_copy(comm_copy_fn to_host, comm_copy_fn to_device);
/* Where the staging memory comes from (the engine gives page-locked memory,
 * which the device copies at full speed); malloc/free when not set. An alloc
 * returning NULL is an out-of-memory error of the collective. Set before
 * comm_world_init. */
typedef void *(*comm_alloc_fn)(size_t bytes);
typedef void (*comm_free_fn)(void *p);
void comm_set_stage_memory(comm_alloc_fn alloc, comm_free_fn release);

typedef struct comm_world comm_world;
typedef struct comm comm;

/* Joins the job: `rank` of `world` ranks, meeting through `store` (borrowed, must
 * outlive the world; may be NULL for a one-rank world). `prefix` namespaces the store keys so several worlds can
 * meet through one store (e.g. a restart epoch); NULL = "atoll". Collective over
 * all ranks. `timeout_ms` bounds the rendezvous and every later wait for a peer
 * (0 = 300 s). The host backend listens on ATOLL_HOST_ADDR if set, else on the
 * local address that routes to the store's host. Returns 0, or -1 with err set. */
int comm_world_init(comm_world **out, comm_backend_kind kind, int rank, int world,
                    struct store_client *store, const char *prefix, int flags, int timeout_ms,
                    char *err, size_t errlen);
/* Same, with rank and size from RANK and WORLD_SIZE and a store client from
 * MASTER_ADDR/MASTER_PORT (owned by the world); ATOLL_COMM_TIMEOUT_MS sets the
 * timeout. With neither RANK nor WORLD_SIZE set: a one-rank world, no store. */
int comm_world_init_env(comm_world **out, comm_backend_kind kind, int flags, char *err,
                        size_t errlen);
void comm_world_free(comm_world *w);

int comm_world_rank(const comm_world *w);
int comm_world_size(const comm_world *w);
comm_backend_kind comm_world_backend(const comm_world *w);
const char *comm_error(const comm_world *w);

comm *comm_world_comm(comm_world *w);

/* Makes the group `ranks[0..n)` (world ranks, this rank among them, no repeats).
 * Collective over the WORLD: every world rank calls it, in the same order, each
 * passing the group that contains it, so one call per partition (all TP groups,
 * then all DP groups, ...); NCCL splits by it. A rank in no group of the
 * partition passes n = 0 and gets *out = NULL. `name` labels messages ("tp"). */
int comm_group_new(comm_world *w, const char *name, const int *ranks, int n, comm **out);

/* Makes this rank's TP, PP, DP, MP and embedding groups of a layout (groups.h),
 * in that order, indexed by group_kind; out[k] is NULL where the rank is in no
 * group of kind k (embedding, for middle pipeline stages). Collective over the
 * world like comm_group_new. Returns 0 or -1 (comm_error). */
struct rank_groups;
int comm_groups_new(comm_world *w, const struct rank_groups *g, comm **out);

int comm_rank(const comm *c);             /* this rank's position */
int comm_size(const comm *c);
int comm_world_rank_of(const comm *c, int pos);
const char *comm_name(const comm *c);

/* fp32 collectives. n counts floats. With device buffers on NCCL every call
 * is ordered after the work already queued on the kernels' stream and before
 * the work queued after it (events, no host wait): the caller sees the same
 * order as with host buffers. */
int comm_allreduce(comm *c, float *buf, size_t n, comm_op op);
/* The same, but the kernels' stream does not wait for it: later kernels may
 * run while it does (the data-parallel all-reduce beside backward), until
 * comm_wait(c). Host backend: the same as comm_allreduce. */
int comm_allreduce_async(comm *c, float *buf, size_t n, comm_op op);
int comm_wait(comm *c);
/* In place: position `root` ends with the sum (or average) over every
 * position's buf; the other positions' buf is unspecified afterwards. */
int comm_reduce(comm *c, float *buf, size_t n, comm_op op, int root);
/* The same, queued like comm_allreduce_async (the kernels' stream does not wait
 * for it until comm_wait(c)). Host backend: the same as comm_reduce. */
int comm_reduce_async(comm *c, float *buf, size_t n, comm_op op, int root);
/* in: size*n floats (chunk i goes to position i); out: n floats. in != out. */
int comm_reduce_scatter(comm *c, const float *in, float *out, size_t n, comm_op op);
/* in: n floats; out: size*n floats (position i's chunk at i*n). in may equal out + rank*n. */
int comm_allgather(comm *c, const float *in, float *out, size_t n);
/* Bytes from position `root` to all. */
int comm_broadcast(comm *c, void *buf, size_t bytes, int root);
int comm_barrier(comm *c);

/* Point to point; peer is a position, tag < 2^31 (tags at or above are internal).
 * recv must be posted with exactly the sent size. */
int comm_send(comm *c, const void *buf, size_t bytes, int peer, uint32_t tag);
int comm_recv(comm *c, void *buf, size_t bytes, int peer, uint32_t tag);

typedef struct {
    int is_send;
    void *buf; /* const for sends */
    size_t bytes;
    int peer;
    uint32_t tag;
} comm_p2p;
/* Issues all ops so none waits on another: host posts every receive, then sends,
 * then waits; NCCL wraps them in one group, ordered like comm_allreduce (the
 * kernels' stream waits for the batch, the host does not). */
int comm_p2p_batch(comm *c, comm_p2p *ops, int n);

/* How long calls held the device up, for the pipeline's idle time. Where the
 * host waits for each call (the host backend, device buffers staged through
 * it, NCCL without the CUDA kernels), the caller times them on the host: this
 * returns 0 and sets *s (if s) to 0. Where calls are ordered on the device
 * (NCCL with the kernels' stream), the host goes on queueing and a host clock
 * would time the queueing, so each send/receive batch and barrier on c is
 * timed by two events: from where the kernels' stream had run what was queued
 * before the call to where it could go on (a barrier: where it ended). This
 * waits for the batches on c since the last call, sets *s to the seconds of
 * every such span since then, summed, forgets them and returns 1. -1 on a CUDA
 * error (comm_error). */
int comm_device_stalls(comm *c, double *s);

/* ---- the watchdog's view ----------------------------------------------------
 * Every call above marks its comm, from entry to return, as inside an op: which
 * one, the group's collective count (equal on every member for one collective)
 * and since when. Another thread (engine/watchdog.c) reads it with
 * comm_watch_get, so a hang can name the collective or send/recv each rank is
 * blocked in, on either backend. Each thread also sums the seconds it spent
 * inside comm calls, which the engine takes from its step time to tell compute
 * from waiting (straggler scores). */
typedef struct comm_watch_view {
    const char *op;      /* "all-reduce", ..., "send/recv", "wait" */
    uint64_t seq;        /* collectives entered on this comm so far (this one included); 0 for send/recv */
    double waited_s;     /* how long it has been inside */
    int npeers;          /* send/recv: the peers' world ranks (the first COMM_WATCH_PEERS) */
    int peers[4];
} comm_watch_view;
#define COMM_WATCH_PEERS 4
/* 1 with *v filled when a call on `c` is in progress, else 0. Any thread. */
int comm_watch_get(comm *c, comm_watch_view *v);
/* Seconds the calling thread has spent inside comm calls since it started. */
double comm_thread_comm_s(void);
/* Adds to that: the thread waited `s` seconds for comm calls made by another
 * thread (the data-parallel overlap helper), which is waiting, not computing;
 * or, s < 0, calls it was inside also waited for its own kernels (the
 * pipeline's on NCCL: its idle time is measured on the device). */
void comm_thread_waited(double s);
/* The world's groups: index 0 is the world group, then every group made. */
int comm_world_ncomms(const comm_world *w);
comm *comm_world_nth(comm_world *w, int i);

/* ---- backend vtable (for comm.c and the backends only) ---------------------- */

typedef struct comm_backend {
    const char *name;
    int (*world_init)(comm_world *w, char *err, size_t errlen);
    void (*world_free)(comm_world *w);
    int (*group_init)(comm *c); /* after c's ranks/name are filled in */
    void (*group_free)(comm *c);
    int (*allreduce)(comm *c, float *buf, size_t n, comm_op op);
    int (*reduce_scatter)(comm *c, const float *in, float *out, size_t n, comm_op op);
    int (*allgather)(comm *c, const float *in, float *out, size_t n);
    int (*broadcast)(comm *c, void *buf, size_t bytes, int root);
    int (*barrier)(comm *c);
    int (*p2p_batch)(comm *c, comm_p2p *ops, int n);
    int (*allreduce_async)(comm *c, float *buf, size_t n, comm_op op); /* NULL: synchronous */
    int (*reduce)(comm *c, float *buf, size_t n, comm_op op, int root);
    int (*reduce_async)(comm *c, float *buf, size_t n, comm_op op, int root); /* NULL: synchronous */
    int (*wait)(comm *c);                                              /* NULL: nothing pending */
    int (*stalls)(comm *c, double *s); /* comm_device_stalls; NULL: calls wait on the host */
} comm_backend;

#define COMM_MAX_GROUPS 256

struct comm {
    comm_world *world;
    char name[32];
    int *ranks; /* world ranks by position */
    int size, pos;
    uint32_t ctx;  /* host: tells this group's messages apart on a shared link */
    uint32_t seq;  /* host: collective counter */
    double xfer_s; /* host: seconds of p2p batches spent moving bytes (sends, and receives
                    * from their first byte on), so callers can tell transfer from waiting;
                    * backends that cannot tell leave it 0 */
    void *impl;    /* backend data */
    void *stage;   /* host backend with device buffers: staging memory (comm.c) */
    size_t stage_bytes;
    struct comm_watch *watch; /* what the comm is inside now (comm.c) */
};

struct comm_world {
    const comm_backend *be;
    comm_backend_kind kind;
    int rank, size, flags, timeout_ms;
    char prefix[64];
    struct store_client *store;
    int owns_store;
    comm *world_comm;
    comm *groups[COMM_MAX_GROUPS];
    int ngroups, nsplits;
    char err[512];
    void *impl;
};

extern const comm_backend comm_host_backend;
#ifdef ATOLL_HAVE_NCCL
extern const comm_backend comm_nccl_backend;
#endif

/* Whether comm_set_device_copy has given the staging copies. */
int comm_world_can_stage(void);

/* Sets w->err (printf-style) and returns -1. */
int comm_fail(comm_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
