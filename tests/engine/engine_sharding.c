/* The sharded shapes compute the same function as the single-rank model:
 *  - init: every TP shard holds exactly its slice of the full tensor;
 *  - TP = 2 (two ranks in threads, all-reduce through eng_tp_comm): same loss,
 *    and each rank's gradients are its slices of the single-rank gradients;
 *  - PP = 2 (two stages, activations and gradients handed over by hand): same
 *    loss and gradients; the last stage's tied wte copy plus the first stage's
 *    wte gradient is the single-rank wte gradient;
 *  - two chunks on one rank (the interleaved layout): same gradients;
 *  - init drawn on several threads: the same bits as on one. */
#include "check.h"
#include "model.h"
#include "train.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atoll_config cfg(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 2; c.hidden_size = 32; c.num_attention_heads = 4; c.seq_length = 8;
    c.vocab_size = 64; c.micro_batch_size = 2;
    return c;
}

static int32_t TOK[16], TGT[16];

static eng_model *make(const atoll_config *c, eng_layout lay)
{
    char err[256];
    eng_model *m = eng_model_create(c, &lay, k_cpu(), err, sizeof err);
    CHECK(m != NULL, "model: %s", err);
    if (m) eng_init_params(m, 99);
    return m;
}

/* Element (i, j) of the local slice of p, as an index into the full tensor. */
static size_t full_index(const eng_param *p, int64_t i, int64_t j)
{
    if (p->shard_dim == 0) i += p->shard_off;
    if (p->shard_dim == 1) j += p->shard_off;
    return (size_t)(i * p->full[1] + j);
}

/* max |local - slice of full| / max |full| over every tensor of `shard`. */
static double slice_err(const eng_model *shard, const float *sbase, const eng_model *single,
                        const float *fbase, const char **worst)
{
    double e = 0;
    for (int t = 0; t < shard->nparams; t++) {
        const eng_param *p = &shard->table[t], *f = eng_find_param(single, p->name);
        if (!f) { *worst = p->name; return INFINITY; }
        double scale = 1e-30, d = 0;
        for (size_t k = 0; k < f->numel; k++) scale = fmax(scale, fabs(fbase[f->offset + k]));
        for (int64_t i = 0; i < p->local[0]; i++)
            for (int64_t j = 0; j < p->local[1]; j++)
                d = fmax(d, fabs(sbase[p->offset + i * p->local[1] + j] - fbase[f->offset + full_index(p, i, j)]));
        if (d / scale > e) { e = d / scale; *worst = p->name; }
    }
    return e;
}

/* ---- a two-rank all-reduce for threads ---- */
typedef struct tp_group { pthread_barrier_t bar; float *bufs[2]; } tp_group;
typedef struct tp_rank_ctx { tp_group *g; int rank; } tp_rank_ctx;

static int reduce(void *ctx, float *buf, size_t n, int is_max)
{
    tp_rank_ctx *r = ctx;
    r->g->bufs[r->rank] = buf;
    pthread_barrier_wait(&r->g->bar);
    float *tmp = malloc(n * sizeof(float));
    const float *a = r->g->bufs[0], *b = r->g->bufs[1];
    for (size_t i = 0; i < n; i++) tmp[i] = is_max ? fmaxf(a[i], b[i]) : a[i] + b[i];
    pthread_barrier_wait(&r->g->bar);
    memcpy(buf, tmp, n * sizeof(float));
    free(tmp);
    return 0;
}
static int reduce_sum(void *ctx, float *buf, size_t n) { return reduce(ctx, buf, n, 0); }
static int reduce_max(void *ctx, float *buf, size_t n) { return reduce(ctx, buf, n, 1); }

typedef struct tp_job { eng_model *m; double loss; int rc; } tp_job;
static void *tp_run(void *p)
{
    tp_job *j = p;
    eng_acts *a = eng_acts_create(j->m, 0);
    eng_zero_grads(j->m);
    j->rc = eng_forward(j->m, a, TOK, NULL, TGT, 0.0f, &j->loss) || eng_backward(j->m, a, NULL, 1.0f / 16);
    eng_acts_free(j->m, a);
    return NULL;
}

static eng_model *single_run(const atoll_config *c, double *loss)
{
    eng_model *m = make(c, eng_layout_single(c));
    eng_acts *a = eng_acts_create(m, 0);
    CHECK(eng_forward(m, a, TOK, NULL, TGT, 0.0f, loss) == 0 && eng_backward(m, a, NULL, 1.0f / 16) == 0, "single run");
    eng_acts_free(m, a);
    return m;
}

/* The padding between tensors of params and grads is zero after a step (the
 * gradient norm sums runs of tensors across it). */
