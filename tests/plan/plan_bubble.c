/* The planner's bubble term against the engine's own pipeline schedules:
 * sched_simulate runs the 1F1B / interleaved action lists atoll-train executes
 * (engine/schedule.c) and measures each rank's idle time. */
#include "check.h"
#include "config.h"
#include "plan.h"
#include "schedule.h"

#include <string.h>

static void one(int p, int v, int m)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = p * v * 2;
    c.hidden_size = 1024;
    c.num_attention_heads = 16;
    c.seq_length = 1024;
    c.vocab_size = 32000;
    c.micro_batch_size = 1;
    c.global_batch_size = m;
    c.tensor_model_parallel_size = 1;
    c.pipeline_model_parallel_size = p;
    c.num_layers_per_virtual_pipeline_stage = v > 1 ? 2 : 0;
    char err[256];
    CHECK(cfg_validate_layout(&c, p, 0, err, sizeof err) == 0, "layout p%d v%d m%d: %s", p, v, m, err);
    const gpu_spec *g = gpu_spec_by_type("h100-sxm");
    plan_links links;
    plan_links_default(g, &links);
    plan_fabric_cost fc;
    memset(&fc, 0, sizeof fc);
    plan_link nic = { links.nic_Bps, links.net_lat_s, 1, 1, links.nvlink_Bps, links.nvlink_lat_s };
    fc.tp = fc.dp = fc.pp = nic;
    plan_memory mem;
    plan_memory_estimate(&c, 1, &PLAN_PRECISION_BF16, &mem);
    plan_estimate e;
    plan_perf_estimate(&c, 1, g, &links, &fc, &mem, &e);

    sched_sim_result r;
    CHECK(sched_simulate(p, m, v, 1.0, 2.0, &r, err, sizeof err) == 0 && !r.deadlock, "simulate: %s", err);
    double ideal = e.compute_s + e.tp_s + e.pp_s;
    CHECK_CLOSE(e.bubble, r.bubble, 1e-9);
    CHECK_CLOSE(e.bubble_s / ideal, r.bubble, 1e-9);
    CHECK_CLOSE(e.bubble, sched_bubble_theory(p, m, v), 1e-12);
}

int main(int argc, char **argv)
{
    (void)argc;
    const int ps[] = { 2, 4, 8 }, vs[] = { 1, 2, 4 }, ms[] = { 1, 2, 8 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) one(ps[i], vs[j], ps[i] * ms[k]);
    return check_summary(argv[0]);
}
