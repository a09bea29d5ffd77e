/* plan: enumerate layouts, keep those that fit, rank them by predicted step time. */
#include "plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *plan_recompute_str(const plan_candidate *p, char *buf, size_t n)
{
    if (p->recompute == RECOMPUTE_FULL && p->recompute_layers > 0) snprintf(buf, n, "block %d", p->recompute_layers);
    else snprintf(buf, n, "%s", cfg_recompute_name(p->recompute));
    return buf;
}

void plan_fixed_none(plan_fixed *f)
{
    f->tp = f->pp = f->micro_batch = f->layers_per_vstage = 0;
    f->sp = f->recompute = f->zero1 = -1;
}

void plan_apply(const plan_candidate *p, atoll_config *c)
{
    c->tensor_model_parallel_size = p->tp;
    c->pipeline_model_parallel_size = p->pp;
    c->micro_batch_size = p->micro_batch;
    c->num_layers_per_virtual_pipeline_stage = p->layers_per_vstage;
    c->decoder_first_pipeline_num_layers = p->first_layers;
    c->decoder_last_pipeline_num_layers = p->last_layers;
    c->sequence_parallel = p->sp;
    c->recompute_granularity = p->recompute;
    if (p->recompute == RECOMPUTE_FULL && p->recompute_layers > 0) {
        snprintf(c->recompute_method, sizeof c->recompute_method, "block");
        c->recompute_num_layers = p->recompute_layers;
    } else if (p->recompute != RECOMPUTE_FULL) {
        c->recompute_method[0] = 0;
        c->recompute_num_layers = 0;
    }
    c->use_distributed_optimizer = p->zero1;
    c->num_gpus = p->tp * p->pp * p->dp;
}

/* ---- placement cache: one placement and link profile per (tp, pp) -------------- */

static int place_and_cost(const plan_cluster *cl, int tp, int pp, int world, plan_fabric_cost *fc)
{
    place_request req = { tp, pp, world / (tp * pp), NULL, 0 };
    place_result r;
    char err[256];
    if (place_topology(cl->nodes, cl->nnodes, cl->busy, cl->fab, &req, &r, err, sizeof err)) return -1;
    plan_fabric_cost_of(cl->nodes, cl->fab, &r, &cl->links, fc);
    place_result_free(&r);
    return 0;
}

static double job_step(const plan_cluster *cl, const atoll_config *c, int dp, const place_result *r,
                       plan_fabric_cost *fc)
{
    plan_memory mem;
    plan_estimate est;
    plan_fabric_cost_of(cl->nodes, cl->fab, r, &cl->links, fc);
    plan_memory_estimate(c, dp, &PLAN_PRECISION_BF16_FLASH, &mem);
    plan_perf_estimate(c, dp, cl->gpu, &cl->links, fc, &mem, &est);
    return est.step_s;
}

int plan_place(const plan_cluster *cl, const atoll_config *c, int dp, place_result *out, plan_fabric_cost *fc,
               int *used_naive, char *err, size_t errlen)
{
    place_request req = { c->tensor_model_parallel_size, c->pipeline_model_parallel_size, dp, c->rank_order, 0 };
    place_result nv;
    plan_fabric_cost fa, fn;
    if (used_naive) *used_naive = 0;
    if (place_topology(cl->nodes, cl->nnodes, cl->busy, cl->fab, &req, out, err, errlen)) return -1;
    double ta = job_step(cl, c, dp, out, &fa);
    char nerr[256];
    if (!place_naive(cl->nodes, cl->nnodes, cl->busy, &req, &nv, nerr, sizeof nerr)) {
        if (!place_tp_island_violations(cl->nodes, &nv) && job_step(cl, c, dp, &nv, &fn) < ta) {
            place_result_free(out);
            *out = nv;
            fa = fn;
            if (used_naive) *used_naive = 1;
        } else {
            place_result_free(&nv);
        }
    }
    if (fc) *fc = fa;
    return 0;
}

