/* plan: the planner's best layouts against the published findings it is built on
 * ("Efficient Parallelization Layouts for Large-Scale Distributed Model Training";
 * Megatron-LM 2021), and the contract of plan_enumerate. */
#include "check.h"
#include "config.h"
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gpt(atoll_config *c, int L, int h, int heads, int seq, int vocab, int gbs)
{
    cfg_defaults(c);
    c->num_layers = L;
    c->hidden_size = h;
    c->num_attention_heads = heads;
    c->seq_length = seq;
    c->vocab_size = vocab;
    c->global_batch_size = gbs;
}

typedef struct {
    topo_node *nodes;
    plan_cluster cl;
} sim;

static void sim_make(sim *s, const char *type, int gpus, int gpn)
{
    char err[256];
    memset(s, 0, sizeof *s);
    s->cl.gpu = gpu_spec_by_type(type);
    s->nodes = plan_sim_cluster(s->cl.gpu, gpus, gpn, 0, err, sizeof err);
    CHECK(s->nodes != NULL, "sim: %s", err);
    s->cl.nodes = s->nodes;
    s->cl.nnodes = (gpus + gpn - 1) / gpn;
    s->cl.num_gpus = gpus;
    plan_links_default(s->cl.gpu, &s->cl.links);
}

static int plan(const atoll_config *c, sim *s, const plan_fixed *fx, plan_candidate **out, char *why)
{
    plan_fixed none;
    plan_fixed_none(&none);
    int n = plan_enumerate(c, &s->cl, fx ? fx : &none, out, why, 256);
    return n;
}

static void show(const char *what, const plan_candidate *p)
{
    printf("%-28s tp %d pp %d dp %d mb %d v %d sp %d rc %-9s z %d  step %.3f s  mfu %.3f  bubble %.3f  mem %.1f GiB\n",
           what, p->tp, p->pp, p->dp, p->micro_batch, p->vpp, p->sp, cfg_recompute_name(p->recompute), p->zero1,
           p->est.step_s, p->est.mfu, p->est.bubble, p->mem.total_bytes / (1 << 30));
}

/* Every candidate: legal, fits, sorted, consistent figures. */
static void check_contract(const atoll_config *m, const sim *s, const plan_candidate *v, int n)
{
    int island = topo_max_island_gpus(s->cl.nodes, s->cl.nnodes);
    for (int i = 0; i < n; i++) {
        const plan_candidate *p = &v[i];
        atoll_config c = *m;
        plan_apply(p, &c);
        char err[256];
        CHECK(cfg_validate_layout(&c, s->cl.num_gpus, island, err, sizeof err) == 0, "candidate %d invalid: %s", i, err);
        CHECK(p->mem.total_bytes <= s->cl.gpu->memory_bytes * PLAN_MEM_USABLE, "candidate %d does not fit", i);
        plan_memory flash;
        plan_memory_estimate(&c, p->dp, &PLAN_PRECISION_BF16_FLASH, &flash);
        CHECK(p->mem.total_bytes == flash.total_bytes, "candidate %d counted as atoll-train --bf16 keeps it", i);
        CHECK(p->est.mfu > 0 && p->est.mfu <= s->cl.links.mfu_base, "mfu %g", p->est.mfu);
        int mb_count = m->global_batch_size / (p->micro_batch * p->dp);
        CHECK_CLOSE(p->est.bubble, (p->pp - 1.0) / (p->vpp * mb_count), 1e-12);
        CHECK(p->fabric.tp_island_violations == 0, "TP inside islands");
        if (i) CHECK(v[i].est.step_s >= v[i - 1].est.step_s * (1 - 2 * PLAN_TIE), "ranked by step time (%d)", i);
    }
}

/* For the best layout, micro-batch 1 ranks above every larger micro-batch of
 * the same (tp, pp, v, sp, recompute, ZeRO-1): the bubble and TP granularity
 * argument of the finding, not only a tie-break. */
