/* plan_mem: model-state and activation memory against the published figures of
 * MT-NLG 530B and "Reducing Activation Recomputation in Large Transformer Models". */
#include "check.h"
#include "config.h"
#include "plan.h"

#include <string.h>

/* MT-NLG 530B: 105 layers, hidden 20480, 128 heads, sequence 2048, GPT-2 vocabulary
 * padded to 51200, global batch 1920; trained with tp 8, pp 35 on 280 DGX A100. */
static void mtnlg(atoll_config *c)
{
    cfg_defaults(c);
    c->num_layers = 105;
    c->hidden_size = 20480;
    c->num_attention_heads = 128;
    c->seq_length = 2048;
    c->vocab_size = 51200;
    c->global_batch_size = 1920;
    c->micro_batch_size = 1;
}

static void test_mtnlg(void)
{
    atoll_config c;
    mtnlg(&c);
    double n = cfg_num_params(&c);
    CHECK_CLOSE(n, 530e9, 0.01);
    /* "training consumes 20 bytes of memory per parameter ... over 10 terabytes" */
    double b20 = plan_state_bytes_per_param(&PLAN_PRECISION_FP16_FP32GRAD, 0, 1);
    CHECK(b20 == 20, "MT-NLG mixed precision counts 20 bytes/param, got %g", b20);
    CHECK(n * b20 > 10e12, "aggregate state %.3g bytes should exceed 10 TB", n * b20);
    /* the same model under Megatron bf16 with fp32 main grads: 18 bytes */
    CHECK(plan_state_bytes_per_param(&PLAN_PRECISION_BF16, 0, 1) == 18, "bf16: 18 bytes/param");

    /* activations at layer boundaries with every block checkpointed (full
     * recompute): 16.9 TB for a batch of 1920, 8.8 GB for micro-batches of 1 */
    c.recompute_granularity = RECOMPUTE_FULL;
    c.micro_batch_size = 1920;
    CHECK_CLOSE(plan_act_bytes_per_layer(&c) * c.num_layers, 16.9e12, 0.01);
    c.micro_batch_size = 1;
    CHECK_CLOSE(plan_act_bytes_per_layer(&c) * c.num_layers, 8.8e9, 0.01);

    /* the published layout fits on 80 GB A100s: tp 8, pp 35, dp 8, full recompute */
    c.tensor_model_parallel_size = 8;
    c.pipeline_model_parallel_size = 35;
    c.sequence_parallel = 0;
    char err[256];
    CHECK(cfg_validate_layout(&c, 2240, 8, err, sizeof err) == 0, "MT-NLG layout: %s", err);
    plan_memory m;
    plan_memory_estimate(&c, 8, &PLAN_PRECISION_BF16, &m);
    CHECK(m.total_bytes < 80e9 * PLAN_MEM_USABLE && m.total_bytes > 20e9, "MT-NLG per GPU %.1f GB", m.total_bytes / 1e9);
    /* 530e9 / (8*35) params per GPU, plus the embedding on the first stage */
    CHECK(m.params_per_gpu > 530e9 / 280 && m.params_per_gpu < 530e9 / 280 * 1.15, "params/GPU %.3g", m.params_per_gpu);
    CHECK(m.inflight_layers == 35 * 3, "1F1B: stage 0 holds pp micro-batches of 3 layers: %g", m.inflight_layers);
    /* and not without recompute */
    c.recompute_granularity = RECOMPUTE_NONE;
    plan_memory_estimate(&c, 8, &PLAN_PRECISION_BF16, &m);
    CHECK(m.total_bytes > 80e9, "without recompute it does not fit: %.1f GB", m.total_bytes / 1e9);
}

