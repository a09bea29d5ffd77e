/* ranks: workerd's rank processes. For each Launch, this node's part of the
 * layout runs as one set of atoll-train processes (common/supervise.h: torchrun
 * environment, the job secret on an inherited descriptor, a metrics channel each,
 * logs in WORK_DIR/job-<id>/epoch-<e>/rank-<r>.log, process groups, death with
 * workerd). Their per-step reports and exits go to the relay queue; a Stop, or
 * workerd stopping, ends them (supervise.h: SIGINT, or SIGTERM to checkpoint
 * first, then SIGKILL after the grace period).
 *
 * Ownership: the agent owns its list of job sets; each set frees itself once all
 * of its processes and channels are closed. */
#ifndef ATOLL_RANKS_H
#define ATOLL_RANKS_H

#include <stdint.h>

#include "atoll.pb-c.h"

struct agent;

/* Starts this node's ranks of the layout; fills ack (message owned by the agent). */
void ranks_launch(struct agent *a, const Atoll__Launch *m, Atoll__LaunchAck *ack, char *msg, size_t msglen);
/* Stops a job's ranks (all epochs below or equal to `epoch`): at once (SIGINT), or
 * with `checkpoint` by SIGTERM and the agent's stop grace, their exits then judged
 * by the coordinator like any other (a failed save fails the job). */
void ranks_stop(struct agent *a, uint64_t job, uint32_t epoch, const char *reason, int checkpoint);
/* Stops every set with `signum` (workerd is stopping; SIGTERM: with the stop grace,
 * so ranks that can commit a checkpoint); 1 while some are still running. */
int ranks_stop_all(struct agent *a, int signum);
/* The jobs with live ranks here, for the heartbeat (array from malloc; caller frees it and its items). */
size_t ranks_running(struct agent *a, Atoll__JobRef ***out);
/* The newest watchdog report of every live rank here, with its age and whether
 * the process is stopped, for the heartbeat (array from malloc, caller frees it;
 * the reports are borrowed until the loop runs again). */
size_t ranks_watches(struct agent *a, Atoll__RankWatch ***out);
/* Answers a LogRead from the rank's log file. */
void ranks_read_log(struct agent *a, const Atoll__LogRead *m);

#endif
