/* place: invariants of the topology-aware placement on simulated clusters of
 * 2..2048 nodes (DGX H100, DGX A100, GB200 NVL72 trays) with random nodes busy
 * or dead, compared with the naive placement (name order, Megatron rank order). */
#include "check.h"
#include "config.h"
#include "fabric.h"
#include "place.h"
#include "plan.h"
#include "topo.h"

#include <stdlib.h>
#include <string.h>

static unsigned rng_state;
static unsigned rnd(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) & 0xffffff;
}

typedef struct {
    const char *profile;
    int n, leaf_size;
    topo_node *nodes;
    unsigned char *busy;
    fabric *fab;
} cluster;

/* Nodes node0000.. under leaves of `leaf_size`, 4 leaves per spine, one core;
 * GB200 trays form racks of 18 (one 72-GPU NVLink domain each). The array is
 * shuffled so that "name order" is the placement's doing, not the input's. */
static void make_cluster(cluster *c, const char *profile, int n, int leaf_size, double dead, double busy)
{
    c->profile = profile;
    c->n = n;
    c->leaf_size = leaf_size;
    c->nodes = calloc((size_t)n, sizeof *c->nodes);
    c->busy = calloc((size_t)n, 1);
    int nleaves = (n + leaf_size - 1) / leaf_size, nspines = (nleaves + 3) / 4;
    size_t cap = 256 + (size_t)(nleaves + nspines) * 96, len = 0;
    char *conf = malloc(cap);
    for (int l = 0; l < nleaves; l++) {
        int hi = (l + 1) * leaf_size - 1 < n - 1 ? (l + 1) * leaf_size - 1 : n - 1;
        len += (size_t)snprintf(conf + len, cap - len, "SwitchName=leaf%d Nodes=node[%04d-%04d]\n", l, l * leaf_size, hi);
    }
    for (int s = 0; s < nspines; s++) {
        int hi = 4 * s + 3 < nleaves - 1 ? 4 * s + 3 : nleaves - 1;
        len += (size_t)snprintf(conf + len, cap - len, "SwitchName=spine%d Switches=leaf[%d-%d]\n", s, 4 * s, hi);
    }
    len += (size_t)snprintf(conf + len, cap - len, "SwitchName=core Switches=spine[0-%d]\n", nspines - 1);
    char err[256];
    int rc = fabric_parse(&c->fab, conf, "sim.conf", err, sizeof err);
    CHECK(rc == 0, "sim fabric: %s", err);
    free(conf);
    for (int i = 0; i < n; i++) {
        char name[32], dom[32];
        snprintf(name, sizeof name, "node%04d", i);
        snprintf(dom, sizeof dom, "rack%03d", i / 18);
        rc = topo_simulate(&c->nodes[i], profile, name, strcmp(profile, "gb200-tray") ? NULL : dom, err, sizeof err);
        CHECK(rc == 0, "simulate: %s", err);
        double u = rnd() / (double)0x1000000;
        if (u < dead) c->nodes[i].state = NODE_DEAD;
        else if (u < dead + busy) c->busy[i] = 1;
    }
    for (int i = n - 1; i > 0; i--) { /* shuffle; busy flags move with their nodes */
        int j = (int)(rnd() % (unsigned)(i + 1));
        topo_node t = c->nodes[i];
        c->nodes[i] = c->nodes[j];
        c->nodes[j] = t;
        unsigned char b = c->busy[i];
        c->busy[i] = c->busy[j];
        c->busy[j] = b;
    }
    CHECK(fabric_apply(c->fab, c->nodes, n) == 0, "every node has a leaf");
}

static void free_cluster(cluster *c)
{
    free(c->nodes);
    free(c->busy);
    fabric_free(c->fab);
}

static int usable(const cluster *c)
{
    int u = 0;
    for (int i = 0; i < c->n; i++) u += c->nodes[i].state == NODE_ALIVE && !c->busy[i];
    return u;
}

/* A GPT that every tested layout divides: 64 layers, 64 heads, vocab 51200. */
static void model(atoll_config *m, int tp, int pp, int dp)
{
    cfg_defaults(m);
    m->num_layers = 64;
    m->hidden_size = 8192;
    m->num_attention_heads = 64;
    m->seq_length = 2048;
    m->vocab_size = 51200;
    m->tensor_model_parallel_size = tp;
    m->pipeline_model_parallel_size = pp;
    m->micro_batch_size = 1;
    m->global_batch_size = 16 * dp;
    m->sequence_parallel = tp > 1;
    m->recompute_granularity = RECOMPUTE_SELECTIVE;
}

