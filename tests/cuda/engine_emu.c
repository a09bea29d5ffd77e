/* engine_emu: the whole model on the CUDA backend's table, run on the CPU.
 *
 * cuda_emu_kernels checks each CUDA entry alone against k_cpu(); this runs the
 * engine itself (model.c, optimizer.c) on the table k_cuda() fills, with every
 * kernel and the cuBLAS/cuBLASLt calls emulated (emu/emu_cuda.h,
 * emu/cublas_mock.h), beside the same model on k_cpu(): the entries as the
 * engine calls them, in its order, with its aliasing (gradients written over
 * the logits, in-place backward passes), its workspaces and its accumulation
 * over micro-batches (the bias gradients' column sums, the
 * embedding's), the table itself (an entry filled with the wrong kernel), and
 * the AdamW segments over the whole buffer. Each run: 3 steps of 2
 * micro-batches, forward, backward and AdamW; the losses of every micro-batch
 * and the final weights and gradients are compared.
 *
 * Bounds: fp32 differs from the CPU only in summation order (the mock's GEMMs
 * sum in double), so 1e-5 relative on each loss and on the first step's
 * gradients (norm of the difference over the norm). bf16 rounds where each
 * backend's kernels round (flash attention keeps P in bf16 for P V, the CPU's
 * reference rounds elsewhere): 1e-2 on the losses, as the GPU run's
 * trajectory check, and 3e-2 on the first step's gradients (seen: up to
 * 6.8e-3). The weights' change over two AdamW steps is compared too, loosely
 * (bf16 2e-1, seen up to 6.7e-2; fp32 1e-3, seen up to 6.4e-5): AdamW moves
 * every weight by about the rate whatever its gradient, so a gradient near
 * zero that differs in sign moves its weight the other way. A kernel fed the
 * wrong weights, a missed accumulation or a wrong entry moves them by far
 * more (an entry dropped from the sum of two micro-batches halves a
 * gradient).
 *
 * What it cannot see is the emulation's: streams and events (every call here
 * completes at once), the GPU memory model, cuBLASLt's real epilogue support
 * and speed. Those are the GPU run's (bench/gpu/run.sh). */
#include "check.h"
#include "model.h"
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const k_ops *k_cuda_emu(void); /* tests/cuda/CMakeLists.txt: ops_table.cu, emulated */
void k_cuda_attention_calls(long *fused, long *flash);

enum { STEPS = 3, MICRO = 2, B = 2, MAXT = 80 };

typedef struct variant {
    const char *name;
    int bf16, C, NH, NG, T, V, L;
    int untied, llama, qk_norm, nemotron, documents;
    double dropout;
} variant;

typedef struct run_result {
    double loss[STEPS * MICRO];
    float *init, *grads0, *params; /* the weights drawn, the first step's gradients, the last weights */
    size_t n;
    const char *table;
} run_result;

static int32_t TOK[MICRO][B * MAXT], TGT[MICRO][B * MAXT];

static void configure(atoll_config *c, const variant *v)
{
    cfg_defaults(c);
    c->num_layers = v->L, c->hidden_size = v->C, c->num_attention_heads = v->NH, c->seq_length = v->T;
    c->max_position_embeddings = v->T;
    c->vocab_size = v->V, c->micro_batch_size = B, c->bf16 = v->bf16;
    c->untie_embeddings_and_output_weights = v->untied;
    c->hidden_dropout = c->attention_dropout = v->dropout;
    if (v->llama) {
        snprintf(c->normalization, sizeof c->normalization, "RMSNorm");
        c->swiglu = 1, c->disable_bias_linear = 1, c->qk_layernorm = v->qk_norm;
        snprintf(c->position_embedding_type, sizeof c->position_embedding_type, "rope");
    }
    if (v->NG != v->NH) c->group_query_attention = 1, c->num_query_groups = v->NG;
    if (v->nemotron) {
        c->squared_relu = 1, c->apply_layernorm_1p = 1, c->rotary_percent = 0.5;
        snprintf(c->position_embedding_type, sizeof c->position_embedding_type, "rope");
    }
    c->reset_attention_mask = v->documents;
}

