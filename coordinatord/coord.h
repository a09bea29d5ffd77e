/* coord: the coordinator's state, shared by its modules. One event loop owns it.
 *
 *   server.c     listener, connections, timers, signals (the libuv side)
 *   dispatch.c   one handler per request type (no libuv: fuzzable, testable)
 *   registry.c   nodes and liveness          jobs.c       job state machine
 *   scheduler.c  placement of pending jobs   store.c      SQLite state
 *   events.c     the audit log               rendezvous.c key-value store for ranks
 *   series.c     per-step metrics of jobs    logs.c       rank logs fetched from nodes
 *   hang.c       hangs and their culprits    straggler.c  per-rank compute scores
 *   restart.c    reaction to faults, history goodput.c    where wall time went
 *   http.c       /metrics, /api/..., /    slurm_watch.c nodes Slurm drains, downs or fails
 */
#ifndef ATOLL_COORD_H
#define ATOLL_COORD_H

#include <stdint.h>

#include "atoll.pb-c.h"
#include "auth.h"
#include "kv.h"
#include "registry.h"
#include "store.h"

typedef struct coord_opts {
    char listen[128];
    char http[128];          /* "" = no HTTP listener */
    char state_dir[512];
    char token_file[600];
    int heartbeat_ms;        /* told to workers */
    int suspect_ms;          /* silence before a node is suspect */
    int node_timeout_ms;     /* silence before a node is dead */
    uint32_t max_frame;
    char fabric[512];        /* Slurm topology.conf for placement; "" = none */
    int fabric_from_slurm;   /* no --fabric, in a Slurm job: ask Slurm (common/slurm.h) */
    int stop_grace_ms;       /* on SIGTERM, how long to wait for active jobs to end; 0 = stop at once */
    char http_token_file[512]; /* "" = HTTP open to whoever can connect */
    int http_max_conns;
    /* failure detection */
    int hang_floor_ms;       /* a job is hung when no step came for max(floor, factor x step time) */
    double hang_factor;
    double straggler_threshold; /* compute time over the job's median that makes a straggler */
    int straggler_exclude_ms; /* a straggler this long gets its node drained (0 = never) */
    int max_restarts;        /* for jobs that do not say */
    int slurm_poll_ms;       /* ask Slurm for its node states this often (0 = never; slurm_watch.c) */
} coord_opts;

/* A connected client, as the handlers see it. */
typedef struct coord_peer {
    void *conn;              /* rpc_conn *, NULL in tests and fuzzing */
    int role;                /* Atoll__Role */
    uint64_t job;            /* ROLE_RANK: the (job, epoch) whose secret it proved */
    uint32_t epoch;
    char name[64];
    char address[64];
    reg_node *node;          /* set once a worker has registered */
} coord_peer;

/* Log2 histogram of handling times in microseconds: bucket i counts [2^(i-1), 2^i). */
#define COORD_HIST_BUCKETS 24
typedef struct coord_hist {
    uint64_t count, sum_us;
    uint64_t bucket[COORD_HIST_BUCKETS];
} coord_hist;

struct kv_store;

typedef struct series_acc series_acc;

/* A rank that failed, waiting for the settle period before the job is failed. */
typedef struct live_fail {
    int rank, pid, exit_status, term_signal;
    char node[64];
    char tail[1024];
} live_fail;

#define LIVE_FAILS 8

/* One rank of an active job's current placement, as its reports show it. */
typedef struct live_rank {
    char node[64];
    int stage;               /* its pipeline stage (position in its pp group) */
    Atoll__RankWatch *watch; /* newest watchdog report (owned), NULL before the first */
    int64_t watch_ms;        /* when that report was current (its arrival less its age) */
    int64_t iteration;       /* newest step it reported */
    double compute_ms;       /* smoothed compute time per step (EWMA) */
    int samples;
    double score;            /* compute_ms over the job's median; 0 until scored */
    int straggler;
    int streak;              /* scores in a row over (> 0) or under (< 0) the threshold */
    int64_t straggler_since; /* when it became one (0: is not) */
    int gone;                /* restarting: its node reported it no longer running */
} live_rank;

#define LIVE_STEP_TIMES 16

/* An active job (placing, starting, running, restarting), cached in memory so
 * heartbeats with metrics and exits need no database read (jobs.c keeps it in
 * step with every state change; rebuilt from the store at start). */
