/* plan: the layout planner. Which (tp, pp, dp, micro-batch, virtual stages,
 * sequence parallel, recompute, ZeRO-1) fits in memory and is fastest on a
 * given cluster, before anything runs.
 *
 *  plan_mem.c   memory per GPU: model state (weights, grads, Adam) and
 *               activations ("Reducing Activation Recomputation in Large
 *               Transformer Models", Korthikanti et al. 2022) times the
 *               micro-batches a stage holds in flight under 1F1B/interleaving.
 *  plan_perf.c  step time on the links a placement actually uses: compute at a
 *               calibrated fraction of peak, TP/SP collectives, PP p2p, the
 *               exposed part of DP reduce-scatter/all-gather, pipeline bubble.
 *  plan.c       enumeration and ranking.
 *
 * Units: bytes, seconds, FLOP/s. Model sizes come from atoll_config (config.h),
 * whose cfg_num_params / cfg_flops_per_token (PaLM count) are used as is.
 * Ownership: plan_enumerate returns a heap array the caller frees with free().
 */
#ifndef ATOLL_PLAN_H
#define ATOLL_PLAN_H

#include <stddef.h>

#include "config.h"
#include "fabric.h"
#include "gpu_specs.h"
#include "place.h"
#include "topo.h"

/* ---- memory model -------------------------------------------------------------- */

/* Bytes per parameter of each piece of model state. */
typedef struct plan_precision {
    double weight;     /* 16-bit weights used by forward/backward */
    double grad;       /* gradient buffer the backward writes */
    double grad_copy;  /* a second, fp32 gradient copy (DeepSpeed fp16), else 0 */
    double master;     /* fp32 master weights */
    double moments;    /* Adam m and v */
    double activation; /* bytes per activation element (2: bf16/fp16, 4: fp32) */
    double probs;      /* bytes a layer keeps per attention score (b a s^2 / t of them) without
                        * recompute: 5 as Megatron counts them (16-bit scores and softmax, a
                        * dropout mask byte), 4 in atoll-train's fp32 (the probabilities); 0 with
                        * flash attention (a row statistic), so a layer keeps what selective
                        * recompute keeps */
    double logit;      /* bytes per logit kept for the cross entropy: 4 (Megatron's fp32 logits),
                        * or atoll-train's fused classifier's, at the activation size */
    int workspace;     /* 1: also count atoll-train's backward workspace, held once a rank: one
                        * layer's activation gradients (the model's engine/model.c ws_carve) and,
                        * without flash attention, an fp32 [s, s] score buffer per head (two
                        * under selective recompute, which rebuilds the probabilities) */
} plan_precision;

/* Megatron bf16: 2 + 4 (fp32 main grads) + 4 + 8 = 18 bytes; 6 + 12/dp with ZeRO-1;
 * activations as Korthikanti et al. count them. */
extern const plan_precision PLAN_PRECISION_BF16;
/* atoll-train --bf16: the same state, and flash attention on every backend (the
 * engine keeps lse per row, never the probabilities), bf16 logits and the
 * engine's workspace. The planner (plan_enumerate, plan_place) and the engine's
 * up-front check both count bf16 with this one. */
extern const plan_precision PLAN_PRECISION_BF16_FLASH;
/* The precision atoll-train trains `c` at: --bf16 PLAN_PRECISION_BF16_FLASH, else
 * PLAN_PRECISION_FP32. The engine's up-front check and coordinatord's check at
 * submit both take it from here. */
const plan_precision *plan_engine_precision(const atoll_config *c);
/* What a memory estimate is made of, for the refusals that quote it: "2.2e+10
 * parameters: 245.00 GiB of weights, grads and Adam state, 3.10 GiB of
 * activations<extra>, bf16 with fp32 master weights" (`extra`: "" or ", ..."). */
void plan_memory_parts(char *buf, size_t len, const atoll_config *c, double params, double state_bytes,
                       double act_bytes, const char *extra);
