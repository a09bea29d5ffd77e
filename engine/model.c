#include "model.h"
#include "errf.h"
#include "k_qkv.h"
#include "rng.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int id_sum(void *ctx, float *buf, size_t n) { (void)ctx, (void)buf, (void)n; return 0; }
const eng_tp_comm eng_tp_identity = { NULL, id_sum, id_sum, NULL, NULL };

uint64_t eng_fnv1a(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

eng_layout eng_layout_single(const atoll_config *c)
{
    eng_layout l;
    memset(&l, 0, sizeof l);
    l.tp_size = 1;
    l.nchunks = 1;
    l.layer_end[0] = c->num_layers;
    return l;
}

/* ---- the param table ---- */

typedef struct table_builder {
    eng_param *t;
    int n, cap;
    int tp_rank, tp_size;
    int layer; /* of the tensors being added; -1 outside the layers */
} table_builder;

/* Adds one tensor of full shape [d0] or [d0, d1]; shard_dim splits it over TP. */
static eng_param *tb_add(table_builder *tb, const char *name, int ndim, int64_t d0, int64_t d1,
                         int shard_dim, float std, float value, int decay, int chunk)
{
    if (tb->n == tb->cap) {
        tb->cap = tb->cap ? tb->cap * 2 : 64;
        tb->t = realloc(tb->t, sizeof(eng_param) * (size_t)tb->cap);
        if (!tb->t) abort();
    }
    eng_param *p = &tb->t[tb->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->full[0] = d0;
    p->full[1] = ndim == 2 ? d1 : 1;
    p->local[0] = p->full[0];
    p->local[1] = p->full[1];
    p->shard_dim = tb->tp_size > 1 ? shard_dim : -1;
    if (p->shard_dim >= 0) {
        p->local[shard_dim] = p->full[shard_dim] / tb->tp_size;
        p->shard_off = p->local[shard_dim] * tb->tp_rank;
    }
    p->numel = (size_t)(p->local[0] * p->local[1]);
    p->init_std = std;
    p->init_value = value;
    p->decay = decay;
    p->chunk = chunk;
    p->layer = tb->layer;
    return p;
}

static eng_param *tb_norm(table_builder *tb, const char *name, int64_t h, float value, int chunk)
{
    eng_param *p = tb_add(tb, name, 1, h, 0, -1, 0, value, 0, chunk);
    p->norm = 1;
    return p;
}

/* A LayerNorm or RMSNorm weight: ones, or under --apply-layernorm-1p zeros
 * applied as 1 + w (Megatron's zero-centred gamma, for either norm) */
static eng_param *tb_norm_weight(table_builder *tb, const atoll_config *c, const char *name, int64_t h, int chunk)
{
    eng_param *p = tb_norm(tb, name, h, c->apply_layernorm_1p ? 0.0f : 1.0f, chunk);
    p->plus_one = c->apply_layernorm_1p;
    return p;
}

/* A linear layer's weight [out, in] and, unless --disable-bias-linear, its
 * bias: split with the weight's rows (column-parallel, shard 0), replicated
 * for a row-parallel layer (shard 1; added once, before the TP sum). */
static void tb_linear(table_builder *tb, const char *fmt, int l, int64_t out, int64_t in, int shard, float std,
                      int bias, int chunk)
{
    char base[ENG_NAME], nm[ENG_NAME + 8];
    snprintf(base, sizeof base, fmt, l);
    snprintf(nm, sizeof nm, "%s.weight", base);
    tb_add(tb, nm, 2, out, in, shard, std, 0, 1, chunk);
    snprintf(nm, sizeof nm, "%s.bias", base);
    if (bias) tb_add(tb, nm, 1, out, 0, shard == 0 ? 0 : -1, 0, 0, 0, chunk);
}

/* GPT-2 family: h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj};
 * c_attn's rows are Megatron's query_key_value order, [groups][Q+2][head dim]
 * (one query per group unless --group-query-attention). */
static void tb_layer_gpt2(table_builder *tb, const atoll_config *c, int l, int chunk)
{
    int64_t h = c->hidden_size, f = cfg_ffn(c), d = cfg_head_dim(c), q = c->num_attention_heads * d;
    int bias = !c->disable_bias_linear;
    float std = (float)cfg_init_std(c), out_std = std / sqrtf(2.0f * (float)c->num_layers);
    char nm[ENG_NAME];
#define NAME(suffix) (snprintf(nm, sizeof nm, "h.%d." suffix, l), nm)
    tb_norm_weight(tb, c, NAME("ln_1.weight"), h, chunk);
    tb_norm(tb, NAME("ln_1.bias"), h, 0, chunk);
    tb_linear(tb, "h.%d.attn.c_attn", l, q + 2 * cfg_kv_groups(c) * d, h, 0, std, cfg_qkv_bias(c), chunk);
    tb_linear(tb, "h.%d.attn.c_proj", l, h, q, 1, out_std, bias, chunk);
    tb_norm_weight(tb, c, NAME("ln_2.weight"), h, chunk);
    tb_norm(tb, NAME("ln_2.bias"), h, 0, chunk);
    tb_linear(tb, "h.%d.mlp.c_fc", l, f, h, 0, std, bias, chunk);
    tb_linear(tb, "h.%d.mlp.c_proj", l, h, f, 1, out_std, bias, chunk);
#undef NAME
}

/* LLaMA family, Hugging Face's names and shapes: model.layers.N.{input_layernorm,
 * self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}.
 * q_proj's rows are heads, k_proj's and v_proj's the key/value groups, so a
 * TP rank's slice of each is one block of rows. */
static void tb_layer_llama(table_builder *tb, const atoll_config *c, int l, int chunk)
{
    int64_t h = c->hidden_size, f = cfg_ffn(c), d = cfg_head_dim(c), q = c->num_attention_heads * d,
            kv = cfg_kv_groups(c) * d;
    int bias = !c->disable_bias_linear;
    float std = (float)cfg_init_std(c), out_std = std / sqrtf(2.0f * (float)c->num_layers);
    char nm[ENG_NAME];
    snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
    tb_norm_weight(tb, c, nm, h, chunk);
    tb_linear(tb, "model.layers.%d.self_attn.q_proj", l, q, h, 0, std, cfg_qkv_bias(c), chunk);
    tb_linear(tb, "model.layers.%d.self_attn.k_proj", l, kv, h, 0, std, cfg_qkv_bias(c), chunk);
    tb_linear(tb, "model.layers.%d.self_attn.v_proj", l, kv, h, 0, std, cfg_qkv_bias(c), chunk);
    tb_linear(tb, "model.layers.%d.self_attn.o_proj", l, h, q, 1, out_std, bias, chunk);
    if (c->qk_layernorm) { /* Qwen3's: one weight per head dim, shared by every head */
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
        tb_norm_weight(tb, c, nm, d, chunk)->head_norm = 1;
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
        tb_norm_weight(tb, c, nm, d, chunk)->head_norm = 1;
    }
    snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
    tb_norm_weight(tb, c, nm, h, chunk);
    tb_linear(tb, "model.layers.%d.mlp.gate_proj", l, f, h, 0, std, bias, chunk);
    tb_linear(tb, "model.layers.%d.mlp.up_proj", l, f, h, 0, std, bias, chunk);
    tb_linear(tb, "model.layers.%d.mlp.down_proj", l, h, f, 1, out_std, bias, chunk);
}

const char *eng_embed_name(const atoll_config *c) { return cfg_rmsnorm(c) ? "model.embed_tokens.weight" : "wte.weight"; }

static int check_shapes(const atoll_config *c, const eng_layout *lay, char *err, size_t errlen)
{
    if (cfg_validate_model(c, err, errlen)) return -1;
    int tp = lay->tp_size;
    if (tp < 1 || lay->tp_rank < 0 || lay->tp_rank >= tp) {
        atoll_errf(err, errlen, "tensor-parallel rank %d of %d is out of range", lay->tp_rank, tp);
        return -1;
    }
    if (c->num_attention_heads % tp || cfg_kv_groups(c) % tp || cfg_ffn(c) % tp || c->vocab_size % tp) {
        atoll_errf(err, errlen, "--num-attention-heads %d, query groups %d, FFN size %d and --vocab-size %d must all be "
             "divisible by --tensor-model-parallel-size %d", c->num_attention_heads, cfg_kv_groups(c), cfg_ffn(c),
             c->vocab_size, tp);
        return -1;
    }
    if (lay->nchunks < 1 || lay->nchunks > ENG_MAX_CHUNKS) {
        atoll_errf(err, errlen, "a rank holds 1 to %d model chunks, not %d", ENG_MAX_CHUNKS, lay->nchunks);
        return -1;
    }
    for (int i = 0; i < lay->nchunks; i++)
        if (lay->layer_begin[i] < 0 || lay->layer_end[i] > c->num_layers ||
            lay->layer_begin[i] >= lay->layer_end[i]) {
            atoll_errf(err, errlen, "model chunk %d has layers [%d, %d), outside [0, %d)", i,
                 lay->layer_begin[i], lay->layer_end[i], c->num_layers);
            return -1;
        }
    return 0;
}

static int has_first_chunk(const eng_layout *lay)
{
    for (int i = 0; i < lay->nchunks; i++)
        if (lay->layer_begin[i] == 0) return 1;
    return 0;
}

static void build_table(table_builder *tb, const atoll_config *c, const eng_layout *lay)
{
    int64_t h = c->hidden_size, V = c->vocab_size, P = cfg_max_pos(c);
    int tied = !c->untie_embeddings_and_output_weights, llama = cfg_rmsnorm(c);
    const char *emb = eng_embed_name(c);
    for (int ch = 0; ch < lay->nchunks; ch++) {
        int first = lay->layer_begin[ch] == 0, last = lay->layer_end[ch] == c->num_layers;
        if (first) {
            tb_add(tb, emb, 2, V, h, 0, (float)cfg_embedding_init_std(c), 0, 1, ch)->decoupled = 1;
            if (!cfg_rope(c)) tb_add(tb, "wpe.weight", 2, P, h, -1, (float)cfg_embedding_init_std(c), 0, 1, ch);
        }
        for (int l = lay->layer_begin[ch]; l < lay->layer_end[ch]; l++) {
            tb->layer = l;
            llama ? tb_layer_llama(tb, c, l, ch) : tb_layer_gpt2(tb, c, l, ch);
            tb->layer = -1;
        }
        if (last) {
            tb_norm_weight(tb, c, llama ? "model.norm.weight" : "ln_f.weight", h, ch);
            if (!llama) tb_norm(tb, "ln_f.bias", h, 0, ch);
            if (!tied)
                tb_add(tb, "lm_head.weight", 2, V, h, 0, (float)cfg_init_std(c), 0, 1, ch)->decoupled = 1;
            else if (!has_first_chunk(lay)) {
                eng_param *copy = tb_add(tb, emb, 2, V, h, 0, (float)cfg_embedding_init_std(c), 0, 1, ch);
                copy->tied_copy = copy->decoupled = 1;
            }
        }
    }
    size_t off = 0;
    for (int i = 0; i < tb->n; i++) {
        tb->t[i].offset = off;
        off += (tb->t[i].numel + 15) / 16 * 16; /* 64-byte aligned views */
    }
}

eng_param *eng_full_table(const atoll_config *cfg, int *n, char *err, size_t errlen)
{
    eng_layout lay = eng_layout_single(cfg);
    if (check_shapes(cfg, &lay, err, errlen)) return NULL;
    table_builder tb = { 0 };
    tb.tp_size = 1;
    tb.layer = -1;
    build_table(&tb, cfg, &lay);
    *n = tb.n;
    return tb.t;
}

const eng_param *eng_find_param(const eng_model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->table[i].name, name)) return &m->table[i];
    return NULL;
}

