/* init: parameter initialisation that does not depend on the layout.
 *
 * Element e of tensor `name` (e = row-major index in the FULL logical shape) is
 * std * N(0,1) drawn from the counter-based RNG keyed by (seed, FNV-1a(name)),
 * counter e. A rank holding a slice computes only its elements, and gets the
 * same values the single-rank model has there. Constant tensors (LayerNorm 1/0,
 * biases 0) take init_value. The draws of a large tensor run on several threads
 * (init_threads), each over its own rows: the same values, sooner. */
#include "model.h"
#include "rng.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { INIT_MAX_THREADS = 32, INIT_MIN_SPLIT = 1 << 16 }; /* smaller tensors: one thread */

static int64_t logical_index(const eng_param *p, int64_t i, int64_t j)
{
    if (p->shard_dim == 0) i += p->shard_off;
    if (p->shard_dim == 1) j += p->shard_off;
    return i * p->full[1] + j;
}

/* Rows [i0, i1) of tensor p (its local layout) into host. */
typedef struct {
    const eng_param *p;
    uint64_t key;
    float *host;
    int64_t i0, i1;
} fill_part;

static void fill_rows(const fill_part *f)
{
    const eng_param *p = f->p;
    for (int64_t i = f->i0; i < f->i1; i++)
        for (int64_t j = 0; j < p->local[1]; j++) {
            size_t at = (size_t)(i * p->local[1] + j);
            f->host[at] = p->init_std == 0.0f
                              ? p->init_value
                              : (float)(p->init_std * rng_normal(f->key, (uint64_t)logical_index(p, i, j)));
        }
}

static void *fill_main(void *arg)
{
    fill_rows(arg);
    return NULL;
}

int eng_cpu_share(void)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    long ranks = lws && atoi(lws) > 0 ? atoi(lws) : 1, t = cpus / ranks;
    return t < 1 ? 1 : t > 1 << 16 ? 1 << 16 : (int)t;
}

/* Threads for the draws: the rank's share of the cores, at most 32. */
static int init_threads(void)
{
    int t = eng_cpu_share();
    return t > INIT_MAX_THREADS ? INIT_MAX_THREADS : t;
}

int eng_init_params(eng_model *m, uint64_t seed)
{
    size_t maxn = 0;
    for (int t = 0; t < m->nparams; t++)
        if (m->table[t].numel > maxn) maxn = m->table[t].numel;
    float *host = malloc(sizeof(float) * (maxn ? maxn : 1));
    if (!host) return -1;
    int nthreads = init_threads();
    for (int t = 0; t < m->nparams; t++) {
        const eng_param *p = &m->table[t];
        uint64_t key = rng_key(seed, eng_fnv1a(p->name, strlen(p->name), ENG_FNV_INIT));
        /* Each element's value depends on (seed, name, index) alone, so the rows
         * split over threads give the same bits as one thread. */
        int n = p->init_std == 0.0f || p->numel < INIT_MIN_SPLIT ? 1 : nthreads;
        if (n > p->local[0]) n = (int)p->local[0];
        if (n < 1) n = 1;
        fill_part part[INIT_MAX_THREADS];
        pthread_t tid[INIT_MAX_THREADS];
        int started[INIT_MAX_THREADS] = { 0 };
        for (int k = 0; k < n; k++) {
            part[k] = (fill_part){ p, key, host, p->local[0] * k / n, p->local[0] * (k + 1) / n };
            if (k > 0) started[k] = pthread_create(&tid[k], NULL, fill_main, &part[k]) == 0;
        }
        fill_rows(&part[0]);
        for (int k = 1; k < n; k++) {
            if (started[k]) pthread_join(tid[k], NULL);
            else fill_rows(&part[k]); /* no thread: this one does its rows */
        }
        m->k->to_device(m->params + p->offset, host, p->numel * sizeof(float));
    }
    free(host);
    return 0;
}
