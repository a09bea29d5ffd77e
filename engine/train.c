#include "train.h"
#include "checkpoint.h"
#include "gpu_specs.h"
#include "data.h"
#include "model.h"
#include "optimizer.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef ATOLL_HAVE_CUDA_KERNELS
#include "cuda/k_cuda.h"
#endif

static void errf(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

void eng_run_opts_defaults(eng_run_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->device, sizeof o->device, "cpu");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const k_ops *pick_backend(const char *device, char *err, size_t errlen)
{
    if (!strcmp(device, "cpu")) return k_cpu();
    if (!strcmp(device, "cuda")) {
#ifdef ATOLL_HAVE_CUDA_KERNELS
        const k_ops *k = k_cuda();
        if (k) return k;
        errf(err, errlen, "--device cuda: no usable CUDA device");
#else
        errf(err, errlen, "--device cuda: this atoll-train was not built with the CUDA kernels; use --device cpu");
#endif
        return NULL;
    }
    errf(err, errlen, "--device '%s': expected cpu or cuda", device);
    return NULL;
}

/* ---- test dumps (--dump-dir) ---- */

static int dump_file(const char *path, st_tensor *t, int n, const void **data, char *err, size_t errlen)
{
    st_file f;
    if (st_layout(&f, t, n, NULL)) { errf(err, errlen, "out of memory"); return -1; }
    int rc = st_create(&f, path, 1, err, errlen);
    for (int i = 0; i < n && !rc; i++) rc = st_write_all(&f, &f.t[i], data[i], err, errlen);
    if (st_close(&f) && !rc) { errf(err, errlen, "%s: fsync failed", path); rc = -1; }
    return rc;
}

/* Every parameter (prefix "") or gradient (prefix "grad."), plus extra tensors. */
static int dump_params(const char *path, const eng_model *m, const float *base, const char *prefix,
                       st_tensor *extra, const void **extra_data, int nextra, char *err, size_t errlen)
{
    int n = m->nparams + nextra;
    st_tensor *t = calloc((size_t)n, sizeof *t);
    const void **data = calloc((size_t)n, sizeof *data);
    float *host = malloc(m->num_floats * sizeof(float));
    int rc = -1;
    if (!t || !data || !host) { errf(err, errlen, "out of memory"); goto out; }
    m->k->to_host(host, base, m->num_floats * sizeof(float));
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        snprintf(t[i].name, sizeof t[i].name, "%s%s", prefix, p->name);
        t[i].dtype = ST_F32;
        t[i].ndim = p->ndim;
        t[i].shape[0] = p->local[0];
        t[i].shape[1] = p->local[1];
        data[i] = host + p->offset;
    }
    for (int i = 0; i < nextra; i++) {
        t[m->nparams + i] = extra[i];
        data[m->nparams + i] = extra_data[i];
    }
    rc = dump_file(path, t, n, data, err, errlen);
out:
    free(t);
    free(data);
    free(host);
    return rc;
}

/* ---- logging ---- */

typedef struct step_stats {
    long long it;
    double loss, lr, grad_norm, step_s, tokens_per_s, flops_per_s;
    double mfu; /* < 0: no known peak (CPU, or an unknown GPU) */
    long long consumed;
} step_stats;

/* Dense bf16 peak of the device the backend runs on; 0 when unknown, so no MFU
 * is printed against a made-up figure. */
static double device_peak(const k_ops *k)
{
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!strcmp(k->name, "cuda")) {
        const gpu_spec *g = gpu_spec_by_device_name(k_cuda_status());
        return g ? g->peak_bf16_flops : 0.0;
    }
#endif
    (void)k;
    return 0.0;
}

static void log_step(const atoll_config *c, const step_stats *s, FILE *metrics)
{
    char mfu[32] = "n/a", mfu_json[32] = "null";
    if (s->mfu >= 0) {
        snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * s->mfu);
        snprintf(mfu_json, sizeof mfu_json, "%.6g", s->mfu);
    }
    printf(" iteration %8lld/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "learning rate: %.6E | global batch size: %5d | lm loss: %.6E | grad norm: %.3f | "
           "tokens/s: %.1f | achieved FLOP/s: %.3E | MFU: %s |\n",
           s->it, c->train_iters, s->consumed, s->step_s * 1e3, s->lr, c->global_batch_size, s->loss,
           s->grad_norm, s->tokens_per_s, s->flops_per_s, mfu);
    fflush(stdout);
    if (metrics) {
        fprintf(metrics,
                "{\"iteration\":%lld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"tokens_per_s\":%.6g,"
                "\"step_ms\":%.6g,\"mfu\":%s,\"flops_per_s\":%.6g,\"bubble_measured\":0,"
                "\"bubble_theory\":0,\"consumed_samples\":%lld}\n",
                s->it, s->loss, s->lr, s->grad_norm, s->tokens_per_s, s->step_s * 1e3, mfu_json,
                s->flops_per_s, s->consumed);
        fflush(metrics);
    }
}

