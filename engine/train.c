#include "train.h"
#include "errf.h"
#include "checkpoint.h"
#include "ckpt_async.h"
#include "dist.h"
#include "schedule.h"
#include "gpu_specs.h"
#include "data.h"
#include "metrics_emit.h"
#include "model.h"
#include "optimizer.h"
#include "safetensors.h"
#include "store.h"
#include "tensorboard.h"
#include "watchdog.h"
#include "tokenizer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifdef ATOLL_HAVE_CUDA_KERNELS
#include "cuda/k_cuda.h"
#include <cuda_runtime.h>
#endif

void eng_run_opts_defaults(eng_run_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->device, sizeof o->device, "cpu");
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void eng_cuda_select_device(void)
{
#ifdef ATOLL_HAVE_CUDA_KERNELS
    /* one GPU per rank: the launcher's LOCAL_RANK picks it (workerd's ranks see
     * one device through CUDA_VISIBLE_DEVICES, so theirs is 0 either way) */
    int ndev = 0;
    const char *lr = getenv("LOCAL_RANK");
    if (lr && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) cudaSetDevice(atoi(lr) % ndev);
#endif
}

const k_ops *eng_backend(const char *device, char *err, size_t errlen)
{
    if (!strcmp(device, "cpu")) {
        /* N ranks on a node, each with OpenBLAS's default of every core, would
         * run N times as many threads as cores (torchrun sets OMP_NUM_THREADS=1
         * for the same reason); each takes its share instead */
        k_cpu_blas_threads(eng_cpu_share());
        return k_cpu();
    }
    if (!strcmp(device, "cuda")) {
#ifdef ATOLL_HAVE_CUDA_KERNELS
        eng_cuda_select_device(); /* before the backend binds to the current device */
        const k_ops *k = k_cuda();
        if (k) return k;
        atoll_errf(err, errlen, "--device cuda: no usable CUDA device: %s", k_cuda_status());
#else
        atoll_errf(err, errlen, "--device cuda: this atoll-train was not built with the CUDA kernels; use --device cpu");
#endif
        return NULL;
    }
    atoll_errf(err, errlen, "--device '%s': expected cpu or cuda", device);
    return NULL;
}

/* ---- test dumps (--dump-dir) ---- */

static int dump_file(const char *path, st_tensor *t, int n, const void **data, char *err, size_t errlen)
{
    st_file f;
    if (st_layout(&f, t, n, NULL)) { atoll_errf(err, errlen, "out of memory"); return -1; }
    int rc = st_create(&f, path, 1, err, errlen);
    for (int i = 0; i < n && !rc; i++) rc = st_write_all(&f, &f.t[i], data[i], err, errlen);
    if (st_close(&f) && !rc) { atoll_errf(err, errlen, "%s: fsync failed", path); rc = -1; }
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
    if (!t || !data || !host) { atoll_errf(err, errlen, "out of memory"); goto out; }
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
    double valid_loss;            /* set after an evaluation: the step is reported again with it */
    double loss, lr, grad_norm, step_s, tokens_per_s, flops_per_s;
    double mfu; /* < 0: no known peak (CPU, or an unknown GPU) */
    long long consumed;
    int batch;                    /* this step's global batch (a ramp or schedule changes it) */
    double params_norm;           /* --log-params-norm, after the step; < 0: not taken this step */
    double num_zeros;             /* --log-num-zeros-in-grad: the gradient's zeros; < 0: not taken this step */
    double bubble, bubble_theory; /* mean measured over stages; (p-1)/(v*m + p-1) */
    int pp;
    /* per pipeline stage (first 64): idle and transfer time, then (finish_step)
     * each over the step time, so bubbles are shares of the step in [0, 1] */
    double stage_bubble[64], stage_transfer[64];
    double peak;                  /* device peak FLOP/s; 0 unknown */
    double compute_s;             /* step_s less this rank's time blocked in communication */
    /* for the supervisor (rank_step) */
    long long checkpoint_iteration, start_iteration;
    double save_stall_s, save_s, startup_s;
    uint64_t memory_bytes;        /* the rank's peak memory so far (memory_peak) */
    int stop;                     /* some rank was asked to stop (SIGTERM) before this step's reduction */
    int saves_durable;            /* every rank's part of the save in flight is on disk (--async-save) */
    int save_due;                 /* --save-mtbf: rank 0 says to save after this step */
} step_stats;

/* SIGTERM with --save (Slurm's signal before it ends an allocation, workerd passing
 * it on for `atoll cancel --checkpoint`): finish the step, commit a checkpoint, stop.
 * The handler only sets the flag; every rank learns of it in the step's world
 * all-reduce, so all stop after the same step. */
static volatile sig_atomic_t stop_requested;
static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

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

/* The rank's peak memory so far, sampled after each step: device memory in use
 * on a GPU, the process's peak resident memory on the CPU. */
static uint64_t memory_peak(const k_ops *k)
{
#ifdef ATOLL_HAVE_CUDA_KERNELS
    static uint64_t peak;
    if (!strcmp(k->name, "cuda")) {
        uint64_t now = k_cuda_device_used_bytes();
        if (now > peak) peak = now;
        return peak;
    }
#endif
    (void)k;
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? 0 : (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

/* The step's metrics to this rank's supervisor (metrics_emit.h): every step,
 * and once more after an evaluation, with the validation loss. */
static void emit_step(const step_stats *s, metrics_emit *emit, const dist *d)
{
    int stage = d->tp_rank == 0 && d->dp_rank == 0 && d->pp_rank < 64 ? d->pp_rank : -1;
    rank_step rs = {
        .iteration = s->it, .consumed_samples = s->consumed, .loss = s->loss, .lr = s->lr, .grad_norm = s->grad_norm,
        .tokens_per_s = s->tokens_per_s, .step_s = s->step_s, .flops_per_gpu = s->flops_per_s / d->size,
        .peak_flops = s->peak, .stage = stage, .bubble = stage >= 0 ? s->stage_bubble[stage] : 0,
        .transfer = stage >= 0 ? s->stage_transfer[stage] : 0, .bubble_theory = s->bubble_theory,
        .compute_s = s->compute_s, .time_ms = wall_ms(), .checkpoint_iteration = s->checkpoint_iteration,
        .save_stall_s = s->save_stall_s, .save_s = s->save_s, .start_iteration = s->start_iteration,
        .startup_s = s->startup_s,
        .memory_bytes = s->memory_bytes, .valid_loss = s->valid_loss,
    };
    metrics_emit_step(emit, &rs);
}

/* The steps whose figures go to the log line and --metrics-file, and to TensorBoard. */
static int log_due(const atoll_config *c, long long it) { return c->log_interval > 0 && it % c->log_interval == 0; }
static int tb_due(const atoll_config *c, long long it) { return c->tensorboard_dir[0] && it % cfg_tb_interval(c) == 0; }

/* Megatron's TensorBoard scalars under its tags: the learning rate, the loss
 * and the gradient norm by iteration and by consumed samples (the batch and
 * world sizes and rank 0's peak memory too with --log-batch-size/world-size/
 * memory-to-tensorboard), the throughput
 * (TFLOP/s per GPU), iteration-time with --log-timers-to-tensorboard; and
 * atoll's MFU, tokens/s and measured pipeline bubble. */
static void tb_step(const atoll_config *c, const step_stats *s, tb_writer *tb, int world)
{
    const struct { const char *tag; double v; int on; } both[] = {
        { "learning-rate", s->lr, !c->no_log_learning_rate_to_tensorboard }, { "lm loss", s->loss, 1 },
        { "grad-norm", s->grad_norm, 1 },
        { "batch-size", s->batch, c->log_batch_size_to_tensorboard },
        { "world-size", world, c->log_world_size_to_tensorboard },
        { "mem-max-allocated-bytes", (double)s->memory_bytes, c->log_memory_to_tensorboard },
        { "params-norm", s->params_norm, s->params_norm >= 0 },
        { "num-zeros", s->num_zeros, s->num_zeros >= 0 },
    };
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++) {
        if (!both[i].on) continue;
        char vs[64];
        snprintf(vs, sizeof vs, "%s vs samples", both[i].tag);
        tb_scalar(tb, both[i].tag, s->it, both[i].v);
        tb_scalar(tb, vs, s->consumed, both[i].v);
    }
    tb_scalar(tb, "throughput", s->it, s->flops_per_s / world / 1e12);
    if (c->log_timers_to_tensorboard) tb_scalar(tb, "iteration-time", s->it, s->step_s);
    if (s->mfu >= 0) tb_scalar(tb, "mfu", s->it, s->mfu);
    tb_scalar(tb, "tokens-per-sec", s->it, s->tokens_per_s);
    tb_scalar(tb, "pipeline-bubble", s->it, s->bubble);
    tb_flush(tb);
}

/* Every rank, every step: emit_step; rank 0 every --tensorboard-log-interval
 * the TensorBoard scalars, every --log-interval the log line and the
 * --metrics-file record. */
static void log_step(const atoll_config *c, const step_stats *s, FILE *metrics, tb_writer *tb, metrics_emit *emit,
                     const dist *d)
{
    emit_step(s, emit, d);
    if (d->rank != 0) return;
    if (tb->f && tb_due(c, s->it)) tb_step(c, s, tb, d->size);
    if (!log_due(c, s->it)) return;
    char mfu[32] = "n/a", mfu_json[32] = "null";
    if (s->mfu >= 0) {
        snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * s->mfu);
        snprintf(mfu_json, sizeof mfu_json, "%.6g", s->mfu);
    }
    char pnorm[96] = "", pnorm_json[96] = "";
    size_t pl = 0, pj = 0;
    if (s->num_zeros >= 0) { /* Megatron's order: grad norm, num zeros, params norm */
        pl += (size_t)snprintf(pnorm + pl, sizeof pnorm - pl, " num zeros: %.1f |", s->num_zeros);
        pj += (size_t)snprintf(pnorm_json + pj, sizeof pnorm_json - pj, "\"num_zeros\":%.0f,", s->num_zeros);
    }
    if (s->params_norm >= 0) {
        snprintf(pnorm + pl, sizeof pnorm - pl, " params norm: %.3f |", s->params_norm);
        snprintf(pnorm_json + pj, sizeof pnorm_json - pj, "\"params_norm\":%.17g,", s->params_norm);
    }
    printf(" iteration %8lld/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "learning rate: %.6E | global batch size: %5d | lm loss: %.6E | grad norm: %.3f |%s "
           "tokens/s: %.1f | achieved FLOP/s: %.3E | MFU: %s | bubble measured: %.4f | bubble theory: %.4f |\n",
           s->it, c->train_iters, s->consumed, s->step_s * 1e3, s->lr, s->batch, s->loss,
           s->grad_norm, pnorm, s->tokens_per_s, s->flops_per_s, mfu, s->bubble, s->bubble_theory);
    fflush(stdout);
    if (metrics) {
        char stages[64 * 16] = "", xfer[64 * 16] = "";
        size_t at = 0, ax = 0;
        for (int i = 0; i < s->pp && i < 64; i++) {
            at += (size_t)snprintf(stages + at, sizeof stages - at, "%s%.6g", i ? "," : "", s->stage_bubble[i]);
            ax += (size_t)snprintf(xfer + ax, sizeof xfer - ax, "%s%.6g", i ? "," : "", s->stage_transfer[i]);
        }
        fprintf(metrics,
                "{\"iteration\":%lld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,%s\"tokens_per_s\":%.6g,"
                "\"step_ms\":%.6g,\"mfu\":%s,\"flops_per_s\":%.6g,\"bubble_measured\":%.6g,"
                "\"bubble_theory\":%.6g,\"bubble_stages\":[%s],\"transfer_stages\":[%s],\"consumed_samples\":%lld,"
                "\"global_batch_size\":%d,\"save_stall_ms\":%.6g,\"checkpoint_iteration\":%lld}\n",
                s->it, s->loss, s->lr, s->grad_norm, pnorm_json, s->tokens_per_s, s->step_s * 1e3, mfu_json,
                s->flops_per_s, s->bubble, s->bubble_theory, stages, xfer, s->consumed, s->batch,
                s->save_stall_s * 1e3, s->checkpoint_iteration);
        fflush(metrics);
    }
}

