#include "check.h"
#include "config.h"
#include "gpu_specs.h"
#include "topo.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(atoll_config *c, const char *line, char *err, size_t n)
{
    char buf[1024], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
    cfg_defaults(c);
    return cfg_parse_args(c, argc, argv, 0, NULL, NULL, err, n);
}

static void test_flags(void)
{
    atoll_config c;
    char err[256] = "";
    int rc = parse(&c, "--num-layers 4 --hidden-size=64 --num-attention-heads 4 --seq-length 32 "
                       "--tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity selective "
                       "--lr 3e-4 --seed 7", err, sizeof err);
    CHECK(rc == 0, "parse failed: %s", err);
    CHECK(c.num_layers == 4 && c.hidden_size == 64 && c.num_attention_heads == 4, "model sizes");
    CHECK(c.tensor_model_parallel_size == 2 && c.sequence_parallel == 1, "tp/sp");
    CHECK(c.recompute_granularity == RECOMPUTE_SELECTIVE, "recompute");
    CHECK(c.lr == 3e-4 && c.seed == 7, "lr/seed");
    CHECK(c.vocab_size == 256, "byte-level vocab default");

    CHECK(parse(&c, "--num-layers x", err, sizeof err) == -1 && strstr(err, "--num-layers"), "bad int: %s", err);
    CHECK(parse(&c, "--no-such-flag 1", err, sizeof err) == -1 && strstr(err, "no-such-flag"), "unknown: %s", err);
    CHECK(parse(&c, "--recompute-granularity half", err, sizeof err) == -1 && strstr(err, "selective"), "enum: %s", err);
    CHECK(parse(&c, "--num-layers", err, sizeof err) == -1 && strstr(err, "needs a value"), "missing value: %s", err);
}

static void test_yaml(void)
{
    char path[] = "/tmp/atoll_cfg_XXXXXX";
    int fd = mkstemp(path);
    const char *y = "model:\n  num_layers: 6\n  hidden_size: 128\nnum_attention_heads: 8\n"
                    "use_distributed_optimizer: true\nlr_decay_style: linear\n";
    CHECK(write(fd, y, strlen(y)) == (ssize_t)strlen(y), "write yaml");
    close(fd);
    atoll_config c;
    char err[256] = "", line[512];
    snprintf(line, sizeof line, "--yaml-cfg %s --num-layers 12", path);
    CHECK(parse(&c, line, err, sizeof err) == 0, "yaml: %s", err);
    CHECK(c.num_layers == 12, "later flag overrides yaml: %d", c.num_layers);
    CHECK(c.hidden_size == 128 && c.num_attention_heads == 8 && c.use_distributed_optimizer, "yaml values");
    CHECK(c.lr_decay_style == LR_DECAY_LINEAR, "decay");

    FILE *f = fopen(path, "w");
    fputs("num_layers: 2\nbogus_key: 3\n", f);
    fclose(f);
    CHECK(cfg_load_yaml(&c, path, err, sizeof err) == -1 && strstr(err, "bogus_key"), "yaml unknown: %s", err);
    unlink(path);
    CHECK(cfg_load_yaml(&c, "/nonexistent/x.yaml", err, sizeof err) == -1 && strstr(err, "/nonexistent/x.yaml"),
          "missing file: %s", err);
}

static void base(atoll_config *c)
{
    cfg_defaults(c);
    c->num_layers = 24; c->hidden_size = 2048; c->num_attention_heads = 16;
    c->seq_length = 2048; c->vocab_size = 51200; c->micro_batch_size = 1; c->global_batch_size = 64;
}

static void test_layout_rules(void)
{
    atoll_config c;
    char err[256];
    base(&c);
    c.tensor_model_parallel_size = 2; c.pipeline_model_parallel_size = 4;
    CHECK(cfg_validate_layout(&c, 16, 8, err, sizeof err) == 0, "valid layout refused: %s", err);
    CHECK(cfg_data_parallel_size(&c, 16) == 2, "dp");

    base(&c); c.tensor_model_parallel_size = 3;
    CHECK(cfg_validate_layout(&c, 12, 8, err, sizeof err) == -1 && strstr(err, "heads"), "heads%%tp: %s", err);
    base(&c); c.pipeline_model_parallel_size = 5;
    CHECK(cfg_validate_layout(&c, 10, 8, err, sizeof err) == -1 && strstr(err, "num-layers"), "layers%%pp: %s", err);
    base(&c); c.pipeline_model_parallel_size = 4; c.num_layers_per_virtual_pipeline_stage = 4;
    CHECK(cfg_validate_layout(&c, 4, 8, err, sizeof err) == -1 && strstr(err, "virtual"), "vpp: %s", err);
    base(&c); c.global_batch_size = 6;
    CHECK(cfg_validate_layout(&c, 4, 8, err, sizeof err) == -1 && strstr(err, "multiple of 4"), "gbs: %s", err);
    base(&c); c.tensor_model_parallel_size = 16;
    CHECK(cfg_validate_layout(&c, 16, 8, err, sizeof err) == -1 && strstr(err, "NVLink island"), "island: %s", err);
    base(&c); c.hidden_size = 100;
    CHECK(cfg_validate_layout(&c, 1, 8, err, sizeof err) == -1 && strstr(err, "divisible"), "h%%a: %s", err);
    base(&c); c.tensor_model_parallel_size = 2;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "num-gpus"), "world: %s", err);
}