/* What lowers the memory a layout needs, for refusals that say it does not fit:
 * when `c` leaves the pipeline split even and one with fewer layers on the
 * first stages fits `room` bytes (plan_fitting_split), that split and its need
 * first; when full recompute of the fewest layers fits (plan_fewest_rebuilt)
 * and `c` does not already rebuild every layer, those flags and their need;
 * then the general advice. */
void plan_memory_advice(const atoll_config *c, int dp, double room, char *buf, size_t len);
/* With full recompute of only the first N layers of each model chunk
 * (--recompute-method block), the fewest N for which layout `c` (its own
 * ZeRO-1 choice) fits `room` bytes: the largest chunk's layers (*chunk, may
 * be NULL) when only rebuilding every layer fits, 0 when not even that does.
 * Memory only falls as N grows, so a binary search over N. */
int plan_fewest_rebuilt(const atoll_config *c, int dp, const plan_precision *prec, double room, int *chunk);
/* Mixed precision as MT-NLG counts it: 2 + 2 + 4 (fp32 grads) + 4 + 8 = 20 bytes. */
extern const plan_precision PLAN_PRECISION_FP16_FP32GRAD;
/* atoll-train's engine: fp32 weights (they are the master copy), fp32 grads, Adam
 * m and v: 16 bytes per parameter, fp32 activations, the attention's fp32
 * probabilities (4 bytes a score) and logits, and the engine's workspace. */
extern const plan_precision PLAN_PRECISION_FP32;

/* Model-state bytes per parameter; ZeRO-1 shards master, moments and grad copy over dp. */
double plan_state_bytes_per_param(const plan_precision *p, int zero1, int dp);

/* Activation bytes one transformer layer keeps for one micro-batch, with the
 * layout's tp, sequence parallel and recompute, as Megatron counts them
 * (PLAN_PRECISION_BF16; the estimate below counts at its precision's sizes):
 *   none       sbh(10 + 24/t + 5as/(ht))   sp: sbh/t (34 + 5as/h)
 *   selective  sbh(10 + 24/t)              sp: 34 sbh/t
 *   full       2sbh                        sp: 2sbh/t
 * (t = 1 gives sbh(34 + 5as/h), the paper's unparallelised figure.) */
double plan_act_bytes_per_layer(const atoll_config *c);

typedef struct plan_memory {
    double params_per_gpu;   /* parameters held by the worst stage's GPU */
    double state_bytes;      /* its weights + grads + optimizer state */
    double act_per_layer;    /* plan_act_bytes_per_layer */
    double inflight_layers;  /* layer-micro-batches its stage keeps alive */
    double act_bytes;        /* activations incl. embedding/logits and the recompute working set */
    double total_bytes;      /* state + activations */
    int worst_stage;         /* pipeline stage that needs the most */
} plan_memory;

/* Memory of every pipeline stage; reports the largest. `c` carries the layout
 * (tp, pp, vpp, the first and last stage's layers, sp, recompute, micro-batch,
 * global batch, distributed optimizer). */
void plan_memory_estimate(const atoll_config *c, int dp, const plan_precision *prec, plan_memory *out);
/* What one GPU of pipeline stage `stage` needs when it holds `layers` layers,
 * `c`'s layout otherwise: plan_memory_estimate's figure for that stage. */
double plan_stage_bytes(const atoll_config *c, int dp, const plan_precision *prec, int stage, int layers);

/* The parameters of one transformer layer. */
double plan_layer_params(const atoll_config *c);

/* Micro-batches stage `stage` holds in flight, in units of whole-stage
 * micro-batches (1F1B: min(pp - stage, m); interleaved: Megatron's warm-up count
 * of model chunks plus one, divided by v, with g micro-batches per group through
 * a chunk, --microbatch-group-size-per-virtual-pipeline-stage, 0: pp). */
double plan_inflight_microbatches(int pp, int v, int m, int g, int stage);

/* ---- links and performance model ----------------------------------------------- */