static run_result run(const k_ops *k, const variant *v)
{
    run_result r = { .table = k->name };
    atoll_config c;
    configure(&c, v);
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    eng_model *m = eng_model_create(&c, &lay, k, err, sizeof err);
    CHECK(m != NULL, "%s on %s: %s", v->name, k->name, err);
    if (!m) return r;
    if (v->documents) m->doc_eod = 0; /* token 0 ends a document */
    eng_init_params(m, 7);
    eng_params_updated(m); /* the bf16 copy, the 1 + w norms */
    r.n = m->num_floats;
    r.init = malloc(r.n * sizeof(float));
    r.grads0 = malloc(r.n * sizeof(float));
    r.params = malloc(r.n * sizeof(float));
    k->to_host(r.init, m->params, r.n * sizeof(float));
    eng_acts *a[MICRO];
    for (int i = 0; i < MICRO; i++) {
        a[i] = eng_acts_create(m, 0);
        a[i]->sample0 = (int64_t)i * B;
    }
    eng_optim *o = eng_optim_create(m);
    eng_rates rates = { 3e-3, 3e-3, 0.1 };
    float dloss = 1.0f / (MICRO * B * v->T);
    for (int s = 0; s < STEPS; s++) {
        eng_set_step(m, 1234, s + 1, 1);
        eng_zero_grads(m);
        for (int i = 0; i < MICRO; i++) {
            int ok = eng_forward(m, a[i], TOK[i], NULL, TGT[i], dloss, NULL) == 0 &&
                     eng_backward(m, a[i], NULL, dloss) == 0 &&
                     eng_loss_sum(m, a[i], &r.loss[s * MICRO + i]) == 0;
            CHECK(ok, "%s on %s: step %d micro-batch %d", v->name, k->name, s, i);
        }
        if (s == 0) k->to_host(r.grads0, m->grads, r.n * sizeof(float));
        if (s + 1 < STEPS) eng_optim_step(o, m, &rates, 1.0f, s + 1);
    }
    k->to_host(r.params, m->params, r.n * sizeof(float));
    eng_optim_free(o);
    for (int i = 0; i < MICRO; i++) eng_acts_free(m, a[i]);
    eng_model_free(m);
    return r;
}

/* |a - b| / |b - base| over the whole buffer (base NULL: 0), and whether all of a is finite */
static double rel_l2(const float *a, const float *b, const float *base, size_t n, int *finite)
{
    double d = 0, s = 0;
    *finite = 1;
    for (size_t i = 0; i < n; i++) {
        double o = base ? base[i] : 0;
        if (!isfinite(a[i])) *finite = 0;
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += ((double)b[i] - o) * ((double)b[i] - o);
    }
    return sqrt(d / (s > 0 ? s : 1));
}

