/* The memory check before allocation (engine/memory_check.c):
 *  - the workspace of cuDNN's deterministic fused-attention backward, dS in bf16
 *    [B, heads per TP rank, T, T] plus D in fp32 [B, heads, T], is counted only
 *    where the engine runs it (cuda, --bf16, --attention-backend fused, MHA, no
 *    attention dropout), and split over TP by heads;
 *  - the verdict against a given room: fits, or names the workspace and
 *    --attention-backend flash in its reason; the same layout fits with flash. */
#include "check.h"
#include "train.h"

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

static double ws(const atoll_config *c, int world, const char *device)
{
    eng_memory m;
    eng_memory_need(c, world, device, &m);
    return m.attn_workspace_bytes;
}

int main(int argc, char **argv)
{
    (void)argc;
    atoll_config c = gpt2();
    /* B=16, 12 heads, T=1024: 16*12*1024*1024*2 + 16*12*1024*4 bytes */
    double want = 16.0 * 12 * 1024 * 1024 * 2 + 16.0 * 12 * 1024 * 4;
    CHECK(ws(&c, 1, "cuda") == want, "GPT-2 B=16 workspace %.0f, want %.0f", ws(&c, 1, "cuda"), want);

    eng_memory m, f;
    eng_memory_need(&c, 1, "cuda", &m);
    atoll_config flash = c;
    snprintf(flash.attention_backend, sizeof flash.attention_backend, "flash");
    eng_memory_need(&flash, 1, "cuda", &f);
    CHECK(m.total_bytes == f.total_bytes + want, "fused total %.0f = flash total %.0f + workspace", m.total_bytes,
          f.total_bytes);
    CHECK(f.attn_workspace_bytes == 0, "flash: no workspace");

    atoll_config x = c;
    snprintf(x.attention_backend, sizeof x.attention_backend, "auto");
    CHECK(ws(&x, 1, "cuda") == 0, "auto runs the flash kernels: no workspace");
    CHECK(ws(&c, 1, "cpu") == 0, "cpu: no workspace");
    x = c, x.bf16 = 0;
    CHECK(ws(&x, 1, "cuda") == 0, "fp32: no workspace");
    x = c, x.attention_dropout = 0.1;
    CHECK(ws(&x, 1, "cuda") == 0, "attention dropout goes to flash: no workspace");
    x = c, x.group_query_attention = 1, x.num_query_groups = 4;
    CHECK(ws(&x, 1, "cuda") == 0, "GQA goes to flash: no workspace");
    x = c, x.tensor_model_parallel_size = 2;
    CHECK(ws(&x, 2, "cuda") == want / 2, "tp2 halves the heads: %.0f", ws(&x, 2, "cuda"));
    x = c, x.seq_length = 4096, x.micro_batch_size = 1, x.global_batch_size = 1;
    CHECK(ws(&x, 1, "cuda") == 12.0 * 4096 * 4096 * 2 + 12.0 * 4096 * 4, "T=4096 grows as T^2");

    /* the verdict: a room between the flash and the fused need */
    char err[1024] = "";
    double room = f.total_bytes + want / 2;
    CHECK(eng_memory_verdict(&flash, 1, 1, "cuda", room, err, sizeof err) == 0, "flash fits: %s", err);
    CHECK(eng_memory_verdict(&c, 1, 1, "cuda", room, err, sizeof err) == -1, "fused does not fit");
    CHECK(strstr(err, "GiB of cuDNN attention workspace (none with --attention-backend flash)") != NULL, "%s", err);
    CHECK(strstr(err, "free memory of this rank's GPU") != NULL, "%s", err);
    CHECK(eng_memory_verdict(&c, 1, 1, "cuda", -1, err, sizeof err) == 0, "unknown room: the allocations tell");
    /* cpu ranks on one host share its memory */
    atoll_config cpu = c;
    cpu.bf16 = 0;
    snprintf(cpu.attention_backend, sizeof cpu.attention_backend, "auto");
    eng_memory_need(&cpu, 1, "cpu", &m);
    CHECK(eng_memory_verdict(&cpu, 1, 2, "cpu", m.total_bytes * 1.5, err, sizeof err) == -1, "2 ranks share");
    CHECK(strstr(err, "x 2 ranks here") && strstr(err, "host memory available") && !strstr(err, "cuDNN"), "%s", err);
    CHECK(eng_memory_verdict(&cpu, 1, 1, "cpu", m.total_bytes * 1.5, err, sizeof err) == 0, "1 rank fits");
    return check_summary(argv[0]);
}