static void check_mb1_first(const plan_candidate *v, int n)
{
    int seen_larger = 0;
    for (int i = 0; i < n; i++) {
        const plan_candidate *p = &v[i];
        if (p->tp != v[0].tp || p->pp != v[0].pp || p->vpp != v[0].vpp || p->sp != v[0].sp ||
            p->recompute != v[0].recompute || p->zero1 != v[0].zero1)
            continue;
        if (p->micro_batch > 1) seen_larger = 1;
        if (p->micro_batch == 1) CHECK(!seen_larger, "a larger micro-batch ranked above 1 for the best layout");
    }
}

/* LLaMA-13B-like on 256 A100s (the paper's 32 DGX nodes): micro-batch 1 and no
 * recompute when memory allows; TP within one node. */
static void test_13b(void)
{
    atoll_config m;
    gpt(&m, 40, 5120, 40, 2048, 32000, 2048);
    sim s;
    sim_make(&s, "a100-80gb", 256, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 10, "13B candidates: %d (%s)", n, why);
    if (n > 0) {
        show("13B on 256 A100 best", &v[0]);
        CHECK(v[0].micro_batch == 1, "micro-batch 1 preferred");
        CHECK(v[0].recompute == RECOMPUTE_NONE, "no recompute when memory allows");
        CHECK(v[0].tp <= 8, "TP within the node");
        check_contract(&m, &s, v, n);
        check_mb1_first(v, n);
    }
    free(v);
    free(s.nodes);
}

/* GPT-3 175B on 1024 A100s: does not fit in one node, so the pipeline crosses
 * nodes while TP stays inside the NVLink island. */
static void test_175b(void)
{
    atoll_config m;
    gpt(&m, 96, 12288, 96, 2048, 51200, 1536);
    sim s;
    sim_make(&s, "a100-80gb", 1024, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 0, "175B: %s", why);
    if (n > 0) {
        show("175B on 1024 A100 best", &v[0]);
        CHECK(v[0].tp <= 8 && v[0].tp * v[0].pp > 8 && v[0].pp > 1, "pipeline across nodes, TP in node");
        CHECK(v[0].micro_batch == 1, "micro-batch 1");
        check_mb1_first(v, n);
        for (int i = 0; i < n; i++) CHECK(v[i].tp * v[i].pp > 8, "no layout fits in one node (%d)", i);
        CHECK(v[0].est.mfu > 0.35 && v[0].est.mfu < 0.6, "MFU near the published 0.44-0.52: %.3f", v[0].est.mfu);
        check_contract(&m, &s, v, n);
    }
    free(v);
    free(s.nodes);
}

/* MT-NLG 530B on 2,240 A100s: the planner picks the published layout, tp 8
 * (one node's island) and pp 35 across nodes, micro-batch 1. */
static void test_mtnlg(void)
{
    atoll_config m;
    gpt(&m, 105, 20480, 128, 2048, 51200, 1920);
    sim s;
    sim_make(&s, "a100-80gb", 2240, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 0, "MT-NLG: %s", why);
    if (n > 0) {
        show("MT-NLG on 2240 A100 best", &v[0]);
        CHECK(v[0].tp == 8 && v[0].pp == 35 && v[0].dp == 8 && v[0].micro_batch == 1, "published tp 8, pp 35, dp 8");
        check_contract(&m, &s, v, n);
    }
    free(v);
    free(s.nodes);
}

/* A 1.3B model needs no model parallelism at all. */
static void test_small(void)
{
    atoll_config m;
    gpt(&m, 24, 2048, 16, 2048, 51200, 512);
    sim s;
    sim_make(&s, "h100-sxm", 64, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 0, "1.3B: %s", why);
    if (n > 0) {
        show("1.3B on 64 H100 best", &v[0]);
        CHECK(v[0].tp == 1 && v[0].pp == 1 && v[0].recompute == RECOMPUTE_NONE, "pure data parallel");
        check_contract(&m, &s, v, n);
    }
    free(v);
    free(s.nodes);
}

/* The planner counts memory as atoll-train --bf16 keeps it: flash attention, a
 * row statistic and no [s, s] probabilities. At seq 4096 Megatron's figure for the
 * probabilities (5as^2b, 2 GiB a layer here) would force recompute or model
 * parallelism on a 1.5B model that trains as pure data parallel without either. */
