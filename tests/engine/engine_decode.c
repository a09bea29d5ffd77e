/* The two ways atoll generate runs a model, against the whole forward pass.
 *
 * A pass over the first n positions (eng_set_seq_length) gives the logits the
 * whole --seq-length pass gives at those positions: attention is causal, so no
 * position reads a later one. Checked in fp32 and bf16, for GPT (learned
 * positions, LayerNorm, tied head) and the LLaMA family (rotary, grouped-query
 * attention, per-head RMSNorm, SwiGLU), at n = 1, a length inside the sequence
 * and the whole; back at the whole length the logits are the first pass's to
 * the bit.
 *
 * A decode step (eng_decode) after a pass over a prompt gives the logits of
 * one more position from the keys and values the layers kept: every position
 * after the prompt, one step each, against the whole pass's row, for the same
 * families and for packed documents (--reset-attention-mask, with
 * --reset-position-ids for GPT's learned positions), whose tokens attend and
 * count positions from their own document's start.
 *
 * Refused: a length out of range, activations created while shortened, a
 * model that trains, a decode step with more than one sample or out of range. */
#include "check.h"
#include "model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { T = 24, B = 2, V = 64 };

static void config_b(atoll_config *c, int llama, int bf16, int batch)
{
    cfg_defaults(c);
    c->num_layers = 2, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = T;
    c->vocab_size = V, c->micro_batch_size = batch, c->bf16 = bf16;
    if (llama) {
        char err[200];
        CHECK(cfg_set(c, "normalization", "RMSNorm", err, sizeof err) == CFG_OK &&
                  cfg_set(c, "position-embedding-type", "rope", err, sizeof err) == CFG_OK &&
                  cfg_set(c, "swiglu", NULL, err, sizeof err) == CFG_OK &&
                  cfg_set(c, "group-query-attention", NULL, err, sizeof err) == CFG_OK &&
                  cfg_set(c, "num-query-groups", "2", err, sizeof err) == CFG_OK &&
                  cfg_set(c, "qk-layernorm", NULL, err, sizeof err) == CFG_OK,
              "LLaMA flags: %s", err);
    }
}

static void config(atoll_config *c, int llama, int bf16) { config_b(c, llama, bf16, B); }

/* rows [0, n) of each sample of the [B*n, V] logits against those of the [B*T, V] ones */
static double max_diff(const float *part, int n, const float *whole)
{
    double d = 0.0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            for (int v = 0; v < V; v++) {
                double x = fabs((double)part[((size_t)b * n + t) * V + v] - whole[((size_t)b * T + t) * V + v]);
                if (!(x <= d)) d = x; /* NaN wins */
            }
    return d;
}

/* every logit NaN (fp32 or bf16), so a row a pass leaves alone reads NaN */
static void poison_logits(eng_model *m, eng_acts *a)
{
    size_t n = (size_t)m->B * m->cfg.seq_length * m->V;
    void *buf = malloc(n * m->act_bytes);
    CHECK(buf != NULL, "poison buffer");
    if (!buf) return;
    for (size_t i = 0; i < n; i++) {
        if (m->bf16) ((uint16_t *)buf)[i] = 0x7fc0;
        else ((float *)buf)[i] = NAN;
    }
    m->k->to_device(a->logits, buf, n * m->act_bytes);
    free(buf);
}

