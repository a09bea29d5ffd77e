/* hang: a job whose steps stopped, and the rank(s) that stopped it.
 *
 * Progress is the newest iteration any rank reported (dated by the rank's clock
 * at the step's end, never later than its arrival). A running job is hung when
 * no step came for longer than max(--hang-floor, --hang-factor x the median of
 * rank 0's recent step times), unless its ranks are saving a checkpoint or
 * evaluating (and none is silent). Then the ranks' watchdog reports
 * (engine/watchdog.h: the collective or send/recv each rank is blocked in, and
 * since when) name the culprit: a rank the others wait for that never entered
 * their collective and is not itself waiting, or whose watchdog went silent (a
 * stopped process stops reporting; workerd also says when /proc shows it
 * stopped). The hang is one event naming the culprit's node, rank and what it
 * was last seen doing, and it is handled as a fault of the job (jobs_fault). While
 * no culprit can be named the verdict waits for the next heartbeats, up to three
 * bounds.
 *
 * Fresh reports: step reports wait in their workerd for its next heartbeat, so a
 * bound shorter than the heartbeat interval would otherwise be judged a heartbeat
 * late. A watchdog report of a wait past the rank's step time is relayed at once
 * (urgent); once one came and the bound has passed since the job's last step, the
 * job's nodes not heard from since are asked for a heartbeat now (ReportNow), and
 * the job is judged when the last of them answers (hang_heard), else on a tick. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "jobs.h"
#include "log.h"
#include "topo.h"

#define FROZEN_MIN_MS 1000

static void drop_watch(Atoll__RankWatch *w) { atoll__rank_watch__free_unpacked(w, NULL); }

void hang_watch(coord *c, const char *node, Atoll__RankWatch *w)
{
    live_job *lj = jobs_live(c, w->job);
    if (!lj || lj->epoch != w->epoch || jobs_live_ranks(c, lj) || w->rank < 0 || w->rank >= lj->nranks ||
        strcmp(lj->ranks[w->rank].node, node)) { /* an old placement's, or not this node's rank */
        drop_watch(w);
        return;
    }
    live_rank *r = &lj->ranks[w->rank];
    if (w->urgent) lj->waiting_ms = c->now();
    if (r->watch) drop_watch(r->watch);
    r->watch = w;
    r->watch_ms = c->now() - (w->age_ms > 0 ? w->age_ms : 0);
}

