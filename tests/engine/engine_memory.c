/* The memory check before allocation (engine/memory_check.c): the need is
 * the planner's model at the run's precision plus the workspace cuDNN's fused
 * attention reports (given here; on a GPU it comes from the plans), and the
 * verdict against a room either passes or says what was needed, what there is
 * and what would lower it, naming the attention workspace and
 * --attention-backend flash where that is part of the need.
 *
 * The need against what the engine allocates: the model (weights, gradients,
 * its workspace), the optimizer's moments and one micro-batch's activations,
 * counted by a backend whose alloc and free are the CPU's with a tally, for
 * GPT and LLaMA shapes in fp32 (with and without selective recompute) and
 * bf16, and a tensor-parallel rank: within 5% (the engine's few small
 * buffers, the norms' statistics and the token ids, are below the planner's
 * notice). */
#include "check.h"
#include "kernels.h"
#include "model.h"
#include "optimizer.h"
#include "train.h"

#include <stdlib.h>
#include <string.h>

static atoll_config gpt2(void)
{
    atoll_config c;
    cfg_defaults(&c);
    c.num_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12, c.seq_length = 1024;
    c.vocab_size = 50304, c.micro_batch_size = 16, c.global_batch_size = 16;
    c.bf16 = 1;
    snprintf(c.attention_backend, sizeof c.attention_backend, "fused");
    return c;
}

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- a tally of the backend's memory ---- */

static const k_ops *cpu;
static struct {
    void *p;
    size_t bytes;
} held[4096];
static size_t in_use, peak;

static void *tally_alloc(size_t bytes)
{
    void *p = cpu->alloc(bytes);
    for (int i = 0; p && i < 4096; i++)
        if (!held[i].p) {
            held[i].p = p, held[i].bytes = bytes;
            in_use += bytes;
            if (in_use > peak) peak = in_use;
            return p;
        }
    if (p) abort(); /* more buffers than the tally holds */
    return p;
}

static void tally_free(void *p)
{
    for (int i = 0; p && i < 4096; i++)
        if (held[i].p == p) {
            in_use -= held[i].bytes;
            held[i].p = NULL;
        }
    cpu->free(p);
}

/* The peak the engine allocates for `c` on tensor-parallel rank 0, or -1. */
static double engine_bytes(const atoll_config *c)
{
    k_ops k = *cpu;
    k.alloc = tally_alloc;
    k.free = tally_free;
    eng_layout lay = eng_layout_single(c);
    lay.tp_size = c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1;
    char err[512];
    in_use = peak = 0;
    eng_model *m = eng_model_create(c, &lay, &k, err, sizeof err);
    if (!m) {
        fprintf(stderr, "engine_memory: %s\n", err);
        return -1;
    }
    eng_optim *o = eng_optim_create(m);
    eng_acts *a = eng_acts_create(m, 0);
    double got = o && a ? (double)peak : -1;
    eng_acts_free(m, a);
    eng_optim_free(o);
    eng_model_free(m);
    return got;
}