static double predicted_step(const cluster *c, const place_result *r, const gpu_spec *g)
{
    plan_links links;
    plan_links_default(g, &links);
    plan_fabric_cost fc;
    plan_fabric_cost_of(c->nodes, c->fab, r, &links, &fc);
    atoll_config m;
    model(&m, r->tp, r->pp, r->dp);
    plan_memory mem;
    plan_memory_estimate(&m, r->dp, &PLAN_PRECISION_BF16, &mem);
    plan_estimate e;
    plan_perf_estimate(&m, r->dp, g, &links, &fc, &mem, &e);
    return e.step_s;
}

/* Each GPU once, only usable nodes, the reported node list matches the ranks. */
static int well_formed(const cluster *c, const place_result *r)
{
    unsigned char *seen = calloc((size_t)c->n * TOPO_MAX_GPUS, 1);
    int ok = 1;
    for (int k = 0; k < r->world; k++) {
        int nd = r->rank_node[k], g = r->rank_gpu[k];
        if (nd < 0 || nd >= c->n || g < 0 || g >= c->nodes[nd].ngpus || c->busy[nd] ||
            c->nodes[nd].state != NODE_ALIVE || seen[nd * TOPO_MAX_GPUS + g]++) ok = 0;
        int listed = 0;
        for (int i = 0; i < r->nnodes; i++) listed |= r->nodes[i] == nd;
        if (!listed) ok = 0;
    }
    free(seen);
    return ok;
}

static int expect_aligned(int gpn, int tp, int dp, int pp)
{
    if (tp >= gpn) return 1;
    int G = gpn / tp;
    if (dp * pp <= G) return 1;
    for (int a = 1; a <= G; a++)
        if (G % a == 0 && dp % a == 0 && pp % (G / a) == 0) return 1;
    return 0;
}

static int stat_naive_won, stat_cases, stat_fewer_leaves, stat_faster, stat_naive_tp_cross;

static void check_layout(const cluster *c, int tp, int pp, int dp)
{
    const gpu_spec *g = gpu_spec_by_device_name(c->nodes[0].gpus[0].name);
    int gpn = c->nodes[0].ngpus;
    place_request req = { tp, pp, dp, NULL, 0 };
    place_result a, b, nv;
    char err[256];
    int rc = place_topology(c->nodes, c->n, c->busy, c->fab, &req, &a, err, sizeof err);
    int need = (tp * pp * dp + gpn - 1) / gpn;
    if (rc) {
        /* refusing is right only when there really is not room */
        CHECK(tp > gpn || need > usable(c), "%s n=%d tp%d pp%d dp%d refused with %d usable nodes: %s", c->profile,
              c->n, tp, pp, dp, usable(c), err);
        return;
    }
    stat_cases++;
    CHECK(well_formed(c, &a), "%s n=%d tp%d pp%d dp%d: a GPU used twice or not usable", c->profile, c->n, tp, pp, dp);
    CHECK(place_tp_island_violations(c->nodes, &a) == 0, "%s tp%d: TP crosses an island", c->profile, tp);
    int groups, bad = place_misaligned_groups(c->nodes, &a, &groups);
    if (expect_aligned(gpn, tp, dp, pp))
        CHECK(bad == 0, "%s n=%d tp%d pp%d dp%d: %d of %d groups not rail-aligned", c->profile, c->n, tp, pp, dp,
              bad, groups);
    rc = place_topology(c->nodes, c->n, c->busy, c->fab, &req, &b, err, sizeof err);
    CHECK(rc == 0 && !memcmp(a.rank_node, b.rank_node, (size_t)a.world * sizeof(int)) &&
              !memcmp(a.rank_gpu, b.rank_gpu, (size_t)a.world * sizeof(int)),
          "placement not deterministic");
    if (!rc) place_result_free(&b);
    /* naive is a fair baseline only where it keeps TP inside islands */
    if (!place_naive(c->nodes, c->n, c->busy, &req, &nv, err, sizeof err) &&
        (place_tp_island_violations(c->nodes, &nv) ? (stat_naive_tp_cross++, place_result_free(&nv), 0) : 1)) {
        int la = place_leaf_count(c->nodes, &a), ln = place_leaf_count(c->nodes, &nv);
        CHECK(la <= ln, "%s n=%d tp%d pp%d dp%d: %d leaves, naive %d", c->profile, c->n, tp, pp, dp, la, ln);
        stat_fewer_leaves += la < ln;
        /* the job gets plan_place: never predicted slower than naive */
        plan_cluster pc;
        memset(&pc, 0, sizeof pc);
        pc.nodes = c->nodes;
        pc.nnodes = c->n;
        pc.busy = c->busy;
        pc.fab = c->fab;
        pc.gpu = g;
        plan_links_default(g, &pc.links);
        atoll_config m;
        model(&m, tp, pp, dp);
        place_result j;
        int naive_won = 0;
        CHECK(plan_place(&pc, &m, dp, &j, NULL, &naive_won, err, sizeof err) == 0, "plan_place: %s", err);
        double sa = predicted_step(c, &a, g), sj = predicted_step(c, &j, g), sn = predicted_step(c, &nv, g);
        CHECK(sj <= sn, "%s n=%d tp%d pp%d dp%d: predicted %.6f s, naive %.6f s", c->profile, c->n, tp, pp, dp, sj, sn);
        CHECK(place_tp_island_violations(c->nodes, &j) == 0 && place_leaf_count(c->nodes, &j) <= ln, "chosen is valid");
        /* when naive wins it is by a switch hop's latency, never by bandwidth */
        CHECK(sa <= sn * (1 + 1e-3), "%s n=%d tp%d pp%d dp%d: topology placement %.6f s vs naive %.6f s", c->profile,
              c->n, tp, pp, dp, sa, sn);
        stat_faster += sa < sn;
        stat_naive_won += naive_won;
        place_result_free(&j);
        place_result_free(&nv);
    }
    place_result_free(&a);
}

