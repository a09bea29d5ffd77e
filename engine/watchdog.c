#include "errf.h"
#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atoll.pb-c.h"

#define MAX_MEMBERS 256
#define TICK_MS 50

struct eng_watchdog {
    comm_world *w;
    metrics_emit *e;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    _Atomic(const char *) phase;
    atomic_llong iteration;
    atomic_llong step_us;
    double *urgent_start; /* per comm: start of the wait last reported urgent */
};

/* One report; returns 1 when it was urgent. `force` writes it even when nothing is urgent. */
static int report(eng_watchdog *wd, int force)
{
    int n = comm_world_ncomms(wd->w);
    if (n > 64) n = 64;
    Atoll__WatchOp ops[64], *opp[64];
    int32_t members[64][MAX_MEMBERS];
    int nops = 0, urgent = 0;
    double now = atoll_mono_s(), step_s = (double)atomic_load(&wd->step_us) * 1e-6;
    double urgent_after = step_s > WATCHDOG_URGENT_MS / 1e3 ? step_s : WATCHDOG_URGENT_MS / 1e3;
    for (int i = 0; i < n; i++) {
        comm *c = comm_world_nth(wd->w, i);
        comm_watch_view v;
        if (!c || !comm_watch_get(c, &v)) continue;
        Atoll__WatchOp *o = &ops[nops];
        atoll__watch_op__init(o);
        o->group = (char *)comm_name(c);
        o->op = (char *)v.op;
        o->seq = v.seq;
        o->waited_ms = (int64_t)(v.waited_s * 1e3);
        size_t k = 0;
        if (v.npeers) {
            for (int p = 0; p < v.npeers; p++) members[nops][k++] = v.peers[p];
        } else if (i > 0) { /* the world group is named by its empty member list */
            for (int p = 0; p < comm_size(c) && k < MAX_MEMBERS; p++) members[nops][k++] = comm_world_rank_of(c, p);
        }
        o->members = members[nops];
        o->n_members = k;
        double start = now - v.waited_s;
        if (v.waited_s > urgent_after && (start - wd->urgent_start[i] > 1e-3 || wd->urgent_start[i] - start > 1e-3)) {
            wd->urgent_start[i] = start; /* once per wait */
            urgent = 1;
        }
        opp[nops++] = o;
    }
    if (!force && !urgent) return 0;
    Atoll__RankWatch m = ATOLL__RANK_WATCH__INIT;
    m.rank = comm_world_rank(wd->w);
    m.iteration = atomic_load(&wd->iteration);
    m.phase = (char *)atomic_load(&wd->phase);
    m.step_ms = step_s * 1e3;
    m.urgent = urgent;
    m.ops = opp;
    m.n_ops = (size_t)nops;
    metrics_emit_frame(wd->e, ATOLL__MSG_TYPE__MSG_RANK_WATCH, &m.base);
    return urgent;
}

static void *watch_main(void *arg)
{
    eng_watchdog *wd = arg;
    double next = 0;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        pthread_mutex_unlock(&wd->mu);
        double now = atoll_mono_s();
        int due = now >= next;
        report(wd, due);
        if (due) next = now + WATCHDOG_PERIOD_MS / 1e3;
        pthread_mutex_lock(&wd->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        if (!wd->stop) pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

eng_watchdog *watchdog_start(comm_world *w, metrics_emit *e)
{
    if (!w || !e || e->fd < 0) return NULL;
    eng_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd || !(wd->urgent_start = calloc(64, sizeof *wd->urgent_start))) {
        free(wd);
        return NULL;
    }
    wd->w = w;
    wd->e = e;
    atomic_store(&wd->phase, "start");
    pthread_mutex_init(&wd->mu, NULL);
    pthread_cond_init(&wd->cv, NULL);
    if (pthread_create(&wd->thread, NULL, watch_main, wd)) {
        pthread_mutex_destroy(&wd->mu);
        pthread_cond_destroy(&wd->cv);
        free(wd->urgent_start);
        free(wd);
        return NULL;
    }
    return wd;
}

void watchdog_phase(eng_watchdog *wd, const char *phase, long long iteration)
{
    if (!wd) return;
    atomic_store(&wd->phase, phase);
    atomic_store(&wd->iteration, iteration);
}

void watchdog_step_time(eng_watchdog *wd, double step_s)
{
    if (wd) atomic_store(&wd->step_us, (long long)(step_s * 1e6));
}

void watchdog_stop(eng_watchdog *wd)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    report(wd, 1);
    pthread_mutex_destroy(&wd->mu);
    pthread_cond_destroy(&wd->cv);
    free(wd->urgent_start);
    free(wd);
}
