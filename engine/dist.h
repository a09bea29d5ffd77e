/* dist: one rank's place in a tensor x pipeline x data parallel job, and the
 * steps of a training iteration that cross ranks.
 *
 *   dist_init       joins the world (RANK/WORLD_SIZE/MASTER_* from the launcher,
 *                   or a one-rank world), builds Megatron's groups and this
 *                   rank's layout: chunk c holds virtual stage c*pp + pp_rank.
 *   dist_tp_comm    the model's TP hooks on the TP communicator.
 *   dist_pipeline   runs sched_build's action list for one step: forwards,
 *                   backwards, p2p batches on the PP communicator; measures
 *                   the stage's bubble (time blocked in transfers and in the
 *                   closing PP barrier).
 *   dist_sync_grads sequence-parallel LayerNorm partials (TP), tied embedding
 *                   copies (embedding group), then data parallel: a bucketed
 *                   all-reduce, or with ZeRO-1 a reduce-scatter into this DP
 *                   rank's shard.
 *   dist_optim_*    AdamW over the whole buffer, or ZeRO-1: Adam moments and the
 *                   fp32 master of this rank's 1/dp of the flat parameter buffer,
 *                   then an all-gather of the updated parameters.
 *
 * Every rank of the job computes the same function as one rank: DP rank d of
 * micro-batch k takes global samples k*mbs*dp + d*mbs + [0, mbs) of the global
 * batch, each token's loss weighted 1/(gbs*T), and gradients are summed.
 *
 * Ownership: dist owns the world, its groups and its scratch; dist_optim owns
 * the (sharded) optimizer state. One thread drives a dist.
 */
#ifndef ATOLL_ENGINE_DIST_H
#define ATOLL_ENGINE_DIST_H

#include "comm.h"
#include "groups.h"
#include "model.h"
#include "optimizer.h"

#include <stdint.h>

typedef struct dist {
    comm_world *world;
    comm *g[GROUP_KINDS];      /* this rank's TP, PP, DP, MP, embedding groups (NULL: none) */
    rank_groups groups;
    int rank, size;
    int tp, pp, dp, v;          /* sizes; v = model chunks per pipeline rank */
    int mgroup;                 /* interleaved: micro-batches per group through a chunk (0: pp) */
    int tp_rank, pp_rank, dp_rank;
    int nmicro;                 /* micro-batches per step on this DP rank */
    const k_ops *k;
    struct dist_overlap *ovl;   /* DP all-reduce thread of the current step, if any */
    int ovl_async, ovl_failed;  /* NCCL: this step's DP all-reduces are queued per layer */
    float *ovl_grads;
    size_t ovl_shard;           /* ZeRO-1: each range is reduced to the owners of its shard (floats per rank) */
    size_t ovl_skip_lo, ovl_skip_hi; /* ZeRO-1 with pipeline stages: the tied embedding waits for its copy's sum */
    int overlapped;             /* this step's DP reduction ran during backward */
    float *scratch;             /* TP max: gathered rows (backend memory) */
    float *host_a, *host_b;
    size_t scratch_n;
    double *acc;                /* --deterministic-dp: this step's gradients so far, in fp64 */
    size_t acc_n;
} dist;

/* Joins the job and derives the layout. Returns 0, or -1 with err naming the
 * flag or rule (world not divisible by tp*pp, batch not divisible, ...). */
int dist_init(dist *d, const atoll_config *c, const k_ops *k, char *err, size_t errlen);
void dist_free(dist *d);

/* --deterministic-dp (CPU): each micro-batch's gradients are added into an fp64
 * accumulator (dist_fold_grads after every backward pass, which zeroes m->grads),
 * and dist_sync_grads takes the data-parallel sum in fp64 in DP-rank order before
 * rounding to fp32 once. Sums of a few fp32 values are exact in fp64, so the step's
 * gradients are the same bits whatever the DP size and however the micro-batches
 * are split: a run resized by an elastic restart computes the same function. No
 * overlap of the DP reduction with backward in this mode. 0, or -1 with err. */
int dist_deterministic_init(dist *d, const eng_model *m, char *err, size_t errlen);
void dist_fold_grads(dist *d, eng_model *m);
/* The same for a sum of per-rank partials (the gradient norm's): every rank gets
 * the fp64 sum in world-rank order, which does not depend on the DP size. */
int dist_world_sum_ordered(dist *d, double x, double *sum);

eng_layout dist_layout(const dist *d, const atoll_config *c);
eng_tp_comm dist_tp_comm(dist *d);
const char *dist_error(const dist *d);

/* First global sample of micro-batch k on this DP rank, relative to the step's. */
static inline long long dist_sample_offset(const dist *d, const atoll_config *c, int k)
{
    return (long long)k * c->micro_batch_size * d->dp + (long long)d->dp_rank * c->micro_batch_size;
}

/* ---- pipeline executor ---- */

