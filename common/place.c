#include "place.h"
#include "errf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* ---- rank order -------------------------------------------------------------- */

/* Strides of tp, dp and pp in the order string (cp and ep have size 1 here). */
static int order_strides(const place_request *req, place_result *r, char *err, size_t errlen)
{
    cfg_rank_order o;
    if (cfg_rank_order_parse(req->rank_order, req->tp, req->dp, req->pp, &o, err, errlen)) return -1;
    r->stride_tp = o.stride[CFG_DIM_TP];
    r->stride_dp = o.stride[CFG_DIM_DP];
    r->stride_pp = o.stride[CFG_DIM_PP];
    return 0;
}

int place_rank(const place_result *r, int t, int d, int p)
{
    return t * r->stride_tp + d * r->stride_dp + p * r->stride_pp;
}

static int result_alloc(place_result *r, const place_request *req, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (req->tp < 1 || req->pp < 1 || req->dp < 1) {
        atoll_errf(err, errlen, "placement needs tp, pp and dp of at least 1 (got %d, %d, %d)", req->tp, req->pp, req->dp);
        return -1;
    }
    r->tp = req->tp;
    r->pp = req->pp;
    r->dp = req->dp;
    if (order_strides(req, r, err, errlen)) return -1; /* also bounds tp*pp*dp */
    r->world = req->tp * req->pp * req->dp;
    r->rank_node = malloc((size_t)r->world * sizeof *r->rank_node);
    r->rank_gpu = malloc((size_t)r->world * sizeof *r->rank_gpu);
    r->nodes = malloc((size_t)r->world * sizeof *r->nodes);
    if (!r->rank_node || !r->rank_gpu || !r->nodes) {
        place_result_free(r);
        atoll_errf(err, errlen, "placement: out of memory for %d ranks", r->world);
        return -1;
    }
    return 0;
}

void place_result_free(place_result *r)
{
    free(r->rank_node);
    free(r->rank_gpu);
    free(r->nodes);
    r->rank_node = r->rank_gpu = r->nodes = NULL;
}

/* ---- usable nodes ------------------------------------------------------------ */

/* Name order is version order ("node9" before "node10"), then array index. */
static int cmp_name(const void *a, const void *b, void *ctx)
{
    const topo_node *nodes = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    int c = strverscmp(nodes[i].name, nodes[j].name);
    return c ? c : (i > j) - (i < j);
}

static int cmp_island_name(const void *a, const void *b, void *ctx)
{
    const topo_node *nodes = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    int c = strcmp(nodes[i].gpus[0].island, nodes[j].gpus[0].island);
    return c ? c : cmp_name(a, b, ctx);
}

/* The most common GPU count among live, free nodes; the job takes nodes of that size. */
static int common_gpn(const topo_node *nodes, int n, const unsigned char *busy)
{
    int count[TOPO_MAX_GPUS + 1] = { 0 }, best = 0;
    for (int i = 0; i < n; i++)
        if (nodes[i].state == NODE_ALIVE && !(busy && busy[i]) && nodes[i].ngpus > 0 &&
            nodes[i].ngpus <= TOPO_MAX_GPUS)
            count[nodes[i].ngpus]++;
    for (int g = 1; g <= TOPO_MAX_GPUS; g++)
        if (count[g] > count[best]) best = g;
    return best;
}

/* Usable node indices in name order; returns how many. */
static int usable_nodes(const topo_node *nodes, int n, const unsigned char *busy, int gpn, int *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (nodes[i].state == NODE_ALIVE && !(busy && busy[i]) && nodes[i].ngpus == gpn) out[k++] = i;
    qsort_r(out, (size_t)k, sizeof *out, cmp_name, (void *)nodes);
    return k;
}