/* The per-layer formulas, checked against the paper's own numbers and ordering. */
static void test_activation_formulas(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 96;
    c.hidden_size = 12288;
    c.num_attention_heads = 96;
    c.seq_length = 2048;
    c.micro_batch_size = 1;
    double s = 2048, h = 12288, a = 96, sbh = s * h;
    c.tensor_model_parallel_size = 1;
    double none1 = plan_act_bytes_per_layer(&c);
    CHECK_CLOSE(none1, sbh * (34 + 5 * a * s / h), 1e-12);
    c.tensor_model_parallel_size = 8;
    double tp8 = plan_act_bytes_per_layer(&c);
    c.sequence_parallel = 1;
    double sp8 = plan_act_bytes_per_layer(&c);
    c.recompute_granularity = RECOMPUTE_SELECTIVE;
    double sel_sp8 = plan_act_bytes_per_layer(&c);
    c.sequence_parallel = 0;
    double sel8 = plan_act_bytes_per_layer(&c);
    c.recompute_granularity = RECOMPUTE_FULL;
    double full8 = plan_act_bytes_per_layer(&c);
    c.sequence_parallel = 1;
    double full_sp8 = plan_act_bytes_per_layer(&c);
    /* SP shards everything TP alone leaves replicated: exactly 1/t of the unsharded layer */
    CHECK_CLOSE(sp8, none1 / 8, 1e-12);
    CHECK_CLOSE(sel_sp8, 34 * sbh / 8, 1e-12);
    CHECK_CLOSE(full8, 2 * sbh, 1e-12);
    CHECK_CLOSE(full_sp8, 2 * sbh / 8, 1e-12);
    /* TP without SP keeps 10sbh replicated */
    CHECK_CLOSE(tp8 - sp8, 10 * sbh - 10 * sbh / 8, 1e-9);
    CHECK_CLOSE(sel8, sbh * (10 + 24.0 / 8), 1e-12);
    CHECK(full_sp8 < full8 && full8 < sel_sp8 && sel_sp8 < sel8 && sel_sp8 < sp8 && sp8 < tp8 && tp8 < none1,
          "ordering of the recompute/SP variants");
    /* the paper's headline: SP + selective needs ~5x less than TP alone for GPT-3 */
    CHECK(tp8 / sel_sp8 > 4.5 && tp8 / sel_sp8 < 6, "GPT-3 175B tp8: %.2fx", tp8 / sel_sp8);
    /* activations scale with the micro-batch */
    c.micro_batch_size = 4;
    CHECK_CLOSE(plan_act_bytes_per_layer(&c), 4 * full_sp8, 1e-12);
}

static void test_inflight(void)
{
    CHECK(plan_inflight_microbatches(8, 1, 64, 0, 0) == 8, "1F1B first stage holds pp");
    CHECK(plan_inflight_microbatches(8, 1, 64, 0, 7) == 1, "last stage holds one");
    CHECK(plan_inflight_microbatches(8, 1, 3, 0, 0) == 3, "fewer micro-batches than stages");
    CHECK(plan_inflight_microbatches(1, 1, 64, 0, 0) == 1, "no pipeline");
    /* interleaving costs 1 + (p-1)/(p v) times the 1F1B first stage */
    for (int p = 2; p <= 16; p *= 2)
        for (int v = 2; v <= 4; v++)
            CHECK_CLOSE(plan_inflight_microbatches(p, v, 64, 0, 0) / p, 1 + (p - 1.0) / (p * v), 1e-12);
    /* groups of g micro-batches through each chunk: the warm-up runs (v - 1) * g chunks, not (v - 1) * p */
    CHECK_CLOSE(plan_inflight_microbatches(4, 2, 64, 8, 0), (3 * 2 + 1 * 8 + 1) / 2.0, 1e-12);
    CHECK(plan_inflight_microbatches(4, 2, 64, 4, 0) == plan_inflight_microbatches(4, 2, 64, 0, 0),
          "a group of pp is the default");
}

static void test_state(void)
{
    CHECK_CLOSE(plan_state_bytes_per_param(&PLAN_PRECISION_BF16, 1, 8), 6 + 12.0 / 8, 1e-12);
    CHECK_CLOSE(plan_state_bytes_per_param(&PLAN_PRECISION_BF16, 1, 1), 18, 1e-12);
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 32;
    c.hidden_size = 4096;
    c.num_attention_heads = 32;
    c.seq_length = 2048;
    c.vocab_size = 32000;
    c.micro_batch_size = 1;
    c.global_batch_size = 512;
    c.tensor_model_parallel_size = 2;
    c.pipeline_model_parallel_size = 4;
    plan_memory a, z;
    plan_memory_estimate(&c, 16, &PLAN_PRECISION_BF16, &a);
    c.use_distributed_optimizer = 1;
    plan_memory_estimate(&c, 16, &PLAN_PRECISION_BF16, &z);
    CHECK_CLOSE(a.state_bytes - z.state_bytes, a.params_per_gpu * 12 * (1 - 1.0 / 16), 1e-9);
    /* embedding stages are the heavy ones: the first/last stage holds a V*h/tp slice more than a middle one */
    double layers = 0;
    {
        atoll_config no = c;
        no.num_layers = 0;
        layers = (cfg_num_params(&c) - cfg_num_params(&no)) / 2 / 4; /* rough: per stage, per tp rank */
    }
    CHECK(a.params_per_gpu > layers + 32000.0 * 4096 / 2 * 0.99, "embedding counted: %.4g", a.params_per_gpu);
    CHECK(a.worst_stage == 0 || a.worst_stage == 3, "worst stage is an embedding stage: %d", a.worst_stage);
}

/* Flash attention keeps a row statistic instead of the [s, s] probabilities:
 * PLAN_PRECISION_BF16_FLASH (atoll-train --bf16) counts a layer as selective
 * recompute does, the same state as PLAN_PRECISION_BF16, and under full
 * recompute a working layer without the probabilities either. Set against
 * the same precision keeping Megatron's 5 bytes a score (`kept`), both without
 * the engine's workspace (test_engine_precisions). */