typedef struct dist_slot dist_slot;
typedef struct dist_pipe {
    dist *d;
    eng_model *m;
    dist_slot *slots;
    int nslots;
    long long sample_base;      /* global index of the step's first sample (dropout masks) */
    const float *mb_scale;      /* --eod-mask-loss: each micro-batch's loss weight (NULL: 1 each) */
    float *losses;              /* [nmicro, B*T] host: the last stage's token losses, read without waiting
                                 * (to_host_later): eng_losses_sum them once the device was waited for */
    size_t losses_cap;          /* floats */
    int overlap;                /* this step's DP reduction starts during backward (dist_overlap_begin's answer) */
} dist_pipe;

typedef struct dist_step_result {
    double loss_sum;    /* sum of token losses this rank's last stage computed (filled after the norm's wait) */
    double busy_s;      /* compute time */
    double idle_s;      /* waiting for a peer (in p2p batches and the closing PP barrier) */
    double transfer_s;  /* moving activations in p2p batches (not idle, not compute) */
} dist_step_result;

int dist_pipe_init(dist_pipe *p, dist *d, eng_model *m);
void dist_pipe_free(dist_pipe *p);
/* One step: tokens/targets are this DP rank's [nmicro * mbs, T] (host). */
int dist_pipeline(dist_pipe *p, const int32_t *tokens, const int32_t *targets, float dloss,
                  dist_step_result *r, char *err, size_t errlen);
/* Forward only (evaluation): returns the summed token loss on the last stage. */
int dist_forward_only(dist_pipe *p, const int32_t *tokens, const int32_t *targets, double *loss_sum,
                      char *err, size_t errlen);

/* ---- data-parallel overlap ----
 * The DP reduction of a range of gradients starts as soon as the last
 * micro-batch's backward has finished it, while the backward of the earlier
 * layers goes on: on the host transport (whose groups may be driven from
 * different threads) from a helper thread, on NCCL queued on its stream
 * (comm_*_async). Without ZeRO-1 each range is all-reduced. With ZeRO-1
 * (zero_shard = floats per DP rank) each range is reduced to the rank(s) whose
 * shard holds it, the same bytes as the reduce-scatter it replaces;
 * dist_sync_grads then takes this rank's shard. With pipeline stages the tied
 * embedding is left out until its copies are summed (dist_sync_grads).
 * Not with --deterministic-dp (its fp64 sum comes first). */
int dist_overlap_begin(dist *d, eng_model *m, size_t zero_shard); /* 1: overlapping this step */
void dist_overlap_push(dist *d, size_t off, size_t n);     /* grads[off, off+n) are final */
int dist_overlap_end(dist *d);                             /* waits; 0 or -1 (dist_error) */

/* ---- gradients and optimizer ---- */

typedef struct dist_optim {
    eng_optim *full;     /* without ZeRO-1: moments with the params' layout */
    int zero;
    size_t shard;        /* floats per DP rank (ZeRO-1) */
    float *gbuf;         /* dp*shard: padded copy of the grads / gathered params */
    float *g, *master, *m, *v; /* this rank's shard */
    eng_adamw_segs segs;       /* the shard's weight-decay segments */
} dist_optim;

int dist_optim_init(dist_optim *o, dist *d, eng_model *m, int zero, char *err, size_t errlen);
void dist_optim_free(dist_optim *o, const k_ops *k);
/* After eng_init_params or a load: the shard's master copy from the params. */
void dist_optim_take_params(dist_optim *o, dist *d, eng_model *m);

/* Reduces gradients as described above. Returns 0 or -1 (dist_error). */
int dist_sync_grads(dist *d, eng_model *m, dist_optim *o);
/* This rank's share of the global sum of squared gradients: every logical
 * element counted once over TP (replicated tensors on TP rank 0), PP (tied copy
 * skipped) and DP (rank 0, or each rank's shard under ZeRO-1). With zeros
 * non-NULL, also the share's elements that are exactly 0 there. */
double dist_grad_sumsq(dist *d, eng_model *m, dist_optim *o, uint64_t *zeros);
/* The same share of the sum of squared parameters (fp32), after an optimizer step. */
double dist_param_sumsq(dist *d, eng_model *m);
int dist_optim_step(dist *d, eng_model *m, dist_optim *o, const eng_rates *r, float grad_scale, int t);

/* Full-layout moments for a checkpoint (ZeRO-1: gathered over DP into a
 * temporary owned by o); NULL on failure. */
eng_optim *dist_optim_full(dist *d, eng_model *m, dist_optim *o);
/* After a load into dist_optim_full's buffers: ZeRO-1 keeps its shard. */
void dist_optim_scatter_loaded(dist *d, eng_model *m, dist_optim *o);

/* Sums `n` floats over the whole world (host memory). */
int dist_world_sum(dist *d, float *buf, int n);

#endif
