/* plan_mem: bytes per GPU for model state and activations. */
#include "plan.h"

#include <stdio.h>
#include <string.h>

const plan_precision PLAN_PRECISION_BF16 = { 2, 4, 0, 4, 8, 2, 5, 4, 0 };
const plan_precision PLAN_PRECISION_BF16_FLASH = { 2, 4, 0, 4, 8, 2, 0, 2, 1 };

const plan_precision *plan_engine_precision(const atoll_config *c)
{
    return c->bf16 ? &PLAN_PRECISION_BF16_FLASH : &PLAN_PRECISION_FP32;
}
void plan_memory_parts(char *buf, size_t len, const atoll_config *c, double params, double state_bytes,
                       double act_bytes, const char *extra)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    snprintf(buf, len, "%.0f parameters: %.2f GiB of weights, grads and Adam state, %.2f GiB of activations%s, %s",
             params, state_bytes / gib, act_bytes / gib, extra, c->bf16 ? "bf16 with fp32 master weights" : "fp32");
}
const plan_precision PLAN_PRECISION_FP16_FP32GRAD = { 2, 2, 4, 4, 8, 2, 5, 4, 0 };
const plan_precision PLAN_PRECISION_FP32 = { 4, 4, 0, 0, 8, 4, 4, 4, 1 };

double plan_state_bytes_per_param(const plan_precision *p, int zero1, int dp)
{
    double sharded = p->master + p->moments + p->grad_copy;
    return p->weight + p->grad + (zero1 && dp > 1 ? sharded / dp : sharded);
}

/* With recompute `rc` (the config's own, or what the precision makes of it), in
 * 16-bit units (the caller scales by the precision's activation / 2, so the
 * scores are counted here at prec->probs * 2 / activation to come out at
 * prec->probs bytes each). */
static double act_bytes(const atoll_config *c, cfg_recompute rc, const plan_precision *prec)
{
    double s = c->seq_length, b = c->micro_batch_size, h = c->hidden_size, a = c->num_attention_heads;
    double t = c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1;
    int sp = c->sequence_parallel && t > 1;
    /* the s^2 terms: Megatron's 5 a s / h (softmax, its input, the dropout mask) */
    double sbh = s * b * h, attn = prec->probs * 2.0 / prec->activation * a * s / h;
    /* Korthikanti et al.'s 34 sbh, by part: 10 sbh not split by TP (norm
     * inputs and outputs, dropout masks) and, split by TP, queries 2 sbq, keys
     * and values 4 sb kv (kv = q, or the groups' width under GQA), the output
     * projection's input 2 sbq (q = heads x head dim, h unless --kv-channels
     * says otherwise), the MLP's up projections 2 sbf each (GELU keeps
     * its input and output: 4 sbf; SwiGLU gate, up and their product: 6 sbf) */
    double kv = (double)cfg_kv_groups(c) * cfg_head_dim(c), q = a * cfg_head_dim(c), f = cfg_ffn(c);
    double split = s * b * (4 * q + 4 * kv + (c->swiglu ? 6 : 4) * f) / sbh; /* 24 for GPT-2 (q = h) */
    if (c->qk_layernorm) split += s * b * (2 * q + 2 * kv) / sbh; /* the queries and keys before their norms */
    switch (rc) {
    case RECOMPUTE_FULL:      return sp ? 2 * sbh / t : 2 * sbh;
    case RECOMPUTE_SELECTIVE: return sp ? (10 + split) * sbh / t : sbh * (10 + split / t);
    default:                  return sp ? sbh / t * (10 + split + attn) : sbh * (10 + split / t + attn / t);
    }
}

double plan_act_bytes_per_layer(const atoll_config *c)
{
    return act_bytes(c, c->recompute_granularity, &PLAN_PRECISION_BF16);
}

double plan_inflight_microbatches(int pp, int v, int m, int g, int stage)
{
    if (pp <= 1) return 1;
    /* the warm-up's chunks plus the one in its first steady-state forward (at
     * most the step's m v); a chunk is 1/v of the stage */
    if (v < 1) v = 1;
    int chunks = cfg_pipeline_warmup(pp, stage, m, v, g) + 1;
    if (chunks > m * v) chunks = m * v;
    return (double)chunks / v;
}

/* Parameters one GPU of `stage` holds. Layer matrices and their column biases are
 * split over tp; the norms (4h per layer with LayerNorm, 2h with RMSNorm) and the
 * row-parallel biases (2h, none under --disable-bias-linear) are replicated.
 * The word embedding is split over tp (vocab-parallel) on the first stage, beside
 * the position embedding (none with rotary positions), and the last stage holds
 * the output matrix (a copy of it when tied and pp > 1). */
double plan_layer_params(const atoll_config *c)
{
    return cfg_layer_params(c);
}

