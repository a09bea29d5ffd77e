/* watchdog: a rank's account of itself for the coordinator's hang detection.
 *
 * A thread that, every WATCHDOG_PERIOD_MS, writes a RankWatch frame to the
 * rank's supervisor (metrics_emit's channel): the training phase and iteration,
 * the rank's recent step time, and every collective or send/recv it is blocked
 * in right now (comm_watch_get: group, op, the group's collective count, the
 * members or peers, how long). workerd relays the newest one per rank in its
 * heartbeats; the coordinator compares the ranks' reports to name the rank(s)
 * that never entered the collective the others wait in. A rank that is stopped
 * (SIGSTOP) stops reporting, which is itself the sign. When a wait outlasts
 * max(WATCHDOG_URGENT_MS, the step time) the report is marked urgent, once per
 * wait, and workerd relays it at once instead of at its next heartbeat.
 *
 * Without a channel (a standalone run) nothing starts.
 *
 * Ownership: the watchdog borrows the world and the emitter; stop it before
 * freeing either. */
#ifndef ATOLL_ENGINE_WATCHDOG_H
#define ATOLL_ENGINE_WATCHDOG_H

#include "comm.h"
#include "metrics_emit.h"

#define WATCHDOG_PERIOD_MS 250
#define WATCHDOG_URGENT_MS 100

typedef struct eng_watchdog eng_watchdog;

/* NULL when the emitter has no channel (nothing to report to) or on failure. */
eng_watchdog *watchdog_start(comm_world *w, metrics_emit *e);
/* The training loop's state: phase ("start", "step", "save", "eval", "done"; a
 * string literal), steps completed, its recent step time. Cheap; any time. */
void watchdog_phase(eng_watchdog *wd, const char *phase, long long iteration);
void watchdog_step_time(eng_watchdog *wd, double step_s);
/* Writes one report now (e.g. the final "done"), then stops and frees. */
void watchdog_stop(eng_watchdog *wd);

#endif