static void test_flash(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 48, c.hidden_size = 1600, c.num_attention_heads = 25, c.seq_length = 1024;
    c.vocab_size = 50304, c.micro_batch_size = 8, c.global_batch_size = 8;
    plan_precision flash = PLAN_PRECISION_BF16_FLASH, kept = flash;
    flash.workspace = kept.workspace = 0;
    kept.probs = 5;
    plan_memory f, b, s, fw;
    plan_memory_estimate(&c, 1, &flash, &f);
    plan_memory_estimate(&c, 1, &kept, &b);
    plan_memory_estimate(&c, 1, &PLAN_PRECISION_BF16_FLASH, &fw);
    atoll_config sel = c;
    sel.recompute_granularity = RECOMPUTE_SELECTIVE;
    plan_memory_estimate(&sel, 1, &kept, &s);
    CHECK(f.state_bytes == b.state_bytes, "flash: the same state");
    CHECK_CLOSE(f.act_bytes, s.act_bytes, 1e-12);
    CHECK_CLOSE(f.act_per_layer, s.act_per_layer, 1e-12);
    /* the probabilities, 5 a s^2 b bytes a layer (16-bit), are what is left out */
    CHECK_CLOSE(b.act_bytes - f.act_bytes, 48 * 5.0 * 25 * 1024 * 1024 * 8, 1e-9);
    /* the ~1.5B model at micro-batch 8 fits an 80 GB GPU with flash attention (it ran there), not as counted without */
    CHECK(fw.total_bytes < 70e9 && b.total_bytes > 80e9, "1.5B, mb 8: %.1f GB flash, %.1f GB without",
          fw.total_bytes / 1e9, b.total_bytes / 1e9);
    atoll_config full = c;
    full.recompute_granularity = RECOMPUTE_FULL;
    plan_memory ff, fb;
    plan_memory_estimate(&full, 1, &flash, &ff);
    plan_memory_estimate(&full, 1, &kept, &fb);
    CHECK_CLOSE(fb.act_bytes - ff.act_bytes, 5.0 * 25 * 1024 * 1024 * 8, 1e-9); /* one working layer */
    /* --recompute-method block 12: 12 of the 48 layers keep only their inputs, the other 36 what flash keeps,
     * and the working layer of full recompute; block 48 is full recompute */
    atoll_config blk = full;
    snprintf(blk.recompute_method, sizeof blk.recompute_method, "block");
    blk.recompute_num_layers = 12;
    plan_memory bk;
    plan_memory_estimate(&blk, 1, &flash, &bk);
    double working = ff.act_bytes - 48 * ff.act_per_layer, per_full = ff.act_per_layer, per_flash = f.act_per_layer;
    CHECK_CLOSE(bk.act_bytes, working + 12 * per_full + 36 * per_flash, 1e-9);
    CHECK_CLOSE(bk.act_per_layer, (12 * per_full + 36 * per_flash) / 48, 1e-12);
    blk.recompute_num_layers = 48;
    plan_memory_estimate(&blk, 1, &flash, &bk);
    CHECK_CLOSE(bk.act_bytes, ff.act_bytes, 1e-12);
    /* --recompute-method uniform 5: the input of each group of 5 layers only (10 groups of the 48, the last of 3),
     * and 5 working layers (full recompute's one and 4 more) with the group's 4 inner boundaries; with one
     * micro-batch in flight that costs more than the 38 inputs it saves */
    atoll_config uni = full;
    snprintf(uni.recompute_method, sizeof uni.recompute_method, "uniform");
    uni.recompute_num_layers = 5;
    plan_memory un;
    plan_memory_estimate(&uni, 1, &flash, &un);
    CHECK_CLOSE(un.act_bytes, working + 10 * per_full + 4 * per_flash + 4 * per_full, 1e-9);
    uni.recompute_num_layers = 1;
    plan_memory_estimate(&uni, 1, &flash, &un);
    CHECK_CLOSE(un.act_bytes, ff.act_bytes, 1e-12);
}

/* What atoll-train keeps beyond Megatron's count (GPT-2 124M, micro-batch 16):
 * logits at the activation size (its fused classifier), and once a rank the
 * backward's workspace: a token's gradients of 10 h (the residual, the norm,
 * qkv, the attention output, the MLP's 4h) and, in fp32, the [s, s] scores of
 * each head (twice under selective recompute). An fp32 layer keeps twice the
 * 34 sbh bytes of 16 bits, and its probabilities at 4 bytes a score. The engine's own
 * allocations are set against the whole estimate in tests/engine/engine_memory.c. */
