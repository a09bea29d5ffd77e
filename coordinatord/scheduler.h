/* scheduler: turns pending jobs into layouts and dispatches them to the workers.
 *
 * sched_place is the one placement decision; everything else here is
 * bookkeeping around it (which GPUs are free, storing the layout, sending each
 * node its part). Jobs on whole free GPU nodes get the topology-aware placement
 * (place_topology_aware in scheduler.c: common/place.h via plan_place); otherwise
 * it is naive: usable nodes in name order, ranks in Megatron order filling each
 * node's GPUs by index. */
#ifndef ATOLL_SCHEDULER_H
#define ATOLL_SCHEDULER_H

#include "config.h"
#include "coord.h"
#include "msg.h"

typedef struct sched_node {
    const char *name;
    int slots;
    const int *gpu;          /* [slots] local GPU index of each slot; -1 for CPU ranks */
    const unsigned char *busy; /* [slots] 1 when another job holds it */
} sched_node;

/* Fills out->ranks and out->groups (from the config's rank order) for `world`
 * ranks on the nodes given (in the order given). 0, or -1 with err when the
 * free slots do not suffice. */
int sched_place(const atoll_config *cfg, int world, const sched_node *nodes, int n,
                Atoll__JobLayout *out, msg_arena *a, char *err, size_t errlen);

/* Megatron-Core process groups for tp/pp/dp under `rank_order`, appended to `out`.
 * -1 with err when the order does not parse (cfg_rank_order_parse). */
int sched_groups(const char *rank_order, int tp, int pp, int dp, Atoll__JobLayout *out, msg_arena *a,
                 char *err, size_t errlen);

/* 1 when data-parallel size dp keeps the job's global batch: the layout rules
 * (cfg_validate_layout) for tp x pp x dp ranks, as the ranks will check them. */
int sched_dp_fits(const atoll_config *cfg, int dp);
/* The largest data-parallel size up to the job's own that the cluster could
 * place it with now (its current slots counted free), or dp_now when none is larger. */
int sched_grow_dp(coord *c, const store_job *j, const atoll_config *cfg, int dp_now);

/* Places what it can of the pending jobs (oldest first). A job placed again after
 * a fault takes a smaller data-parallel size when its full size does not fit.
 * The oldest job that cannot be placed holds a reservation that later new jobs
 * stay off (backfill; scheduler.c, "the order of the queue"). */
void sched_run(coord *c);
/* GPUs may have become free (a node joined or came back, was undrained, a job
 * left its GPUs or went back to pending): the next run retries every pending
 * job. Without it a run tries only jobs submitted since the last one, so the
 * cost of a tick does not grow with the number of jobs waiting. */
void sched_capacity_changed(coord *c);
/* Largest NVLink island over nodes that are not dead; 0 when unknown. */
int sched_max_island(coord *c);
/* Memory of the largest GPU over nodes that are not dead, its name in `name`;
 * 0 when no such node has GPUs. */
uint64_t sched_max_gpu_memory(coord *c, char *name, size_t len);
/* 1 when cfg's layout at its --num-gpus fits the largest GPU of the cluster (the
 * planner's memory model at the precision the engine trains it in), or when no
 * node has GPUs; else 0, with what it needs and what there is in `why`. */
int sched_fits_memory(coord *c, const atoll_config *cfg, char *why, size_t len);
int sched_job_uses_node(coord *c, const store_job *j, const char *node);
/* Tells every node of the job's current layout to stop its ranks. */
void sched_stop_job(coord *c, const store_job *j, const char *reason);
/* The same, asking the ranks to commit a checkpoint first (Stop.checkpoint). */
void sched_checkpoint_job(coord *c, const store_job *j, const char *reason);

#endif
