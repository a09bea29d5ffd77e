#include "dist.h"
#include "errf.h"

#include <math.h>
#include <pthread.h>
#ifdef ATOLL_HAVE_CUDA_KERNELS
#include "cuda/k_cuda.h"
#include <cuda_runtime.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* DP all-reduce bucket: large enough to amortise a ring's per-message latency,
 * small enough that a bucket's buffers stay in cache on the host transport. */
#define DIST_BUCKET_FLOATS ((size_t)1 << 18)

const char *dist_error(const dist *d) { return d->world ? comm_error(d->world) : "no world"; }

static int env_world(void)
{
    const char *w = getenv("WORLD_SIZE");
    return w ? atoi(w) : 1;
}

#ifdef ATOLL_HAVE_NCCL
/* More local ranks than visible GPUs (LOCAL_WORLD_SIZE, torchrun's), or
 * ATOLL_COMM=host: the ranks stage through the host backend. */
static int gpus_shared(void)
{
    const char *force = getenv("ATOLL_COMM");
    if (force && !strcmp(force, "host")) return 1;
#ifdef ATOLL_HAVE_CUDA_KERNELS
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    int ndev = 0;
    if (lws && cudaGetDeviceCount(&ndev) == cudaSuccess && atoi(lws) > ndev) return 1;
#endif
    return 0;
}
#endif

int dist_init(dist *d, const atoll_config *c, const k_ops *k, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->k = k;
    d->tp = c->tensor_model_parallel_size;
    d->pp = c->pipeline_model_parallel_size;
    d->v = cfg_virtual_stages(c);
    d->mgroup = c->microbatch_group_size_per_virtual_pipeline_stage;
    int world = env_world();
    if (c->num_gpus > 0 && c->num_gpus != world && world > 1) {
        atoll_errf(err, errlen, "--num-gpus %d differs from the launched world of %d ranks", c->num_gpus, world);
        return -1;
    }
    if (cfg_validate_layout(c, world, 0, err, errlen)) return -1;
    /* One rank exchanges nothing: no NCCL communicator to set up. Ranks that
     * share a GPU (more local ranks than devices: every layout checked on one
     * GPU) cannot use NCCL; they stage device buffers through the host backend. */
    int cuda = !strcmp(k->name, "cuda") && world > 1;
    comm_backend_kind kind = COMM_BACKEND_HOST;
#ifdef ATOLL_HAVE_NCCL
    if (cuda && !gpus_shared()) kind = COMM_BACKEND_NCCL;
#endif
    if (cuda && kind == COMM_BACKEND_HOST) {
        comm_set_device_copy(k->to_host, k->to_device);
#ifdef ATOLL_HAVE_CUDA_KERNELS
        comm_set_stage_memory(k_cuda_host_alloc, k_cuda_host_free); /* page-locked: copies at full speed */
#endif
    }
    if (comm_world_init_env(&d->world, kind, cuda ? COMM_DEVICE_BUFFERS : 0, err, errlen)) return -1;
    d->rank = comm_world_rank(d->world);
    d->size = comm_world_size(d->world);
    if (groups_build(&d->groups, d->size, d->tp, d->pp, c->rank_order, err, errlen)) return -1;
    if (comm_groups_new(d->world, &d->groups, d->g)) {
        atoll_errf(err, errlen, "%s", comm_error(d->world));
        return -1;
    }
    d->dp = d->groups.dp;
    d->tp_rank = comm_rank(d->g[GROUP_TP]);
    d->pp_rank = comm_rank(d->g[GROUP_PP]);
    d->dp_rank = comm_rank(d->g[GROUP_DP]);
    d->nmicro = cfg_micro_batches(c, d->dp); /* cfg_validate_layout checked it is whole (and pp-divisible when interleaved) */
    return 0;
}

void dist_free(dist *d)
{
    free(d->acc);
    if (d->scratch) d->k->free(d->scratch);
    free(d->host_a);
    free(d->host_b);
    comm_world_free(d->world);
    groups_free(&d->groups);
    memset(d, 0, sizeof *d);
}