static void compare(const variant *v)
{
    long fused0, flash0, fused1, flash1;
    k_cuda_attention_calls(&fused0, &flash0);
    run_result cu = run(k_cuda_emu(), v), ref = run(k_cpu(), v);
    k_cuda_attention_calls(&fused1, &flash1);
    if (!cu.n || !ref.n) goto out;
    CHECK(!strcmp(cu.table, "cuda"), "%s: the emulated table is named %s", v->name, cu.table);
    /* bf16 attention goes through the table's selector to the flash kernels, once per micro-batch,
     * layer and direction */
    long want = v->bf16 ? 2L * STEPS * MICRO * v->L : 0;
    CHECK(flash1 - flash0 == want && fused1 == fused0, "%s: %ld flash attention calls, want %ld (fused %ld)",
          v->name, flash1 - flash0, want, fused1 - fused0);
    double tl = v->bf16 ? 1e-2 : 1e-5, tg = v->bf16 ? 3e-2 : 1e-5, tu = v->bf16 ? 2e-1 : 1e-3;
    double worst = 0;
    for (int i = 0; i < STEPS * MICRO; i++) {
        double d = fabs(cu.loss[i] - ref.loss[i]) / fabs(ref.loss[i]);
        if (d > worst) worst = d;
        CHECK(isfinite(cu.loss[i]) && d <= tl, "%s: loss of step %d micro-batch %d: cuda %.8g, cpu %.8g (%.2e, limit %g)",
              v->name, i / MICRO, i % MICRO, cu.loss[i], ref.loss[i], d, tl);
    }
    CHECK(ref.loss[STEPS * MICRO - 1] < ref.loss[0] && cu.loss[STEPS * MICRO - 1] < cu.loss[0],
          "%s: the loss falls (cpu %.4f -> %.4f, cuda %.4f -> %.4f)", v->name, ref.loss[0], ref.loss[STEPS * MICRO - 1],
          cu.loss[0], cu.loss[STEPS * MICRO - 1]);
    CHECK(cu.n == ref.n, "%s: %zu floats of weights on cuda, %zu on cpu", v->name, cu.n, ref.n);
    if (cu.n == ref.n) {
        int fi, fg, fp;
        double di = rel_l2(cu.init, ref.init, NULL, ref.n, &fi);
        double dg = rel_l2(cu.grads0, ref.grads0, NULL, ref.n, &fg);
        double dp = rel_l2(cu.params, ref.params, ref.init, ref.n, &fp);
        CHECK(fi && di == 0, "%s: the weights drawn differ by %.2e", v->name, di);
        CHECK(fg && dg <= tg, "%s: the first step's gradients differ by %.2e (limit %g)", v->name, dg, tg);
        CHECK(fp && dp <= tu, "%s: the weights' change over %d steps differs by %.2e (limit %g)", v->name, STEPS - 1,
              dp, tu);
        printf("%-28s losses %.2e  gradients %.2e  updates %.2e  (loss %.4f -> %.4f)\n", v->name, worst, dg, dp,
               ref.loss[0] / (B * v->T), ref.loss[STEPS * MICRO - 1] / (B * v->T));
    }
out:
    free(cu.init), free(cu.grads0), free(cu.params), free(ref.init), free(ref.grads0), free(ref.params);
}

/* The optimizer step with the clip scale computed on the device
 * (eng_optim_step_norm_clipped: no host wait between the norm and AdamW)
 * against the host's path (eng_grad_sumsq, eng_clip_scale, eng_optim_step),
 * from the same gradients: the same sum and the same weights to the bit,
 * with clipping that scales (clip below the norm) and none (cuda_emu_kernels
 * checks a clip above the norm, on the kernels alone).
 * The CPU table has no sumsq_begin: there the call declines and runs nothing. */