/* ---- the loop ---- */

typedef struct run {
    const atoll_config *c;
    const eng_run_opts *o;
    eng_model *m;
    eng_optim *opt;      /* one rank: the moments (dopt.full) */
    eng_acts *acts;      /* one rank: the single micro-batch's activations */
    dist d;
    int have_dist, have_pipe, have_dopt;
    dist_pipe pipe;      /* several ranks: the pipeline executor */
    dist_optim dopt;
    eng_data data, valid, test;
    int have_data, have_valid, have_test;
    eng_train_state st;
    int32_t *tokens, *targets; /* [gbs, T] host */
    float *losses;       /* [gbs, T] host: one rank's per-token losses of a step, read with its gradient norm */
    int32_t eod;         /* --eod-mask-loss, --reset-*: the end-of-document token */
    float *mb_scale;     /* --eod-mask-loss: per local micro-batch, T x mbs over its unmasked tokens */
    FILE *metrics;
    tb_writer tb;        /* --tensorboard-dir (rank 0) */
    metrics_emit emit;
    int have_emit;
    eng_watchdog *wd;    /* reports what this rank is blocked in (watchdog.h) */
    double t_start;      /* eng_train's start: start-up time is counted from it */
    long long start_iteration; /* the iteration this run resumed from */
    /* checkpoints, for the supervisor: the newest this run committed, the stall
     * not yet reported, and how long the newest took from start to commit */
    long long ckpt_committed;
    double stall_unreported, save_s;
    /* --async-save: the save in flight (pending_it > 0 on every rank; `pending` only
     * where this rank writes a part), and whether every rank's part is known durable */
    ckpt_async *pending;
    long long pending_it;
    int pending_seen;
    /* --save-mtbf: the training stall per save (EWMA) and when the last save was */
    double stall_avg, last_save_t;
    long long last_save_it;
    int gemm_kept;       /* --tune-gemms: the GEMM choices in --save's file (-1: none written yet) */
    /* --enable-cuda-graph: 0 off, 1 on (the next micro-batch runs without: the first calls), 2 on */
    int graph_state;
    struct k_cuda_graph *graph; /* the micro-batch's kernels as recorded, for the loss weights graph_key */
    float graph_key[2];
    long graph_records, graph_launches;
} run;

/* A placement replaced while it ran on (its node cut off from the coordinator,
 * which could not stop it): rank 0 reads --save's placement.txt every
 * SUPERSEDED_POLL_S, and the step's reduction stops every rank; their final
 * save is then refused and writes nothing (ckpt_claim). Before, they stopped only
 * at their next save, training and writing their steps' metrics into the
 * job's shared files until then. */
#define SUPERSEDED_POLL_S 2.0
static int superseded(const run *r)
{
    static double last;
    static int gone;
    if (gone || !r->c->save[0] || r->d.rank != 0) return gone;
    double now = atoll_mono_s();
    if (now - last < SUPERSEDED_POLL_S) return 0;
    last = now;
    char why[512];
    if (ckpt_may_write(r->c->save, why, sizeof why) != CKPT_SUPERSEDED) return 0;
    fprintf(stderr, "atoll-train: --save %s: %s; stopping\n", r->c->save, why);
    return gone = 1;
}

/* Whether this rank wants the run to stop after this step: SIGTERM, a newer
 * placement's claim on --save (superseded), or --exit-duration-in-mins since
 * atoll-train started (Megatron's clock). */
static int stop_wanted(const run *r)
{
    return stop_requested || superseded(r) || (r->c->exit_duration_in_mins > 0 &&
                              atoll_mono_s() - r->t_start >= r->c->exit_duration_in_mins * 60.0);
}

/* --save-mtbf (rank 0): is a save due after the step being computed? Young's
 * interval Tc = sqrt(2 x MTBF x Ts) minimises the expected time lost to saves
 * plus recomputation, with Ts the measured stall per save. Until one save was
 * measured, the first comes after --save-interval steps (10 when unset). */
static int mtbf_due(const run *r)
{
    const atoll_config *c = r->c;
    if (!c->save[0] || c->save_mtbf <= 0) return 0;
    if (r->stall_avg <= 0)
        return r->st.iteration + 1 - r->last_save_it >= (c->save_interval > 0 ? c->save_interval : 10);
    return atoll_mono_s() - r->last_save_t >= sqrt(2.0 * c->save_mtbf * r->stall_avg);
}

/* --eod-mask-loss (Megatron's): a position whose input is the end-of-document
 * token does not count (its target -1, which the loss ignores), and each
 * micro-batch's loss is the mean over the tokens it keeps: weight w = mbs x T /
 * kept on its per-token loss and gradient (0 when it keeps none). The step's loss
 * is then the mean over micro-batches, the same in every layout of one
 * micro-batch size. Applies to the batch load_batch (or evaluate) just read. */
static void mask_eod(run *r)
{
    if (!r->c->eod_mask_loss) return;
    size_t mb = (size_t)r->c->micro_batch_size * r->c->seq_length;
    for (int k = 0; k < r->d.nmicro; k++) {
        size_t kept = 0;
        for (size_t i = k * mb; i < (k + 1) * mb; i++) {
            if (r->tokens[i] == r->eod) r->targets[i] = -1;
            else kept++;
        }
        r->mb_scale[k] = kept ? (float)((double)mb / (double)kept) : 0.0f;
    }
}

/* This step's global batch, Megatron's with --rampup-batch-size or
 * --step-batch-size-schedule (the same for every layout: it depends on the
 * samples consumed alone), and so the micro-batches each DP rank runs;
 * cfg_validate_layout checked they divide. */
static int step_batch(run *r)
{
    int batch = cfg_batch_at(r->c, r->d.dp, (uint64_t)r->st.consumed_samples);
    r->d.nmicro = batch / (r->c->micro_batch_size * r->d.dp);
    return batch;
}

/* Where the schedule stands once `batch` more samples are consumed, in global
 * batches, as Megatron's schedule counts samples: the iteration itself while
 * every step takes the global batch, fewer under a ramp or
 * --decrease-batch-size-if-needed. A step updates with the rate of batch 0 (where
 * the schedule stood before it: Megatron moves its scheduler after
 * optimizer.step()), and its log shows the rate after it, as Megatron's does. */
static double sched_position(const run *r, int batch)
{
    return (double)(r->st.consumed_samples + batch) / (double)cfg_global_batch(r->c, r->d.dp);
}

