/* registry: the coordinator's in-memory view of the nodes and their liveness.
 *
 * Liveness is a pure function of silence: a node that has not heartbeated for
 * `suspect_ms` becomes suspect, for `dead_ms` dead; any heartbeat or registration
 * makes it alive again. Draining is separate (an operator's flag): a drained node
 * keeps its liveness and shows as "drained" unless it is dead. So does a node
 * Slurm keeps from work (slurm_out, set by slurm_watch.c while Slurm says DRAIN,
 * DOWN or FAIL), whatever the operator's flag says.
 * The store holds the durable copy; the registry is rebuilt from it at start.
 *
 * Ownership: the registry owns its reg_node structs (stable addresses until
 * registry_free) and each node's packed topology `info`. */
#ifndef ATOLL_REGISTRY_H
#define ATOLL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

typedef struct reg_node {
    char name[64];
    uint8_t *info;          /* packed atoll.Node (topology only) */
    size_t info_len;
    int ngpus, slots;       /* slots: GPUs, or CPU ranks on CPU-only nodes */
    int live;               /* NODE_ALIVE / NODE_SUSPECT / NODE_DEAD */
    int drained;
    int slurm_out;          /* Slurm has it drained, down or failed (slurm_watch.c); in memory only */
    char slurm_state[280];  /* while slurm_out: "IDLE+DRAIN (reason: bad dimm)" */
    int64_t registered_ms, last_seen_ms;
    int64_t asked_ms;       /* hang.c asked it for a heartbeat now (ReportNow) then ... */
    uint64_t asked_job;     /* ... for this job; 0 once answered */
    uint64_t visit;         /* coord_layout_nodes: the walk that last counted it */
    uint64_t heartbeats;
    void *peer;             /* the agent's connection while it is connected */
    uint64_t relay_seen;    /* highest relay_seq received from this agent (metrics, exits) */
    uint64_t relay_durable; /* ... of which everything up to here is committed */
    uint64_t incarnation;   /* the agent process's (Register): its relay sequences are its own */
    uint64_t stale_job;     /* the last job whose older placement's ranks it was found running ... */
    uint32_t stale_epoch;   /* ... and this epoch of it (one event per such find, not per heartbeat) */
    char address[64];
} reg_node;

typedef struct registry {
    reg_node **nodes;
    size_t n, cap;
    uint32_t *index;        /* open addressing on name: node position + 1, 0 = empty */
    size_t index_cap;
    int64_t suspect_ms, dead_ms;
    uint64_t gen;           /* bumped when a node's hardware (info) or liveness changes */
} registry;

void registry_init(registry *r, int64_t suspect_ms, int64_t dead_ms);
void registry_free(registry *r);
reg_node *registry_find(const registry *r, const char *name);
/* Adds a zeroed node with that name (must not exist). NULL on OOM. */
reg_node *registry_add(registry *r, const char *name);
/* Replaces the node's topology blob (copied). -1 on OOM. */
int registry_set_info(registry *r, reg_node *n, const uint8_t *info, size_t len, int ngpus, int slots);
/* Sets the node's liveness (NODE_ALIVE, NODE_SUSPECT, NODE_DEAD). */
void registry_set_live(registry *r, reg_node *n, int live);

/* The state users see: dead, else drained (by the operator or Slurm), else alive/suspect. */
int registry_state(const reg_node *n);

/* Applies the timeouts at time `now_ms`, calling fn for every change of `live`
 * (after updating it). Returns the number of changes. */
typedef void (*registry_change_fn)(void *ctx, reg_node *n, int from, int to);
int registry_tick(registry *r, int64_t now_ms, registry_change_fn fn, void *ctx);

/* Nodes sorted by name into a caller-freed array of n pointers. */
reg_node **registry_sorted(const registry *r);

#endif
