/* optimizer: AdamW over the param table, global-norm clipping and the learning
 * rate schedule (warmup, then cosine/linear decay to --min-lr), as Megatron does.
 *
 * The Adam moments live in two allocations with the params' layout, so the
 * k_ops adamw kernel runs once per tensor with that tensor's weight decay (2-D
 * weights decay, biases and LayerNorm do not). In fp32 the params are the master
 * weights. Ownership: eng_optim owns m and v. */
#ifndef ATOLL_ENGINE_OPTIMIZER_H
#define ATOLL_ENGINE_OPTIMIZER_H

#include "model.h"

/* The flat buffer [lo, hi) as runs of equal weight decay for one
 * adamw_segments call: each tensor with the padding after it, neighbours of
 * equal decay merged, ends relative to lo (host memory, owned). */
typedef struct eng_adamw_segs {
    int n;
    size_t *end;
    float *wd;
} eng_adamw_segs;
int eng_adamw_segs_build(eng_adamw_segs *s, const eng_model *m, size_t lo, size_t hi);
void eng_adamw_segs_free(eng_adamw_segs *s);

typedef struct eng_optim {
    const k_ops *k;
    float *m, *v;   /* backend memory, model->num_floats each */
    size_t n;
    eng_adamw_segs segs; /* the whole buffer's weight-decay segments */
} eng_optim;

eng_optim *eng_optim_create(const eng_model *m);
void eng_optim_free(eng_optim *o);

/* Sum of squared gradients of the tensors this rank is responsible for in the
 * global norm: tied copies are skipped, and TP-replicated tensors count on TP
 * rank 0 only, so a sum over all ranks counts every logical element once. */
double eng_grad_sumsq(const eng_model *m);

/* Sums of squares over ranges of one flat buffer with as few backend calls
 * (each a host sync) as possible: consecutive ranges merge into one run, the
 * zero padding between tensors included; break ends a run (a tensor that must
 * not count lies between). For one rank with tp = 1 that is one call. */
typedef struct eng_sumsq_runs {
    const k_ops *k;
    const float *base;
    size_t lo, hi;
    double sum;
} eng_sumsq_runs;
void eng_sumsq_runs_begin(eng_sumsq_runs *r, const k_ops *k, const float *base);
void eng_sumsq_runs_add(eng_sumsq_runs *r, size_t lo, size_t hi);
void eng_sumsq_runs_break(eng_sumsq_runs *r);

/* Megatron's clip coefficient: min(1, clip / (norm + 1e-6)); 1 when clip <= 0. */
float eng_clip_scale(double grad_norm, double clip);

/* Learning rate of iteration `it` (1-based), Megatron's schedule: linear warmup
 * over --lr-warmup-iters from --lr-warmup-init (0) to --lr, then the
 * --lr-decay-style (cosine, linear, constant, WSD: constant then the final
 * --lr-wsd-decay-iters by --lr-wsd-decay-style, inverse-square-root) down to
 * --min-lr at --lr-decay-iters (default --train-iters), --min-lr after. `it`
 * is where the schedule stands: the samples consumed by the end of the step, in
 * global batches (Megatron's schedule counts samples), the iteration itself
 * while every step takes the global batch; a fraction under
 * --rampup-batch-size or --decrease-batch-size-if-needed. */
double eng_lr_at(const atoll_config *c, double it);

/* One AdamW step t (1-based) on every tensor, gradients scaled by grad_scale;
 * under --bf16 the bf16 copy of the params is updated in the same pass. */
void eng_optim_step(eng_optim *o, eng_model *m, double lr, float grad_scale, int t);

#endif
