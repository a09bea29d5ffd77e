/* store: the coordinator's durable state in one SQLite file (WAL mode).
 *
 * The schema is versioned (PRAGMA user_version) and brought up to date by the
 * migrations in store.c when the file is opened; a file newer than this binary
 * is refused. Callers group each state change and its audit event into one
 * transaction (store_begin/store_commit), so a kill -9 at any moment leaves
 * either both or neither. synchronous=FULL: an acknowledged change survives a
 * crash of the process and of the machine.
 *
 * Ownership: the store owns its sqlite handle. store_job.spec and blobs returned
 * by *_get are malloc'd and owned by the caller (store_job_clear, free). */
#ifndef ATOLL_STORE_H
#define ATOLL_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store store;

#define STORE_SCHEMA_VERSION 8

/* Opens (creating when absent) and migrates. path ":memory:" gives a private
 * in-memory database (tests, fuzzing). 0, or -1 with err. */
int store_open(store **out, const char *path, char *err, size_t errlen);
void store_close(store *s);
int store_schema_version(store *s);
const char *store_errmsg(store *s);

/* Empties every table, keeping the schema (ids start again at 1). For tests and
 * fuzzing, which reuse one store rather than build the schema again. 0 or -1. */
int store_reset(store *s);

int store_begin(store *s);
int store_commit(store *s);
void store_rollback(store *s);

/* ---- nodes ---- */
typedef struct store_node {
    char name[64];
    const uint8_t *info; /* packed atoll.Node (topology); borrowed during callbacks */
    size_t info_len;
    int state;           /* NODE_ALIVE / SUSPECT / DEAD (liveness only) */
    int drained;
    int64_t registered_ms, last_seen_ms;
} store_node;

int store_node_put(store *s, const store_node *n);
int store_node_set_state(store *s, const char *name, int state, int drained, int64_t last_seen_ms);
typedef int (*store_node_fn)(void *ctx, const store_node *n);
int store_nodes_each(store *s, store_node_fn fn, void *ctx);

/* ---- events ---- */
typedef struct store_event {
    uint64_t id;
    int64_t time_ms;
    const char *kind, *subject, *message;
} store_event;

int store_event_add(store *s, int64_t time_ms, const char *kind, const char *subject,
                    const char *message, uint64_t *id);
/* Events with id > after_id, oldest first; at most `limit` of the newest such. */
typedef int (*store_event_fn)(void *ctx, const store_event *e);
int store_events_each(store *s, uint64_t after_id, unsigned limit, store_event_fn fn, void *ctx);

/* ---- jobs ---- */
typedef struct store_job {
    uint64_t id;
    char name[128];
    int state;           /* Atoll__JobState */
    char message[512];   /* the state's reason: a refusal quotes the rank's own line */
    uint32_t restarts, epoch;
    int64_t step;
    double loss, tokens_per_s, mfu, bubble_measured, bubble_theory;
    int64_t created_ms, updated_ms;
    uint8_t *spec;       /* packed atoll.JobSpec, owned */
    size_t spec_len;
    char request_id[65]; /* the submitter's id for idempotent retries; "" = none */
    /* elastic restarts and goodput (restart.c, goodput.c) */
    int world;           /* ranks of the current placement (0: none yet) */
    int64_t checkpoint;  /* newest checkpoint step the job committed (0: none) */
    int64_t started_ms;  /* its first placement started; 0: never placed */
    int64_t ended_ms;    /* it ended (completed, failed, cancelled); 0: not yet */
    /* wall time lost, in ms, by cause */
    int64_t lost_startup_ms, lost_ckpt_ms, lost_detect_ms, lost_restart_ms, lost_recompute_ms;
    int stop_asked;      /* atoll cancel --checkpoint was sent: its saved exits are not --exit-duration's */
} store_job;

void store_job_clear(store_job *j);
/* Inserts and sets j->id (request_id is stored with it, unique when not ""). */
int store_job_insert(store *s, store_job *j);
/* The job a submission with `request_id` created: 0 found (*out filled), 1 none, -1 error. */
int store_job_by_request(store *s, const char *request_id, store_job *out);
/* Writes every column but id, name, spec and created_ms. */
int store_job_update(store *s, const store_job *j);
/* The latest-step columns only (no state change); bubble_theory 0 keeps the stored one. */
int store_job_set_metrics(store *s, uint64_t id, int64_t step, double loss, double tokens_per_s, double mfu,
                          double bubble_measured, double bubble_theory, int64_t updated_ms);
/* 0 found, 1 not found, -1 error. */
int store_job_get(store *s, uint64_t id, store_job *out);
/* In id order; `state` < 0 selects all. The job is cleared after each callback. */
typedef int (*store_job_fn)(void *ctx, store_job *j);
int store_jobs_each(store *s, int state, store_job_fn fn, void *ctx);
/* Sets one job's message (no state change, no event). */
int store_job_set_message(store *s, uint64_t id, const char *message);

/* Jobs with id > after_id in id order, at most `limit`; the job is cleared after each callback. */
int store_jobs_page(store *s, uint64_t after_id, unsigned limit, store_job_fn fn, void *ctx);

/* A growable list of job ids, for callers that change jobs while walking them
 * (a change inside store_jobs_each would race its open statement). Owns `ids`;
 * release with free(list.ids). */
