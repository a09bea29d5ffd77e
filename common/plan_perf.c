/* plan_perf: link classes, collective costs and the step-time model.
 *
 * Link-class defaults (plan_links_default), per GPU and per direction:
 *                 NVLink      PCIe        NIC (1 rail)     leaf uplink
 *   DGX H100      450 GB/s    64 GB/s     400 Gb/s=50 GB/s 25 GB/s
 *   DGX A100      300 GB/s    32 GB/s     200 Gb/s=25 GB/s 12.5 GB/s
 * Latency per ring step: NVLink 1 us, network 5 us, plus 1 us per switch hop.
 * NVLink/PCIe/NIC come from gpu_specs.c. The uplink assumes a 2:1 tapered spine,
 * common outside full-bisection SuperPODs; set uplink_Bps = nic_Bps for a
 * non-blocking fabric. Traffic that changes rail between nodes is costed as
 * uplink traffic with two extra hops: on a rail-optimised fabric it must go
 * through the spine (or through an extra NVLink/PCIe hop on one side).
 */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_links_default(const gpu_spec *g, plan_links *out)
{
    out->nvlink_Bps = g->nvlink_bytes_per_s;
    out->pcie_Bps = g->pcie_bytes_per_s;
    out->nic_Bps = g->nic_bytes_per_s;
    out->uplink_Bps = g->nic_bytes_per_s / 2;
    /* per ring step: NCCL's small-message all-reduce on 8 NVSwitch GPUs takes
     * ~10-15 us (14 steps); an InfiniBand step adds a few us; a switch hop ~1 us */
    out->nvlink_lat_s = 1e-6;
    out->net_lat_s = 5e-6;
    out->hop_lat_s = 1e-6;
    /* Published large-GPT MFU: ~52% on 3072 A100 (Megatron-LM 2021), 50-57% on H100;
     * the base is what a GEMM-bound layer reaches before TP and small batches cost more. */
    out->mfu_base = g->peak_bf16_flops > 500e12 ? 0.55 : 0.60;
}

static double ring_s(int n, double bytes, double Bps, double lat, double phases)
{
    if (n <= 1) return 0;
    return phases * ((double)(n - 1) / n * bytes / Bps + (double)(n - 1) * lat);
}

static double collective_s(int n, double bytes, const plan_link *l, double phases)
{
    int g = l->local > 1 && l->multi_node && n % l->local == 0 ? l->local : 1;
    if (g == 1) return ring_s(n, bytes, l->Bps, l->lat_s, phases);
    return ring_s(g, bytes, l->local_Bps, l->local_lat_s, phases) + ring_s(n / g, bytes / g, l->Bps, l->lat_s, phases);
}

double plan_allreduce_s(int n, double bytes, const plan_link *l) { return collective_s(n, bytes, l, 2); }
double plan_gather_s(int n, double bytes, const plan_link *l) { return collective_s(n, bytes, l, 1); }

/* ---- link classes a placement uses ---------------------------------------------- */

typedef struct {
    const topo_node *nodes;
    const fabric *fab;
    const plan_links *links;
    const place_result *r;
    int *leaf_sw; /* per node: fabric switch of its leaf, -1 unknown */
} cost_ctx;

static void worst(plan_link *acc, double Bps, double lat, int multi)
{
    if (Bps < acc->Bps) acc->Bps = Bps;
    if (lat > acc->lat_s) acc->lat_s = lat;
    acc->multi_node |= multi;
}

/* Members of the group on its first node: the hierarchical factor of an aligned group. */
static int members_per_node(const place_result *r, const int *ranks, int n)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += r->rank_node[ranks[i]] == r->rank_node[ranks[0]];
    return c;
}

static const topo_gpu *gpu_of(const cost_ctx *x, int rank)
{
    return &x->nodes[x->r->rank_node[rank]].gpus[x->r->rank_gpu[rank]];
}

/* Network traffic leaves the GPU over PCIe (GPUDirect RDMA), so a link is no faster than that. */
static double net_Bps(const plan_links *L, double Bps)
{
    return L->pcie_Bps > 0 && L->pcie_Bps < Bps ? L->pcie_Bps : Bps;
}

/* Switch hops between the leaves of two nodes: fabric distance when known, else
 * 0 for the same leaf name and 2 (leaf-spine-leaf) otherwise. */
