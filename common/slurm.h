/* slurm: what atoll takes from a Slurm allocation.
 *
 * Inside a job step Slurm describes the allocation in the environment; workerd
 * started by `srun --ntasks-per-node=1` takes its defaults from it (flags and
 * ATOLL_* variables still win):
 *   SLURMD_NODENAME            the node's Slurm name       -> workerd --name
 *   SLURM_LAUNCH_NODE_IPADDR   where srun ran (the batch host, where the sbatch
 *                              template starts coordinatord), else the first host of
 *                              SLURM_JOB_NODELIST, on ATOLL_COORDINATOR_PORT (7420)
 *                                                          -> workerd --coordinator
 *   SLURM_STEP_GPUS, else SLURM_JOB_GPUS   the GPUs Slurm gave the step (NVML indices)
 *                                                          -> the GPUs workerd offers
 * and coordinatord without --fabric takes the switch tree from Slurm
 * (`scontrol show topology`, else the topology.conf beside slurm.conf), and
 * watches the states Slurm gives the nodes (`scontrol -o show node`, parsed by
 * slurm_parse_nodes) to treat a node Slurm drains, downs or fails as lost.
 *
 * The environment is read through a getenv-like function so tests can pass a table.
 * Ownership: returned strings are the environment's; nothing is allocated here
 * except the fabric, which the caller frees with fabric_free. */
#ifndef ATOLL_SLURM_H
#define ATOLL_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "fabric.h"

#define SLURM_DEFAULT_PORT 7420
#define SLURM_MAX_GPUS 64

typedef char *(*slurm_getenv_fn)(const char *name); /* getenv, or a stand-in */

/* 1 inside a Slurm job (SLURM_JOB_ID is set). */
int slurm_in_job(slurm_getenv_fn get);

/* The node's Slurm name (SLURMD_NODENAME); NULL outside a job step. */
const char *slurm_node_name(slurm_getenv_fn get);

/* "HOST:PORT" of the coordinator as seen from a step (see above). 0 with out set;
 * 1 outside a Slurm job (out untouched); -1 with err when the variables are there
 * but malformed. */
int slurm_coordinator(slurm_getenv_fn get, char *out, size_t outlen, char *err, size_t errlen);

/* The GPUs Slurm gave this step: idx[i] their NVML indices, cuda[i] the CUDA
 * ordinal of idx[i] for processes started from here (the entry at the same place
 * in CUDA_VISIBLE_DEVICES, which Slurm renumbers when it confines devices; else
 * the index itself). Returns how many (0: the step has none), -1 when Slurm named
 * no GPUs (outside Slurm, or no --gres/--gpus: every GPU is usable), -2 with err
 * on a malformed list. */
int slurm_gpus(slurm_getenv_fn get, int *idx, int *cuda, int max, char *err, size_t errlen);

/* The cluster's switch tree from Slurm: `scontrol show topology` (scontrol from
 * PATH), else the topology.conf beside $SLURM_CONF or in /etc/slurm. 0 with *out
 * and `from` naming the source; 1 when Slurm has no tree (topology/none), `from`
 * saying what was tried; -1 with err when what Slurm gave does not parse. */
int slurm_fabric(fabric **out, char *from, size_t fromlen, char *err, size_t errlen);

/* One node of `scontrol -o show node` output. Its name is the Slurm NodeName,
 * which is the atoll name of the workerd running there (SLURMD_NODENAME). */
typedef struct slurm_node {
    char name[64];   /* NodeName= */
    char state[64];  /* State= as Slurm prints it: "IDLE", "ALLOCATED+DRAIN", "DOWN*" */
    char reason[200]; /* Reason= less its "[user@time]" stamp; "" when none */
    int out;         /* Slurm keeps it from work: DRAIN, DRAINING, DRAINED, DOWN, FAIL or FAILING */
} slurm_node;

/* Parses the output of `scontrol -o show node [LIST]` (one node per line; blank
 * lines are skipped) into out[0..max). Returns how many nodes, or -1 with err
 * naming the line when a line is not a node ("NodeName=... State=..."), a name or
 * state is too long, or there are more than max nodes. */
int slurm_parse_nodes(const char *text, slurm_node *out, int max, char *err, size_t errlen);

/* 1 when a Slurm State= value ("MIXED+DRAIN", "DOWN*", "IDLE") keeps the node from
 * work: one of its '+'-joined words, less Slurm's one-character flags (* ~ # % ! $ @ ^
 * -), is DRAIN, DRAINING, DRAINED, DOWN, FAIL or FAILING. */
int slurm_state_out(const char *state);

/* A time limit in sbatch --time's forms: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS,
 * DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS; at most SLURM_TIME_MAX_S.
 * 0 with *seconds (> 0), or -1 with err saying what is accepted. */
#define SLURM_TIME_MAX_S (366LL * 24 * 3600)
int slurm_parse_time(const char *text, int64_t *seconds, char *err, size_t errlen);
/* seconds as Slurm prints a limit: [DAYS-]HOURS:MM:SS. */
void slurm_format_time(int64_t seconds, char *out, size_t len);

#endif