/* A tensor's place in a buffer whose elements are `esz` bytes (params16: 2). */
static void *view(const eng_model *m, void *base, size_t esz, const char *name)
{
    const eng_param *p = eng_find_param(m, name);
    return p ? (char *)base + p->offset * esz : NULL;
}

/* Where the kernels read a norm's weight: its place in the weights, or under
 * --apply-layernorm-1p its 1 + w in m->norm1p. */
static void *norm_view(const eng_model *m, void *base, size_t esz, const char *name)
{
    const eng_param *p = eng_find_param(m, name);
    if (p && p->plus_one) return (char *)m->norm1p + p->plus_one_at * esz;
    return p ? (char *)base + p->offset * esz : NULL;
}

/* Views of `base`, the weights (params16 or params) when `weights`, else the gradients. */
static void set_views(eng_model *m, eng_chunk *ch, eng_views *v, void *base, size_t esz, int weights)
{
    const char *emb = eng_embed_name(&m->cfg);
    if (ch->first) {
        v->wte = view(m, base, esz, emb);
        v->wpe = view(m, base, esz, "wpe.weight");
    }
    int nl = ch->layer_end - ch->layer_begin;
    for (int i = 0; i < nl; i++) {
        char nm[ENG_NAME];
        int l = ch->layer_begin + i;
        eng_layer_w *w = &v->layers[i];
#define V_(field, suffix) (snprintf(nm, sizeof nm, "%s%d." suffix, m->llama ? "model.layers." : "h.", l), \
                           w->field = view(m, base, esz, nm))
#define N_(field, suffix) (snprintf(nm, sizeof nm, "%s%d." suffix, m->llama ? "model.layers." : "h.", l), \
                           w->field = (weights ? norm_view : view)(m, base, esz, nm)) /* a norm's weight */
        if (m->llama) {
            N_(ln1_w, "input_layernorm.weight");
            V_(q_w, "self_attn.q_proj.weight"); V_(q_b, "self_attn.q_proj.bias");
            V_(k_w, "self_attn.k_proj.weight"); V_(k_b, "self_attn.k_proj.bias");
            V_(v_w, "self_attn.v_proj.weight"); V_(v_b, "self_attn.v_proj.bias");
            V_(proj_w, "self_attn.o_proj.weight"); V_(proj_b, "self_attn.o_proj.bias");
            N_(qn_w, "self_attn.q_norm.weight"); N_(kn_w, "self_attn.k_norm.weight");
            N_(ln2_w, "post_attention_layernorm.weight");
            V_(gate_w, "mlp.gate_proj.weight"); V_(gate_b, "mlp.gate_proj.bias");
            V_(fc_w, "mlp.up_proj.weight"); V_(fc_b, "mlp.up_proj.bias");
            V_(fcproj_w, "mlp.down_proj.weight"); V_(fcproj_b, "mlp.down_proj.bias");
        } else {
            N_(ln1_w, "ln_1.weight"); V_(ln1_b, "ln_1.bias");
            V_(qkv_w, "attn.c_attn.weight"); V_(qkv_b, "attn.c_attn.bias");
            V_(proj_w, "attn.c_proj.weight"); V_(proj_b, "attn.c_proj.bias");
            N_(ln2_w, "ln_2.weight"); V_(ln2_b, "ln_2.bias");
            V_(fc_w, "mlp.c_fc.weight"); V_(fc_b, "mlp.c_fc.bias");
            V_(fcproj_w, "mlp.c_proj.weight"); V_(fcproj_b, "mlp.c_proj.bias");
        }
#undef V_
#undef N_
    }
    if (ch->last) {
        v->lnf_w = (weights ? norm_view : view)(m, base, esz, m->llama ? "model.norm.weight" : "ln_f.weight");
        v->lnf_b = view(m, base, esz, "ln_f.bias");
        v->head = view(m, base, esz, m->cfg.untie_embeddings_and_output_weights ? "lm_head.weight" : emb);
    }
}

/* Carves 64-byte aligned pieces out of one allocation; with base NULL it only
 * counts, so a layout is run once to size the allocation and once to place. */
typedef struct carver {
    char *base;
    size_t used; /* bytes */
} carver;

static void *carve(carver *cv, size_t bytes)
{
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (bytes + 63) / 64 * 64;
    return p;
}

static float *carve_f32(carver *cv, size_t n) { return carve(cv, n * sizeof(float)); }

/* One layer's saved activations; `keep_att` = 0 under selective recompute. */
static void layer_acts_carve(const eng_model *m, carver *cv, eng_layer_acts *la, int keep_att)
{
    size_t N = (size_t)m->B * m->T, R = (size_t)m->R, C = (size_t)m->C, E = m->act_bytes;
    size_t Cl = (size_t)m->NH * m->HD, QKV = k_qkv_row(m->NH, m->NG, m->HD), F = (size_t)m->F;
    size_t LN = m->sp ? R * C : N * C; /* SP keeps this rank's rows; backward re-gathers */
    la->ln1 = carve(cv, LN * E);
    la->ln1_mean = m->llama ? NULL : carve_f32(cv, R);
    la->ln1_rstd = carve_f32(cv, R);
    la->qkv = carve(cv, N * QKV * E);
    la->atty = carve(cv, N * Cl * E);
    la->att = !m->bf16 && keep_att ? carve_f32(cv, (size_t)m->B * m->NH * m->T * m->T) : NULL;
    la->lse = m->bf16 ? carve_f32(cv, (size_t)m->B * m->NH * m->T) : NULL;
    la->res2 = carve(cv, R * C * E);
    la->ln2 = carve(cv, LN * E);
    la->ln2_mean = m->llama ? NULL : carve_f32(cv, R);
    la->ln2_rstd = carve_f32(cv, R);
    la->fch = carve(cv, N * F * E);
    la->fcg = carve(cv, N * F * E);
    la->fcu = m->llama ? carve(cv, N * F * E) : NULL;
    size_t KV = (size_t)m->NG * m->HD;
    la->qpre = m->qk_norm ? carve(cv, N * Cl * E) : NULL;
    la->kpre = m->qk_norm ? carve(cv, N * KV * E) : NULL;
    la->q_rstd = m->qk_norm ? carve_f32(cv, N * (size_t)m->NH) : NULL;
    la->k_rstd = m->qk_norm ? carve_f32(cv, N * (size_t)m->NG) : NULL;
}

/* The backward workspace; `att_ws`: fp32 attention's [B, NH, T, T] scratch. */
static void ws_carve(eng_model *m, carver *cv)
{
    size_t N = (size_t)m->B * m->T, C = (size_t)m->C, Cl = (size_t)m->NH * m->HD, E = m->act_bytes;
    size_t QKV = k_qkv_row(m->NH, m->NG, m->HD), KV = (size_t)m->NG * m->HD, F = (size_t)m->F;
    size_t att = (size_t)m->B * m->NH * m->T * m->T;
    int drop = m->cfg.hidden_dropout > 0;
    m->ws_dres = carve(cv, N * C * E);
    m->ws_dln = carve(cv, N * C * E);
    m->ws_dqkv = carve(cv, N * QKV * E);
    m->ws_datty = carve(cv, N * Cl * E);
    m->ws_dfc = carve(cv, N * F * E);
    m->ws_full = m->sp ? carve(cv, N * C * E) : NULL;
    m->ws_dlnl = m->sp ? carve(cv, N * C * E) : NULL;
    m->ws_gath = m->sp ? carve(cv, N * C * E) : NULL;
    m->ws_datt = m->bf16 ? NULL : carve_f32(cv, att);
    m->ws_att = !m->bf16 && m->recompute == RECOMPUTE_SELECTIVE ? carve_f32(cv, att) : NULL;
    m->ws_cvt = m->bf16 && m->tp_size > 1 ? carve_f32(cv, 2 * N * C) : NULL;
    m->ws_ddrop = drop ? carve(cv, N * C * E) : NULL;
    m->ws_q = m->llama ? carve(cv, N * Cl * E) : NULL;
    m->ws_k = m->llama ? carve(cv, N * KV * E) : NULL;
    m->ws_v = m->llama ? carve(cv, N * KV * E) : NULL;
    m->ws_dtmp = m->llama ? carve(cv, N * (C > Cl ? C : Cl) * E) : NULL; /* dq under --qk-layernorm: N x Cl */
    m->ws_dgate = m->llama ? carve(cv, N * F * E) : NULL;
    m->ws_dup = m->llama ? carve(cv, N * F * E) : NULL;
}

