/* plan_bench: how long placement and planning take at production scale.
 *
 *   plan_bench [RESULTS.md]     (default bench/results/plan.md)
 *
 * 1. place_topology for a 16,384-GPU job (tp 8, pp 16, dp 128) on 2,304 DGX H100
 *    nodes under a three-level fabric, 10% of nodes busy or dead, against the
 *    naive placement; plus the link-cost pass the planner runs on it.
 * 2. plan_enumerate for the 1T-parameter GPT of Narayanan et al. 2021 (128 layers,
 *    hidden 25600, 160 heads, seq 2048, batch 3072) on 3,072 A100 80GB GPUs.
 * 3. plan_enumerate for MT-NLG 530B on 2,240 A100s, beside its published layout.
 * Each is timed as the best of several runs (wall clock, CLOCK_MONOTONIC). */
#include "config.h"
#include "fabric.h"
#include "place.h"
#include "plan.h"
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void shell_line(const char *cmd, char *out, size_t n)
{
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(out, (int)n, p)) out[strcspn(out, "\n")] = 0;
    pclose(p);
}

/* 2,304 nodes: leaves of 32 nodes (a SuperPOD scalable unit), 8 leaves per spine. */
static topo_node *big_cluster(int n, fabric **fab, unsigned char **busy)
{
    topo_node *nodes = calloc((size_t)n, sizeof *nodes);
    *busy = calloc((size_t)n, 1);
    char err[256], name[32];
    unsigned rng = 1;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "node%04d", i);
        topo_simulate(&nodes[i], "dgx-h100", name, NULL, err, sizeof err);
        rng = rng * 1103515245u + 12345u;
        unsigned r = (rng >> 8) % 100;
        if (r < 3) nodes[i].state = NODE_DEAD;
        else if (r < 10) (*busy)[i] = 1;
    }
    int leaves = n / 32, spines = leaves / 8;
    size_t cap = (size_t)(leaves + spines + 2) * 80, len = 0;
    char *conf = malloc(cap);
    for (int l = 0; l < leaves; l++)
        len += (size_t)snprintf(conf + len, cap - len, "SwitchName=leaf%d Nodes=node[%04d-%04d]\n", l, 32 * l, 32 * l + 31);
    for (int s = 0; s < spines; s++)
        len += (size_t)snprintf(conf + len, cap - len, "SwitchName=spine%d Switches=leaf[%d-%d]\n", s, 8 * s, 8 * s + 7);
    snprintf(conf + len, cap - len, "SwitchName=core Switches=spine[0-%d]\n", spines - 1);
    if (fabric_parse(fab, conf, "bench.conf", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    free(conf);
    fabric_apply(*fab, nodes, n);
    return nodes;
}

int main(int argc, char **argv)
{
    const char *out_path = argc > 1 ? argv[1] : "bench/results/plan.md";
    char err[256];

    /* --- 1. placement of 16,384 GPUs ------------------------------------------------ */
    int n = 2304;
    fabric *fab;
    unsigned char *busy;
    topo_node *nodes = big_cluster(n, &fab, &busy);
    place_request req = { 8, 16, 128, NULL, 0 };
    double t_place = 1e9, t_naive = 1e9, t_cost = 1e9, t_island = 1e9;
    place_result r, nv;
    plan_links links;
    plan_links_default(gpu_spec_by_type("h100-sxm"), &links);
    plan_fabric_cost fc, fn;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        if (place_topology(nodes, n, busy, fab, &req, &r, err, sizeof err)) {
            fprintf(stderr, "place: %s\n", err);
            return 1;
        }
        double t1 = now();
        plan_fabric_cost_of(nodes, fab, &r, &links, &fc);
        double t2 = now();
        place_naive(nodes, n, busy, &req, &nv, err, sizeof err);
        double t3 = now();
        int island = topo_max_island_gpus(nodes, n);
        double t4 = now();
        (void)island;
        if (t1 - t0 < t_place) t_place = t1 - t0;
        if (t2 - t1 < t_cost) t_cost = t2 - t1;
        if (t3 - t2 < t_naive) t_naive = t3 - t2;
        if (t4 - t3 < t_island) t_island = t4 - t3;
        if (rep < 4) {
            place_result_free(&r);
            place_result_free(&nv);
        }
    }
    plan_fabric_cost_of(nodes, fab, &nv, &links, &fn);

    /* --- 2. full enumeration, 1T parameters on 3,072 GPUs --------------------------- */
    atoll_config m;
    cfg_defaults(&m);
    m.num_layers = 128;
    m.hidden_size = 25600;
    m.num_attention_heads = 160;
    m.seq_length = 2048;
    m.vocab_size = 51200;
    m.global_batch_size = 3072;
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    cl.gpu = gpu_spec_by_type("a100-80gb");
    topo_node *sim = plan_sim_cluster(cl.gpu, 3072, 8, 0, err, sizeof err);
    cl.nodes = sim;
    cl.nnodes = 384;
    cl.num_gpus = 3072;
    plan_links_default(cl.gpu, &cl.links);
    plan_fixed fx;
    plan_fixed_none(&fx);
    double t_plan = 1e9;
    int count = 0;
    plan_candidate *v = NULL;
    for (int rep = 0; rep < 3; rep++) {
        free(v);
        double t0 = now();
        count = plan_enumerate(&m, &cl, &fx, &v, err, sizeof err);
        double t1 = now();
        if (t1 - t0 < t_plan) t_plan = t1 - t0;
    }
    if (count <= 0) {
        fprintf(stderr, "plan: %s\n", err);
        return 1;
    }

    /* --- 3. MT-NLG 530B on 2,240 A100s, against its published layout ------------- */
    atoll_config mt = m;
    mt.num_layers = 105;
    mt.hidden_size = 20480;
    mt.num_attention_heads = 128;
    mt.global_batch_size = 1920;
    plan_cluster mcl = cl;
    topo_node *msim = plan_sim_cluster(mcl.gpu, 2240, 8, 0, err, sizeof err);
    mcl.nodes = msim;
    mcl.nnodes = 280;
    mcl.num_gpus = 2240;
    plan_candidate *mv = NULL;
    double t_mt0 = now();
    int mcount = plan_enumerate(&mt, &mcl, &fx, &mv, err, sizeof err);
    double t_mt = now() - t_mt0;

    /* --- report --------------------------------------------------------------------- */
    char uname_s[512], cpu[256], date[64];
    shell_line("uname -a", uname_s, sizeof uname_s);
    shell_line("lscpu | grep 'Model name' | sed 's/Model name:[ ]*//'", cpu, sizeof cpu);
    shell_line("date -u '+%Y-%m-%d %H:%M UTC'", date, sizeof date);
    FILE *f = fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write\n", out_path);
        return 1;
    }
    fprintf(f, "# plan_bench: placement and planning time\n\n");
    fprintf(f, "- machine: `%s`\n- CPU: %s\n- date: %s\n", uname_s, cpu, date);
    fprintf(f, "- command: `cmake --build build-plan --target plan_bench && build-plan/bin/plan_bench %s` "
               "(RelWithDebInfo, -O2)\n\n", out_path);
    fprintf(f, "## Placement of 16,384 GPUs\n\n");
    fprintf(f, "2,304 simulated DGX H100 nodes (18,432 GPUs), leaves of 32 nodes, 8 leaves per spine, one core;"
               " 3%% of nodes dead, 7%% busy. Job tp 8, pp 16, dp 128 = 16,384 GPUs. Best of 5 runs.\n\n");
    fprintf(f, "| step | time |\n| --- | --- |\n");
    fprintf(f, "| `place_topology` | %.1f ms |\n| `place_naive` (name order) | %.1f ms |\n", t_place * 1e3, t_naive * 1e3);
    fprintf(f, "| `plan_fabric_cost_of` (link classes of every group) | %.1f ms |\n", t_cost * 1e3);
    fprintf(f, "| `topo_max_island_gpus` (18,432 GPUs) | %.2f ms |\n\n", t_island * 1e3);
    fprintf(f, "| placement | nodes | leaf switches | misaligned DP/PP groups | TP groups across islands |\n"
               "| --- | --- | --- | --- | --- |\n");
    fprintf(f, "| topology | %d | %d | %d | %d |\n", r.nnodes, fc.leaves, fc.misaligned_groups, fc.tp_island_violations);
    fprintf(f, "| naive | %d | %d | %d | %d |\n\n", nv.nnodes, fn.leaves, fn.misaligned_groups, fn.tp_island_violations);
    fprintf(f, "## Full `atoll plan` enumeration: 1T parameters on 3,072 A100 80GB\n\n");
    fprintf(f, "GPT with 128 layers, hidden 25600, 160 heads, seq 2048, vocab 51200, global batch 3072 (%.3g parameters);"
               " every (tp, pp, dp, micro-batch, virtual stages, sp, recompute, ZeRO-1). Best of 3 runs.\n\n",
            cfg_num_params(&m));
    fprintf(f, "- enumeration time: **%.1f ms**, %d layouts fit in memory\n\n", t_plan * 1e3, count);
    fprintf(f, "| rank | tp | pp | dp | mb | vpp | sp | recompute | zero1 | step s | TFLOP/s/GPU | MFU | bubble | GiB/GPU |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < count && i < 5; i++) {
        const plan_candidate *p = &v[i];
        fprintf(f, "| %d | %d | %d | %d | %d | %d | %d | %s | %d | %.2f | %.1f | %.3f | %.3f | %.1f |\n", i + 1, p->tp,
                p->pp, p->dp, p->micro_batch, p->vpp, p->sp, cfg_recompute_name(p->recompute), p->zero1, p->est.step_s,
                p->est.tflops_per_gpu, p->est.mfu, p->est.bubble, p->mem.total_bytes / (double)(1u << 30));
    }
    fprintf(f, "\nFor reference, Narayanan et al. (2021) trained this model with tp 8, pp 64, micro-batch 1 and"
               " interleaving at 163 TFLOP/s per GPU (52%% of peak).\n");
    if (mcount > 0)
        fprintf(f, "\n## MT-NLG 530B on 2,240 A100 80GB\n\n%d layouts fit (enumerated in %.1f ms); the best is tp %d, pp %d,"
                   " dp %d, micro-batch %d, recompute %s: %.1f TFLOP/s per GPU predicted, %.1f GiB per GPU. The"
                   " published run used tp 8, pp 35, dp 8 (280 DGX A100 nodes).\n", mcount, t_mt * 1e3, mv[0].tp,
                mv[0].pp, mv[0].dp, mv[0].micro_batch, cfg_recompute_name(mv[0].recompute), mv[0].est.tflops_per_gpu,
                mv[0].mem.total_bytes / (double)(1u << 30));
    fclose(f);
    printf("placement 16384 GPUs: %.1f ms; plan 1T on 3072 GPUs: %.1f ms (%d layouts); wrote %s\n", t_place * 1e3,
           t_plan * 1e3, count, out_path);
    place_result_free(&r);
    place_result_free(&nv);
    free(v);
    free(mv);
    free(msim);
    free(sim);
    free(nodes);
    free(busy);
    fabric_free(fab);
    return 0;
}