/* ---- ranking ------------------------------------------------------------------------ */

static long time_bin(double step_s)
{
    return (long)floor(log(step_s) / log1p(PLAN_TIE));
}

#define CMP(a, b) do { if ((a) != (b)) return (a) < (b) ? -1 : 1; } while (0)

static int cmp_candidate(const void *va, const void *vb)
{
    const plan_candidate *a = va, *b = vb;
    CMP(time_bin(a->est.step_s), time_bin(b->est.step_s));
    CMP((int)a->recompute, (int)b->recompute);
    CMP(a->recompute_layers ? a->recompute_layers : INT_MAX, b->recompute_layers ? b->recompute_layers : INT_MAX);
    CMP(a->micro_batch, b->micro_batch);
    CMP(a->tp, b->tp);
    CMP(a->pp, b->pp);
    CMP(a->vpp, b->vpp);
    CMP(a->first_layers || a->last_layers, b->first_layers || b->last_layers); /* the even split */
    CMP(a->mem.total_bytes, b->mem.total_bytes);
    CMP(a->est.step_s, b->est.step_s);
    CMP(a->sp, b->sp);
    CMP(a->zero1, b->zero1);
    return 0;
}

/* ---- enumeration -------------------------------------------------------------------- */

typedef struct {
    plan_candidate *v;
    int n, cap;
    /* why nothing fit: the smallest memory need seen, and the last rule refused */
    double min_need;
    char rule[256];
} cand_list;

static int push(cand_list *l, const plan_candidate *c)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 256;
        plan_candidate *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return 0;
}

static int fixed_ok(int fixed, int value) { return fixed <= 0 || fixed == value; }
static int fixed_flag_ok(int fixed, int value) { return fixed < 0 || fixed == value; }

/* The layout `c` with and without ZeRO-1, each pushed when it fits `usable`.
 * Returns how many were pushed, -1 when out of memory. */
static int push_fitting(atoll_config *c, const plan_cluster *cl, const plan_fixed *fx, int dp, int lv,
                        const plan_fabric_cost *fc, double usable, cand_list *l)
{
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size, pushed = 0;
    char err[256];
    if (cfg_validate_layout(c, tp * pp * dp, 0, err, sizeof err)) {
        snprintf(l->rule, sizeof l->rule, "%s", err);
        return 0;
    }
    for (int z = 0; z <= (dp > 1); z++) {
        if (!fixed_flag_ok(fx->zero1, z) && dp > 1) continue;
        c->use_distributed_optimizer = z;
        plan_candidate pc;
        memset(&pc, 0, sizeof pc);
        plan_memory_estimate(c, dp, &PLAN_PRECISION_BF16_FLASH, &pc.mem);
        if (pc.mem.total_bytes > usable) {
            if (l->min_need <= 0 || pc.mem.total_bytes < l->min_need) l->min_need = pc.mem.total_bytes;
            continue;
        }
        pc.tp = tp;
        pc.pp = pp;
        pc.dp = dp;
        pc.micro_batch = c->micro_batch_size;
        pc.layers_per_vstage = lv;
        pc.vpp = cfg_virtual_stages(c);
        pc.first_layers = c->decoder_first_pipeline_num_layers;
        pc.last_layers = c->decoder_last_pipeline_num_layers;
        pc.sp = c->sequence_parallel;
        pc.zero1 = z;
        pc.recompute = c->recompute_granularity;
        pc.recompute_layers = c->recompute_granularity == RECOMPUTE_FULL && !strcmp(c->recompute_method, "block")
                                  ? c->recompute_num_layers : 0;
        pc.fabric = *fc;
        plan_perf_estimate(c, dp, cl->gpu, &cl->links, fc, &pc.mem, &pc.est);
        if (push(l, &pc)) return -1;
        pushed++;
    }
    return pushed;
}