static void test_flops(void)
{
    atoll_config c;
    cfg_defaults(&c);
    /* GPT-2 124M: 12 layers, 768 hidden, vocab 50257, 1024 positions: 124,439,808 params. */
    c.num_layers = 12; c.hidden_size = 768; c.num_attention_heads = 12;
    c.seq_length = 1024; c.vocab_size = 50257;
    CHECK(cfg_num_params(&c) == 124439808.0, "GPT-2 small params = %.0f", cfg_num_params(&c));
    CHECK_CLOSE(cfg_flops_per_token(&c), 6 * 124439808.0 + 12.0 * 12 * 768 * 1024, 1e-12);

    /* Llama 2 7B (the Hugging Face model card's 6,738,415,616): RMSNorm, SwiGLU
     * with FFN 11008, rotary positions, untied, no biases */
    atoll_config l;
    char err[256];
    cfg_defaults(&l);
    const char *flags[][2] = { { "num-layers", "32" }, { "hidden-size", "4096" }, { "num-attention-heads", "32" },
                               { "ffn-hidden-size", "11008" }, { "seq-length", "4096" }, { "vocab-size", "32000" },
                               { "normalization", "RMSNorm" }, { "swiglu", NULL }, { "position-embedding-type", "rope" },
                               { "untie-embeddings-and-output-weights", NULL }, { "disable-bias-linear", NULL } };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK(cfg_set(&l, flags[i][0], flags[i][1], err, sizeof err) == CFG_OK, "--%s: %s", flags[i][0], err);
    CHECK(cfg_validate_model(&l, err, sizeof err) == 0, "Llama 2 7B validates: %s", err);
    CHECK(cfg_num_params(&l) == 6738415616.0, "Llama 2 7B params = %.0f", cfg_num_params(&l));
    /* Llama 2 70B (68,976,648,192): grouped-query attention, 8 key/value heads for 64 */
    l.num_layers = 80; l.hidden_size = 8192; l.num_attention_heads = 64; l.ffn_hidden_size = 28672;
    l.group_query_attention = 1; l.num_query_groups = 8;
    CHECK(cfg_num_params(&l) == 68976648192.0, "Llama 2 70B params = %.0f", cfg_num_params(&l));
    CHECK(cfg_kv_groups(&l) == 8, "GQA groups");
    l.num_query_groups = 0;
    CHECK(cfg_kv_groups(&l) == 1, "--group-query-attention alone: one group, as Megatron's default");

    /* the family's rules, each a clear refusal */
    const struct { const char *key, *value, *want; } bad[] = {
        { "normalization", "BatchNorm", "LayerNorm or RMSNorm" },
        { "position-embedding-type", "alibi", "learned_absolute or rope" },
        { "hidden-dropout", "1.5", "[0, 1)" },
        { "num-query-groups", "5", "must divide" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        atoll_config x = l;
        x.num_query_groups = 8;
        cfg_set(&x, bad[i].key, bad[i].value, err, sizeof err);
        CHECK(cfg_validate_model(&x, err, sizeof err) == -1 && strstr(err, bad[i].want), "--%s %s: %s", bad[i].key,
              bad[i].value, err);
    }
    atoll_config g;
    cfg_defaults(&g);
    g.num_layers = 2; g.hidden_size = 64; g.num_attention_heads = 4; g.seq_length = 8; g.swiglu = 1;
    CHECK(cfg_validate_model(&g, err, sizeof err) == -1 && strstr(err, "RMSNorm"), "--swiglu alone: %s", err);
    g.swiglu = 0;
    cfg_set(&g, "normalization", "RMSNorm", err, sizeof err);
    CHECK(cfg_validate_model(&g, err, sizeof err) == -1 && strstr(err, "--swiglu"), "RMSNorm alone: %s", err);
}

static void test_specs_and_topo(void)
{
    const gpu_spec *h = gpu_spec_by_device_name("NVIDIA H100 80GB HBM3");
    CHECK(h && h->peak_bf16_flops == 989e12, "H100 peak");
    CHECK(gpu_spec_by_device_name("NVIDIA A100-SXM4-80GB") == gpu_spec_by_type("a100-80gb"), "A100 80GB");
    CHECK(gpu_spec_by_device_name("NVIDIA H100 PCIe")->peak_bf16_flops == 756e12, "H100 PCIe is not the SXM part");
    CHECK(gpu_spec_by_device_name("NVIDIA H100 NVL") == gpu_spec_by_type("h100-nvl"), "H100 NVL");
    char types[256];
    CHECK(strstr(gpu_spec_type_list(types, sizeof types), "h100-sxm, ") != NULL, "type list: %s", types);
    CHECK(gpu_spec_by_device_name("Tesla T4") == NULL, "unknown device has no peak");

    topo_node n[2];
    char err[256];
    CHECK(topo_simulate(&n[0], "dgx-h100", "node000", NULL, err, sizeof err) == 0, "%s", err);
    CHECK(n[0].ngpus == 8 && n[0].nnics == 8 && n[0].nics[0].gbps == 400, "dgx-h100 shape");
    CHECK(topo_simulate(&n[1], "gb200-tray", "tray1", "rack0", err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(n[1].gpus[3].island, "rack0"), "nvl domain island");
    CHECK(topo_max_island_gpus(n, 2) == 8, "max island");
    CHECK(topo_simulate(&n[0], "dgx-v100", "x", NULL, err, sizeof err) == -1 && strstr(err, "dgx-h100"), "%s", err);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_flags();
    test_yaml();
    test_layout_rules();
    test_flops();
    test_specs_and_topo();
    return check_summary(argv[0]);
}