static int leaf_hops(const cost_ctx *x, int na, int nb)
{
    if (x->leaf_sw[na] >= 0 && x->leaf_sw[nb] >= 0) {
        int d = fabric_distance(x->fab, x->leaf_sw[na], x->leaf_sw[nb]);
        return d >= 0 ? d : 4;
    }
    return strcmp(x->nodes[na].leaf, x->nodes[nb].leaf) ? 2 : 0;
}

/* A point-to-point hop between two ranks. */
static void hop_cost(const cost_ctx *x, int ra, int rb, plan_link *acc)
{
    const topo_gpu *a = gpu_of(x, ra), *b = gpu_of(x, rb);
    int na = x->r->rank_node[ra], nb = x->r->rank_node[rb];
    const plan_links *L = x->links;
    if (!strcmp(a->island, b->island)) {
        worst(acc, L->nvlink_Bps, L->nvlink_lat_s, 0);
        return;
    }
    int hops = leaf_hops(x, na, nb);
    if (a->rail == b->rail && a->rail >= 0 && hops == 0)
        worst(acc, net_Bps(L, L->nic_Bps), L->net_lat_s, 1);
    else if (a->rail == b->rail && a->rail >= 0)
        worst(acc, net_Bps(L, L->uplink_Bps), L->net_lat_s + hops * L->hop_lat_s, 1);
    else
        worst(acc, net_Bps(L, L->uplink_Bps), L->net_lat_s + (hops + 2) * L->hop_lat_s, 1);
}

/* A collective over `ranks`: NVLink when the group stays in one island;
 * otherwise NCCL's rings cross nodes on matching rails when the group is
 * rail-aligned (NIC rate under one leaf, uplink rate across leaves), or change
 * rail when it is not. */
static void group_cost(const cost_ctx *x, const int *ranks, int n, plan_link *acc)
{
    if (n <= 1) return;
    const char *isl = gpu_of(x, ranks[0])->island;
    int one_island = 1, hops = 0;
    for (int i = 1; i < n; i++) {
        if (strcmp(gpu_of(x, ranks[i])->island, isl)) one_island = 0;
        int h = leaf_hops(x, x->r->rank_node[ranks[0]], x->r->rank_node[ranks[i]]);
        if (h > hops) hops = h;
    }
    const plan_links *L = x->links;
    if (one_island) {
        worst(acc, L->nvlink_Bps, L->nvlink_lat_s, 0);
        return;
    }
    int bad = place_group_misaligned(x->r, ranks, n, NULL);
    /* the group's hierarchical factor is the smallest any group of this kind gets */
    int g = bad ? 1 : members_per_node(x->r, ranks, n);
    if (!acc->multi_node || g < acc->local) acc->local = g;
    if (bad) worst(acc, net_Bps(L, L->uplink_Bps), L->net_lat_s + (hops + 2) * L->hop_lat_s, 1);
    else if (hops) worst(acc, net_Bps(L, L->uplink_Bps), L->net_lat_s + hops * L->hop_lat_s, 1);
    else worst(acc, net_Bps(L, L->nic_Bps), L->net_lat_s, 1);
}

void plan_fabric_cost_of(const topo_node *nodes, const fabric *fab, const place_result *r,
                         const plan_links *links, plan_fabric_cost *out)
{
    memset(out, 0, sizeof *out);
    plan_link init = { INFINITY, 0, 0, 1, links->nvlink_Bps, links->nvlink_lat_s };
    out->tp = out->dp = out->pp = init;
    int maxn = 0;
    for (int i = 0; i < r->nnodes; i++)
        if (r->nodes[i] + 1 > maxn) maxn = r->nodes[i] + 1;
    int *leaf_sw = malloc((size_t)(maxn ? maxn : 1) * sizeof *leaf_sw);
    int big = r->tp > r->dp ? r->tp : r->dp;
    if (r->pp > big) big = r->pp;
    int *ranks = malloc((size_t)big * sizeof *ranks);
    if (!leaf_sw || !ranks) goto out;
    for (int i = 0; i < maxn; i++) leaf_sw[i] = -1;
    for (int i = 0; i < r->nnodes; i++)
        if (fab && nodes[r->nodes[i]].leaf[0]) leaf_sw[r->nodes[i]] = fabric_switch_index(fab, nodes[r->nodes[i]].leaf);
    cost_ctx x = { nodes, fab, links, r, leaf_sw };
    for (int p = 0; p < r->pp; p++)
        for (int d = 0; d < r->dp; d++) {
            for (int t = 0; t < r->tp; t++) ranks[t] = place_rank(r, t, d, p);
            group_cost(&x, ranks, r->tp, &out->tp);
        }
    for (int t = 0; t < r->tp; t++) {
        for (int p = 0; p < r->pp; p++) {
            for (int d = 0; d < r->dp; d++) ranks[d] = place_rank(r, t, d, p);
            group_cost(&x, ranks, r->dp, &out->dp);
        }
        for (int d = 0; d < r->dp; d++)
            for (int p = 0; p + 1 < r->pp; p++) hop_cost(&x, place_rank(r, t, d, p), place_rank(r, t, d, p + 1), &out->pp);
    }
    out->leaves = place_leaf_count(nodes, r);
    out->misaligned_groups = place_misaligned_groups(nodes, r, NULL);
    out->tp_island_violations = place_tp_island_violations(nodes, r);
out:
    free(leaf_sw);
    free(ranks);
}