/* Why this backend cannot run the model in bf16, or NULL when it can. */
static const char *bf16_refusal(const eng_model *m)
{
    const k_ops *k = m->k;
    if (!k->matmul_forward_bf16 || !k->attention_forward_bf16 || !k->adamw_bf16)
        return "this backend has no bf16 kernels";
    if (m->llama && (!k->rmsnorm_forward_bf16 || !k->rope_forward_bf16))
        return "this backend has no bf16 kernels for the LLaMA family";
    if (!strcmp(k->name, "cuda") && m->HD != 64 && m->HD != 128)
        return "the CUDA flash attention takes head dim 64 or 128";
    return NULL;
}

eng_model *eng_model_create(const atoll_config *cfg, const eng_layout *lay, const k_ops *k,
                            char *err, size_t errlen)
{
    if (check_shapes(cfg, lay, err, errlen)) return NULL;
    eng_model *m = calloc(1, sizeof *m);
    if (!m) { atoll_errf(err, errlen, "out of memory"); return NULL; }
    m->cfg = *cfg;
    m->k = k;
    m->tp = eng_tp_identity;
    m->tp_rank = lay->tp_rank;
    m->tp_size = lay->tp_size;
    m->C = cfg->hidden_size;
    m->NH = cfg->num_attention_heads / lay->tp_size;
    m->NG = cfg_kv_groups(cfg) / lay->tp_size;
    m->HD = cfg_head_dim(cfg);
    m->llama = cfg_rmsnorm(cfg);
    m->rope = cfg_rope(cfg);
    m->RD = cfg_rotary_dim(cfg);
    m->eps = (float)cfg_norm_eps(cfg);
    m->qk_norm = cfg->qk_layernorm && m->llama;
    m->F = cfg_ffn(cfg) / lay->tp_size;
    m->V = cfg->vocab_size / lay->tp_size;
    m->vocab_offset = m->V * lay->tp_rank;
    m->T = cfg->seq_length;
    m->P = cfg_max_pos(cfg);
    m->B = cfg->micro_batch_size;
    m->bf16 = cfg->bf16 != 0;
    m->act_bytes = m->bf16 ? 2 : 4;
    m->sp = cfg->sequence_parallel && lay->tp_size > 1;
    m->R = m->B * m->T / (m->sp ? lay->tp_size : 1);
    m->recompute = cfg->recompute_granularity;
    m->recompute_first = cfg_recompute_layers(cfg, INT_MAX);
    m->doc_mask = cfg->reset_attention_mask != 0;
    m->doc_pos = cfg->reset_position_ids && !m->rope; /* rotary positions count from the sample's start */
    m->doc_eod = -1;
    m->dec_pos = -1;
    m->logits_pos = -1;
    const char *why = m->bf16 ? bf16_refusal(m) : NULL;
    if (why) {
        atoll_errf(err, errlen, "--bf16 on --device %s: %s (hidden %d / %d heads = head dim %d); run without --bf16 "
             "for fp32", k->name, why, m->C, cfg->num_attention_heads, m->HD);
        free(m);
        return NULL;
    }
    if (m->sp && (m->B * m->T) % lay->tp_size) {
        atoll_errf(err, errlen, "--sequence-parallel: micro-batch tokens %d not divisible by tp %d", m->B * m->T,
             lay->tp_size);
        free(m);
        return NULL;
    }

    table_builder tb = { 0 };
    tb.tp_rank = lay->tp_rank;
    tb.tp_size = lay->tp_size;
    tb.layer = -1;
    build_table(&tb, cfg, lay);
    m->table = tb.t;
    m->nparams = tb.n;
    const eng_param *lastp = &m->table[m->nparams - 1];
    m->num_floats = (lastp->offset + lastp->numel + 15) / 16 * 16;

    m->nchunks = lay->nchunks;
    for (int i = 0; i < lay->nchunks; i++) {
        eng_chunk *ch = &m->chunks[i];
        ch->layer_begin = lay->layer_begin[i];
        ch->layer_end = lay->layer_end[i];
        ch->first = ch->layer_begin == 0;
        ch->last = ch->layer_end == cfg->num_layers;
        int nl = ch->layer_end - ch->layer_begin;
        ch->w.layers = calloc((size_t)nl, sizeof(eng_layer_w));
        ch->g.layers = calloc((size_t)nl, sizeof(eng_layer_w));
        if (!ch->w.layers || !ch->g.layers) goto oom;
    }

    carver cv = { NULL, 0 };
    ws_carve(m, &cv);
    m->params = k->alloc(m->num_floats * sizeof(float));
    m->grads = lay->forward_only ? NULL : k->alloc(m->num_floats * sizeof(float));
    m->ws = k->alloc(cv.used);
    if (!m->params || (!m->grads && !lay->forward_only) || !m->ws) goto oom;
    if (m->bf16 && !(m->params16 = k->alloc(m->num_floats * sizeof(uint16_t)))) goto oom;
    cv = (carver){ m->ws, 0 };
    ws_carve(m, &cv);
    for (int i = 0; i < m->nparams; i++) /* --apply-layernorm-1p: 1 + w side by side */
        if (m->table[i].plus_one) {
            m->table[i].plus_one_at = m->norm1p_n;
            m->norm1p_n += m->table[i].numel;
        }
    if (m->norm1p_n) {
        float *ones = malloc(m->norm1p_n * sizeof(float));
        m->norm1p = k->alloc(m->norm1p_n * m->act_bytes);
        m->norm1p_ones = k->alloc(m->norm1p_n * sizeof(float));
        m->norm1p_f32 = m->bf16 ? k->alloc(m->norm1p_n * sizeof(float)) : m->norm1p;
        if (!ones || !m->norm1p || !m->norm1p_ones || !m->norm1p_f32) {
            free(ones);
            goto oom;
        }
        for (size_t i = 0; i < m->norm1p_n; i++) ones[i] = 1.0f;
        k->to_device(m->norm1p_ones, ones, m->norm1p_n * sizeof(float));
        free(ones);
    }
    for (int i = 0; i < m->nchunks; i++) {
        if (m->bf16) set_views(m, &m->chunks[i], &m->chunks[i].w, m->params16, sizeof(uint16_t), 1);
        else set_views(m, &m->chunks[i], &m->chunks[i].w, m->params, sizeof(float), 1);
        if (m->grads) set_views(m, &m->chunks[i], &m->chunks[i].g, m->grads, sizeof(float), 0); /* else NULL views */
    }
    if (m->recompute == RECOMPUTE_FULL) {
        /* Megatron's uniform method: groups of G layers, each rebuilt from its first input; a group never
         * spans chunks, so it holds at most the largest chunk's layers */
        int G = cfg_recompute_group(cfg), most = 1;
        for (int i = 0; i < m->nchunks; i++) {
            int nl = m->chunks[i].layer_end - m->chunks[i].layer_begin;
            if (nl > most) most = nl;
        }
        if (G > most) G = most;
        m->recompute_group = G;
        if (!(m->ws_layer = calloc((size_t)G, sizeof *m->ws_layer)) || !(m->ws_res = calloc((size_t)G, sizeof(void *))))
            goto oom;
        size_t RCb = (size_t)m->R * m->C * m->act_bytes;
        for (int pass = 0; pass < 2; pass++) { /* size, then place */
            cv = (carver){ m->ws_layer_mem, 0 };
            for (int j = 0; j < G; j++) layer_acts_carve(m, &cv, &m->ws_layer[j], 1);
            for (int j = 0; j + 1 < G; j++) m->ws_res[j] = carve(&cv, RCb);
            if (!pass && !(m->ws_layer_mem = k->alloc(cv.used))) goto oom;
        }
    }
    if ((m->doc_mask || m->doc_pos) && !(m->doc_host = malloc(2 * sizeof(int32_t) * (size_t)m->B * m->T))) goto oom;
    return m;
oom:
    atoll_errf(err, errlen, "out of memory allocating the model (%zu parameters on this rank)", m->num_floats);
    eng_model_free(m);
    return NULL;
}

void eng_model_free(eng_model *m)
{
    if (!m) return;
    void *bufs[7] = { m->params, m->grads, m->params16, m->ws, m->ws_layer_mem, m->norm1p, m->norm1p_ones };
    for (int i = 0; i < 7; i++)
        if (bufs[i]) m->k->free(bufs[i]);
    if (m->norm1p_f32 && m->norm1p_f32 != m->norm1p) m->k->free(m->norm1p_f32);
    free(m->ws_layer);
    free(m->ws_res);
    free(m->doc_host);
    for (int i = 0; i < m->nchunks; i++) {
        free(m->chunks[i].w.layers);
        free(m->chunks[i].g.layers);
    }
    free(m->table);
    free(m);
}

void eng_zero_grads(eng_model *m)
{
    if (m->grads) m->k->zero(m->grads, m->num_floats * sizeof(float)); /* none when forward_only */
}

void eng_params_updated(eng_model *m)
{
    if (m->params16) m->k->to_bf16(m->params16, m->params, m->num_floats);
    eng_norms_updated(m);
}

void eng_norms_updated(eng_model *m)
{
    if (!m->norm1p_n) return;
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (p->plus_one) m->k->copy(m->norm1p_f32 + p->plus_one_at, m->params + p->offset, p->numel * sizeof(float));
    }
    m->k->add_inplace(m->norm1p_f32, m->norm1p_ones, m->norm1p_n); /* 1 + w in fp32, rounded once for bf16 */
    if (m->bf16) m->k->to_bf16(m->norm1p, m->norm1p_f32, m->norm1p_n);
}

/* ---- activations ---- */

/* Is layer l of its chunk rebuilt in the backward pass (full recompute)? */
static int rebuilt(const eng_model *m, int l)
{
    return l < m->recompute_first;
}