typedef struct live_job {
    uint64_t id;
    uint32_t epoch;
    int state;
    int world, pp;
    struct series_acc *acc;  /* series.c: steps being gathered (NULL until the first report) */
    int nfail;
    live_fail fail[LIVE_FAILS];
    int64_t settle_ms;       /* fail the job at this time (after the first failure) */
    int64_t first_fail_ms;   /* when the first failure arrived */
    /* progress (hang.c): ranks of the placement, newest step, step times */
    live_rank *ranks;        /* [nranks], from the layout (jobs_live_ranks) */
    int nranks;
    int64_t newest;          /* newest iteration reported by any rank */
    int64_t progress_ms;     /* when it advanced */
    double step_ms[LIVE_STEP_TIMES]; /* rank 0's recent step times (ring) */
    int nstep;
    int hung;                /* a hang was declared for this placement */
    int64_t waiting_ms;      /* a rank's watchdog last reported a wait past its step time */
    int64_t asked_ms;        /* its nodes were last asked to report now */
    int asked_pending;       /* ... and how many of them have not answered yet */
    int64_t straggler_tick_ms;
    /* restart.c */
    int64_t restart_ms;      /* restarting since (0: not restarting) */
    int ran;                 /* this placement's first step was seen */
    int64_t checkpoint;      /* newest committed checkpoint reported by this placement */
    /* --time (jobs.c) */
    int64_t limit_s;         /* the spec's time limit; 0 none */
    int64_t deadline_ms;     /* first start + limit (0: none, or not started) */
    int64_t time_stop_ms;    /* when the ranks were told to checkpoint and stop for it */
} live_job;

typedef struct live_table {
    live_job **v;            /* open addressing on id; NULL = empty, LIVE_GONE = deleted */
    size_t cap, n, used;
} live_table;

typedef struct coord {
    coord_opts o;
    store *st;
    registry reg;
    auth_token token;
    auth_token http_token;   /* len 0: no bearer required */
    uint64_t jobs_gen;       /* bumped on every job change: HTTP caches key on it */
    int64_t started_ms;
    /* How frames leave: rpc_send in the daemon, a recorder in tests. */
    void (*send)(struct coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m);
    /* Closes a peer's connection (the daemon) or just forgets it (tests). */
    void (*drop)(struct coord *c, coord_peer *p, const char *reason);
    int64_t (*now)(void);    /* wall clock in ms; replaceable in tests */
    int schedule_pending;    /* the scheduler should run soon */
    /* The scheduler retries every pending job only when capacity may have grown
     * (sched_gen moved since its last full pass; the pass walks from sched_cursor a
     * bounded number of jobs per tick); otherwise only jobs newer than the newest it
     * tried (scheduler.c). */
    uint64_t sched_gen, sched_seen_gen, sched_seen_id, sched_cursor;
    uint64_t sched_head;     /* the oldest pending job that could not be placed (scheduler.c); 0: none */
    /* What submissions are checked against, over the nodes that are not dead
     * (scheduler.c): valid while gen == reg.gen + 1. */
    struct {
        uint64_t gen;
        int max_island;
        uint64_t max_gpu_memory;
        char gpu_name[128];
    } view;
    int sched_full;
    int64_t hang_tick_ms;    /* hang.c: its previous tick */
    uint64_t visit;          /* coord_layout_nodes: the current walk's stamp */
    struct kv_store *kv;     /* rendezvous keys (rendezvous.c) */
    live_table live;         /* active jobs (jobs.c) */
    struct logs_pending *logs; /* log reads forwarded to workers (logs.c) */
    uint64_t next_log_id;
    uint64_t metrics_records; /* RankMetrics received */
    int series_dirty;        /* reports gathered since the last flush */
    /* counters for /metrics */
    uint64_t frames, heartbeats, errors_sent, registrations;
    coord_hist hb_hist;
    void *server;            /* server.c's private state */
    struct fabric *fab;      /* switch tree from --fabric (fabric.h); NULL = leaves unknown */
    struct slurm_watch *slurm_watch; /* slurm_watch.c's poller while serving; NULL = not polling */
} coord;

int64_t coord_wall_ms(void);

/* The defaults of coordinatord's flags (INTERFACES.md); suspect_ms 0 = derived in main. */
void coord_opts_defaults(coord_opts *o);
/* Sets up state from opts with the store at `db_path` (":memory:" allowed). */
int coord_init(coord *c, const coord_opts *o, const char *db_path, char *err, size_t errlen);
void coord_free(coord *c);

