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

/* What one optimizer step applies, from where the schedule stands (eng_rates_at). */
typedef struct eng_rates {
    double lr;           /* the learning rate */
    double lr_decoupled; /* the embeddings' and output layer's (eng_param.decoupled): --decoupled-lr's, else lr */
    double wd;           /* the weight decay of the tensors that take it */
} eng_rates;

/* The flat buffer [lo, hi) as runs of tensors alike (weight decay or not; with
 * --decoupled-lr, decoupled or not) for adamw_segments calls: each tensor with
 * the padding after it, neighbours alike merged, ends relative to lo (host
 * memory, owned). Without --decoupled-lr one call does every run. */
typedef struct eng_adamw_segs {
    int n;
    size_t *end;
    float *decay;      /* 1 where the run's tensors take weight decay (eng_param.decay), else 0 */
    char *decoupled;   /* 1 where they take --decoupled-lr's rate */
    float *wd;         /* scratch: the step's decay of each run */
    size_t *end_from;  /* scratch: ends relative to a call's first run */
} eng_adamw_segs;
int eng_adamw_segs_build(eng_adamw_segs *s, const eng_model *m, size_t lo, size_t hi);
void eng_adamw_segs_free(eng_adamw_segs *s);
/* One AdamW step over every run of s, the buffers starting where the runs do
 * (param_bf16 may be NULL): an adamw_segments call per stretch of runs at one
 * rate. Needs k->adamw_segments and s->n <= K_ADAMW_MAX_SEGS. */
void eng_adamw_segs_step(eng_adamw_segs *s, const k_ops *k, const atoll_config *c, float *master,
                         uint16_t *param_bf16, const float *grad, float *m, float *v, const eng_rates *r,
                         float grad_scale, int t);

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
 * rank 0 only, so a sum over all ranks counts every logical element once.
 * With zeros non-NULL, also how many of those elements are exactly 0 there
 * (Megatron's --log-num-zeros-in-grad). */
double eng_grad_sumsq(const eng_model *m, uint64_t *zeros);
/* The same over any buffer laid out as the parameters, restricted to its flat
 * elements [from, to): base points at element `from` (a ZeRO shard), and only
 * the tensors eng_counts_in_norm says count are summed. */
double eng_sumsq_range(const eng_model *m, const float *base, size_t from, size_t to, uint64_t *zeros);
/* Whether tensor p counts on this rank in a norm over all ranks: not a tied
 * copy, and a TP-replicated tensor on TP rank 0 only. */
int eng_counts_in_norm(const eng_model *m, const eng_param *p);

/* Sums of squares over ranges of one flat buffer with as few backend calls
 * (each a host sync) as possible: consecutive ranges merge into one run, the
 * zero padding between tensors included; break ends a run (a tensor that must
 * not count lies between). For one rank with tp = 1 that is one call. With
 * count, each run's nonzeros are counted too (a second call), and the zeros
 * are the elements added less those: the padding, all zero, is in no tensor. */
typedef struct eng_sumsq_runs {
    const k_ops *k;
    const float *base;
    size_t lo, hi;
    double sum;
    int count;
    uint64_t elems, nonzero; /* with count: elements of the ranges added, nonzeros of the runs */
    int runs;                /* runs ended so far, and the last: [run_lo, run_hi) (with k NULL, nothing is summed) */
    size_t run_lo, run_hi;
} eng_sumsq_runs;
void eng_sumsq_runs_begin(eng_sumsq_runs *r, const k_ops *k, const float *base, int count);
void eng_sumsq_runs_add(eng_sumsq_runs *r, size_t lo, size_t hi);
void eng_sumsq_runs_break(eng_sumsq_runs *r);
/* After the last break: the added ranges' elements that are exactly 0 (count only). */
uint64_t eng_sumsq_runs_zeros(const eng_sumsq_runs *r);

/* Megatron's clip coefficient: min(1, clip / (norm + 1e-6)); 1 when clip <= 0. */
float eng_clip_scale(double grad_norm, double clip);

/* One rank: the gradient's sum of squares, then the AdamW step with the
 * gradient scaled by eng_clip_scale(sqrt(sum), clip), the scale computed on
 * the device (k_ops sumsq_begin) so the host does not wait for the norm before
 * it queues the optimizer. Returns 1 and *sumsq (the bits of eng_grad_sumsq)
 * once the sum is read, with the optimizer possibly still running; 0 when it
 * cannot (no such backend op, the parameters in more segments than one launch
 * holds, or the norm's tensors not one run) and then nothing ran: the caller
 * takes eng_grad_sumsq and eng_optim_step. */
int eng_optim_step_norm_clipped(eng_optim *o, eng_model *m, const eng_rates *r, double clip, int t, double *sumsq);

/* The learning rate where the schedule stands at `it`, Megatron's schedule:
 * linear warmup over --lr-warmup-iters from --lr-warmup-init (0) to --lr, then
 * the --lr-decay-style (cosine, linear, constant, WSD: constant then the final
 * --lr-wsd-decay-iters by --lr-wsd-decay-style, inverse-square-root) down to
 * --min-lr at --lr-decay-iters (default --train-iters), --min-lr after. `it` is
 * the samples consumed, in global batches (Megatron's schedule counts samples):
 * a whole number while every step takes the global batch, a fraction under
 * --rampup-batch-size or --decrease-batch-size-if-needed. As in Megatron,
 * iteration i (1-based) updates with the rate at i - 1 and logs the one at i. */
double eng_lr_at(const atoll_config *c, double it);

/* --decoupled-lr's schedule at `it`: eng_lr_at's shape from --lr-warmup-init
 * to --decoupled-lr, then down to --decoupled-min-lr (--min-lr when not
 * given), Megatron's for the embeddings and output layer; eng_lr_at without
 * the flag. */
double eng_decoupled_lr_at(const atoll_config *c, double it);

/* Every rate of a step at `it`. */
eng_rates eng_rates_at(const atoll_config *c, double it);

/* The weight decay where the schedule stands at `it` (as for eng_lr_at),
 * Megatron's: --weight-decay with --weight-decay-incr-style constant; else from
 * --start-weight-decay at 0 to --end-weight-decay at the samples the run
 * consumes (--train-iters global batches, or the ramp's and then the batches'
 * samples), linearly or along a half cosine, --end-weight-decay after. Applied
 * to the tensors that take decay (eng_param.decay: not biases, not norms). */
double eng_wd_at(const atoll_config *c, double it);

/* The rate of tensor p in a step at rates r. */
double eng_param_lr(const eng_param *p, const eng_rates *r);

/* One AdamW step t (1-based) on every tensor at rates r, gradients scaled by
 * grad_scale; under --bf16 the bf16 copy of the params is updated in the same
 * pass. */
void eng_optim_step(eng_optim *o, eng_model *m, const eng_rates *r, float grad_scale, int t);

#endif
