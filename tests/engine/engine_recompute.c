/* The same function, computed another way, to the same bits on the CPU backend.
 *
 * Activation recomputation computes the same function with less memory:
 * for none, selective (attention probabilities rebuilt in backward) and full
 * (whole layers rebuilt from their inputs), one micro-batch's loss and every
 * gradient are bitwise equal on the CPU backend (same kernels, same inputs),
 * and the saved activations shrink: selective by exactly the probabilities
 * [B, heads, T, T] of each layer, full to little more than the layer inputs.
 * Full with --recompute-method block rebuilds only the first N layers and
 * keeps the others' activations: the same bits again, and each layer rebuilt
 * keeps exactly one layer's activations less. With --recompute-method uniform
 * --recompute-num-layers G (Megatron's groups: G layers rebuilt together from
 * the first one's input) the same bits once more, keeping the input of each
 * group only: of 3 layers, G 2 keeps one boundary less than G 1, G 3 two.
 *
 * The bf16 forward fuses each residual add into the norm that follows it
 * (ln_2 inside a layer, the next layer's ln_1, ln_f after the last layer):
 * LayerNorm for GPT models, RMSNorm for the LLaMA family. A table without
 * residual_layernorm_forward_bf16 / residual_rmsnorm_forward_bf16 runs the two
 * ops apart, and the two must train bit for bit alike. Three steps of forward,
 * backward and AdamW, so that from the second step on every norm has weights
 * of its own and a norm fed the wrong layer's weights would show; with each
 * recompute granularity (full rebuilds the layers in backward without the
 * cross-layer fusion; block 1 has a rebuilt layer fused into a kept one),
 * GPT tied and untied, and LLaMA (RMSNorm, SwiGLU,
 * rotary, grouped-query attention, hidden dropout). */
#include "check.h"
#include "model.h"
#include "optimizer.h"

#include <stdlib.h>
#include <string.h>

enum { L = 3, T = 16, B = 2 };

static int32_t TOK[B * T], TGT[B * T];

typedef struct result {
    double loss;
    float *grads;
    size_t nfloats, act_bytes;
} result;

/* block > 0: --recompute-method block --recompute-num-layers block; < 0: uniform -block */
static void set_recompute(atoll_config *c, cfg_recompute rc, int block)
{
    c->recompute_granularity = rc;
    if (block) {
        snprintf(c->recompute_method, sizeof c->recompute_method, "%s", block > 0 ? "block" : "uniform");
        c->recompute_num_layers = block > 0 ? block : -block;
    }
}

static result run(cfg_recompute rc, int block)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = L; c.hidden_size = 32; c.num_attention_heads = 4; c.seq_length = T;
    c.vocab_size = 64; c.micro_batch_size = B;
    set_recompute(&c, rc, block);
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    result r = { 0 };
    CHECK(m != NULL, "model (%s): %s", cfg_recompute_name(rc), err);
    if (!m) return r;
    eng_init_params(m, 5);
    eng_acts *a = eng_acts_create(m, 0);
    eng_zero_grads(m);
    CHECK(eng_forward(m, a, TOK, NULL, TGT, 0.0f, &r.loss) == 0 && eng_backward(m, a, NULL, 1.0f / (B * T)) == 0,
          "forward/backward (%s)", cfg_recompute_name(rc));
    r.act_bytes = a->bytes;
    r.nfloats = m->num_floats;
    r.grads = malloc(m->num_floats * sizeof(float));
    memcpy(r.grads, m->grads, m->num_floats * sizeof(float));
    eng_acts_free(m, a);
    eng_model_free(m);
    return r;
}

/* ---- the residual add fused into the norm after it (bf16), against the ops apart ---- */

enum { STEPS = 3 };

typedef struct fused_result {
    double loss[STEPS];
    float *params, *grads;
    size_t nfloats;
} fused_result;

static fused_result run_bf16(const k_ops *k, cfg_recompute rc, int block, int variant)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = L, c.hidden_size = 32, c.num_attention_heads = 4, c.seq_length = T;
    c.vocab_size = 64, c.micro_batch_size = B, c.bf16 = 1;
    set_recompute(&c, rc, block);
    c.untie_embeddings_and_output_weights = variant > 0;
    if (variant == 2) { /* the LLaMA family */
        snprintf(c.normalization, sizeof c.normalization, "RMSNorm");
        c.swiglu = 1, c.group_query_attention = 1, c.num_query_groups = 2, c.disable_bias_linear = 1;
        snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "rope");
        c.hidden_dropout = 0.1;
    }
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &lay, k, err, sizeof err);
    fused_result r = {0};
    CHECK(m != NULL, "model: %s", err);
    if (!m) return r;
    eng_init_params(m, 11);
    eng_params_updated(m); /* the bf16 copy of the weights drawn */
    eng_acts *a = eng_acts_create(m, 0);
    eng_optim *o = eng_optim_create(m);
    eng_rates rates = { 1e-2, 1e-2, m->cfg.weight_decay };
    for (int s = 0; s < STEPS; s++) {
        eng_zero_grads(m);
        CHECK(eng_forward(m, a, TOK, NULL, TGT, 0.0f, &r.loss[s]) == 0 &&
                  eng_backward(m, a, NULL, 1.0f / (B * T)) == 0,
              "forward/backward, step %d", s);
        if (s + 1 < STEPS) eng_optim_step(o, m, &rates, 1.0f, s + 1);
    }
    r.nfloats = m->num_floats;
    r.params = malloc(r.nfloats * sizeof(float));
    r.grads = malloc(r.nfloats * sizeof(float));
    memcpy(r.params, m->params, r.nfloats * sizeof(float));
    memcpy(r.grads, m->grads, r.nfloats * sizeof(float));
    eng_optim_free(o);
    eng_acts_free(m, a);
    eng_model_free(m);
    return r;
}