/* Where rebuilt layer l of a chunk keeps its activations: its place in its
 * recompute group's workspace. */
static eng_layer_acts *rebuilt_acts(const eng_model *m, int l)
{
    return &m->ws_layer[l % m->recompute_group];
}

/* Lays the acts out twice: once to size the allocation, once to set pointers. */
static size_t acts_layout(eng_model *m, eng_acts *a, void *base)
{
    const eng_chunk *ch = &m->chunks[a->chunk];
    size_t N = (size_t)m->B * m->T, R = (size_t)m->R, C = (size_t)m->C, E = m->act_bytes;
    int nl = ch->layer_end - ch->layer_begin;
    carver cv = { base, 0 };
    a->tokens = carve(&cv, N * sizeof(int32_t));
    a->targets = carve(&cv, N * sizeof(int32_t));
    a->doc = m->doc_mask ? carve(&cv, N * sizeof(int32_t)) : NULL;
    a->pos = m->doc_pos && ch->first ? carve(&cv, N * sizeof(int32_t)) : NULL;
    /* the layer boundaries: each layer's input, and the chunk's output; with recompute groups (uniform,
     * G > 1) only each group's input is kept, the others are rebuilt in the shared ws_res */
    int G = m->recompute == RECOMPUTE_FULL ? m->recompute_group : 1;
    for (int l = 0; l <= nl; l++)
        a->res[l] = G == 1 || l % G == 0 || l == nl ? carve(&cv, R * C * E) : m->ws_res[l % G - 1];
    for (int l = 0; l < nl; l++)
        if (!rebuilt(m, l)) layer_acts_carve(m, &cv, &a->layers[l], m->recompute != RECOMPUTE_SELECTIVE);
    if (ch->last) {
        a->lnf = carve(&cv, (m->sp ? R * C : N * C) * E);
        a->lnf_mean = carve_f32(&cv, R);
        a->lnf_rstd = carve_f32(&cv, R);
        a->logits = carve(&cv, N * (size_t)m->V * E);
        a->rowmax = carve_f32(&cv, N);
        a->sumexp = carve_f32(&cv, 2 * N); /* sumexp and tlogit side by side: one all-reduce */
        a->tlogit = a->sumexp ? a->sumexp + N : NULL;
        a->losses = carve_f32(&cv, N);
    }
    if (!ch->first) a->dinput = carve(&cv, R * C * E);
    return cv.used;
}

eng_acts *eng_acts_create(eng_model *m, int chunk)
{
    if (chunk < 0 || chunk >= m->nchunks) return NULL;
    const eng_chunk *ch = &m->chunks[chunk];
    int nl = ch->layer_end - ch->layer_begin;
    if (m->T != m->cfg.seq_length) return NULL; /* sized for the whole sequence only (eng_set_seq_length) */
    eng_acts *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->chunk = chunk;
    a->res = calloc((size_t)nl + 1, sizeof(void *));
    a->layers = calloc((size_t)nl, sizeof(eng_layer_acts));
    if (!a->res || !a->layers) goto fail;
    a->bytes = acts_layout(m, a, NULL);
    a->mem = m->k->alloc(a->bytes);
    if (!a->mem) goto fail;
    acts_layout(m, a, a->mem);
    return a;
fail:
    free(a->res);
    free(a->layers);
    free(a);
    return NULL;
}

void eng_acts_free(eng_model *m, eng_acts *a)
{
    if (!a) return;
    if (a->mem) m->k->free(a->mem);
    free(a->res);
    free(a->layers);
    free(a);
}

void *eng_output(eng_model *m, eng_acts *a)
{
    const eng_chunk *ch = &m->chunks[a->chunk];
    return a->res[ch->layer_end - ch->layer_begin];
}

int eng_set_seq_length(eng_model *m, int T)
{
    /* the buffers are sized for cfg.seq_length; without gradients no backward reads them */
    if (m->grads || m->sp || T < 1 || T > m->cfg.seq_length) return -1;
    m->T = T;
    m->R = m->B * T;
    return 0;
}

int eng_set_logits_position(eng_model *m, int t)
{
    if (m->grads || t < -1 || t >= m->cfg.seq_length) return -1;
    m->logits_pos = t;
    return 0;
}

int eng_can_decode(const eng_model *m)
{
    const k_ops *k = m->k;
    return !m->grads && m->B == 1 && m->tp_size == 1 && m->nchunks == 1 && m->chunks[0].first && m->chunks[0].last &&
           m->recompute_first == 0 && (m->bf16 ? k->attention_decode_bf16 != NULL : k->attention_decode != NULL);
}

int eng_decode(eng_model *m, eng_acts *a, int32_t token, int pos, int doc0)
{
    if (!eng_can_decode(m) || pos < 0 || pos >= m->cfg.seq_length || doc0 < 0 || doc0 > pos) return -1;
    eng_set_seq_length(m, 1);
    m->dec_pos = pos;
    m->dec_k0 = m->doc_mask ? doc0 : 0;
    m->dec_wpe = m->doc_pos ? pos - doc0 : pos;
    int rc = eng_forward(m, a, &token, NULL, NULL, 0.0f, NULL);
    m->dec_pos = -1;
    return rc;
}

size_t eng_boundary_bytes(const eng_model *m) { return (size_t)m->R * m->C * m->act_bytes; }

void eng_logits_to_host(eng_model *m, const eng_acts *a, int row0, int nrows, float *host)
{
    size_t n = (size_t)nrows * m->V;
    const char *src = (const char *)a->logits + (size_t)row0 * m->V * m->act_bytes;
    if (!m->bf16) {
        m->k->to_host(host, src, n * sizeof(float));
        return;
    }
    uint16_t *h16 = malloc(n * sizeof(uint16_t));
    if (!h16) abort();
    m->k->to_host(h16, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h16[i] << 16;
        memcpy(&host[i], &u, sizeof u);
    }
    free(h16);
}

int eng_param_tp_partial(const eng_model *m, const eng_param *p)
{
    return (m->sp && p->norm) || (m->tp_size > 1 && p->head_norm);
}

void eng_set_step(eng_model *m, uint64_t seed, long long iteration, int training)
{
    m->drop_on = training && (m->cfg.hidden_dropout > 0 || m->cfg.attention_dropout > 0);
    m->drop_key = rng_key(seed, 0xd7090000ULL ^ (uint64_t)iteration);
}

/* ---- the ops in the model's activation type ----
 * One call per op whatever the precision: fp32 runs the reference entries,
 * bf16 the *_bf16 entries (fp32 statistics and weight gradients in both). */

/* LayerNorm, or RMSNorm in the LLaMA family (no mean, no bias) */
static void op_norm(const eng_model *m, void *out, float *mean, float *rstd, const void *x, const void *w,
                    const void *b)
{
    if (m->llama) {
        if (m->bf16) m->k->rmsnorm_forward_bf16(out, rstd, x, w, m->R, m->C, m->eps);
        else m->k->rmsnorm_forward(out, rstd, x, w, m->R, m->C, m->eps);
    } else if (m->bf16) {
        m->k->layernorm_forward_bf16(out, mean, rstd, x, w, b, m->R, m->C, m->eps);
    } else {
        m->k->layernorm_forward(out, mean, rstd, x, w, b, m->R, m->C, m->eps);
    }
}

/* RMSNorm over each head: `rows` rows of head dim (--qk-layernorm) */
static void op_head_norm(const eng_model *m, void *out, float *rstd, const void *x, const void *w, int rows)
{
    if (m->bf16) m->k->rmsnorm_forward_bf16(out, rstd, x, w, rows, m->HD, m->eps);
    else m->k->rmsnorm_forward(out, rstd, x, w, rows, m->HD, m->eps);
}

/* dx = d/dx (overwritten), dw accumulates (fp32) */
static void op_head_norm_bwd(const eng_model *m, void *dx, void *dw, const void *dout, const void *x, const void *w,
                             const float *rstd, int rows)
{
    m->k->zero(dx, (size_t)rows * m->HD * m->act_bytes);
    if (m->bf16) m->k->rmsnorm_backward_bf16(dx, dw, dout, x, w, rstd, rows, m->HD);
    else m->k->rmsnorm_backward(dx, dw, dout, x, w, rstd, rows, m->HD);
}

/* dx += d/dx; dw, db accumulate (fp32); dsum (LayerNorm only, see bias_by_norm) += dx's column sums */
static void op_norm_bwd(const eng_model *m, void *dx, void *dw, void *db, float *dsum, const void *dout,
                        const void *x, const void *w, const float *mean, const float *rstd)
{
    if (m->llama) {
        if (m->bf16) m->k->rmsnorm_backward_bf16(dx, dw, dout, x, w, rstd, m->R, m->C);
        else m->k->rmsnorm_backward(dx, dw, dout, x, w, rstd, m->R, m->C);
    } else if (m->bf16) {
        m->k->layernorm_backward_bf16(dx, dw, db, dsum, dout, x, w, mean, rstd, m->R, m->C);
    } else {
        m->k->layernorm_backward(dx, dw, db, dsum, dout, x, w, mean, rstd, m->R, m->C);
    }
}

/* out = x w^T + b; with pre_gelu: pre_gelu = x w^T + b, out = gelu(pre_gelu) */
static void op_matmul(const eng_model *m, void *out, void *pre_gelu, const void *x, const void *w, const void *b,
                      int N, int C, int OC)
{
    if (m->bf16) {
        m->k->matmul_forward_bf16(out, pre_gelu, x, w, b, N, C, OC);
        return;
    }
    m->k->matmul_forward(pre_gelu ? pre_gelu : out, x, w, b, N, C, OC);
    if (pre_gelu) m->k->gelu_forward(out, pre_gelu, (size_t)N * OC);
}

/* dx = dout w (overwrites); dw, db accumulate (fp32) */
static void op_matmul_bwd(const eng_model *m, void *dx, void *dw, void *db, const void *dout, const void *x,
                          const void *w, int N, int C, int OC)
{
    if (m->bf16) m->k->matmul_backward_bf16(dx, dw, db, dout, x, w, N, C, OC);
    else m->k->matmul_backward(dx, dw, db, dout, x, w, N, C, OC);
}