/* Full recompute of only the first N layers of each model chunk, N the
 * fewest that fit with the leanest optimizer state allowed (plan_fewest_rebuilt:
 * fewer rebuilt layers, less work), pushed when N is below the largest chunk
 * (that one is every layer, already pushed). Returns as push_fitting. */
static int push_fewest_rebuilt(const atoll_config *c, const plan_cluster *cl, const plan_fixed *fx, int dp, int lv,
                               const plan_fabric_cost *fc, double usable, cand_list *l)
{
    atoll_config b = *c;
    b.use_distributed_optimizer = dp > 1 && fixed_flag_ok(fx->zero1, 1);
    int chunk, n = plan_fewest_rebuilt(&b, dp, &PLAN_PRECISION_BF16_FLASH, usable, &chunk);
    if (n < 1 || n >= chunk) return 0;
    snprintf(b.recompute_method, sizeof b.recompute_method, "block");
    b.recompute_num_layers = n;
    return push_fitting(&b, cl, fx, dp, lv, fc, usable, l);
}

/* The choices below tp/pp/mb: interleaving, SP, recompute, ZeRO-1. */
static int enumerate_inner(const atoll_config *base, const plan_cluster *cl, const plan_fixed *fx, int dp,
                           const plan_fabric_cost *fc, double usable, cand_list *l)
{
    int tp = base->tensor_model_parallel_size, pp = base->pipeline_model_parallel_size;
    int per_stage = base->num_layers / pp;
    int given = base->decoder_first_pipeline_num_layers || base->decoder_last_pipeline_num_layers;
    for (int lv = 0; lv < per_stage; lv++) { /* 0 = no interleaving, else layers per virtual stage */
        if (lv && (pp < 2 || per_stage % lv)) continue;
        if (fx->layers_per_vstage > 0 && lv != fx->layers_per_vstage) continue;
        if (fx->layers_per_vstage < 0 && lv) continue;
        if (base->num_virtual_stages_per_pipeline_rank && lv) continue; /* the chunks were given that way */
        for (int sp = 0; sp <= (tp > 1); sp++) {
            if (!fixed_flag_ok(fx->sp, sp) && tp > 1) continue;
            atoll_config c = *base;
            c.num_layers_per_virtual_pipeline_stage = lv;
            c.sequence_parallel = sp;
            int none_fit[2] = { 0, 0 }; /* per split: the layout fits without recompute */
            for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++) {
                if (!fixed_flag_ok(fx->recompute, rc)) continue;
                c.recompute_granularity = (cfg_recompute)rc;
                /* the stages' layers: as given, else even and the split that
                 * balances the last stage's LM head (when it differs) */
                int splits[2][2] = { { base->decoder_first_pipeline_num_layers, base->decoder_last_pipeline_num_layers },
                                     { 0, 0 } }, nsplits = 1, fitted = 0;
                if (!given) {
                    plan_balanced_split(&c, &splits[1][0], &splits[1][1]);
                    nsplits += splits[1][0] || splits[1][1];
                }
                for (int k = 0; k < nsplits; k++) {
                    c.decoder_first_pipeline_num_layers = splits[k][0];
                    c.decoder_last_pipeline_num_layers = splits[k][1];
                    int r = push_fitting(&c, cl, fx, dp, lv, fc, usable, l);
                    if (r < 0) return -1;
                    fitted += r;
                    if (rc == RECOMPUTE_NONE) none_fit[k] = r > 0;
                    /* full recompute fits and none does not: the fewest layers rebuilt that fit, unless the
                     * model fixes which layers full recompute rebuilds */
                    if (rc == RECOMPUTE_FULL && r > 0 && !none_fit[k] && !base->recompute_method[0] &&
                        push_fewest_rebuilt(&c, cl, fx, dp, lv, fc, usable, l) < 0)
                        return -1;
                }
                /* neither fits: the fastest split that does, with the leanest
                 * optimizer state this layout may have (the first stages keep
                 * the most micro-batches in flight, so they may take fewer layers) */
                if (!fitted && !given && !lv && pp > 1) {
                    int f, ll;
                    c.use_distributed_optimizer = dp > 1 && fixed_flag_ok(fx->zero1, 1);
                    if (!plan_fitting_split(&c, dp, &PLAN_PRECISION_BF16_FLASH, usable, &f, &ll) &&
                        (f || ll) && !(f == splits[1][0] && ll == splits[1][1])) {
                        c.decoder_first_pipeline_num_layers = f;
                        c.decoder_last_pipeline_num_layers = ll;
                        if (push_fitting(&c, cl, fx, dp, lv, fc, usable, l) < 0) return -1;
                    }
                }
            }
        }
    }
    return 0;
}