static void test_random_clusters(void)
{
    const char *profiles[] = { "dgx-h100", "dgx-a100", "gb200-tray" };
    const int sizes[] = { 2, 3, 8, 17, 64, 200, 512, 2048 };
    /* PLAN_SEED=N explores other clusters; the default is what CI runs */
    rng_state = getenv("PLAN_SEED") ? (unsigned)atoi(getenv("PLAN_SEED")) : 12345;
    for (int p = 0; p < 3; p++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            cluster c;
            int gb = !strcmp(profiles[p], "gb200-tray");
            make_cluster(&c, profiles[p], sizes[s], gb ? 18 : 8, 0.05, 0.25);
            int gpn = c.nodes[0].ngpus, gpus = usable(&c) * gpn;
            const int tps[] = { 1, 2, 4, 8, 16 };
            for (int trial = 0; trial < 10; trial++) {
                int tp = tps[rnd() % (gb ? 5 : 4)], pp = 1 << (rnd() % 4);
                int maxdp = gpus / (tp * pp);
                if (maxdp < 1) continue;
                int dp = 1 + (int)(rnd() % (unsigned)maxdp);
                if (trial % 3 == 0) dp = maxdp; /* fill the cluster: the hard case */
                check_layout(&c, tp, pp, dp);
            }
            free_cluster(&c);
        }
    CHECK(stat_cases > 150, "enough placements exercised: %d", stat_cases);
    CHECK(stat_fewer_leaves > 0, "topology placement beat naive on leaves somewhere (%d)", stat_fewer_leaves);
    CHECK(stat_faster > 0, "topology placement predicted faster somewhere (%d)", stat_faster);
    printf("placements %d: fewer leaves than naive %d, predicted faster %d, naive kept (latency tie-break) %d, "
           "naive crossed an island %d\n", stat_cases, stat_fewer_leaves, stat_faster, stat_naive_won, stat_naive_tp_cross);
    CHECK(stat_naive_tp_cross > 0, "naive put a TP group across GB200 racks somewhere (%d)", stat_naive_tp_cross);
}

/* Leaves 0-3 half busy, 4-7 free: naive takes the scattered free nodes first and
 * spans two leaves; the placement takes one whole free leaf. */
