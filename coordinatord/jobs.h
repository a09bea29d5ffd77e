/* jobs: the job state machine and the job-level operations behind the RPCs.
 *
 *   pending -> placing -> starting -> running -> completed
 *      |          |          |          |   \-> failed
 *      |          +-> pending (no room)  +----> restarting -> pending (re-place, epoch+1)
 *      +--------------------+-----------+------------+-----> cancelled
 * Terminal: completed, failed, cancelled. Each change is one store transaction
 * that also appends a `job.state` event. */
#ifndef ATOLL_JOBS_H
#define ATOLL_JOBS_H

#include <stddef.h>

#include "config.h"
#include "coord.h"

#define JOBS_SETTLE_MS 500 /* after a rank fails by itself, how long to wait for one killed by a signal */
/* --time: how long ranks told to checkpoint and stop get before the job is cancelled outright */
#define JOBS_TIME_GRACE_MS 60000

int jobs_transition_allowed(int from, int to);
int jobs_is_active(int state); /* holds GPUs: placing, starting, running, restarting */

/* Changes state and message, with its event, inside the caller's transaction. */
int jobs_change(coord *c, store_job *j, int to, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same in its own transaction. -1 when the transition is not allowed or the store failed. */
int jobs_set_state(coord *c, store_job *j, int to, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Validates and queues a job. Returns 0 with *id, or an Atoll__ErrorCode with err.
 * With a `request_id` ("" or NULL: none) already stored, the job it created is
 * returned (*existing = 1) when the spec is the same, ERR_CONFLICT when not; the
 * id is stored with the job in its transaction, so a retry after a lost reply
 * (the coordinator killed after committing) finds it. */
int jobs_submit(coord *c, const Atoll__JobSpec *spec, const char *request_id, uint64_t *id, int *existing,
                char *err, size_t errlen);
/* Returns 0 (out = the cancelled job, caller clears), or an Atoll__ErrorCode with err.
 * With `checkpoint` a running job (submitted with --save) stays running while its
 * ranks commit a checkpoint (SIGTERM); their exits (SUP_EXIT_SAVED) then cancel it. */
int jobs_cancel(coord *c, uint64_t id, int checkpoint, store_job *out, char *err, size_t errlen);

/* A fault of an active job, as detected: `cause` is "node-lost", "rank-exit" or
 * "hang"; node and rank name where (""/-1 when unknown); fault_ms is when it
 * happened as well as the coordinator knows; detail is one line for people. */
typedef struct jobs_fault {
    const char *cause;
    char node[64];
    int rank;
    int64_t fault_ms;
    char detail[600];
    int refused; /* the rank refused the job's configuration (SUP_EXIT_CONFIG): fail, do not restart */
} jobs_fault;
/* Records the fault (event `job.<cause>`) and reacts: the job's ranks are
 * stopped and the job restarts or fails. */
void jobs_fault_raise(coord *c, uint64_t id, const jobs_fault *f);

/* A node died or went away (at fault_ms; `why` says how: "no heartbeat for ...",
 * "Slurm state DOWN ..."): every active job using it restarts on a new placement,
 * its fault saying "node NAME lost: WHY". */
void jobs_node_lost(coord *c, const char *node, int64_t fault_ms, const char *why);
/* A rank of a job ended (relayed by its workerd). Recorded once; when every rank
 * of the epoch exited 0 the job completes, and when they all exited 0 or
 * SUP_EXIT_SAVED, some of them SAVED (SIGTERM: Slurm ending the allocation,
 * workerd stopping, `atoll cancel --checkpoint`), it is cancelled with its
 * checkpoint named; a rank that failed (not stopped on request) fails the job
 * after a settle period, naming the rank to blame (sup_blame), its exit and the
 * last lines of its log. */
void jobs_rank_exit(coord *c, const char *node, const Atoll__RankExit *e);
/* Periodic: fails jobs whose settle period after a rank failure has passed. */
void jobs_tick(coord *c);

/* ---- the live table of active jobs ---- */
live_job *jobs_live(coord *c, uint64_t id);
void jobs_live_free(coord *c);
/* Calls fn for every active job; fn must not change the table. */
void jobs_live_each(coord *c, void (*fn)(coord *c, live_job *lj, void *ctx), void *ctx);

/* Fills lj->ranks from the job's layout (once per placement). 0, or -1 when the
 * placement has no stored layout. */
int jobs_live_ranks(coord *c, live_job *lj);

/* Restarts the job may make after failures: its spec's, or --max-restarts when it does not say. */
int jobs_max_restarts(const coord *c, const Atoll__JobSpec *spec);

/* The job's settings as a config (and world size); -1 when the stored spec is corrupt. */
int jobs_config(const store_job *j, atoll_config *cfg);

/* Where the spec's --dependency stands (depend.h): 0 every condition holds (or
 * there is none), 1 one is still to come, -1 one never can (a job it names ended
 * otherwise, or is not known), -2 the text does not parse; `why` says which. */
int jobs_dependency(coord *c, const Atoll__JobSpec *spec, char *why, size_t len);

/* After a coordinator restart: jobs caught mid-placement go back to pending. */
void jobs_reconcile(coord *c);

#endif
