#include "errf.h"
#include "ckpt_async.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { WRITING, DURABLE, COMMITTING, COMMITTED, FAILED };

struct ckpt_async {
    char dir[1024];
    const eng_model *m;
    ckpt_part part;          /* points into the snapshot below */
    float *snap;             /* params (num_floats, when part.params) then 3 optimizer ranges */
    int write_headers, alone;
    eng_train_state st;
    pthread_t thread;
    int joinable;
    atomic_int state;
    int rc;                  /* FAILED: the writer's or the commit's return (-1, CKPT_SUPERSEDED) */
    double t0, seconds;
    char err[512];
};

static void commit(ckpt_async *a)
{
    if ((a->rc = ckpt_commit(a->dir, &a->st, &a->m->cfg, a->err, sizeof a->err))) {
        atomic_store(&a->state, FAILED);
        return;
    }
    a->seconds = atoll_mono_s() - a->t0;
    atomic_store(&a->state, COMMITTED);
}

/* The writer takes what the training leaves: the lowest CPU priority and the
 * lowest best-effort I/O priority, for this thread only (Linux). */
static void yield_to_training(void)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    setpriority(PRIO_PROCESS, (id_t)tid, 19);
#ifdef SYS_ioprio_set
    syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, tid, (2 << 13) | 7 /* best effort, level 7 */);
#endif
}

static void *write_main(void *arg)
{
    ckpt_async *a = arg;
    yield_to_training();
    if ((a->rc = ckpt_write_part(a->dir, a->st.iteration, a->m, &a->part, a->write_headers, a->err,
                                 sizeof a->err))) {
        atomic_store(&a->state, FAILED);
        return NULL;
    }
    free(a->snap); /* on disk now: the memory goes back before the commit reads the files */
    a->snap = NULL;
    if (a->alone) commit(a);
    else atomic_store(&a->state, DURABLE);
    return NULL;
}

static void *commit_main(void *arg)
{
    yield_to_training();
    commit(arg);
    return NULL;
}

ckpt_async *ckpt_async_start(const char *dir, const eng_model *m, const ckpt_part *part, int write_headers,
                             const eng_train_state *st, int alone, char *err, size_t errlen)
{
    ckpt_async *a = calloc(1, sizeof *a);
    size_t np = part->params ? m->num_floats : 0, no = part->hi > part->lo ? part->hi - part->lo : 0;
    if (!a || !(a->snap = malloc(sizeof(float) * (np + 3 * no + 1)))) {
        snprintf(err, errlen, "--async-save: no host memory for a %.1f MiB snapshot",
                 (double)(np + 3 * no) * sizeof(float) / 1048576.0);
        free(a);
        return NULL;
    }
    a->t0 = atoll_mono_s();
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    a->m = m;
    a->write_headers = write_headers;
    a->alone = alone;
    a->st = *st;
    a->part = *part;
    /* the only part that stalls training: the copy out of the backend's memory */
    if (np) m->k->to_host(a->snap, m->params, np * sizeof(float));
    for (int s = 0; s < 3 && no; s++) {
        m->k->to_host(a->snap + np + (size_t)s * no, part->opt[s], no * sizeof(float));
        a->part.opt[s] = a->snap + np + (size_t)s * no;
    }
    a->part.params_src = np ? a->snap : NULL;
    a->part.host = 1;
    atomic_store(&a->state, WRITING);
    if (pthread_create(&a->thread, NULL, write_main, a)) {
        snprintf(err, errlen, "--async-save: cannot start the writer thread");
        free(a->snap);
        free(a);
        return NULL;
    }
    a->joinable = 1;
    return a;
}

int ckpt_async_durable(ckpt_async *a)
{
    int st = atomic_load(&a->state);
    return st == FAILED ? -1 : st != WRITING;
}

void ckpt_async_commit(ckpt_async *a)
{
    if (atomic_load(&a->state) != DURABLE) return;
    if (a->joinable) pthread_join(a->thread, NULL); /* the writer has finished */
    a->joinable = 0;
    atomic_store(&a->state, COMMITTING);
    if (pthread_create(&a->thread, NULL, commit_main, a)) {
        commit(a); /* no thread: commit here */
        return;
    }
    a->joinable = 1;
}

int ckpt_async_committed(ckpt_async *a) { return atomic_load(&a->state) == COMMITTED; }

int ckpt_async_wait(ckpt_async *a, char *err, size_t errlen)
{
    if (a->joinable) pthread_join(a->thread, NULL);
    a->joinable = 0;
    if (atomic_load(&a->state) == FAILED) {
        snprintf(err, errlen, "%s", a->err);
        return a->rc ? a->rc : -1;
    }
    return 0;
}

long long ckpt_async_iteration(const ckpt_async *a) { return a->st.iteration; }
double ckpt_async_seconds(const ckpt_async *a) { return a->seconds; }

void ckpt_async_free(ckpt_async *a)
{
    if (!a) return;
    char err[512];
    ckpt_async_wait(a, err, sizeof err);
    free(a->snap);
    free(a);
}