static int padding_zero(const eng_model *m)
{
    size_t at = 0;
    for (int t = 0; t < m->nparams; t++) {
        for (; at < m->table[t].offset; at++)
            if (m->grads[at] != 0.0f || m->params[at] != 0.0f) return 0;
        at = m->table[t].offset + m->table[t].numel;
    }
    for (; at < m->num_floats; at++)
        if (m->grads[at] != 0.0f || m->params[at] != 0.0f) return 0;
    return 1;
}

static void test_tp(int untie)
{
    atoll_config c = cfg();
    c.untie_embeddings_and_output_weights = untie;
    double loss1;
    eng_model *one = single_run(&c, &loss1);
    tp_group g;
    pthread_barrier_init(&g.bar, NULL, 2);
    tp_rank_ctx ctx[2] = { { &g, 0 }, { &g, 1 } };
    tp_job jobs[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        eng_layout lay = eng_layout_single(&c);
        lay.tp_rank = r;
        lay.tp_size = 2;
        jobs[r].m = make(&c, lay);
        jobs[r].m->tp = (eng_tp_comm){ &ctx[r], reduce_sum, reduce_max, NULL, NULL };
        const char *w = "";
        double e = slice_err(jobs[r].m, jobs[r].m->params, one, one->params, &w);
        CHECK(e == 0.0, "tp rank %d init differs from the full tensor's slice (%s)", r, w);
        CHECK(jobs[r].m->V == 32 && jobs[r].m->NH == 2 && jobs[r].m->F == 64, "tp shapes");
    }
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, tp_run, &jobs[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        CHECK(jobs[r].rc == 0, "tp rank %d failed", r);
        CHECK_CLOSE(jobs[r].loss, loss1, 1e-5);
        const char *w = "";
        double e = slice_err(jobs[r].m, jobs[r].m->grads, one, one->grads, &w);
        CHECK(e < 1e-5, "tp=2 rank %d (untie %d): gradient of %s off by %g", r, untie, w, e);
        CHECK(padding_zero(jobs[r].m), "tp=2 rank %d: the padding between tensors stayed zero", r);
        eng_model_free(jobs[r].m);
    }
    pthread_barrier_destroy(&g.bar);
    eng_model_free(one);
}

static void test_pp(void)
{
    atoll_config c = cfg();
    double loss1, loss2;
    eng_model *one = single_run(&c, &loss1);
    eng_layout l0 = eng_layout_single(&c), l1 = l0;
    l0.layer_end[0] = 1;
    l1.layer_begin[0] = 1;
    eng_model *s0 = make(&c, l0), *s1 = make(&c, l1);
    CHECK(s1->chunks[0].last && !s1->chunks[0].first && eng_find_param(s1, "wte.weight")->tied_copy,
          "last stage holds a tied copy of wte");
    eng_acts *a0 = eng_acts_create(s0, 0), *a1 = eng_acts_create(s1, 0);
    CHECK(eng_forward(s0, a0, TOK, NULL, NULL, 0.0f, NULL) == 0, "stage 0 forward");
    CHECK(eng_forward(s1, a1, NULL, eng_output(s0, a0), TGT, 0.0f, &loss2) == 0, "stage 1 forward");
    CHECK(loss1 == loss2, "pp loss %.9g vs %.9g", loss2, loss1);
    CHECK(eng_backward(s1, a1, NULL, 1.0f / 16) == 0 && eng_backward(s0, a0, a1->dinput, 0) == 0, "pp backward");
    /* the embedding-group all-reduce of the tied wte gradient */
    const eng_param *w0 = eng_find_param(s0, "wte.weight"), *w1 = eng_find_param(s1, "wte.weight");
    for (size_t i = 0; i < w0->numel; i++) {
        s0->grads[w0->offset + i] += s1->grads[w1->offset + i];
        s1->grads[w1->offset + i] = s0->grads[w0->offset + i];
    }
    const char *w = "";
    CHECK(slice_err(s0, s0->grads, one, one->grads, &w) < 1e-6, "pp stage 0 gradient of %s", w);
    CHECK(slice_err(s1, s1->grads, one, one->grads, &w) < 1e-6, "pp stage 1 gradient of %s", w);
    eng_acts_free(s0, a0);
    eng_acts_free(s1, a1);
    eng_model_free(s0);
    eng_model_free(s1);
    eng_model_free(one);
}