/* ---- the loop ---- */

typedef struct run {
    const atoll_config *c;
    const eng_run_opts *o;
    eng_model *m;
    eng_optim *opt;
    eng_acts *acts;
    eng_data data, valid;
    int have_data, have_valid;
    eng_train_state st;
    int32_t *tokens, *targets; /* [gbs, T] host */
    FILE *metrics;
} run;

static int check_config(const atoll_config *c, char *err, size_t errlen)
{
    if (cfg_validate_model(c, err, errlen)) return -1;
    if (c->tensor_model_parallel_size != 1 || c->pipeline_model_parallel_size != 1) {
        errf(err, errlen, "--tensor-model-parallel-size %d / --pipeline-model-parallel-size %d: this engine "
             "runs one rank; use 1 and 1", c->tensor_model_parallel_size, c->pipeline_model_parallel_size);
        return -1;
    }
    if (c->global_batch_size % c->micro_batch_size) {
        errf(err, errlen, "--global-batch-size %d is not divisible by --micro-batch-size %d",
             c->global_batch_size, c->micro_batch_size);
        return -1;
    }
    if (c->train_iters < 1) {
        errf(err, errlen, "--train-iters must be at least 1");
        return -1;
    }
    if (c->save_interval && !c->save[0]) {
        errf(err, errlen, "--save-interval %d needs --save DIR", c->save_interval);
        return -1;
    }
    return 0;
}

static int load_batch(run *r, char *err, size_t errlen)
{
    int T = r->c->seq_length;
    for (int b = 0; b < r->c->global_batch_size; b++)
        if (eng_data_sample(&r->data, (uint64_t)(r->st.consumed_samples + b), r->tokens + (size_t)b * T,
                            r->targets + (size_t)b * T, err, errlen))
            return -1;
    return 0;
}

static int dump_step(run *r, const float *logits0, double loss, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    char path[1100];
    st_tensor ex[4] = { 0 };
    const void *exd[4] = { r->tokens, r->targets, logits0, NULL };
    float lossf = (float)loss;
    exd[3] = &lossf;
    snprintf(ex[0].name, sizeof ex[0].name, "tokens");
    snprintf(ex[1].name, sizeof ex[1].name, "targets");
    ex[0].dtype = ex[1].dtype = ST_I32;
    for (int i = 0; i < 2; i++) {
        ex[i].ndim = 2;
        ex[i].shape[0] = c->global_batch_size;
        ex[i].shape[1] = c->seq_length;
    }
    snprintf(ex[2].name, sizeof ex[2].name, "logits");
    ex[2].ndim = 2;
    ex[2].shape[0] = (int64_t)c->micro_batch_size * c->seq_length;
    ex[2].shape[1] = c->vocab_size;
    snprintf(ex[3].name, sizeof ex[3].name, "loss");
    ex[3].ndim = 1;
    ex[3].shape[0] = 1;
    snprintf(path, sizeof path, "%s/iter_%07lld.safetensors", r->o->dump_dir, r->st.iteration + 1);
    if (logits0) return dump_params(path, r->m, r->m->grads, "grad.", ex, exd, 4, err, errlen);
    return dump_file(path, ex, 2, exd, err, errlen);
}