/* A stage of `layers` layers (cfg_stage_num_layers for the layout's own). */
static double stage_params(const atoll_config *c, int stage, int layers)
{
    double h = c->hidden_size, V = c->vocab_size;
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    double norm = cfg_rmsnorm(c) ? h : 2 * h, repl = 2 * norm + (c->disable_bias_linear ? 0 : 2 * h);
    double layer_gpu = (plan_layer_params(c) - repl) / tp + repl;
    double p = layers * layer_gpu;
    if (stage == 0) p += V * h / tp + (cfg_rope(c) ? 0 : cfg_max_pos(c) * h);
    if (stage == pp - 1) {
        p += norm; /* final norm */
        if (pp > 1 || c->untie_embeddings_and_output_weights) p += V * h / tp;
    }
    return p;
}

/* The recompute a layer's activations behave as at this precision: flash
 * attention keeps no probabilities, which is what selective recompute saves. */
static cfg_recompute layer_recompute(cfg_recompute rc, const plan_precision *prec)
{
    return prec->probs == 0 && rc == RECOMPUTE_NONE ? RECOMPUTE_SELECTIVE : rc;
}

/* The layers a recompute group holds in a stage of `layers` layers (uniform G, at most a chunk). */
static int group_of(const atoll_config *c, int layers)
{
    int g = cfg_recompute_group(c), chunk = cfg_chunk_layers(c, layers);
    return g < chunk ? g : chunk > 0 ? chunk : 1;
}

/* The activation bytes one layer of a stage of `layers` layers keeps, on
 * average (at 2 bytes an element), and in *rebuilt how many of its layers full
 * recompute rebuilds: those keep their input (under uniform G only the first
 * of each group of G in a chunk does), the others all they need. */
static double layer_act(const atoll_config *c, int layers, const plan_precision *prec, double *rebuilt)
{
    *rebuilt = layers > 0 ? cfg_recompute_stage_layers(c, layers) : 0;
    cfg_recompute kept = c->recompute_granularity == RECOMPUTE_FULL ? RECOMPUTE_NONE : c->recompute_granularity;
    if (layers <= 0) return act_bytes(c, layer_recompute(kept, prec), prec);
    int v = cfg_virtual_stages(c), chunk = cfg_chunk_layers(c, layers), g = group_of(c, layers);
    double inputs = g > 1 ? (double)v * ((chunk + g - 1) / g) : *rebuilt; /* uniform G rebuilds every layer */
    return (inputs * act_bytes(c, RECOMPUTE_FULL, prec) + (layers - *rebuilt) * act_bytes(c, layer_recompute(kept, prec), prec)) /
           layers;
}

/* atoll-train's backward workspace, bytes, held once a rank (engine/model.c
 * ws_carve): a token's gradients of the residual and the norm (2h), the qkv
 * projection (q + 2kv), the attention output (q) and the MLP (f); the LLaMA
 * family's rotary q, k, v, a scratch row of max(h, q) and SwiGLU's gate and up
 * (2f); sequence parallel's gathered rows (3h); the hidden dropout's (h); at
 * the activation size. Without flash attention the fp32 [s, s] scores of each
 * head, twice under selective recompute (the rebuilt probabilities). */
static double workspace_bytes(const atoll_config *c, const plan_precision *prec)
{
    double s = c->seq_length, b = c->micro_batch_size, h = c->hidden_size, hd = cfg_head_dim(c);
    double t = c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1;
    double q = c->num_attention_heads * hd / t, kv = cfg_kv_groups(c) * hd / t, f = cfg_ffn(c) / t;
    double row = 2 * h + (q + 2 * kv) + q + f;
    if (cfg_rmsnorm(c)) row += q + 2 * kv + (h > q ? h : q) + 2 * f;
    if (c->sequence_parallel && t > 1) row += 3 * h;
    if (c->hidden_dropout > 0) row += h;
    double bytes = s * b * row * prec->activation;
    if (prec->probs > 0)
        bytes += (c->recompute_granularity == RECOMPUTE_SELECTIVE ? 2 : 1) * 4.0 * b * c->num_attention_heads / t * s * s;
    return bytes;
}

/* Activation bytes of a stage of `layers` layers, at the precision's sizes. */
static double stage_activations(const atoll_config *c, int dp, int stage, int layers, const plan_precision *prec,
                                double *inflight_layers)
{
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    int v = cfg_virtual_stages(c), sp = c->sequence_parallel && tp > 1;
    int m = cfg_micro_batches(c, dp);
    double s = c->seq_length, b = c->micro_batch_size, h = c->hidden_size, V = c->vocab_size;
    double inflight = plan_inflight_microbatches(pp, v, m, c->microbatch_group_size_per_virtual_pipeline_stage, stage);
    *inflight_layers = inflight * layers;
    double rebuilt, act = *inflight_layers * layer_act(c, layers, prec, &rebuilt);
    if (rebuilt > 0) { /* the backward rebuilds one layer at a time (a group of G under uniform G) and holds its
                        * full activations, and the group's G - 1 inner boundaries */
        int g = group_of(c, layers);
        act += g * act_bytes(c, layer_recompute(RECOMPUTE_NONE, prec), prec) + (g - 1) * act_bytes(c, RECOMPUTE_FULL, prec);
    }
    if (stage == 0) act += inflight * s * b * h / (sp ? tp : 1); /* embedding dropout mask */
    if (stage == pp - 1)
        act += inflight * (4 * s * b * h / (sp ? tp : 1) /* final LayerNorm + output input */
                           + prec->logit * 2 / prec->activation * s * b * V / tp); /* the cross entropy's logits */
    return act * prec->activation / 2 + (prec->workspace ? workspace_bytes(c, prec) : 0);
}