/* ---- step time -------------------------------------------------------------------- */

/* Fraction of peak a layer's GEMMs reach: the calibrated base, less when the
 * micro-batch gives fewer than 1024 rows (tiles no longer fill the SMs) and as
 * TP makes each GEMM's hidden slice thinner. */
static double gemm_efficiency(const atoll_config *c, const plan_links *L)
{
    double rows = (double)c->micro_batch_size * c->seq_length;
    double slice = (double)c->hidden_size / c->tensor_model_parallel_size;
    return L->mfu_base * fmin(1.0, rows / 1024) * slice / (slice + 64);
}

/* FLOPs per token of one transformer layer (forward and backward, with what
 * recompute adds) and of the output projection (the LM head, on the last stage:
 * 6Vh, forward and backward; its logits are never recomputed). */
static void stage_flops(const atoll_config *c, double *layer, double *head)
{
    double s = c->seq_length, h = c->hidden_size;
    double fb = 6 * plan_layer_params(c) + 12 * h * s; /* PaLM's count, one layer */
    double extra = c->recompute_granularity == RECOMPUTE_FULL ? fb / 3 * cfg_recompute_fraction(c) /* forwards again */
                 : c->recompute_granularity == RECOMPUTE_SELECTIVE ? 4 * h * s /* QK^T and AV forward */
                 : 0;
    *layer = fb + extra;
    *head = 6.0 * c->vocab_size * h;
}

/* A memory bound on the splits best_split considers (NULL: none). */
typedef struct {
    int dp;
    const plan_precision *prec;
    double usable;
} split_cap;

/* The most layers `stage` may hold within `cap` (L without one; -1 when not
 * even none fit): a stage's bytes grow with its layers. */
static int max_layers(const atoll_config *c, const split_cap *cap, int stage, int L)
{
    if (!cap) return L;
#define FITS(k) (plan_stage_bytes(c, cap->dp, cap->prec, stage, (k)) <= cap->usable)
    int lo = -1, step = 1; /* lo layers fit (-1: not even none); strides double, then halve */
    while (lo + step <= L && FITS(lo + step)) {
        lo += step;
        step *= 2;
    }
    int hi = lo + step - 1 < L ? lo + step - 1 : L;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (FITS(mid)) lo = mid;
        else hi = mid - 1;
    }
#undef FITS
    return lo;
}

/* The split whose slowest stage is fastest among those within `cap`; 1 when
 * there is one (both 0: the even split). */
static int best_split(const atoll_config *c, const split_cap *cap, int *first, int *last)
{
    int L = c->num_layers, pp = c->pipeline_model_parallel_size;
    *first = *last = 0;
    if (pp < 2 || cfg_interleaved(c)) return 0;
    double layer, head;
    stage_flops(c, &layer, &head);
    /* the first and last stage's most layers, and the others': they differ only
     * in the micro-batches in flight, which 1F1B gives the second the most of */
    int f_most = max_layers(c, cap, 0, L), l_most = max_layers(c, cap, pp - 1, L);
    int n_most = pp > 2 ? max_layers(c, cap, 1, L) : L;
    double H = head / layer, best = INFINITY;
    if (L % pp == 0 && L / pp <= f_most && L / pp <= l_most && L / pp <= n_most) best = (double)L / pp + H; /* even, in layers */
    if (pp == 2) { /* the last stage l, the first the rest */
        for (int l = 1; l < L; l++)
            if (2 * l != L && l <= l_most && L - l <= f_most && fmax(L - l, l + H) < best - 1e-9) {
                best = fmax(L - l, l + H);
                *last = l;
            }
        return !isinf(best);
    }
    /* The other stages hold n each; the first f and the last l (0: n), f + l + n (pp - 2) = L.
     * Of equally fast splits the one with the fewest layers on the first stage,
     * which keeps the most micro-batches in flight (1F1B: pp of them). */
    int best_f = L % pp || isinf(best) ? L + 1 : L / pp;
    for (int n = 1; n * (pp - 2) < L && n <= n_most; n++) {
        int rest = L - n * (pp - 2); /* the first and last stage's layers together */
        for (int f = rest - l_most > 1 ? rest - l_most : 1; f < rest && f <= f_most; f++) {
            int l = rest - f;
            double slowest = fmax(fmax(f, n), l + H);
            int fv = f == n ? 0 : f, lv = l == n ? 0 : l;
            if (!fv && !lv) continue; /* the even split, counted above */
            if (slowest < best - 1e-9 || (slowest < best + 1e-9 && f < best_f)) {
                best = slowest;
                best_f = f;
                *first = fv;
                *last = lv;
            }
        }
    }
    return !isinf(best);
}