static void test_two_chunks(void)
{
    atoll_config c = cfg();
    double loss1, loss2 = 0; /* set only when both chunk passes run */
    eng_model *one = single_run(&c, &loss1);
    eng_layout lay = eng_layout_single(&c);
    lay.nchunks = 2;
    lay.layer_end[0] = 1;
    lay.layer_begin[1] = 1;
    lay.layer_end[1] = 2;
    eng_model *m = make(&c, lay);
    CHECK(m->nparams == one->nparams, "two chunks hold every tensor once (%d vs %d)", m->nparams, one->nparams);
    eng_acts *a0 = eng_acts_create(m, 0), *a1 = eng_acts_create(m, 1);
    CHECK(eng_forward(m, a0, TOK, NULL, NULL, 0.0f, NULL) == 0 &&
          eng_forward(m, a1, NULL, eng_output(m, a0), TGT, 0.0f, &loss2) == 0 &&
          eng_backward(m, a1, NULL, 1.0f / 16) == 0 && eng_backward(m, a0, a1->dinput, 0) == 0, "chunk passes");
    CHECK(loss1 == loss2, "two-chunk loss");
    const char *w = "";
    CHECK(slice_err(m, m->grads, one, one->grads, &w) < 1e-6, "two-chunk gradient of %s", w);
    eng_acts_free(m, a0);
    eng_acts_free(m, a1);
    eng_model_free(m);
    eng_model_free(one);
}

static void test_bad_layouts(void)
{
    atoll_config c = cfg();
    char err[256] = "";
    eng_layout lay = eng_layout_single(&c);
    lay.tp_size = 3;
    CHECK(!eng_model_create(&c, &lay, k_cpu(), err, sizeof err) && strstr(err, "divisible"), "tp 3: %s", err);
    lay = eng_layout_single(&c);
    lay.layer_end[0] = 5;
    CHECK(!eng_model_create(&c, &lay, k_cpu(), err, sizeof err) && strstr(err, "outside"), "layers: %s", err);
}

/* The draws split over threads (init.c: the cores shared by LOCAL_WORLD_SIZE
 * ranks) give the bits one thread gives: a model whose wte (2048 x 64) is split
 * over this machine's cores, against the same model drawn by one thread. */
static void test_init_threads(void)
{
    atoll_config c = cfg();
    c.hidden_size = 64;
    c.vocab_size = 2048;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (cpus < 2) printf("note: one CPU here, so both draws below run on one thread\n");
    setenv("LOCAL_WORLD_SIZE", "1", 1); /* every core for this rank */
    eng_model *many = make(&c, eng_layout_single(&c));
    setenv("LOCAL_WORLD_SIZE", "1000000", 1); /* one thread */
    eng_model *one = make(&c, eng_layout_single(&c));
    unsetenv("LOCAL_WORLD_SIZE");
    CHECK(many && one && many->num_floats == one->num_floats &&
              !memcmp(many->params, one->params, many->num_floats * sizeof(float)),
          "init on %d threads differs from one thread's", cpus);
    eng_model_free(many);
    eng_model_free(one);
}

/* The CPU backend's BLAS threads: each rank takes its share of the cores
 * (LOCAL_WORLD_SIZE ranks on the node), not OpenBLAS's default of all of them,
 * unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise. */
static void test_blas_threads(void)
{
    char err[256];
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    char lws[32];
    snprintf(lws, sizeof lws, "%d", 2 * cpus); /* more ranks than cores */
    setenv("LOCAL_WORLD_SIZE", lws, 1);
    CHECK(eng_backend("cpu", err, sizeof err) && k_cpu_blas_threads(0) == 1,
          "%d ranks on %d cores: %d BLAS threads each, not 1", 2 * cpus, cpus, k_cpu_blas_threads(0));
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    eng_backend("cpu", err, sizeof err);
    int all = k_cpu_blas_threads(0);
    CHECK(all == eng_cpu_share() || (cpus > 1 && all > 1 && all < eng_cpu_share()), /* OpenBLAS's build caps it */
          "one rank on %d cores: %d BLAS threads", cpus, all);
    setenv("OMP_NUM_THREADS", "3", 1); /* the user's word: left as it is */
    setenv("LOCAL_WORLD_SIZE", lws, 1);
    eng_backend("cpu", err, sizeof err);
    CHECK(k_cpu_blas_threads(0) == all, "OMP_NUM_THREADS set, yet the share changed the threads to %d",
          k_cpu_blas_threads(0));
    unsetenv("OMP_NUM_THREADS");
    unsetenv("LOCAL_WORLD_SIZE");
}

int main(int argc, char **argv)
{
    (void)argc;
    for (int i = 0; i < 16; i++) {
        TOK[i] = (i * 37 + 5) % 64;
        TGT[i] = (i * 11 + 3) % 64;
    }
    test_tp(0);
    test_tp(1);
    test_pp();
    test_two_chunks();
    test_bad_layouts();
    test_init_threads();
    test_blas_threads();
    return check_summary(argv[0]);
}