static int load_batch(run *r, char *err, size_t errlen)
{
    int T = r->c->seq_length, mbs = r->c->micro_batch_size;
    for (int k = 0; k < r->d.nmicro; k++)
        for (int b = 0; b < mbs; b++) {
            long long g = r->st.consumed_samples + dist_sample_offset(&r->d, r->c, k) + b;
            size_t at = ((size_t)k * mbs + (size_t)b) * T;
            if (eng_data_sample(&r->data, (uint64_t)g, r->tokens + at, r->targets + at, err, errlen)) return -1;
        }
    mask_eod(r);
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
        ex[i].shape[0] = (int64_t)r->d.nmicro * c->micro_batch_size;
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

static int finish_step(run *r, step_stats *s, double t0, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    /* No sync here: the optimizer's kernels may still be running on a GPU while
     * this rank logs the step and reads the next batch (~0.2 ms of host work a
     * step, which would leave the GPU idle); the next batch's upload waits for
     * them, and every read of device memory (to_host) syncs first. The loss and
     * the gradient norm were read before the optimizer ran (or, one rank, while
     * it runs), so the step time below is the host's, which the GPU paces
     * through those reads: over steps it is the GPU's. */
    r->st.iteration = s->it;
    r->st.consumed_samples += s->batch;
    s->consumed = r->st.consumed_samples;
    s->step_s = atoll_mono_s() - t0;
    /* --log-params-norm, Megatron's: the updated parameters' L2 norm, on logged steps (outside the step's
     * time; every rank takes part in the sum) */
    s->params_norm = -1.0;
    if (c->log_params_norm && (log_due(c, s->it) || tb_due(c, s->it))) {
        double sq = dist_param_sumsq(&r->d, r->m);
        float part = (float)sq;
        if (r->d.size > 1) {
            if (dist_world_sum(&r->d, &part, 1)) {
                atoll_errf(err, errlen, "parameter norm: %s", dist_error(&r->d));
                return -1;
            }
            sq = part;
        }
        s->params_norm = sqrt(sq);
    }
    double tokens = (double)s->batch * c->seq_length;
    s->tokens_per_s = tokens / s->step_s;
    s->flops_per_s = cfg_flops_per_token(c) * tokens / s->step_s;
    double peak = device_peak(r->m->k);
    s->peak = peak;
    s->memory_bytes = memory_peak(r->m->k);
    s->mfu = peak > 0 ? s->flops_per_s / peak / r->d.size : -1.0;
    /* idle and transfer seconds of each stage over the step time (every rank
     * steps in lockstep, so this rank's step time stands for all; on a loaded
     * host a stage's own step can run a little longer than this rank's, so the
     * shares are clamped to add up to at most the step) */
    s->bubble = 0;
    for (int i = 0; i < s->pp && i < 64 && s->pp > 1; i++) {
        s->stage_bubble[i] = fmin(1.0, s->stage_bubble[i] / s->step_s);
        s->stage_transfer[i] = fmin(1.0 - s->stage_bubble[i], s->stage_transfer[i] / s->step_s);
        s->bubble += s->stage_bubble[i] / (s->pp < 64 ? s->pp : 64);
    }
    if (!isfinite(s->loss)) {
        atoll_errf(err, errlen, "iteration %lld: loss is %g; lower --lr or raise --clip-grad's effect", s->it, s->loss);
        return -1;
    }
    return 0;
}

/* --log-num-zeros-in-grad: the gradient's zeros are counted on the steps that are logged (a second read of the
 * gradient there), after its reduction, as Megatron counts them */
static int zeros_due(const run *r)
{
    long long it = r->st.iteration + 1;
    return r->c->log_num_zeros_in_grad && (log_due(r->c, it) || tb_due(r->c, it));
}

/* Several ranks: the pipeline schedule (also for pp = 1), gradient reduction,
 * then one world all-reduce of (sum of squares, loss, each stage's idle and
 * transfer seconds), so every rank takes the same clipping decision and rank 0
 * can log. */
static int train_step_dist(run *r, step_stats *s, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    dist *d = &r->d;
    eng_model *m = r->m;
    double t0 = atoll_mono_s();
    s->batch = step_batch(r);
    double tokens = (double)s->batch * c->seq_length;
    if (load_batch(r, err, errlen)) return -1;
    eng_zero_grads(m);
    eng_set_step(m, r->st.seed, r->st.iteration + 1, 1);
    r->pipe.sample_base = r->st.consumed_samples;
    dist_step_result res;
    r->pipe.overlap = dist_overlap_begin(d, m, r->dopt.zero ? r->dopt.shard : 0);
    int prc = dist_pipeline(&r->pipe, r->tokens, r->targets, (float)(1.0 / tokens), &res, err, errlen);
    if (dist_overlap_end(d) && !prc) {
        atoll_errf(err, errlen, "data-parallel all-reduce: %s", dist_error(d));
        return -1;
    }
    if (prc) return -1;
    if (dist_sync_grads(d, m, &r->dopt)) {
        atoll_errf(err, errlen, "gradient reduction: %s", dist_error(d));
        return -1;
    }
    int pp = d->pp < 64 ? d->pp : 64;
    float vec[8 + 2 * 64] = { 0 };
    uint64_t zeros = 0, *zp = zeros_due(r) ? &zeros : NULL;
    if (d->acc) { /* --deterministic-dp: the norm's partials summed in world-rank order */
        double sq;
        if (dist_world_sum_ordered(d, dist_grad_sumsq(d, m, &r->dopt, zp), &sq)) {
            atoll_errf(err, errlen, "gradient norm: %s", dist_error(d));
            return -1;
        }
        vec[0] = d->rank == 0 ? (float)sq : 0.0f; /* the float sum below adds zeros to it */
    } else {
        vec[0] = (float)dist_grad_sumsq(d, m, &r->dopt, zp);
    }
    for (int i = 0; i < 3; i++) /* the count in 12-bit digits: each digit's sum is exact in float up to 4096 ranks */
        vec[5 + 2 * pp + i] = (float)((zeros >> (12 * i)) & 0xfff);
    if (d->pp_rank == d->pp - 1 && d->tp_rank == 0) {
        m->k->sync(); /* the norm's read waited already (a shard may have had nothing to read): the losses are here */
        res.loss_sum = eng_losses_sum(m, r->pipe.losses, d->nmicro, r->pipe.mb_scale);
        vec[1] = (float)(res.loss_sum / tokens);
    }
    if (d->tp_rank == 0 && d->dp_rank == 0 && d->pp_rank < 64 && d->pp > 1) {
        vec[2 + d->pp_rank] = (float)res.idle_s;
        vec[2 + pp + d->pp_rank] = (float)res.transfer_s;
    }
    vec[2 + 2 * pp] = stop_wanted(r) ? 1.0f : 0.0f;
    /* this rank's part of the save in flight is on disk (or it has none) */
    vec[3 + 2 * pp] = !r->pending || ckpt_async_durable(r->pending) == 1 ? 1.0f : 0.0f;
    vec[4 + 2 * pp] = d->rank == 0 && mtbf_due(r) ? 1.0f : 0.0f; /* every rank saves after the same step */
    if (dist_world_sum(d, vec, 8 + 2 * pp)) {
        atoll_errf(err, errlen, "step reduction: %s", dist_error(d));
        return -1;
    }
    s->it = r->st.iteration + 1;
    s->stop = vec[2 + 2 * pp] > 0;
    s->saves_durable = vec[3 + 2 * pp] > d->size - 0.5f;
    s->save_due = vec[4 + 2 * pp] > 0;
    s->loss = vec[1];
    s->grad_norm = sqrt(vec[0]);
    s->num_zeros = !zp ? -1.0 : vec[5 + 2 * pp] + 4096.0 * vec[6 + 2 * pp] + 4096.0 * 4096.0 * vec[7 + 2 * pp];
    s->pp = d->pp;
    for (int i = 0; i < pp; i++) { /* seconds here; finish_step makes them shares of the step */
        s->stage_bubble[i] = vec[2 + i];
        s->stage_transfer[i] = vec[2 + pp + i];
    }
    s->bubble_theory = cfg_bubble_theory(c, d->size, s->batch);
    s->lr = eng_lr_at(c, sched_position(r, s->batch));
    int adam_t = (int)(s->it - r->st.adam_from);
    eng_rates rates = eng_rates_at(c, sched_position(r, 0));
    if (dist_optim_step(d, m, &r->dopt, &rates, eng_clip_scale(s->grad_norm, c->clip_grad), adam_t)) {
        atoll_errf(err, errlen, "optimizer: %s", dist_error(d));
        return -1;
    }
    return finish_step(r, s, t0, err, errlen);
}

/* ---- --enable-cuda-graph ----
 * On one cuda rank a micro-batch's inputs are uploaded, then its forward and
 * backward kernels (eng_forward_run, eng_backward: ~500 launches at GPT-2
 * 124M, each leaving the GPU 1-2 us idle before the next) go as one CUDA graph,
 * recorded once and launched again while what the recording holds stands: the
 * loss weights (dloss: a new batch size records anew), the backend's buffers
 * (a stale graph is recorded anew), no dropout (its masks change every step).
 * The first micro-batch runs without a graph: first calls choose GEMM
 * algorithms and build cuDNN plans, which waits for the device. A recording
 * that fails (k_cuda_graph_end says why) is said once, and the run goes on
 * without graphs: nothing recorded ran, so the micro-batch simply runs. */
#define GRAPH_RECORDS_MAX 16 /* recorded more often than this: it is not being reused */

static void graph_drop(run *r)
{
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!r->graph) return;
    r->m->k->sync(); /* its last launch has run */
    k_cuda_graph_free(r->graph);
    r->graph = NULL;
#else
    (void)r;
#endif
}

static void graph_give_up(run *r, const char *why)
{
    graph_drop(r);
    r->graph_state = 0;
    if (r->d.rank == 0) fprintf(stderr, "atoll-train: note: --enable-cuda-graph: %s: running without CUDA graphs\n", why);
}

/* Which runs take graphs; a note for those that cannot. After dist_init. */
static void graph_setup(run *r)
{
    const atoll_config *c = r->c;
    r->graph_state = 0;
    if (!c->enable_cuda_graph) return;
    r->graph_state = 1;
    if (strcmp(r->o->device, "cuda")) {
        r->graph_state = 0;
        if (r->d.rank == 0)
            fprintf(stderr, "atoll-train: note: --enable-cuda-graph records CUDA kernels: nothing to record on "
                    "--device %s\n", r->o->device);
    } else if (r->d.size > 1) {
        graph_give_up(r, "one rank only (a layout's collectives and transfers are not recorded)");
    } else if (c->hidden_dropout > 0 || c->attention_dropout > 0) {
        graph_give_up(r, "dropout draws new masks every step");
    } else if (c->eod_mask_loss) {
        graph_give_up(r, "--eod-mask-loss weighs every micro-batch differently");
    }
}

/* The kernels of a micro-batch whose inputs are uploaded: forward, then backward. */
static int forward_backward(run *r, float fdloss, float bdloss, char *err, size_t errlen)
{
    if (eng_forward_run(r->m, r->acts, NULL, 1, fdloss, NULL)) {
        atoll_errf(err, errlen, "forward pass failed");
        return -1;
    }
    if (eng_backward(r->m, r->acts, NULL, bdloss)) {
        atoll_errf(err, errlen, "backward pass failed");
        return -1;
    }
    return 0;
}

/* One micro-batch's forward and backward on one rank (inputs k of the batch),
 * with a graph where it can. */