static int usable_gpus(const plan_cluster *cl)
{
    int g = 0;
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].state == NODE_ALIVE && !(cl->busy && cl->busy[i])) g += cl->nodes[i].ngpus;
    return g;
}

int plan_enumerate(const atoll_config *model, const plan_cluster *cl, const plan_fixed *fx,
                   plan_candidate **out, char *why, size_t whylen)
{
    *out = NULL;
    if (cfg_validate_model(model, why, whylen)) return -1;
    int world = cl->num_gpus ? cl->num_gpus : usable_gpus(cl);
    if (world < 1) {
        snprintf(why, whylen, "no usable GPUs (--num-gpus, or alive and undrained nodes with --cluster)");
        return -1;
    }
    if (model->global_batch_size < 1) {
        snprintf(why, whylen, "--global-batch-size is required to plan (the micro-batch search divides it)");
        return -1;
    }
    int island = topo_max_island_gpus(cl->nodes, cl->nnodes);
    double usable = (double)cl->gpu->memory_bytes * PLAN_MEM_USABLE;
    cand_list l = { 0 };
    snprintf(l.rule, sizeof l.rule, "no tp/pp/dp split of %d GPUs", world);
    for (int tp = 1; tp <= world && tp <= (island ? island : world); tp++) {
        if (world % tp || !fixed_ok(fx->tp, tp)) continue;
        for (int pp = 1; tp * pp <= world && pp <= model->num_layers; pp++) {
            if (world % (tp * pp) || !fixed_ok(fx->pp, pp)) continue; /* pp need not divide the layers: uneven splits */
            int dp = world / (tp * pp);
            if (model->global_batch_size % dp) continue;
            plan_fabric_cost fc;
            if (place_and_cost(cl, tp, pp, world, &fc)) {
                snprintf(l.rule, sizeof l.rule, "tp %d x pp %d x dp %d cannot be placed on the usable nodes", tp, pp, dp);
                continue;
            }
            int per_replica = model->global_batch_size / dp;
            for (int mb = 1; mb <= per_replica; mb++) {
                if (per_replica % mb || !fixed_ok(fx->micro_batch, mb)) continue;
                atoll_config c = *model;
                c.tensor_model_parallel_size = tp;
                c.pipeline_model_parallel_size = pp;
                c.micro_batch_size = mb;
                c.num_gpus = world;
                if (enumerate_inner(&c, cl, fx, dp, &fc, usable, &l)) {
                    free(l.v);
                    snprintf(why, whylen, "out of memory while enumerating layouts");
                    return -1;
                }
            }
        }
    }
    if (!l.n) {
        if (l.min_need > 0)
            snprintf(why, whylen, "no layout fits: the smallest needs %.1f GiB per GPU, %s has %.1f GiB (%.0f%% usable)",
                     l.min_need / (1u << 30), cl->gpu->type, cl->gpu->memory_bytes / (double)(1u << 30),
                     PLAN_MEM_USABLE * 100);
        else
            snprintf(why, whylen, "no layout passes the rules on %d GPUs: %s", world, l.rule);
        free(l.v);
        return 0;
    }
    qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_candidate);
    *out = l.v;
    return l.n;
}
