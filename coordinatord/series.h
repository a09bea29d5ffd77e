/* series: the per-step metrics of jobs, from the ranks' reports to SQLite.
 *
 * Each rank reports every step (RankMetrics, relayed in its workerd's
 * heartbeats). Reports of one step are gathered into one row: the job-wide
 * figures from rank 0, each pipeline stage's bubble and transfer share from the
 * rank that speaks for the stage (its TP 0, DP 0 rank), the largest memory
 * peak. Gathering is idempotent, so a report relayed twice (a worker resending
 * after a coordinator restart) changes nothing. Rows are written in one
 * transaction per tick (series_flush); after the commit every report received
 * so far is durable, and each agent is told so in its next HeartbeatAck
 * (`relayed`), so it can drop them: a coordinator killed at any moment loses no
 * reported step.
 *
 * Bounded: the newest SERIES_FULL steps of a job stay in full; older ones are
 * halved (every second one dropped) whenever they exceed SERIES_FULL, so a job
 * keeps at most 2 x SERIES_FULL rows, spread over its whole run.
 *
 * Ownership: the accumulators hang off live_job.acc (jobs.c's table) and are
 * freed with it (series_forget). */
#ifndef ATOLL_SERIES_H
#define ATOLL_SERIES_H

#include "coord.h"
#include "msg.h"

#define SERIES_FULL 1000
#define SERIES_SLOTS 32     /* steps gathered at once per job */

/* One report from `node` (relay sequence already checked by the caller). */
void series_add(coord *c, const Atoll__RankMetrics *m);
/* Writes what was gathered since the last flush; then marks every agent's
 * received reports durable. */
void series_flush(coord *c);
void series_forget(coord *c, live_job *lj);

/* Fills the latest-step metrics of a job (stages from the arena). 0, or 1 when
 * the job has reported no step. */
int series_latest(coord *c, uint64_t job, Atoll__JobMetrics *out, msg_arena *a);
/* The newest step a client may read as final (0: none yet). Steps after it may
 * still wait for some ranks' reports, and a client that reads the series
 * incrementally (`after`) would keep them as they are now: a series shows the
 * steps up to it that have rank 0's figures (series_shown). */
int64_t series_settled(coord *c, uint64_t job);
static inline int series_shown(const store_step *st, int64_t settled)
{
    return st->have_job && st->iteration <= settled;
}
/* A step row as a JobMetrics message (stages from the arena); `bubble_theory` is the
 * job's, for a step stored without its own. */
void series_msg(const store_step *st, double bubble_theory, Atoll__JobMetrics *out, msg_arena *a);

#endif