static int micro_batch(run *r, int k, float fdloss, float bdloss, char *err, size_t errlen)
{
    eng_model *m = r->m;
    size_t mb_tokens = (size_t)r->c->micro_batch_size * r->c->seq_length;
    if (eng_forward_inputs(m, r->acts, r->tokens + k * mb_tokens, r->targets + k * mb_tokens)) {
        atoll_errf(err, errlen, "forward pass failed");
        return -1;
    }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (r->graph_state == 2) {
        if (r->graph && (r->graph_key[0] != fdloss || r->graph_key[1] != bdloss)) graph_drop(r);
        for (int tries = 0; tries < 2 && r->graph_state == 2; tries++) {
            char why[256];
            if (!r->graph) {
                if (r->graph_records == GRAPH_RECORDS_MAX) {
                    snprintf(why, sizeof why, "the graph was recorded %d times: it is not being reused",
                             GRAPH_RECORDS_MAX);
                    graph_give_up(r, why);
                    break;
                }
                if (k_cuda_graph_begin(why, sizeof why)) {
                    graph_give_up(r, why);
                    break;
                }
                int rc = forward_backward(r, fdloss, bdloss, err, errlen);
                k_cuda_graph *g = k_cuda_graph_end(why, sizeof why);
                if (rc) {
                    k_cuda_graph_free(g);
                    return -1;
                }
                if (!g) {
                    graph_give_up(r, why);
                    break;
                }
                r->graph = g;
                r->graph_key[0] = fdloss;
                r->graph_key[1] = bdloss;
                r->graph_records++;
            }
            if (k_cuda_graph_launch(r->graph) == 0) {
                r->graph_launches++;
                return 0;
            }
            k_cuda_graph_free(r->graph); /* stale: a buffer it holds was replaced (which waited for the device) */
            r->graph = NULL;
        }
    }
    if (r->graph_state == 1) r->graph_state = 2; /* this one makes the first calls */
#endif
    return forward_backward(r, fdloss, bdloss, err, errlen);
}

static int train_step(run *r, step_stats *s, char *err, size_t errlen)
{
    if (r->d.size > 1) return train_step_dist(r, s, err, errlen);
    const atoll_config *c = r->c;
    eng_model *m = r->m;
    double t0 = atoll_mono_s();
    s->batch = step_batch(r);
    int T = c->seq_length, mbs = c->micro_batch_size, nmicro = r->d.nmicro;
    size_t mb_tokens = (size_t)mbs * T;
    if (load_batch(r, err, errlen)) return -1;
    int dump_grads = r->o->dump_dir[0] && r->st.iteration == 0;
    float *logits0 = NULL;
    eng_zero_grads(m);
    eng_set_step(m, r->st.seed, r->st.iteration + 1, 1);
    float dloss = 1.0f / (float)((double)s->batch * T);
    for (int k = 0; k < nmicro; k++) {
        /* the dump wants the logits themselves: no fused classifier then */
        float w = r->c->eod_mask_loss ? r->mb_scale[k] : 1.0f, fdloss = dump_grads && k == 0 ? 0.0f : dloss * w;
        r->acts->sample0 = r->st.consumed_samples + (long long)k * mbs;
        if (dump_grads && k == 0) { /* the dump's logits are read between forward and backward */
            if (eng_forward(m, r->acts, r->tokens + k * mb_tokens, NULL, r->targets + k * mb_tokens, fdloss, NULL) ||
                !(logits0 = malloc(mb_tokens * (size_t)m->V * sizeof(float)))) {
                atoll_errf(err, errlen, "forward pass failed");
                return -1;
            }
            eng_logits_to_host(m, r->acts, 0, m->B * m->T, logits0);
            if (eng_backward(m, r->acts, NULL, dloss * w)) {
                atoll_errf(err, errlen, "backward pass failed");
                free(logits0);
                return -1;
            }
        } else if (micro_batch(r, k, fdloss, dloss * w, err, errlen)) {
            free(logits0);
            return -1;
        }
        /* read with the gradient norm below: the host never waits for the device before it */
        eng_losses_to_host_later(m, r->acts, r->losses + k * mb_tokens);
        dist_fold_grads(&r->d, m); /* --deterministic-dp */
    }
    if (r->d.acc && dist_sync_grads(&r->d, m, &r->dopt)) { /* one rank: the fp64 sum, rounded */
        atoll_errf(err, errlen, "gradient reduction: %s", dist_error(&r->d));
        free(logits0);
        return -1;
    }
    s->it = r->st.iteration + 1;
    s->stop = stop_wanted(r);
    s->save_due = mtbf_due(r);
    uint64_t zeros = 0, *zp = zeros_due(r) ? &zeros : NULL;
    s->lr = eng_lr_at(c, sched_position(r, s->batch));
    eng_rates rates = eng_rates_at(c, sched_position(r, 0));
    int adam_t = (int)(s->it - r->st.adam_from);
    double sq = 0.0;
    /* The plain case: the clip scale computed on the device, so the optimizer is queued before the host
     * reads the norm (on a GPU it would stand idle from that read to the optimizer's launch). */
    int stepped = !r->d.acc && !zp && !r->o->dump_dir[0] &&
                  eng_optim_step_norm_clipped(r->opt, m, &rates, c->clip_grad, adam_t, &sq);
    if (stepped)
        s->grad_norm = sqrt(sq);
    else /* --deterministic-dp: the norm as the ranks of a DP run take it (dist_grad_sumsq, through a
          * float), so clipping does not depend on the world size either */
        s->grad_norm = r->d.acc ? sqrt((double)(float)dist_grad_sumsq(&r->d, m, &r->dopt, zp))
                                : sqrt(eng_grad_sumsq(m, zp));
    s->num_zeros = zp ? (double)zeros : -1.0;
    /* the norm's read waited for the device (stepped: for the reads queued before it), so the losses are here */
    s->loss = eng_losses_sum(m, r->losses, nmicro, r->c->eod_mask_loss ? r->mb_scale : NULL) / ((double)s->batch * T);
    if (r->o->dump_dir[0]) {
        int rc = dump_step(r, logits0, s->loss, err, errlen);
        free(logits0);
        if (rc) return -1;
    }
    if (!stepped) eng_optim_step(r->opt, m, &rates, eng_clip_scale(s->grad_norm, c->clip_grad), adam_t);
    return finish_step(r, s, t0, err, errlen);
}

/* Forward only over the first --eval-iters global batches of `data` (the same
 * samples every time, so evaluations compare): the validation split (test 0),
 * or once training ends the test data (test 1); the loss, the same on every
 * rank, into *valid, and rank 0 reports it (the test's under its own names,
 * without the by-samples series). */
static int evaluate(run *r, const eng_data *data, int test, double *valid, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    dist *d = &r->d;
    int T = c->seq_length, mbs = c->micro_batch_size;
    size_t mb_tokens = (size_t)mbs * T;
    double sum = 0.0;
    d->nmicro = cfg_micro_batches(c, d->dp); /* the whole global batch, as Megatron evaluates, ramp or not */
    uint64_t eb = (uint64_t)d->nmicro * mbs * d->dp; /* less with --decrease-batch-size-if-needed */
    eng_set_step(r->m, r->st.seed, r->st.iteration, 0); /* no dropout */
    for (int i = 0; i < c->eval_iters; i++) {
        for (int k = 0; k < d->nmicro; k++)
            for (int b = 0; b < mbs; b++) {
                uint64_t g = (uint64_t)i * eb + (uint64_t)dist_sample_offset(d, c, k) + (uint64_t)b;
                size_t at = ((size_t)k * mbs + (size_t)b) * T;
                if (eng_data_sample(data, g, r->tokens + at, r->targets + at, err, errlen)) return -1;
            }
        mask_eod(r);
        if (d->size > 1) {
            double ls = 0.0;
            if (dist_forward_only(&r->pipe, r->tokens, r->targets, &ls, err, errlen)) return -1;
            if (d->pp_rank == d->pp - 1 && d->tp_rank == 0) sum += ls;
            continue;
        }
        for (int k = 0; k < d->nmicro; k++) {
            double ls = 0.0;
            if (eng_forward(r->m, r->acts, r->tokens + k * mb_tokens, NULL, r->targets + k * mb_tokens, 0.0f, &ls)) {
                atoll_errf(err, errlen, "evaluation forward pass failed");
                return -1;
            }
            sum += ls * (c->eod_mask_loss ? r->mb_scale[k] : 1.0f);
        }
    }
    double loss = sum / ((double)c->eval_iters * (double)eb * T);
    float lf = (float)loss;
    if (d->size > 1) {
        if (dist_world_sum(d, &lf, 1)) {
            atoll_errf(err, errlen, "evaluation: %s", dist_error(d));
            return -1;
        }
        loss = lf;
    }
    *valid = loss;
    if (d->rank != 0) return 0;
    double ppl = exp(loss < 700 ? loss : 700);
    if (test)
        printf(" validation loss at the end of training for test data | lm loss value: %.6E | lm loss PPL: %.6E |\n",
               loss, ppl);
    else
        printf(" validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n", r->st.iteration,
               loss, ppl);
    fflush(stdout);
    if (r->tb.f) { /* Megatron's tags for the validation loss; the test's beside them */
        const char *tag = test ? "lm loss test" : "lm loss validation";
        char name[64];
        tb_scalar(&r->tb, tag, r->st.iteration, loss);
        snprintf(name, sizeof name, "%s vs samples", tag);
        if (!test) tb_scalar(&r->tb, name, r->st.consumed_samples, loss);
        if (r->c->log_validation_ppl_to_tensorboard) {
            snprintf(name, sizeof name, "%s ppl", tag);
            tb_scalar(&r->tb, name, r->st.iteration, ppl);
            snprintf(name, sizeof name, "%s ppl vs samples", tag);
            if (!test) tb_scalar(&r->tb, name, r->st.consumed_samples, ppl);
        }
        tb_flush(&r->tb);
    }
    if (r->metrics) {
        const char *key = test ? "test" : "valid";
        fprintf(r->metrics, "{\"iteration\":%lld,\"%s_loss\":%.17g,\"%s_ppl\":%.6g}\n", r->st.iteration, key,
                loss, key, ppl);
        fflush(r->metrics);
    }
    return 0;
}

