#include "jobs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "scheduler.h"

enum {
    PENDING = ATOLL__JOB_STATE__JOB_PENDING, PLACING = ATOLL__JOB_STATE__JOB_PLACING,
    STARTING = ATOLL__JOB_STATE__JOB_STARTING, RUNNING = ATOLL__JOB_STATE__JOB_RUNNING,
    RESTARTING = ATOLL__JOB_STATE__JOB_RESTARTING, COMPLETED = ATOLL__JOB_STATE__JOB_COMPLETED,
    FAILED = ATOLL__JOB_STATE__JOB_FAILED, CANCELLED = ATOLL__JOB_STATE__JOB_CANCELLED,
};

int jobs_is_terminal(int s) { return s == COMPLETED || s == FAILED || s == CANCELLED; }
int jobs_is_active(int s) { return s == PLACING || s == STARTING || s == RUNNING || s == RESTARTING; }

int jobs_transition_allowed(int from, int to)
{
    if (jobs_is_terminal(from) || from == to) return 0;
    if (to == CANCELLED) return 1;
    switch (from) {
    case PENDING: return to == PLACING;
    case PLACING: return to == STARTING || to == PENDING || to == FAILED;
    case STARTING: return to == RUNNING || to == RESTARTING || to == FAILED;
    case RUNNING: return to == COMPLETED || to == FAILED || to == RESTARTING;
    case RESTARTING: return to == PENDING || to == FAILED;
    default: return 0;
    }
}

static int vchange(coord *c, store_job *j, int to, const char *fmt, va_list ap)
{
    if (!jobs_transition_allowed(j->state, to)) {
        log_error("job %llu: refusing %s -> %s", (unsigned long long)j->id, msg_job_state_name(j->state),
                  msg_job_state_name(to));
        return -1;
    }
    int from = j->state;
    vsnprintf(j->message, sizeof j->message, fmt, ap);
    j->state = to;
    j->updated_ms = c->now();
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j->id);
    if (store_job_update(c->st, j)) return -1;
    return events_add(c, "job.state", subject, "%s -> %s%s%s", msg_job_state_name(from),
                      msg_job_state_name(to), j->message[0] ? ": " : "", j->message);
}

int jobs_change(coord *c, store_job *j, int to, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vchange(c, j, to, fmt, ap);
    va_end(ap);
    return rc;
}

int jobs_set_state(coord *c, store_job *j, int to, const char *fmt, ...)
{
    if (store_begin(c->st)) return -1;
    va_list ap;
    va_start(ap, fmt);
    int rc = vchange(c, j, to, fmt, ap);
    va_end(ap);
    if (rc || store_commit(c->st)) {
        store_rollback(c->st);
        return -1;
    }
    return 0;
}

int jobs_config(const store_job *j, atoll_config *cfg)
{
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    if (!spec) return -1;
    char err[256];
    int rc = msg_spec_to_cfg(spec, cfg, err, sizeof err);
    atoll__job_spec__free_unpacked(spec, NULL);
    return rc;
}

