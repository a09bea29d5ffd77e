/* The planner's bubble term against the engine's own pipeline schedules:
 * sched_simulate_scaled runs the 1F1B / interleaved action lists atoll-train
 * executes (engine/schedule.c), each rank's compute in proportion to its
 * stage's FLOPs (its layers, the LM head on the last), and measures the makespan. */
#include "check.h"
#include "config.h"
#include "plan.h"
#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* FLOPs per token of pipeline stage `st` counted here from the shapes, apart
 * from the planner: a GPT layer's 12h^2 + 13h parameters at 6 FLOPs each plus
 * attention's 12hs, and the LM head's 6Vh on the last stage. */
static double stage_flops(const atoll_config *c, int st)
{
    double h = c->hidden_size, s = c->seq_length;
    double n = cfg_stage_num_layers(c, st);
    return n * (6 * (12 * h * h + 13 * h) + 12 * h * s) +
           (st == c->pipeline_model_parallel_size - 1 ? 6.0 * c->vocab_size * h : 0);
}

static void one(int p, int v, int m, int first, int last)
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
    c.decoder_first_pipeline_num_layers = first;
    c.decoder_last_pipeline_num_layers = last;
    char err[256];
    CHECK(cfg_validate_layout(&c, p, 0, err, sizeof err) == 0, "layout p%d v%d m%d: %s", p, v, m, err);
    const gpu_spec *g = gpu_spec_by_type("h100-sxm");
    plan_links links;
    plan_links_default(g, &links);
    plan_fabric_cost fc;
    memset(&fc, 0, sizeof fc);
    plan_link free_p2p = { INFINITY, 0, 0, 1, links.nvlink_Bps, links.nvlink_lat_s }; /* transfers cost nothing */
    fc.tp = fc.dp = fc.pp = free_p2p;
    plan_memory mem;
    plan_memory_estimate(&c, 1, &PLAN_PRECISION_BF16, &mem);
    plan_estimate e;
    plan_perf_estimate(&c, 1, g, &links, &fc, &mem, &e);

    /* the engine's schedule with each rank's compute in proportion to its FLOPs */
    double scale[64], smax = 0;
    for (int r = 0; r < p; r++) {
        scale[r] = stage_flops(&c, r);
        if (scale[r] > smax) smax = scale[r];
    }
    for (int r = 0; r < p; r++) scale[r] /= smax;
    sched_sim_result r;
    CHECK(sched_simulate_scaled(p, m, v, 1.0, 2.0, scale, &r, err, sizeof err) == 0 && !r.deadlock, "simulate: %s",
          err);
    /* The planner's pipeline time over the slowest stage's compute, m t_max +
     * (sum t - t_max) / v, against the simulated makespan over the same: equal
     * to rounding, for equal stages and for the head-heavy or uneven ones here. */
    double ideal = e.compute_s + e.tp_s + e.pp_s, got = (ideal + e.bubble_s) / ideal, want = r.makespan / r.ideal;
    printf("p %d v %d m %2d first %d last %d: planner %.4f simulated %.4f\n", p, v, m, first, last, got, want);
    CHECK(fabs(got - want) <= 1e-9 * want, "p %d v %d m %d first %d last %d: planner %.6f, simulated %.6f", p,
          v, m, first, last, got, want);
    CHECK_CLOSE(e.bubble, sched_bubble_theory(p, m, v), 1e-12);
}

int main(int argc, char **argv)
{
    (void)argc;
    const int ps[] = { 2, 4, 8 }, vs[] = { 1, 2, 4 }, ms[] = { 1, 2, 8 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) one(ps[i], vs[j], ps[i] * ms[k], 0, 0);
    /* uneven splits of the same 2p layers: 3+1; 1+3+3+1; 3+2+2+2+2+2+2+1 */
    const int first[] = { 0, 1, 3 }, last[] = { 1, 1, 1 };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) one(ps[i], 1, ps[i] * ms[k], first[i], last[i]);
    return check_summary(argv[0]);
}