static void check_family(int llama, int bf16)
{
    const char *name = llama ? (bf16 ? "LLaMA bf16" : "LLaMA fp32") : (bf16 ? "GPT bf16" : "GPT fp32");
    atoll_config c;
    config(&c, llama, bf16);
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    lay.forward_only = 1;
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    CHECK(m != NULL, "%s: model: %s", name, err);
    if (!m) return;
    eng_init_params(m, 11);
    eng_params_updated(m);
    eng_set_step(m, 11, 1, 0);
    eng_acts *a = eng_acts_create(m, 0);
    int32_t tok[B * T], tgt[B * T] = { 0 }, part_tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 5) % V;
    float *whole = malloc(sizeof(float) * B * T * V), *part = malloc(sizeof(float) * B * T * V);
    CHECK(a && whole && part, "%s: activations", name);
    if (!a || !whole || !part) goto out;
    CHECK(eng_forward(m, a, tok, NULL, tgt, 0.0f, NULL) == 0, "%s: whole forward", name);
    eng_logits_to_host(m, a, 0, B * T, whole);
    /* bf16 rounds the activations, and a GEMM over fewer rows may sum in another order */
    double tol = bf16 ? 2e-2 : 1e-5;
    int lens[] = { 1, 7, T };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int n = lens[i];
        for (int b = 0; b < B; b++) memcpy(part_tok + b * n, tok + b * T, sizeof(int32_t) * n);
        CHECK(eng_set_seq_length(m, n) == 0, "%s: set length %d", name, n);
        CHECK(eng_forward(m, a, part_tok, NULL, tgt, 0.0f, NULL) == 0, "%s: forward over %d", name, n);
        eng_logits_to_host(m, a, 0, B * n, part);
        double d = max_diff(part, n, whole);
        CHECK(d <= tol, "%s: the first %d positions' logits differ from the whole pass's by %g (tolerance %g)", name,
              n, d, tol);
        if (n == T) CHECK(d == 0.0, "%s: back at the whole length the logits differ by %g", name, d);
    }
    /* one position's logits: that row of each sample computed, the others left as they were */
    {
        int n = 7, t = 4;
        for (int b = 0; b < B; b++) memcpy(part_tok + b * n, tok + b * T, sizeof(int32_t) * n);
        CHECK(eng_set_seq_length(m, n) == 0 && eng_set_logits_position(m, t) == 0, "%s: position %d", name, t);
        poison_logits(m, a);
        CHECK(eng_forward(m, a, part_tok, NULL, NULL, 0.0f, NULL) == 0, "%s: forward for position %d", name, t);
        eng_logits_to_host(m, a, 0, B * n, part);
        double d = 0.0;
        int untouched = 1;
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++) {
                double x = fabs((double)part[((size_t)b * n + t) * V + v] - whole[((size_t)b * T + t) * V + v]);
                if (!(x <= d)) d = x;
                untouched &= isnan(part[((size_t)b * n + t - 1) * V + v]) && isnan(part[((size_t)b * n + n - 1) * V + v]);
            }
        CHECK(d <= tol, "%s: position %d's logits alone differ from the whole pass's by %g (tolerance %g)", name, t, d,
              tol);
        CHECK(untouched, "%s: logits of other positions were computed", name);
        CHECK(eng_set_logits_position(m, n) == 0 && eng_forward(m, a, part_tok, NULL, NULL, 0.0f, NULL) == -1,
              "%s: a pass of %d positions refuses logits at position %d", name, n, n);
        CHECK(eng_set_logits_position(m, T) == -1 && eng_set_logits_position(m, -2) == -1 && m->logits_pos == n,
              "%s: positions %d and -2 refused, the position kept", name, T);
        CHECK(eng_set_logits_position(m, -1) == 0 && eng_set_seq_length(m, T) == 0, "%s: every position again", name);
    }
    CHECK(eng_set_seq_length(m, 0) == -1 && eng_set_seq_length(m, T + 1) == -1 && m->T == T,
          "%s: lengths 0 and T+1 refused, the length kept", name);
    CHECK(eng_set_seq_length(m, 5) == 0 && eng_acts_create(m, 0) == NULL,
          "%s: activations are not created at a shortened length", name);
    eng_set_seq_length(m, T);
out:
    free(whole);
    free(part);
    eng_acts_free(m, a);
    eng_model_free(m);
}

static void check_training_refused(void)
{
    atoll_config c;
    config(&c, 0, 0);
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    CHECK(m != NULL, "training model: %s", err);
    if (!m) return;
    CHECK(eng_set_seq_length(m, 4) == -1 && m->T == T, "a model with gradients keeps its length");
    CHECK(eng_set_logits_position(m, 2) == -1 && m->logits_pos == -1, "a model with gradients computes every row");
    eng_model_free(m);
}

/* One sample: the whole pass, then a prompt of P positions and a decode step
 * for each later one, every step's logits against the whole pass's row. With
 * docs, token EOD at positions 6 and 13 closes documents. */
enum { P = 5, EOD = 3 };