/* ---- dispatch.c ---- */
#define COORD_JOBS_PAGE 256 /* jobs in one JobsReply at most */
void coord_dispatch(coord *c, coord_peer *p, uint16_t type, const uint8_t *payload, size_t len);
void coord_peer_closed(coord *c, coord_peer *p);
void coord_reply(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m);
void coord_error(coord *c, coord_peer *p, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Reads job `id` into *out (caller clears) or answers p with ERR_NOT_FOUND naming
 * it (ERR_INTERNAL on a store failure). 0 found, -1 answered. */
int coord_find_job(coord *c, coord_peer *p, uint64_t id, store_job *out);
/* The job's layout of its current epoch; NULL when it has none. Free with
 * atoll__job_layout__free_unpacked. */
Atoll__JobLayout *coord_layout(coord *c, uint64_t job, uint32_t epoch);
/* Calls fn (when not NULL) once for each distinct node of layout l the registry
 * knows, in rank order; returns how many there are. O(ranks). */
int coord_layout_nodes(coord *c, const Atoll__JobLayout *l, void (*fn)(coord *c, reg_node *n, void *ctx), void *ctx);
/* Builds the NodesReply for `name` ("" = all) into *out using arena memory. */
struct msg_arena;
int coord_nodes_reply(coord *c, const char *name, Atoll__NodesReply *out, struct msg_arena *a);
/* Fills a Job message from a stored job (strings borrowed from j, arrays from a). */
void coord_job_msg(const store_job *j, Atoll__Job *out, Atoll__JobSpec **spec_out, struct msg_arena *a);
/* Adds what one job's detail shows: its ranks' health (active jobs), max_restarts,
 * restart history and goodput (from the arena). */
void coord_job_detail(coord *c, const store_job *j, Atoll__Job *out, struct msg_arena *a);

/* ---- periodic work (called by server.c's timer) ---- */
void coord_tick(coord *c);

/* ---- server.c: serve until SIGTERM/SIGINT; 0 on a clean stop ---- */
int server_run(coord *c, char *err, size_t errlen);

/* ---- http.c ---- */
int http_start(coord *c, void *uv_loop, const char *hostport, int *port, char *err, size_t errlen);
void http_stop(coord *c);

/* ---- events.c ---- */
/* Appends an audit event and logs it. Call inside the transaction of the change. */
int events_add(coord *c, const char *kind, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- rendezvous.c ---- */
int rendezvous_init(coord *c);
void rendezvous_set(coord *c, coord_peer *p, const Atoll__KvSet *m);
void rendezvous_get(coord *c, coord_peer *p, const Atoll__KvGet *m);
void rendezvous_add(coord *c, coord_peer *p, const Atoll__KvAdd *m);
/* A job moved to `epoch` (older epochs' keys go) or ended (all its keys go). */
void rendezvous_job_changed(coord *c, uint64_t job, uint32_t epoch, int ended);
void rendezvous_expire(coord *c, int64_t now_ms);
void rendezvous_peer_closed(coord *c, coord_peer *p);
void rendezvous_free_all(coord *c);

/* ---- hang.c ---- */
/* A rank's watchdog report from `node`; takes ownership of w. */
void hang_watch(coord *c, const char *node, Atoll__RankWatch *w);
/* A step report: the job's progress and step time. */
void hang_step(coord *c, live_job *lj, const Atoll__RankMetrics *m);
/* Periodic: declares hangs, naming their culprits. */
void hang_tick(coord *c);
/* The rank(s) the others wait for, judged from the ranks' watchdog reports at
 * `now`: those that never entered the collective (or send/recv) the waiting
 * ranks are blocked in and are not waiting themselves, or whose watchdog went
 * silent for `frozen_ms`. Writes up to `max` ranks to culprits and returns how
 * many; `why` gets one line saying who waits where and why each culprit is one. */
int hang_culprits(const live_job *lj, int64_t now, int64_t frozen_ms, int *culprits, int max, char *why,
                  size_t len);
/* What the rank's watchdog last said, one line ("computing at iteration 12", "in tp all-reduce #41 ..."). */
void hang_describe(const live_rank *r, char *out, size_t len);
/* The median of rank 0's recent step times, ms (0 before any). */
double hang_step_ms(const live_job *lj);
/* The job's hang bound now: max(--hang-floor, --hang-factor x median step time); 0 before any step. */
int64_t hang_bound_ms(const coord *c, const live_job *lj);
/* A heartbeat from n arrived: when it is the last answer to a job's ReportNow,
 * that job is judged now. */
void hang_heard(coord *c, reg_node *n);

/* ---- straggler.c ---- */
void straggler_step(coord *c, live_job *lj, const Atoll__RankMetrics *m);
void straggler_tick(coord *c);

/* ---- slurm_watch.c ---- */
struct slurm_node;
/* Node states as Slurm reported them (slurm_parse_nodes): a registered node Slurm
 * now keeps from work is treated as lost (event, its jobs restart, not placeable),
 * one Slurm returned to service is placeable again. Nodes not registered are skipped. */
void slurm_watch_apply(coord *c, const struct slurm_node *v, int n);
/* Polls `scontrol -o show node` on the loop every --slurm-poll (nothing when 0).
 * stop closes its handles (a poll in flight is killed); free after the loop has run. */
int slurm_watch_start(coord *c, void *uv_loop);
void slurm_watch_stop(coord *c);
void slurm_watch_free(coord *c);

/* ---- logs.c ---- */
void logs_request(coord *c, coord_peer *p, const Atoll__LogsRequest *m);
void logs_data(coord *c, coord_peer *p, const Atoll__LogData *m);
void logs_expire(coord *c, int64_t now_ms);
void logs_peer_closed(coord *c, coord_peer *p);
void logs_free_all(coord *c);

void coord_hist_add(coord_hist *h, uint64_t us);
/* Smallest bucket bound below which a fraction q of samples fall (microseconds). */
uint64_t coord_hist_quantile(const coord_hist *h, double q);

#endif