int place_naive(const topo_node *nodes, int n, const unsigned char *busy, const place_request *req,
                place_result *out, char *err, size_t errlen)
{
    if (result_alloc(out, req, err, errlen)) return -1;
    int gpn = req->gpus_per_node ? req->gpus_per_node : common_gpn(nodes, n, busy);
    int *use = malloc((size_t)(n ? n : 1) * sizeof *use);
    int nu = use && gpn ? usable_nodes(nodes, n, busy, gpn, use) : 0;
    int need = gpn ? (out->world + gpn - 1) / gpn : 0;
    if (!gpn || nu < need) {
        atoll_errf(err, errlen, "placement: %d ranks need %d nodes of %d GPUs, %d usable", out->world, need, gpn, nu);
        free(use);
        place_result_free(out);
        return -1;
    }
    for (int r = 0; r < out->world; r++) {
        out->rank_node[r] = use[r / gpn];
        out->rank_gpu[r] = r % gpn;
    }
    out->nnodes = need;
    memcpy(out->nodes, use, (size_t)need * sizeof *use);
    free(use);
    return 0;
}

/* ---- units and leaves ---------------------------------------------------------- */

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A unit is the smallest set of nodes that holds whole TP groups: one node, or
 * k nodes of one island when TP is wider than a node. */
typedef struct {
    int first;          /* index into the unit-node array */
    const char *leaf, *island;
    const char *dom;    /* where a DP run should stay: its island when islands span
                           nodes (NVL72), else its leaf */
    int spine;          /* parent switch of the leaf, -1 unknown */
} unit;

typedef struct {
    int start, count;   /* run of units under one leaf, in name order */
    int spine;
    const char *leaf;
} leaf_group;

static int cmp_unit_leaf(const void *a, const void *b)
{
    const unit *x = a, *y = b;
    int c = strcmp(x->leaf, y->leaf);
    if (!c) c = strcmp(x->dom, y->dom);
    return c ? c : (x->first > y->first) - (x->first < y->first);
}

/* Fewest leaf groups that hold `need` units: largest groups first, and the last
 * one best-fit (smallest that still covers the rest), which keeps the count
 * minimal and leaves large free runs intact. Only groups under `spine` when it
 * is >= 0. Writes picked group indices to `pick`; returns their count or -1. */
static int pick_groups(const leaf_group *g, int ng, int need, int spine, int *pick, long *free_total)
{
    unsigned char *taken = calloc((size_t)(ng ? ng : 1), 1);
    int np = 0;
    long total = 0;
    for (int i = 0; i < ng; i++)
        if (spine < 0 || g[i].spine == spine) total += g[i].count;
    *free_total = total;
    if (!taken || total < need) {
        free(taken);
        return -1;
    }
    while (need > 0) {
        int fit = -1, big = -1;
        for (int i = 0; i < ng; i++) {
            if (taken[i] || (spine >= 0 && g[i].spine != spine)) continue;
            if (g[i].count >= need && (fit < 0 || g[i].count < g[fit].count)) fit = i;
            if (big < 0 || g[i].count > g[big].count) big = i;
        }
        int c = fit >= 0 ? fit : big;
        taken[c] = 1;
        pick[np++] = c;
        need -= g[c].count;
    }
    free(taken);
    return np;
}

/* Splits G TP groups per unit into a g1 (along dp) x g2 (along pp) block so that
 * both divide their dimension: then every DP and PP group sees the same local
 * slots on each of its units. Returns 0 when no exact split exists. */
static int block_split(int G, int dp, int pp, int *g1, int *g2)
{
    for (int a = G; a >= 1; a--) {
        if (G % a || dp % a || pp % (G / a)) continue;
        *g1 = a;
        *g2 = G / a;
        return 1;
    }
    return 0;
}

/* Which unit and slot TP group (d, p) goes to. */
static void group_slot(int d, int p, int dp, int G, int g1, int g2, int blocked, int *j, int *s)
{
    if (blocked) {
        int nbd = dp / g1;
        *j = d / g1 + nbd * (p / g2);
        *s = d % g1 + g1 * (p % g2);
    } else {
        int q = d + dp * p;
        *j = q / G;
        *s = q % G;
    }
}

