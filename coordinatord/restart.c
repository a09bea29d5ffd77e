/* restart: how a job gets back to training after a fault, and back to its full
 * size after a node returns.
 *
 *   fault (jobs_fault_raise) -> restart_begin: a history row for the epoch to
 *     come (cause, node, rank, when the fault happened and was detected, the step
 *     reached), state restarting, Stop to every node of the placement (workerd:
 *     SIGTERM, SIGCONT, SIGKILL after its grace period). A fault past the job's
 *     max_restarts fails the job instead, saying so, and so does a rank that
 *     refused the job's configuration (SUP_EXIT_CONFIG: a missing --data-path,
 *     a layout that does not fit), where every restart would fail the same way.
 *   restart_tick: once every node of the old placement has reported none of its
 *     ranks alive (or is not alive itself), or after STOP_WAIT_MS, the job goes
 *     back to pending under the next epoch; the scheduler places it on healthy
 *     free slots with TP and PP kept, and DP shrunk to what fits (scheduler.c).
 *     The layout names the checkpoint directory to resume from: the job's --save
 *     once it committed a step there, else its --load.
 *   restart_step: the new placement's first step closes the row (running
 *     again, the checkpoint it resumed from, steps recomputed) and charges the
 *     goodput account; the first step of the first placement charges start-up.
 *   restart_checkpoint: a committed checkpoint (rank 0's report) is recorded;
 *     a job running below its data-parallel size then grows back when the
 *     cluster now has room for more (a scale-up restart, not counted against
 *     max_restarts).
 *
 * Nothing here is only in memory that a coordinator restart would need: the
 * rows, the job's state and epoch are in the store; a restart caught halfway
 * goes on from its state (restarting jobs wait for their old ranks again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "jobs.h"
#include "log.h"
#include "msg.h"
#include "restart.h"
#include "scheduler.h"
#include "topo.h"

enum {
    PENDING = ATOLL__JOB_STATE__JOB_PENDING, STARTING = ATOLL__JOB_STATE__JOB_STARTING,
    RUNNING = ATOLL__JOB_STATE__JOB_RUNNING, RESTARTING = ATOLL__JOB_STATE__JOB_RESTARTING,
    FAILED = ATOLL__JOB_STATE__JOB_FAILED,
};

static void subject_of(char *out, size_t len, uint64_t id) { snprintf(out, len, "job %llu", (unsigned long long)id); }

void restart_begin(coord *c, store_job *j, const jobs_fault *f, int counted)
{
    int64_t now = c->now();
    int used = 0, max = 0;
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    max = jobs_max_restarts(c, spec);
    if (spec) atoll__job_spec__free_unpacked(spec, NULL);
    store_restarts_counted(c->st, j->id, &used);
    sched_stop_job(c, j, f->cause);
    if (f->refused) {
        jobs_set_state(c, j, FAILED, "not restarted (it would fail the same way): %.400s", f->detail);
        return;
    }
    if (counted && used >= max) {
        jobs_set_state(c, j, FAILED, "no restarts left (max %d) after %s: %.400s", max, f->cause, f->detail);
        return;
    }
    /* A restart that never got running again (another fault came first) ends here. */
    store_restart prev;
    int open = store_restart_get(c->st, j->id, j->epoch, &prev) == 0 && prev.running_ms == 0;
    store_restart r;
    memset(&r, 0, sizeof r);
    r.job = j->id;
    r.epoch = j->epoch + 1;
    snprintf(r.cause, sizeof r.cause, "%s", f->cause);
    snprintf(r.detail, sizeof r.detail, "%s", f->detail);
    snprintf(r.node, sizeof r.node, "%s", f->node);
    r.rank = f->rank;
    r.fault_ms = f->fault_ms > 0 && f->fault_ms <= now ? f->fault_ms : now;
    r.detected_ms = now;
    r.reached = j->step;
    r.counted = counted;
    char subject[32], where[120] = "";
    subject_of(subject, sizeof subject, j->id);
    if (f->node[0] && f->rank >= 0) snprintf(where, sizeof where, " (rank %d on node %s)", f->rank, f->node);
    else if (f->node[0]) snprintf(where, sizeof where, " (node %s)", f->node);
    int rc = store_begin(c->st);
    if (!rc && open) {
        j->lost_restart_ms += now - prev.detected_ms;
        prev.running_ms = -1;
        rc = store_restart_put(c->st, &prev);
    }
    j->lost_detect_ms += now - r.fault_ms;
    if (!rc) rc = store_restart_put(c->st, &r);
    if (!rc)
        rc = events_add(c, "job.restart", subject, "%s%s: restart %d%s, epoch %u -> %u; stopping its ranks, then "
                        "resuming from the newest committed checkpoint%s on healthy nodes", f->cause, where,
                        counted ? used + 1 : used, counted ? "" : " (not counted)", j->epoch, j->epoch + 1,
                        j->checkpoint ? "" : " (none yet: from the start)");
    if (!rc)
        rc = jobs_change(c, j, RESTARTING, "restarting after %s%s (epoch %u -> %u)", f->cause, where, j->epoch,
                         j->epoch + 1);
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        store_rollback(c->st);
        log_error("job %llu: cannot record its restart: %s", (unsigned long long)j->id, store_errmsg(c->st));
        return;
    }
    live_job *lj = jobs_live(c, j->id);
    if (lj) lj->restart_ms = now;
}