/* The MLP down-projection's backward through the GELU: dpre = gelu'(pre) *
 * (dout w), one GEMM with a fused epilogue where the backend has it */
static void op_matmul_bwd_gelu(const eng_model *m, void *dpre, void *dw, void *db, const void *dout, const void *x,
                               const void *w, const void *pre, int N, int C, int OC)
{
    if (m->bf16 && m->k->matmul_backward_gelu_bf16) {
        m->k->matmul_backward_gelu_bf16(dpre, dw, db, dout, x, w, pre, N, C, OC);
        return;
    }
    op_matmul_bwd(m, dpre, dw, db, dout, x, w, N, C, OC);
    if (m->bf16) m->k->gelu_backward_bf16(dpre, pre, dpre, (size_t)N * C);
    else m->k->gelu_backward(dpre, pre, dpre, (size_t)N * C);
}

static void op_residual(const eng_model *m, void *out, const void *a, const void *b, size_t n)
{
    if (m->bf16) m->k->residual_forward_bf16(out, a, b, n);
    else m->k->residual_forward(out, a, b, n);
}

static void op_add(const eng_model *m, void *acc, const void *x, size_t n)
{
    if (m->bf16) m->k->add_inplace_bf16(acc, x, n);
    else m->k->add_inplace(acc, x, n);
}

/* ---- dropout ----
 * Sites: the embedding output (layer -1), each layer's attention output (1)
 * and MLP output (2) before the residual add, and its attention probabilities
 * (3). Each site's key mixes the step's key with (layer, site); elements are
 * numbered by global token row and feature (hidden) or by global sample, head
 * and (query, key) (attention), so every layout draws the same masks. */
enum { DROP_ATTN_OUT = 1, DROP_MLP_OUT = 2, DROP_ATTN_PROBS = 3 };

static int hidden_dropout_on(const eng_model *m) { return m->drop_on && m->cfg.hidden_dropout > 0; }

/* the hidden dropout of a site on this rank's [R, C] rows of micro-batch a;
 * NULL when off */
static const k_dropout *hidden_drop(const eng_model *m, const eng_acts *a, int layer, int site, k_dropout *d)
{
    if (!hidden_dropout_on(m)) return NULL;
    d->p = (float)m->cfg.hidden_dropout;
    d->key = rng_mix64(m->drop_key ^ rng_mix64((uint64_t)(layer + 1) << 8 | (uint64_t)site));
    d->row0 = a->sample0 * m->T + (m->sp ? (int64_t)m->tp_rank * m->R : 0);
    d->head0 = 0;
    return d;
}

static const k_dropout *attn_drop(const eng_model *m, const eng_acts *a, int layer, k_dropout *d)
{
    if (!m->drop_on || m->cfg.attention_dropout <= 0) return NULL;
    d->p = (float)m->cfg.attention_dropout;
    d->key = rng_mix64(m->drop_key ^ rng_mix64((uint64_t)(layer + 1) << 8 | DROP_ATTN_PROBS));
    d->row0 = a->sample0;
    d->head0 = m->tp_rank * m->NH;
    return d;
}

static void op_dropout(const eng_model *m, void *x, const k_dropout *d)
{
    if (!d) return;
    if (m->bf16) m->k->dropout_bf16(x, m->R, m->C, d);
    else m->k->dropout(x, m->R, m->C, d);
}

/* the gradient of a dropped output: dres itself without dropout, else its
 * masked copy in ws_ddrop (dres also flows on, unmasked, through the residual) */
static const void *drop_grad(eng_model *m, const void *dres, const k_dropout *d)
{
    if (!d) return dres;
    m->k->copy(m->ws_ddrop, dres, (size_t)m->R * m->C * m->act_bytes);
    op_dropout(m, m->ws_ddrop, d);
    return m->ws_ddrop;
}

/* fp32 keeps the probabilities in att; bf16 keeps lse */
static void op_attention(const eng_model *m, const eng_acts *a, void *out, eng_layer_acts *la, float *att,
                         const k_dropout *d)
{
    if (m->dec_pos >= 0) { /* la->qkv: the cache, the decoded row at dec_pos */
        if (m->bf16) m->k->attention_decode_bf16(out, la->qkv, m->dec_pos + 1, m->dec_k0, m->NH, m->NG, m->HD);
        else m->k->attention_decode(out, la->qkv, m->dec_pos + 1, m->dec_k0, m->NH, m->NG, m->HD);
        return;
    }
    if (m->bf16) m->k->attention_forward_bf16(out, la->lse, la->qkv, a->doc, m->B, m->T, m->NH, m->NG, m->HD, d);
    else m->k->attention_forward(out, att, la->qkv, a->doc, m->B, m->T, m->NH, m->NG, m->HD, d);
}

static void op_attention_bwd(const eng_model *m, const eng_acts *a, void *dqkv, const void *dout,
                             const eng_layer_acts *la, const float *att, const k_dropout *d)
{
    if (m->bf16)
        m->k->attention_backward_bf16(dqkv, dout, la->qkv, la->atty, la->lse, a->doc, m->B, m->T, m->NH, m->NG, m->HD,
                                      d);
    else
        m->k->attention_backward(dqkv, m->ws_datt, dout, la->qkv, att, m->B, m->T, m->NH, m->NG, m->HD, d);
}

static void op_rope(const eng_model *m, void *qkv, int back)
{
    k_rope_freq f = { (float)cfg_rotary_base(&m->cfg), (float)cfg_rope_scale(&m->cfg), (float)cfg_rope_interp(&m->cfg),
                      m->dec_pos > 0 ? m->dec_pos : 0 };
    if (m->bf16)
        (back ? m->k->rope_backward_bf16 : m->k->rope_forward_bf16)(qkv, m->B, m->T, m->NH, m->NG, m->HD, m->RD, f);
    else (back ? m->k->rope_backward : m->k->rope_forward)(qkv, m->B, m->T, m->NH, m->NG, m->HD, m->RD, f);
}

static void op_embedding(const eng_model *m, void *out, const int32_t *tokens, const void *wte)
{
    int N = m->B * m->T;
    if (m->bf16) m->k->embedding_forward_bf16(out, tokens, wte, N, m->C, m->vocab_offset, m->V);
    else m->k->embedding_forward(out, tokens, wte, N, m->C, m->vocab_offset, m->V);
}

static void op_position(const eng_model *m, const eng_acts *a, void *out, const void *wpe)
{
    if (m->rope) return; /* rotary positions live in the attention */
    if (m->dec_pos >= 0) { /* one row: wpe's row at its position */
        const char *row = (const char *)wpe + (size_t)m->dec_wpe * m->C * m->act_bytes;
        if (m->bf16) m->k->position_forward_bf16(out, (const uint16_t *)row, NULL, 1, 1, m->C);
        else m->k->position_forward(out, (const float *)row, NULL, 1, 1, m->C);
        return;
    }
    if (m->bf16) m->k->position_forward_bf16(out, wpe, a->pos, m->B, m->T, m->C);
    else m->k->position_forward(out, wpe, a->pos, m->B, m->T, m->C);
}

/* Positions inside documents make wpe a lookup table like wte: its backward is
 * the embedding's, positions in the tokens' place. */
static void op_embedding_bwd(const eng_model *m, const eng_chunk *ch, const eng_acts *a, const void *d)
{
    int N = m->B * m->T;
    if (m->bf16) {
        if (a->pos) m->k->embedding_backward_bf16(ch->g.wpe, d, a->pos, N, m->C, 0, m->P);
        else if (!m->rope) m->k->position_backward_bf16(ch->g.wpe, d, m->B, m->T, m->C);
        m->k->embedding_backward_bf16(ch->g.wte, d, a->tokens, N, m->C, m->vocab_offset, m->V);
    } else {
        if (a->pos) m->k->embedding_backward(ch->g.wpe, d, a->pos, N, m->C, 0, m->P);
        else if (!m->rope) m->k->position_backward(ch->g.wpe, d, m->B, m->T, m->C);
        m->k->embedding_backward(ch->g.wte, d, a->tokens, N, m->C, m->vocab_offset, m->V);
    }
}

/* Splits each sample of `tokens` (host) after every doc_eod token: doc[t] the
 * first position of t's document, pos[t] = t - doc[t]; the end-of-document
 * token itself closes its document. Uploaded to a->doc and a->pos. */
static void upload_documents(eng_model *m, eng_acts *a, const int32_t *tokens)
{
    size_t N = (size_t)m->B * m->T;
    int32_t *doc = m->doc_host, *pos = m->doc_host + N;
    for (int b = 0; b < m->B; b++) {
        int32_t start = 0;
        for (int t = 0; t < m->T; t++) {
            size_t i = (size_t)b * m->T + t;
            doc[i] = start;
            pos[i] = t - start;
            if (tokens[i] == m->doc_eod) start = t + 1;
        }
    }
    if (a->doc) m->k->to_device(a->doc, doc, N * sizeof(int32_t));
    if (a->pos) m->k->to_device(a->pos, pos, N * sizeof(int32_t));
}

/* ---- tensor-parallel collectives on activations ----
 * The comm layer reduces fp32. In bf16 the activations are widened into
 * ws_cvt, reduced in fp32 and rounded back once. tp = 1 has nothing to do. */

static int act_allreduce(eng_model *m, void *buf, size_t n)
{
    if (m->tp_size == 1) return 0;
    if (!m->bf16) return m->tp.allreduce_sum(m->tp.ctx, buf, n);
    m->k->from_bf16(m->ws_cvt, buf, n);
    if (m->tp.allreduce_sum(m->tp.ctx, m->ws_cvt, n)) return -1;
    m->k->to_bf16(buf, m->ws_cvt, n);
    return 0;
}