eng_layout dist_layout(const dist *d, const atoll_config *c)
{
    eng_layout l;
    memset(&l, 0, sizeof l);
    l.tp_rank = d->tp_rank;
    l.tp_size = d->tp;
    l.nchunks = d->v;
    for (int ch = 0; ch < d->v; ch++) /* virtual stage ch * pp + pp_rank */
        cfg_stage_layers(c, ch * d->pp + d->pp_rank, &l.layer_begin[ch], &l.layer_end[ch]);
    return l;
}

/* ---- tensor-parallel hooks ---- */

/* The TP hooks queue their collectives in order with the kernels (NCCL:
 * events; host backend: CPU buffers, or staging copies that wait for the
 * device), so none of them waits on the host itself. */
static int tp_sum(void *ctx, float *buf, size_t n)
{
    dist *d = ctx;
    return comm_allreduce(d->g[GROUP_TP], buf, n, COMM_SUM);
}

static int grow_scratch(dist *d, size_t n)
{
    if (n <= d->scratch_n) return 0;
    if (d->scratch) d->k->free(d->scratch);
    free(d->host_a);
    free(d->host_b);
    d->scratch = d->k->alloc(n * sizeof(float));
    d->host_a = malloc(n * sizeof(float));
    d->host_b = malloc(n * sizeof(float));
    d->scratch_n = d->scratch && d->host_a && d->host_b ? n : 0;
    return d->scratch_n ? 0 : -1;
}

/* The comm layer has SUM and AVG only: MAX is an all-gather and a local max
 * (it runs on B*T row maxima, so the gather is small). */
static int tp_max(void *ctx, float *buf, size_t n)
{
    dist *d = ctx;
    if (grow_scratch(d, n * (size_t)d->tp)) return comm_fail(d->world, "tp max: out of memory");
    if (comm_allgather(d->g[GROUP_TP], buf, d->scratch, n)) return -1;
    d->k->to_host(d->host_a, d->scratch, n * (size_t)d->tp * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float x = d->host_a[i];
        for (int r = 1; r < d->tp; r++) x = fmaxf(x, d->host_a[(size_t)r * n + i]);
        d->host_b[i] = x;
    }
    d->k->to_device(buf, d->host_b, n * sizeof(float));
    return 0;
}

static int tp_gather(void *ctx, const float *in, float *out, size_t n)
{
    dist *d = ctx;
    return comm_allgather(d->g[GROUP_TP], in, out, n);
}

static int tp_scatter(void *ctx, const float *in, float *out, size_t n)
{
    dist *d = ctx;
    return comm_reduce_scatter(d->g[GROUP_TP], in, out, n, COMM_SUM);
}

eng_tp_comm dist_tp_comm(dist *d)
{
    if (d->tp == 1) return eng_tp_identity;
    return (eng_tp_comm){ d, tp_sum, tp_max, tp_gather, tp_scatter };
}

/* ---- --deterministic-dp ---- */

#define DET_BUCKET ((size_t)1 << 18) /* doubles gathered per DP all-gather */

int dist_deterministic_init(dist *d, const eng_model *m, char *err, size_t errlen)
{
    if (strcmp(m->k->name, "cpu")) {
        atoll_errf(err, errlen, "--deterministic-dp is implemented for --device cpu only");
        return -1;
    }
    if (!(d->acc = calloc(m->num_floats, sizeof *d->acc))) {
        atoll_errf(err, errlen, "--deterministic-dp: out of memory for %zu fp64 gradients", m->num_floats);
        return -1;
    }
    d->acc_n = m->num_floats;
    return 0;
}

void dist_fold_grads(dist *d, eng_model *m)
{
    if (!d->acc) return;
    for (size_t i = 0; i < d->acc_n; i++) {
        d->acc[i] += (double)m->grads[i];
        m->grads[i] = 0.0f;
    }
}

/* The DP sum of the accumulators, in DP-rank order, rounded once into m->grads;
 * the accumulators are zeroed for the next step. */
