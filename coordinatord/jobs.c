#include "jobs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "depend.h"
#include "log.h"
#include "msg.h"
#include "plan.h"
#include "restart.h"
#include "scheduler.h"
#include "slurm.h"
#include "series.h"
#include "supervise.h"
#include "topo.h"

enum {
    PENDING = ATOLL__JOB_STATE__JOB_PENDING, PLACING = ATOLL__JOB_STATE__JOB_PLACING,
    STARTING = ATOLL__JOB_STATE__JOB_STARTING, RUNNING = ATOLL__JOB_STATE__JOB_RUNNING,
    RESTARTING = ATOLL__JOB_STATE__JOB_RESTARTING, COMPLETED = ATOLL__JOB_STATE__JOB_COMPLETED,
    FAILED = ATOLL__JOB_STATE__JOB_FAILED, CANCELLED = ATOLL__JOB_STATE__JOB_CANCELLED,
};

int jobs_is_active(int s) { return s == PLACING || s == STARTING || s == RUNNING || s == RESTARTING; }

int jobs_transition_allowed(int from, int to)
{
    if (msg_job_state_ended(from) || from == to) return 0;
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

/* ---- live table: open addressing on the job id ---- */

#define LIVE_GONE ((live_job *)1)

static size_t slot_of(uint64_t id, size_t cap) { return (size_t)(id * 0x9e3779b97f4a7c15ull) & (cap - 1); }

live_job *jobs_live(coord *c, uint64_t id)
{
    live_table *t = &c->live;
    if (!t->cap) return NULL;
    for (size_t i = slot_of(id, t->cap), k = 0; k < t->cap; i = (i + 1) & (t->cap - 1), k++) {
        live_job *lj = t->v[i];
        if (!lj) return NULL;
        if (lj != LIVE_GONE && lj->id == id) return lj;
    }
    return NULL;
}

static void live_insert(live_table *t, live_job *lj)
{
    if ((t->used + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        while (t->n * 4 > cap) cap *= 2;
        live_job **v = calloc(cap, sizeof *v);
        if (!v) abort(); /* the daemon cannot go on without its job table */
        for (size_t i = 0; i < t->cap; i++)
            if (t->v[i] && t->v[i] != LIVE_GONE) {
                size_t k = slot_of(t->v[i]->id, cap);
                while (v[k]) k = (k + 1) & (cap - 1);
                v[k] = t->v[i];
            }
        free(t->v);
        t->v = v;
        t->cap = cap;
        t->used = t->n;
    }
    size_t k = slot_of(lj->id, t->cap);
    while (t->v[k] && t->v[k] != LIVE_GONE) k = (k + 1) & (t->cap - 1);
    if (!t->v[k]) t->used++;
    t->v[k] = lj;
    t->n++;
}

static void live_free(coord *c, live_job *lj)
{
    series_forget(c, lj);
    for (int i = 0; i < lj->nranks; i++)
        if (lj->ranks[i].watch) atoll__rank_watch__free_unpacked(lj->ranks[i].watch, NULL);
    free(lj->ranks);
    free(lj);
}

int jobs_live_ranks(coord *c, live_job *lj)
{
    if (lj->ranks) return 0;
    Atoll__JobLayout *l = coord_layout(c, lj->id, lj->epoch);
    if (!l) return -1;
    int n = (int)l->n_ranks;
    lj->ranks = calloc((size_t)(n ? n : 1), sizeof *lj->ranks);
    if (!lj->ranks) abort();
    lj->nranks = n;
    for (size_t i = 0; i < l->n_ranks; i++) {
        int r = l->ranks[i]->rank;
        if (r >= 0 && r < n) snprintf(lj->ranks[r].node, sizeof lj->ranks[r].node, "%s", l->ranks[i]->node);
    }
    for (size_t g = 0; g < l->n_groups; g++) /* a rank's stage is its place in its pp group */
        if (!strcmp(l->groups[g]->kind, "pp"))
            for (size_t k = 0; k < l->groups[g]->n_ranks; k++) {
                int r = l->groups[g]->ranks[k];
                if (r >= 0 && r < n) lj->ranks[r].stage = (int)k;
            }
    atoll__job_layout__free_unpacked(l, NULL);
    return 0;
}

static void live_remove(coord *c, uint64_t id)
{
    live_table *t = &c->live;
    if (!t->cap) return;
    for (size_t i = slot_of(id, t->cap), k = 0; k < t->cap; i = (i + 1) & (t->cap - 1), k++) {
        live_job *lj = t->v[i];
        if (!lj) return;
        if (lj != LIVE_GONE && lj->id == id) {
            live_free(c, lj);
            t->v[i] = LIVE_GONE;
            t->n--;
            return;
        }
    }
}

void jobs_live_each(coord *c, void (*fn)(coord *c, live_job *lj, void *ctx), void *ctx)
{
    for (size_t i = 0; i < c->live.cap; i++)
        if (c->live.v[i] && c->live.v[i] != LIVE_GONE) fn(c, c->live.v[i], ctx);
}

void jobs_live_free(coord *c)
{
    for (size_t i = 0; i < c->live.cap; i++)
        if (c->live.v[i] && c->live.v[i] != LIVE_GONE) live_free(c, c->live.v[i]);
    free(c->live.v);
    memset(&c->live, 0, sizeof c->live);
}

/* Brings the live table in line with a job's new state and epoch. */
static void live_sync(coord *c, const store_job *j)
{
    c->jobs_gen++;
    live_job *lj = jobs_live(c, j->id);
    if (!jobs_is_active(j->state)) {
        if (lj) live_remove(c, j->id);
        rendezvous_job_changed(c, j->id, j->epoch, 1);
        return;
    }
    if (lj && lj->epoch != j->epoch) { /* a new placement: nothing of the old one carries over */
        live_remove(c, j->id);
        lj = NULL;
        rendezvous_job_changed(c, j->id, j->epoch, 0);
    }
    if (!lj) {
        lj = calloc(1, sizeof *lj);
        if (!lj) abort();
        lj->id = j->id;
        lj->epoch = j->epoch;
        lj->progress_ms = c->now();
        atoll_config cfg;
        char why[256];
        Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec); /* decoded once for both */
        if (spec && msg_spec_to_cfg(spec, &cfg, why, sizeof why) == 0) {
            lj->world = cfg.num_gpus;
            lj->pp = cfg.pipeline_model_parallel_size;
        }
        if (spec && spec->time_limit_s > 0) lj->limit_s = spec->time_limit_s;
        if (spec) atoll__job_spec__free_unpacked(spec, NULL);
        live_insert(&c->live, lj);
    }
    lj->state = j->state;
    if (lj->limit_s && j->started_ms) lj->deadline_ms = j->started_ms + lj->limit_s * 1000;
    if (j->world > 0) lj->world = j->world; /* the placement's: smaller while DP is shrunk */
}

static void note_failure(coord *c, live_job *lj, const store_exit *x);

typedef struct {
    coord *c;
    live_job *lj;
} exits_ctx;

static int refail(void *ctx, const store_exit *e)
{
    exits_ctx *x = ctx;
    if (!e->stopped && (e->exit_status || e->term_signal)) note_failure(x->c, x->lj, e);
    return 0;
}

static int load_live(void *ctx, store_job *j)
{
    coord *c = ctx;
    live_sync(c, j);
    /* Rank failures stored before a restart still fail the job (their reports are acknowledged). */
    exits_ctx x = { c, jobs_live(c, j->id) };
    if (x.lj) store_exits_each(c->st, j->id, j->epoch, refail, &x);
    return 0;
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
    /* GPUs freed, or an old job waiting again: every pending job is worth a new try. */
    /* A job that ended may also let a --dependency on it go ahead (or never). */
    if ((jobs_is_active(from) && !jobs_is_active(to)) || to == PENDING || msg_job_state_ended(to))
        sched_capacity_changed(c);
    j->updated_ms = c->now();
    if (msg_job_state_ended(to)) j->ended_ms = j->updated_ms; /* goodput's wall time ends */
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j->id);
    if (store_job_update(c->st, j)) return -1;
    live_sync(c, j);
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

int jobs_max_restarts(const coord *c, const Atoll__JobSpec *spec)
{
    return !spec || spec->max_restarts < 0 ? c->o.max_restarts : spec->max_restarts;
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

int jobs_dependency(coord *c, const Atoll__JobSpec *spec, char *why, size_t len)
{
    dep_list d;
    if (dep_parse(spec->dependency, &d, why, len)) return -2;
    static const char *const TO[] = { "complete", "fail or be cancelled", "end" };
    int verdict = 0;
    for (int i = 0; i < d.n && verdict >= 0; i++) {
        unsigned long long id = d.item[i].job;
        const char *kind = dep_kind_name(d.item[i].kind);
        store_job dj;
        if (store_job_get(c->st, d.item[i].job, &dj)) {
            snprintf(why, len, "--dependency %s:%llu: there is no job %llu", kind, id, id);
            return -1;
        }
        int met = dep_met(d.item[i].kind, dj.state);
        if (met < 0)
            snprintf(why, len, "--dependency %s:%llu can never hold: job %llu %s", kind, id, id,
                     msg_job_state_name(dj.state));
        else if (!met && !verdict)
            snprintf(why, len, "waiting for job %llu to %s (--dependency %s:%llu; it is %s)", id,
                     TO[d.item[i].kind], kind, id, msg_job_state_name(dj.state));
        if (met < 0) verdict = -1;
        else if (!met) verdict = 1;
        store_job_clear(&dj);
    }
    return verdict;
}

static int valid_request_id(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

/* An absolute path with repeated slashes, "." components and a trailing slash
 * taken out ("/a//b/./c/" -> "/a/b/c"); ".." stays (no file system here). */
static void path_norm(const char *in, char *out, size_t len)
{
    size_t o = 0;
    while (*in && o + 2 < len) {
        while (*in == '/') in++;
        const char *end = in;
        while (*end && *end != '/') end++;
        size_t n = (size_t)(end - in);
        if (n && !(n == 1 && in[0] == '.') && o + 1 + n < len) {
            out[o++] = '/';
            memcpy(out + o, in, n);
            o += n;
        }
        in = end;
    }
    if (!o) out[o++] = '/';
    out[o] = '\0';
}

/* The first job in a state that runs, or will, whose absolute --save is `save`,
 * other than those a --dependency waits for. */
typedef struct {
    const char *save;
    const dep_list *deps;
    uint64_t other;
    int state;
} same_save;

static int find_same_save(void *ctx, store_job *j)
{
    same_save *s = ctx;
    if (s->other) return 0;
    for (int i = 0; i < s->deps->n; i++)
        if (s->deps->item[i].job == j->id) return 0;
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    char a[CFG_STR + 2];
    if (spec && spec->save && spec->save[0] == '/') {
        path_norm(spec->save, a, sizeof a);
        if (!strcmp(a, s->save)) {
            s->other = j->id;
            s->state = j->state;
        }
    }
    if (spec) atoll__job_spec__free_unpacked(spec, NULL);
    return 0;
}

int jobs_submit(coord *c, const Atoll__JobSpec *spec, const char *request_id, uint64_t *id, int *existing,
                char *err, size_t errlen)
{
    atoll_config cfg;
    char why[400];
    *existing = 0;
    if (request_id && *request_id) {
        if (!valid_request_id(request_id)) {
            snprintf(err, errlen, "request id '%.80s' is not valid: use 1-64 characters from A-Z a-z 0-9 . _ -",
                     request_id);
            return ATOLL__ERROR_CODE__ERR_INVALID;
        }
        /* A retry of a submission that was stored but whose reply was lost. */
        store_job prev;
        int r = store_job_by_request(c->st, request_id, &prev);
        if (r < 0) {
            snprintf(err, errlen, "cannot look up request id %s: %s", request_id, store_errmsg(c->st));
            return ATOLL__ERROR_CODE__ERR_INTERNAL;
        }
        if (r == 0) {
            size_t len = protobuf_c_message_get_packed_size(&spec->base);
            uint8_t *packed = malloc(len ? len : 1);
            int same = packed && (protobuf_c_message_pack(&spec->base, packed), len == prev.spec_len) &&
                       !memcmp(packed, prev.spec, len);
            free(packed);
            *id = prev.id;
            store_job_clear(&prev);
            if (!same) {
                snprintf(err, errlen, "request id %s already created job %llu with another spec; use a new "
                         "request id for a new job", request_id, (unsigned long long)*id);
                return ATOLL__ERROR_CODE__ERR_CONFLICT;
            }
            *existing = 1;
            return 0;
        }
    }
    if (msg_spec_to_cfg(spec, &cfg, why, sizeof why)) {
        snprintf(err, errlen, "invalid %s", why); /* why starts "job spec: " */
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (sup_env_check(spec->env, spec->n_env, why, sizeof why)) {
        snprintf(err, errlen, "invalid job spec: %s", why);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (spec->time_limit_s < 0 || spec->time_limit_s > SLURM_TIME_MAX_S) {
        snprintf(err, errlen, "invalid job spec: time_limit_s %lld is outside 0 (none) to %lld (366 days)",
                 (long long)spec->time_limit_s, (long long)SLURM_TIME_MAX_S);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    /* A dependency that can never hold is refused now, not queued to be cancelled. */
    if (jobs_dependency(c, spec, why, sizeof why) < 0) {
        snprintf(err, errlen, "invalid job spec: %s", why);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    /* Two jobs writing one --save would each take it from the other at every restart (the
     * placement claim, engine/checkpoint.h): refused, unless this one waits for the other (a
     * chain of jobs, each going on from the last one's checkpoint). A relative --save is the
     * job's own (ranks run in their job's directory). */
    if (spec->save && spec->save[0] == '/') {
        char norm[CFG_STR + 2];
        path_norm(spec->save, norm, sizeof norm);
        dep_list deps;
        if (dep_parse(spec->dependency, &deps, why, sizeof why)) deps.n = 0; /* (refused above) */
        same_save ss = { norm, &deps, 0, 0 };
        for (int st = PENDING; st <= RESTARTING && !ss.other; st++) store_jobs_each(c->st, st, find_same_save, &ss);
        if (ss.other) {
            snprintf(err, errlen, "--save %s is job %llu's (%s): two jobs cannot write one --save, each would take "
                     "it from the other at every restart; choose another directory, cancel job %llu, or submit "
                     "with --dependency afterany:%llu to go on from its checkpoint once it ends", spec->save,
                     (unsigned long long)ss.other, msg_job_state_name(ss.state), (unsigned long long)ss.other,
                     (unsigned long long)ss.other);
            return ATOLL__ERROR_CODE__ERR_CONFLICT;
        }
    }
    if (cfg.num_gpus < 1) {
        snprintf(err, errlen, "invalid job spec: --num-gpus (the job's world size) is required and must be at least 1");
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    int island = sched_max_island(c);
    if (cfg_validate_layout(&cfg, cfg.num_gpus, island, why, sizeof why) || cfg_validate_submission(&cfg, why, sizeof why)) {
        snprintf(err, errlen, "invalid job spec: %s", why);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    /* Refused here rather than by every rank once placed: the layout does not fit
     * even the largest GPU the cluster has (the ranks check their own GPU again). */
    if (!sched_fits_memory(c, &cfg, why, sizeof why)) {
        char advice[1024];
        plan_memory_advice(&cfg, cfg_data_parallel_size(&cfg, cfg.num_gpus),
                           (double)sched_max_gpu_memory(c, NULL, 0), advice, sizeof advice);
        snprintf(err, errlen, "invalid job spec: %s; %s", why, advice);
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
    snprintf(j.request_id, sizeof j.request_id, "%s", request_id ? request_id : "");
    j.state = PENDING;
    snprintf(j.message, sizeof j.message, "queued");
    j.bubble_theory = cfg_bubble_theory(&cfg, cfg.num_gpus, 0);
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
    c->jobs_gen++;
    c->schedule_pending = 1;
    return 0;
}

/* Asks the ranks of a running job to commit a checkpoint and stop; the job stays
 * running until their exits say how that went. */
static int cancel_with_checkpoint(coord *c, store_job *j, char *err, size_t errlen)
{
    atoll_config cfg;
    if (j->state != RUNNING) {
        snprintf(err, errlen, "job %llu is %s; only a running job can stop with a checkpoint (`atoll cancel %llu` "
                 "without --checkpoint stops it now)", (unsigned long long)j->id, msg_job_state_name(j->state),
                 (unsigned long long)j->id);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (jobs_config(j, &cfg) || !cfg.save[0]) {
        snprintf(err, errlen, "job %llu was submitted without --save DIR, so it has nowhere to write a checkpoint; "
                 "cancel it without --checkpoint", (unsigned long long)j->id);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j->id);
    snprintf(j->message, sizeof j->message, "stopping: the ranks are committing a checkpoint to %.180s", cfg.save);
    j->updated_ms = c->now();
    j->stop_asked = 1;
    if (store_begin(c->st) || store_job_update(c->st, j) ||
        events_add(c, "job.stopping", subject, "atoll cancel --checkpoint at step %lld: SIGTERM to the ranks, "
                   "which commit a checkpoint to %s and exit", (long long)j->step, cfg.save) ||
        store_commit(c->st)) {
        store_rollback(c->st);
        snprintf(err, errlen, "cannot record the stop: %s", store_errmsg(c->st));
        return ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    c->jobs_gen++;
    sched_checkpoint_job(c, j, "atoll cancel --checkpoint");
    return 0;
}

int jobs_cancel(coord *c, uint64_t id, int checkpoint, store_job *out, char *err, size_t errlen)
{
    int r = store_job_get(c->st, id, out);
    if (r) {
        snprintf(err, errlen, r > 0 ? "no job %llu (`atoll jobs` lists them)" : "cannot read job %llu",
                 (unsigned long long)id);
        return r > 0 ? ATOLL__ERROR_CODE__ERR_NOT_FOUND : ATOLL__ERROR_CODE__ERR_INTERNAL;
    }
    if (msg_job_state_ended(out->state)) {
        snprintf(err, errlen, "job %llu is already %s; only pending or running jobs can be cancelled",
                 (unsigned long long)id, msg_job_state_name(out->state));
        store_job_clear(out);
        return ATOLL__ERROR_CODE__ERR_INVALID;
    }
    if (checkpoint) {
        int code = cancel_with_checkpoint(c, out, err, errlen);
        if (code) store_job_clear(out);
        return code;
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

static const char *fault_kind(const char *cause)
{
    return !strcmp(cause, "hang") ? "job.hang" : !strcmp(cause, "node-lost") ? "job.node_lost" : "job.rank_exit";
}

void jobs_fault_raise(coord *c, uint64_t id, const jobs_fault *f)
{
    store_job j;
    if (store_job_get(c->st, id, &j)) return;
    if (!jobs_is_active(j.state) || j.state == RESTARTING) {
        store_job_clear(&j);
        return;
    }
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j.id);
    if (store_begin(c->st) == 0) {
        events_add(c, fault_kind(f->cause), subject, "%s", f->detail);
        if (store_commit(c->st)) store_rollback(c->st);
    }
    if (j.state == PLACING) { /* nothing runs yet: place it again */
        jobs_set_state(c, &j, PENDING, "placing again after %s", f->cause);
    } else {
        restart_begin(c, &j, f, 1);
    }
    store_job_clear(&j);
    c->schedule_pending = 1;
}

void jobs_node_lost(coord *c, const char *node, int64_t fault_ms, const char *why)
{
    lost_ctx l = { .c = c, .node = node };
    for (int s = PLACING; s <= RESTARTING; s++) store_jobs_each(c->st, s, collect_active, &l);
    for (size_t i = 0; i < l.ids.n; i++) {
        jobs_fault f = { .cause = "node-lost", .rank = -1, .fault_ms = fault_ms };
        snprintf(f.node, sizeof f.node, "%s", node);
        snprintf(f.detail, sizeof f.detail, "node %s lost: %s", node, why);
        jobs_fault_raise(c, l.ids.ids[i], &f);
    }
    free(l.ids.ids);
    c->schedule_pending = 1;
}

/* A rank failed: remember it; its peers fail within moments once their links
 * drop, so the job is judged after a settle period (jobs_tick). */
static void note_failure(coord *c, live_job *lj, const store_exit *x)
{
    if (lj->nfail < LIVE_FAILS) {
        live_fail *f = &lj->fail[lj->nfail++];
        f->rank = x->rank;
        f->pid = x->pid;
        f->exit_status = x->exit_status;
        f->term_signal = x->term_signal;
        snprintf(f->node, sizeof f->node, "%s", x->node);
        size_t n = strlen(x->log_tail); /* the end of the tail: the last lines matter */
        const char *from = n >= sizeof f->tail ? x->log_tail + n - (sizeof f->tail - 1) : x->log_tail;
        memcpy(f->tail, from, strlen(from) + 1);
    }
    if (lj->nfail == 1) {
        lj->first_fail_ms = c->now();
        lj->settle_ms = c->now() + JOBS_SETTLE_MS;
    }
    /* Something killed it (not our Stop: that exit is marked stopped): it is the cause; judge now. */
    if (x->term_signal) lj->settle_ms = c->now();
}

void jobs_rank_exit(coord *c, const char *node, const Atoll__RankExit *e)
{
    store_exit x = { .job = e->job, .epoch = e->epoch, .rank = e->rank, .pid = e->pid, .exit_status = e->exit_status,
                     .term_signal = e->term_signal, .stopped = e->stopped, .time_ms = e->time_ms };
    snprintf(x.node, sizeof x.node, "%s", node);
    snprintf(x.log_tail, sizeof x.log_tail, "%s", e->log_tail ? e->log_tail : "");
    if (store_exit_put(c->st, &x) != 1) return; /* already known (a replay), or the store failed */
    live_job *lj = jobs_live(c, e->job);
    int saved = e->exit_status == SUP_EXIT_SAVED && e->term_signal == 0;
    /* stopped on request: no verdict from it, unless it says it saved a checkpoint */
    if (!lj || lj->epoch != e->epoch || (e->stopped && !saved)) return;
    if (saved || (e->exit_status == 0 && e->term_signal == 0)) {
        int total = 0, ok = 0, nsaved = 0;
        if (store_exits_count(c->st, e->job, e->epoch, &total, &ok, &nsaved) || ok + nsaved < lj->world ||
            lj->nfail)
            return;
        series_flush(c); /* the last steps first, so the job ends with its final figures */
        store_job j;
        if (store_job_get(c->st, e->job, &j)) return;
        if (j.state == STARTING) jobs_set_state(c, &j, RUNNING, "ranks reporting");
        atoll_config cfg;
        int have_cfg = jobs_config(&j, &cfg) == 0;
        char lim[32];
        slurm_format_time(lj->limit_s, lim, sizeof lim);
        if (j.state == RUNNING && nsaved && lj->time_stop_ms) /* stopped at its --time */
            jobs_set_state(c, &j, CANCELLED, "time limit (--time %s) reached: stopped after step %lld with a "
                           "checkpoint committed to %.160s (resume with --load)", lim, (long long)j.step,
                           have_cfg ? cfg.save : "--save");
        /* ranks that saved and stopped without being asked: --exit-duration-in-mins in the engine */
        else if (j.state == RUNNING && nsaved && !j.stop_asked && have_cfg && cfg.exit_duration_in_mins > 0)
            jobs_set_state(c, &j, CANCELLED, "stopped at --exit-duration-in-mins %g after step %lld with a checkpoint "
                           "committed to %.160s (resume with --load)", cfg.exit_duration_in_mins, (long long)j.step,
                           cfg.save);
        else if (j.state == RUNNING && nsaved)
            jobs_set_state(c, &j, CANCELLED, "stopped on SIGTERM after step %lld with a checkpoint committed to %.160s "
                           "(resume with --load)", (long long)j.step, have_cfg ? cfg.save : "--save");
        else if (j.state == RUNNING)
            jobs_set_state(c, &j, COMPLETED, "all %d ranks finished; step %lld, loss %.4f", lj->world,
                           (long long)j.step, j.loss);
        store_job_clear(&j);
        return;
    }
    note_failure(c, lj, &x);
}

typedef struct {
    store_idlist due;
} settle_ctx;

static void collect_due(coord *c, live_job *lj, void *ctx)
{
    settle_ctx *x = ctx;
    if (lj->nfail && c->now() >= lj->settle_ms) store_idlist_push(&x->due, lj->id);
}

/* A node of the job whose agent disconnected or has gone quiet (no heartbeat for
 * 1.5 intervals) while its peers failed: its own ranks died with it (they die with
 * their workerd), and it is the cause. Returns it, or NULL when every node of the
 * job is heard from. *lost says whether that is certain already (disconnected,
 * or not alive) or still to be seen (quiet). */
static reg_node *quiet_node(coord *c, live_job *lj, int *lost)
{
    if (jobs_live_ranks(c, lj)) return NULL;
    int64_t now = c->now(), quiet = c->o.heartbeat_ms * 3 / 2 + 100;
    for (int i = 0; i < lj->nranks; i++) {
        reg_node *n = registry_find(&c->reg, lj->ranks[i].node);
        if (!n) continue;
        *lost = !n->peer || n->live != NODE_ALIVE;
        if (*lost || now - n->last_seen_ms > quiet) return n;
    }
    return NULL;
}

/* A refusing rank's reason: the last line of its log, without the
 * "atoll-train: rank N: " that begins it. Points into `tail`. */
static const char *refusal_of(char *tail)
{
    size_t n = strlen(tail);
    while (n && (tail[n - 1] == '\n' || tail[n - 1] == '\r')) tail[--n] = 0;
    char *line = strrchr(tail, '\n');
    line = line ? line + 1 : tail;
    const char *p = line;
    if (!strncmp(p, "atoll-train: ", 13)) p += 13;
    if (!strncmp(p, "rank ", 5)) {
        const char *q = p + 5;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p + 5 && q[0] == ':' && q[1] == ' ') p = q + 2;
    }
    return *p ? p : "(empty log)";
}

static void collect_overtime(coord *c, live_job *lj, void *ctx)
{
    settle_ctx *x = ctx;
    int64_t now = c->now();
    if (lj->deadline_ms && now >= lj->deadline_ms && (!lj->time_stop_ms || now >= lj->time_stop_ms + JOBS_TIME_GRACE_MS))
        store_idlist_push(&x->due, lj->id);
}

/* --time: a running job with --save is asked to commit a checkpoint and stop (its
 * saved exits then cancel it, naming the limit); one without, one not running, or
 * one whose ranks have not stopped within JOBS_TIME_GRACE_MS is cancelled now. */
static void enforce_time_limits(coord *c)
{
    settle_ctx x = { { 0 } };
    jobs_live_each(c, collect_overtime, &x);
    for (size_t i = 0; i < x.due.n; i++) {
        live_job *lj = jobs_live(c, x.due.ids[i]);
        store_job j;
        if (!lj || store_job_get(c->st, lj->id, &j)) continue;
        atoll_config cfg;
        char lim[32], subject[32];
        slurm_format_time(lj->limit_s, lim, sizeof lim);
        snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j.id);
        int save = jobs_config(&j, &cfg) == 0 && cfg.save[0];
        if (!lj->time_stop_ms && j.state == RUNNING && save) {
            snprintf(j.message, sizeof j.message, "time limit (--time %s) reached: the ranks are committing a "
                     "checkpoint to %.160s", lim, cfg.save);
            j.updated_ms = c->now();
            if (store_begin(c->st) || store_job_update(c->st, &j) ||
                events_add(c, "job.time_limit", subject, "--time %s reached at step %lld: SIGTERM to the ranks, "
                           "which commit a checkpoint to %s and exit", lim, (long long)j.step, cfg.save) ||
                store_commit(c->st)) {
                store_rollback(c->st);
            } else {
                lj->time_stop_ms = c->now();
                c->jobs_gen++;
                sched_checkpoint_job(c, &j, "time limit");
            }
        } else {
            int late = lj->time_stop_ms != 0; /* lj is gone after the state change */
            if (jobs_set_state(c, &j, CANCELLED, "time limit (--time %s) reached at step %lld%s", lim,
                               (long long)j.step, late ? "; no checkpoint was committed within the grace period" : "")
                == 0)
                sched_stop_job(c, &j, "time limit");
        }
        store_job_clear(&j);
    }
    free(x.due.ids);
}

void jobs_tick(coord *c)
{
    enforce_time_limits(c);
    settle_ctx x = { { 0 } };
    jobs_live_each(c, collect_due, &x);
    for (size_t i = 0; i < x.due.n; i++) {
        live_job *lj = jobs_live(c, x.due.ids[i]);
        if (!lj) continue;
        int sigs[LIVE_FAILS], codes[LIVE_FAILS];
        for (int k = 0; k < lj->nfail; k++) {
            sigs[k] = lj->fail[k].term_signal;
            codes[k] = lj->fail[k].exit_status;
        }
        int blamed = sup_blame(codes, sigs, lj->nfail);
        live_fail f = lj->fail[blamed];
        int lost = 0;
        reg_node *quiet = f.term_signal ? NULL : quiet_node(c, lj, &lost);
        if (quiet && !lost) continue; /* wait: it speaks again, disconnects, or is suspect */
        jobs_fault jf = { .rank = f.rank, .fault_ms = lj->first_fail_ms };
        if (quiet) { /* its ranks died with it; the peers' exits are the symptom */
            jf.cause = "node-lost";
            jf.rank = -1;
            jf.fault_ms = quiet->peer ? quiet->last_seen_ms : lj->first_fail_ms;
            snprintf(jf.node, sizeof jf.node, "%s", quiet->name);
            snprintf(jf.detail, sizeof jf.detail, "node %s lost: %s (last heartbeat %.1f s ago) while %d rank%s of "
                     "the job failed (first: rank %d on node %s)", quiet->name,
                     quiet->peer ? "no heartbeat" : "its agent disconnected", (c->now() - quiet->last_seen_ms) / 1000.0,
                     lj->nfail, lj->nfail == 1 ? "" : "s", lj->fail[0].rank, lj->fail[0].node);
            lj->nfail = 0;
            jobs_fault_raise(c, lj->id, &jf);
            continue;
        }
        char what[160], tail[281]; /* the event holds 512 characters */
        sup_describe_exit(what, sizeof what, f.rank, f.pid, f.exit_status, f.term_signal);
        /* the last lines, on one line: the message is one line */
        size_t n = strlen(f.tail), k = 0;
        const char *from = n > sizeof tail - 1 ? f.tail + n - (sizeof tail - 1) : f.tail;
        for (; *from && k < sizeof tail - 1; from++) tail[k++] = *from == '\n' ? '|' : *from;
        tail[k] = 0;
        jf.cause = "rank-exit";
        jf.refused = !f.term_signal && f.exit_status == SUP_EXIT_CONFIG;
        snprintf(jf.node, sizeof jf.node, "%s", f.node);
        if (jf.refused) /* its last line is the reason: first, so that the job's message keeps it */
            snprintf(jf.detail, sizeof jf.detail, "rank %d on node %s refused the job's configuration: %s", f.rank,
                     f.node, refusal_of(f.tail));
        else
            snprintf(jf.detail, sizeof jf.detail, "%s on node %s%s; last log lines: %s", what, f.node,
                     lj->nfail > 1 ? "; other ranks failed after it" : "", tail[0] ? tail : "(empty log)");
        lj->nfail = 0;
        jobs_fault_raise(c, lj->id, &jf);
    }
    free(x.due.ids);
}

static int note_reconciled(void *ctx, store_job *j)
{
    coord *c = ctx;
    if (j->state == PLACING) return 0; /* placed again below */
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)j->id);
    events_add(c, "job.reconciled", subject, "%s in epoch %u on %d ranks: left as it is (a coordinator restart is "
               "not a failure); its nodes reconnect and their reports resume", msg_job_state_name(j->state), j->epoch,
               j->world);
    return 0;
}

void jobs_reconcile(coord *c)
{
    for (int s = PLACING; s <= RESTARTING; s++) store_jobs_each(c->st, s, load_live, c);
    if (store_begin(c->st) == 0) {
        for (int s = STARTING; s <= RESTARTING; s++) store_jobs_each(c->st, s, note_reconciled, c);
        if (store_commit(c->st)) store_rollback(c->st);
    }
    store_idlist placing = { 0 };
    store_job_ids(c->st, PLACING, 0, 0, &placing);
    for (size_t i = 0; i < placing.n; i++) {
        store_job j;
        if (store_job_get(c->st, placing.ids[i], &j)) continue;
        jobs_set_state(c, &j, PENDING, "coordinator restarted during placement");
        store_job_clear(&j);
    }
    free(placing.ids);
    c->schedule_pending = 1;
}