/* in: n elements; out: tp*n (rank i's at i*n) */
static int act_allgather(eng_model *m, const void *in, void *out, size_t n)
{
    if (!m->bf16) return m->tp.allgather(m->tp.ctx, in, out, n);
    float *mine = m->ws_cvt + (size_t)m->tp_rank * n;
    m->k->from_bf16(mine, in, n);
    if (m->tp.allgather(m->tp.ctx, mine, m->ws_cvt, n)) return -1;
    m->k->to_bf16(out, m->ws_cvt, (size_t)m->tp_size * n);
    return 0;
}

/* in: tp*n elements; out: n, the sum of every rank's chunk `rank` */
static int act_reduce_scatter(eng_model *m, const void *in, void *out, size_t n)
{
    if (!m->bf16) return m->tp.reduce_scatter(m->tp.ctx, in, out, n);
    float *sum = m->ws_cvt + (size_t)m->tp_size * n;
    m->k->from_bf16(m->ws_cvt, in, (size_t)m->tp_size * n);
    if (m->tp.reduce_scatter(m->tp.ctx, m->ws_cvt, sum, n)) return -1;
    m->k->to_bf16(out, sum, n);
    return 0;
}

/* ---- sequence-parallel conjugates ----
 * Without SP these are Megatron's f/g pair on a replicated [N, C]: identity one
 * way, all-reduce the other. With SP, rows are split: gather_rows makes the full
 * [N, C] input of a column-parallel GEMM, scatter_sum turns a row-parallel GEMM's
 * partial [N, C] into this rank's summed [R, C] rows. */
static const void *gather_rows(eng_model *m, const void *local)
{
    if (!m->sp) return local;
    if (act_allgather(m, local, m->ws_full, (size_t)m->R * m->C)) return NULL;
    return m->ws_full;
}

/* partial [N, C] -> out [R, C]; without SP out must equal partial (all-reduce). */
static int scatter_sum(eng_model *m, void *partial, void *out)
{
    if (!m->sp) return act_allreduce(m, partial, (size_t)m->B * m->T * m->C);
    return act_reduce_scatter(m, partial, out, (size_t)m->R * m->C);
}

/* The [N, C] input of a column-parallel GEMM from a norm output `ln`:
 * itself without SP; with SP, ln holds this rank's [R, C] rows, gathered into
 * ws_gath (again in backward, as Megatron does, rather than keeping N rows). */
static const void *ln_full(eng_model *m, const void *ln)
{
    if (!m->sp) return ln;
    return act_allgather(m, ln, m->ws_gath, (size_t)m->R * m->C) ? NULL : m->ws_gath;
}

static const void *ln_gathered(eng_model *m, void *ln, float *mean, float *rstd, const void *x, const void *w,
                               const void *b)
{
    op_norm(m, ln, mean, rstd, x, w, b);
    return ln_full(m, ln);
}

/* ---- forward ---- */

/* qkv of the attention from the gathered norm output: c_attn (GPT-2), or
 * q_proj, k_proj, v_proj packed into the same layout (LLaMA; with
 * --qk-layernorm each query and key head through its RMSNorm first); then the
 * rotary embedding on queries and keys. */
static void qkv_forward(eng_model *m, const eng_layer_w *w, eng_layer_acts *la, const void *ln)
{
    int N = m->B * m->T, C = m->C, Cl = m->NH * m->HD, KV = m->NG * m->HD;
    if (m->llama) {
        op_matmul(m, m->qk_norm ? la->qpre : m->ws_q, NULL, ln, w->q_w, w->q_b, N, C, Cl);
        op_matmul(m, m->qk_norm ? la->kpre : m->ws_k, NULL, ln, w->k_w, w->k_b, N, C, KV);
        if (m->qk_norm) {
            op_head_norm(m, m->ws_q, la->q_rstd, la->qpre, w->qn_w, N * m->NH);
            op_head_norm(m, m->ws_k, la->k_rstd, la->kpre, w->kn_w, N * m->NG);
        }
        op_matmul(m, m->ws_v, NULL, ln, w->v_w, w->v_b, N, C, KV);
        if (m->bf16) m->k->qkv_pack_bf16(la->qkv, m->ws_q, m->ws_k, m->ws_v, N, m->NH, m->NG, m->HD);
        else m->k->qkv_pack(la->qkv, m->ws_q, m->ws_k, m->ws_v, N, m->NH, m->NG, m->HD);
    } else {
        op_matmul(m, la->qkv, NULL, ln, w->qkv_w, w->qkv_b, N, C, Cl + 2 * KV);
    }
    if (m->rope) op_rope(m, la->qkv, 0);
}

/* the MLP's hidden activation fcg from the gathered norm output: gelu(c_fc)
 * (relu(c_fc)^2 under --squared-relu; c_fc kept in fch for the backward), or
 * silu(gate_proj) * up_proj */
static void mlp_up_forward(eng_model *m, const eng_layer_w *w, eng_layer_acts *la, const void *ln)
{
    int N = m->B * m->T, C = m->C, F = m->F;
    if (m->cfg.squared_relu) {
        op_matmul(m, la->fch, NULL, ln, w->fc_w, w->fc_b, N, C, F);
        if (m->bf16) m->k->relu2_forward_bf16(la->fcg, la->fch, (size_t)N * F);
        else m->k->relu2_forward(la->fcg, la->fch, (size_t)N * F);
        return;
    }
    if (!m->cfg.swiglu) {
        op_matmul(m, la->fcg, la->fch, ln, w->fc_w, w->fc_b, N, C, F);
        return;
    }
    op_matmul(m, la->fch, NULL, ln, w->gate_w, w->gate_b, N, C, F);
    op_matmul(m, la->fcu, NULL, ln, w->fc_w, w->fc_b, N, C, F);
    if (m->bf16) m->k->swiglu_forward_bf16(la->fcg, la->fch, la->fcu, (size_t)N * F);
    else m->k->swiglu_forward(la->fcg, la->fch, la->fcu, (size_t)N * F);
}

/* Where a norm (LayerNorm, or RMSNorm: no mean, no bias) writes: its output, statistics and parameters. */
typedef struct {
    void *ln;
    float *mean, *rstd;
    const void *w, *b;
} norm_site;

/* bf16 models have the residual add and the norm after it (LayerNorm, or
 * RMSNorm for the LLaMA family) as one op */
static int fuse_residual_norm(const eng_model *m)
{
    if (!m->bf16) return 0;
    return m->llama ? m->k->residual_rmsnorm_forward_bf16 != NULL : m->k->residual_layernorm_forward_bf16 != NULL;
}

/* res = a + b, then the norm of res into `to`, in one pass over the rows (the
 * same bits as op_residual then op_norm); callers check fuse_residual_norm. */
static void residual_norm(eng_model *m, void *res, const void *a, const void *b, const norm_site *to)
{
    if (m->llama) m->k->residual_rmsnorm_forward_bf16(res, to->ln, to->rstd, a, b, to->w, m->R, m->C, m->eps);
    else m->k->residual_layernorm_forward_bf16(res, to->ln, to->mean, to->rstd, a, b, to->w, to->b, m->R, m->C,
                                               m->eps);
}

/* One layer: out = x + attention + MLP. With `ln1_done` its ln_1 output is
 * already in la (the previous layer left it); with `next` non-NULL the final
 * residual add also leaves the norm that follows (the next layer's ln_1, or
 * ln_f) at `next` (only where fuse_residual_norm). */
static int layer_forward(eng_model *m, const eng_acts *a, int layer, const eng_layer_w *w, eng_layer_acts *la,
                         const void *x, void *out, int ln1_done, const norm_site *next)
{
    int N = m->B * m->T, C = m->C, Cl = m->NH * m->HD, F = m->F;
    size_t RC = (size_t)m->R * C;
    k_dropout dd;
    /* Row-parallel layers add their bias once, on TP rank 0, before the all-reduce. */
    int bias_here = m->tp_rank == 0;
    /* a row-parallel GEMM's partial [N, C]: in place without SP, else scattered */
    void *part1 = m->sp ? m->ws_full : la->res2, *part2 = m->sp ? m->ws_full : out;
    /* fp32 selective recompute: the probabilities are rebuilt in backward */
    float *att = la->att ? la->att : m->ws_att;

    const void *ln = ln1_done ? ln_full(m, la->ln1)
                              : ln_gathered(m, la->ln1, la->ln1_mean, la->ln1_rstd, x, w->ln1_w, w->ln1_b);
    if (!ln) return -1;
    /* column-parallel q, k, v: their input is replicated, nothing to reduce forward;
     * a decode step writes its row of the cache */
    eng_layer_acts row = *la;
    if (m->dec_pos >= 0) row.qkv = (char *)la->qkv + (size_t)m->dec_pos * k_qkv_row(m->NH, m->NG, m->HD) * m->act_bytes;
    qkv_forward(m, w, &row, ln);
    op_attention(m, a, la->atty, la, att, attn_drop(m, a, layer, &dd));
    /* row-parallel output projection: partial sums over this rank's heads -> all-reduce */
    op_matmul(m, part1, NULL, la->atty, w->proj_w, bias_here ? w->proj_b : NULL, N, Cl, C);
    if (scatter_sum(m, part1, la->res2)) return -1;
    op_dropout(m, la->res2, hidden_drop(m, a, layer, DROP_ATTN_OUT, &dd));
    if (fuse_residual_norm(m)) {
        norm_site ln2 = {la->ln2, la->ln2_mean, la->ln2_rstd, w->ln2_w, w->ln2_b};
        residual_norm(m, la->res2, la->res2, x, &ln2);
        ln = ln_full(m, la->ln2);
    } else {
        op_residual(m, la->res2, la->res2, x, RC);
        ln = ln_gathered(m, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, w->ln2_w, w->ln2_b);
    }
    if (!ln) return -1;
    mlp_up_forward(m, w, la, ln);
    op_matmul(m, part2, NULL, la->fcg, w->fcproj_w, bias_here ? w->fcproj_b : NULL, N, F, C);
    if (scatter_sum(m, part2, out)) return -1;
    op_dropout(m, out, hidden_drop(m, a, layer, DROP_MLP_OUT, &dd));
    if (next) residual_norm(m, out, out, la->res2, next);
    else op_residual(m, out, out, la->res2, RC);
    return 0;
}