static void test_engine_precisions(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12, c.seq_length = 1024;
    c.vocab_size = 50304, c.micro_batch_size = 16, c.global_batch_size = 16;
    double s = 1024, b = 16, h = 768, a = 12, V = 50304, scores = b * a * s * s;
    for (int fp32 = 0; fp32 < 2; fp32++) {
        const plan_precision *p = fp32 ? &PLAN_PRECISION_FP32 : &PLAN_PRECISION_BF16_FLASH;
        plan_precision bare = *p, logits4 = *p;
        bare.workspace = 0;
        logits4.logit = 4;
        plan_memory m, nb, l4;
        plan_memory_estimate(&c, 1, p, &m);
        plan_memory_estimate(&c, 1, &bare, &nb);
        plan_memory_estimate(&c, 1, &logits4, &l4);
        double E = fp32 ? 4 : 2;
        CHECK_CLOSE(m.act_bytes - nb.act_bytes, s * b * 10 * h * E + (fp32 ? 4 * scores : 0), 1e-9);
        CHECK_CLOSE(l4.act_bytes - m.act_bytes, (4 - E) * s * b * V, 1e-9);
        if (fp32) CHECK_CLOSE(m.act_per_layer, 34 * s * b * h * 2 + 4 * scores, 1e-12); /* 34 sbh bytes at 16 bits */
        atoll_config sel = c;
        sel.recompute_granularity = RECOMPUTE_SELECTIVE;
        plan_memory ms, nbs;
        plan_memory_estimate(&sel, 1, p, &ms);
        plan_memory_estimate(&sel, 1, &bare, &nbs);
        CHECK_CLOSE(ms.act_bytes - nbs.act_bytes, s * b * 10 * h * E + (fp32 ? 8 * scores : 0), 1e-9);
    }
}

/* The refusal's advice names the fewest layers full recompute must rebuild for the layout to fit (a 7B-like
 * model at seq 24576, tp 2 with SP, ZeRO-1 over 4, bf16, in 72 GiB), and says nothing of it for a layout that
 * already rebuilds every layer. */
static void test_advice(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 32, c.hidden_size = 4096, c.num_attention_heads = 32, c.seq_length = 24576;
    c.vocab_size = 32000, c.micro_batch_size = 1, c.global_batch_size = 64, c.bf16 = 1;
    c.tensor_model_parallel_size = 2, c.sequence_parallel = 1, c.use_distributed_optimizer = 1;
    double room = 72.0 * (1 << 30);
    plan_memory m;
    plan_memory_estimate(&c, 4, plan_engine_precision(&c), &m);
    CHECK(m.total_bytes > room, "without recompute it does not fit: %.1f GiB", m.total_bytes / (1 << 30));
    int chunk = 0, n = plan_fewest_rebuilt(&c, 4, plan_engine_precision(&c), room, &chunk);
    CHECK(chunk == 32 && n > 0 && n < 32, "the fewest layers rebuilt: %d of %d", n, chunk);
    atoll_config r = c;
    r.recompute_granularity = RECOMPUTE_FULL;
    snprintf(r.recompute_method, sizeof r.recompute_method, "block");
    r.recompute_num_layers = n;
    plan_memory_estimate(&r, 4, plan_engine_precision(&r), &m);
    CHECK(m.total_bytes <= room, "block %d fits: %.2f GiB", n, m.total_bytes / (1 << 30));
    double fits = m.total_bytes;
    r.recompute_num_layers = n - 1;
    plan_memory_estimate(&r, 4, plan_engine_precision(&r), &m);
    CHECK(m.total_bytes > room, "block %d does not: %.2f GiB", n - 1, m.total_bytes / (1 << 30));
    char advice[1024], want[256];
    plan_memory_advice(&c, 4, room, advice, sizeof advice);
    snprintf(want, sizeof want, "rebuild layers in backward: --recompute-granularity full --recompute-method block "
             "--recompute-num-layers %d (the first %d layers of each model chunk) needs about %.2f GiB; or use fewer",
             n, n, fits / (1 << 30));
    CHECK(strstr(advice, want) == advice, "advice: '%s'\n want: '%s'", advice, want);
    c.recompute_granularity = RECOMPUTE_FULL; /* every layer already: nothing to say of recompute */
    plan_memory_advice(&c, 4, 1e9, advice, sizeof advice);
    CHECK(!strstr(advice, "rebuild layers") && strstr(advice, "use fewer or smaller layers") == advice,
          "advice with full recompute: '%s'", advice);
    CHECK(plan_fewest_rebuilt(&c, 4, plan_engine_precision(&c), 1e9, NULL) == 0, "nothing fits 1 GB");
}

int main(int argc, char **argv)
{
    (void)argc;
    test_advice();
    test_flash();
    test_engine_precisions();
    test_mtnlg();
    test_activation_formulas();
    test_inflight();
    test_state();
    return check_summary(argv[0]);
}
