/* schedule: pipeline schedules as data, and a simulator that runs them.
 *
 * sched_build(p, rank, m, v, g) is a pure function giving the ordered list of
 * actions one pipeline rank performs in one training step: forward/backward of
 * micro-batch mb on local model chunk c, and the sends/receives around them.
 *   v == 1: 1F1B (PipeDream-Flush): warm-up of min(p - rank - 1, m) forwards,
 *           then one-forward-one-backward, then the cool-down backwards.
 *   v > 1:  interleaved 1F1B (Megatron): chunk c on rank r holds virtual stage
 *           c*p + r of the v*p stages. Micro-batches go in groups of g through
 *           each chunk (Megatron's --microbatch-group-size-per-virtual-pipeline-
 *           stage; g = 0 takes p, its default, and then needs m % p == 0; else
 *           cfg_microbatch_group_check: p <= g <= m, and a last, smaller group
 *           of m % g needs at least p).
 *           With whole groups, forward k (k = 0..m*v-1) runs chunk (k mod g*v) / g
 *           on micro-batch (k div g*v)*g + k mod g; backward k runs the chunks
 *           in reverse. Warm-up is Megatron's min((p - rank - 1)*2 + (v - 1)*g,
 *           m*v) forwards: a larger g keeps more micro-batches in flight.
 *
 * Transfers: a forward of virtual stage s > 0 needs a RECV_FWD from rank
 * (r-1) mod p and, if s < v*p-1, is followed by a SEND_FWD to (r+1) mod p;
 * backward mirrors it (RECV_BWD from (r+1) mod p, SEND_BWD to (r-1) mod p).
 *   v == 1: each receive sits right before the compute that needs it and each
 *           send right after the compute that made it (steady state: F,
 *           SEND_FWD+RECV_BWD, B, SEND_BWD+RECV_FWD, as Megatron batches it).
 *   v > 1:  Megatron's slots: each slot computes (F | F then B | B) and then
 *           one run of transfers sends this slot's outputs and receives the
 *           next slot's inputs (a gradient is received one slot ahead of its
 *           backward).
 * Adjacent transfer actions form one batch for comm_p2p_batch.
 *
 * Execution models the lists are proven against (sched_simulate_lists, tests):
 * buffered sends (they complete without waiting for the receiver, as on the
 * host backend) with blocking receives; and NCCL-style rendezvous where each
 * run of adjacent transfer actions is issued as one batch (comm_p2p_batch).
 * Neither deadlocks. Between any two ranks, the messages (both directions of
 * the pipeline together) are received in the order they are sent, so a
 * backend without tags (NCCL) matches them by order.
 *
 * Messages are matched by sched_tag: (direction, micro-batch, receiving virtual
 * stage), the same value for a send and its receive.
 */
#ifndef ATOLL_SCHEDULE_H
#define ATOLL_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SCHED_FWD,      /* forward of (mb, chunk) */
    SCHED_BWD,      /* backward of (mb, chunk) */
    SCHED_SEND_FWD, /* send (mb, chunk)'s output activations to peer */
    SCHED_RECV_FWD, /* receive (mb, chunk)'s input activations from peer */
    SCHED_SEND_BWD, /* send the gradient of (mb, chunk)'s input to peer */
    SCHED_RECV_BWD, /* receive the gradient of (mb, chunk)'s output from peer */
} sched_op;

typedef struct {
    sched_op op;
    int mb;    /* micro-batch, 0..m-1 */
    int chunk; /* local model chunk, 0..v-1 */
    int peer;  /* pipeline rank for transfers, -1 for compute */
} sched_action;

typedef struct {
    int p, rank, m, v;
    int g;      /* micro-batches per group through a chunk (p for 1F1B and by default) */
    int warmup; /* forwards before the first backward */
    int n;
    sched_action *a; /* owned; sched_free */
} sched_list;

/* Returns 0, or -1 with err naming the rule (p, m, v >= 1; rank < p; p >= 2
 * when v > 1, with cfg_microbatch_group_check's rules for g). */
int sched_build(int p, int rank, int m, int v, int g, sched_list *out, char *err, size_t errlen);
void sched_free(sched_list *s);

static inline int sched_virtual_stage(int p, int rank, int chunk) { return chunk * p + rank; }
/* Same value on both ends of a transfer; < 2^31 for any m*v*p < 2^29. */
uint32_t sched_tag(const sched_list *s, const sched_action *a);
const char *sched_op_name(sched_op op);
/* The ideal bubble fraction (p - 1) / (v * m), relative to the ideal step time. */
double sched_bubble_theory(int p, int m, int v);

/* Simulation of all p ranks running their lists. Cost model: each FWD of one
 * chunk costs cost_fwd, each BWD cost_bwd, transfers are free and instant;
 * sends are buffered, receives block until the matching send has happened. */
#define SCHED_SIM_RANKS 64
typedef struct {
    int deadlock;         /* 1: no rank could move; `why` says where each waits */
    char why[512];
    double makespan;      /* time the last rank finishes */
    double ideal;         /* m * v * (cost_fwd + cost_bwd): one rank's compute */
    double bubble;        /* (makespan - ideal) / ideal */
    double wait_max;      /* largest per-rank time blocked in receives */
    /* per rank (first SCHED_SIM_RANKS ranks): time blocked in receives, and the
     * time its last action ends (makespan - finish is idle time after it). */
    double wait[SCHED_SIM_RANKS], finish[SCHED_SIM_RANKS];
} sched_sim_result;

int sched_simulate(int p, int m, int v, double cost_fwd, double cost_bwd, sched_sim_result *r,
                   char *err, size_t errlen);
/* The same with rank r's compute costs times scale[r] (stages that hold
 * different layers: an uneven split, the LM head on the last); `ideal` is then
 * the slowest rank's compute. scale NULL: all 1. */
int sched_simulate_scaled(int p, int m, int v, double cost_fwd, double cost_bwd, const double *scale,
                          sched_sim_result *r, char *err, size_t errlen);
typedef enum {
    /* host backend: a send completes at once; its message can be received
     * cost_xfer later */
    SCHED_SENDS_BUFFERED = 0,
    /* NCCL: each maximal run of adjacent transfer actions is one group
     * (comm_p2p_batch); a transfer completes cost_xfer after both ends have
     * posted theirs; a rank leaves a group when all of it completed */
    SCHED_SENDS_BATCHED = 1,
} sched_send_mode;

/* The same over given lists (lists[r] for rank r, all of one (p, m, v)), e.g.
 * an executor's reordered lists, with a transfer latency and a send model. A
 * deadlock is reported in r->deadlock/why, not as an error. Returns 0. */
int sched_simulate_lists(const sched_list *lists, double cost_fwd, double cost_bwd,
                         double cost_xfer, sched_send_mode mode, sched_sim_result *r);

#endif