typedef struct {
    int gpn, k, G;
    int *unode;          /* units' nodes: unit u holds unode[u*k .. u*k+k) */
    unit *units;
    int nunits;
} unit_set;

static int build_units(const topo_node *nodes, const int *use, int nu, const fabric *fab, unit_set *us)
{
    us->unode = malloc((size_t)(nu ? nu : 1) * sizeof *us->unode);
    us->units = malloc((size_t)(nu ? nu : 1) * sizeof *us->units);
    if (!us->unode || !us->units) return -1;
    memcpy(us->unode, use, (size_t)nu * sizeof *use);
    int k = us->k, nunits = 0;
    if (k > 1) {
        /* units of k consecutive (by name) nodes from one island */
        qsort_r(us->unode, (size_t)nu, sizeof *us->unode, cmp_island_name, (void *)nodes);
        int w = 0;
        for (int i = 0; i < nu;) {
            int e = i;
            while (e < nu && !strcmp(nodes[us->unode[e]].gpus[0].island, nodes[us->unode[i]].gpus[0].island)) e++;
            for (int a = i; a + k <= e; a += k)
                for (int b = 0; b < k; b++) us->unode[w++] = us->unode[a + b];
            i = e;
        }
        nu = w;
    }
    for (int i = 0; i + k <= nu; i += k) {
        unit *u = &us->units[nunits++];
        u->first = i;
        u->leaf = nodes[us->unode[i]].leaf;
        u->island = nodes[us->unode[i]].gpus[0].island;
        u->dom = u->leaf;
        u->spine = -1;
        if (fab && u->leaf[0]) u->spine = fabric_parent(fab, fabric_switch_index(fab, u->leaf));
    }
    us->nunits = nunits;
    /* islands that span nodes are the finer domain for a DP run */
    int multi = us->k > 1;
    for (int i = 1; i < nu && !multi; i++)
        multi = !strcmp(nodes[us->unode[i]].gpus[0].island, nodes[us->unode[i - 1]].gpus[0].island);
    if (!multi && us->k == 1) { /* name order may interleave islands: check exactly */
        const char **isl = malloc((size_t)(nu ? nu : 1) * sizeof *isl);
        if (isl) {
            for (int i = 0; i < nu; i++) isl[i] = nodes[us->unode[i]].gpus[0].island;
            qsort(isl, (size_t)nu, sizeof *isl, cmp_strp);
            for (int i = 1; i < nu && !multi; i++) multi = !strcmp(isl[i], isl[i - 1]);
            free(isl);
        }
    }
    if (multi)
        for (int i = 0; i < nunits; i++) us->units[i].dom = us->units[i].island;
    return 0;
}

static int cmp_unit_locality(const void *a, const void *b, void *ctx)
{
    const unit *units = ctx, *x = &units[*(const int *)a], *y = &units[*(const int *)b];
    if (x->spine != y->spine) return x->spine < y->spine ? -1 : 1;
    int c = strcmp(x->leaf, y->leaf);
    if (!c) c = strcmp(x->island, y->island);
    return c ? c : (x->first > y->first) - (x->first < y->first);
}

/* Orders the chosen units spine, leaf, island, name; then puts whole runs of
 * `run` units (one DP group's units) inside one island first and the leftovers
 * last, so as few DP groups as possible straddle an island or a leaf. */