typedef struct store_idlist {
    uint64_t *ids;
    size_t n, cap;
} store_idlist;
int store_idlist_push(store_idlist *l, uint64_t id); /* 0, or -1 when out of memory */
/* Appends the ids of the jobs in `state` with id > after_id to `out`, in id order,
 * at most `limit` of them (0: all). 0 or -1. */
int store_job_ids(store *s, int state, uint64_t after_id, unsigned limit, store_idlist *out);

/* The latest-checkpoint column and the checkpoint stall (added to lost_ckpt_ms),
 * from rank 0's reports; the step only moves forward. */
int store_job_note_checkpoint(store *s, uint64_t id, int64_t checkpoint, int64_t stall_ms);

/* ---- restarts: one row per restart of a job, keyed by the epoch it started ---- */
typedef struct store_restart {
    uint64_t job;
    uint32_t epoch;
    char cause[16];          /* "node-lost", "rank-exit", "hang", "scale-up" */
    char detail[600];
    char node[64];
    int rank;                /* -1: no one rank */
    int64_t fault_ms, detected_ms;
    int64_t running_ms;      /* the new placement's first step (0: not yet; -1: never, another fault came) */
    int64_t reached;         /* newest step reported before the fault */
    int64_t from_iteration;  /* the checkpoint the new placement resumed from */
    int64_t steps_recomputed;
    int dp;                  /* data-parallel size of the new placement (0: not placed yet) */
    int counted;             /* counts against max_restarts */
} store_restart;

int store_restart_put(store *s, const store_restart *r); /* insert or replace (job, epoch) */
/* 0 found, 1 none, -1 error. */
int store_restart_get(store *s, uint64_t job, uint32_t epoch, store_restart *out);
/* Oldest first. */
typedef int (*store_restart_fn)(void *ctx, const store_restart *r);
int store_restarts_each(store *s, uint64_t job, store_restart_fn fn, void *ctx);
/* Restarts of the job that count against max_restarts. */
int store_restarts_counted(store *s, uint64_t job, int *n);

/* ---- layouts (packed atoll.JobLayout per job and restart epoch) ---- */
int store_layout_put(store *s, uint64_t job, uint32_t epoch, const uint8_t *blob, size_t len);
/* The layout of `epoch`; 0 found (*blob malloc'd), 1 none, -1 error. */
int store_layout_get(store *s, uint64_t job, uint32_t epoch, uint8_t **blob, size_t *len);

/* ---- per-step metrics of jobs (series.c keeps them bounded) ---- */
#define STORE_MAX_STAGES 64
typedef struct store_step {
    uint64_t job;
    int64_t iteration;
    uint32_t epoch;
    int64_t time_ms;
    int have_job;            /* the job-wide fields below were reported (rank 0) */
    double loss, lr, grad_norm, tokens_per_s, step_ms, flops_per_gpu, peak_flops;
    uint64_t memory_bytes;   /* largest peak over the ranks that reported */
    int nstages;
    double bubble[STORE_MAX_STAGES];   /* idle / step time per stage; < 0: not reported */
    double transfer[STORE_MAX_STAGES]; /* transfer / step time per stage; < 0: not reported */
    double valid_loss;       /* the validation loss evaluated after this step; 0: none */
    double bubble_theory;    /* rank 0's ideal-schedule bubble of this step (its placement, its batch); 0: none */
} store_step;

/* Inserts or replaces the step (job, iteration). */
int store_step_put(store *s, const store_step *st);
/* 0 found, 1 none, -1 error. */
int store_step_get(store *s, uint64_t job, int64_t iteration, store_step *out);
/* The newest step of the job: 0 found, 1 none, -1 error. */
int store_step_latest(store *s, uint64_t job, store_step *out);
/* The newest step of the job with a validation loss: 0 found, 1 none, -1 error. */
int store_step_latest_valid(store *s, uint64_t job, store_step *out);
/* Steps with iteration > after, oldest first; at most `limit` (the oldest such). */
typedef int (*store_step_fn)(void *ctx, const store_step *st);
int store_steps_each(store *s, uint64_t job, int64_t after, unsigned limit, store_step_fn fn, void *ctx);
/* Number of steps of the job below `before`. */
int store_steps_count(store *s, uint64_t job, int64_t before, int64_t *n);
/* Deletes every second step below `before` (oldest kept): halves the older series. */
int store_steps_thin(store *s, uint64_t job, int64_t before);

/* ---- rank exits (per job and restart epoch) ---- */
typedef struct store_exit {
    uint64_t job;
    uint32_t epoch;
    int rank, pid, exit_status, term_signal, stopped;
    int64_t time_ms;
    char node[64];
    char log_tail[2048];
} store_exit;

/* Records an exit once: 1 when new, 0 when already recorded, -1 on error. */
int store_exit_put(store *s, const store_exit *e);
/* The exits of (job, epoch) in the order they were reported. */
typedef int (*store_exit_fn)(void *ctx, const store_exit *e);
int store_exits_each(store *s, uint64_t job, uint32_t epoch, store_exit_fn fn, void *ctx);
/* How many ranks of (job, epoch) exited, how many of them with status 0, and how
 * many with SUP_EXIT_SAVED (stopped with a checkpoint; `saved` may be NULL). */
int store_exits_count(store *s, uint64_t job, uint32_t epoch, int *total, int *ok, int *saved);

#endif
