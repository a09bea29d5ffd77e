/* The memory check before allocation (engine/memory_check.c): the need is
 * the planner's model at the run's precision plus the workspace cuDNN's fused
 * attention reports (given here; on a GPU it comes from the plans), and the
 * verdict against a room either passes or says what was needed, what there is
 * and what would lower it, naming the attention workspace and
 * --attention-backend flash where that is part of the need. */
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

#define GIB (1024.0 * 1024.0 * 1024.0)

int main(int argc, char **argv)
{
    (void)argc;
    atoll_config c = gpt2();
    eng_memory m, f;
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
    CHECK_CLOSE(m.act_bytes, 2 * f.act_bytes, 1e-12);

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
    CHECK(eng_memory_verdict(&fp32, 1, 2, "cpu", f.total_bytes * 3, 0, err, sizeof err) == -1, "2 ranks share");
    CHECK(strstr(err, "x 2 ranks here") && strstr(err, "host memory available") && !strstr(err, "cuDNN"), "%s", err);
    CHECK(eng_memory_verdict(&fp32, 1, 1, "cpu", f.total_bytes * 3, 0, err, sizeof err) == 0, "1 rank fits");
    CHECK(eng_memory_verdict(&c, 1, 8, "cuda", f.total_bytes * 1.5, 0, err, sizeof err) == 0,
          "8 GPU ranks on a node: each checks its own device");
    return check_summary(argv[0]);
}