typedef struct plan_links {
    double nvlink_Bps;   /* per GPU, one direction, inside an NVLink island */
    double pcie_Bps;     /* GPU <-> host/NIC */
    double nic_Bps;      /* one rail */
    double uplink_Bps;   /* per rail once traffic leaves its leaf switch or changes rail */
    double nvlink_lat_s, net_lat_s, hop_lat_s; /* per message; hop = one switch-to-switch link */
    double mfu_base;     /* calibrated fraction of peak that large GEMM-bound layers reach */
} plan_links;

/* Defaults for `g` (documented in plan_perf.c): NVLink, PCIe and NIC from the
 * gpu_specs table; uplink = NIC / 2 (a 2:1 tapered spine); per ring step 1 us on
 * NVLink and 5 us on the network, 1 us per switch hop; mfu_base 0.55 (H100) / 0.60 (A100). */
void plan_links_default(const gpu_spec *g, plan_links *out);

/* One link class as a collective sees it: the slowest hop of its rings. */
typedef struct plan_link {
    double Bps, lat_s;
    int multi_node;      /* 1 when the group leaves its island */
    int local;           /* members per node of a rail-aligned multi-node group (>= 1) */
    double local_Bps, local_lat_s; /* NVLink inside the node for the hierarchical phases */
} plan_link;

/* What a placement gives each kind of group: the worst TP ring, DP ring and PP
 * p2p hop over all groups of that kind. */
typedef struct plan_fabric_cost {
    plan_link tp, dp, pp;
    int leaves, misaligned_groups, tp_island_violations;
} plan_fabric_cost;

void plan_fabric_cost_of(const topo_node *nodes, const fabric *fab, const place_result *r,
                         const plan_links *links, plan_fabric_cost *out);

/* Ring collectives: all-reduce 2(n-1)/n * bytes / bw + 2(n-1) lat; reduce-scatter and
 * all-gather (n-1)/n * bytes / bw + (n-1) lat (bytes = the whole buffer). A
 * rail-aligned group with g = l->local members on each of N nodes runs
 * hierarchically, as NCCL does: the ring over g on NVLink, then N-member rings
 * on each rail carrying bytes/g, so each GPU's own NIC moves 1/g of the data. */
double plan_allreduce_s(int n, double bytes, const plan_link *l);
double plan_gather_s(int n, double bytes, const plan_link *l);

/* The --decoder-first/last-pipeline-num-layers (0: as the others) that make
 * the slowest stage of `c`'s pipeline fastest, its LM head counted on the last
 * stage; both 0 when the even split is as fast (or pp < 2, or interleaved). */
void plan_balanced_split(const atoll_config *c, int *first, int *last);
/* plan_balanced_split among the splits whose every stage fits in `usable` bytes
 * (plan_stage_bytes): 1F1B keeps pp - stage micro-batches in flight, so when the
 * even split does not fit, one with fewer layers on the first stage may. 0 with
 * the split (both 0: the even one), -1 when none fits (or pp < 2, interleaved). */
int plan_fitting_split(const atoll_config *c, int dp, const plan_precision *prec, double usable, int *first,
                       int *last);
/* What plan_balanced_split's split would take off the slowest stage's work,
 * against `c`'s own split, as a fraction (0: nothing better); *head_layers gets
 * the LM head's work in layers. For a layout cfg_validate_layout accepts. */
double plan_split_gain(const atoll_config *c, int *first, int *last, double *head_layers);

typedef struct plan_estimate {
    double compute_s, tp_s, pp_s, bubble_s, dp_s, dp_exposed_s, optimizer_s;
    double step_s, tflops_per_gpu, mfu, bubble; /* bubble = (p-1)/(v m), the theory fraction */
    int microbatches;
} plan_estimate;

/* Step time of layout `c` (dp = world / (tp*pp)) on a placement's links. */
void plan_perf_estimate(const atoll_config *c, int dp, const gpu_spec *gpu, const plan_links *links,
                        const plan_fabric_cost *fc, const plan_memory *mem, plan_estimate *out);