static void test_flash_counted(void)
{
    atoll_config m;
    gpt(&m, 48, 1600, 25, 4096, 50304, 64);
    sim s;
    sim_make(&s, "h100-sxm", 8, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 0, "1.5B at seq 4096: %s", why);
    double usable = s.cl.gpu->memory_bytes * PLAN_MEM_USABLE;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].tp != 1 || v[i].pp != 1 || v[i].recompute != RECOMPUTE_NONE) continue;
        atoll_config c = m;
        plan_apply(&v[i], &c);
        plan_memory megatron;
        plan_memory_estimate(&c, v[i].dp, &PLAN_PRECISION_BF16, &megatron);
        CHECK(megatron.total_bytes > usable, "Megatron's figure %.1f GiB would not fit %.1f GiB",
              megatron.total_bytes / (1 << 30), usable / (1 << 30));
        found = 1;
    }
    CHECK(found, "pure data parallel without recompute offered");
    if (n > 0) {
        show("1.5B seq 4096 on 8 H100 best", &v[0]);
        CHECK(v[0].tp == 1 && v[0].pp == 1 && v[0].recompute == RECOMPUTE_NONE, "no model parallelism, no recompute");
        check_contract(&m, &s, v, n);
    }
    free(v);
    free(s.nodes);
}

/* GB200: the island is a 72-GPU rack, so TP may be wider than a 4-GPU tray. */
static void test_gb200_and_fixed(void)
{
    atoll_config m;
    gpt(&m, 96, 12288, 96, 4096, 51200, 1152);
    sim s;
    sim_make(&s, "gb200", 576, 4);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n > 0, "gb200: %s", why);
    int wide = 0;
    for (int i = 0; i < n; i++) wide |= v[i].tp > 4;
    CHECK(wide, "TP wider than a tray is considered on NVL72");
    if (n > 0) {
        show("175B s4k on 576 GB200 best", &v[0]);
        check_contract(&m, &s, v, n);
    }
    free(v);

    plan_fixed fx;
    plan_fixed_none(&fx);
    fx.tp = 4;
    fx.recompute = RECOMPUTE_SELECTIVE;
    fx.micro_batch = 2;
    n = plan(&m, &s, &fx, &v, why);
    CHECK(n > 0, "fixed: %s", why);
    for (int i = 0; i < n; i++)
        CHECK(v[i].tp == 4 && v[i].recompute == RECOMPUTE_SELECTIVE && v[i].micro_batch == 2, "fixed choices kept");
    free(v);
    free(s.nodes);
}

static void test_refusals(void)
{
    atoll_config m;
    gpt(&m, 128, 25600, 160, 2048, 51200, 3072); /* ~1T parameters */
    sim s;
    sim_make(&s, "h100-sxm", 8, 8);
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, NULL, &v, why);
    CHECK(n == 0 && strstr(why, "GiB per GPU") && v == NULL, "1T on 8 GPUs: %d, %s", n, why);
    m.global_batch_size = 0;
    CHECK(plan(&m, &s, NULL, &v, why) == -1 && strstr(why, "--global-batch-size"), "gbs required: %s", why);
    gpt(&m, 4, 64, 3, 128, 256, 8);
    CHECK(plan(&m, &s, NULL, &v, why) == -1 && strstr(why, "divisible"), "bad model: %s", why);
    free(s.nodes);
}