void plan_balanced_split(const atoll_config *c, int *first, int *last)
{
    best_split(c, NULL, first, last);
}

int plan_fitting_split(const atoll_config *c, int dp, const plan_precision *prec, double usable, int *first,
                       int *last)
{
    split_cap cap = { dp, prec, usable };
    return best_split(c, &cap, first, last) ? 0 : -1;
}

/* The slowest stage's work, in layers, with the LM head's `H` on the last. */
static double slowest_stage(const atoll_config *c, double H)
{
    double worst = 0;
    for (int st = 0; st < c->pipeline_model_parallel_size; st++)
        worst = fmax(worst, cfg_stage_num_layers(c, st) + (st == c->pipeline_model_parallel_size - 1 ? H : 0));
    return worst;
}

double plan_split_gain(const atoll_config *c, int *first, int *last, double *head_layers)
{
    double layer, head;
    stage_flops(c, &layer, &head);
    *head_layers = head / layer;
    plan_balanced_split(c, first, last);
    if (!*first && !*last) return 0;
    atoll_config b = *c;
    b.decoder_first_pipeline_num_layers = *first;
    b.decoder_last_pipeline_num_layers = *last;
    return 1 - slowest_stage(&b, *head_layers) / slowest_stage(c, *head_layers);
}

void plan_perf_estimate(const atoll_config *c, int dp, const gpu_spec *gpu, const plan_links *links,
                        const plan_fabric_cost *fc, const plan_memory *mem, plan_estimate *out)
{
    memset(out, 0, sizeof *out);
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size, v = cfg_virtual_stages(c);
    int m = cfg_micro_batches(c, dp);
    double s = c->seq_length, b = c->micro_batch_size, h = c->hidden_size;
    double model_per_token = cfg_flops_per_token(c), extra = 0, layer, head;
    if (c->recompute_granularity == RECOMPUTE_FULL) extra = model_per_token / 3 * cfg_recompute_fraction(c);
    if (c->recompute_granularity == RECOMPUTE_SELECTIVE) extra = 4.0 * c->num_layers * h * s; /* QK^T, AV */
    stage_flops(c, &layer, &head);
    /* mfu_base is calibrated on the PaLM count of the whole model; the stages
     * share that time in proportion to the work each holds */
    double share = 0;
    for (int st = 0; st < pp; st++) share += cfg_stage_num_layers(c, st) * layer + (st == pp - 1 ? head : 0);
    double rate = gpu->peak_bf16_flops * gemm_efficiency(c, links) * share / (model_per_token + extra);

    /* TP: 2 all-reduces (or all-gather + reduce-scatter pairs with SP, the same
     * bytes) forward and 2 backward per layer, 2 more for each layer full recompute reruns. */
    double act = 2 * b * s * h, colls = 4 + (c->recompute_granularity == RECOMPUTE_FULL ? 2 * cfg_recompute_fraction(c) : 0);
    double tp_layer = colls * plan_allreduce_s(tp, act, &fc->tp);
    /* PP: one activation forward and one gradient back per model chunk, split over tp. */
    double pp_mb = pp > 1 ? 2.0 * v * (act / tp / fc->pp.Bps + fc->pp.lat_s) : 0;

    /* Each stage's forward and backward of one micro-batch: its layers, and the
     * LM head on the last. In steady state the slowest stage sets the pace; the
     * others' time is the fill and drain (1F1B: (m - 1) t_max + sum t; the
     * interleaved schedule divides the fill by v). */
    double fmb = 0, tp_mb = 0, tmb = 0, tsum = 0;
    for (int st = 0; st < pp; st++) {
        double n = cfg_stage_num_layers(c, st);
        double f = (n * layer + (st == pp - 1 ? head : 0)) * b * s / tp / rate, t = f + n * tp_layer + pp_mb;
        tsum += t;
        if (t > tmb) {
            tmb = t;
            fmb = f;
            tp_mb = n * tp_layer;
        }
    }

    out->microbatches = m;
    out->compute_s = m * fmb;
    out->tp_s = m * tp_mb;
    out->pp_s = m * pp_mb;
    out->bubble = (double)(pp - 1) / ((double)v * m);
    out->bubble_s = (tsum - tmb) / v;

    /* DP: fp32 gradients reduce-scattered (ZeRO-1, then bf16 params all-gathered)
     * or all-reduced; the reduction hides behind the last micro-batch's backward
     * (2/3 of it), the gather behind the next step's first forward (1/3). */
    double grads = mem->params_per_gpu * 4, params = mem->params_per_gpu * 2;
    if (c->use_distributed_optimizer && dp > 1) {
        double rs = plan_gather_s(dp, grads, &fc->dp), ag = plan_gather_s(dp, params, &fc->dp);
        out->dp_s = rs + ag;
        out->dp_exposed_s = fmax(0, rs - fmb * 2 / 3) + fmax(0, ag - fmb / 3);
    } else {
        out->dp_s = plan_allreduce_s(dp, grads, &fc->dp);
        out->dp_exposed_s = fmax(0, out->dp_s - fmb * 2 / 3);
    }
    /* Adam is memory-bound: ~30 bytes read or written per parameter it updates. */
    double updated = mem->params_per_gpu / (c->use_distributed_optimizer && dp > 1 ? dp : 1);
    out->optimizer_s = updated * 30 / gpu->hbm_bytes_per_s;

    out->step_s = m * tmb + out->bubble_s + out->dp_exposed_s + out->optimizer_s;
    double world = (double)tp * pp * dp, model_flops = model_per_token * cfg_global_batch(c, dp) * s;
    out->tflops_per_gpu = model_flops / (out->step_s * world) / 1e12;
    out->mfu = model_flops / (out->step_s * world * gpu->peak_bf16_flops);
}