/* ---- waiting for the old placement's ranks to be gone ---- */

static int running_has(const Atoll__Heartbeat *m, uint64_t job, uint32_t epoch)
{
    for (size_t i = 0; i < m->n_running; i++)
        if (m->running[i]->job == job && m->running[i]->epoch <= epoch) return 1;
    return 0;
}

typedef struct {
    const char *node;
    const Atoll__Heartbeat *m;
} hb_ctx;

static void mark_gone(coord *c, live_job *lj, void *ctx)
{
    hb_ctx *x = ctx;
    if (lj->state != RESTARTING || jobs_live_ranks(c, lj) || running_has(x->m, lj->id, lj->epoch)) return;
    for (int i = 0; i < lj->nranks; i++)
        if (!strcmp(lj->ranks[i].node, x->node)) lj->ranks[i].gone = 1;
}

void restart_heartbeat(coord *c, const char *node, const Atoll__Heartbeat *m)
{
    hb_ctx x = { node, m };
    jobs_live_each(c, mark_gone, &x);
}

static int old_ranks_gone(coord *c, live_job *lj)
{
    if (jobs_live_ranks(c, lj)) return 1; /* no layout: nothing was started */
    for (int i = 0; i < lj->nranks; i++) {
        reg_node *n = registry_find(&c->reg, lj->ranks[i].node);
        if (!lj->ranks[i].gone && n && n->live == NODE_ALIVE && n->peer) return 0;
    }
    return 1;
}

static void collect_ready(coord *c, live_job *lj, void *ctx)
{
    if (lj->state != RESTARTING) return;
    if (!lj->restart_ms) lj->restart_ms = c->now(); /* caught halfway by a coordinator restart */
    if (old_ranks_gone(c, lj) || c->now() - lj->restart_ms >= STOP_WAIT_MS) store_idlist_push(ctx, lj->id);
}

void restart_tick(coord *c)
{
    store_idlist ready = { 0 };
    jobs_live_each(c, collect_ready, &ready);
    for (size_t i = 0; i < ready.n; i++) {
        store_job j;
        if (store_job_get(c->st, ready.ids[i], &j)) continue;
        if (j.state == RESTARTING) {
            live_job *lj = jobs_live(c, j.id);
            if (lj && !old_ranks_gone(c, lj))
                log_warn("job %llu: ranks of epoch %u not confirmed gone after %d ms; placing again anyway",
                         (unsigned long long)j.id, j.epoch, STOP_WAIT_MS);
            j.restarts++;
            j.epoch++;
            j.world = 0;
            jobs_set_state(c, &j, PENDING, "waiting to be placed again (epoch %u)", j.epoch);
            c->schedule_pending = 1;
        }
        store_job_clear(&j);
    }
    free(ready.ids);
}

/* ---- back to running ---- */