/* The same layout predicts a slower step on a fragmented, misaligned placement. */
static void test_placement_matters(void)
{
    atoll_config m;
    gpt(&m, 32, 4096, 32, 2048, 32000, 288); /* a whole number of micro-batches per DP rank at dp 3 */
    m.tensor_model_parallel_size = 4;
    m.pipeline_model_parallel_size = 2;
    m.micro_batch_size = 1;
    sim s;
    sim_make(&s, "a100-80gb", 512, 8);
    int dp = 3; /* 24 GPUs: odd dp defeats Megatron-order rail alignment */
    place_request req = { 4, 2, dp, NULL, 0 };
    place_result a, nv;
    char err[256];
    CHECK(place_topology(s.cl.nodes, s.cl.nnodes, NULL, NULL, &req, &a, err, sizeof err) == 0, "%s", err);
    CHECK(place_naive(s.cl.nodes, s.cl.nnodes, NULL, &req, &nv, err, sizeof err) == 0, "%s", err);
    plan_fabric_cost fa, fn;
    plan_fabric_cost_of(s.cl.nodes, NULL, &a, &s.cl.links, &fa);
    plan_fabric_cost_of(s.cl.nodes, NULL, &nv, &s.cl.links, &fn);
    plan_memory mem;
    plan_memory_estimate(&m, dp, &PLAN_PRECISION_BF16, &mem);
    plan_estimate ea, en;
    plan_perf_estimate(&m, dp, s.cl.gpu, &s.cl.links, &fa, &mem, &ea);
    plan_perf_estimate(&m, dp, s.cl.gpu, &s.cl.links, &fn, &mem, &en);
    CHECK(fn.misaligned_groups > 0 && fa.misaligned_groups == 0, "alignment %d vs %d", fa.misaligned_groups,
          fn.misaligned_groups);
    CHECK(ea.step_s < en.step_s && ea.dp_s < en.dp_s, "aligned %.4f s (dp %.4f) vs naive %.4f s (dp %.4f)", ea.step_s,
          ea.dp_s, en.step_s, en.dp_s);
    place_result_free(&a);
    place_result_free(&nv);
    free(s.nodes);
}

/* The slowest stage's work, in layers, with the LM head's H on the last. */
static double slowest_stage(const atoll_config *c, double H)
{
    double worst = 0;
    for (int st = 0; st < c->pipeline_model_parallel_size; st++) {
        int b, e;
        cfg_stage_layers(c, st, &b, &e);
        double t = e - b + (st == c->pipeline_model_parallel_size - 1 ? H : 0);
        if (t > worst) worst = t;
    }
    return worst;
}

/* *o = c split with f layers on the first stage and l on the last (0: as the
 * others); 1 when the validator accepts it on c's pipeline. */
static int split_of(const atoll_config *c, int f, int l, atoll_config *o)
{
    char err[256];
    *o = *c;
    o->decoder_first_pipeline_num_layers = f;
    o->decoder_last_pipeline_num_layers = l;
    return cfg_validate_layout(o, c->pipeline_model_parallel_size, 0, err, sizeof err) == 0;
}

/* plan_balanced_split against every split the validator accepts: no other
 * makes the slowest stage (its layers, plus the LM head's share on the last)
 * faster. Stage times counted here from the shapes: a GPT layer's 12h^2 + 13h
 * parameters at 6 FLOPs each and attention's 12hs; the head's 6Vh. */
static void test_balanced_split_is_best(void)
{
    int checked = 0, uneven = 0;
    const int vocabs[] = { 512, 50304, 256000 };
    for (int L = 2; L <= 24; L += 1)
        for (int pp = 2; pp <= 8 && pp <= L; pp++)
            for (int vi = 0; vi < 3; vi++) {
                atoll_config c;
                gpt(&c, L, 1024, 16, 2048, vocabs[vi], 64);
                double h = c.hidden_size, H = 6.0 * c.vocab_size * h / (6 * (12 * h * h + 13 * h) + 12 * h * 2048);
                c.pipeline_model_parallel_size = pp;
                int f, l;
                plan_balanced_split(&c, &f, &l);
                c.decoder_first_pipeline_num_layers = f;
                c.decoder_last_pipeline_num_layers = l;
                char err[256];
                /* (0, 0) with pp not dividing L: no split fits, which the loop below sees as no split validating */
                int none = !f && !l && L % pp;
                CHECK(none || cfg_validate_layout(&c, pp, 0, err, sizeof err) == 0, "L %d pp %d V %d: split %d/%d "
                      "refused: %s", L, pp, c.vocab_size, f, l, err);
                double got = none ? INFINITY : slowest_stage(&c, H);
                for (int f2 = 0; f2 <= L; f2++)
                    for (int l2 = 0; l2 <= L; l2++) {
                        atoll_config o;
                        if (!split_of(&c, f2, l2, &o)) continue;
                        double t_o = slowest_stage(&o, H);
                        CHECK(!none && got <= t_o + 1e-9, "L %d pp %d V %d: split %d/%d (slowest %.3f) loses to %d/%d (%.3f)", L,
                              pp, c.vocab_size, f, l, got, f2, l2, t_o);
                        checked++;
                    }
                uneven += f || l;
            }
    CHECK(checked > 1000 && uneven > 100, "%d splits compared, %d uneven chosen", checked, uneven);
}