void plan_memory_estimate(const atoll_config *c, int dp, const plan_precision *prec, plan_memory *out)
{
    int pp = c->pipeline_model_parallel_size;
    double bpp = plan_state_bytes_per_param(prec, c->use_distributed_optimizer, dp);
    out->total_bytes = -1;
    for (int st = 0; st < pp; st++) {
        int layers = cfg_stage_num_layers(c, st);
        double inflight_layers, params = stage_params(c, st, layers);
        double act = stage_activations(c, dp, st, layers, prec, &inflight_layers);
        double total = params * bpp + act;
        if (total > out->total_bytes) {
            out->params_per_gpu = params;
            out->state_bytes = params * bpp;
            double rebuilt;
            out->act_per_layer = layer_act(c, layers, prec, &rebuilt) * prec->activation / 2;
            out->inflight_layers = inflight_layers;
            out->act_bytes = act;
            out->total_bytes = total;
            out->worst_stage = st;
        }
    }
}

double plan_stage_bytes(const atoll_config *c, int dp, const plan_precision *prec, int stage, int layers)
{
    double inflight_layers, bpp = plan_state_bytes_per_param(prec, c->use_distributed_optimizer, dp);
    return stage_params(c, stage, layers) * bpp +
           stage_activations(c, dp, stage, layers, prec, &inflight_layers);
}

int plan_fewest_rebuilt(const atoll_config *c, int dp, const plan_precision *prec, double room, int *most)
{
    int pp = c->pipeline_model_parallel_size > 0 ? c->pipeline_model_parallel_size : 1, chunk = 0;
    for (int st = 0; st < pp; st++) {
        int n = cfg_chunk_layers(c, cfg_stage_num_layers(c, st));
        if (n > chunk) chunk = n;
    }
    if (most) *most = chunk;
    atoll_config b = *c;
    b.recompute_granularity = RECOMPUTE_FULL;
    snprintf(b.recompute_method, sizeof b.recompute_method, "block");
    plan_memory m;
    b.recompute_num_layers = chunk;
    plan_memory_estimate(&b, dp, prec, &m);
    if (chunk < 1 || m.total_bytes > room) return 0;
    int lo = 1, hi = chunk; /* the smallest fitting N in [1, chunk] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        b.recompute_num_layers = mid;
        plan_memory_estimate(&b, dp, prec, &m);
        if (m.total_bytes <= room) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

void plan_memory_advice(const atoll_config *c, int dp, double room, char *buf, size_t len)
{
    const char *general = "use fewer or smaller layers, a shorter --seq-length or --micro-batch-size, more ranks "
                          "(tp/pp), --recompute-granularity, or --use-distributed-optimizer";
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const plan_precision *prec = plan_engine_precision(c);
    size_t at = 0;
    buf[0] = 0;
    int f, l;
    if (!c->decoder_first_pipeline_num_layers && !c->decoder_last_pipeline_num_layers &&
        !plan_fitting_split(c, dp, prec, room, &f, &l) && (f || l)) {
        atoll_config s = *c;
        s.decoder_first_pipeline_num_layers = f;
        s.decoder_last_pipeline_num_layers = l;
        plan_memory m;
        plan_memory_estimate(&s, dp, prec, &m);
        char fl[48] = "", ll[48] = "";
        if (f) snprintf(fl, sizeof fl, " --decoder-first-pipeline-num-layers %d", f);
        if (l) snprintf(ll, sizeof ll, " --decoder-last-pipeline-num-layers %d", l);
        at += (size_t)snprintf(buf, len, "split the pipeline unevenly (the first stages hold the most micro-batches in "
                               "flight):%s%s needs about %.2f GiB; or ", fl, ll, m.total_bytes / gib);
    }
    /* rebuilding layers in backward, as few as fit, where the layout does not already rebuild them all */
    int all = c->recompute_granularity == RECOMPUTE_FULL && strcmp(c->recompute_method, "block");
    int n = all ? 0 : plan_fewest_rebuilt(c, dp, prec, room, NULL);
    if (n > 0 && at < len) {
        atoll_config r = *c;
        r.recompute_granularity = RECOMPUTE_FULL;
        snprintf(r.recompute_method, sizeof r.recompute_method, "block");
        r.recompute_num_layers = n;
        plan_memory m;
        plan_memory_estimate(&r, dp, prec, &m);
        at += (size_t)snprintf(buf + at, len - at, "rebuild layers in backward: --recompute-granularity full "
                               "--recompute-method block --recompute-num-layers %d (the first %d layers of each model "
                               "chunk) needs about %.2f GiB; or ", n, n, m.total_bytes / gib);
    }
    if (at < len) snprintf(buf + at, len - at, "%s", general);
}
