#include "series.h"

#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "log.h"
#include "restart.h"

typedef struct series_slot {
    int used, dirty;
    store_step st;
} series_slot;

struct series_acc {
    series_slot slot[SERIES_SLOTS];
    int64_t newest;          /* highest iteration seen */
    int64_t newest_written;  /* highest iteration with job-wide fields in the jobs table */
    int since_thin;          /* rows written since the last thinning check */
};

static void write_slot(coord *c, live_job *lj, series_slot *s)
{
    if (store_step_put(c->st, &s->st))
        log_error("job %llu: cannot store step %lld: %s", (unsigned long long)lj->id, (long long)s->st.iteration,
                  store_errmsg(c->st));
    s->dirty = 0;
    lj->acc->since_thin++;
    if (s->st.have_job && s->st.iteration >= lj->acc->newest_written) {
        double mean = 0;
        int k = 0;
        for (int i = 0; i < s->st.nstages; i++)
            if (s->st.bubble[i] >= 0) mean += s->st.bubble[i], k++;
        double mfu = s->st.peak_flops > 0 ? s->st.flops_per_gpu / s->st.peak_flops : 0;
        store_job_set_metrics(c->st, lj->id, s->st.iteration, s->st.loss, s->st.tokens_per_s, mfu, k ? mean / k : 0,
                              s->st.bubble_theory, s->st.time_ms);
        lj->acc->newest_written = s->st.iteration;
    }
}

static series_slot *slot_for(coord *c, live_job *lj, int64_t it)
{
    series_acc *a = lj->acc;
    series_slot *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < SERIES_SLOTS; i++) {
        series_slot *s = &a->slot[i];
        if (s->used && s->st.iteration == it) return s;
        if (!s->used) free_slot = free_slot ? free_slot : s;
        else if (!oldest || s->st.iteration < oldest->st.iteration) oldest = s;
    }
    series_slot *s = free_slot;
    if (!s) { /* make room: the oldest step is complete by now, or never will be */
        s = oldest;
        if (s->dirty) write_slot(c, lj, s);
    }
    memset(s, 0, sizeof *s);
    s->used = 1;
    /* Start from what is stored (a report replayed after a restart merges in). */
    if (store_step_get(c->st, lj->id, it, &s->st) != 0) {
        memset(&s->st, 0, sizeof s->st);
        s->st.job = lj->id;
        s->st.iteration = it;
        s->st.nstages = lj->pp > 1 ? (lj->pp < STORE_MAX_STAGES ? lj->pp : STORE_MAX_STAGES) : 1;
        for (int i = 0; i < STORE_MAX_STAGES; i++) s->st.bubble[i] = s->st.transfer[i] = -1;
    }
    s->st.epoch = lj->epoch;
    return s;
}

void series_add(coord *c, const Atoll__RankMetrics *m)
{
    c->metrics_records++;
    live_job *lj = jobs_live(c, m->job);
    if (!lj || lj->epoch != m->epoch || m->iteration < 1) return; /* a late report of an old placement */
    if (!lj->acc && !(lj->acc = calloc(1, sizeof *lj->acc))) return;
    if (lj->state == ATOLL__JOB_STATE__JOB_STARTING) {
        store_job j;
        if (store_job_get(c->st, lj->id, &j) == 0) {
            jobs_set_state(c, &j, ATOLL__JOB_STATE__JOB_RUNNING, "ranks reporting");
            store_job_clear(&j);
        }
        if (!(lj = jobs_live(c, m->job)) || !lj->acc) return;
    }
    if (!m->from_checkpoint) {
        hang_step(c, lj, m);
        straggler_step(c, lj, m);
        restart_step(c, lj, m);
    }
    series_slot *s = slot_for(c, lj, m->iteration);
    store_step *st = &s->st;
    if (m->from_checkpoint) { /* fills a step whose rank-0 report was lost; never overwrites one */
        if (!st->have_job) {
            st->have_job = 1;
            st->loss = m->loss;
            st->lr = m->lr;
            st->grad_norm = m->grad_norm;
            if (!st->time_ms) st->time_ms = c->now();
            s->dirty = 1;
            c->series_dirty = 1;
        }
        return;
    }
    if (m->rank == 0) {
        st->have_job = 1;
        st->loss = m->loss;
        st->lr = m->lr;
        st->grad_norm = m->grad_norm;
        st->tokens_per_s = m->tokens_per_s;
        st->step_ms = m->step_ms;
        st->flops_per_gpu = m->flops_per_gpu;
        st->peak_flops = m->peak_flops;
        st->bubble_theory = m->bubble_theory;
        st->time_ms = c->now();
        if (m->valid_loss > 0) st->valid_loss = m->valid_loss;
    }
    if (m->stage >= 0 && m->stage < st->nstages && lj->pp > 1) {
        st->bubble[m->stage] = m->bubble_measured;
        st->transfer[m->stage] = m->transfer;
    }
    if (m->memory_bytes > st->memory_bytes) st->memory_bytes = m->memory_bytes;
    if (!st->time_ms) st->time_ms = c->now();
    s->dirty = 1;
    c->series_dirty = 1;
    if (m->iteration > lj->acc->newest) lj->acc->newest = m->iteration;
    restart_checkpoint(c, lj, m); /* last: it may restart the job (lj then changes) */
}