/* ---- simulated cluster ------------------------------------------------------------ */

topo_node *plan_sim_cluster(const gpu_spec *g, int num_gpus, int gpn, int leaf_nodes, char *err, size_t errlen)
{
    if (gpn < 1 || gpn > TOPO_MAX_GPUS || num_gpus < 1) {
        snprintf(err, errlen, "--gpus-per-node %d / --num-gpus %d: need 1 <= gpus-per-node <= %d and num-gpus >= 1",
                 gpn, num_gpus, TOPO_MAX_GPUS);
        return NULL;
    }
    int n = (num_gpus + gpn - 1) / gpn, per_leaf = leaf_nodes > 0 ? leaf_nodes : 32;
    int island_nodes = !strcmp(g->type, "gb200") && 72 % gpn == 0 ? 72 / gpn : 1;
    topo_node *nodes = calloc((size_t)n, sizeof *nodes);
    if (!nodes) {
        snprintf(err, errlen, "out of memory for %d simulated nodes", n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        topo_node *nd = &nodes[i];
        snprintf(nd->name, sizeof nd->name, "node%04d", i);
        snprintf(nd->leaf, sizeof nd->leaf, "leaf%03d", i / per_leaf);
        nd->state = NODE_ALIVE;
        nd->ngpus = gpn;
        nd->nnics = gpn > TOPO_MAX_NICS ? TOPO_MAX_NICS : gpn;
        for (int k = 0; k < gpn; k++) {
            topo_gpu *gp = &nd->gpus[k];
            gp->index = k;
            snprintf(gp->name, sizeof gp->name, "NVIDIA %s", g->match);
            gp->memory_bytes = g->memory_bytes;
            if (island_nodes > 1) snprintf(gp->island, sizeof gp->island, "nvl%04d", i / island_nodes);
            else memcpy(gp->island, nd->name, sizeof gp->island); /* island = the node */
            gp->rail = k % TOPO_MAX_NICS;
        }
        for (int k = 0; k < nd->nnics; k++) {
            snprintf(nd->nics[k].name, sizeof nd->nics[k].name, "mlx5_%d", k);
            nd->nics[k].gbps = g->nic_bytes_per_s * 8 / 1e9;
            nd->nics[k].rail = k;
        }
    }
    return nodes;
}