/* The planner's best layout for `m` with `fx` fixed, shown with its layers per
 * stage and applied to *c; the candidates (caller frees) in *v, or 0. */
static int plan_best(const atoll_config *m, sim *s, const plan_fixed *fx, const char *what, plan_candidate **v,
                     atoll_config *c)
{
    char why[256] = "";
    int n = plan(m, s, fx, v, why);
    CHECK(n > 0, "%s: %s", what, why);
    *c = *m;
    if (n <= 0) return 0;
    show(what, &(*v)[0]);
    plan_apply(&(*v)[0], c);
    int pp = c->pipeline_model_parallel_size;
    printf("  layers per stage %d, %d, .., %d\n", cfg_stage_num_layers(c, 0), cfg_stage_num_layers(c, pp > 2 ? 1 : 0),
           cfg_stage_num_layers(c, pp - 1));
    return n;
}

/* plan_fitting_split against every split the validator accepts, under memory
 * caps around the least any split needs (just under it nothing fits, at it
 * exactly that split does): what it returns fits (plan_memory_estimate of the
 * applied split), no fitting split has a faster slowest stage, and it finds
 * none only when none fits. 1F1B's first stages keep the most micro-batches in
 * flight, so the leanest splits move layers off them. */
static void test_fitting_split_is_best(void)
{
    int checked = 0, found_below_even = 0, none = 0;
    const double caps[] = { 0.99, 1.0, 1.05, 1.15, 1.3 };
    for (int L = 2; L <= 20; L++)
        for (int pp = 2; pp <= 6 && pp <= L; pp++) {
            atoll_config c;
            gpt(&c, L, 1024, 16, 4096, 50304, 64);
            c.pipeline_model_parallel_size = pp;
            c.micro_batch_size = 4;
            double layer_flops = 6 * (12.0 * 1024 * 1024 + 13 * 1024) + 12.0 * 1024 * 4096 + 4.0 * 1024 * 4096;
            double H = 6.0 * c.vocab_size * 1024 / layer_flops; /* selective recompute's attention forward */
            c.recompute_granularity = RECOMPUTE_SELECTIVE;
            /* every split the validator accepts: its need and its slowest stage */
            struct { int f, l; double bytes, slowest; } all[21 * 21];
            int na = 0;
            double least = INFINITY, even = INFINITY;
            for (int f2 = 0; f2 <= L; f2++)
                for (int l2 = 0; l2 <= L; l2++) {
                    atoll_config o;
                    if (!split_of(&c, f2, l2, &o)) continue;
                    plan_memory m;
                    plan_memory_estimate(&o, 1, &PLAN_PRECISION_BF16_FLASH, &m);
                    all[na].f = f2, all[na].l = l2, all[na].bytes = m.total_bytes, all[na++].slowest = slowest_stage(&o, H);
                    least = fmin(least, m.total_bytes);
                    if (!f2 && !l2) even = m.total_bytes;
                }
            for (int ci = 0; ci < 5; ci++) {
                double usable = least * caps[ci];
                int f, l, rc = plan_fitting_split(&c, 1, &PLAN_PRECISION_BF16_FLASH, usable, &f, &l);
                atoll_config g = c;
                g.decoder_first_pipeline_num_layers = f;
                g.decoder_last_pipeline_num_layers = l;
                char err[256];
                double got = INFINITY;
                if (rc == 0) {
                    plan_memory m;
                    plan_memory_estimate(&g, 1, &PLAN_PRECISION_BF16_FLASH, &m);
                    CHECK(cfg_validate_layout(&g, pp, 0, err, sizeof err) == 0 && m.total_bytes <= usable,
                          "L %d pp %d cap %.2f: split %d/%d needs %.3g of %.3g bytes (%s)", L, pp, caps[ci], f, l,
                          m.total_bytes, usable, err);
                    got = slowest_stage(&g, H);
                    found_below_even += usable < even;
                } else {
                    none++;
                }
                for (int k = 0; k < na; k++) {
                    if (all[k].bytes > usable) continue;
                    CHECK(got <= all[k].slowest + 1e-9, "L %d pp %d cap %.2f: split %d/%d (rc %d, slowest %.3f) "
                          "loses to %d/%d (%.3f), which fits", L, pp, caps[ci], f, l, rc, got, all[k].f, all[k].l,
                          all[k].slowest);
                    checked++;
                }
            }
        }
    printf("fitting splits: %d compared, %d found under the even split's need, %d caps nothing meets\n", checked,
           found_below_even, none);
    CHECK(checked > 1000 && found_below_even > 50 && none >= 80, "%d fitting splits compared, %d found under the even "
          "split's need, %d caps nothing meets", checked, found_below_even, none);
}

