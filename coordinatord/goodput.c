/* goodput: where a job's wall time went, since its first placement started.
 *
 *   start-up     first placement to its first step (processes, rendezvous, load);
 *                for a job with no step yet, or that ended without one, all the
 *                time not lost otherwise
 *   checkpoint   training stalled by saves (rank 0 reports each save's stall)
 *   detection    each fault to its detection (restart.c)
 *   restart      each detection to the next placement's first step: stopping,
 *                waiting for room, placing, starting, loading the checkpoint
 *   recompute    steps done before a fault, after the checkpoint it resumed
 *                from, and done again (their count times the step time)
 *   productive   the rest; ratio = productive / wall ("effective training time")
 *
 * The losses are charged as they close (restart.c, series via restart_checkpoint);
 * a restart in progress counts up to now. Wall time ends when the job ends. */
#include "goodput.h"

#include <string.h>


void goodput_of(coord *c, const store_job *j, Atoll__Goodput *out)
{
    atoll__goodput__init(out);
    if (!j->started_ms) return;
    int64_t now = c->now(), end = j->ended_ms ? j->ended_ms : now;
    int64_t restart = j->lost_restart_ms;
    store_restart r; /* the restart under way, if any */
    if (!j->ended_ms && j->epoch > 0 && store_restart_get(c->st, j->id, j->epoch, &r) == 0 && r.running_ms == 0)
        restart += now - r.detected_ms;
    else if (!j->ended_ms && j->state == ATOLL__JOB_STATE__JOB_RESTARTING &&
             store_restart_get(c->st, j->id, j->epoch + 1, &r) == 0)
        restart += now - r.detected_ms;
    out->wall_s = (end - j->started_ms) / 1000.0;
    out->checkpoint_s = j->lost_ckpt_ms / 1000.0;
    out->detection_s = j->lost_detect_ms / 1000.0;
    out->restart_s = restart / 1000.0;
    out->recompute_s = j->lost_recompute_ms / 1000.0;
    out->startup_s = j->lost_startup_ms / 1000.0;
    if (!j->step && !j->lost_startup_ms) { /* no step yet, or ever: the time not charged otherwise is start-up */
        double rest = out->wall_s - out->checkpoint_s - out->detection_s - out->restart_s - out->recompute_s;
        out->startup_s = rest > 0 ? rest : 0;
    }
    double lost = out->startup_s + out->checkpoint_s + out->detection_s + out->restart_s + out->recompute_s;
    out->productive_s = out->wall_s > lost ? out->wall_s - lost : 0;
    out->ratio = out->wall_s > 0 ? out->productive_s / out->wall_s : 0;
}