static int train_step(run *r, step_stats *s, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    eng_model *m = r->m;
    int T = c->seq_length, mbs = c->micro_batch_size, nmicro = c->global_batch_size / mbs;
    size_t mb_tokens = (size_t)mbs * T;
    double t0 = now_s();
    if (load_batch(r, err, errlen)) return -1;
    int dump_grads = r->o->dump_dir[0] && r->st.iteration == 0;
    float *logits0 = NULL;
    eng_zero_grads(m);
    double loss_sum = 0.0;
    float dloss = 1.0f / (float)((double)c->global_batch_size * T);
    for (int k = 0; k < nmicro; k++) {
        double ls = 0.0;
        if (eng_forward(m, r->acts, r->tokens + k * mb_tokens, NULL, r->targets + k * mb_tokens, &ls) ||
            (dump_grads && k == 0 && !(logits0 = malloc(mb_tokens * (size_t)m->V * sizeof(float))))) {
            errf(err, errlen, "forward pass failed");
            return -1;
        }
        if (dump_grads && k == 0) m->k->to_host(logits0, r->acts->logits, mb_tokens * (size_t)m->V * sizeof(float));
        loss_sum += ls;
        if (eng_backward(m, r->acts, NULL, dloss)) {
            errf(err, errlen, "backward pass failed");
            free(logits0);
            return -1;
        }
    }
    s->loss = loss_sum / ((double)c->global_batch_size * T);
    if (r->o->dump_dir[0]) {
        int rc = dump_step(r, logits0, s->loss, err, errlen);
        free(logits0);
        if (rc) return -1;
    }
    s->it = r->st.iteration + 1;
    s->grad_norm = sqrt(eng_grad_sumsq(m));
    s->lr = eng_lr_at(c, s->it);
    eng_optim_step(r->opt, m, s->lr, eng_clip_scale(s->grad_norm, c->clip_grad), (int)s->it);
    m->k->sync();
    r->st.iteration = s->it;
    r->st.consumed_samples += c->global_batch_size;
    s->consumed = r->st.consumed_samples;
    s->step_s = now_s() - t0;
    double tokens = (double)c->global_batch_size * T;
    s->tokens_per_s = tokens / s->step_s;
    s->flops_per_s = cfg_flops_per_token(c) * tokens / s->step_s;
    double peak = device_peak(m->k);
    s->mfu = peak > 0 ? s->flops_per_s / peak : -1.0;
    if (!isfinite(s->loss)) {
        errf(err, errlen, "iteration %lld: loss is %g; lower --lr or raise --clip-grad's effect", s->it, s->loss);
        return -1;
    }
    return 0;
}

/* Forward only over the first --eval-iters global batches of the validation
 * split (the same samples every time, so evaluations compare). */
static int evaluate(run *r, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    int T = c->seq_length, mbs = c->micro_batch_size;
    size_t mb_tokens = (size_t)mbs * T;
    double sum = 0.0;
    for (int i = 0; i < c->eval_iters; i++) {
        for (int b = 0; b < c->global_batch_size; b++)
            if (eng_data_sample(&r->valid, (uint64_t)i * (uint64_t)c->global_batch_size + (uint64_t)b,
                                r->tokens + (size_t)b * T, r->targets + (size_t)b * T, err, errlen))
                return -1;
        for (int k = 0; k < c->global_batch_size / mbs; k++) {
            double ls = 0.0;
            if (eng_forward(r->m, r->acts, r->tokens + k * mb_tokens, NULL, r->targets + k * mb_tokens, &ls)) {
                errf(err, errlen, "evaluation forward pass failed");
                return -1;
            }
            sum += ls;
        }
    }
    double loss = sum / ((double)c->eval_iters * c->global_batch_size * T);
    printf(" validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n", r->st.iteration,
           loss, exp(loss < 700 ? loss : 700));
    fflush(stdout);
    if (r->metrics) {
        fprintf(r->metrics, "{\"iteration\":%lld,\"valid_loss\":%.17g,\"valid_ppl\":%.6g}\n", r->st.iteration,
                loss, exp(loss < 700 ? loss : 700));
        fflush(r->metrics);
    }
    return 0;
}

static int resume(run *r, char *err, size_t errlen)
{
    long long it;
    int rc = ckpt_latest(r->c->load, &it, err, errlen);
    if (rc < 0) return -1;
    if (rc == 1) {
        fprintf(stderr, "atoll-train: no committed checkpoint in --load %s; starting from iteration 0\n",
                r->c->load);
        return 0;
    }
    if (ckpt_load(r->c->load, it, r->m, r->opt, &r->st, err, errlen)) return -1;
    if (r->st.seed != r->c->seed)
        fprintf(stderr, "atoll-train: note: checkpoint was trained with --seed %llu; data order continues "
                "with it\n", (unsigned long long)r->st.seed);
    r->data.seed = r->st.seed;
    printf("loaded checkpoint %s/iter_%07lld (consumed samples %lld)\n", r->c->load, it, r->st.consumed_samples);
    return 0;
}