static void test_engine_allocations(void)
{
    cpu = k_cpu();
    struct {
        const char *name;
        int bf16, llama, selective, tp;
    } runs[] = { { "GPT fp32", 0, 0, 0, 1 },       { "GPT fp32, selective recompute", 0, 0, 1, 1 },
                 { "GPT bf16", 1, 0, 0, 1 },       { "LLaMA (GQA, SwiGLU) fp32", 0, 1, 0, 1 },
                 { "LLaMA bf16", 1, 1, 0, 1 },     { "GPT bf16, tp 2 (rank 0)", 1, 0, 0, 2 },
                 { "GPT fp32, tp 2 (rank 0)", 0, 0, 0, 2 } };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        atoll_config c;
        cfg_defaults(&c);
        c.num_layers = 3, c.hidden_size = 256, c.num_attention_heads = 4, c.seq_length = 512;
        c.vocab_size = 8192, c.micro_batch_size = 8, c.global_batch_size = 8, c.bf16 = runs[i].bf16;
        c.tensor_model_parallel_size = runs[i].tp;
        if (runs[i].selective) c.recompute_granularity = RECOMPUTE_SELECTIVE;
        if (runs[i].llama) {
            snprintf(c.normalization, sizeof c.normalization, "RMSNorm");
            snprintf(c.position_embedding_type, sizeof c.position_embedding_type, "rope");
            c.swiglu = 1, c.disable_bias_linear = 1, c.untie_embeddings_and_output_weights = 1;
            c.group_query_attention = 1, c.num_query_groups = 2, c.ffn_hidden_size = 704;
        }
        eng_memory need;
        eng_memory_need(&c, runs[i].tp, 0, &need);
        double got = engine_bytes(&c);
        CHECK(got > 0 && need.total_bytes > 0.95 * got && need.total_bytes < 1.05 * got,
              "%s: the check's %.1f MiB against the %.1f MiB the engine allocates (%.3f)", runs[i].name,
              need.total_bytes / 1048576, got / 1048576, need.total_bytes / got);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    atoll_config c = gpt2();
    eng_memory m, f;
    char err0[1024] = "";
    double ws = 0.75 * GIB;
    eng_memory_need(&c, 1, ws, &m);
    eng_memory_need(&c, 1, 0, &f);
    CHECK(m.total_bytes == f.total_bytes + ws, "total %.0f = %.0f + the workspace", m.total_bytes, f.total_bytes);
    CHECK(m.attn_workspace_bytes == ws && f.attn_workspace_bytes == 0, "the workspace is reported as given");
    CHECK(f.total_bytes == f.state_bytes + f.act_bytes, "state + activations = %.0f", f.total_bytes);
    /* 124M parameters (tied, vocab 50304, 1024 positions): weights 2 + grads 4 + master 4 + moments 8 bytes */
    CHECK(f.params > 124e6 && f.params < 125e6, "GPT-2 124M: %.0f parameters", f.params);
    CHECK_CLOSE(f.state_bytes, f.params * 18, 1e-12);
    atoll_config fp32 = c;
    fp32.bf16 = 0;
    eng_memory_need(&fp32, 1, 0, &m);
    CHECK_CLOSE(m.state_bytes, f.params * 16, 1e-12); /* fp32: weights 4 + grads 4 + moments 8 */
    /* fp32 activations are twice as wide, and the fp32 attention keeps its probabilities
     * (4 bytes a score, 12 a s^2 b a layer) and a backward's [s, s] scratch; bf16's flash
     * attention keeps a row statistic */
    CHECK_CLOSE(m.act_bytes, 2 * f.act_bytes + 13 * 4.0 * 12 * 1024 * 1024 * 16, 1e-12);
    double fp32_need = m.total_bytes;
    /* the ~1.5B model at micro-batch 8 in bf16 fits an 80 GB H100 (it ran there) */
    atoll_config big = c;
    big.num_layers = 48, big.hidden_size = 1600, big.num_attention_heads = 25, big.micro_batch_size = 8,
    big.global_batch_size = 8;
    eng_memory_need(&big, 1, 0, &m);
    CHECK(m.total_bytes < 70e9 && m.total_bytes > 40e9, "1.5B bf16 micro-batch 8: %.1f GB", m.total_bytes / 1e9);
    CHECK(eng_memory_verdict(&big, 1, 1, "cuda", 79.0 * GIB, 0, err0, sizeof err0) == 0, "%s", err0);

    /* the verdict: a room between the need without the workspace and with it */
    char err[1024] = "";
    double room = f.total_bytes + ws / 2;
    CHECK(eng_memory_verdict(&c, 1, 1, "cuda", room, 0, err, sizeof err) == 0, "fits without: %s", err);
    CHECK(eng_memory_verdict(&c, 1, 1, "cuda", room, ws, err, sizeof err) == -1, "does not fit with it");
    CHECK(strstr(err, "0.75 GiB of cuDNN attention workspace (none with --attention-backend flash)") != NULL, "%s",
          err);
    CHECK(strstr(err, "free memory of this rank's GPU") != NULL && strstr(err, "bf16 with fp32 master"), "%s", err);
    CHECK(eng_memory_verdict(&c, 1, 1, "cuda", -1, ws, err, sizeof err) == 0, "unknown room: the allocations tell");
    /* cpu ranks on one host share its memory; a GPU rank has its own */
    CHECK(eng_memory_verdict(&fp32, 1, 2, "cpu", fp32_need * 1.5, 0, err, sizeof err) == -1, "2 ranks share");
    CHECK(strstr(err, "x 2 ranks here") && strstr(err, "host memory available") && !strstr(err, "cuDNN"), "%s", err);
    CHECK(eng_memory_verdict(&fp32, 1, 1, "cpu", fp32_need * 1.5, 0, err, sizeof err) == 0, "1 rank fits");
    CHECK(eng_memory_verdict(&c, 1, 8, "cuda", f.total_bytes * 1.5, 0, err, sizeof err) == 0,
          "8 GPU ranks on a node: each checks its own device");
    test_engine_allocations();
    return check_summary(argv[0]);
}