/* A 7B-like model at seq 8192 with micro-batch 2 in a 4-stage pipeline without
 * tensor parallelism and selective recomputation, as fixed: split evenly its
 * first stage (4 micro-batches in flight) needs more than an H100 holds; the
 * planner moves layers off it, and the layout fits. */
static void test_memory_split(void)
{
    atoll_config m;
    gpt(&m, 32, 4096, 32, 8192, 50304, 256);
    sim s;
    sim_make(&s, "h100-sxm", 16, 8);
    plan_fixed fx;
    plan_fixed_none(&fx);
    fx.tp = 1;
    fx.pp = 4;
    fx.micro_batch = 2;
    fx.recompute = RECOMPUTE_SELECTIVE;
    fx.zero1 = 1;
    atoll_config even = m;
    even.tensor_model_parallel_size = 1;
    even.pipeline_model_parallel_size = 4;
    even.micro_batch_size = 2;
    even.recompute_granularity = RECOMPUTE_SELECTIVE;
    even.use_distributed_optimizer = 1;
    plan_memory em;
    plan_memory_estimate(&even, 4, &PLAN_PRECISION_BF16_FLASH, &em);
    double usable = s.cl.gpu->memory_bytes * PLAN_MEM_USABLE;
    CHECK(em.total_bytes > usable && em.worst_stage == 0, "split evenly: stage %d needs %.1f GiB of %.1f",
          em.worst_stage, em.total_bytes / (1 << 30), usable / (1 << 30));
    plan_candidate *v;
    atoll_config c;
    int n = plan_best(&m, &s, &fx, "7B seq 8192 tp 1 pp 4 mb 2 selective", &v, &c);
    if (n > 0) {
        CHECK(cfg_stage_num_layers(&c, 0) < 8 && v[0].mem.total_bytes <= usable,
              "the first stage holds fewer than 8 layers (%d) and the layout fits (%.1f GiB)",
              cfg_stage_num_layers(&c, 0), v[0].mem.total_bytes / (1 << 30));
        check_contract(&m, &s, v, n);
    }
    free(v);
    free(s.nodes);
}

/* A LLaMA-3-8B-like model at seq 8192 in a 4-stage pipeline: its untied
 * 128256-token head costs about 1.8 layers, so the planner moves layers off the
 * last stage and predicts the step faster than the same layout split evenly;
 * 30 layers, which 4 stages cannot split evenly, still get pp 4 layouts. */