void restart_step(coord *c, live_job *lj, const Atoll__RankMetrics *m)
{
    /* the run's first step (resent after a coordinator restart, it still carries its own time;
     * should its report have been dropped, the next one stands in) */
    if (lj->ran || m->rank != 0 || m->iteration <= m->start_iteration) return;
    lj->ran = 1;
    store_job j;
    if (store_job_get(c->st, lj->id, &j)) return;
    int64_t now = c->now(), end = m->time_ms > 0 && m->time_ms <= now ? m->time_ms : now;
    /* the first step's start: training again */
    int64_t start = end - (int64_t)(m->step_ms * (double)(m->iteration - m->start_iteration));
    char subject[32];
    subject_of(subject, sizeof subject, j.id);
    store_restart r;
    int rc = store_begin(c->st);
    if (!rc && j.epoch == 0) {
        if (j.started_ms && start > j.started_ms && !j.lost_startup_ms) j.lost_startup_ms = start - j.started_ms;
        rc = store_job_update(c->st, &j);
    } else if (!rc && store_restart_get(c->st, j.id, j.epoch, &r) == 0 && r.running_ms == 0) {
        r.running_ms = start > r.detected_ms ? start : r.detected_ms;
        r.from_iteration = m->start_iteration;
        r.steps_recomputed = r.reached > m->start_iteration ? r.reached - m->start_iteration : 0;
        int64_t step = (int64_t)m->step_ms, med = (int64_t)hang_step_ms(lj);
        j.lost_restart_ms += r.running_ms - r.detected_ms;
        j.lost_recompute_ms += r.steps_recomputed * (med > 0 ? med : step);
        rc = store_restart_put(c->st, &r);
        if (!rc) rc = store_job_update(c->st, &j);
        if (!rc)
            rc = events_add(c, "job.recovered", subject, "running again in epoch %u, %.1f s after the %s was "
                            "detected (%.1f s after the fault): resumed from checkpoint step %lld, %lld steps "
                            "recomputed, %d ranks", j.epoch, (r.running_ms - r.detected_ms) / 1000.0, r.cause,
                            (r.running_ms - r.fault_ms) / 1000.0, (long long)m->start_iteration,
                            (long long)r.steps_recomputed, lj->nranks);
    }
    if (!rc) rc = store_commit(c->st);
    if (rc) store_rollback(c->st);
    store_job_clear(&j);
}

/* ---- checkpoints, and growing back ---- */

void restart_checkpoint(coord *c, live_job *lj, const Atoll__RankMetrics *m)
{
    if (m->rank != 0) return;
    int64_t stall = (int64_t)m->save_stall_ms;
    int advanced = m->checkpoint_iteration > lj->checkpoint;
    if (!advanced && stall <= 0) return;
    char subject[32];
    subject_of(subject, sizeof subject, lj->id);
    int rc = store_begin(c->st);
    if (!rc) rc = store_job_note_checkpoint(c->st, lj->id, m->checkpoint_iteration, stall > 0 ? stall : 0);
    if (!rc && advanced)
        rc = events_add(c, "job.checkpoint", subject, "step %lld committed (save %.2f s from start to commit)",
                        (long long)m->checkpoint_iteration, m->save_ms / 1000.0);
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        store_rollback(c->st);
        return;
    }
    if (!advanced) return;
    lj->checkpoint = m->checkpoint_iteration;
    store_job j;
    if (store_job_get(c->st, lj->id, &j)) return;
    atoll_config cfg;
    int dp_now = 0, dp_full = 0, dp_can = 0;
    if (j.state == RUNNING && jobs_config(&j, &cfg) == 0 && j.world > 0 && j.world < cfg.num_gpus) {
        dp_now = cfg_data_parallel_size(&cfg, j.world);
        dp_full = cfg_data_parallel_size(&cfg, cfg.num_gpus);
        dp_can = sched_grow_dp(c, &j, &cfg, dp_now);
    }
    if (dp_can > dp_now) {
        jobs_fault f = { .cause = "scale-up", .rank = -1, .fault_ms = c->now() };
        snprintf(f.detail, sizeof f.detail, "room for data-parallel size %d (running with %d of %d) at checkpoint "
                 "step %lld: growing back", dp_can, dp_now, dp_full, (long long)m->checkpoint_iteration);
        restart_begin(c, &j, &f, 0);
    }
    store_job_clear(&j);
}