void hang_step(coord *c, live_job *lj, const Atoll__RankMetrics *m)
{
    int64_t now = c->now();
    if (m->rank == 0 && m->step_ms > 0) lj->step_ms[lj->nstep++ % LIVE_STEP_TIMES] = m->step_ms;
    if (m->iteration <= lj->newest) return;
    lj->newest = m->iteration;
    /* The rank's clock says when the step ended; a report waits up to a heartbeat in its workerd. */
    int64_t at = m->time_ms > 0 ? m->time_ms : now, oldest = now - 2 * (int64_t)c->o.heartbeat_ms;
    lj->progress_ms = at > now ? now : at < oldest ? oldest : at;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double hang_step_ms(const live_job *lj)
{
    int n = lj->nstep < LIVE_STEP_TIMES ? lj->nstep : LIVE_STEP_TIMES;
    if (!n) return 0;
    double v[LIVE_STEP_TIMES];
    memcpy(v, lj->step_ms, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return v[n / 2];
}

int64_t hang_bound_ms(const coord *c, const live_job *lj)
{
    if (!lj->nstep) return 0;
    double b = c->o.hang_factor * hang_step_ms(lj);
    return b > c->o.hang_floor_ms ? (int64_t)b : c->o.hang_floor_ms;
}

/* Silent: stopped (its workerd saw it in /proc), or no watchdog report for
 * `frozen_ms` as of its node's latest heartbeat (what workerd said then: the
 * report's age). Between heartbeats nothing newer is known, so nothing is
 * extrapolated. `now` is unused: kept for the callers' shape. */
static int silent(const live_rank *r, int64_t now, int64_t frozen_ms)
{
    (void)now;
    return !r->watch || r->watch->stopped || r->watch->age_ms > frozen_ms;
}

/* Is rank t inside the same collective as op o (group, op, count)? */
static int entered(const live_rank *t, const Atoll__WatchOp *o)
{
    if (!t->watch) return 0;
    for (size_t k = 0; k < t->watch->n_ops; k++) {
        const Atoll__WatchOp *x = t->watch->ops[k];
        if (!strcmp(x->group, o->group) && !strcmp(x->op, o->op) && x->seq == o->seq) return 1;
    }
    return 0;
}

/* What a rank was last seen doing, for the message. */
static void doing(const live_rank *r, char *out, size_t len)
{
    if (!r->watch) {
        snprintf(out, len, "no watchdog report");
        return;
    }
    const Atoll__RankWatch *w = r->watch;
    if (!w->n_ops)
        snprintf(out, len, "%s at iteration %lld", !strcmp(w->phase, "step") ? "computing" : w->phase,
                 (long long)w->iteration);
    else
        snprintf(out, len, "in %s %s #%llu at iteration %lld", w->ops[0]->group, w->ops[0]->op,
                 (unsigned long long)w->ops[0]->seq, (long long)w->iteration);
}

void hang_describe(const live_rank *r, char *out, size_t len)
{
    doing(r, out, len);
    if (r->watch && r->watch->stopped) snprintf(out + strlen(out), len - strlen(out), " (process stopped)");
}

int hang_culprits(const live_job *lj, int64_t now, int64_t frozen_ms, int *culprits, int max, char *why,
                  size_t len)
{
    int n = lj->nranks;
    why[0] = 0;
    if (n <= 0 || !lj->ranks) return 0;
    char *wanted = calloc((size_t)n, 1);
    const Atoll__WatchOp **wait_in = calloc((size_t)n, sizeof *wait_in); /* the op a wanted rank never entered */
    if (!wanted || !wait_in) abort();
    /* Who waits where: the op with the most waiters, for the message. */
    const Atoll__WatchOp *top = NULL;
    int top_n = 0, nwait = 0;
    int64_t longest = 0;
    for (int i = 0; i < n; i++) {
        const live_rank *r = &lj->ranks[i];
        if (silent(r, now, frozen_ms) || !r->watch->n_ops) continue;
        nwait++;
        for (size_t k = 0; k < r->watch->n_ops; k++) {
            const Atoll__WatchOp *o = r->watch->ops[k];
            if (o->waited_ms > longest) longest = o->waited_ms;
            int same = 0;
            for (int j = 0; j < n; j++)
                if (!silent(&lj->ranks[j], now, frozen_ms) && entered(&lj->ranks[j], o)) same++;
            if (same > top_n) top = o, top_n = same;
            /* the world group's members are every rank */
            int nm = o->n_members ? (int)o->n_members : n;
            for (int m = 0; m < nm; m++) {
                int t = o->n_members ? o->members[m] : m;
                if (t < 0 || t >= n || t == i) continue;
                /* send/recv has no count: a peer inside any op is waiting too, so not the cause */
                int in = !strcmp(o->op, "send/recv") ? lj->ranks[t].watch && lj->ranks[t].watch->n_ops &&
                                                           !silent(&lj->ranks[t], now, frozen_ms)
                                                     : entered(&lj->ranks[t], o);
                if (!in && !wanted[t]) wanted[t] = 1, wait_in[t] = o;
            }
        }
    }
    int nc = 0;
    for (int t = 0; t < n && nc < max; t++) /* waited for, and not itself waiting (or silent) */
        if (wanted[t] && (silent(&lj->ranks[t], now, frozen_ms) || !lj->ranks[t].watch->n_ops)) culprits[nc++] = t;
    for (int t = 0; t < n && nc == 0; t++) /* all wait inside one op: the silent one holds it */
        if (silent(&lj->ranks[t], now, frozen_ms)) culprits[nc++] = t;
    size_t at = 0;
    if (top)
        at += (size_t)snprintf(why + at, len - at, "%d rank%s wait%s (%d in %s %s #%llu, up to %.1f s)", nwait,
                               nwait == 1 ? "" : "s", nwait == 1 ? "s" : "", top_n, top->group, top->op,
                               (unsigned long long)top->seq, longest / 1000.0);
    else
        at += (size_t)snprintf(why + at, len - at, "no rank is blocked in communication");
    for (int k = 0; k < nc && at < len; k++) {
        const live_rank *r = &lj->ranks[culprits[k]];
        char what[160];
        doing(r, what, sizeof what);
        const Atoll__WatchOp *o = wait_in[culprits[k]];
        char never[96] = "";
        if (o && o->seq && !entered(r, o))
            snprintf(never, sizeof never, " never entered %s %s #%llu:", o->group, o->op, (unsigned long long)o->seq);
        else if (o)
            snprintf(never, sizeof never, " the others wait for it in %s %s:", o->group, o->op);
        at += (size_t)snprintf(why + at, len - at, "; culprit rank %d on node %s (pid %d):%s", culprits[k], r->node,
                               r->watch ? r->watch->pid : 0, never);
        if (at >= len) break;
        if (r->watch && r->watch->stopped)
            at += (size_t)snprintf(why + at, len - at, " process stopped (SIGSTOP),");
        if (silent(r, now, frozen_ms) && r->watch)
            at += (size_t)snprintf(why + at, len - at, " watchdog silent %.1f s,", r->watch->age_ms / 1000.0);
        if (at < len) at += (size_t)snprintf(why + at, len - at, " last seen %s", what);
    }
    if (!nc && at < len) snprintf(why + at, len - at, "; no culprit found (every rank is computing or waiting)");
    free(wanted);
    free(wait_in);
    return nc;
}

/* A watchdog silent this long (its node heard from) means a frozen rank. As long as
 * the bound: a busy machine may leave a rank unscheduled for a while. */
static int64_t frozen_after(int64_t bound)
{
    return bound < FROZEN_MIN_MS ? FROZEN_MIN_MS : bound;
}

/* Saving or evaluating ranks make no steps: not a hang while every rank still reports. */
static int excused(const live_job *lj, int64_t now, int64_t stall, int64_t bound, int64_t frozen)
{
    if (stall > 10 * bound) return 0;
    int busy = 0;
    for (int i = 0; i < lj->nranks; i++) {
        const live_rank *r = &lj->ranks[i];
        if (silent(r, now, frozen)) return 0;
        busy |= !strcmp(r->watch->phase, "save") || !strcmp(r->watch->phase, "eval");
    }
    return busy;
}

/* Until when the job's state is known: its nodes' oldest latest heartbeat (each
 * brings every step its ranks finished until then). 0 when a node is not alive:
 * its loss is judged as such, not as a hang. */
static int64_t known_until(coord *c, const live_job *lj)
{
    int64_t t = INT64_MAX;
    for (int i = 0; i < lj->nranks; i++) {
        reg_node *n = registry_find(&c->reg, lj->ranks[i].node);
        if (!n || n->live != NODE_ALIVE) return 0;
        if (n->last_seen_ms < t) t = n->last_seen_ms;
    }
    return t == INT64_MAX ? 0 : t;
}

/* Evidence from the watchdogs that the job is stuck, not just slow: a rank has
 * been waiting in one op longer than the bound, is stopped, or went silent, as
 * of its node's latest heartbeat. */
static int stuck(const live_job *lj, int64_t bound, int64_t frozen)
{
    for (int i = 0; i < lj->nranks; i++) {
        const live_rank *r = &lj->ranks[i];
        if (silent(r, 0, frozen) || r->watch->stopped) return 1;
        for (size_t k = 0; k < r->watch->n_ops; k++)
            if (r->watch->ops[k]->waited_ms + r->watch->age_ms > bound) return 1;
    }
    return 0;
}

/* The job's verdict now: 1 with f filled when it is hung. The stall is measured up
 * to what the nodes' heartbeats cover (step reports wait in workerd until one), so a
 * slow relay is not a hang; with the watchdogs' evidence (stuck) a stall past the
 * bound is one, without it only past three bounds. */
static int judge(coord *c, live_job *lj, jobs_fault *f)
{
    if (lj->state != ATOLL__JOB_STATE__JOB_RUNNING || lj->hung || !lj->nstep || jobs_live_ranks(c, lj)) return 0;
    int64_t now = c->now(), bound = hang_bound_ms(c, lj), frozen = frozen_after(bound);
    int64_t known = known_until(c, lj), stall = known - lj->progress_ms;
    if (!known || stall <= bound || excused(lj, now, stall, bound, frozen)) return 0;
    if (stall <= 3 * bound && !stuck(lj, bound, frozen)) return 0;
    int culprits[4];
    char why[400];
    int nc = hang_culprits(lj, now, frozen, culprits, 4, why, sizeof why);
    /* No culprit yet: every rank looks busy as of the latest heartbeats (a rank stopped
     * inside a collective everyone entered looks like a waiter until its node's next
     * heartbeat says it is stopped, or its watchdog's silence passes `frozen`). Wait
     * for that evidence up to three bounds, then restart without a name. */
    if (!nc && stall <= 3 * bound) return 0;
    memset(f, 0, sizeof *f);
    f->cause = "hang";
    f->rank = nc ? culprits[0] : -1;
    f->fault_ms = lj->progress_ms;
    snprintf(f->node, sizeof f->node, "%s", nc ? lj->ranks[culprits[0]].node : "");
    snprintf(f->detail, sizeof f->detail, "no step for %.1f s after iteration %lld (bound %.1f s = max(floor %.1f s, "
             "%g x step %.2f s)); %s", stall / 1000.0, (long long)lj->newest, bound / 1000.0,
             c->o.hang_floor_ms / 1000.0, c->o.hang_factor, hang_step_ms(lj) / 1000.0, why);
    lj->hung = 1;
    return 1;
}

static void collect_hung(coord *c, live_job *lj, void *ctx)
{
    jobs_fault f;
    if (judge(c, lj, &f)) store_idlist_push(ctx, lj->id);
    else return;
    lj->hung = 0; /* judged again below, outside the walk */
}

static void judge_all(coord *c)
{
    store_idlist due = { 0 };
    jobs_live_each(c, collect_hung, &due);
    for (size_t i = 0; i < due.n; i++) {
        live_job *lj = jobs_live(c, due.ids[i]);
        jobs_fault f;
        if (lj && judge(c, lj, &f)) jobs_fault_raise(c, lj->id, &f);
    }
    free(due.ids);
}

/* Asks the job's nodes for a heartbeat now (see the top) when a rank reported a
 * long wait since the last step, the bound has passed, and a node was not heard
 * from since; at most once per half bound, each node once per tick. */
static void ask(coord *c, live_job *lj, void *ctx)
{
    (void)ctx;
    if (lj->state != ATOLL__JOB_STATE__JOB_RUNNING || lj->hung || !lj->nstep || !lj->ranks ||
        lj->waiting_ms < lj->progress_ms)
        return;
    int64_t now = c->now(), bound = hang_bound_ms(c, lj), due = lj->progress_ms + bound;
    if (now <= due || (lj->asked_ms && now - lj->asked_ms < bound / 2)) return;
    int asked = 0;
    for (int i = 0; i < lj->nranks; i++) {
        reg_node *n = registry_find(&c->reg, lj->ranks[i].node);
        if (!n || !n->peer || n->live != NODE_ALIVE || n->last_seen_ms > due || n->asked_ms == now) continue;
        Atoll__ReportNow m = ATOLL__REPORT_NOW__INIT;
        m.job = lj->id;
        c->send(c, n->peer, ATOLL__MSG_TYPE__MSG_REPORT_NOW, &m.base);
        n->asked_ms = now;
        n->asked_job = lj->id;
        asked++;
    }
    if (asked) {
        lj->asked_ms = now;
        lj->asked_pending = asked; /* answers to an earlier round count too: a verdict too early only waits */
        log_debug("job %llu: no step for %lld ms (bound %lld ms) and a rank waits: asked %d node%s to report now",
                  (unsigned long long)lj->id, (long long)(now - lj->progress_ms), (long long)bound, asked,
                  asked == 1 ? "" : "s");
    }
}

void hang_heard(coord *c, reg_node *n)
{
    uint64_t id = n->asked_job;
    if (!id) return;
    n->asked_job = 0;
    live_job *lj = jobs_live(c, id);
    if (!lj || --lj->asked_pending > 0) return; /* judged once its last node answered (or on a tick) */
    jobs_fault f;
    if (judge(c, lj, &f)) jobs_fault_raise(c, id, &f);
}

void hang_tick(coord *c)
{
    /* After the loop was held up (a slow disk, say), heartbeats wait in the sockets:
     * judge on the next tick, once they are read. */
    int64_t now = c->now(), last = c->hang_tick_ms;
    c->hang_tick_ms = now;
    if (last && now - last > 500) return;
    judge_all(c);
    jobs_live_each(c, ask, NULL);
}
