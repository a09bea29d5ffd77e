/* atoll plan: rank layouts by predicted step time, MFU and memory, without running
 * anything. Offline (--num-gpus, --gpus-per-node, --gpu) it plans on a simulated
 * homogeneous cluster; with --cluster it asks the coordinator for the live nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "tokenizer.h"
#include "config.h"
#include "jsonw.h"
#include "msg.h"
#include "plan.h"

typedef struct {
    int gpn, top, explain, cluster;
    const char *gpu;
    plan_fixed fx;
    int set_tp, set_pp, set_mb, set_lv, set_sp, set_rc, set_zero;
} plan_args;

static int flag_is(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

/* "--key value" or "--key=value"; returns argv entries consumed, -1 on error. */
static int take_value(int argc, char **argv, int i, const char **val, char *err, size_t errlen)
{
    const char *eq = strchr(argv[i], '=');
    if (eq) {
        *val = eq + 1;
        return 1;
    }
    if (i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", argv[i]);
        return -1;
    }
    *val = argv[i + 1];
    return 2;
}

static int positive(const char *flag, const char *v, int *out, char *err, size_t errlen)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > 1 << 20) {
        snprintf(err, errlen, "%s %s: expected a positive integer", flag, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* Our own flags, and a note of which parallel flags the user fixed (those are
 * still parsed by config.c, so 0 is returned for them). */
static int plan_extra(void *ctx, int argc, char **argv, int i, char *err, size_t errlen)
{
    plan_args *a = ctx;
    const char *arg = argv[i], *v;
    int used;
    if (flag_is(arg, "--gpus-per-node") || flag_is(arg, "--top")) {
        if ((used = take_value(argc, argv, i, &v, err, errlen)) < 0) return -1;
        if (positive(flag_is(arg, "--top") ? "--top" : "--gpus-per-node", v, flag_is(arg, "--top") ? &a->top : &a->gpn,
                     err, errlen))
            return -1;
        return used;
    }
    if (flag_is(arg, "--gpu")) {
        if ((used = take_value(argc, argv, i, &v, err, errlen)) < 0) return -1;
        a->gpu = v;
        return used;
    }
    if (!strcmp(arg, "--explain")) return a->explain = 1;
    if (!strcmp(arg, "--cluster")) return a->cluster = 1;
    a->set_tp |= flag_is(arg, "--tensor-model-parallel-size");
    a->set_pp |= flag_is(arg, "--pipeline-model-parallel-size");
    a->set_mb |= flag_is(arg, "--micro-batch-size");
    a->set_lv |= flag_is(arg, "--num-layers-per-virtual-pipeline-stage");
    a->set_sp |= flag_is(arg, "--sequence-parallel");
    a->set_rc |= flag_is(arg, "--recompute-granularity");
    a->set_zero |= flag_is(arg, "--use-distributed-optimizer");
    return 0;
}

static void fixed_from(plan_args *a, const atoll_config *c)
{
    plan_fixed_none(&a->fx);
    if (a->set_tp) a->fx.tp = c->tensor_model_parallel_size;
    if (a->set_pp) a->fx.pp = c->pipeline_model_parallel_size;
    if (a->set_mb) a->fx.micro_batch = c->micro_batch_size;
    if (a->set_lv) a->fx.layers_per_vstage = c->num_layers_per_virtual_pipeline_stage ? c->num_layers_per_virtual_pipeline_stage : -1;
    if (a->set_sp) a->fx.sp = c->sequence_parallel;
    if (a->set_rc) a->fx.recompute = (int)c->recompute_granularity;
    if (a->set_zero) a->fx.zero1 = c->use_distributed_optimizer;
}

/* The layers per pipeline stage of a candidate: "even", or "first,middle xN,last"
 * as --decoder-first/last-pipeline-num-layers split them. */
static const char *split_str(const plan_candidate *p, const atoll_config *model, char *buf, size_t n)
{
    if (!p->first_layers && !p->last_layers) return "even";
    atoll_config c = *model;
    plan_apply(p, &c);
    int first = cfg_stage_num_layers(&c, 0), last = cfg_stage_num_layers(&c, p->pp - 1);
    if (p->pp > 2) snprintf(buf, n, "%d,%dx%d,%d", first, cfg_stage_num_layers(&c, 1), p->pp - 2, last);
    else snprintf(buf, n, "%d,%d", first, last);
    return buf;
}

static void json_candidate(jsonw *w, const plan_candidate *p)
{
    jsonw_obj(w);
    jsonw_kint(w, "tp", p->tp);
    jsonw_kint(w, "pp", p->pp);
    jsonw_kint(w, "dp", p->dp);
    jsonw_kint(w, "micro_batch", p->micro_batch);
    jsonw_kint(w, "vpp", p->vpp);
    jsonw_kint(w, "decoder_first_pipeline_num_layers", p->first_layers);
    jsonw_kint(w, "decoder_last_pipeline_num_layers", p->last_layers);
    jsonw_kbool(w, "sp", p->sp);
    jsonw_kstr(w, "recompute", cfg_recompute_name(p->recompute));
    if (p->recompute_layers) { /* full recompute of the first N layers of each model chunk */
        jsonw_kstr(w, "recompute_method", "block");
        jsonw_kint(w, "recompute_num_layers", p->recompute_layers);
    }
    jsonw_kbool(w, "zero1", p->zero1);
    jsonw_knum(w, "step_s", p->est.step_s);
    jsonw_knum(w, "tflops_per_gpu", p->est.tflops_per_gpu);
    jsonw_knum(w, "mfu", p->est.mfu);
    jsonw_knum(w, "bubble", p->est.bubble);
    jsonw_knum(w, "memory_bytes_per_gpu", p->mem.total_bytes);
    jsonw_obj_end(w);
}

static void json_explain(jsonw *w, const plan_candidate *p)
{
    jsonw_key(w, "explain");
    jsonw_obj(w);
    jsonw_kint(w, "microbatches", p->est.microbatches);
    jsonw_knum(w, "compute_s", p->est.compute_s);
    jsonw_knum(w, "tp_comm_s", p->est.tp_s);
    jsonw_knum(w, "pp_comm_s", p->est.pp_s);
    jsonw_knum(w, "bubble_s", p->est.bubble_s);
    jsonw_knum(w, "dp_comm_s", p->est.dp_s);
    jsonw_knum(w, "dp_exposed_s", p->est.dp_exposed_s);
    jsonw_knum(w, "optimizer_s", p->est.optimizer_s);
    jsonw_knum(w, "params_per_gpu", p->mem.params_per_gpu);
    jsonw_knum(w, "state_bytes", p->mem.state_bytes);
    jsonw_knum(w, "activation_bytes", p->mem.act_bytes);
    jsonw_knum(w, "activation_bytes_per_layer", p->mem.act_per_layer);
    jsonw_knum(w, "inflight_layers", p->mem.inflight_layers);
    jsonw_kint(w, "worst_stage", p->mem.worst_stage);
    jsonw_knum(w, "tp_link_Bps", p->fabric.tp.Bps);
    jsonw_knum(w, "dp_link_Bps", p->fabric.dp.Bps);
    jsonw_knum(w, "pp_link_Bps", p->fabric.pp.Bps);
    jsonw_kint(w, "leaf_switches", p->fabric.leaves);
    jsonw_obj_end(w);
}

static const char *link_name(const plan_link *l, const plan_links *L)
{
    if (!l->multi_node) return "NVLink";
    if (l->Bps >= L->nic_Bps) return "NIC rail";
    return "leaf uplink";
}

static void print_explain(const plan_candidate *p, const atoll_config *model, const plan_cluster *cl)
{
    const plan_estimate *e = &p->est;
    const plan_memory *m = &p->mem;
    double gib = 1u << 30;
    char split[48], rc[24];
    printf("\nexplain: tp %d, pp %d, dp %d, micro-batch %d, vpp %d, sp %d, recompute %s, zero1 %d on %s\n", p->tp, p->pp,
           p->dp, p->micro_batch, p->vpp, p->sp, plan_recompute_str(p, rc, sizeof rc), p->zero1, cl->gpu->type);
    if (p->pp > 1)
        printf("  layers per stage: %s%s\n", split_str(p, model, split, sizeof split),
               p->first_layers || p->last_layers ? " (--decoder-first/last-pipeline-num-layers: the LM head's stage "
                                                   "holds fewer)" : "");
    printf("  step time %.4f s = compute %.4f + TP/SP collectives %.4f + PP p2p %.4f + bubble %.4f\n"
           "                     + exposed DP %.4f (of %.4f) + optimizer %.4f\n",
           e->step_s, e->compute_s, e->tp_s, e->pp_s, e->bubble_s, e->dp_exposed_s, e->dp_s, e->optimizer_s);
    printf("  micro-batches per step %d; bubble (p-1)/(v*m) = %.4f; MFU %.3f; %.1f TFLOP/s per GPU\n", e->microbatches,
           e->bubble, e->mfu, e->tflops_per_gpu);
    printf("  links: TP %s %.0f GB/s; DP %s %.0f GB/s (x%d members per node); PP %s %.0f GB/s; %d leaf switch(es)\n",
           link_name(&p->fabric.tp, &cl->links), p->fabric.tp.Bps / 1e9, link_name(&p->fabric.dp, &cl->links),
           p->fabric.dp.Bps / 1e9, p->fabric.dp.local, link_name(&p->fabric.pp, &cl->links), p->fabric.pp.Bps / 1e9,
           p->fabric.leaves);
    printf("  memory per GPU (stage %d) %.2f GiB = state %.2f GiB (%.3g params x %.2f B) + activations %.2f GiB\n",
           m->worst_stage, m->total_bytes / gib, m->state_bytes / gib, m->params_per_gpu,
           m->state_bytes / m->params_per_gpu, m->act_bytes / gib);
    printf("    activations: %.1f MiB per layer per micro-batch x %.0f layer-micro-batches in flight (+ embedding, "
           "logits, recompute working set)\n", m->act_per_layer / (1 << 20), m->inflight_layers);
    printf("    usable: %.1f GiB (%.0f%% of %.1f GiB)\n", cl->gpu->memory_bytes * PLAN_MEM_USABLE / gib,
           PLAN_MEM_USABLE * 100, cl->gpu->memory_bytes / gib);
}

/* The live nodes, as the coordinator reports them. */
/* The live nodes into cl (cl->nodes, cl->nnodes; the caller frees cl->nodes) and
 * their GPU type (`gpu`, --gpu, else the first node's device name) into cl->gpu;
 * CLI_REFUSED, saying what to give instead (`instead`), when the type is not known. */
static int live_cluster(cli_ctx *c, plan_cluster *cl, const char *gpu, const char *what, const char *instead)
{
    Atoll__NodesRequest req = ATOLL__NODES_REQUEST__INIT;
    req.name = (char *)"";
    Atoll__NodesReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_NODES, &req.base, ATOLL__MSG_TYPE__MSG_NODES_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    topo_node *nodes = calloc(r->n_nodes ? r->n_nodes : 1, sizeof *nodes);
    int n = 0;
    for (size_t i = 0; nodes && i < r->n_nodes; i++) {
        char err[256];
        if (!msg_node_to_topo(r->nodes[i], &nodes[n], err, sizeof err)) n++;
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    const char *dev = n && nodes[0].ngpus ? nodes[0].gpus[0].name : NULL;
    cl->gpu = gpu ? gpu_spec_by_type(gpu) : gpu_spec_by_device_name(dev);
    if (!cl->gpu) {
        free(nodes);
        fprintf(stderr, "%s: %s: no known GPU type on the live nodes (%s); %s\n", c->prog, what, dev ? dev : "no GPUs",
                instead);
        return CLI_REFUSED;
    }
    cl->nodes = nodes;
    cl->nnodes = n;
    return CLI_OK;
}

int cli_checkpoint_args(cli_ctx *c, const char *cmd, atoll_config *cfg)
{
    if (!cfg->use_checkpoint_args) return 0;
    char taken[1024], err[512];
    if (ckpt_use_args(cfg, taken, sizeof taken, err, sizeof err)) {
        cli_usage(c, cmd, "%s", err);
        return -1;
    }
    fprintf(stderr, "%s: --use-checkpoint-args: from %s/%s\n", c->prog, cfg->load, taken);
    return 0;
}

int cli_auto_layout(cli_ctx *c, atoll_config *cfg, int argc, char **argv)
{
    plan_args a = { .gpn = 8, .top = 1 };
    char err[256];
    for (int i = 1; i < argc; i++)
        if (plan_extra(&a, argc, argv, i, err, sizeof err) < 0) return cli_usage(c, "submit", "%s", err);
    fixed_from(&a, cfg);
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    int rc = live_cluster(c, &cl, a.gpu, "--auto-layout", "give a layout instead");
    if (rc) return rc;
    topo_node *nodes = (topo_node *)cl.nodes;
    cl.num_gpus = cfg->num_gpus;
    plan_links_default(cl.gpu, &cl.links);
    plan_candidate *v = NULL;
    char why[512] = "";
    int n = plan_enumerate(cfg, &cl, &a.fx, &v, why, sizeof why);
    free(nodes);
    if (n < 0) return cli_usage(c, "submit", "--auto-layout: %s", why);
    if (n == 0) {
        fprintf(stderr, "%s: --auto-layout: %s\n", c->prog, why);
        return CLI_REFUSED;
    }
    char split[48], rcs[24];
    fprintf(stderr, "auto-layout: tp %d, pp %d, dp %d, micro-batch %d, vpp %d, layers per stage %s, sp %d, "
            "recompute %s, zero1 %d (predicted %.3f s/step, MFU %.3f, %.1f GiB/GPU)\n", v[0].tp, v[0].pp, v[0].dp,
            v[0].micro_batch, v[0].vpp, split_str(&v[0], cfg, split, sizeof split), v[0].sp,
            plan_recompute_str(&v[0], rcs, sizeof rcs), v[0].zero1, v[0].est.step_s, v[0].est.mfu,
            v[0].mem.total_bytes / (double)(1u << 30));
    plan_apply(&v[0], cfg);
    free(v);
    return CLI_OK;
}

int cmd_plan(cli_ctx *c, int argc, char **argv)
{
    plan_args a = { .gpn = 8, .top = 10 };
    atoll_config cfg;
    cfg_defaults(&cfg);
    char err[512];
    if (cfg_parse_args(&cfg, argc, argv, 1, plan_extra, &a, err, sizeof err)) return cli_usage(c, "plan", "%s", err);
    cfg_megatron_notes(&cfg, c->prog, stderr);
    if (cli_checkpoint_args(c, "plan", &cfg)) return CLI_USAGE;
    if (tok_config_vocab(&cfg, err, sizeof err)) return cli_usage(c, "plan", "%s", err); /* a tokenizer sets the vocab */
    if (cfg_validate_training(&cfg, err, sizeof err)) return cli_usage(c, "plan", "%s", err); /* not a layout's rule */
    fixed_from(&a, &cfg);
    topo_node *nodes = NULL;
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    if (a.cluster) {
        int rc = live_cluster(c, &cl, a.gpu, "plan --cluster", "give --gpu TYPE");
        if (rc) return rc;
        nodes = (topo_node *)cl.nodes;
        cl.num_gpus = cfg.num_gpus; /* 0 -> every usable GPU */
    } else {
        if (!cfg.num_gpus) return cli_usage(c, "plan", "--num-gpus N is required (or --cluster for the live cluster)");
        cl.gpu = gpu_spec_by_type(a.gpu ? a.gpu : "h100-sxm");
        if (!cl.gpu) {
            char types[256];
            return cli_usage(c, "plan", "--gpu %s: unknown type (accepted: %s)", a.gpu,
                             gpu_spec_type_list(types, sizeof types));
        }
        nodes = plan_sim_cluster(cl.gpu, cfg.num_gpus, a.gpn, 0, err, sizeof err);
        if (!nodes) return cli_usage(c, "plan", "%s", err);
        cl.nnodes = (cfg.num_gpus + a.gpn - 1) / a.gpn;
        cl.num_gpus = cfg.num_gpus;
    }
    cl.nodes = nodes;
    plan_links_default(cl.gpu, &cl.links);
    plan_candidate *v = NULL;
    char why[512] = "";
    int n = plan_enumerate(&cfg, &cl, &a.fx, &v, why, sizeof why);
    free(nodes);
    if (n < 0) return cli_usage(c, "plan", "%s", why);
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "candidates");
        jsonw_arr(&w);
        for (int i = 0; i < n && i < a.top; i++) json_candidate(&w, &v[i]);
        jsonw_arr_end(&w);
        if (!n) jsonw_kstr(&w, "reason", why);
        if (n && a.explain) json_explain(&w, &v[0]);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else if (n) {
        printf("%-4s %-4s %-4s %-5s %-4s %-4s %-3s %-10s %-6s %-10s %-8s %-6s %-7s %-8s %s\n", "#", "TP", "PP", "DP",
               "MB", "VPP", "SP", "RECOMPUTE", "ZERO1", "STEP_S", "TFLOP/S", "MFU", "BUBBLE", "MEM_GIB", "LAYERS");
        for (int i = 0; i < n && i < a.top; i++) {
            const plan_candidate *p = &v[i];
            char split[48], rc[24];
            printf("%-4d %-4d %-4d %-5d %-4d %-4d %-3d %-10s %-6d %-10.4f %-8.1f %-6.3f %-7.4f %-8.1f %s\n", i + 1,
                   p->tp, p->pp, p->dp, p->micro_batch, p->vpp, p->sp, plan_recompute_str(p, rc, sizeof rc), p->zero1,
                   p->est.step_s, p->est.tflops_per_gpu, p->est.mfu, p->est.bubble,
                   p->mem.total_bytes / (double)(1u << 30), split_str(p, &cfg, split, sizeof split));
        }
        if (n > a.top) printf("(%d more layouts fit; --top K shows more)\n", n - a.top);
        if (a.explain) print_explain(&v[0], &cfg, &cl);
    } else {
        fprintf(stderr, "%s: plan: %s\n", c->prog, why);
    }
    free(v);
    return n ? CLI_OK : CLI_REFUSED;
}