static int setup(run *r, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    const k_ops *k = pick_backend(r->o->device, err, errlen);
    if (!k) return -1;
    eng_layout lay = eng_layout_single(c);
    if (!(r->m = eng_model_create(c, &lay, k, err, errlen))) return -1;
    if (!(r->opt = eng_optim_create(r->m)) || !(r->acts = eng_acts_create(r->m, 0))) {
        errf(err, errlen, "out of memory for the optimizer state or activations");
        return -1;
    }
    size_t n = (size_t)c->global_batch_size * c->seq_length;
    r->tokens = malloc(n * sizeof(int32_t));
    r->targets = malloc(n * sizeof(int32_t));
    if (!r->tokens || !r->targets) { errf(err, errlen, "out of memory"); return -1; }
    if (eng_data_open(&r->data, c->data_path, c->split, c->seq_length, c->vocab_size, c->seed, err, errlen))
        return -1;
    r->have_data = 1;
    /* Fail now, not after the first --save-interval iterations of work. */
    if (c->save[0] && ((mkdir(c->save, 0755) && errno != EEXIST) || access(c->save, W_OK))) {
        errf(err, errlen, "--save %s: cannot create or write the directory: %s", c->save, strerror(errno));
        return -1;
    }
    if (c->eval_interval > 0 && c->eval_iters > 0) {
        if (eng_data_open_split(&r->valid, c->data_path, c->split, ENG_SPLIT_VALID, c->seq_length,
                                c->vocab_size, c->seed, err, errlen))
            return -1;
        r->have_valid = 1;
    }
    eng_init_params(r->m, c->seed);
    r->st.seed = c->seed;
    if (c->load[0] && resume(r, err, errlen)) return -1;
    if (r->o->metrics_file[0] && !(r->metrics = fopen(r->o->metrics_file, "a"))) {
        errf(err, errlen, "--metrics-file %s: %s", r->o->metrics_file, strerror(errno));
        return -1;
    }
    if (r->o->dump_dir[0]) {
        char path[1100];
        mkdir(r->o->dump_dir, 0755);
        snprintf(path, sizeof path, "%s/init.safetensors", r->o->dump_dir);
        if (r->st.iteration == 0 && dump_params(path, r->m, r->m->params, "", NULL, NULL, 0, err, errlen))
            return -1;
    }
    return 0;
}

static void teardown(run *r)
{
    if (r->metrics) fclose(r->metrics);
    if (r->have_data) eng_data_close(&r->data);
    if (r->have_valid) eng_data_close(&r->valid);
    free(r->tokens);
    free(r->targets);
    if (r->m) {
        eng_acts_free(r->m, r->acts);
        eng_optim_free(r->opt);
        eng_model_free(r->m);
    }
}

int eng_train(const atoll_config *cfg, const eng_run_opts *o, char *err, size_t errlen)
{
    atoll_config c = *cfg;
    if (!c.global_batch_size) c.global_batch_size = c.micro_batch_size;
    if (check_config(&c, err, errlen)) return -1;
    run r;
    memset(&r, 0, sizeof r);
    r.c = &c;
    r.o = o;
    int rc = setup(&r, err, errlen);
    if (!rc) {
        printf("atoll-train: %s, %d layers, hidden %d, %d heads, seq %d, vocab %d, %.0f parameters, "
               "data: %s (%llu samples per epoch)\n",
               r.m->k->name, c.num_layers, c.hidden_size, c.num_attention_heads, c.seq_length,
               c.vocab_size, cfg_num_params(&c), r.data.source, (unsigned long long)r.data.nsamples);
    }
    long long last_saved = r.st.iteration;
    long long stop = c.train_iters;
    if (o->exit_interval > 0 && o->exit_interval < stop) stop = o->exit_interval;
    while (!rc && r.st.iteration < stop) {
        step_stats s;
        if ((rc = train_step(&r, &s, err, errlen))) break;
        if (c.log_interval > 0 && s.it % c.log_interval == 0) log_step(&c, &s, r.metrics);
        if (r.have_valid && (s.it % c.eval_interval == 0 || s.it == stop) && (rc = evaluate(&r, err, errlen)))
            break;
        if (c.save[0] && c.save_interval > 0 && s.it % c.save_interval == 0) {
            if ((rc = ckpt_save(c.save, r.m, r.opt, &r.st, err, errlen))) break;
            last_saved = s.it;
        }
    }
    if (!rc && c.save[0] && last_saved != r.st.iteration)
        rc = ckpt_save(c.save, r.m, r.opt, &r.st, err, errlen);
    teardown(&r);
    return rc ? -1 : 0;
}
