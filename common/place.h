/* place: map a job's Megatron-ordered ranks onto the GPUs of a cluster.
 *
 * Rules, in priority order:
 *  1. (hard) a tensor-parallel group never crosses an NVLink island; when TP is
 *     wider than a node (NVL72 trays) its nodes come from one island;
 *  2. data- and pipeline-parallel peers are rail-aligned: a group is aligned when
 *     every node it touches holds its members on the same set of local GPU indices,
 *     so each member has a same-rail peer on every other node of the group and
 *     the inter-node hops of its rings stay on one rail;
 *  3. the job spans as few leaf switches as the usable nodes allow (and, with a
 *     fabric, stays under one spine when that costs no extra leaf);
 *  4. nodes are taken as contiguous runs in name order, best-fit leaf first, so
 *     free space is not fragmented further.
 * Same inputs, same answer: every tie is broken by node name, then index.
 *
 * A node is usable when it is alive, not busy (busy[i] != 0), and has the job's
 * GPU count per node; whole nodes are given to a job.
 *
 * Ownership: place_result arrays are heap memory owned by the result; free them
 * with place_result_free. The input arrays are only read.
 */
#ifndef ATOLL_PLACE_H
#define ATOLL_PLACE_H

#include <stddef.h>

#include "fabric.h"
#include "topo.h"

typedef struct place_request {
    int tp, pp, dp;
    const char *rank_order;   /* Megatron-Core order string; NULL -> "tp-cp-ep-dp-pp" */
    int gpus_per_node;        /* 0 -> the most common GPU count among usable nodes */
} place_request;

typedef struct place_result {
    int world, tp, pp, dp;
    int stride_tp, stride_dp, stride_pp; /* rank = t*stride_tp + d*stride_dp + p*stride_pp */
    int *rank_node;           /* [world] index into the caller's nodes array */
    int *rank_gpu;            /* [world] local GPU index on that node */
    int nnodes;               /* nodes the job uses */
    int *nodes;               /* [nnodes] their indices, in job order */
} place_result;

/* Topology-aware placement. Returns 0, or -1 with err saying what was missing
 * (e.g. "needs 8 nodes of 8 GPUs, 5 usable"). `fab` and `busy` may be NULL. */
int place_topology(const topo_node *nodes, int n, const unsigned char *busy, const fabric *fab,
                   const place_request *req, place_result *out, char *err, size_t errlen);

/* The baseline: usable nodes in name order, rank r on node r / gpn, GPU r % gpn. */
int place_naive(const topo_node *nodes, int n, const unsigned char *busy, const place_request *req,
                place_result *out, char *err, size_t errlen);

void place_result_free(place_result *r);

int place_rank(const place_result *r, int t, int d, int p);

/* ---- what a placement achieved (for tests, `atoll layout` and the planner) ---- */

/* TP groups whose GPUs are not all in one island (must be 0 for place_topology). */
int place_tp_island_violations(const topo_node *nodes, const place_result *r);
/* DP and PP groups that are not rail-aligned (definition above); *groups gets the
 * number of multi-node groups examined (may be NULL). */
int place_misaligned_groups(const topo_node *nodes, const place_result *r, int *groups);
/* 1 when the group `ranks[0..n)` is not rail-aligned; *multi_node = 1 when it
 * spans more than one node (may be NULL). -1 when out of memory. */
int place_group_misaligned(const place_result *r, const int *ranks, int n, int *multi_node);
/* Distinct leaf switches the job's nodes hang under ("" counts as one). */
int place_leaf_count(const topo_node *nodes, const place_result *r);

#endif
