/* metrics_emit: each rank's per-step metrics to its supervisor.
 *
 * Under workerd a rank has a channel on ATOLL_METRICS_FD (common/supervise.h);
 * every training step it writes one frame there: MSG_RANK_METRICS carrying an
 * atoll.RankMetrics (proto/atoll.proto), which workerd relays in its heartbeats.
 * Without the variable (a standalone run) nothing is written. Writing never
 * blocks training: a frame the channel cannot take at once is dropped and
 * counted.
 *
 * Ownership: the emitter owns nothing but the descriptor number it was given. */
#ifndef ATOLL_ENGINE_METRICS_EMIT_H
#define ATOLL_ENGINE_METRICS_EMIT_H

#include <stdint.h>

typedef struct metrics_emit {
    int fd;                  /* -1: no channel */
    int rank;
    unsigned long long dropped;
} metrics_emit;

/* One rank's view of a finished step, in the engine's own terms. */
typedef struct rank_step {
    long long iteration, consumed_samples;
    double loss, lr, grad_norm;
    double tokens_per_s;     /* the whole job's */
    double step_s;
    double flops_per_gpu;    /* achieved model FLOP/s per rank */
    double peak_flops;       /* dense bf16 peak of the rank's device; 0 = unknown */
    int stage;               /* pipeline stage this rank speaks for, -1 = none */
    double bubble;           /* that stage's idle time / step time */
    double transfer;         /* its activation transfer time / step time */
    double bubble_theory;    /* (p-1)/(v*m + p-1) */
    uint64_t device_bytes;   /* peak device memory in use (GPU ranks); 0: report peak resident memory */
    double valid_loss;       /* the validation loss evaluated after this iteration; 0: none */
} rank_step;

/* Opens the channel named by ATOLL_METRICS_FD, if any. */
void metrics_emit_open(metrics_emit *e, int rank);
/* Writes the step (with the peak device memory of a GPU rank, else the rank's
 * peak resident memory). */
void metrics_emit_step(metrics_emit *e, const rank_step *s);

#endif