static int pack_runs(const unit *units, int *chosen, int need, int run)
{
    qsort_r(chosen, (size_t)need, sizeof *chosen, cmp_unit_locality, (void *)units);
    if (run <= 1) return 0;
    int *packed = malloc((size_t)need * sizeof *packed), *rest = malloc((size_t)need * sizeof *rest);
    if (!packed || !rest) {
        free(packed);
        free(rest);
        return -1;
    }
    int np = 0, nr = 0;
    for (int i = 0; i < need;) {
        int e = i;
        while (e < need && !strcmp(units[chosen[e]].dom, units[chosen[i]].dom) &&
               !strcmp(units[chosen[e]].leaf, units[chosen[i]].leaf))
            e++;
        int whole = (e - i) / run * run;
        for (int k = i; k < e; k++) {
            if (k < i + whole) packed[np++] = chosen[k];
            else rest[nr++] = chosen[k];
        }
        i = e;
    }
    memcpy(chosen, packed, (size_t)np * sizeof *chosen);
    memcpy(chosen + np, rest, (size_t)nr * sizeof *chosen);
    free(packed);
    free(rest);
    return 0;
}

/* Units of a leaf group that fall in whole runs of `run` inside one island. */
static int whole_run_units(const unit *units, const leaf_group *g, int run)
{
    int total = 0;
    for (int i = g->start; i < g->start + g->count;) {
        int e = i;
        while (e < g->start + g->count && !strcmp(units[e].dom, units[i].dom)) e++;
        total += (e - i) / run * run;
        i = e;
    }
    return total;
}

/* Takes units from the picked groups in pick order; with `whole` only those that
 * complete a run inside their island. */
static int take_units(const unit *units, const leaf_group *g, const int *pick, int np, int need, int run, int whole,
                      int *chosen)
{
    int w = 0;
    for (int i = 0; i < np && w < need; i++) {
        const leaf_group *lg = &g[pick[i]];
        for (int a = lg->start; a < lg->start + lg->count && w < need;) {
            int e = a;
            while (e < lg->start + lg->count && !strcmp(units[e].dom, units[a].dom)) e++;
            int take = whole ? (e - a) / run * run : e - a;
            for (int k = a; k < a + take && w < need; k++) chosen[w++] = k;
            a = e;
        }
    }
    return w;
}

/* Fewest leaves for `need` units, preferring one spine when that costs no extra
 * leaf (best-fit spine); returns the leaf count and fills `pick`, or -1. */
static int pick_min_leaves(const fabric *fab, const leaf_group *g, int ng, int need, int *pick, int *np_out)
{
    long total, best_total = -1;
    int best = pick_groups(g, ng, need, -1, pick, &total), best_spine = -1;
    if (best < 0) return -1;
    if (fab) {
        for (int s = 0; s < fabric_num_switches(fab); s++) {
            int np = pick_groups(g, ng, need, s, pick, &total);
            if (np == best && (best_total < 0 || total < best_total)) {
                best_total = total;
                best_spine = s;
            }
        }
    }
    *np_out = pick_groups(g, ng, need, best_spine, pick, &total);
    return *np_out;
}

/* Chooses `need` units: fewest leaves (under one spine when that costs no extra
 * leaf), best-fit, and when the same leaf count allows it, only units that
 * complete whole DP runs inside one island. Writes unit indices in job order. */
static int choose_units(const fabric *fab, unit_set *us, int need, int run, int *chosen)
{
    qsort(us->units, (size_t)us->nunits, sizeof *us->units, cmp_unit_leaf);
    int cap = us->nunits ? us->nunits : 1;
    leaf_group *g = malloc((size_t)cap * sizeof *g), *gr = malloc((size_t)cap * sizeof *gr);
    int *pick = malloc((size_t)cap * sizeof *pick);
    int ng = 0, rc = -1, np = 0, npr = 0;
    if (!g || !gr || !pick) goto out;
    for (int i = 0; i < us->nunits; i++) {
        if (!ng || strcmp(g[ng - 1].leaf, us->units[i].leaf)) {
            g[ng].start = i;
            g[ng].count = 0;
            g[ng].leaf = us->units[i].leaf;
            g[ng].spine = us->units[i].spine;
            ng++;
        }
        g[ng - 1].count++;
    }
    int leaves = pick_min_leaves(fab, g, ng, need, pick, &np);
    if (leaves < 0) goto out;
    if (run > 1 && need % run == 0) {
        for (int i = 0; i < ng; i++) {
            gr[i] = g[i];
            gr[i].count = whole_run_units(us->units, &g[i], run);
        }
        int *pick_r = malloc((size_t)cap * sizeof *pick_r);
        if (pick_r && pick_min_leaves(fab, gr, ng, need, pick_r, &npr) > 0 && npr <= leaves &&
            take_units(us->units, g, pick_r, npr, need, run, 1, chosen) == need) {
            free(pick_r);
            rc = pack_runs(us->units, chosen, need, run);
            goto out;
        }
        free(pick_r);
    }
    take_units(us->units, g, pick, np, need, run, 0, chosen);
    rc = pack_runs(us->units, chosen, need, run);
out:
    free(g);
    free(gr);
    free(pick);
    return rc;
}