static void test_norm_clipped(const variant *v)
{
    atoll_config c;
    configure(&c, v);
    char err[256];
    eng_layout lay = eng_layout_single(&c);
    const double clips[2] = { 1e-3, 0.0 };
    for (int ci = 0; ci < 2; ci++) {
        eng_model *m[2];
        eng_optim *o[2];
        eng_acts *a[2];
        double sum[2] = { -1, -1 };
        float *w[2];
        size_t n = 0;
        for (int j = 0; j < 2; j++) {
            m[j] = eng_model_create(&c, &lay, k_cuda_emu(), err, sizeof err);
            CHECK(m[j] != NULL, "%s: %s", v->name, err);
            if (!m[j]) return;
            eng_init_params(m[j], 11);
            eng_params_updated(m[j]);
            a[j] = eng_acts_create(m[j], 0);
            o[j] = eng_optim_create(m[j]);
            eng_rates rates = { 3e-3, 3e-3, 0.1 };
            float dloss = 1.0f / (B * v->T);
            for (int s = 0; s < 2; s++) { /* two steps: the second's moments carry the first's scale */
                eng_set_step(m[j], 1234, s + 1, 1);
                eng_zero_grads(m[j]);
                CHECK(eng_forward(m[j], a[j], TOK[0], NULL, TGT[0], dloss, NULL) == 0 &&
                          eng_backward(m[j], a[j], NULL, dloss) == 0,
                      "%s: forward and backward", v->name);
                if (j == 0) {
                    sum[0] = eng_grad_sumsq(m[0], NULL);
                    eng_optim_step(o[0], m[0], &rates, eng_clip_scale(sqrt(sum[0]), clips[ci]), s + 1);
                } else {
                    CHECK(eng_optim_step_norm_clipped(o[1], m[1], &rates, clips[ci], s + 1, &sum[1]) == 1,
                          "%s: the step with the clip scale on the device declined on the cuda table", v->name);
                }
            }
            n = m[j]->num_floats;
            w[j] = malloc(n * sizeof(float));
            m[j]->k->to_host(w[j], m[j]->params, n * sizeof(float));
        }
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(&w[0][i], &w[1][i], sizeof(float)) != 0;
        CHECK(memcmp(&sum[0], &sum[1], sizeof(double)) == 0, "%s, clip %g: the sum of squares on the device %.17g, "
              "the host's %.17g", v->name, clips[ci], sum[1], sum[0]);
        CHECK(diff == 0, "%s, clip %g (norm %.4g): %zu of %zu weights differ from the host's clipping", v->name,
              clips[ci], sqrt(sum[0]), diff, n);
        for (int j = 0; j < 2; j++) {
            free(w[j]);
            eng_optim_free(o[j]);
            eng_acts_free(m[j], a[j]);
            eng_model_free(m[j]);
        }
    }
    /* the CPU table: declines, and the weights stay as they were */
    eng_model *mc = eng_model_create(&c, &lay, k_cpu(), err, sizeof err);
    CHECK(mc != NULL, "%s on cpu: %s", v->name, err);
    if (!mc) return;
    eng_init_params(mc, 11);
    eng_params_updated(mc);
    eng_optim *oc = eng_optim_create(mc);
    float first = mc->params[0];
    double sq = -1;
    eng_rates rates = { 3e-3, 3e-3, 0.1 };
    CHECK(eng_optim_step_norm_clipped(oc, mc, &rates, 1.0, 1, &sq) == 0 && sq == -1 && mc->params[0] == first,
          "%s: on the cpu table the step with the clip scale on the device should decline and run nothing", v->name);
    eng_optim_free(oc);
    eng_model_free(mc);
}

int main(int argc, char **argv)
{
    (void)argc;
    for (int i = 0; i < MICRO; i++)
        for (int t = 0; t < B * MAXT; t++) {
            TOK[i][t] = (t * 7 + 3 + 11 * i) % 96;
            TGT[i][t] = (t * 5 + 1 + 13 * i) % 96;
        }
    /* every hidden size a multiple of 8 (the 16-byte paths), T past one 64-row tile in bf16 */
    static const variant V[] = {
        { "gpt fp32", 0, 64, 4, 4, 40, 96, 2, 0, 0, 0, 0, 0, 0.0 },
        { "gpt fp32 untied, dropout", 0, 64, 4, 4, 24, 96, 2, 1, 0, 0, 0, 0, 0.1 },
        { "gpt bf16", 1, 128, 2, 2, 80, 96, 2, 0, 0, 0, 0, 0, 0.0 },
        { "gpt bf16 untied, documents", 1, 128, 2, 2, 80, 96, 2, 1, 0, 0, 0, 1, 0.0 },
        { "llama bf16 gqa, qk-norm", 1, 128, 2, 1, 72, 96, 2, 1, 1, 1, 0, 0, 0.1 },
        { "llama fp32 gqa", 0, 64, 4, 2, 24, 96, 2, 1, 1, 0, 0, 0, 0.0 },
        { "nemotron bf16", 1, 128, 2, 2, 64, 96, 2, 1, 0, 0, 1, 0, 0.0 },
    };
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) compare(&V[i]);
    test_norm_clipped(&V[0]); /* fp32 */
    test_norm_clipped(&V[2]); /* bf16: the master weights and their bf16 copy */
    return check_summary(argv[0]);
}