/* Vocab-parallel cross-entropy: local partials, then all-reduces of max and of
 * (sum-exp, target logit). Leaves the per-token losses in a->losses. With the
 * whole vocab here and dloss != 0, one fused pass also leaves dloss * dlogits
 * over the logits (a->dlogits_ready). */
static int loss_forward(eng_model *m, eng_acts *a, float dloss)
{
    const k_ops *k = m->k;
    int N = m->B * m->T;
    a->dlogits_ready = 0;
    if (m->tp_size == 1 && dloss != 0.0f && k->xent_fused) {
        if (m->bf16) k->xent_fused_bf16(a->losses, a->logits, a->targets, dloss, N, m->V);
        else k->xent_fused(a->losses, a->logits, a->targets, dloss, N, m->V);
        a->dlogits_ready = 1;
        return 0;
    }
    if (m->bf16) k->xent_max_bf16(a->rowmax, a->logits, N, m->V);
    else k->xent_max(a->rowmax, a->logits, N, m->V);
    if (m->tp.allreduce_max(m->tp.ctx, a->rowmax, (size_t)N)) return -1;
    if (m->bf16)
        k->xent_sumexp_target_bf16(a->sumexp, a->tlogit, a->logits, a->rowmax, a->targets, N, m->V, m->vocab_offset);
    else
        k->xent_sumexp_target(a->sumexp, a->tlogit, a->logits, a->rowmax, a->targets, N, m->V, m->vocab_offset);
    if (m->tp.allreduce_sum(m->tp.ctx, a->sumexp, 2 * (size_t)N)) return -1;
    k->xent_loss(a->losses, a->rowmax, a->sumexp, a->tlogit, a->targets, N);
    return 0;
}

int eng_forward(eng_model *m, eng_acts *a, const int32_t *tokens, const void *input,
                const int32_t *targets, float dloss, double *loss_sum)
{
    if (eng_forward_inputs(m, a, tokens, targets)) return -1;
    return eng_forward_run(m, a, input, targets != NULL, dloss, loss_sum);
}

int eng_forward_inputs(eng_model *m, eng_acts *a, const int32_t *tokens, const int32_t *targets)
{
    const eng_chunk *ch = &m->chunks[a->chunk];
    size_t N = (size_t)m->B * m->T;
    if (ch->last && !targets && m->dec_pos < 0 && m->logits_pos >= m->T) return -1; /* eng_set_logits_position */
    if (ch->last && targets) m->k->to_device(a->targets, targets, sizeof(int32_t) * N);
    if ((a->doc || a->pos) && m->dec_pos < 0) {
        if (!tokens) return -1;
        upload_documents(m, a, tokens);
    }
    if (ch->first) {
        if (!tokens) return -1;
        m->k->to_device(a->tokens, tokens, sizeof(int32_t) * N);
    }
    return 0;
}

int eng_forward_run(eng_model *m, eng_acts *a, const void *input, int targets, float dloss, double *loss_sum)
{
    const k_ops *k = m->k;
    const eng_chunk *ch = &m->chunks[a->chunk];
    int N = m->B * m->T, C = m->C;
    k_dropout dd;
    if (ch->first) {
        if (m->sp) {
            /* wpe added once (TP rank 0) before the sum, like a row-parallel bias */
            op_embedding(m, m->ws_full, a->tokens, ch->w.wte);
            if (m->tp_rank == 0) op_position(m, a, m->ws_full, ch->w.wpe);
            if (scatter_sum(m, m->ws_full, a->res[0])) return -1;
        } else {
            op_embedding(m, a->res[0], a->tokens, ch->w.wte);
            if (act_allreduce(m, a->res[0], (size_t)N * C)) return -1;
            op_position(m, a, a->res[0], ch->w.wpe);
        }
        op_dropout(m, a->res[0], hidden_drop(m, a, -1, 0, &dd));
    } else {
        k->copy(a->res[0], input, eng_boundary_bytes(m));
    }
    int nl = ch->layer_end - ch->layer_begin, fuse = fuse_residual_norm(m), ln_done = 0;
    for (int l = 0; l < nl; l++) {
        eng_layer_acts *la = rebuilt(m, l) ? rebuilt_acts(m, l) : &a->layers[l];
        /* each layer's last residual add leaves the norm after it: the next
         * layer's ln_1, or on the last stage ln_f */
        norm_site next = {0}, *to = NULL;
        if (fuse && l + 1 < nl) {
            eng_layer_acts *nla = rebuilt(m, l + 1) ? rebuilt_acts(m, l + 1) : &a->layers[l + 1];
            const eng_layer_w *nw = &ch->w.layers[l + 1];
            next = (norm_site){nla->ln1, nla->ln1_mean, nla->ln1_rstd, nw->ln1_w, nw->ln1_b};
            to = &next;
        } else if (fuse && ch->last) {
            next = (norm_site){a->lnf, a->lnf_mean, a->lnf_rstd, ch->w.lnf_w, ch->w.lnf_b};
            to = &next;
        }
        if (layer_forward(m, a, ch->layer_begin + l, &ch->w.layers[l], la, a->res[l], a->res[l + 1], ln_done, to))
            return -1;
        ln_done = to != NULL;
    }
    if (!ch->last) return 0;

    const void *ln = ln_done ? ln_full(m, a->lnf)
                             : ln_gathered(m, a->lnf, a->lnf_mean, a->lnf_rstd, a->res[nl], ch->w.lnf_w, ch->w.lnf_b);
    if (!ln) return -1;
    if (!targets && m->logits_pos >= 0 && m->dec_pos < 0) { /* one position of each sample (eng_set_logits_position) */
        size_t ab = m->act_bytes;
        for (int b = 0; b < m->B; b++) {
            size_t row = (size_t)b * m->T + (size_t)m->logits_pos;
            op_matmul(m, (char *)a->logits + row * m->V * ab, NULL, (const char *)ln + row * C * ab, ch->w.head, NULL, 1,
                      C, m->V);
        }
        return 0;
    }
    op_matmul(m, a->logits, NULL, ln, ch->w.head, NULL, N, C, m->V);
    if (!targets) return 0; /* the logits alone */
    if (loss_forward(m, a, dloss)) return -1;
    return loss_sum ? eng_loss_sum(m, a, loss_sum) : 0;
}

int eng_loss_sum(eng_model *m, const eng_acts *a, double *loss_sum)
{
    int N = m->B * m->T;
    float *host = malloc(sizeof(float) * (size_t)N);
    if (!host) return -1;
    m->k->to_host(host, a->losses, sizeof(float) * (size_t)N);
    *loss_sum = eng_losses_sum(m, host, 1, NULL);
    free(host);
    return 0;
}

void eng_losses_to_host_later(eng_model *m, const eng_acts *a, float *host)
{
    m->k->to_host_later(host, a->losses, sizeof(float) * (size_t)m->B * m->T);
}

double eng_losses_sum(const eng_model *m, const float *host, int nmicro, const float *scale)
{
    size_t N = (size_t)m->B * m->T;
    double sum = 0.0;
    for (int k = 0; k < nmicro; k++) {
        double s = 0.0;
        for (size_t i = 0; i < N; i++) s += host[k * N + i];
        sum += s * (scale ? scale[k] : 1.0f);
    }
    return sum;
}

/* ---- backward ---- */

/* The weight gradients a backend computes beside the calls after their
 * matmul_backward (kernels.h) are complete from here on, and their inputs free:
 * before anything but the next matmul_backward reads a weight gradient (the
 * data-parallel hook, the optimizer after the pass) or overwrites a buffer
 * such a GEMM may still read (a recomputed group's activations). */
static void wgrad_join(const eng_model *m)
{
    if (m->k->wgrad_join) m->k->wgrad_join();
}

/* d(norm output) [N, C] into ws_dln from the gradient of q, k, v (in
 * ws_dqkv, attention's layout): the rotary embedding turned back (and the
 * query and key heads' norms), then the input gradients of c_attn, or of
 * q_proj, k_proj and v_proj summed. */
static void qkv_backward(eng_model *m, const eng_layer_w *w, const eng_layer_w *g, const eng_layer_acts *la,
                         const void *ln)
{
    int N = m->B * m->T, C = m->C, Cl = m->NH * m->HD, KV = m->NG * m->HD;
    size_t NC = (size_t)N * C;
    if (m->rope) op_rope(m, m->ws_dqkv, 1);
    if (!m->llama) {
        op_matmul_bwd(m, m->ws_dln, g->qkv_w, g->qkv_b, m->ws_dqkv, ln, w->qkv_w, N, C, Cl + 2 * KV);
        return;
    }
    if (m->bf16) m->k->qkv_unpack_bf16(m->ws_q, m->ws_k, m->ws_v, m->ws_dqkv, N, m->NH, m->NG, m->HD);
    else m->k->qkv_unpack(m->ws_q, m->ws_k, m->ws_v, m->ws_dqkv, N, m->NH, m->NG, m->HD);
    const void *dq = m->ws_q, *dk = m->ws_k;
    if (m->qk_norm) { /* ws_dtmp and then ws_q are free until their turn below */
        op_head_norm_bwd(m, m->ws_dtmp, g->qn_w, m->ws_q, la->qpre, w->qn_w, la->q_rstd, N * m->NH);
        dq = m->ws_dtmp;
    }
    op_matmul_bwd(m, m->ws_dln, g->q_w, g->q_b, dq, ln, w->q_w, N, C, Cl);
    if (m->qk_norm) {
        op_head_norm_bwd(m, m->ws_q, g->kn_w, m->ws_k, la->kpre, w->kn_w, la->k_rstd, N * m->NG);
        dk = m->ws_q;
    }
    op_matmul_bwd(m, m->ws_dtmp, g->k_w, g->k_b, dk, ln, w->k_w, N, C, KV);
    op_add(m, m->ws_dln, m->ws_dtmp, NC);
    op_matmul_bwd(m, m->ws_dtmp, g->v_w, g->v_b, m->ws_v, ln, w->v_w, N, C, KV);
    op_add(m, m->ws_dln, m->ws_dtmp, NC);
}