int place_topology(const topo_node *nodes, int n, const unsigned char *busy, const fabric *fab,
                   const place_request *req, place_result *out, char *err, size_t errlen)
{
    if (result_alloc(out, req, err, errlen)) return -1;
    int gpn = req->gpus_per_node ? req->gpus_per_node : common_gpn(nodes, n, busy);
    int tp = req->tp, dp = req->dp, pp = req->pp;
    if (!gpn) {
        atoll_errf(err, errlen, "placement: no alive, free node with GPUs");
        place_result_free(out);
        return -1;
    }
    if (tp > gpn && tp % gpn) {
        atoll_errf(err, errlen, "--tensor-model-parallel-size %d spans nodes of %d GPUs but is not a multiple of %d",
             tp, gpn, gpn);
        place_result_free(out);
        return -1;
    }
    unit_set us = { gpn, tp > gpn ? tp / gpn : 1, tp > gpn ? 1 : gpn / tp, NULL, NULL, 0 };
    int *use = malloc((size_t)(n ? n : 1) * sizeof *use);
    int nu = use ? usable_nodes(nodes, n, busy, gpn, use) : 0;
    int Q = dp * pp, g1 = 1, g2 = 1;
    int blocked = Q > us.G && block_split(us.G, dp, pp, &g1, &g2);
    int need = (Q + us.G - 1) / us.G;
    int *chosen = malloc((size_t)(need ? need : 1) * sizeof *chosen);
    int rc = -1;
    if (!use || !chosen || build_units(nodes, use, nu, fab, &us)) {
        atoll_errf(err, errlen, "placement: out of memory");
        goto out;
    }
    if (us.nunits < need || choose_units(fab, &us, need, blocked ? dp / g1 : 1, chosen)) {
        if (us.k > 1)
            atoll_errf(err, errlen, "placement: tp %d needs %d groups of %d nodes within one NVLink island; %d such groups "
                 "are free", tp, need, us.k, us.nunits);
        else
            atoll_errf(err, errlen, "placement: %d ranks need %d nodes of %d GPUs, %d usable", out->world, need, gpn, nu);
        goto out;
    }
    out->nnodes = need * us.k;
    for (int j = 0; j < need; j++)
        for (int b = 0; b < us.k; b++) out->nodes[j * us.k + b] = us.unode[us.units[chosen[j]].first + b];
    for (int p = 0; p < pp; p++)
        for (int d = 0; d < dp; d++) {
            int j, s;
            group_slot(d, p, dp, us.G, g1, g2, blocked, &j, &s);
            const int *un = &us.unode[us.units[chosen[j]].first];
            for (int t = 0; t < tp; t++) {
                int u = s * tp + t, r = place_rank(out, t, d, p);
                out->rank_node[r] = un[u / gpn];
                out->rank_gpu[r] = u % gpn;
            }
        }
    rc = 0;
out:
    free(use);
    free(chosen);
    free(us.unode);
    free(us.units);
    if (rc) place_result_free(out);
    return rc;
}

/* ---- measures -------------------------------------------------------------------- */

