/* Activation recomputation computes the same function with less memory:
 * for none, selective (attention probabilities rebuilt in backward) and full
 * (whole layers rebuilt from their inputs), one micro-batch's loss and every
 * gradient are bitwise equal on the CPU backend (same kernels, same inputs),
 * and the saved activations shrink: selective by exactly the probabilities
 * [B, heads, T, T] of each layer, full to little more than the layer inputs. */
#include "check.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

enum { L = 3, T = 16, B = 2 };

static int32_t TOK[B * T], TGT[B * T];

typedef struct result {
    double loss;
    float *grads;
    size_t nfloats, act_bytes;
} result;

static result run(cfg_recompute rc)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = L; c.hidden_size = 32; c.num_attention_heads = 4; c.seq_length = T;
    c.vocab_size = 64; c.micro_batch_size = B;
    c.recompute_granularity = rc;
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

int main(int argc, char **argv)
{
    (void)argc;
    for (int i = 0; i < B * T; i++) {
        TOK[i] = (i * 7 + 3) % 64;
        TGT[i] = (i * 5 + 1) % 64;
    }
    result none = run(RECOMPUTE_NONE), sel = run(RECOMPUTE_SELECTIVE), full = run(RECOMPUTE_FULL);
    const result *rs[2] = { &sel, &full };
    const char *names[2] = { "selective", "full" };
    for (int k = 0; k < 2; k++) {
        CHECK(rs[k]->loss == none.loss, "%s: loss %.17g vs %.17g", names[k], rs[k]->loss, none.loss);
        CHECK(rs[k]->grads && none.grads && rs[k]->nfloats == none.nfloats &&
              !memcmp(rs[k]->grads, none.grads, none.nfloats * sizeof(float)),
              "%s: gradients differ from keeping every activation", names[k]);
    }
    size_t att = (size_t)B * 4 * T * T * sizeof(float); /* per layer, already a multiple of 64 bytes */
    CHECK(none.act_bytes - sel.act_bytes == L * att, "selective saves %zu bytes, want %zu",
          none.act_bytes - sel.act_bytes, (size_t)L * att);
    CHECK(full.act_bytes * 3 < sel.act_bytes, "full keeps %zu bytes, selective %zu", full.act_bytes, sel.act_bytes);
    CHECK(none.loss / (B * T) > 3.5 && none.loss / (B * T) < 4.8, "mean loss %.4f near ln(64)", none.loss / (B * T));
    free(none.grads);
    free(sel.grads);
    free(full.grads);
    return check_summary(argv[0]);
}
