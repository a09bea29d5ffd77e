/* restart: the reaction to a job's fault (stop, re-place, resume from the newest
 * checkpoint), its history and the goodput it costs; growing a shrunk job back.
 * See restart.c for the sequence. */
#ifndef ATOLL_RESTART_H
#define ATOLL_RESTART_H

#include "coord.h"
#include "jobs.h"

/* How long a restarting job waits for its old ranks to be confirmed gone before
 * it is placed again anyway: workerd's grace period (SIGTERM -> SIGKILL) and more. */
#define STOP_WAIT_MS 5000

/* Stops the job's ranks and restarts it under the next epoch (one history row,
 * one event), or fails it when `counted` and its max_restarts are used up. */
void restart_begin(coord *c, store_job *j, const jobs_fault *f, int counted);
/* A heartbeat from `node`: its list of running jobs confirms old ranks gone. */
void restart_heartbeat(coord *c, const char *node, const Atoll__Heartbeat *m);
/* Periodic: restarting jobs whose old ranks are gone go back to pending. */
void restart_tick(coord *c);
/* A step report of the current placement: its first closes the restart row. */
void restart_step(coord *c, live_job *lj, const Atoll__RankMetrics *m);
/* Rank 0's checkpoint fields: a newly committed step is recorded (and may grow
 * the job back). May change the job's state: the caller re-reads lj afterwards. */
void restart_checkpoint(coord *c, live_job *lj, const Atoll__RankMetrics *m);

#endif