int main(int argc, char **argv)
{
    (void)argc;
    for (int i = 0; i < B * T; i++) {
        TOK[i] = (i * 7 + 3) % 64;
        TGT[i] = (i * 5 + 1) % 64;
    }
    result none = run(RECOMPUTE_NONE, 0), sel = run(RECOMPUTE_SELECTIVE, 0), full = run(RECOMPUTE_FULL, 0);
    result block1 = run(RECOMPUTE_FULL, 1), block2 = run(RECOMPUTE_FULL, 2);
    result uni2 = run(RECOMPUTE_FULL, -2), uni3 = run(RECOMPUTE_FULL, -3);
    const result *rs[6] = { &sel, &full, &block1, &block2, &uni2, &uni3 };
    const char *names[6] = { "selective",     "full",          "full, block 1",
                             "full, block 2", "full, uniform 2", "full, uniform 3" };
    for (int k = 0; k < 6; k++) {
        CHECK(rs[k]->loss == none.loss, "%s: loss %.17g vs %.17g", names[k], rs[k]->loss, none.loss);
        CHECK(rs[k]->grads && none.grads && rs[k]->nfloats == none.nfloats &&
              !memcmp(rs[k]->grads, none.grads, none.nfloats * sizeof(float)),
              "%s: gradients differ from keeping every activation", names[k]);
    }
    size_t att = (size_t)B * 4 * T * T * sizeof(float); /* per layer, already a multiple of 64 bytes */
    CHECK(none.act_bytes - sel.act_bytes == L * att, "selective saves %zu bytes, want %zu",
          none.act_bytes - sel.act_bytes, (size_t)L * att);
    CHECK(full.act_bytes * 3 < sel.act_bytes, "full keeps %zu bytes, selective %zu", full.act_bytes, sel.act_bytes);
    /* block N keeps the activations of L - N layers, as none keeps every layer's */
    size_t layer = (none.act_bytes - full.act_bytes) / L;
    CHECK(none.act_bytes - full.act_bytes == L * layer && block1.act_bytes == full.act_bytes + 2 * layer &&
              block2.act_bytes == full.act_bytes + layer,
          "block 1 keeps %zu bytes, block 2 %zu; full %zu, none %zu", block1.act_bytes, block2.act_bytes,
          full.act_bytes, none.act_bytes);
    /* uniform G keeps one [B*T, C] boundary per group of G layers (and the output) instead of one per layer */
    size_t boundary = (size_t)B * T * 32 * sizeof(float);
    CHECK(uni2.act_bytes == full.act_bytes - boundary && uni3.act_bytes == full.act_bytes - 2 * boundary,
          "uniform 2 keeps %zu bytes, uniform 3 %zu; full (uniform 1) %zu, a boundary %zu", uni2.act_bytes,
          uni3.act_bytes, full.act_bytes, boundary);
    CHECK(none.loss / (B * T) > 3.5 && none.loss / (B * T) < 4.8, "mean loss %.4f near ln(64)", none.loss / (B * T));
    free(none.grads);
    free(sel.grads);
    free(full.grads);
    free(block1.grads);
    free(block2.grads);
    free(uni2.grads);
    free(uni3.grads);

    cfg_recompute modes[5] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_FULL, RECOMPUTE_FULL};
    int blocks[5] = {0, 0, 0, 1, -2};
    k_ops apart = *k_cpu();
    apart.residual_layernorm_forward_bf16 = NULL;
    apart.residual_rmsnorm_forward_bf16 = NULL;
    const char *variants[3] = {"gpt", "gpt untied", "llama"};
    for (int v = 0; v < 3; v++) {
        fused_result base = {0};
        for (int i = 0; i < 5; i++) {
            const char *name = blocks[i] > 0 ? "full, block 1"
                             : blocks[i]     ? "full, uniform 2"
                                             : cfg_recompute_name(modes[i]);
            fused_result f = run_bf16(k_cpu(), modes[i], blocks[i], v), p = run_bf16(&apart, modes[i], blocks[i], v);
            if (!f.params || !p.params || (i && !base.params)) continue;
            for (int s = 0; s < STEPS; s++)
                CHECK(f.loss[s] == p.loss[s], "%s %s step %d: fused loss %.17g, apart %.17g", variants[v], name, s,
                      f.loss[s], p.loss[s]);
            CHECK(f.nfloats == p.nfloats && !memcmp(f.params, p.params, f.nfloats * sizeof(float)) &&
                      !memcmp(f.grads, p.grads, f.nfloats * sizeof(float)),
                  "%s %s: weights or gradients differ", variants[v], name);
            CHECK(f.loss[STEPS - 1] < f.loss[0], "%s %s: the loss falls (%.4f -> %.4f)", variants[v], name,
                  f.loss[0] / (B * T), f.loss[STEPS - 1] / (B * T));
            if (i == 0) {
                base = f;
            } else {
                /* and every recompute trains as keeping everything does */
                CHECK(!memcmp(f.loss, base.loss, sizeof f.loss) &&
                          !memcmp(f.params, base.params, f.nfloats * sizeof(float)),
                      "%s %s: trains otherwise than without recompute", variants[v], name);
                free(f.params), free(f.grads);
            }
            free(p.params), free(p.grads);
        }
        free(base.params), free(base.grads);
    }
    return check_summary(argv[0]);
}