static void check_decode(int llama, int bf16, int docs)
{
    char name[64];
    snprintf(name, sizeof name, "decode %s %s%s", llama ? "LLaMA" : "GPT", bf16 ? "bf16" : "fp32",
             docs ? " documents" : "");
    atoll_config c;
    config_b(&c, llama, bf16, 1);
    char err[256];
    if (docs) {
        CHECK(cfg_set(&c, "reset-attention-mask", NULL, err, sizeof err) == CFG_OK &&
                  (llama || cfg_set(&c, "reset-position-ids", NULL, err, sizeof err) == CFG_OK),
              "%s: flags: %s", name, err);
    }
    eng_layout lay = eng_layout_single(&c);
    lay.forward_only = 1;
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    CHECK(m != NULL, "%s: model: %s", name, err);
    if (!m) return;
    CHECK(eng_can_decode(m), "%s: the CPU backend decodes", name);
    eng_init_params(m, 13);
    eng_params_updated(m);
    eng_set_step(m, 13, 1, 0);
    m->doc_eod = EOD;
    eng_acts *a = eng_acts_create(m, 0);
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = 4 + (i * 29 + 7) % (V - 4);
    if (docs) tok[6] = tok[13] = EOD;
    float *whole = malloc(sizeof(float) * T * V), *row = malloc(sizeof(float) * T * V);
    CHECK(a && whole && row, "%s: activations", name);
    if (!a || !whole || !row) goto out;
    CHECK(eng_forward(m, a, tok, NULL, NULL, 0.0f, NULL) == 0, "%s: whole forward", name);
    eng_logits_to_host(m, a, 0, T, whole);
    /* the prompt's pass as generate runs it: its last position's logits only */
    CHECK(eng_set_seq_length(m, P) == 0 && eng_set_logits_position(m, P - 1) == 0 &&
              eng_forward(m, a, tok, NULL, NULL, 0.0f, NULL) == 0, "%s: prompt", name);
    double worst = 0.0, tol = bf16 ? 8e-3 : 1e-5; /* bf16: two roundings of a logit near 1 */
    int doc0 = 0;
    for (int p = 0; p < T; p++) {
        if (p >= P) {
            CHECK(eng_decode(m, a, tok[p], p, doc0) == 0 && m->T == 1, "%s: decode at %d", name, p);
            eng_logits_to_host(m, a, 0, 1, row);
            for (int v = 0; v < V; v++) {
                double x = fabs((double)row[v] - whole[(size_t)p * V + v]);
                if (!(x <= worst)) worst = x;
            }
        }
        if (tok[p] == EOD) doc0 = p + 1;
    }
    CHECK(worst <= tol, "%s: decoded logits differ from the whole pass's by %g (tolerance %g)", name, worst, tol);
    CHECK(eng_decode(m, a, tok[0], T, 0) == -1 && eng_decode(m, a, tok[0], 3, 4) == -1 &&
              eng_decode(m, a, tok[0], -1, 0) == -1,
          "%s: a position past the sequence, a document after its token, a negative position: refused", name);
    if (docs) { /* attending across the document boundary would change the logits */
        CHECK(eng_decode(m, a, tok[T - 1], T - 1, 0) == 0, "%s: decode ignoring the documents", name);
        eng_logits_to_host(m, a, 0, 1, row);
        double d = 0.0;
        for (int v = 0; v < V; v++) d = fmax(d, fabs((double)row[v] - whole[(size_t)(T - 1) * V + v]));
        CHECK(d > 2 * tol, "%s: the whole context instead of the document changed the logits by only %g", name, d);
    }
out:
    free(whole);
    free(row);
    eng_acts_free(m, a);
    eng_model_free(m);
}

static void check_decode_refused(void)
{
    atoll_config c;
    config(&c, 0, 0); /* two samples */
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    lay.forward_only = 1;
    eng_model *m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    CHECK(m != NULL, "two-sample model: %s", err);
    if (!m) return;
    eng_acts *a = eng_acts_create(m, 0);
    CHECK(!eng_can_decode(m) && eng_decode(m, a, 1, 1, 0) == -1 && m->T == T, "two samples: no decode step");
    eng_acts_free(m, a);
    eng_model_free(m);
    config_b(&c, 0, 0, 1);
    lay = eng_layout_single(&c);
    m = eng_model_create(&c, &lay, k_cpu(), err, sizeof err); /* with gradients */
    CHECK(m != NULL && !eng_can_decode(m), "a model that trains does not decode");
    eng_model_free(m);
    k_ops none = *k_cpu();
    none.attention_decode = NULL;
    lay.forward_only = 1;
    m = eng_model_create(&c, &lay, &none, err, sizeof err);
    CHECK(m != NULL && !eng_can_decode(m), "a backend without attention_decode does not decode");
    eng_model_free(m);
}

int main(void)
{
    for (int llama = 0; llama < 2; llama++)
        for (int bf16 = 0; bf16 < 2; bf16++) check_family(llama, bf16);
    check_training_refused();
    for (int llama = 0; llama < 2; llama++)
        for (int bf16 = 0; bf16 < 2; bf16++) check_decode(llama, bf16, 0);
    check_decode(0, 0, 1);
    check_decode(1, 0, 1);
    check_decode(1, 1, 1);
    check_decode_refused();
    return check_summary("engine_decode");
}
