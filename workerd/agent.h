/* agent: workerd's connection to the coordinator. Registers the node's topology,
 * heartbeats on the interval the coordinator gives, and reconnects with
 * exponential backoff (250 ms doubling to 5 s, +-25% jitter) whenever the
 * coordinator is away, re-registering under the same name so the node keeps its
 * identity. A coordinator that stops acknowledging heartbeats for 10 s (hung, or a
 * half-open connection) is treated as gone. One libuv loop; a signal stops it
 * cleanly, its ranks first, then the agent: SIGTERM (what Slurm sends before the
 * end of an allocation) passes SIGTERM on, so ranks that save checkpoints commit
 * one and exit, with --stop-grace before SIGKILL; SIGINT stops them at once
 * (SIGINT, SIGKILL after 3 s).
 * Ranks are run by ranks.c; what they report waits in relay.c's queue until the
 * coordinator has stored it. */
#ifndef ATOLL_AGENT_H
#define ATOLL_AGENT_H

#include <sys/socket.h>
#include <uv.h>

#include "auth.h"
#include "relay.h"
#include "rpc.h"
#include "topo.h"

struct job_set;

typedef struct agent {
    uv_loop_t *loop;
    char coordinator[128];
    struct sockaddr_storage addr;
    auth_token token;
    topo_node topo;
    int cpu_ranks;
    char host[64];
    rpc_conn *conn;
    int registered, stopping;
    int interval_ms, backoff_ms;
    uint64_t seq, acks, registrations;
    uint64_t last_acked_seq;
    uint64_t incarnation;    /* this process's, sent in Register (relay sequences are per process) */
    uv_timer_t hb_timer, retry_timer;
    uv_signal_t sigterm, sigint;
    /* rank processes (ranks.c) and what they report (relay.c) */
    char work_dir[512];
    char train_bin[512];     /* the atoll-train the ranks run */
    int simulated;           /* --simulate: GPUs are not real, ranks train on the CPU */
    int cuda_ordinal[TOPO_MAX_GPUS]; /* a GPU index's CUDA_VISIBLE_DEVICES entry for its rank */
    int stop_grace_ms;       /* SIGTERM -> SIGKILL when ranks are asked to checkpoint and stop */
    struct job_set *sets;
    relay relay;
} agent;

/* Runs until a signal stops it (after its ranks have stopped). 0 on a clean stop. */
int agent_run(agent *a);
/* Sends a heartbeat now (a rank exited) instead of at the next interval. */
void agent_report_now(agent *a);
/* ranks.c: the last rank set of a stopping agent is gone; finish stopping. */
void agent_finish_stop(agent *a);

#endif