typedef struct {
    int wrote;
} flush_ctx;

static void flush_job(coord *c, live_job *lj, void *ctx)
{
    flush_ctx *x = ctx;
    series_acc *a = lj->acc;
    if (!a) return;
    for (int i = 0; i < SERIES_SLOTS; i++)
        if (a->slot[i].used && a->slot[i].dirty) {
            write_slot(c, lj, &a->slot[i]);
            x->wrote++;
        }
    /* Keep the newest SERIES_FULL steps whole; halve the older ones when they outgrow that. */
    if (a->since_thin >= SERIES_FULL / 4 && a->newest > SERIES_FULL) {
        a->since_thin = 0;
        int64_t older = 0, before = a->newest - SERIES_FULL;
        if (store_steps_count(c->st, lj->id, before, &older) == 0 && older > SERIES_FULL)
            store_steps_thin(c->st, lj->id, before);
    }
}

void series_flush(coord *c)
{
    flush_ctx x = { 0 };
    int pending = c->series_dirty;
    for (size_t i = 0; i < c->reg.n && !pending; i++)
        pending = c->reg.nodes[i]->relay_durable != c->reg.nodes[i]->relay_seen;
    if (!pending) return;
    if (store_begin(c->st)) {
        log_error("cannot write metrics: %s", store_errmsg(c->st));
        return;
    }
    jobs_live_each(c, flush_job, &x);
    if (store_commit(c->st)) {
        log_error("cannot commit metrics: %s", store_errmsg(c->st));
        store_rollback(c->st);
        return;
    }
    c->series_dirty = 0;
    c->jobs_gen++; /* the jobs' latest figures changed */
    /* Everything received before this flush is now on disk. */
    for (size_t i = 0; i < c->reg.n; i++) c->reg.nodes[i]->relay_durable = c->reg.nodes[i]->relay_seen;
}

void series_forget(coord *c, live_job *lj)
{
    if (lj->acc) { /* what was gathered still counts: write it before letting go */
        flush_ctx x = { 0 };
        flush_job(c, lj, &x);
    }
    free(lj->acc);
    lj->acc = NULL;
}

void series_msg(const store_step *st, double bubble_theory, Atoll__JobMetrics *out, msg_arena *a)
{
    if (st->bubble_theory > 0) bubble_theory = st->bubble_theory; /* the step's own: a ramp's batch, a shrunk dp */
    atoll__job_metrics__init(out);
    out->step = st->iteration;
    out->time_ms = st->time_ms;
    out->loss = st->loss;
    out->lr = st->lr;
    out->grad_norm = st->grad_norm;
    out->tokens_per_s = st->tokens_per_s;
    out->step_ms = st->step_ms;
    out->flops_per_gpu = st->flops_per_gpu;
    out->peak_flops = st->peak_flops;
    out->mfu = st->peak_flops > 0 ? st->flops_per_gpu / st->peak_flops : 0;
    out->memory_bytes = st->memory_bytes;
    out->bubble_theory = bubble_theory;
    out->valid_loss = st->valid_loss;
    out->valid_step = st->valid_loss > 0 ? st->iteration : 0;
    int n = st->nstages > 0 ? st->nstages : 0, k = 0;
    double mean = 0;
    out->stages = msg_alloc(a, sizeof *out->stages * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        Atoll__StageBubble *b = msg_alloc(a, sizeof *b);
        atoll__stage_bubble__init(b);
        b->stage = i;
        b->measured = st->bubble[i];
        b->transfer = st->transfer[i];
        b->theory = bubble_theory;
        out->stages[out->n_stages++] = b;
        if (st->bubble[i] >= 0) mean += st->bubble[i], k++;
    }
    out->bubble_measured = k ? mean / k : 0;
}

static int complete(const store_step *st)
{
    int ok = st->have_job;
    for (int i = 0; i < st->nstages && st->nstages > 1; i++) ok &= st->bubble[i] >= 0;
    return ok;
}

/* The newest steps may still wait for some ranks' reports (their nodes heartbeat
 * at other moments): the newest complete one of the last few, else the newest.
 * 1 when the job has no step. */
static int settled(coord *c, uint64_t job, store_step *out)
{
    store_step prev;
    if (store_step_latest(c->st, job, out)) return 1;
    for (int back = 1; back <= 16 && !complete(out); back++)
        if (out->iteration - back >= 1 && !store_step_get(c->st, job, out->iteration - back, &prev) &&
            complete(&prev)) {
            *out = prev;
            break;
        }
    return 0;
}

int64_t series_settled(coord *c, uint64_t job)
{
    store_step st;
    return settled(c, job, &st) ? 0 : st.iteration;
}

int series_latest(coord *c, uint64_t job, Atoll__JobMetrics *out, msg_arena *a)
{
    store_step st, prev;
    if (settled(c, job, &st)) return 1;
    store_job j;
    double theory = 0;
    if (store_job_get(c->st, job, &j) == 0) {
        theory = j.bubble_theory;
        store_job_clear(&j);
    }
    series_msg(&st, theory, out, a);
    /* the newest evaluation, whichever step it followed */
    if (store_step_latest_valid(c->st, job, &prev) == 0) {
        out->valid_loss = prev.valid_loss;
        out->valid_step = prev.iteration;
    }
    return 0;
}