/* Whether two paths name the same directory (both must exist). */
static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* What a load brings in: everything when it is this run's own checkpoint (its
 * --save: a restart, elastic or by hand, resumes exactly); from another run's,
 * --finetune takes the weights only, from iteration 0 with fresh optimizer
 * state and --seed; --no-load-optim leaves the Adam moments at zero (their bias
 * correction counts from here); --no-load-rng orders the data by --seed. A
 * fine-tune that already committed a step to its --save resumes that step. */
typedef struct {
    const char *dir; /* where to load from */
    int own;         /* this run's own checkpoint: nothing is left out */
} load_plan;

static int foreign_flags(const atoll_config *c)
{
    return c->finetune || c->no_load_optim || c->no_load_rng || c->ckpt_step;
}

static const char *foreign_names(const atoll_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s%s", c->finetune ? " --finetune" : "", c->no_load_optim ? " --no-load-optim" : "",
             c->no_load_rng ? " --no-load-rng" : "", c->ckpt_step ? " --ckpt-step" : "");
    return buf + 1;
}

/* ckpt_latest (or, with want > 0, ckpt_step_check of that step) for resuming from
 * dir, run by rank 0 alone and its answer shared: the step's files are read for their
 * checksums once, not once per rank (on a shared file system, once per job instead of
 * 8 times per node), and every rank resumes from the same step even while a save is
 * being committed. 0 with *it, 1 when dir holds no committed step (as ckpt_latest),
 * ENG_ERR_CONFIG when it holds none to resume from (a rank other than 0 says only
 * that rank 0 refused: rank 0's log says why), -1 when sharing the answer failed. */
static int agreed_step(run *r, const char *dir, ckpt_need need, long long want, long long *it, char *err,
                       size_t errlen)
{
    int rc = 0;
    /* rank 0's answer, the others adding zeros: 1 a step, 2 none committed, 3 refused; the step in two
     * 22-bit halves (exact in a float). dist_world_sum stages through the backend's memory, as NCCL needs. */
    float v[3] = { 0.0f, 0.0f, 0.0f };
    if (r->d.rank == 0) {
        if (want > 0) {
            rc = ckpt_step_check(dir, need, want, err, errlen) ? -1 : 0;
            *it = want;
        } else {
            rc = ckpt_latest(dir, need, it, err, errlen);
        }
        if (rc == 0 && (*it < 0 || *it >= 1LL << 44)) {
            atoll_errf(err, errlen, "--load %s: step %lld is out of range", dir, *it);
            rc = -1;
        }
        v[0] = rc == 0 ? 1.0f : rc == 1 ? 2.0f : 3.0f;
        if (rc == 0) v[1] = (float)(*it >> 22), v[2] = (float)(*it & ((1LL << 22) - 1));
    }
    if (dist_world_sum(&r->d, v, 3)) {
        atoll_errf(err, errlen, "--load %s: sharing rank 0's checkpoint step: %s", dir, dist_error(&r->d));
        return -1;
    }
    if (r->d.rank == 0) return rc < 0 ? ENG_ERR_CONFIG : rc;
    if (v[0] == 1.0f) {
        *it = ((long long)v[1] << 22) | (long long)v[2];
        return 0;
    }
    if (v[0] == 2.0f) return 1;
    atoll_errf(err, errlen, "--load %s: rank 0 found no checkpoint step to resume from there (its log says why)", dir);
    return ENG_ERR_CONFIG;
}

/* ---- --tune-gemms ----
 * Each rank's cuBLASLt algorithm choices (k_cuda_gemm_tuning) live in
 * DIR/gemm_choices_rank<R>.txt beside the checkpoints, rewritten after a save
 * when there are new ones (as the checkpoint's own files are written: temp,
 * fsync, rename, the directory's fsync); a run that loads a step from DIR reads them back, so
 * a restart computes with the algorithms the run had and repeats it bit for bit
 * (another algorithm sums in another order). */
#ifdef ATOLL_HAVE_CUDA_KERNELS
static int gemm_tuned(const run *r) { return r->c->tune_gemms && !strcmp(r->o->device, "cuda"); }

static void gemm_choices_path(const run *r, const char *dir, char *out, size_t n)
{
    snprintf(out, n, "%s/gemm_choices_rank%d.txt", dir, r->d.rank);
}

/* A missing file is no error (a first start, or a save before this flag);
 * one from another device or library is set aside; an unreadable one fails
 * the start (a restart would fail the same way). */
static int gemm_choices_read(run *r, const char *dir, char *err, size_t errlen)
{
    char path[4096], why[512];
    gemm_choices_path(r, dir, path, sizeof path);
    if (access(path, F_OK)) return 0;
    int rc = k_cuda_gemm_choices_load(path, why, sizeof why);
    if (rc < 0) {
        atoll_errf(err, errlen, "--tune-gemms: %s (remove it to choose the algorithms anew)", why);
        return ENG_ERR_CONFIG;
    }
    k_cuda_gemm_stats g;
    k_cuda_gemm_choices(&g);
    if (rc == 1)
        fprintf(stderr, "atoll-train: rank %d: --tune-gemms: %s: choosing anew\n", r->d.rank, why);
    else if (r->d.rank == 0)
        fprintf(stderr, "atoll-train: --tune-gemms: %d GEMM algorithm choices read from %s\n", g.loaded, path);
    r->gemm_kept = rc == 1 ? -1 : g.loaded;
    return 0;
}

/* After a save: the choices, when there are more than the file holds. */
static int gemm_choices_write(run *r, char *err, size_t errlen)
{
    k_cuda_gemm_stats g;
    k_cuda_gemm_choices(&g);
    if (g.timed + g.loaded == r->gemm_kept) return 0;
    char path[4096], why[1024];
    gemm_choices_path(r, r->c->save, path, sizeof path);
    char *text = k_cuda_gemm_choices_text();
    if (!text) {
        atoll_errf(err, errlen, "--tune-gemms: out of memory for the GEMM choices");
        return -1;
    }
    int rc = ckpt_write_text(r->c->save, path, text, why, sizeof why);
    free(text);
    if (rc) {
        atoll_errf(err, errlen, "--tune-gemms: %s", why);
        return -1;
    }
    r->gemm_kept = g.timed + g.loaded;
    return 0;
}
#endif

/* 0, *loaded 1 when a step's weights (every one) were loaded, 0 when --load held
 * no committed step; ENG_ERR_CONFIG when --load can never be resumed with this
 * configuration (no intact committed step, or one that holds another model, or
 * none at all with --exit-on-missing-checkpoint): a restart would fail the same
 * way; else -1. */
static int resume(run *r, int *loaded, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    load_plan lp = { c->load, c->save[0] && same_dir(c->load, c->save) };
    long long it;
    char names[64];
    if (!lp.own && foreign_flags(c)) {
        int rc = agreed_step(r, c->save, CKPT_RESUME, 0, &it, err, errlen);
        if (rc != 0 && rc != 1) return rc;
        if (rc == 0) {
            if (r->d.rank == 0)
                fprintf(stderr, "atoll-train: --save %s holds this run's step %lld: resuming it (%s took --load %s "
                        "on the first start)\n", c->save, it, foreign_names(c, names, sizeof names), c->load);
            lp = (load_plan){ c->save, 1 };
        }
    } else if (lp.own && foreign_flags(c) && r->d.rank == 0) { /* a restart: workerd points --load at --save */
        fprintf(stderr, "atoll-train: note: --load is this run's --save, so it resumes exactly (%s: for another "
                "run's checkpoint only)\n", foreign_names(c, names, sizeof names));
    }
    /* --ckpt-step: that step, or nothing */
    /* --finetune reads the weights alone (model.safetensors): the moments and train state start afresh */
    int weights = !lp.own && c->finetune;
    int rc = agreed_step(r, lp.dir, weights ? CKPT_WEIGHTS : CKPT_RESUME, !lp.own && c->ckpt_step ? c->ckpt_step : 0,
                         &it, err, errlen);
    if (rc != 0 && rc != 1) return rc;
    if (rc == 1) {
        if (c->exit_on_missing_checkpoint) {
            atoll_errf(err, errlen, "--load %s holds no committed checkpoint, and --exit-on-missing-checkpoint "
                       "was given (leave it out to start from iteration 0)", lp.dir);
            return ENG_ERR_CONFIG;
        }
        if (r->d.rank == 0)
            fprintf(stderr, "atoll-train: no committed checkpoint in --load %s; starting from iteration 0\n", lp.dir);
        return 0;
    }
    /* ZeRO-1 loads the full-shape moments, then keeps its shard */
    eng_optim *full = dist_optim_full(&r->d, r->m, &r->dopt);
    if (!full) { atoll_errf(err, errlen, "--load: %s", dist_error(&r->d)); return -1; }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (gemm_tuned(r) && (rc = gemm_choices_read(r, lp.dir, err, errlen))) return rc;
#endif
    rc = ckpt_load(lp.dir, it, r->m, weights ? NULL : full, &r->st, err, errlen);
    if (rc) return rc == CKPT_MISMATCH ? ENG_ERR_CONFIG : -1;
    *loaded = 1;
    int fresh_optim = !lp.own && (c->finetune || c->no_load_optim);
    if (fresh_optim) {
        r->m->k->zero(full->m, r->m->num_floats * sizeof(float));
        r->m->k->zero(full->v, r->m->num_floats * sizeof(float));
        r->st.adam_from = r->st.iteration;
    }
    if (!lp.own && c->finetune) {
        r->st.iteration = r->st.consumed_samples = r->st.adam_from = 0;
        r->st.nsteps = 0;
    }
    if (!lp.own && (c->finetune || c->no_load_rng)) r->st.seed = c->seed;
    dist_optim_scatter_loaded(&r->d, r->m, &r->dopt);
    r->data.seed = r->st.seed;
    if (r->d.rank != 0) return 0;
    if (r->st.seed != c->seed)
        fprintf(stderr, "atoll-train: note: checkpoint was trained with --seed %llu; data order continues "
                "with it\n", (unsigned long long)r->st.seed);
    if (!lp.own && c->finetune)
        printf("loaded the weights of checkpoint %s/iter_%07lld to fine-tune from iteration 0 (fresh optimizer "
               "state, --seed %llu)\n", lp.dir, it, (unsigned long long)c->seed);
    else
        printf("loaded checkpoint %s/iter_%07lld (consumed samples %lld%s%s)\n", lp.dir, it, r->st.consumed_samples,
               fresh_optim ? "; Adam moments start at zero: --no-load-optim" : "",
               !lp.own && c->no_load_rng ? "; data ordered by --seed: --no-load-rng" : "");
    return 0;
}