static int det_dp_sum(dist *d, eng_model *m)
{
    size_t n = d->acc_n;
    if (d->dp == 1) {
        for (size_t i = 0; i < n; i++) m->grads[i] = (float)(0.0 + d->acc[i]), d->acc[i] = 0.0;
        return 0;
    }
    double *all = malloc(DET_BUCKET * (size_t)d->dp * sizeof *all);
    if (!all) return comm_fail(d->world, "--deterministic-dp: out of memory gathering gradients");
    int rc = 0;
    for (size_t off = 0; off < n && !rc; off += DET_BUCKET) {
        size_t b = n - off < DET_BUCKET ? n - off : DET_BUCKET;
        /* doubles travel as pairs of floats: the all-gather only copies */
        if (comm_allgather(d->g[GROUP_DP], (const float *)(d->acc + off), (float *)all, 2 * b)) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < b; i++) {
            double sum = 0.0;
            for (int r = 0; r < d->dp; r++) sum += all[(size_t)r * b + i];
            m->grads[off + i] = (float)sum;
            d->acc[off + i] = 0.0;
        }
    }
    free(all);
    return rc;
}

int dist_world_sum_ordered(dist *d, double x, double *sum)
{
    if (d->size == 1) {
        *sum = 0.0 + x;
        return 0;
    }
    double *all = malloc((size_t)d->size * sizeof *all);
    if (!all) return comm_fail(d->world, "world sum: out of memory");
    int rc = comm_allgather(comm_world_comm(d->world), (const float *)&x, (float *)all, 2);
    if (!rc) {
        double t = 0.0;
        for (int r = 0; r < d->size; r++) t += all[r];
        *sum = t;
    }
    free(all);
    return rc;
}

int dist_world_sum(dist *d, float *buf, int n)
{
    if (d->size == 1) return 0;
    if (grow_scratch(d, (size_t)n)) return comm_fail(d->world, "world sum: out of memory");
    d->k->sync();
    d->k->to_device(d->scratch, buf, (size_t)n * sizeof(float));
    if (comm_allreduce(comm_world_comm(d->world), d->scratch, (size_t)n, COMM_SUM)) return -1;
    d->k->to_host(buf, d->scratch, (size_t)n * sizeof(float));
    return 0;
}

/* ---- data-parallel overlap ---- */

struct dist_overlap {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    comm *dp;
    float *grads;
    size_t shard;      /* ZeRO-1: floats per rank, else 0 */
    size_t *off, *n;   /* queue of ranges, cap entries */
    int cap, head, tail, closing, failed;
};

/* The DP sum of grads[off, off+n): all-reduced, or with ZeRO-1 (shard floats
 * per rank) reduced piece by piece to the rank whose shard holds the piece. */
static int dp_reduce_range(comm *dp, float *grads, size_t off, size_t n, size_t shard, int async)
{
    if (!shard)
        return async ? comm_allreduce_async(dp, grads + off, n, COMM_SUM)
                     : comm_allreduce(dp, grads + off, n, COMM_SUM);
    for (size_t a = off, end = off + n; a < end;) {
        int root = (int)(a / shard);
        size_t b = (size_t)(root + 1) * shard < end ? (size_t)(root + 1) * shard : end;
        if (async ? comm_reduce_async(dp, grads + a, b - a, COMM_SUM, root)
                  : comm_reduce(dp, grads + a, b - a, COMM_SUM, root))
            return -1;
        a = b;
    }
    return 0;
}

static void *overlap_main(void *arg)
{
    struct dist_overlap *o = arg;
    for (;;) {
        pthread_mutex_lock(&o->mu);
        while (o->head == o->tail && !o->closing) pthread_cond_wait(&o->cv, &o->mu);
        if (o->head == o->tail) {
            pthread_mutex_unlock(&o->mu);
            return NULL;
        }
        size_t off = o->off[o->head], n = o->n[o->head];
        o->head++;
        int failed = o->failed;
        pthread_mutex_unlock(&o->mu);
        if (!failed && dp_reduce_range(o->dp, o->grads, off, n, o->shard, 0)) {
            pthread_mutex_lock(&o->mu);
            o->failed = 1;
            pthread_mutex_unlock(&o->mu);
        }
    }
}

static const eng_param *tied_wte(const eng_model *m);