int place_tp_island_violations(const topo_node *nodes, const place_result *r)
{
    int bad = 0;
    for (int p = 0; p < r->pp; p++)
        for (int d = 0; d < r->dp; d++) {
            int r0 = place_rank(r, 0, d, p);
            const char *isl = nodes[r->rank_node[r0]].gpus[r->rank_gpu[r0]].island;
            for (int t = 1; t < r->tp; t++) {
                int ri = place_rank(r, t, d, p);
                if (strcmp(nodes[r->rank_node[ri]].gpus[r->rank_gpu[ri]].island, isl)) {
                    bad++;
                    break;
                }
            }
        }
    return bad;
}

typedef struct { int node, gpu; } node_gpu;

static int cmp_node_gpu(const void *a, const void *b)
{
    const node_gpu *x = a, *y = b;
    return x->node != y->node ? (x->node > y->node) - (x->node < y->node) : (x->gpu > y->gpu) - (x->gpu < y->gpu);
}

/* One group of `n` ranks: aligned when each node it touches holds it on the same
 * set of local GPU indices. Returns 1 when misaligned; *multi = 1 when the group
 * spans nodes. `tmp` has room for n entries. */
static int group_misaligned(const place_result *r, const int *ranks, int n, node_gpu *tmp, int *multi)
{
    for (int i = 0; i < n; i++) {
        tmp[i].node = r->rank_node[ranks[i]];
        tmp[i].gpu = r->rank_gpu[ranks[i]];
    }
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_node_gpu);
    int first_end = 1;
    while (first_end < n && tmp[first_end].node == tmp[0].node) first_end++;
    *multi = first_end < n;
    for (int i = first_end; i < n;) {
        int e = i;
        while (e < n && tmp[e].node == tmp[i].node) e++;
        if (e - i != first_end) return 1;
        for (int k = 0; k < first_end; k++)
            if (tmp[i + k].gpu != tmp[k].gpu) return 1;
        i = e;
    }
    return 0;
}

int place_misaligned_groups(const topo_node *nodes, const place_result *r, int *groups)
{
    (void)nodes;
    int n = r->dp > r->pp ? r->dp : r->pp, bad = 0, examined = 0, multi;
    int *ranks = malloc((size_t)n * sizeof *ranks);
    node_gpu *tmp = malloc((size_t)n * sizeof *tmp);
    if (!ranks || !tmp) {
        free(ranks);
        free(tmp);
        return -1;
    }
    for (int t = 0; t < r->tp; t++) {
        for (int p = 0; p < r->pp; p++) { /* DP groups */
            for (int d = 0; d < r->dp; d++) ranks[d] = place_rank(r, t, d, p);
            bad += group_misaligned(r, ranks, r->dp, tmp, &multi);
            examined += multi;
        }
        for (int d = 0; d < r->dp; d++) { /* PP groups */
            for (int p = 0; p < r->pp; p++) ranks[p] = place_rank(r, t, d, p);
            bad += group_misaligned(r, ranks, r->pp, tmp, &multi);
            examined += multi;
        }
    }
    free(ranks);
    free(tmp);
    if (groups) *groups = examined;
    return bad;
}

int place_group_misaligned(const place_result *r, const int *ranks, int n, int *multi_node)
{
    node_gpu *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    int multi = 0, bad = tmp ? group_misaligned(r, ranks, n, tmp, &multi) : -1;
    free(tmp);
    if (multi_node) *multi_node = multi;
    return bad;
}


int place_leaf_count(const topo_node *nodes, const place_result *r)
{
    if (!r->nnodes) return 0;
    const char **leaf = malloc((size_t)r->nnodes * sizeof *leaf);
    if (!leaf) return -1;
    for (int i = 0; i < r->nnodes; i++) leaf[i] = nodes[r->nodes[i]].leaf;
    qsort(leaf, (size_t)r->nnodes, sizeof *leaf, cmp_strp);
    int count = 1;
    for (int i = 1; i < r->nnodes; i++) count += strcmp(leaf[i], leaf[i - 1]) != 0;
    free(leaf);
    return count;
}
