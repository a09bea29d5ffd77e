/* msg: protobuf messages of proto/atoll.proto as frames, and conversions between
 * wire messages and the C models (topo_node, atoll_config).
 *
 * Ownership: messages built by the *_from_* helpers borrow their strings from the
 * source struct and take their arrays from a msg_arena; free the arena (not the
 * message) when done, and keep the source alive until then. */
#ifndef ATOLL_MSG_H
#define ATOLL_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "atoll.pb-c.h"
#include "config.h"
#include "topo.h"

/* Header + packed payload in one malloc'd buffer (caller frees) with `trailer`
 * more bytes of room after it (for the frame's tag; not in *len); NULL on OOM.
 * `m` may be NULL for an empty payload. */
uint8_t *msg_frame(uint16_t type, const ProtobufCMessage *m, size_t trailer, size_t *len);

/* The message a frame of `type` carries; NULL for unknown types. */
const ProtobufCMessageDescriptor *msg_descriptor(uint16_t type);
const char *msg_type_name(uint16_t type);

typedef struct msg_arena {
    struct msg_chunk *head;
} msg_arena;
void *msg_alloc(msg_arena *a, size_t n); /* zeroed; aborts on OOM (daemon cannot go on) */
void msg_arena_free(msg_arena *a);

void msg_node_from_topo(Atoll__Node *out, const topo_node *n, int cpu_ranks, msg_arena *a);
/* Copies into fixed-size fields; -1 with err when a count or string does not fit. */
int msg_node_to_topo(const Atoll__Node *in, topo_node *out, char *err, size_t errlen);

void msg_spec_from_cfg(Atoll__JobSpec *out, const atoll_config *c, const char *name);
/* Every field is taken as given (the CLI sends Megatron's defaults explicitly);
 * values go through cfg_set, so the same ranges are enforced as for flags. */
int msg_spec_to_cfg(const Atoll__JobSpec *in, atoll_config *c, char *err, size_t errlen);
/* The layers pipeline stage `stage` of job `j` holds (all its model chunks
 * together; uneven with --decoder-first/last-pipeline-num-layers), or -1 when
 * its spec does not say. */
int msg_stage_layers(const Atoll__Job *j, int stage);

/* The job spec as atoll-train's command line: argv[0] = exe, then `--flag value`
 * for every field the config knows (dashes for underscores; booleans as bare flags
 * when set; empty strings, the world size and job-level fields such as
 * max_restarts left out: ranks take the world size from WORLD_SIZE). NULL-
 * terminated; *argc set. Free with msg_argv_free. NULL when out of memory. */
char **msg_spec_to_argv(const Atoll__JobSpec *in, const char *exe, int *argc);
void msg_argv_free(char **argv);

const char *msg_job_state_name(int state);        /* "pending", ... */
/* 1 for the states a job ends in: completed, failed, cancelled. */
int msg_job_state_ended(int state);
const char *msg_node_state_name(int state);       /* "alive", ... */

#endif