int dist_overlap_begin(dist *d, eng_model *m, size_t zero_shard)
{
    d->overlapped = 0;
    d->ovl_async = 0;
    d->ovl_shard = zero_shard;
    d->ovl_skip_lo = d->ovl_skip_hi = 0;
    if (d->dp == 1 || d->acc) return 0;
    const eng_param *wte = tied_wte(m);
    comm *emb = d->g[GROUP_EMBEDDING];
    if (zero_shard && d->pp > 1 && wte && emb && comm_size(emb) > 1) {
        /* reduced to its owners only after the stages' copies are summed */
        d->ovl_skip_lo = wte->offset;
        d->ovl_skip_hi = wte->offset + wte->numel;
    }
    if (comm_world_backend(d->world) == COMM_BACKEND_NCCL) {
        /* NCCL: each layer's all-reduce is queued on the NCCL stream as its
         * gradients become final and runs beside the rest of backward */
        d->ovl_async = 1;
        d->ovl_grads = m->grads;
        d->ovl_failed = 0;
        return 1;
    }
    if (comm_world_backend(d->world) != COMM_BACKEND_HOST || strcmp(m->k->name, "cpu")) return 0;
    struct dist_overlap *o = calloc(1, sizeof *o);
    int cap = m->nparams + 1; /* at most one push per tensor */
    if (!o || !(o->off = calloc((size_t)cap, sizeof *o->off)) || !(o->n = calloc((size_t)cap, sizeof *o->n))) {
        if (o) free(o->off);
        free(o);
        return 0; /* no overlap: dist_sync_grads reduces afterwards */
    }
    o->cap = cap;
    o->dp = d->g[GROUP_DP];
    o->grads = m->grads;
    o->shard = zero_shard;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (pthread_create(&o->thread, NULL, overlap_main, o)) {
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
        free(o->off);
        free(o->n);
        free(o);
        return 0;
    }
    d->ovl = o;
    return 1;
}