/* ---- enumeration ------------------------------------------------------------------ */

typedef struct plan_candidate {
    int tp, pp, dp, micro_batch, vpp, layers_per_vstage, sp, zero1;
    int first_layers, last_layers; /* --decoder-first/last-pipeline-num-layers; 0, 0: an even split */
    cfg_recompute recompute;
    int recompute_layers;  /* full recompute of only the first so many layers of each model chunk
                            * (--recompute-method block --recompute-num-layers N); 0: every layer */
    plan_memory mem;
    plan_estimate est;
    plan_fabric_cost fabric;
} plan_candidate;

/* A candidate's recompute in words: "none", "selective", "full", or "block N"
 * (full recompute of the first N layers of each model chunk). Returns buf. */
const char *plan_recompute_str(const plan_candidate *p, char *buf, size_t n);

/* The cluster to plan for: nodes (live, or simulated by plan_sim_cluster), an
 * optional fabric, the GPU type and its links. Nodes that are not alive or are
 * busy are not used. */
typedef struct plan_cluster {
    const topo_node *nodes;
    int nnodes;
    const unsigned char *busy;
    const fabric *fab;
    const gpu_spec *gpu;
    plan_links links;
    int num_gpus;        /* the job's world size; 0 -> every usable GPU */
} plan_cluster;

/* Which choices the user fixed (-1 / 0 = search). */
typedef struct plan_fixed {
    int tp, pp, micro_batch, layers_per_vstage; /* 0 = search; layers_per_vstage -1 = no interleaving */
    int sp, recompute, zero1;                   /* -1 = search */
} plan_fixed;

void plan_fixed_none(plan_fixed *f);

/* Simulated homogeneous cluster for offline planning: ceil(num_gpus / gpn)
 * nodes "node0000"..., GPU `g`, one island per node (GB200: one per 72 GPUs),
 * rail = local index, `leaf_nodes` nodes per leaf switch (0 -> 32, a DGX
 * SuperPOD scalable unit). Returns a heap array (free()) or NULL with err. */
topo_node *plan_sim_cluster(const gpu_spec *g, int num_gpus, int gpn, int leaf_nodes, char *err, size_t errlen);

/* Every layout that passes cfg_validate_layout, places on the cluster and fits
 * in PLAN_MEM_USABLE of GPU memory, best first. Where full recompute fits and
 * no recompute does not, the layout is also offered with the fewest layers
 * rebuilt that fit (--recompute-method block --recompute-num-layers N, the
 * least recompute work), unless the model fixes the recompute method. Ranking: predicted step time in
 * bins of PLAN_TIE (the model is not better than that); within a bin the
 * simpler layout first: no recompute, smaller micro-batch, smaller tp, smaller
 * pp, no interleaving, then less memory, then the exact time.
 * Returns the count (0 with `why` saying why nothing fits) or -1 on bad input. */
#define PLAN_MEM_USABLE 0.90
#define PLAN_TIE 0.005
int plan_enumerate(const atoll_config *model, const plan_cluster *cl, const plan_fixed *fixed,
                   plan_candidate **out, char *why, size_t whylen);

/* The placement a job gets: place_topology, unless the naive order (name order,
 * Megatron rank order) also keeps every TP group in one island and predicts a
 * faster step for this job under the model above. The heuristic minimises leaf
 * switches first; where that costs a spine hop of latency the naive order does
 * not pay, the model decides. `c` carries the layout; *fc (may be NULL) gets the
 * chosen placement's link profile; *used_naive (may be NULL) says which won. */
int plan_place(const plan_cluster *cl, const atoll_config *c, int dp, place_result *out, plan_fabric_cost *fc,
               int *used_naive, char *err, size_t errlen);

/* Sets the layout fields of `c` from a candidate (for `--auto-layout`). */
void plan_apply(const plan_candidate *p, atoll_config *c);

#endif
