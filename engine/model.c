#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int id_sum(void *ctx, float *buf, size_t n) { (void)ctx, (void)buf, (void)n; return 0; }
const eng_tp_comm eng_tp_identity = { NULL, id_sum, id_sum, NULL, NULL };

static void errf(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

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
    return p;
}

static void tb_layer(table_builder *tb, const atoll_config *c, int l, int chunk)
{
    int64_t h = c->hidden_size, f = cfg_ffn(c);
    float std = 0.02f, out_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    char nm[ENG_NAME];
#define NAME(suffix) (snprintf(nm, sizeof nm, "h.%d." suffix, l), nm)
    tb_add(tb, NAME("ln_1.weight"), 1, h, 0, -1, 0, 1, 0, chunk);
    tb_add(tb, NAME("ln_1.bias"), 1, h, 0, -1, 0, 0, 0, chunk);
    tb_add(tb, NAME("attn.c_attn.weight"), 2, 3 * h, h, 0, std, 0, 1, chunk);
    tb_add(tb, NAME("attn.c_attn.bias"), 1, 3 * h, 0, 0, 0, 0, 0, chunk);
    tb_add(tb, NAME("attn.c_proj.weight"), 2, h, h, 1, out_std, 0, 1, chunk);
    tb_add(tb, NAME("attn.c_proj.bias"), 1, h, 0, -1, 0, 0, 0, chunk);
    tb_add(tb, NAME("ln_2.weight"), 1, h, 0, -1, 0, 1, 0, chunk);
    tb_add(tb, NAME("ln_2.bias"), 1, h, 0, -1, 0, 0, 0, chunk);
    tb_add(tb, NAME("mlp.c_fc.weight"), 2, f, h, 0, std, 0, 1, chunk);
    tb_add(tb, NAME("mlp.c_fc.bias"), 1, f, 0, 0, 0, 0, 0, chunk);
    tb_add(tb, NAME("mlp.c_proj.weight"), 2, h, f, 1, out_std, 0, 1, chunk);
    tb_add(tb, NAME("mlp.c_proj.bias"), 1, h, 0, -1, 0, 0, 0, chunk);
#undef NAME
}