void dist_overlap_push(dist *d, size_t off, size_t n)
{
    if (n && d->ovl_skip_hi > d->ovl_skip_lo && off < d->ovl_skip_hi && off + n > d->ovl_skip_lo) {
        /* the tied embedding: only the parts outside it */
        size_t lo = d->ovl_skip_lo, hi = d->ovl_skip_hi, end = off + n;
        if (off < lo) dist_overlap_push(d, off, lo - off);
        if (end > hi) dist_overlap_push(d, hi, end - hi);
        return;
    }
    if (d->ovl_async) {
        if (n && !d->ovl_failed && dp_reduce_range(d->g[GROUP_DP], d->ovl_grads, off, n, d->ovl_shard, 1))
            d->ovl_failed = 1;
        return;
    }
    struct dist_overlap *o = d->ovl;
    if (!o || !n) return;
    d->k->sync();
    pthread_mutex_lock(&o->mu);
    if (o->tail < o->cap) {
        o->off[o->tail] = off;
        o->n[o->tail] = n;
        o->tail++;
    } else {
        o->failed = 2; /* more ranges than tensors: a bookkeeping bug, not a hang */
    }
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

int dist_overlap_end(dist *d)
{
    if (d->ovl_async) {
        d->ovl_async = 0;
        int rc = d->ovl_failed ? -1 : comm_wait(d->g[GROUP_DP]);
        d->overlapped = rc == 0;
        return rc;
    }
    struct dist_overlap *o = d->ovl;
    if (!o) return 0;
    pthread_mutex_lock(&o->mu);
    o->closing = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    struct timespec t0, t1; /* waiting for the helper's all-reduces is communication, not compute */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_join(o->thread, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    comm_thread_waited((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    int failed = o->failed;
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->off);
    free(o->n);
    free(o);
    d->ovl = NULL;
    d->overlapped = !failed;
    if (failed == 2) return comm_fail(d->world, "dp overlap: more gradient ranges than tensors");
    return failed ? -1 : 0;
}

/* ---- gradients ---- */

/* Which tensors of the flat buffer carry the tied embedding (both copies). */
static const eng_param *tied_wte(const eng_model *m)
{
    if (m->cfg.untie_embeddings_and_output_weights) return NULL;
    return eng_find_param(m, "wte.weight");
}

static void take_shard(dist *d, const eng_model *m, const dist_optim *o, float *dst, const float *src);

int dist_sync_grads(dist *d, eng_model *m, dist_optim *o)
{
    /* --deterministic-dp: the DP sum first, in fp64 (the sums below commute with it) */
    if (d->acc && det_dp_sum(d, m)) return -1;
    /* Every comm call below is ordered after the kernels queued before it
     * (comm.h), the ZeRO copy into gbuf included. */
    /* Sequence parallel: each TP rank saw only its rows of the LayerNorms; the
     * heads' norms (--qk-layernorm) only its heads, with or without it. */
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (eng_param_tp_partial(m, p) &&
            comm_allreduce(d->g[GROUP_TP], m->grads + p->offset, p->numel, COMM_SUM))
            return -1;
    }
    /* The first stage's wte and the last stage's copy get the sum of both. */
    const eng_param *wte = tied_wte(m);
    comm *emb = d->g[GROUP_EMBEDDING];
    if (d->pp > 1 && wte && emb && comm_size(emb) > 1 &&
        comm_allreduce(emb, m->grads + wte->offset, wte->numel, COMM_SUM))
        return -1;
    if (d->dp == 1 || d->acc) return 0;
    comm *dp = d->g[GROUP_DP];
    if (d->overlapped) { /* (sums commute: DP first is the same) */
        if (!o->zero) return 0;
        /* ZeRO-1: every range reached the owners of its shard during backward
         * (TP peers own the same offsets, so the sums above agree there), but
         * the tied embedding, whose stages' copies are summed only now */
        if (d->ovl_skip_hi > d->ovl_skip_lo &&
            dp_reduce_range(dp, m->grads, d->ovl_skip_lo, d->ovl_skip_hi - d->ovl_skip_lo, o->shard, 0))
            return -1;
        take_shard(d, m, o, o->g, m->grads);
        return 0;
    }
    if (o->zero) {
        m->k->zero(o->gbuf, o->shard * (size_t)d->dp * sizeof(float));
        m->k->copy(o->gbuf, m->grads, m->num_floats * sizeof(float));
        return comm_reduce_scatter(dp, o->gbuf, o->g, o->shard, COMM_SUM);
    }
    /* Each token's loss is already weighted 1/(global tokens): a SUM, not AVG. */
    for (size_t off = 0; off < m->num_floats; off += DIST_BUCKET_FLOATS) {
        size_t n = m->num_floats - off < DIST_BUCKET_FLOATS ? m->num_floats - off : DIST_BUCKET_FLOATS;
        if (comm_allreduce(dp, m->grads + off, n, COMM_SUM)) return -1;
    }
    return 0;
}

/* The part of tensor p inside this rank's ZeRO shard, as [lo, hi) of the flat buffer. */
static int shard_range(const dist *d, const dist_optim *o, const eng_param *p, size_t *lo, size_t *hi)
{
    size_t s0 = o->shard * (size_t)d->dp_rank, s1 = s0 + o->shard;
    *lo = p->offset > s0 ? p->offset : s0;
    *hi = p->offset + p->numel < s1 ? p->offset + p->numel : s1;
    return *lo < *hi;
}

/* This rank's part of the sum of squares of a flat buffer laid out as the
 * parameters: `full` as it is, or with `o` (ZeRO) `shard`, this rank's slice. */
static double part_sumsq(dist *d, eng_model *m, const dist_optim *o, const float *full, const float *shard,
                         uint64_t *zeros)
{
    if (zeros) *zeros = 0;
    if (!o && d->dp_rank != 0) return 0.0; /* DP replicas hold the same sums */
    if (!o) return eng_sumsq_range(m, full, 0, SIZE_MAX, zeros);
    size_t s0 = o->shard * (size_t)d->dp_rank;
    return eng_sumsq_range(m, shard, s0, s0 + o->shard, zeros);
}

double dist_grad_sumsq(dist *d, eng_model *m, dist_optim *o, uint64_t *zeros)
{
    return part_sumsq(d, m, o->zero ? o : NULL, m->grads, o->g, zeros);
}

double dist_param_sumsq(dist *d, eng_model *m)
{
    return part_sumsq(d, m, NULL, m->params, NULL, NULL); /* every rank holds its parameters whole, ZeRO or not */
}

/* ---- optimizer ---- */

int dist_optim_init(dist_optim *o, dist *d, eng_model *m, int zero, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->zero = zero && d->dp > 1;
    if (!o->zero) {
        if (!(o->full = eng_optim_create(m))) goto oom;
        return 0;
    }
    const k_ops *k = m->k;
    o->shard = (m->num_floats + (size_t)d->dp - 1) / (size_t)d->dp;
    o->shard = (o->shard + 15) / 16 * 16;
    size_t S = o->shard;
    o->gbuf = k->alloc(S * (size_t)d->dp * sizeof(float));
    o->g = k->alloc(S * sizeof(float));
    o->master = k->alloc(S * sizeof(float));
    o->m = k->alloc(S * sizeof(float));
    o->v = k->alloc(S * sizeof(float));
    if (!o->gbuf || !o->g || !o->master || !o->m || !o->v) goto oom;
    k->zero(o->m, S * sizeof(float));
    k->zero(o->v, S * sizeof(float));
    size_t lo = S * (size_t)d->dp_rank, hi = lo + S < m->num_floats ? lo + S : m->num_floats;
    if (eng_adamw_segs_build(&o->segs, m, lo, lo < hi ? hi : lo)) goto oom;
    return 0;
oom:
    atoll_errf(err, errlen, "out of memory for the optimizer state");
    return -1;
}

void dist_optim_free(dist_optim *o, const k_ops *k)
{
    eng_optim_free(o->full);
    eng_adamw_segs_free(&o->segs);
    float *bufs[5] = { o->gbuf, o->g, o->master, o->m, o->v };
    for (int i = 0; i < 5; i++)
        if (bufs[i]) k->free(bufs[i]);
    memset(o, 0, sizeof *o);
}

/* Copies the shard's part of the flat buffer `src` into `dst` (shard-sized). */
static void take_shard(dist *d, const eng_model *m, const dist_optim *o, float *dst, const float *src)
{
    size_t s0 = o->shard * (size_t)d->dp_rank;
    m->k->zero(dst, o->shard * sizeof(float));
    if (s0 < m->num_floats) {
        size_t n = m->num_floats - s0 < o->shard ? m->num_floats - s0 : o->shard;
        m->k->copy(dst, src + s0, n * sizeof(float));
    }
}

void dist_optim_take_params(dist_optim *o, dist *d, eng_model *m)
{
    if (o->zero) take_shard(d, m, o, o->master, m->params);
}

int dist_optim_step(dist *d, eng_model *m, dist_optim *o, const eng_rates *r, float grad_scale, int t)
{
    if (!o->zero) {
        eng_optim_step(o->full, m, r, grad_scale, t);
        return 0;
    }
    const atoll_config *c = &m->cfg;
    size_t s0 = o->shard * (size_t)d->dp_rank;
    if (m->k->adamw_segments && o->segs.n <= K_ADAMW_MAX_SEGS) { /* the shard in one launch (a rate) */
        eng_adamw_segs_step(&o->segs, m->k, c, o->master, NULL, o->g, o->m, o->v, r, grad_scale, t);
    } else
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        size_t lo, hi;
        if (!shard_range(d, o, p, &lo, &hi)) continue;
        size_t at = lo - s0;
        m->k->adamw(o->master + at, o->g + at, o->m + at, o->v + at, hi - lo, (float)eng_param_lr(p, r),
                    (float)c->adam_beta1, (float)c->adam_beta2, (float)c->adam_eps, p->decay ? (float)r->wd : 0.0f,
                    grad_scale, t);
    }
    /* Every DP rank gets every updated parameter back. */
    m->k->sync();
    if (comm_allgather(d->g[GROUP_DP], o->master, o->gbuf, o->shard)) return -1;
    m->k->copy(m->params, o->gbuf, m->num_floats * sizeof(float));
    eng_params_updated(m);
    return 0;
}

eng_optim *dist_optim_full(dist *d, eng_model *m, dist_optim *o)
{
    if (!o->zero) return o->full;
    if (!o->full && !(o->full = eng_optim_create(m))) return NULL;
    m->k->sync();
    float *dst[2] = { o->full->m, o->full->v }, *src[2] = { o->m, o->v };
    for (int i = 0; i < 2; i++) {
        if (comm_allgather(d->g[GROUP_DP], src[i], o->gbuf, o->shard)) return NULL;
        m->k->copy(dst[i], o->gbuf, m->num_floats * sizeof(float));
    }
    return o->full;
}

void dist_optim_scatter_loaded(dist *d, eng_model *m, dist_optim *o)
{
    if (!o->zero) return;
    take_shard(d, m, o, o->m, o->full->m);
    take_shard(d, m, o, o->v, o->full->v);
    take_shard(d, m, o, o->master, m->params);
}
