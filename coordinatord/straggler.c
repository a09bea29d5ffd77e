/* straggler: which ranks compute slower than their peers.
 *
 * In synchronous training every rank's step takes as long as the slowest one's,
 * so the step time cannot tell a straggler. Each rank reports its compute time
 * per step instead: the step less the time it was blocked in communication
 * (RankMetrics.compute_ms). The coordinator smooths it per rank (EWMA, 0.1) and,
 * once a second per running job, scores each rank against the median of its
 * peers: the ranks of its pipeline stage (stages do different work), or the
 * whole job when its stage has no other rank. The median is the lower one, so
 * with two ranks the faster sets the bar. A rank whose score reaches
 * --straggler-threshold (and at least NOISE_MS more) five times in a row is a
 * straggler (an event names its node, rank and times); it stops being one after
 * five scores below 90% of the threshold. With
 * --exclude-stragglers SEC, a rank that stays a straggler that long gets its node
 * drained, so the job's next placement (after a failure, or a scale-up) leaves
 * it out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "jobs.h"
#include "log.h"

#define SCORE_EVERY_MS 1000
#define MIN_SAMPLES 3
#define SKIP_FIRST 1 /* a run's first step includes warm-up */
#define PERSIST 5    /* scores in a row before a rank becomes (or stops being) a straggler */
#define ALPHA 0.1    /* EWMA weight of a new step's compute time */
#define NOISE_MS 1.0 /* a difference below this is scheduling noise, whatever the ratio */

void straggler_step(coord *c, live_job *lj, const Atoll__RankMetrics *m)
{
    if (m->compute_ms <= 0 || jobs_live_ranks(c, lj) || m->rank < 0 || m->rank >= lj->nranks) return;
    if (m->start_iteration && m->iteration <= m->start_iteration + SKIP_FIRST) return;
    if (!m->start_iteration && m->iteration <= SKIP_FIRST) return;
    live_rank *r = &lj->ranks[m->rank];
    if (m->iteration <= r->iteration) return; /* a replay */
    r->iteration = m->iteration;
    r->compute_ms = r->samples ? (1 - ALPHA) * r->compute_ms + ALPHA * m->compute_ms : m->compute_ms;
    r->samples++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Lower median of the scored ranks of `stage` (-1: all); 0 when fewer than two. */
static double median(const live_job *lj, int stage, double *tmp)
{
    int n = 0;
    for (int i = 0; i < lj->nranks; i++)
        if (lj->ranks[i].samples >= MIN_SAMPLES && (stage < 0 || lj->ranks[i].stage == stage))
            tmp[n++] = lj->ranks[i].compute_ms;
    if (n < 2) return 0;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return tmp[(n - 1) / 2];
}

typedef struct {
    store_idlist jobs;
} due_ctx;

static void collect(coord *c, live_job *lj, void *ctx)
{
    due_ctx *d = ctx;
    int64_t now = c->now();
    if (lj->state != ATOLL__JOB_STATE__JOB_RUNNING || !lj->ranks || now - lj->straggler_tick_ms < SCORE_EVERY_MS)
        return;
    lj->straggler_tick_ms = now;
    store_idlist_push(&d->jobs, lj->id);
}

static void drain_for(coord *c, live_job *lj, int rank)
{
    live_rank *r = &lj->ranks[rank];
    reg_node *n = registry_find(&c->reg, r->node);
    if (!n || n->drained) return;
    n->drained = 1;
    int rc = store_begin(c->st);
    if (!rc) rc = store_node_set_state(c->st, n->name, n->live, 1, n->last_seen_ms);
    if (!rc)
        rc = events_add(c, "node.drained", n->name, "persistent straggler: rank %d of job %llu has computed %.2fx "
                        "slower than its peers for %.0f s; the job's next placement leaves this node out "
                        "(`atoll undrain %s` allows it again)", rank, (unsigned long long)lj->id, r->score,
                        (c->now() - r->straggler_since) / 1000.0, n->name);
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        store_rollback(c->st);
        n->drained = 0;
    }
}

static void score_job(coord *c, live_job *lj)
{
    double *tmp = malloc(sizeof(double) * (size_t)(lj->nranks + 1));
    if (!tmp) return;
    double job_median = median(lj, -1, tmp);
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)lj->id);
    double thr = c->o.straggler_threshold;
    for (int i = 0; i < lj->nranks; i++) {
        live_rank *r = &lj->ranks[i];
        if (r->samples < MIN_SAMPLES) continue;
        double m = median(lj, r->stage, tmp);
        if (m <= 0) m = job_median;
        if (m <= 0) continue;
        r->score = r->compute_ms / m;
        /* A verdict needs PERSIST scores in a row on the same side (scheduling noise is not a straggler). */
        int over = r->score >= thr && r->compute_ms - m >= NOISE_MS, under = !over && r->score < 0.9 * thr;
        r->streak = over ? (r->streak > 0 ? r->streak + 1 : 1) : under ? (r->streak < 0 ? r->streak - 1 : -1) : 0;
        if (!r->straggler && r->streak >= PERSIST) {
            r->straggler = 1;
            r->straggler_since = c->now();
            if (store_begin(c->st) == 0) {
                events_add(c, "job.straggler", subject, "rank %d on node %s computes %.1f ms per step, %.2fx the "
                           "median of its peers (%.1f ms; threshold %.2fx)", i, r->node, r->compute_ms, r->score, m,
                           thr);
                if (store_commit(c->st)) store_rollback(c->st);
            }
        } else if (r->straggler && r->streak <= -PERSIST) {
            r->straggler = 0;
            r->straggler_since = 0;
            if (store_begin(c->st) == 0) {
                events_add(c, "job.straggler_cleared", subject, "rank %d on node %s: %.1f ms per step, %.2fx the "
                           "median", i, r->node, r->compute_ms, r->score);
                if (store_commit(c->st)) store_rollback(c->st);
            }
        }
        if (r->straggler && c->o.straggler_exclude_ms > 0 && c->now() - r->straggler_since >= c->o.straggler_exclude_ms)
            drain_for(c, lj, i);
    }
    free(tmp);
}

void straggler_tick(coord *c)
{
    due_ctx d = { { 0 } };
    jobs_live_each(c, collect, &d);
    for (size_t i = 0; i < d.jobs.n; i++) {
        live_job *lj = jobs_live(c, d.jobs.ids[i]);
        if (lj) score_job(c, lj);
    }
    free(d.jobs.ids);
}