/* The training data, and the validation and test data when evaluation asks for
 * them: --data-path's splits by --split, or the per-split paths each whole. */
static int open_datasets(run *r, const eng_data_paths *p, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    int per_split = p->split[ENG_SPLIT_TRAIN][0] != 0;
    if (per_split ? eng_data_open_whole(&r->data, "--train-data-path", p->split[ENG_SPLIT_TRAIN], ENG_SPLIT_TRAIN,
                                        c->seq_length, c->vocab_size, c->seed, err, errlen)
                  : eng_data_open(&r->data, p->blend, c->split, c->seq_length, c->vocab_size, c->seed, err, errlen))
        return ENG_ERR_CONFIG;
    r->have_data = 1;
    if (c->eval_interval > 0 && c->eval_iters > 0 && (!per_split || p->split[ENG_SPLIT_VALID][0])) {
        if (per_split ? eng_data_open_whole(&r->valid, "--valid-data-path", p->split[ENG_SPLIT_VALID], ENG_SPLIT_VALID,
                                            c->seq_length, c->vocab_size, c->seed, err, errlen)
                      : eng_data_open_split(&r->valid, p->blend, c->split, ENG_SPLIT_VALID, c->seq_length,
                                            c->vocab_size, c->seed, err, errlen))
            return ENG_ERR_CONFIG;
        r->have_valid = 1;
    }
    if (p->split[ENG_SPLIT_TEST][0] && c->eval_iters > 0) {
        if (eng_data_open_whole(&r->test, "--test-data-path", p->split[ENG_SPLIT_TEST], ENG_SPLIT_TEST, c->seq_length,
                                c->vocab_size, c->seed, err, errlen))
            return ENG_ERR_CONFIG;
        r->have_test = 1;
    } else if (!per_split && p->blend[0] && c->eval_iters > 0 && eng_split_weighs(c->split, ENG_SPLIT_TEST)) {
        /* --split's test part, evaluated at the end as Megatron does; a part too small for
         * one sample (the default 969,30,1 of a small corpus) is said and skipped */
        char why[1024];
        if (eng_data_open_split(&r->test, p->blend, c->split, ENG_SPLIT_TEST, c->seq_length, c->vocab_size,
                                c->seed, why, sizeof why)) {
            if (r->d.rank == 0) fprintf(stderr, "atoll-train: note: no test evaluation at the end: %s\n", why);
        } else {
            r->have_test = 1;
        }
    }
    return 0;
}


/* 0; ENG_ERR_CONFIG when the configuration or its inputs are refused (the device,
 * the attention backend, --dump-dir, the data, --save, --load, --metrics-file); else -1. */
static int setup(run *r, char *err, size_t errlen)
{
    const atoll_config *c = r->c;
    const k_ops *k = eng_backend(r->o->device, err, errlen);
    if (!k) return ENG_ERR_CONFIG;
    if (!strcmp(c->attention_backend, "fused") && (strcmp(r->o->device, "cuda") || !c->bf16)) {
        atoll_errf(err, errlen, "--attention-backend fused is cuDNN's bf16 attention: it needs --device cuda "
                   "--bf16 (this run: --device %s%s)", r->o->device, c->bf16 ? " --bf16" : "");
        return ENG_ERR_CONFIG;
    }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!strcmp(r->o->device, "cuda") &&
        k_cuda_fused_attention(!strcmp(c->attention_backend, "fused")   ? K_CUDA_ATTN_FUSED
                               : !strcmp(c->attention_backend, "flash") ? K_CUDA_ATTN_FLASH
                                                                        : K_CUDA_ATTN_AUTO,
                               err, errlen))
        return ENG_ERR_CONFIG;
    if (gemm_tuned(r)) k_cuda_gemm_tuning(1);
    if (!strcmp(r->o->device, "cuda")) k_cuda_attention_atomic_dq(c->nondeterministic_attention);
    if (!strcmp(r->o->device, "cuda") && c->overlap_wgrad && !k_cuda_overlap_wgrad(1))
        fprintf(stderr, "atoll-train: note: --overlap-wgrad: no room for a second GEMM workspace (32 MiB): the weight "
                "gradients run in order\n");
#endif
    r->gemm_kept = -1;
    if (dist_init(&r->d, c, k, err, errlen)) return -1;
    r->have_dist = 1;
    graph_setup(r);
    if (c->tune_gemms && strcmp(r->o->device, "cuda") && r->d.rank == 0)
        fprintf(stderr, "atoll-train: note: --tune-gemms chooses cuBLASLt's algorithms: nothing to choose on "
                "--device %s\n", r->o->device);
    if (c->overlap_wgrad && strcmp(r->o->device, "cuda") && r->d.rank == 0)
        fprintf(stderr, "atoll-train: note: --overlap-wgrad runs the weight-gradient GEMMs on a second CUDA stream: "
                "nothing changes on --device %s\n", r->o->device);
    if (c->nondeterministic_attention && r->d.rank == 0 &&
        (strcmp(r->o->device, "cuda") || !c->bf16 || !strcmp(c->attention_backend, "flash")))
        fprintf(stderr, "atoll-train: note: --nondeterministic-attention sums cuDNN's attention gradients by atomic "
                "adds (cuda --bf16, --attention-backend auto or fused): nothing changes on %s\n",
                strcmp(r->o->device, "cuda") ? "the CPU" : !c->bf16 ? "cuda without --bf16"
                                                                   : "--attention-backend flash (deterministic)");
    metrics_emit_open(&r->emit, r->d.rank);
    r->have_emit = 1;
    r->wd = watchdog_start(r->d.world, &r->emit); /* from here a hang names where this rank is */
    if (r->d.size > 1 && r->o->dump_dir[0]) {
        atoll_errf(err, errlen, "--dump-dir is a single-rank test hook; run it without --nproc-per-node");
        return ENG_ERR_CONFIG;
    }
    eng_layout lay = dist_layout(&r->d, c);
    if (!(r->m = eng_model_create(c, &lay, k, err, errlen))) return -1;
    r->m->tp = dist_tp_comm(&r->d);
    if (dist_optim_init(&r->dopt, &r->d, r->m, c->use_distributed_optimizer, err, errlen)) return -1;
    r->have_dopt = 1;
    if (c->deterministic_dp && dist_deterministic_init(&r->d, r->m, err, errlen)) return -1;
    r->opt = r->dopt.full;
    if (r->d.size > 1) {
        dist_pipe_init(&r->pipe, &r->d, r->m);
        r->have_pipe = 1;
    } else if (!(r->acts = eng_acts_create(r->m, 0))) {
        atoll_errf(err, errlen, "out of memory for the activations");
        return -1;
    }
    size_t n = (size_t)cfg_batch_max(c, r->d.dp) * c->seq_length; /* a schedule's batch may pass the last one */
    r->tokens = malloc(n * sizeof(int32_t));
    r->targets = malloc(n * sizeof(int32_t));
    r->losses = malloc(n * sizeof(float));
    if (!r->tokens || !r->targets || !r->losses) { atoll_errf(err, errlen, "out of memory"); return -1; }
    if (c->eod_mask_loss || c->reset_attention_mask || c->reset_position_ids) {
        if ((r->eod = tok_config_eod(c, err, errlen)) < 0) return ENG_ERR_CONFIG;
        r->m->doc_eod = r->eod;
    }
    if (c->eod_mask_loss) {
        if (!(r->mb_scale = calloc((size_t)(cfg_batch_max(c, r->d.dp) / (c->micro_batch_size * r->d.dp)) + 1,
                                   sizeof(float)))) {
            atoll_errf(err, errlen, "out of memory");
            return -1;
        }
        if (r->have_pipe) r->pipe.mb_scale = r->mb_scale;
    }
    /* the data: --data-path split by --split, or --train/valid/test-data-path each whole (or the files of
     * --data-args-path, --per-split-data-args-path holding them) */
    const char *const split_paths[3] = { c->train_data_path, c->valid_data_path, c->test_data_path };
    eng_data_paths dp;
    if (eng_data_paths_load(&dp, c->data_path, split_paths, c->data_args_path, c->per_split_data_args_path, err,
                            errlen))
        return ENG_ERR_CONFIG;
    int drc = open_datasets(r, &dp, err, errlen);
    eng_data_paths_free(&dp);
    if (drc) return drc;
    /* Fail now, not after the first --save-interval iterations of work. */
    if (c->save[0] && ((mkdir(c->save, 0755) && errno != EEXIST) || access(c->save, W_OK))) {
        atoll_errf(err, errlen, "--save %s: cannot create or write the directory: %s", c->save, strerror(errno));
        return ENG_ERR_CONFIG;
    }
    /* A job's ranks (workerd's ATOLL_JOB_ID > 0) write --save for their placement alone: rank 0 claims it
     * before anything is loaded from it, so an older placement still running somewhere stops at its next save
     * (checkpoint.h) and this one resumes from the newest step committed before the claim. */
    uint64_t job = 0;
    uint32_t epoch = 0;
    char why[256];
    if (getenv("ATOLL_JOB_ID") && !store_scope_from_env(&job, &epoch, why, sizeof why)) ckpt_set_owner(job, epoch);
    if (c->save[0] && r->d.rank == 0) {
        int crc = ckpt_claim(c->save, err, errlen);
        if (crc) {
            char why2[512];
            snprintf(why2, sizeof why2, "%s", err);
            atoll_errf(err, errlen, "--save %s: %s", c->save, why2);
            return ENG_ERR_CONFIG; /* superseded, or placement.txt unwritable: a restart would fail the same way */
        }
    }
    r->st.seed = c->seed;
    int loaded = 0;
    int rc = c->load[0] ? resume(r, &loaded, err, errlen) : 0;
    if (rc) return rc;
    /* Only a run that loaded no step initialises the weights: a step writes every one, and drawing
     * them first would be thrown away (about 4 s for 124M parameters here, per rank and restart). */
    if (!loaded) {
        if (eng_init_params(r->m, c->seed)) {
            atoll_errf(err, errlen, "out of memory initialising the parameters");
            return -1;
        }
        dist_optim_take_params(&r->dopt, &r->d, r->m);
    }
    eng_params_updated(r->m); /* the bf16 copy of what init or the checkpoint wrote */
    r->start_iteration = r->st.iteration;
    if (r->d.rank == 0 && r->o->metrics_file[0] && !(r->metrics = fopen(r->o->metrics_file, "a"))) {
        atoll_errf(err, errlen, "--metrics-file %s: %s", r->o->metrics_file, strerror(errno));
        return ENG_ERR_CONFIG;
    }
    if (r->d.rank == 0 && c->tensorboard_dir[0] && tb_open(&r->tb, c->tensorboard_dir, err, errlen))
        return ENG_ERR_CONFIG;
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
    ckpt_async_free(r->pending); /* after an error: let its writer finish with the model it reads */
    r->pending = NULL;
    if (r->m) graph_drop(r);
    if (r->wd) {
        watchdog_phase(r->wd, "done", r->st.iteration);
        watchdog_stop(r->wd);
    }
    if (r->have_emit) metrics_emit_close(&r->emit);
    if (r->metrics) fclose(r->metrics);
    tb_close(&r->tb);
    if (r->have_data) eng_data_close(&r->data);
    if (r->have_valid) eng_data_close(&r->valid);
    if (r->have_test) eng_data_close(&r->test);
    free(r->tokens);
    free(r->targets);
    free(r->losses);
    free(r->mb_scale);
    if (r->m) {
        if (r->have_pipe) dist_pipe_free(&r->pipe);
        eng_acts_free(r->m, r->acts);
        if (r->have_dopt) dist_optim_free(&r->dopt, r->m->k);
        eng_model_free(r->m);
    }
    if (r->have_dist) dist_free(&r->d);
}