/* The row-parallel projections' bias gradients (attention output, MLP down)
 * are the column sums of d(residual) where neither hidden dropout nor sequence
 * parallelism stands between (their GEMMs then read a masked copy, or rows
 * gathered from the other ranks): the LayerNorm backward that writes that
 * gradient sums it in the same pass (k_ops layernorm_backward's dsum) and the
 * GEMM's backward leaves it. db: that bias's gradient (NULL: the layer has
 * none); returns where the norm sums it, or NULL. */
static float *bias_by_norm(const eng_model *m, void *db)
{
    return db && !m->llama && !m->sp && !hidden_dropout_on(m) ? (float *)db : NULL;
}

/* d(norm output) [N, C] into ws_dln from d(MLP output) `dfull` [N, C];
 * bias_done: the down projection's bias gradient was taken by the norm above (bias_by_norm) */
static void mlp_backward(eng_model *m, const eng_layer_w *w, const eng_layer_w *g, const eng_layer_acts *la,
                         const void *dfull, const void *ln, int bias_done)
{
    int N = m->B * m->T, C = m->C, F = m->F;
    void *dproj_b = bias_done ? NULL : g->fcproj_b;
    if (m->cfg.squared_relu) {
        op_matmul_bwd(m, m->ws_dfc, g->fcproj_w, dproj_b, dfull, la->fcg, w->fcproj_w, N, F, C);
        if (m->bf16) m->k->relu2_backward_bf16(m->ws_dfc, la->fch, m->ws_dfc, (size_t)N * F);
        else m->k->relu2_backward(m->ws_dfc, la->fch, m->ws_dfc, (size_t)N * F);
        op_matmul_bwd(m, m->ws_dln, g->fc_w, g->fc_b, m->ws_dfc, ln, w->fc_w, N, C, F);
        return;
    }
    if (!m->cfg.swiglu) {
        op_matmul_bwd_gelu(m, m->ws_dfc, g->fcproj_w, dproj_b, dfull, la->fcg, w->fcproj_w, la->fch, N, F, C);
        op_matmul_bwd(m, m->ws_dln, g->fc_w, g->fc_b, m->ws_dfc, ln, w->fc_w, N, C, F);
        return;
    }
    op_matmul_bwd(m, m->ws_dfc, g->fcproj_w, dproj_b, dfull, la->fcg, w->fcproj_w, N, F, C);
    if (m->bf16) m->k->swiglu_backward_bf16(m->ws_dgate, m->ws_dup, m->ws_dfc, la->fch, la->fcu, (size_t)N * F);
    else m->k->swiglu_backward(m->ws_dgate, m->ws_dup, m->ws_dfc, la->fch, la->fcu, (size_t)N * F);
    op_matmul_bwd(m, m->ws_dln, g->gate_w, g->gate_b, m->ws_dgate, ln, w->gate_w, N, C, F);
    op_matmul_bwd(m, m->ws_dtmp, g->fc_w, g->fc_b, m->ws_dup, ln, w->fc_w, N, C, F);
    op_add(m, m->ws_dln, m->ws_dtmp, (size_t)N * C);
}

/* On entry m->ws_dres holds d(layer output); on exit d(layer input).
 * mlp_bias_done: the MLP down projection's bias gradient was summed by the
 * norm above; below_bias: where the first norm's backward sums d(layer input)
 * for the layer below (bias_by_norm), or NULL. */
static int layer_backward(eng_model *m, const eng_acts *a, int layer, const eng_layer_w *w, const eng_layer_w *g,
                          const eng_layer_acts *la, const void *x, int mlp_bias_done, float *below_bias)
{
    int N = m->B * m->T, C = m->C, Cl = m->NH * m->HD;
    void *dres = m->ws_dres;
    k_dropout dd;
    /* d(ln input) of a column-parallel GEMM: all-reduced in place, or scattered */
    void *dln = m->sp ? m->ws_dlnl : m->ws_dln;
    const void *dfull;

    /* MLP: out = res2 + dropout(down(act(up(ln2(res2))))) */
    if (!(dfull = gather_rows(m, drop_grad(m, dres, hidden_drop(m, a, layer, DROP_MLP_OUT, &dd))))) return -1;
    const void *ln = ln_full(m, la->ln2);
    if (!ln) return -1;
    mlp_backward(m, w, g, la, dfull, ln, mlp_bias_done);
    /* column-parallel input: each rank holds part of d(ln2) -> all-reduce */
    if (scatter_sum(m, m->ws_dln, dln)) return -1;
    float *proj_db = bias_by_norm(m, g->proj_b);
    op_norm_bwd(m, dres, g->ln2_w, g->ln2_b, proj_db, dln, la->res2, w->ln2_w, la->ln2_mean, la->ln2_rstd);

    /* attention: res2 = x + dropout(proj(attn(qkv(ln1(x))))) */
    k_dropout dda;
    const k_dropout *ad = attn_drop(m, a, layer, &dda);
    const float *att = la->att;
    if (!m->bf16 && !att) {
        /* fp32 selective recompute: rebuild the probabilities; the output goes
         * to scratch that attention_backward overwrites next */
        m->k->attention_forward(m->ws_dqkv, m->ws_att, la->qkv, a->doc, m->B, m->T, m->NH, m->NG, m->HD, ad);
        att = m->ws_att;
    }
    if (!(dfull = gather_rows(m, drop_grad(m, dres, hidden_drop(m, a, layer, DROP_ATTN_OUT, &dd))))) return -1;
    op_matmul_bwd(m, m->ws_datty, g->proj_w, proj_db ? NULL : g->proj_b, dfull, la->atty, w->proj_w, N, Cl, C);
    op_attention_bwd(m, a, m->ws_dqkv, m->ws_datty, la, att, ad);
    if (!(ln = ln_full(m, la->ln1))) return -1;
    qkv_backward(m, w, g, la, ln);
    if (scatter_sum(m, m->ws_dln, dln)) return -1;
    op_norm_bwd(m, dres, g->ln1_w, g->ln1_b, below_bias, dln, x, w->ln1_w, la->ln1_mean, la->ln1_rstd);
    return 0;
}

int eng_backward(eng_model *m, eng_acts *a, const void *dout, float dloss)
{
    const k_ops *k = m->k;
    const eng_chunk *ch = &m->chunks[a->chunk];
    int N = m->B * m->T, C = m->C;
    size_t RCb = eng_boundary_bytes(m);
    int nl = ch->layer_end - ch->layer_begin;
    k_dropout dd;
    if (ch->last) {
        void *dln = m->sp ? m->ws_dlnl : m->ws_dln;
        /* dlogits overwrite the logits: they are not needed after this (the
         * fused classifier already wrote them in forward) */
        if (a->dlogits_ready)
            ;
        else if (m->bf16)
            k->xent_backward_bf16(a->logits, a->logits, a->rowmax, a->sumexp, a->targets, dloss, N, m->V,
                                  m->vocab_offset);
        else
            k->xent_backward(a->logits, a->logits, a->rowmax, a->sumexp, a->targets, dloss, N, m->V,
                             m->vocab_offset);
        const void *ln = ln_full(m, a->lnf);
        if (!ln) return -1;
        op_matmul_bwd(m, m->ws_dln, ch->g.head, NULL, a->logits, ln, ch->w.head, N, C, m->V);
        if (scatter_sum(m, m->ws_dln, dln)) return -1;
        k->zero(m->ws_dres, RCb);
        float *top_bias = nl ? bias_by_norm(m, ch->g.layers[nl - 1].fcproj_b) : NULL; /* the top MLP's */
        op_norm_bwd(m, m->ws_dres, ch->g.lnf_w, ch->g.lnf_b, top_bias, dln, a->res[nl], ch->w.lnf_w, a->lnf_mean,
                    a->lnf_rstd);
    } else {
        k->copy(m->ws_dres, dout, RCb);
    }
    for (int l = nl - 1; l >= 0; l--) {
        const eng_layer_acts *la = &a->layers[l];
        int layer = ch->layer_begin + l;
        if (rebuilt(m, l)) {
            /* full recompute: at the last layer of its group (one layer, or G under uniform), rebuild the
             * group from its saved input (same TP collectives and dropout masks, in the same order on every
             * TP rank), then take the layers' backward one by one */
            int G = m->recompute_group, g0 = l / G * G;
            if (l + 1 == (g0 + G < nl ? g0 + G : nl)) {
                wgrad_join(m);
                for (int j = g0; j <= l; j++)
                    if (layer_forward(m, a, ch->layer_begin + j, &ch->w.layers[j], rebuilt_acts(m, j), a->res[j],
                                      a->res[j + 1], 0, NULL))
                        return -1;
            }
            la = rebuilt_acts(m, l);
        }
        /* the down projection's bias: summed by the norm above where there is one in this chunk */
        int mlp_bias_done = (l + 1 < nl || ch->last) && bias_by_norm(m, ch->g.layers[l].fcproj_b);
        float *below_bias = l ? bias_by_norm(m, ch->g.layers[l - 1].fcproj_b) : NULL;
        if (layer_backward(m, a, layer, &ch->w.layers[l], &ch->g.layers[l], la, a->res[l], mlp_bias_done,
                           below_bias))
            return -1;
        if (m->layer_done) {
            wgrad_join(m);
            m->layer_done(m->layer_done_ctx, a->chunk, layer);
        }
    }
    wgrad_join(m); /* the embeddings' backward adds into the tied classifier's gradient; the optimizer follows */
    if (ch->first) {
        op_dropout(m, m->ws_dres, hidden_drop(m, a, -1, 0, &dd));
        const void *d = gather_rows(m, m->ws_dres);
        if (!d) return -1;
        op_embedding_bwd(m, ch, a, d);
    } else {
        k->copy(a->dinput, m->ws_dres, RCb);
    }
    return 0;
}