static void test_uneven_pipeline(void)
{
    atoll_config m;
    gpt(&m, 32, 4096, 32, 8192, 128256, 128);
    m.ffn_hidden_size = 14336;
    m.swiglu = 1;
    snprintf(m.normalization, sizeof m.normalization, "RMSNorm");
    snprintf(m.position_embedding_type, sizeof m.position_embedding_type, "rope");
    m.group_query_attention = 1;
    m.num_query_groups = 8;
    m.untie_embeddings_and_output_weights = 1;
    m.disable_bias_linear = 1;
    sim s;
    sim_make(&s, "h100-sxm", 8, 8);
    plan_fixed fx;
    plan_fixed_none(&fx);
    fx.pp = 4;
    plan_candidate *v;
    atoll_config c;
    char why[256] = "";
    int n = plan_best(&m, &s, &fx, "LLaMA-8B pp 4", &v, &c);
    if (n > 0) {
        int mid = cfg_stage_num_layers(&c, 1), last = cfg_stage_num_layers(&c, 3);
        CHECK(v[0].last_layers > 0 && last < mid, "the LM head's stage holds fewer layers (%d vs %d)", last, mid);
        int twin = -1;
        for (int i = 0; i < n && twin < 0; i++)
            if (v[i].tp == v[0].tp && v[i].dp == v[0].dp && v[i].micro_batch == v[0].micro_batch &&
                v[i].vpp == v[0].vpp && v[i].sp == v[0].sp && v[i].recompute == v[0].recompute &&
                v[i].zero1 == v[0].zero1 && !v[i].first_layers && !v[i].last_layers)
                twin = i;
        CHECK(twin > 0 && v[twin].est.step_s > v[0].est.step_s * 1.05, "even twin %.3f s vs %.3f s",
              twin > 0 ? v[twin].est.step_s : 0, v[0].est.step_s);
        check_contract(&m, &s, v, n);
    }
    free(v);
    /* what `atoll submit` notes for this model split evenly over 4 stages: 8, 8, 8, 8 + a 1.8-layer head
     * against the planner's 7, 9, 9, 7 + head: the slowest stage 9.8 -> 9 layers of work */
    atoll_config even = m;
    even.pipeline_model_parallel_size = 4;
    int f, l;
    double head, gain = plan_split_gain(&even, &f, &l, &head);
    CHECK(head > 1.7 && head < 2.0 && f == 7 && l == 7 && fabs(gain - (1 - 9 / (8 + head))) < 1e-9,
          "split gain %.4f (%d/%d, head %.3f layers)", gain, f, l, head);
    atoll_config small = even;
    small.vocab_size = 256;
    CHECK(plan_split_gain(&small, &f, &l, &head) == 0 && !f && !l, "no gain with a 256-token head: %d/%d", f, l);
    m.num_layers = 30;
    n = plan(&m, &s, &fx, &v, why);
    CHECK(n > 0 && (v[0].first_layers || v[0].last_layers), "30 layers over 4 stages: %d layouts (%s)", n, why);
    if (n > 0) check_contract(&m, &s, v, n);
    free(v);
    free(s.nodes);
}

/* --recompute-method block: a quarter of the layers rebuilt costs a quarter of full recompute's extra
 * forward (one more forward of those layers: 1/3 of their forward and backward), in the step time's compute */
static void test_block_recompute(void)
{
    atoll_config m;
    gpt(&m, 32, 4096, 32, 2048, 32000, 256);
    m.tensor_model_parallel_size = 8;
    m.micro_batch_size = 1;
    sim s;
    sim_make(&s, "h100-sxm", 8, 8);
    place_request req = { 8, 1, 1, NULL, 0 };
    place_result a;
    char err[256];
    CHECK(place_topology(s.cl.nodes, s.cl.nnodes, NULL, NULL, &req, &a, err, sizeof err) == 0, "%s", err);
    plan_fabric_cost fc;
    plan_fabric_cost_of(s.cl.nodes, NULL, &a, &s.cl.links, &fc);
    double step[3];
    for (int k = 0; k < 3; k++) {
        atoll_config c = m;
        c.recompute_granularity = k ? RECOMPUTE_FULL : RECOMPUTE_NONE;
        if (k == 1) {
            snprintf(c.recompute_method, sizeof c.recompute_method, "block");
            c.recompute_num_layers = 8;
        }
        plan_memory mem;
        plan_estimate e;
        plan_memory_estimate(&c, 1, &PLAN_PRECISION_BF16, &mem);
        plan_perf_estimate(&c, 1, s.cl.gpu, &s.cl.links, &fc, &mem, &e);
        step[k] = e.step_s;
    }
    CHECK(step[0] < step[1] && step[1] < step[2], "none %.4f s < block 8 of 32 %.4f s < full %.4f s", step[0], step[1],
          step[2]);
    CHECK(fabs((step[1] - step[0]) / (step[2] - step[0]) - 0.25) < 0.02, "block 8 of 32 adds %.3f of full's extra",
          (step[1] - step[0]) / (step[2] - step[0]));
    place_result_free(&a);
    free(s.nodes);
}

/* Where no recompute does not fit and full does, the planner also offers full recompute of only the
 * first N layers (--recompute-method block), N the fewest that fit: LLaMA-7B-like at 24k tokens on 8 H100s,
 * tp 2 with SP. Where no recompute fits, or the model fixes the method, it offers no other N. */