/* What this rank writes of a checkpoint: DP rank 0 of each model shard its
 * parameter slices and (without ZeRO-1) its optimizer slices; under ZeRO-1 every
 * DP rank its shard's part of the full-shape optimizer tensors. 0 when it writes
 * nothing (a DP replica). */
static int my_part(run *r, ckpt_part *part)
{
    dist *d = &r->d;
    dist_optim *o = &r->dopt;
    memset(part, 0, sizeof *part);
    if (o->zero && d->size > 1) {
        size_t lo = o->shard * (size_t)d->dp_rank, hi = lo + o->shard;
        if (hi > r->m->num_floats) hi = r->m->num_floats;
        if (lo > hi) lo = hi;
        *part = (ckpt_part){ d->dp_rank == 0, { o->master, o->m, o->v }, lo, hi, NULL, 0 };
        return 1;
    }
    if (d->size > 1 && d->dp_rank != 0) return 0;
    *part = (ckpt_part){ 1, { r->m->params, r->opt->m, r->opt->v }, 0, r->m->num_floats, NULL, 0 };
    return 1;
}

/* Every rank writes its part, then rank 0 commits the step. */
static int save(run *r, char *err, size_t errlen)
{
    dist *d = &r->d;
    if (d->size == 1) return ckpt_save(r->c->save, r->m, r->opt, &r->st, err, errlen);
    ckpt_part part;
    int rc = my_part(r, &part) ? ckpt_write_part(r->c->save, r->st.iteration, r->m, &part, d->rank == 0, err, errlen)
                               : 0;
    if (rc) return rc;
    comm *w = comm_world_comm(d->world);
    if (comm_barrier(w) || (d->rank == 0 && (rc = ckpt_commit(r->c->save, &r->st, r->c, err, errlen))) ||
        comm_barrier(w)) {
        if (!err[0]) atoll_errf(err, errlen, "--save: %s", dist_error(d));
        return rc ? rc : -1;
    }
    return 0;
}

/* ---- --async-save ---- */

/* Rank 0's (or a single rank's) save just committed: report it. */
static void async_committed(run *r)
{
    r->ckpt_committed = r->pending_it;
    r->save_s = ckpt_async_seconds(r->pending);
}

/* After each step: a failed write fails the run; once every part is durable,
 * rank 0 commits in the background; a committed or (elsewhere) durable save is done. */
static int async_poll(run *r, const step_stats *s, char *err, size_t errlen)
{
    if (!r->pending_it) return 0;
    if (r->pending && ckpt_async_durable(r->pending) < 0) {
        return ckpt_async_wait(r->pending, err, errlen);
    }
    if (s->saves_durable || r->d.size == 1) r->pending_seen = 1;
    if (!r->pending_seen) return 0;
    if (r->d.rank == 0 && r->pending) {
        ckpt_async_commit(r->pending); /* (once) */
        if (!ckpt_async_committed(r->pending)) return 0;
        async_committed(r);
    }
    ckpt_async_free(r->pending); /* this rank's part is on disk: nothing left to do here */
    r->pending = NULL;
    r->pending_it = 0;
    r->pending_seen = 0;
    return 0;
}

/* Finishes the save in flight before another, or before the end. When some part
 * is not known durable yet, all ranks wait for their own writes and meet in a
 * barrier, then rank 0 commits. (pending_it and pending_seen are equal on every
 * rank except where rank 0 already finished: the same branch everywhere.) */
static int async_drain(run *r, char *err, size_t errlen)
{
    if (!r->pending_it) return 0;
    int rc = r->pending ? ckpt_async_wait(r->pending, err, errlen) : 0;
    if (rc) return rc;
    if (!r->pending_seen && r->d.size > 1 && comm_barrier(comm_world_comm(r->d.world))) {
        atoll_errf(err, errlen, "--async-save: %s", dist_error(&r->d));
        return -1;
    }
    if (r->d.rank == 0 && r->pending) {
        ckpt_async_commit(r->pending);
        if ((rc = ckpt_async_wait(r->pending, err, errlen))) return rc;
        async_committed(r);
    }
    ckpt_async_free(r->pending);
    r->pending = NULL;
    r->pending_it = 0;
    r->pending_seen = 0;
    return 0;
}

/* Snapshots this rank's part (what save() writes) and writes it in the background. */
static int save_async(run *r, char *err, size_t errlen)
{
    int rc = async_drain(r, err, errlen);
    if (rc) return rc;
    ckpt_part part;
    if (my_part(r, &part) && !(r->pending = ckpt_async_start(r->c->save, r->m, &part, r->d.rank == 0, &r->st,
                                                             r->d.size == 1, err, errlen)))
        return -1;
    r->pending_it = r->st.iteration;
    r->pending_seen = 0;
    return 0;
}

/* A save, timed: its stall is reported with the next step, and rank 0 (which
 * commits) reports the step as committed. `final`: the run's last save, which
 * is complete when this returns. */
static int save_timed(run *r, int final, char *err, size_t errlen)
{
    watchdog_phase(r->wd, "save", r->st.iteration);
    double t0 = atoll_mono_s();
    int rc;
    if (r->c->async_save && !final) {
        rc = save_async(r, err, errlen);
    } else {
        rc = async_drain(r, err, errlen);
        if (!rc) rc = save(r, err, errlen);
        if (!rc) {
            r->ckpt_committed = r->st.iteration;
            r->save_s = atoll_mono_s() - t0;
        }
    }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!rc && gemm_tuned(r)) rc = gemm_choices_write(r, err, errlen);
#endif
    double stall = atoll_mono_s() - t0;
    r->stall_unreported += stall;
    r->stall_avg = r->stall_avg > 0 ? 0.7 * r->stall_avg + 0.3 * stall : stall;
    r->last_save_t = atoll_mono_s();
    r->last_save_it = r->st.iteration;
    if (r->c->save_mtbf > 0 && r->d.rank == 0 && !final) {
        printf("atoll-train: saved iteration %lld (stall %.1f ms); --save-mtbf %.0f s: next save in Tc = "
               "sqrt(2 x MTBF x Ts) = %.1f s\n", r->st.iteration, stall * 1e3, r->c->save_mtbf,
               sqrt(2.0 * r->c->save_mtbf * r->stall_avg));
        fflush(stdout);
    }
    watchdog_phase(r->wd, "step", r->st.iteration);
    return rc;
}