static int check_shapes(const atoll_config *c, const eng_layout *lay, char *err, size_t errlen)
{
    if (cfg_validate_model(c, err, errlen)) return -1;
    int tp = lay->tp_size;
    if (tp < 1 || lay->tp_rank < 0 || lay->tp_rank >= tp) {
        errf(err, errlen, "tensor-parallel rank %d of %d is out of range", lay->tp_rank, tp);
        return -1;
    }
    if (c->num_attention_heads % tp || cfg_ffn(c) % tp || c->vocab_size % tp) {
        errf(err, errlen, "--num-attention-heads %d, FFN size %d and --vocab-size %d must all be "
             "divisible by --tensor-model-parallel-size %d", c->num_attention_heads, cfg_ffn(c),
             c->vocab_size, tp);
        return -1;
    }
    if (lay->nchunks < 1 || lay->nchunks > ENG_MAX_CHUNKS) {
        errf(err, errlen, "a rank holds 1 to %d model chunks, not %d", ENG_MAX_CHUNKS, lay->nchunks);
        return -1;
    }
    for (int i = 0; i < lay->nchunks; i++)
        if (lay->layer_begin[i] < 0 || lay->layer_end[i] > c->num_layers ||
            lay->layer_begin[i] >= lay->layer_end[i]) {
            errf(err, errlen, "model chunk %d has layers [%d, %d), outside [0, %d)", i,
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
    int tied = !c->untie_embeddings_and_output_weights;
    for (int ch = 0; ch < lay->nchunks; ch++) {
        int first = lay->layer_begin[ch] == 0, last = lay->layer_end[ch] == c->num_layers;
        if (first) {
            tb_add(tb, "wte.weight", 2, V, h, 0, 0.02f, 0, 1, ch);
            tb_add(tb, "wpe.weight", 2, P, h, -1, 0.02f, 0, 1, ch);
        }
        for (int l = lay->layer_begin[ch]; l < lay->layer_end[ch]; l++) tb_layer(tb, c, l, ch);
        if (last) {
            tb_add(tb, "ln_f.weight", 1, h, 0, -1, 0, 1, 0, ch);
            tb_add(tb, "ln_f.bias", 1, h, 0, -1, 0, 0, 0, ch);
            if (!tied)
                tb_add(tb, "lm_head.weight", 2, V, h, 0, 0.02f, 0, 1, ch);
            else if (!has_first_chunk(lay))
                tb_add(tb, "wte.weight", 2, V, h, 0, 0.02f, 0, 1, ch)->tied_copy = 1;
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

static float *view(const eng_model *m, float *base, const char *name)
{
    const eng_param *p = eng_find_param(m, name);
    return p ? base + p->offset : NULL;
}

static void set_views(eng_model *m, eng_chunk *ch, eng_views *v, float *base)
{
    if (ch->first) {
        v->wte = view(m, base, "wte.weight");
        v->wpe = view(m, base, "wpe.weight");
    }
    int nl = ch->layer_end - ch->layer_begin;
    for (int i = 0; i < nl; i++) {
        char nm[ENG_NAME];
        int l = ch->layer_begin + i;
        eng_layer_w *w = &v->layers[i];
#define V_(field, suffix) (snprintf(nm, sizeof nm, "h.%d." suffix, l), w->field = view(m, base, nm))
        V_(ln1_w, "ln_1.weight"); V_(ln1_b, "ln_1.bias");
        V_(qkv_w, "attn.c_attn.weight"); V_(qkv_b, "attn.c_attn.bias");
        V_(proj_w, "attn.c_proj.weight"); V_(proj_b, "attn.c_proj.bias");
        V_(ln2_w, "ln_2.weight"); V_(ln2_b, "ln_2.bias");
        V_(fc_w, "mlp.c_fc.weight"); V_(fc_b, "mlp.c_fc.bias");
        V_(fcproj_w, "mlp.c_proj.weight"); V_(fcproj_b, "mlp.c_proj.bias");
#undef V_
    }
    if (ch->last) {
        v->lnf_w = view(m, base, "ln_f.weight");
        v->lnf_b = view(m, base, "ln_f.bias");
        v->head = m->cfg.untie_embeddings_and_output_weights ? view(m, base, "lm_head.weight")
                                                              : view(m, base, "wte.weight");
    }
}

typedef struct carver {
    float *base;
    size_t used;
} carver;

static float *carve(carver *cv, size_t n)
{
    float *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (n + 15) / 16 * 16;
    return p;
}

/* One layer's saved activations; `keep_att` = 0 under selective recompute. */
static void layer_acts_carve(const eng_model *m, carver *cv, eng_layer_acts *la, int keep_att)
{
    size_t N = (size_t)m->B * m->T, R = (size_t)m->R, C = (size_t)m->C;
    size_t Cl = (size_t)m->NH * m->HD, F = (size_t)m->F;
    size_t LN = m->sp ? R * C : N * C; /* SP keeps this rank's rows; backward re-gathers */
    la->ln1 = carve(cv, LN);
    la->ln1_mean = carve(cv, R);
    la->ln1_rstd = carve(cv, R);
    la->qkv = carve(cv, N * 3 * Cl);
    la->atty = carve(cv, N * Cl);
    la->att = keep_att ? carve(cv, (size_t)m->B * m->NH * m->T * m->T) : NULL;
    la->res2 = carve(cv, R * C);
    la->ln2 = carve(cv, LN);
    la->ln2_mean = carve(cv, R);
    la->ln2_rstd = carve(cv, R);
    la->fch = carve(cv, N * F);
    la->fcg = carve(cv, N * F);
}

eng_model *eng_model_create(const atoll_config *cfg, const eng_layout *lay, const k_ops *k,
                            char *err, size_t errlen)
{
    if (check_shapes(cfg, lay, err, errlen)) return NULL;
    eng_model *m = calloc(1, sizeof *m);
    if (!m) { errf(err, errlen, "out of memory"); return NULL; }
    m->cfg = *cfg;
    m->k = k;
    m->tp = eng_tp_identity;
    m->tp_rank = lay->tp_rank;
    m->tp_size = lay->tp_size;
    m->C = cfg->hidden_size;
    m->NH = cfg->num_attention_heads / lay->tp_size;
    m->HD = cfg->hidden_size / cfg->num_attention_heads;
    m->F = cfg_ffn(cfg) / lay->tp_size;
    m->V = cfg->vocab_size / lay->tp_size;
    m->vocab_offset = m->V * lay->tp_rank;
    m->T = cfg->seq_length;
    m->P = cfg_max_pos(cfg);
    m->B = cfg->micro_batch_size;
    m->sp = cfg->sequence_parallel && lay->tp_size > 1;
    m->R = m->B * m->T / (m->sp ? lay->tp_size : 1);
    m->recompute = cfg->recompute_granularity;
    if (m->sp && (m->B * m->T) % lay->tp_size) {
        errf(err, errlen, "--sequence-parallel: micro-batch tokens %d not divisible by tp %d", m->B * m->T,
             lay->tp_size);
        free(m);
        return NULL;
    }

    table_builder tb = { 0 };
    tb.tp_rank = lay->tp_rank;
    tb.tp_size = lay->tp_size;
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

    size_t N = (size_t)m->B * m->T, C = (size_t)m->C, Cl = (size_t)m->NH * m->HD;
    size_t att = (size_t)m->B * m->NH * m->T * m->T;
    size_t sizes[10] = { N * C, N * C, N * 3 * Cl, N * Cl, N * (size_t)m->F, att,
                         m->sp ? N * C : 0, m->sp ? N * C : 0, m->recompute == RECOMPUTE_SELECTIVE ? att : 0,
                         m->sp ? N * C : 0 };
    size_t ws = 0;
    for (int i = 0; i < 10; i++) ws += (sizes[i] + 15) / 16 * 16;
    m->params = k->alloc(m->num_floats * sizeof(float));
    m->grads = k->alloc(m->num_floats * sizeof(float));
    m->ws = k->alloc(ws * sizeof(float));
    if (!m->params || !m->grads || !m->ws) goto oom;
    float **slots[10] = { &m->ws_dres, &m->ws_dln, &m->ws_dqkv, &m->ws_datty, &m->ws_dfc, &m->ws_datt,
                          &m->ws_full, &m->ws_dlnl, &m->ws_att, &m->ws_gath };
    float *p = m->ws;
    for (int i = 0; i < 10; i++) {
        *slots[i] = p;
        p += (sizes[i] + 15) / 16 * 16;
    }
    for (int i = 0; i < m->nchunks; i++) {
        set_views(m, &m->chunks[i], &m->chunks[i].w, m->params);
        set_views(m, &m->chunks[i], &m->chunks[i].g, m->grads);
    }
    if (m->recompute == RECOMPUTE_FULL) {
        carver cv = { NULL, 0 };
        if (!(m->ws_layer = calloc(1, sizeof *m->ws_layer))) goto oom;
        layer_acts_carve(m, &cv, m->ws_layer, 1);
        if (!(m->ws_layer_mem = k->alloc(cv.used * sizeof(float)))) goto oom;
        cv = (carver){ m->ws_layer_mem, 0 };
        layer_acts_carve(m, &cv, m->ws_layer, 1);
    }
    return m;
oom:
    errf(err, errlen, "out of memory allocating the model (%zu parameters on this rank)", m->num_floats);
    eng_model_free(m);
    return NULL;
}

void eng_model_free(eng_model *m)
{
    if (!m) return;
    if (m->params) m->k->free(m->params);
    if (m->grads) m->k->free(m->grads);
    if (m->ws) m->k->free(m->ws);
    if (m->ws_layer_mem) m->k->free(m->ws_layer_mem);
    free(m->ws_layer);
    for (int i = 0; i < m->nchunks; i++) {
        free(m->chunks[i].w.layers);
        free(m->chunks[i].g.layers);
    }
    free(m->table);
    free(m);
}

void eng_zero_grads(eng_model *m) { m->k->zero(m->grads, m->num_floats * sizeof(float)); }

/* ---- activations ---- */


/* Lays the acts out twice: once to size the allocation, once to set pointers. */
static size_t acts_layout(eng_model *m, eng_acts *a, float *base)
{
    const eng_chunk *ch = &m->chunks[a->chunk];
    size_t N = (size_t)m->B * m->T, R = (size_t)m->R, C = (size_t)m->C;
    int nl = ch->layer_end - ch->layer_begin;
    carver cv = { base, 0 };
    a->tokens = (int32_t *)carve(&cv, N);
    a->targets = (int32_t *)carve(&cv, N);
    for (int l = 0; l <= nl; l++) a->res[l] = carve(&cv, R * C);
    if (m->recompute != RECOMPUTE_FULL)
        for (int l = 0; l < nl; l++)
            layer_acts_carve(m, &cv, &a->layers[l], m->recompute != RECOMPUTE_SELECTIVE);
    if (ch->last) {
        a->lnf = carve(&cv, m->sp ? R * C : N * C);
        a->lnf_mean = carve(&cv, R);
        a->lnf_rstd = carve(&cv, R);
        a->logits = carve(&cv, N * (size_t)m->V);
        a->rowmax = carve(&cv, N);
        a->sumexp = carve(&cv, 2 * N); /* sumexp and tlogit side by side: one all-reduce */
        a->tlogit = a->sumexp ? a->sumexp + N : NULL;
        a->losses = carve(&cv, N);
    }
    if (!ch->first) a->dinput = carve(&cv, R * C);
    return cv.used;
}

eng_acts *eng_acts_create(eng_model *m, int chunk)
{
    if (chunk < 0 || chunk >= m->nchunks) return NULL;
    const eng_chunk *ch = &m->chunks[chunk];
    int nl = ch->layer_end - ch->layer_begin;
    eng_acts *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->chunk = chunk;
    a->res = calloc((size_t)nl + 1, sizeof(float *));
    a->layers = calloc((size_t)nl, sizeof(eng_layer_acts));
    if (!a->res || !a->layers) goto fail;
    size_t n = acts_layout(m, a, NULL);
    a->bytes = n * sizeof(float);
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

float *eng_output(eng_model *m, eng_acts *a)
{
    const eng_chunk *ch = &m->chunks[a->chunk];
    return a->res[ch->layer_end - ch->layer_begin];
}

size_t eng_boundary_floats(const eng_model *m) { return (size_t)m->R * m->C; }

int eng_param_sp_partial(const eng_model *m, const eng_param *p)
{
    return m->sp && (strstr(p->name, ".ln_1.") || strstr(p->name, ".ln_2.") || !strncmp(p->name, "ln_f.", 5));
}

/* ---- sequence-parallel conjugates ----
 * Without SP these are Megatron's f/g pair on a replicated [N, C]: identity one
 * way, all-reduce the other. With SP, rows are split: gather_rows makes the full
 * [N, C] input of a column-parallel GEMM, scatter_sum turns a row-parallel GEMM's
 * partial [N, C] into this rank's summed [R, C] rows. */
static const float *gather_rows(eng_model *m, const float *local)
{
    if (!m->sp) return local;
    size_t n = (size_t)m->R * m->C;
    if (m->tp.allgather(m->tp.ctx, local, m->ws_full, n)) return NULL;
    return m->ws_full;
}

/* partial [N, C] -> out [R, C]; without SP out must equal partial (all-reduce). */
static int scatter_sum(eng_model *m, float *partial, float *out)
{
    if (!m->sp) return m->tp.allreduce_sum(m->tp.ctx, partial, (size_t)m->B * m->T * m->C);
    return m->tp.reduce_scatter(m->tp.ctx, partial, out, (size_t)m->R * m->C);
}

/* The [N, C] input of a column-parallel GEMM from a LayerNorm output `ln`:
 * itself without SP; with SP, ln holds this rank's [R, C] rows, gathered into
 * ws_gath (again in backward, as Megatron does, rather than keeping N rows). */
static const float *ln_full(eng_model *m, const float *ln)
{
    if (!m->sp) return ln;
    return m->tp.allgather(m->tp.ctx, ln, m->ws_gath, (size_t)m->R * m->C) ? NULL : m->ws_gath;
}

static const float *ln_gathered(eng_model *m, float *ln, float *mean, float *rstd, const float *x,
                                const float *w, const float *b)
{
    m->k->layernorm_forward(ln, mean, rstd, x, w, b, m->R, m->C);
    return ln_full(m, ln);
}

/* ---- forward ---- */

static int layer_forward(eng_model *m, const eng_layer_w *w, eng_layer_acts *la, const float *x,
                         float *out)
{
    const k_ops *k = m->k;
    int B = m->B, T = m->T, N = B * T, C = m->C, Cl = m->NH * m->HD, F = m->F;
    size_t RC = (size_t)m->R * C;
    /* Row-parallel layers add their bias once, on TP rank 0, before the all-reduce. */
    int bias_here = m->tp_rank == 0;
    /* a row-parallel GEMM's partial [N, C]: in place without SP, else scattered */
    float *part1 = m->sp ? m->ws_full : la->res2, *part2 = m->sp ? m->ws_full : out;
    /* selective recompute: the probabilities are rebuilt in backward */
    float *att = la->att ? la->att : m->ws_att;

    const float *ln = ln_gathered(m, la->ln1, la->ln1_mean, la->ln1_rstd, x, w->ln1_w, w->ln1_b);
    if (!ln) return -1;
    /* column-parallel c_attn: its input is replicated, nothing to reduce forward */
    k->matmul_forward(la->qkv, ln, w->qkv_w, w->qkv_b, N, C, 3 * Cl);
    k->attention_forward(la->atty, att, la->qkv, B, T, m->NH, m->HD);
    /* row-parallel c_proj: partial sums over this rank's heads -> all-reduce */
    k->matmul_forward(part1, la->atty, w->proj_w, bias_here ? w->proj_b : NULL, N, Cl, C);
    if (scatter_sum(m, part1, la->res2)) return -1;
    k->residual_forward(la->res2, la->res2, x, RC);

    if (!(ln = ln_gathered(m, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, w->ln2_w, w->ln2_b))) return -1;
    k->matmul_forward(la->fch, ln, w->fc_w, w->fc_b, N, C, F);
    k->gelu_forward(la->fcg, la->fch, (size_t)N * F);
    k->matmul_forward(part2, la->fcg, w->fcproj_w, bias_here ? w->fcproj_b : NULL, N, F, C);
    if (scatter_sum(m, part2, out)) return -1;
    k->residual_forward(out, out, la->res2, RC);
    return 0;
}

/* Vocab-parallel cross-entropy: local partials, then all-reduces of max and of
 * (sum-exp, target logit). Leaves the per-token losses in a->losses. */
static int loss_forward(eng_model *m, eng_acts *a)
{
    const k_ops *k = m->k;
    int N = m->B * m->T;
    k->xent_max(a->rowmax, a->logits, N, m->V);
    if (m->tp.allreduce_max(m->tp.ctx, a->rowmax, (size_t)N)) return -1;
    k->xent_sumexp_target(a->sumexp, a->tlogit, a->logits, a->rowmax, a->targets, N, m->V,
                          m->vocab_offset);
    if (m->tp.allreduce_sum(m->tp.ctx, a->sumexp, 2 * (size_t)N)) return -1;
    k->xent_loss(a->losses, a->rowmax, a->sumexp, a->tlogit, a->targets, N);
    return 0;
}

int eng_forward(eng_model *m, eng_acts *a, const int32_t *tokens, const float *input,
                const int32_t *targets, double *loss_sum)
{
    const k_ops *k = m->k;
    const eng_chunk *ch = &m->chunks[a->chunk];
    int B = m->B, T = m->T, N = B * T, C = m->C;
    size_t NC = (size_t)N * C;
    if (ch->first) {
        k->to_device(a->tokens, tokens, sizeof(int32_t) * (size_t)N);
        if (m->sp) {
            /* wpe added once (TP rank 0) before the sum, like a row-parallel bias */
            k->embedding_forward(m->ws_full, a->tokens, ch->w.wte, N, C, m->vocab_offset, m->V);
            if (m->tp_rank == 0) k->position_forward(m->ws_full, ch->w.wpe, B, T, C);
            if (scatter_sum(m, m->ws_full, a->res[0])) return -1;
        } else {
            k->embedding_forward(a->res[0], a->tokens, ch->w.wte, N, C, m->vocab_offset, m->V);
            if (m->tp.allreduce_sum(m->tp.ctx, a->res[0], NC)) return -1;
            k->position_forward(a->res[0], ch->w.wpe, B, T, C);
        }
    } else {
        k->copy(a->res[0], input, eng_boundary_floats(m) * sizeof(float));
    }
    int nl = ch->layer_end - ch->layer_begin;
    for (int l = 0; l < nl; l++) {
        eng_layer_acts *la = m->recompute == RECOMPUTE_FULL ? m->ws_layer : &a->layers[l];
        if (layer_forward(m, &ch->w.layers[l], la, a->res[l], a->res[l + 1])) return -1;
    }
    if (!ch->last) return 0;

    k->to_device(a->targets, targets, sizeof(int32_t) * (size_t)N);
    const float *ln = ln_gathered(m, a->lnf, a->lnf_mean, a->lnf_rstd, a->res[nl], ch->w.lnf_w, ch->w.lnf_b);
    if (!ln) return -1;
    k->matmul_forward(a->logits, ln, ch->w.head, NULL, N, C, m->V);
    if (loss_forward(m, a)) return -1;
    if (loss_sum) {
        float *host = malloc(sizeof(float) * (size_t)N);
        if (!host) return -1;
        k->to_host(host, a->losses, sizeof(float) * (size_t)N);
        double s = 0.0;
        for (int i = 0; i < N; i++) s += host[i];
        free(host);
        *loss_sum = s;
    }
    return 0;
}

/* ---- backward ---- */

/* On entry m->ws_dres holds d(layer output); on exit d(layer input). */
static int layer_backward(eng_model *m, const eng_layer_w *w, const eng_layer_w *g,
                          const eng_layer_acts *la, const float *x)
{
    const k_ops *k = m->k;
    int B = m->B, T = m->T, N = B * T, C = m->C, Cl = m->NH * m->HD, F = m->F, R = m->R;
    float *dres = m->ws_dres;
    /* d(ln input) of a column-parallel GEMM: all-reduced in place, or scattered */
    float *dln = m->sp ? m->ws_dlnl : m->ws_dln;
    const float *dfull;

    /* MLP: out = res2 + c_proj(gelu(c_fc(ln2(res2)))) */
    if (!(dfull = gather_rows(m, dres))) return -1;
    k->matmul_backward(m->ws_dfc, g->fcproj_w, g->fcproj_b, dfull, la->fcg, w->fcproj_w, N, F, C);
    k->gelu_backward(m->ws_dfc, la->fch, m->ws_dfc, (size_t)N * F);
    const float *ln = ln_full(m, la->ln2);
    if (!ln) return -1;
    k->matmul_backward(m->ws_dln, g->fc_w, g->fc_b, m->ws_dfc, ln, w->fc_w, N, C, F);
    /* column-parallel input: each rank holds part of d(ln2) -> all-reduce */
    if (scatter_sum(m, m->ws_dln, dln)) return -1;
    k->layernorm_backward(dres, g->ln2_w, g->ln2_b, dln, la->res2, w->ln2_w,
                          la->ln2_mean, la->ln2_rstd, R, C);

    /* attention: res2 = x + c_proj(attn(c_attn(ln1(x)))) */
    const float *att = la->att;
    if (!att) {
        /* selective recompute: rebuild the probabilities; the output goes to
         * scratch that attention_backward overwrites next */
        k->attention_forward(m->ws_dqkv, m->ws_att, la->qkv, B, T, m->NH, m->HD);
        att = m->ws_att;
    }
    if (!(dfull = gather_rows(m, dres))) return -1;
    k->matmul_backward(m->ws_datty, g->proj_w, g->proj_b, dfull, la->atty, w->proj_w, N, Cl, C);
    k->attention_backward(m->ws_dqkv, m->ws_datt, m->ws_datty, la->qkv, att, B, T, m->NH, m->HD);
    if (!(ln = ln_full(m, la->ln1))) return -1;
    k->matmul_backward(m->ws_dln, g->qkv_w, g->qkv_b, m->ws_dqkv, ln, w->qkv_w, N, C, 3 * Cl);
    if (scatter_sum(m, m->ws_dln, dln)) return -1;
    k->layernorm_backward(dres, g->ln1_w, g->ln1_b, dln, x, w->ln1_w,
                          la->ln1_mean, la->ln1_rstd, R, C);
    return 0;
}

int eng_backward(eng_model *m, eng_acts *a, const float *dout, float dloss)
{
    const k_ops *k = m->k;
    const eng_chunk *ch = &m->chunks[a->chunk];
    int B = m->B, T = m->T, N = B * T, C = m->C;
    size_t RC = eng_boundary_floats(m);
    int nl = ch->layer_end - ch->layer_begin;
    if (ch->last) {
        float *dln = m->sp ? m->ws_dlnl : m->ws_dln;
        /* dlogits overwrite the logits: they are not needed after this */
        k->xent_backward(a->logits, a->logits, a->rowmax, a->sumexp, a->targets, dloss, N, m->V,
                         m->vocab_offset);
        const float *ln = ln_full(m, a->lnf);
        if (!ln) return -1;
        k->matmul_backward(m->ws_dln, ch->g.head, NULL, a->logits, ln, ch->w.head, N, C, m->V);
        if (scatter_sum(m, m->ws_dln, dln)) return -1;
        k->zero(m->ws_dres, RC * sizeof(float));
        k->layernorm_backward(m->ws_dres, ch->g.lnf_w, ch->g.lnf_b, dln, a->res[nl],
                              ch->w.lnf_w, a->lnf_mean, a->lnf_rstd, m->R, C);
    } else {
        k->copy(m->ws_dres, dout, RC * sizeof(float));
    }
    for (int l = nl - 1; l >= 0; l--) {
        const eng_layer_acts *la = &a->layers[l];
        if (m->recompute == RECOMPUTE_FULL) {
            /* full recompute: rebuild the layer from its saved input (same TP
             * collectives, in the same order on every TP rank) */
            if (layer_forward(m, &ch->w.layers[l], m->ws_layer, a->res[l], a->res[l + 1])) return -1;
            la = m->ws_layer;
        }
        if (layer_backward(m, &ch->w.layers[l], &ch->g.layers[l], la, a->res[l])) return -1;
        if (m->layer_done) m->layer_done(m->layer_done_ctx, a->chunk, ch->layer_begin + l);
    }
    if (ch->first) {
        const float *d = gather_rows(m, m->ws_dres);
        if (!d) return -1;
        k->position_backward(ch->g.wpe, d, B, T, C);
        k->embedding_backward(ch->g.wte, d, a->tokens, N, C, m->vocab_offset, m->V);
    } else {
        k->copy(a->dinput, m->ws_dres, RC * sizeof(float));
    }
    return 0;
}