static void test_fewest_rebuilt(void)
{
    atoll_config m;
    gpt(&m, 32, 4096, 32, 24576, 32000, 64);
    sim s;
    sim_make(&s, "h100-sxm", 8, 8);
    plan_fixed fx;
    plan_fixed_none(&fx);
    fx.tp = 2, fx.pp = 1, fx.micro_batch = 1, fx.sp = 1;
    plan_candidate *v;
    char why[256] = "";
    int n = plan(&m, &s, &fx, &v, why);
    CHECK(n > 0, "24k tokens on tp 2: %s", why);
    const plan_candidate *blk = NULL, *full = NULL;
    for (int i = 0; i < n; i++) {
        CHECK(v[i].recompute == RECOMPUTE_FULL, "candidate %d: recompute %s, though only full fits", i,
              cfg_recompute_name(v[i].recompute));
        if (v[i].recompute_layers && !blk) blk = &v[i];
        if (!v[i].recompute_layers && v[i].zero1 && !full) full = &v[i];
    }
    CHECK(blk && full && blk == &v[0], "the best layout rebuilds only some layers (%s)", blk ? "ranked below" : "none");
    if (blk && full) {
        char rc[24];
        show(plan_recompute_str(blk, rc, sizeof rc), blk);
        show("full", full);
        CHECK(blk->recompute_layers > 0 && blk->recompute_layers < 32, "block %d of 32 layers", blk->recompute_layers);
        CHECK(blk->est.step_s < 0.9 * full->est.step_s, "block %d: %.3f s a step against full's %.3f s",
              blk->recompute_layers, blk->est.step_s, full->est.step_s);
        /* the fewest: one layer fewer does not fit, with or without ZeRO-1 */
        atoll_config c = m;
        plan_apply(blk, &c);
        CHECK(!strcmp(c.recompute_method, "block") && c.recompute_num_layers == blk->recompute_layers,
              "plan_apply gives --recompute-method block --recompute-num-layers %d", blk->recompute_layers);
        c.recompute_num_layers--;
        for (int z = 0; z < 2; z++) {
            plan_memory mem;
            c.use_distributed_optimizer = z;
            plan_memory_estimate(&c, blk->dp, &PLAN_PRECISION_BF16_FLASH, &mem);
            CHECK(mem.total_bytes > s.cl.gpu->memory_bytes * PLAN_MEM_USABLE, "block %d fits too (zero1 %d): %.1f GiB",
                  c.recompute_num_layers, z, mem.total_bytes / (1 << 30));
        }
    }
    check_contract(&m, &s, v, n);
    free(v);

    /* the model fixes the method: every full-recompute candidate keeps it */
    atoll_config fixed = m;
    fixed.recompute_granularity = RECOMPUTE_FULL;
    snprintf(fixed.recompute_method, sizeof fixed.recompute_method, "block");
    fixed.recompute_num_layers = 20;
    fx.recompute = RECOMPUTE_FULL;
    n = plan(&fixed, &s, &fx, &v, why);
    CHECK(n > 0, "block 20 given: %s", why);
    for (int i = 0; i < n; i++)
        CHECK(v[i].recompute_layers == 20, "candidate %d: block %d, the model said 20", i, v[i].recompute_layers);
    free(v);

    /* at 8k tokens no recompute fits: no layout rebuilds some layers */
    fx.recompute = -1;
    m.seq_length = 8192;
    n = plan(&m, &s, &fx, &v, why);
    CHECK(n > 0 && v[0].recompute == RECOMPUTE_NONE, "8k tokens: no recompute first (%s)", why);
    for (int i = 0; i < n; i++)
        CHECK(!v[i].recompute_layers, "candidate %d rebuilds %d layers", i, v[i].recompute_layers);
    free(v);
    free(s.nodes);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_fewest_rebuilt();
    test_block_recompute();
    test_balanced_split_is_best();
    test_fitting_split_is_best();
    test_uneven_pipeline();
    test_memory_split();
    test_13b();
    test_175b();
    test_small();
    test_flash_counted();
    test_mtnlg();
    test_gb200_and_fixed();
    test_refusals();
    test_placement_matters();
    return check_summary(argv[0]);
}