int eng_train(const atoll_config *cfg, const eng_run_opts *o, char *err, size_t errlen)
{
    double t_start = atoll_mono_s();
    atoll_config c = *cfg;
    const char *ws = getenv("WORLD_SIZE");
    int world = ws ? atoi(ws) : 1;
    /* The vocabulary the tokenizer needs, then the one validator (common/config),
     * before anything is allocated. */
    if (tok_config_vocab(&c, err, errlen) || cfg_validate_layout(&c, world, 0, err, errlen)) return ENG_ERR_CONFIG;
    if (!c.global_batch_size) c.global_batch_size = cfg_global_batch(&c, cfg_data_parallel_size(&c, world));
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    eng_memory need;
    double in_use0; /* the GPU's memory in use before this run allocated anything */
    if (eng_memory_check(&c, world, lws ? atoi(lws) : 1, o->device, &need, &in_use0, err, errlen))
        return ENG_ERR_CONFIG;
    run r;
    memset(&r, 0, sizeof r);
    r.c = &c;
    r.o = o;
    r.t_start = t_start;
    int rc = setup(&r, err, errlen), refused = rc == ENG_ERR_CONFIG;
    if (!rc && r.d.rank == 0) {
        printf("atoll-train: %s, %d layers, hidden %d, %d heads, seq %d, vocab %d, %.0f parameters, "
               "data: %s (%llu samples per epoch)\n",
               r.m->k->name, c.num_layers, c.hidden_size, c.num_attention_heads, c.seq_length,
               c.vocab_size, cfg_num_params(&c), r.data.source, (unsigned long long)r.data.nsamples);
        char split[160] = ""; /* layers per pipeline stage, when not all the same */
        if (c.decoder_first_pipeline_num_layers || c.decoder_last_pipeline_num_layers) {
            size_t at = (size_t)snprintf(split, sizeof split, "; layers per stage");
            for (int s = 0; s < r.d.pp && at < sizeof split; s++)
                at += (size_t)snprintf(split + at, sizeof split - at, "%s%d", s ? ", " : " ", cfg_stage_num_layers(&c, s));
        }
        if (r.d.size > 1)
            printf("atoll-train: %d ranks: tp %d, pp %d (%d model chunks per rank%s), dp %d, %d micro-batches per "
                   "rank%s%s%s; collectives on %s\n", r.d.size, r.d.tp, r.d.pp, r.d.v, split, r.d.dp, r.d.nmicro,
                   r.m->sp ? ", sequence parallel" : "", r.dopt.zero ? ", distributed optimizer" : "",
                   c.recompute_granularity ? (c.recompute_granularity == RECOMPUTE_FULL ? ", full recompute"
                                                                                         : ", selective recompute") : "",
                   comm_world_backend(r.d.world) == COMM_BACKEND_NCCL ? "NCCL"
                   : strcmp(r.m->k->name, "cuda") ? "the host transport"
                   : "the host transport (the ranks share a GPU: device buffers staged through page-locked memory)");
        int whole = cfg_step_batch(&c, r.d.dp);
        if (whole < c.global_batch_size)
            printf("atoll-train: note: --decrease-batch-size-if-needed: %d samples a step, not the global batch %d: "
                   "it is not whole micro-batches of %d on %d data-parallel rank%s%s (a placement where it is "
                   "trains on it again)\n", whole, c.global_batch_size, c.micro_batch_size, r.d.dp,
                   r.d.dp > 1 ? "s" : "", r.d.v > 1 ? " in rounds of pp" : "");
        fflush(stdout);
    }
    /* A restart of the job (a later placement, ATOLL_JOB_EPOCH > 0) reports the steps
     * its checkpoint recorded again: those whose reports were lost with a node
     * (queued in its supervisor) come back to the coordinator. */
    const char *epoch = getenv("ATOLL_JOB_EPOCH");
    for (int i = 0; !rc && r.d.rank == 0 && epoch && atoi(epoch) > 0 && i < r.st.nsteps; i++) {
        rank_step rs = { .iteration = r.st.steps[i].iteration, .loss = r.st.steps[i].loss, .lr = r.st.steps[i].lr,
                         .grad_norm = r.st.steps[i].grad_norm, .stage = -1, .start_iteration = r.start_iteration,
                         .from_checkpoint = 1 };
        metrics_emit_step(&r.emit, &rs);
    }
    if (c.save[0]) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, NULL);
    }
    long long last_saved = r.st.iteration;
    r.last_save_it = r.st.iteration;
    r.last_save_t = atoll_mono_s();
    int stopped = 0;
    long long stop = c.train_iters;
    if (c.exit_interval > 0 && c.exit_interval < stop) stop = c.exit_interval;
    int first = 1;
    while (!rc && r.st.iteration < stop) {
        step_stats s;
        memset(&s, 0, sizeof s);
        s.pp = 1;
        watchdog_phase(r.wd, "step", r.st.iteration);
        double comm0 = comm_thread_comm_s(), t0 = atoll_mono_s();
        if ((rc = train_step(&r, &s, err, errlen))) break;
        s.compute_s = s.step_s - (comm_thread_comm_s() - comm0);
        if (s.compute_s < 0) s.compute_s = 0;
        s.start_iteration = r.start_iteration;
        if (first) s.startup_s = t0 - r.t_start;
        first = 0;
        s.checkpoint_iteration = r.ckpt_committed;
        s.save_s = r.save_s;
        s.save_stall_s = r.stall_unreported;
        r.stall_unreported = 0;
        watchdog_step_time(r.wd, s.step_s);
        ckpt_note_step(&r.st, s.it, s.loss, s.lr, s.grad_norm);
        log_step(&c, &s, r.metrics, &r.tb, &r.emit, &r.d);
        if (r.have_valid && (s.it % c.eval_interval == 0 || s.it == stop)) {
            watchdog_phase(r.wd, "eval", r.st.iteration);
            if ((rc = evaluate(&r, &r.valid, 0, &s.valid_loss, err, errlen))) break;
            /* the step again, with its validation loss; its save stall was reported once */
            step_stats again = s;
            again.save_stall_s = 0;
            emit_step(&again, &r.emit, &r.d);
        }
        if ((rc = async_poll(&r, &s, err, errlen))) break;
        int due = c.save_mtbf > 0 ? s.save_due : c.save_interval > 0 && s.it % c.save_interval == 0;
        if (c.save[0] && due && s.it < stop && !s.stop) {
            if ((rc = save_timed(&r, 0, err, errlen))) break;
            last_saved = s.it;
        }
        if (s.stop && s.it < stop) { /* on the last step it is simply done */
            stopped = 1;
            break;
        }
    }
    if (!rc && c.save[0] && last_saved != r.st.iteration)
        rc = save_timed(&r, 1, err, errlen);
    if (!rc) rc = async_drain(&r, err, errlen);
    if (!rc && !stopped && r.have_test && r.st.iteration >= c.train_iters) { /* Megatron's end-of-training test */
        double test_loss;
        watchdog_phase(r.wd, "eval", r.st.iteration);
        rc = evaluate(&r, &r.test, 1, &test_loss, err, errlen);
    }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!rc && r.d.rank == 0 && c.bf16 && !strcmp(r.o->device, "cuda") && strcmp(c.attention_backend, "flash")) {
        long fused = 0, flash = 0;
        k_cuda_attention_calls(&fused, &flash);
        printf("atoll-train: attention calls on cuDNN's fused attention: %ld, on the flash kernels: %ld; cuDNN "
               "workspace %.1f MiB%s\n", fused, flash, k_cuda_attention_workspace_held() / 1048576.0,
               k_cuda_attention_atomic_plans() ? "; the backward's dQ summed by atomic adds (not bit-reproducible)"
                                               : "");
    }
    if (!rc && r.d.rank == 0 && !strcmp(r.o->device, "cuda"))
        printf("atoll-train: the host waited for the GPU %ld times (start-up and %lld steps)\n", k_cuda_host_waits(),
               r.st.iteration - r.start_iteration);
    if (!rc && r.d.rank == 0 && !strcmp(r.o->device, "cuda") && in_use0 >= 0) {
        /* the memory check's estimate against what the run took: the peak of the GPU's memory in use (the
         * CUDA libraries' own, NCCL's and the backend's scratch included) less what was in use before */
        const double gib = 1024.0 * 1024.0 * 1024.0;
        double took = (double)memory_peak(r.m->k) - in_use0;
        printf("atoll-train: device memory: the run took %.3f GiB at its peak; the check before the start estimated "
               "%.3f GiB (%.3f of weights, gradients and optimizer state, %.3f of activations, %.3f of cuDNN "
               "workspace)\n", took / gib, need.total_bytes / gib, need.state_bytes / gib, need.act_bytes / gib,
               need.attn_workspace_bytes / gib);
    }
#ifdef ATOLL_HAVE_CUDA_KERNELS
    if (!rc && r.d.rank == 0 && c.overlap_wgrad && !strcmp(r.o->device, "cuda"))
        printf("atoll-train: --overlap-wgrad: %ld weight gradients queued beside the backward (a graph's once, as "
               "recorded)\n",
               k_cuda_overlap_wgrad_calls());
#endif
    if (!rc && r.d.rank == 0 && r.graph_records)
        printf("atoll-train: --enable-cuda-graph: %ld graph%s recorded, %ld micro-batches launched from them\n",
               r.graph_records, r.graph_records == 1 ? "" : "s", r.graph_launches);
    if (!rc && r.d.rank == 0 && gemm_tuned(&r)) {
        k_cuda_gemm_stats g;
        k_cuda_gemm_choices(&g);
        char found[200] = "";
        if (g.timed && g.first_ms > 0)
            snprintf(found, sizeof found, " (timed on their first calls: %.1f%% less than cuBLASLt's first choices, "
                     "%d needing no workspace, %d splitting K in place)", 100.0 * (1.0 - g.chosen_ms / g.first_ms),
                     g.no_workspace, g.in_place);
        printf("atoll-train: --tune-gemms: GEMM algorithms chosen by time: %d%s, read from --save: %d%s\n", g.timed,
               found, g.loaded, c.save[0] ? "" : " (no --save: a restart chooses anew)");
        char *report = k_cuda_gemm_tuning_report(), *nl; /* a line a problem timed */
        for (char *line = report; line && (nl = strchr(line, '\n')); line = nl + 1)
            printf("atoll-train: --tune-gemms:   %.*s\n", (int)(nl - line), line);
        free(report);
    }
#endif
    if (!rc && stopped && r.d.rank == 0) {
        if (stop_requested)
            printf("atoll-train: stopped on SIGTERM after iteration %lld; checkpoint committed in %s "
                   "(resume with --load %s)\n", r.st.iteration, c.save, c.save);
        else
            printf("atoll-train: stopped at --exit-duration-in-mins %g after iteration %lld; checkpoint committed "
                   "in %s (resume with --load %s)\n", c.exit_duration_in_mins, r.st.iteration, c.save, c.save);
        fflush(stdout);
    }
    teardown(&r);
    /* a save refused because another placement holds --save (checkpoint.h) is final too */
    return rc ? (refused || rc == CKPT_SUPERSEDED ? ENG_ERR_CONFIG : -1) : stopped;
}