static void test_fragmented(void)
{
    cluster c;
    rng_state = 7;
    make_cluster(&c, "dgx-h100", 64, 8, 0, 0);
    for (int i = 0; i < c.n; i++) {
        int idx = atoi(c.nodes[i].name + 4);
        c.busy[i] = idx < 32 && idx % 2;
    }
    place_request req = { 8, 4, 2, NULL, 0 }; /* 64 GPUs = 8 nodes */
    place_result a, nv;
    char err[256];
    CHECK(place_topology(c.nodes, c.n, c.busy, c.fab, &req, &a, err, sizeof err) == 0, "%s", err);
    CHECK(place_naive(c.nodes, c.n, c.busy, &req, &nv, err, sizeof err) == 0, "%s", err);
    int la = place_leaf_count(c.nodes, &a), ln = place_leaf_count(c.nodes, &nv);
    CHECK(la == 1 && ln == 2, "fragmented: %d leaves vs naive %d", la, ln);
    const gpu_spec *g = gpu_spec_by_type("h100-sxm");
    double sa = predicted_step(&c, &a, g), sn = predicted_step(&c, &nv, g);
    CHECK(sa < sn, "fewer leaves predicts a faster step: %.6f vs %.6f", sa, sn);
    /* the placement took contiguous nodes of one leaf, in name order */
    for (int i = 1; i < a.nnodes; i++)
        CHECK(atoi(c.nodes[a.nodes[i]].name + 4) == atoi(c.nodes[a.nodes[i - 1]].name + 4) + 1, "contiguous");
    place_result_free(&a);
    place_result_free(&nv);

    /* 12 nodes over a spine boundary: leaf3 (half busy: 4 free) + leaf4: the
     * placement stays under one spine when that needs no more leaves. */
    place_request big = { 8, 1, 12, NULL, 0 };
    CHECK(place_topology(c.nodes, c.n, c.busy, c.fab, &big, &a, err, sizeof err) == 0, "%s", err);
    int spine = -1, one_spine = 1;
    for (int i = 0; i < a.nnodes; i++) {
        int s = fabric_parent(c.fab, fabric_switch_index(c.fab, c.nodes[a.nodes[i]].leaf));
        if (spine < 0) spine = s;
        one_spine &= s == spine;
    }
    CHECK(one_spine && place_leaf_count(c.nodes, &a) == 2, "12 nodes under one spine on 2 leaves");
    place_result_free(&a);
    free_cluster(&c);
}

/* Rail alignment where naive order breaks it: tp 4 on 8-GPU nodes with dp 3 and
 * pp 2 cannot pack DP pairs (3 is odd), so the placement packs PP pairs. */
static void test_alignment_choice(void)
{
    cluster c;
    rng_state = 9;
    make_cluster(&c, "dgx-a100", 16, 8, 0, 0);
    place_request req = { 4, 2, 3, NULL, 0 };
    place_result a, nv;
    char err[256];
    CHECK(place_topology(c.nodes, c.n, NULL, c.fab, &req, &a, err, sizeof err) == 0, "%s", err);
    CHECK(place_naive(c.nodes, c.n, NULL, &req, &nv, err, sizeof err) == 0, "%s", err);
    CHECK(place_misaligned_groups(c.nodes, &a, NULL) == 0, "aligned by packing pipeline pairs");
    CHECK(place_misaligned_groups(c.nodes, &nv, NULL) > 0, "naive Megatron order is not aligned here");
    const gpu_spec *g = gpu_spec_by_type("a100-80gb");
    CHECK(predicted_step(&c, &a, g) < predicted_step(&c, &nv, g), "alignment predicts a faster step");
    place_result_free(&a);
    place_result_free(&nv);

    /* errors name what is missing */
    place_request huge = { 8, 8, 64, NULL, 0 };
    CHECK(place_topology(c.nodes, c.n, NULL, c.fab, &huge, &a, err, sizeof err) == -1 && strstr(err, "usable"),
          "too big: %s", err);
    place_request order = { 2, 2, 2, "tp-dp", 0 };
    CHECK(place_topology(c.nodes, c.n, NULL, c.fab, &order, &a, err, sizeof err) == -1 && strstr(err, "rank-order"),
          "bad order: %s", err);
    place_request ppdp = { 2, 2, 2, "tp-pp-dp", 0 };
    CHECK(place_topology(c.nodes, c.n, NULL, c.fab, &ppdp, &a, err, sizeof err) == 0, "%s", err);
    CHECK(place_rank(&a, 1, 1, 1) == 1 + 2 * 1 + 4 * 1 && a.stride_pp == 2, "tp-pp-dp strides");
    place_result_free(&a);
    free_cluster(&c);
}

/* topo_max_island_gpus (sorted count, shared with cfg_validate_layout callers) */
static void test_island_size(void)
{
    cluster c;
    rng_state = 3;
    make_cluster(&c, "gb200-tray", 40, 18, 0, 0); /* racks of 18, 18, 4 trays */
    CHECK(topo_max_island_gpus(c.nodes, c.n) == 72, "NVL72: %d", topo_max_island_gpus(c.nodes, c.n));
    CHECK(topo_max_island_gpus(c.nodes + 0, 0) == 0, "no nodes");
    free_cluster(&c);
    make_cluster(&c, "dgx-h100", 16, 8, 0, 0);
    CHECK(topo_max_island_gpus(c.nodes, c.n) == 8, "DGX: %d", topo_max_island_gpus(c.nodes, c.n));
    free_cluster(&c);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_island_size();
    test_random_clusters();
    test_fragmented();
    test_alignment_choice();
    return check_summary(argv[0]);
}
