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

#include <pthread.h>
#include <stdint.h>

struct ProtobufCMessage;

typedef struct metrics_emit {
    int fd;                  /* -1: no channel */
    int rank;
    unsigned long long dropped;
    pthread_mutex_t mu;      /* the training loop and the watchdog share the channel */
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
    double compute_s;        /* step_s less the time blocked in communication */
    int64_t time_ms;         /* wall clock at the step's end */
    long long checkpoint_iteration; /* newest checkpoint this run committed (rank 0); 0 none */
    double save_stall_s;     /* training time lost to saving since the last report (rank 0) */
    double save_s;           /* the newest committed save, start to commit (rank 0) */
    long long start_iteration; /* where this run started (a checkpoint's iteration, 0 fresh) */
    double startup_s;        /* process start to the first step's start (first step only) */
    int from_checkpoint;     /* a step re-reported from the checkpoint resumed from */
    uint64_t memory_bytes;   /* peak memory: device memory in use on a GPU, peak resident memory on the CPU */
    double valid_loss;       /* the validation loss evaluated after this iteration; 0: none */
} rank_step;

/* Opens the channel named by ATOLL_METRICS_FD, if any. */
void metrics_emit_open(metrics_emit *e, int rank);
void metrics_emit_close(metrics_emit *e);
/* Writes the step (with the peak device memory of a GPU rank, else the rank's
 * peak resident memory). */
void metrics_emit_step(metrics_emit *e, const rank_step *s);
/* Writes one frame of `type` (any thread); dropped when the channel is full. */
void metrics_emit_frame(metrics_emit *e, uint16_t type, const struct ProtobufCMessage *m);

#endif