int jobs_submit(coord *c, const Atoll__JobSpec *spec, uint64_t *id, char *err, size_t errlen)
{
    atoll_config cfg;
    char why[400];
    if (msg_spec_to_cfg(spec, &cfg, why, sizeof why)) {
        snprintf(err, errlen, "invalid job spec: %s", why);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (cfg.num_gpus < 1) {
        snprintf(err, errlen, "invalid job spec: --num-gpus (the job's world size) is required and must be at least 1");
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    int island = sched_max_island(c);
    if (cfg_validate_layout(&cfg, cfg.num_gpus, island, why, sizeof why)) {
        snprintf(err, errlen, "invalid job spec: %s", why);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (spec->name && strlen(spec->name) >= sizeof(((store_job *)0)->name)) {
        snprintf(err, errlen, "invalid job spec: --name is longer than %zu characters",
                 sizeof(((store_job *)0)->name) - 1);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    store_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.name, sizeof j.name, "%s", spec->name && spec->name[0] ? spec->name : "job");
    j.state = PENDING;
    snprintf(j.message, sizeof j.message, "queued");
    j.bubble_theory = cfg_bubble_theory(&cfg, cfg.num_gpus);
    j.created_ms = j.updated_ms = c->now();
    j.spec_len = protobuf_c_message_get_packed_size(&spec->base);
    j.spec = malloc(j.spec_len ? j.spec_len : 1);
    if (!j.spec) {
        snprintf(err, errlen, "out of memory");
        return ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    protobuf_c_message_pack(&spec->base, j.spec);
    int rc = store_begin(c->st);
    if (!rc) rc = store_job_insert(c->st, &j);
    if (!rc) {
        char subject[32];
        snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j.id);
        rc = events_add(c, "job.submitted", subject, "%s: %d ranks, tp=%d pp=%d dp=%d", j.name, cfg.num_gpus,
                        cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
                        cfg_data_parallel_size(&cfg, cfg.num_gpus));
    }
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        snprintf(err, errlen, "cannot store the job: %s", store_errmsg(c->st));
        store_rollback(c->st);
        store_job_clear(&j);
        return ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    *id = j.id;
    store_job_clear(&j);
    c->schedule_pending = 1;
    return 0;
}

int jobs_cancel(coord *c, uint64_t id, store_job *out, char *err, size_t errlen)
{
    int r = store_job_get(c->st, id, out);
    if (r) {
        snprintf(err, errlen, r > 0 ? "no job %llu (`atoll jobs` lists them)" : "cannot read job %llu",
                 (unsigned long long)id);
        return r > 0 ? ATOLL__ERROR_CODE__ERR_NOT_FOUND : ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    if (jobs_is_terminal(out->state)) {
        snprintf(err, errlen, "job %llu is already %s; only pending or running jobs can be cancelled",
                 (unsigned long long)id, msg_job_state_name(out->state));
        store_job_clear(out);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    int was_active = jobs_is_active(out->state);
    if (jobs_set_state(c, out, CANCELLED, "cancelled by request")) {
        snprintf(err, errlen, "cannot record the cancellation: %s", store_errmsg(c->st));
        store_job_clear(out);
        return ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    if (was_active) sched_stop_job(c, out, "job cancelled");
    c->schedule_pending = 1; /* its GPUs are free again */
    return 0;
}

typedef struct {
    coord *c;
    const char *node;
    store_idlist ids;
} lost_ctx;

static int collect_active(void *ctx, store_job *j)
{
    lost_ctx *l = ctx;
    if (!jobs_is_active(j->state) || !sched_job_uses_node(l->c, j, l->node)) return 0;
    return store_idlist_push(&l->ids, j->id) ? 1 : 0;
}

void jobs_node_lost(coord *c, const char *node)
{
    lost_ctx l = { .c = c, .node = node };
    for (int s = PLACING; s <= RESTARTING; s++) store_jobs_each(c->st, s, collect_active, &l);
    for (size_t i = 0; i < l.ids.n; i++) {
        store_job j;
        if (store_job_get(c->st, l.ids.ids[i], &j)) continue;
        sched_stop_job(c, &j, "a node of the job was lost");
        if (j.state != RESTARTING && jobs_set_state(c, &j, RESTARTING, "node %s lost", node) == 0) {
            j.restarts++;
            j.epoch++;
            jobs_set_state(c, &j, PENDING, "waiting to re-place after node %s was lost (epoch %u)", node, j.epoch);
        }
        store_job_clear(&j);
    }
    free(l.ids.ids);
    c->schedule_pending = 1;
}

void jobs_rank_metrics(coord *c, const Atoll__RankMetrics *m)
{
    store_job j;
    if (store_job_get(c->st, m->job, &j)) return;
    if (m->epoch != j.epoch || !jobs_is_active(j.state)) {
        store_job_clear(&j);
        return; /* a late report from a previous placement */
    }
    if (j.state == STARTING) jobs_set_state(c, &j, RUNNING, "ranks reporting");
    if (m->rank == 0 && m->iteration >= j.step) {
        j.step = m->iteration;
        j.loss = m->loss;
        j.tokens_per_s = m->tokens_per_s;
        j.mfu = m->mfu;
        j.bubble_measured = m->bubble_measured;
        if (m->bubble_theory > 0) j.bubble_theory = m->bubble_theory;
        j.updated_ms = c->now();
        store_job_update(c->st, &j); /* metrics, not a state change: no event */
    }
    store_job_clear(&j);
}

void jobs_reconcile(coord *c)
{
    store_idlist placing = { 0 };
    store_job_ids(c->st, PLACING, &placing);
    for (size_t i = 0; i < placing.n; i++) {
        store_job j;
        if (store_job_get(c->st, placing.ids[i], &j)) continue;
        jobs_set_state(c, &j, PENDING, "coordinator restarted during placement");
        store_job_clear(&j);
    }
    free(placing.ids);
    c->schedule_pending = 1;
}
