#include "check.h"
#include "config.h"
#include "depend.h"
#include "msg.h"
#include "gpu_specs.h"
#include "topo.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(atoll_config *c, const char *line, char *err, size_t n)
{
    char buf[2048], *argv[128];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    CHECK(strlen(line) < sizeof buf, "a test line of 2 KiB or more");
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        CHECK(argc < 128, "a test line of more than 128 words");
        if (argc < 128) argv[argc++] = t;
    }
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
    /* --data-path takes a Megatron blend: the words up to the next flag */
    CHECK(parse(&c, "--data-path 0.3 /d/a 0.7 /d/b --seq-length 8", err, sizeof err) == 0 &&
              !strcmp(c.data_path, "0.3 /d/a 0.7 /d/b") && c.seq_length == 8, "blend: '%s' (%s)", c.data_path, err);
    CHECK(parse(&c, "--data-path /d/a --seq-length 8", err, sizeof err) == 0 && !strcmp(c.data_path, "/d/a"),
          "one prefix: '%s'", c.data_path);
    CHECK(parse(&c, "--data-path=0.5 /d/a", err, sizeof err) == -1 && strstr(err, "unexpected argument '/d/a'"),
          "--data-path=V takes one word: %s", err);
    /* and in YAML a list, as Megatron's YAML writes it */
    const char *y = "data:\n  data_path: [0.3, /d/a, 0.7, /d/b]\nseq_length: 8\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "b.yaml", err, sizeof err) == 0 && !strcmp(c.data_path, "0.3 /d/a 0.7 /d/b") &&
              c.seq_length == 8, "YAML blend: '%s' (%s)", c.data_path, err);
    y = "data_path:\n  - /d/a\n  - /d/b\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "b.yaml", err, sizeof err) == 0 && !strcmp(c.data_path, "/d/a /d/b"),
          "YAML block list: '%s' (%s)", c.data_path, err);
    y = "data_path: [{a: 1}]\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "b.yaml", err, sizeof err) == -1 && strstr(err, "holds a mapping"),
          "YAML list of mappings: %s", err);
    y = "split: [1, 2]\n";
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "b.yaml", err, sizeof err) == -1 &&
          strstr(err, "data_path and train/valid/test_data_path take a list, a blend"), "YAML list elsewhere: %s", err);
    /* the per-split paths take blends too, on the command line and in YAML */
    y = "train_data_path: [0.7, /d/web, 0.3, /d/books]\nvalid_data_path: [/d/v1, /d/v2]\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "b.yaml", err, sizeof err) == 0 &&
          !strcmp(c.train_data_path, "0.7 /d/web 0.3 /d/books") && !strcmp(c.valid_data_path, "/d/v1 /d/v2"),
          "YAML per-split blends: '%s' '%s' (%s)", c.train_data_path, c.valid_data_path, err);
    cfg_defaults(&c);
    CHECK(parse(&c, "--train-data-path 0.5 /d/a 0.5 /d/b --test-data-path /d/t --seq-length 8", err, sizeof err) == 0 &&
          !strcmp(c.train_data_path, "0.5 /d/a 0.5 /d/b") && !strcmp(c.test_data_path, "/d/t") && c.seq_length == 8,
          "--train-data-path blend: '%s' '%s' (%s)", c.train_data_path, c.test_data_path, err);
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

/* --decoder-first/last-pipeline-num-layers: every split the validator takes gives
 * the stages contiguous ranges that cover the model, the first and last stage
 * the layers asked for and the others the same number; every other one is refused. */
static void test_uneven_stages(void)
{
    atoll_config c;
    char err[256];
    int accepted = 0, refused = 0;
    for (int L = 1; L <= 12; L++)
        for (int pp = 1; pp <= 6; pp++)
            for (int f = 0; f <= L; f++)
                for (int l = 0; l <= L; l++) {
                    base(&c);
                    c.num_layers = L; c.pipeline_model_parallel_size = pp; c.global_batch_size = 8;
                    c.decoder_first_pipeline_num_layers = f; c.decoder_last_pipeline_num_layers = l;
                    int ok = cfg_validate_layout(&c, pp, 8, err, sizeof err) == 0;
                    /* the spec, by enumeration: some equal middle size n >= 1 makes the sum */
                    int fits = 0;
                    if (!f && !l) fits = L % pp == 0;
                    else if (pp >= 2) {
                        int others = pp - (f > 0) - (l > 0);
                        for (int n = others ? 1 : 0; n <= L && !fits; n++) fits = f + l + others * n == L;
                    }
                    CHECK(ok == fits, "L %d pp %d first %d last %d: validator %d, spec %d (%s)", L, pp, f, l, ok, fits,
                          ok ? "" : err);
                    if (!ok) {
                        refused++;
                        CHECK(!strchr(err, '\n') && strstr(err, "--"), "one line naming a flag: %s", err);
                        continue;
                    }
                    accepted++;
                    int at = 0, mid = -1;
                    for (int s = 0; s < pp; s++) {
                        int b, e;
                        cfg_stage_layers(&c, s, &b, &e);
                        CHECK(b == at && e > b, "L %d pp %d f %d l %d: stage %d holds [%d, %d) after %d", L, pp, f, l,
                              s, b, e, at);
                        at = e;
                        int n = e - b;
                        CHECK(cfg_stage_num_layers(&c, s) == n, "stage %d: %d layers counted, holds %d", s,
                              cfg_stage_num_layers(&c, s), n);
                        if (s == 0 && f) CHECK(n == f, "first stage %d layers, asked %d", n, f);
                        else if (s == pp - 1 && l) CHECK(n == l, "last stage %d layers, asked %d", n, l);
                        else if (mid < 0) mid = n;
                        else CHECK(n == mid, "L %d pp %d f %d l %d: stage %d has %d, another %d", L, pp, f, l, s, n, mid);
                    }
                    CHECK(at == L, "L %d pp %d f %d l %d: the stages end at %d", L, pp, f, l, at);
                }
    CHECK(accepted > 100 && refused > 100, "both kinds seen: %d accepted, %d refused", accepted, refused);

    /* interleaved and even: virtual stage s holds [s lv, (s + 1) lv) */
    base(&c);
    c.pipeline_model_parallel_size = 4; c.num_layers_per_virtual_pipeline_stage = 2; c.global_batch_size = 8;
    CHECK(cfg_validate_layout(&c, 4, 8, err, sizeof err) == 0, "vpp: %s", err);
    for (int vs = 0; vs < 12; vs++) {
        int b, e;
        cfg_stage_layers(&c, vs, &b, &e);
        CHECK(b == 2 * vs && e == 2 * vs + 2, "virtual stage %d: [%d, %d)", vs, b, e);
    }
    CHECK(cfg_stage_num_layers(&c, 3) == 6, "a stage's 3 chunks of 2: %d", cfg_stage_num_layers(&c, 3));
    /* the messages */
    CHECK(parse(&c, "--num-layers 24 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                    "--pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 4 "
                    "--num-layers-per-virtual-pipeline-stage 2", err, sizeof err) == 0, "flags: %s", err);
    CHECK(c.decoder_last_pipeline_num_layers == 4 && c.decoder_first_pipeline_num_layers == 0, "flag values");
    CHECK(cfg_validate_layout(&c, 2, 8, err, sizeof err) == -1 && strstr(err, "give the model chunks per stage with "
          "--num-virtual-stages-per-pipeline-rank instead"), "vpp: %s", err);
    c.num_layers_per_virtual_pipeline_stage = 0;
    /* uneven and interleaved (Megatron-Core's --num-virtual-stages-per-pipeline-rank): each stage's layers
     * split over its chunks, and the chunks in rounds: 20 layers, first 2, last 6, pp 3, v 2 hold
     * stage 0: [0,1) [10,11); stage 1: [1,7) [11,17); stage 2: [7,10) [17,20) */
    c.num_layers = 20;
    c.pipeline_model_parallel_size = 3;
    c.decoder_first_pipeline_num_layers = 2;
    c.decoder_last_pipeline_num_layers = 6;
    c.num_virtual_stages_per_pipeline_rank = 2;
    c.global_batch_size = 3 * c.micro_batch_size; /* interleaved: micro-batches a multiple of pp */
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == 0 && cfg_virtual_stages(&c) == 2 && cfg_interleaved(&c),
          "uneven, v 2: %s", err);
    const int want[6][2] = { { 0, 1 }, { 1, 7 }, { 7, 10 }, { 10, 11 }, { 11, 17 }, { 17, 20 } };
    for (int vs = 0; vs < 6; vs++) {
        int b, e;
        cfg_stage_layers(&c, vs, &b, &e);
        CHECK(b == want[vs][0] && e == want[vs][1], "uneven virtual stage %d: [%d, %d), want [%d, %d)", vs, b, e,
              want[vs][0], want[vs][1]);
    }
    CHECK(cfg_stage_num_layers(&c, 0) == 2 && cfg_stage_num_layers(&c, 1) == 12 && cfg_stage_num_layers(&c, 2) == 6,
          "stages 2, 12, 6");
    c.decoder_first_pipeline_num_layers = 3;
    c.num_layers = 21;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "--num-virtual-stages-per-pipeline-rank 2 "
          "splits each stage's layers evenly over its 2 model chunks: --decoder-first-pipeline-num-layers 3, is not a "
          "multiple of 2"), "first 3 over 2 chunks: %s", err);
    c.decoder_first_pipeline_num_layers = c.decoder_last_pipeline_num_layers = 0;
    c.num_layers = 18;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == 0, "even, v 2: %s", err);
    /* --microbatch-group-size-per-virtual-pipeline-stage: groups of g micro-batches through each chunk, so the
     * step's m need not be a multiple of pp; Megatron's rules for g */
    {
        int mbs = c.micro_batch_size, gbs = c.global_batch_size;
        c.global_batch_size = 7 * mbs; /* m = 7 on pp 3 */
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 &&
                  strstr(err, "a multiple of --pipeline-model-parallel-size (3)"), "m 7 in groups of pp: %s", err);
        c.microbatch_group_size_per_virtual_pipeline_stage = 4; /* groups of 4 and 3 */
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == 0, "m 7 in groups of 4: %s", err);
        c.microbatch_group_size_per_virtual_pipeline_stage = 5;
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 &&
                  strstr(err, "leave a last group of 2, fewer than --pipeline-model-parallel-size 3"), "g 5: %s", err);
        c.microbatch_group_size_per_virtual_pipeline_stage = 2;
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 &&
                  strstr(err, "must be between --pipeline-model-parallel-size (3) and the step's number of "
                              "micro-batches (7)"), "g 2: %s", err);
        c.microbatch_group_size_per_virtual_pipeline_stage = 8;
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "micro-batches (7)"), "g 8: %s", err);
        c.microbatch_group_size_per_virtual_pipeline_stage = 4; /* a ramp's first batch of 3 micro-batches */
        snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "%d %d 100", 3 * mbs, 4 * mbs);
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "micro-batches (3)"),
              "a ramp batch of 3 in groups of 4: %s", err);
        c.rampup_batch_size[0] = 0;
        c.num_virtual_stages_per_pipeline_rank = 0; /* not interleaved: the group size does nothing (Megatron's) */
        c.global_batch_size = 5 * mbs;
        CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == 0, "a group size without interleaving: %s", err);
        c.num_virtual_stages_per_pipeline_rank = 2;
        c.microbatch_group_size_per_virtual_pipeline_stage = 0;
        c.global_batch_size = gbs;
    }
    c.num_virtual_stages_per_pipeline_rank = 4;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "(6 = 18/3) is not divisible by "
          "--num-virtual-stages-per-pipeline-rank 4"), "even, v 4: %s", err);
    c.num_virtual_stages_per_pipeline_rank = 2;
    c.num_layers_per_virtual_pipeline_stage = 3;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "both set the interleaving"), "both: %s", err);
    c.num_layers_per_virtual_pipeline_stage = c.num_virtual_stages_per_pipeline_rank = 0;
    c.num_layers = 24;
    c.global_batch_size = 0;
    c.decoder_last_pipeline_num_layers = 4;
    c.pipeline_model_parallel_size = 1;
    CHECK(cfg_validate_layout(&c, 1, 8, err, sizeof err) == -1 && strstr(err, "needs --pipeline-model-parallel-size > 1"),
          "pp 1: %s", err);
    c.pipeline_model_parallel_size = 3;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == 0, "10, 10, 4: %s", err);
    c.decoder_last_pipeline_num_layers = 5;
    CHECK(cfg_validate_layout(&c, 3, 8, err, sizeof err) == -1 && strstr(err, "19 of --num-layers 24 are left for the "
          "other 2 pipeline stages") && strstr(err, "multiple of 2"), "19 over 2: %s", err);
    base(&c);
    c.pipeline_model_parallel_size = 5;
    CHECK(cfg_validate_layout(&c, 5, 8, err, sizeof err) == -1 && strstr(err, "not divisible") &&
          strstr(err, "--decoder-first-pipeline-num-layers"), "24 over 5 names the uneven flags: %s", err);
}

/* The inputs of issue 12 that crashed the daemons: products that overflowed int
 * and were then used as divisors, and values that should never have been taken. */
static void test_ranges_and_overflow(void)
{
    atoll_config c;
    char err[256] = "";
    const char *model = "--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --num-gpus 4 ";
    char line[512];
    snprintf(line, sizeof line, "%s--micro-batch-size 1073741824 --global-batch-size 8", model);
    CHECK(parse(&c, line, err, sizeof err) == -1 && strstr(err, "--micro-batch-size: 1073741824 is above") &&
          strstr(err, "1048576"), "huge micro-batch: %s", err);
    snprintf(line, sizeof line, "%s--tensor-model-parallel-size 65536 --pipeline-model-parallel-size 65536", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "tp/pp 65536 parse: %s", err);
    CHECK(cfg_validate_layout(&c, 4, 0, err, sizeof err) == -1 && strstr(err, "65536*65536 = 4294967296 is more than"),
          "tp*pp overflow: %s", err);
    CHECK(cfg_data_parallel_size(&c, 4) == 0, "dp of an impossible layout");
    /* The largest accepted values, where 32-bit products would overflow. */
    snprintf(line, sizeof line, "%s--micro-batch-size 1048576 --global-batch-size 8", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "%s", err);
    CHECK(cfg_validate_layout(&c, 1048576, 0, err, sizeof err) == -1 && strstr(err, "1048576*1048576 = 1099511627776"),
          "micro-batch * dp over 2^32: %s", err);
    c.global_batch_size = 0; /* the default global batch would be 2^40 */
    CHECK(cfg_validate_layout(&c, 1048576, 0, err, sizeof err) == -1 && strstr(err, "give --global-batch-size"),
          "default gbs overflow: %s", err);
    CHECK(cfg_global_batch(&c, 1048576) == 0 && cfg_micro_batches(&c, 1048576) == 0, "no default over the limit");
    c.micro_batch_size = 2; c.global_batch_size = 0;
    CHECK(cfg_global_batch(&c, 4) == 8 && cfg_micro_batches(&c, 4) == 1, "Megatron's default gbs");
    c.global_batch_size = 24;
    CHECK(cfg_micro_batches(&c, 4) == 3 && cfg_micro_batches(&c, 5) == 0, "micro-batches per DP rank");

    /* Hyper-parameters: finite and non-negative, betas below 1, min-lr not above lr. */
    struct { const char *args, *want; } bad[] = {
        { "--lr inf", "'inf' is not a finite number" },
        { "--lr nan", "'nan' is not a finite number" },
        { "--lr -1", "--lr: -1 is below the smallest accepted value, 0" },
        { "--lr 1e999", "not a finite number" },
        { "--weight-decay -0.1", "below" },
        { "--adam-beta2 1", "is not below 1" },
        { "--adam-eps -1e-8", "below" },
        { "--clip-grad -inf", "finite" },
        { "--num-layers -3", "below" },
        { "--num-layers 99999999999999999999", "not an integer" },
        { "--tensor-model-parallel-size 0", "below the smallest accepted value, 1" },
        { "--seq-length 16777217", "above" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse(&c, bad[i].args, err, sizeof err) == -1 && strstr(err, bad[i].want), "'%s': %s", bad[i].args, err);
    CHECK(parse(&c, "--lr 1e-3 --min-lr 1e-5 --adam-beta2 0.95 --clip-grad 0", err, sizeof err) == 0, "%s", err);
    cfg_defaults(&c);
    CHECK(cfg_set(&c, "split", "8,2,0", err, sizeof err) == CFG_OK && cfg_set(&c, "split", "", err, sizeof err) == CFG_OK &&
          !strcmp(c.split, "969,30,1"), "an empty text value is the default: '%s'", c.split);
    base(&c); c.min_lr = 1.0;
    CHECK(cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 && strstr(err, "--min-lr"), "min-lr > lr: %s", err);
    base(&c); c.train_iters = 0;
    CHECK(cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 && strstr(err, "--train-iters"), "iters: %s", err);

    /* Every combination of extreme values: no trap, no UB (the sanitizer build runs this). */
    const int ext[] = { 0, 1, 2, 3, 7, 65536, 1 << 20, 1 << 30, 2147483647 };
    const int n = (int)(sizeof ext / sizeof ext[0]);
    int refused = 0, total = 0;
    for (int a = 0; a < n; a++) for (int b = 0; b < n; b++) for (int d = 0; d < n; d++) for (int e = 0; e < n; e++) {
        base(&c);
        c.tensor_model_parallel_size = ext[a];
        c.pipeline_model_parallel_size = ext[b];
        c.micro_batch_size = ext[d];
        c.global_batch_size = ext[e];
        c.num_layers_per_virtual_pipeline_stage = ext[(a + e) % n];
        for (int w = 0; w < n; w++) {
            total++;
            if (cfg_validate_layout(&c, ext[w], ext[(w + d) % n], err, sizeof err)) { refused++; continue; }
            int dp = cfg_data_parallel_size(&c, ext[w]), m = cfg_micro_batches(&c, dp);
            CHECK(dp >= 1 && m >= 1 && (long long)m * c.micro_batch_size * dp == cfg_global_batch(&c, dp),
                  "accepted layout is whole: tp %d pp %d mbs %d gbs %d world %d", ext[a], ext[b], ext[d], ext[e],
                  ext[w]);
        }
    }
    CHECK(refused > 0 && refused < total, "%d of %d extreme layouts refused", refused, total);
}

static void test_rank_order(void)
{
    cfg_rank_order o;
    char err[256] = "";
    CHECK(cfg_rank_order_parse(NULL, 2, 4, 8, &o, err, sizeof err) == 0, "%s", err);
    CHECK(o.stride[CFG_DIM_TP] == 1 && o.stride[CFG_DIM_DP] == 2 && o.stride[CFG_DIM_PP] == 8, "default strides");
    CHECK(cfg_rank_order_parse("pp-dp-tp", 2, 4, 8, &o, err, sizeof err) == 0 && o.stride[CFG_DIM_PP] == 1 &&
          o.stride[CFG_DIM_DP] == 8 && o.stride[CFG_DIM_TP] == 32, "pp first: %s", err);
    CHECK(cfg_rank_order_parse("tp-dp", 2, 4, 1, &o, err, sizeof err) == 0 && o.ndim == CFG_NDIMS, "absent pp of size 1");
    CHECK(cfg_rank_order_parse("tp-dp", 2, 4, 2, &o, err, sizeof err) == -1 && strstr(err, "leaves out pp"), "%s", err);
    CHECK(cfg_rank_order_parse("tp-tp-dp-pp", 2, 2, 2, &o, err, sizeof err) == -1 && strstr(err, "repeated"), "%s", err);
    CHECK(cfg_rank_order_parse("tp-xx", 2, 1, 1, &o, err, sizeof err) == -1 && strstr(err, "unknown token 'xx'"), "%s", err);
    CHECK(cfg_rank_order_parse("tp-dp-", 1, 1, 1, &o, err, sizeof err) == -1 && strstr(err, "ends with"), "%s", err);
    atoll_config c;
    base(&c);
    snprintf(c.rank_order, sizeof c.rank_order, "tp-dp-dp");
    CHECK(cfg_validate_layout(&c, 4, 0, err, sizeof err) == -1 && strstr(err, "--rank-order"), "validated at submit: %s", err);
}

static const char *yaml_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/atoll_cfg_XXXXXX");
    int fd = mkstemp(path);
    size_t n = strlen(text);
    CHECK(write(fd, text, n) == (ssize_t)n, "write yaml");
    close(fd);
    return path;
}

static void test_yaml_refusals(void)
{
    atoll_config c;
    char err[512] = "";
    struct { const char *text, *want; } bad[] = {
        { "", "is empty" },
        { "# only a comment\n", "is empty" },
        { "---\n", "holds no mapping" },
        { "24\n", "bare value ('24')" },
        { "- num_layers: 2\n", "is a list" },
        { "num_layers: 2\nnum_layers: 3\n", "line 2: key 'num_layers' is given a second time (first on line 1)" },
        { "num-layers: 2\nnum_layers: 3\n", "given a second time" },
        { "model:\n  num_layers: 2\ntraining:\n  num_layers: 4\n", "line 4: key 'num_layers' is given a second" },
        { "lr: .inf\n", "not a finite number" },
        { "lr: -1\n", "below the smallest accepted value" },
        { "num_layers: &x 2\nhidden_size: *x\n", "aliases" },
        { "num_layers: 2\n---\nnum_layers: 3\n", "second YAML document" },
        { "num_layers: [2]\n", "has a list" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg_defaults(&c);
        const char *p = yaml_file(bad[i].text);
        CHECK(cfg_load_yaml(&c, p, err, sizeof err) == -1 && strstr(err, bad[i].want), "yaml '%s': %s", bad[i].text, err);
        unlink(p);
    }
    /* 60,000 nested mappings (a segfault before): refused at the depth limit. */
    size_t depth = 60000;
    char *deep = malloc(depth * 6 + 16); /* flow style, {a: {a: ...1}}, under the size limit */
    size_t at = 0;
    for (size_t i = 0; i < depth; i++) { memcpy(deep + at, "{a: ", 4); at += 4; }
    deep[at++] = '1';
    for (size_t i = 0; i < depth; i++) deep[at++] = '}';
    deep[at] = 0;
    cfg_defaults(&c);
    const char *p = yaml_file(deep);
    CHECK(cfg_load_yaml(&c, p, err, sizeof err) == -1 && strstr(err, "at most 16 levels"), "deep yaml: %s", err);
    unlink(p);
    free(deep);
    char *big = malloc(CFG_YAML_MAX_BYTES + 64);
    memset(big, '#', CFG_YAML_MAX_BYTES + 63);
    big[CFG_YAML_MAX_BYTES + 63] = 0;
    p = yaml_file(big);
    CHECK(cfg_load_yaml(&c, p, err, sizeof err) == -1 && strstr(err, "job files of at most 1048576 bytes"),
          "big yaml: %s", err);
    unlink(p);
    free(big);
    CHECK(cfg_load_yaml(&c, "/dev/zero", err, sizeof err) == -1 && strstr(err, "not a regular file"), "%s", err);
    p = yaml_file("model:\n  num_layers: 2\n  hidden_size: 64\ntraining:\n  lr: 1e-3\n");
    CHECK(cfg_load_yaml(&c, p, err, sizeof err) == 0 && c.num_layers == 2 && c.lr == 1e-3, "sections: %s", err);
    unlink(p);
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
        { "hidden-dropout", "1.5", "accepted: 0 <= value < 1" }, /* refused as it is set: the key's range */
        { "num-query-groups", "5", "must divide" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        atoll_config x = l;
        x.num_query_groups = 8;
        int refused = cfg_set(&x, bad[i].key, bad[i].value, err, sizeof err) != CFG_OK ||
                      cfg_validate_model(&x, err, sizeof err) == -1;
        CHECK(refused && strstr(err, bad[i].want), "--%s %s: %s", bad[i].key, bad[i].value, err);
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

/* cfg_megatron_notes' lines as one string */
static void megatron_notes(const atoll_config *c, char *buf, size_t len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (f) cfg_megatron_notes(c, "t", f);
    if (f) fclose(f);
    snprintf(buf, len, "%s", text ? text : "");
    free(text);
}

/* A Megatron-LM launch line runs as written: flags that pick Megatron's
 * implementation are accepted, the sample-based schedule becomes iterations,
 * and what atoll does not do is refused saying what it does instead. */
static void test_megatron_flags(void)
{
    atoll_config c, plain;
    char err[512] = "", notes[2048];
    const char *model = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                        "--global-batch-size 16 --micro-batch-size 2 ";
    char line[2048];
    CHECK(parse(&plain, model, err, sizeof err) == 0, "plain: %s", err);
    snprintf(line, sizeof line, "%s--use-mcore-models --transformer-impl transformer_engine --use-flash-attn "
             "--no-masked-softmax-fusion --no-bias-dropout-fusion --no-gradient-accumulation-fusion "
             "--attention-softmax-in-fp32 --overlap-grad-reduce --distributed-backend nccl --log-throughput "
             "--timing-log-level 2 --context-parallel-size 1 --expert-model-parallel-size 1 --norm-epsilon 1e-05 "
             "--init-method-std 0.02 --rotary-percent 1.0 --accumulate-allreduce-grads-in-fp32 "
             "--cross-entropy-loss-fusion --no-create-attention-mask-in-dataloader --calculate-per-token-loss "
             "--manual-gc --manual-gc-interval 10 --exit-signal-handler --use-dist-ckpt --ckpt-format torch_dist "
             "--ckpt-fully-parallel-save --ckpt-fully-parallel-load --auto-detect-ckpt-format --tensorboard-queue-size 1000 "
             "--no-log-loss-scale-to-tensorboard --override-opt_param-scheduler --use-cpu-initialization --data-impl mmap "
             "--DDP-impl local --no-async-tensor-model-parallel-allreduce --no-persist-layer-norm --openai-gelu "
             "--te-rng-tracker --log-straggler --check-for-nan-in-loss-and-grad --timing-log-option minmax "
             "--barrier-with-L1-time --moe-router-topk=false --optimizer adam --dataloader-type single "
             "--vocab-extra-ids 0 --apply-query-key-layer-scaling --use-precision-aware-optimizer --main-grads-dtype fp32 "
             "--main-params-dtype fp32 --exp-avg-dtype fp32 --exp-avg-sq-dtype fp32 --no-overlap-p2p-communication "
             "--disable-gloo-process-groups --cross-entropy-fusion-impl te --init-model-with-meta-device "
             "--softmax-type vanilla --first-last-layers-bf16 --num-distributed-optimizer-instances 1 "
             "--glu-linear-offset 0 --load-main-params-from-ckpt --straggler-detector-enabled", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "Megatron's implementation flags: %s", err);
    CHECK(!memcmp(&c, &plain, sizeof c), "flags atoll does anyway changed a setting");
    megatron_notes(&c, notes, sizeof notes);
    CHECK(!notes[0], "notes for flags with the same effect: %s", notes);
    /* speed-only flags atoll does not have: accepted, each noted */
    snprintf(line, sizeof line, "%s--deterministic-mode --log-energy --timers-to-log 1", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "flags without effect: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(strstr(notes, "t: note: --deterministic-mode has no effect here: atoll's kernels are deterministic unless "
                        "--nondeterministic-attention is given") &&
              strstr(notes, "--log-energy has no effect here: GPU energy is not read") &&
              strstr(notes, "--timers-to-log has no effect here"), "notes: '%s'", notes);
    /* the one kernel choice that gives up determinism: asked for by name, and not beside Megatron's flag for the
     * opposite */
    snprintf(line, sizeof line, "%s--nondeterministic-attention", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.nondeterministic_attention &&
              cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0, "--nondeterministic-attention: %s", err);
    snprintf(line, sizeof line, "%s--nondeterministic-attention --deterministic-mode", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 &&
              strstr(err, "--nondeterministic-attention and --deterministic-mode ask for opposite things; give one"),
          "both: '%s'", err);
    snprintf(line, sizeof line, "%s--overlap-param-gather --num-workers 2", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "speed-only flags: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(!strcmp(notes, "t: note: --overlap-param-gather has no effect here: the ZeRO-1 parameter all-gather runs "
                         "after the optimizer step, not overlapped with the forward pass\n"
                         "t: note: --num-workers has no effect here: the indexed dataset is read memory-mapped in the "
                         "training process\n"), "notes: '%s'", notes);
    memset(c.megatron_ignored, 0, sizeof c.megatron_ignored);
    CHECK(!memcmp(&c, &plain, sizeof c), "a speed-only flag changed a setting");
    snprintf(line, sizeof line, "%s--log-params-norm --distributed-timeout-minutes 60 --dist-ckpt-strictness log_all",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.log_params_norm, "flags without effect: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(!strstr(notes, "--log-params-norm") && /* it has an effect now */
              strstr(notes, "--distributed-timeout-minutes has no effect here: a hung collective is found") &&
              strstr(notes, "--dist-ckpt-strictness has no effect here"), "notes: '%s'", notes);
    /* --decoupled-lr: its floor is --min-lr's unless --decoupled-min-lr is given, as in Megatron */
    snprintf(line, sizeof line, "%s--lr 1e-4 --min-lr 1e-5 --decoupled-lr 1e-3", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.decoupled_lr == 1e-3 && cfg_decoupled_min_lr(&c) == 1e-5,
          "--decoupled-lr: %s (floor %g)", err, c.decoupled_min_lr);
    snprintf(line, sizeof line, "%s--decoupled-min-lr 0 --min-lr 1e-5 --decoupled-lr 1e-3", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.decoupled_min_lr == 0 &&
              cfg_validate_training(&c, err, sizeof err) == 0, "--decoupled-min-lr 0: %s (floor %g)", err,
          c.decoupled_min_lr);
    /* fp16's loss scaling, in launch lines that train in bf16: accepted, noted */
    snprintf(line, sizeof line, "%s--bf16 --loss-scale 1 --initial-loss-scale 65536 --min-loss-scale 1 "
             "--loss-scale-window 1000 --hysteresis 2", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.bf16, "loss-scale flags: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(strstr(notes, "t: note: --loss-scale has no effect here: loss scaling is for --fp16, which atoll does not "
                        "implement; bf16 and fp32 train without a loss scale\n") &&
              strstr(notes, "--initial-loss-scale has no effect") && strstr(notes, "--min-loss-scale has no effect") &&
              strstr(notes, "--loss-scale-window has no effect") && strstr(notes, "--hysteresis has no effect"),
          "notes: '%s'", notes);
    /* newer Megatron's name for what selective recomputation rebuilds, its default: the same config */
    snprintf(line, sizeof line, "%s--recompute-granularity selective --recompute-modules core_attn", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.recompute_granularity == RECOMPUTE_SELECTIVE, "core_attn: %s", err);
    /* speed-only flags of newer launch lines */
    snprintf(line, sizeof line, "%s--no-mmap-bin-files --cuda-graph-impl local", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "speed flags: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(strstr(notes, "--no-mmap-bin-files has no effect here") &&
              strstr(notes, "--cuda-graph-impl has no effect here: atoll records its own CUDA graphs, with "
                            "--enable-cuda-graph"),
          "notes: '%s'", notes);
    /* the LLaMA-3 example's flags: every note is whole, however many */
    snprintf(line, sizeof line, "%s--grad-reduce-in-bf16 --profile --profile-step-start 4 --profile-step-end 6 "
             "--overlap-param-gather --distributed-timeout-minutes 60 --empty-unused-memory-level 1 --kv-channels 16 "
             "--tiktoken-pattern v2", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "LLaMA-3 example flags: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(strstr(notes, "--tiktoken-pattern has no effect here: it is TikTokenizer's split pattern") &&
              strstr(notes, "--grad-reduce-in-bf16 has no effect here: gradients are reduced in fp32\n") &&
              strstr(notes, "t: note: --empty-unused-memory-level has no effect here: there is no caching allocator "
                            "to empty\n"), "notes: '%s'", notes);
    snprintf(line, sizeof line, "%s--recompute-granularity full --recompute-method uniform --recompute-num-layers 2 "
             "--overlap-p2p-communication", model);
    CHECK(parse(&c, line, err, sizeof err) == 0, "recompute method: %s", err);
    megatron_notes(&c, notes, sizeof notes);
    CHECK(!strstr(notes, "recompute") && strstr(notes, "--overlap-p2p-communication has no effect here"),
          "notes: '%s' (uniform groups are Megatron's: nothing to note)", notes);
    CHECK(cfg_recompute_layers(&c, 6) == 6, "uniform rebuilds every layer of a chunk");
    /* block: the first N layers of each model chunk (of each stage's, here 2 chunks of 2 layers a stage) */
    snprintf(line, sizeof line, "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
             "--micro-batch-size 1 --global-batch-size 8 --pipeline-model-parallel-size 2 "
             "--num-layers-per-virtual-pipeline-stage 2 --recompute-granularity full --recompute-method block "
             "--recompute-num-layers 1");
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 2, 0, err, sizeof err) == 0,
          "block recompute: %s", err);
    CHECK(cfg_recompute_layers(&c, 2) == 1 && cfg_recompute_layers(&c, 0) == 0 && cfg_recompute_fraction(&c) == 0.5,
          "block 1 of chunks of 2: %d layers a chunk, fraction %g", cfg_recompute_layers(&c, 2),
          cfg_recompute_fraction(&c));
    c.recompute_num_layers = 5;
    CHECK(cfg_recompute_layers(&c, 2) == 2 && cfg_recompute_fraction(&c) == 1, "block 5 of chunks of 2: all");
    c.recompute_granularity = RECOMPUTE_SELECTIVE;
    CHECK(cfg_recompute_layers(&c, 2) == 0 && cfg_recompute_fraction(&c) == 0, "selective rebuilds no whole layer");
    /* older Megatron's spellings */
    snprintf(line, sizeof line, "%s--checkpoint-activations --use-tp-pp-dp-mapping", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.recompute_granularity == RECOMPUTE_FULL &&
              !strcmp(c.rank_order, "tp-cp-ep-pp-dp") && !c.checkpoint_activations && !c.use_tp_pp_dp_mapping,
          "--checkpoint-activations, --use-tp-pp-dp-mapping: %s (%s)", err, c.rank_order);
    /* Megatron's spellings of atoll settings */
    snprintf(line, sizeof line, "%s--recompute-activations --mock-data --lr-warmup-init 1e-5", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.recompute_granularity == RECOMPUTE_SELECTIVE &&
              !c.recompute_activations && !c.mock_data && !c.data_path[0] && c.lr_warmup_init == 1e-5,
          "--recompute-activations, --mock-data: %s", err);
    /* refused, with what atoll does instead */
    const struct { const char *flags, *says; } refused[] = {
        { "--fp16", "--fp16: fp16 with loss scaling is not implemented; --bf16 is" },
        { "--wandb-project p", "--wandb-project: atoll does not log to Weights & Biases" },
        { "--context-parallel-size 2", "--context-parallel-size 2: context parallelism is not implemented" },
        { "--norm-epsilon -1e-6", "--norm-epsilon: -1e-6 is below the smallest accepted value, 0" },
        { "--norm-epsilon 2", "--norm-epsilon: 2 is above the largest accepted value, 1" },
        { "--transformer-impl te", "accepted: local transformer_engine" },
        { "--num-experts 8", "--num-experts: mixture-of-experts models are not implemented" },
        { "--rampup-batch-size 16 16", "--rampup-batch-size takes three numbers, START INCREMENT SAMPLES" },
        { "--rampup-batch-size 0 2 100", "--rampup-batch-size 0 2 100: START and INCREMENT must be 1 to" },
        { "--rampup-batch-size 2 2 0", "--rampup-batch-size 2 2 0: SAMPLES, over which the batch grows, must be 1" },
        { "--rampup-batch-size 4 5 100", "4 + k x 5 never equals it (e.g. START 6)" },
        { "--rampup-batch-size 32 16 100", "32 + k x 16 never equals it (e.g. START 16)" },
        { "--rampup-batch-size 2,2,-5", "takes three numbers" },
        { "--use-flash-attn=maybe", "--use-flash-attn: 'maybe' is not true or false" },
        { "--no-position-embedding", "--no-position-embedding: atoll's models need a position encoding" },
        { "--train-samples 1600 --train-iters 5", "--train-iters and --train-samples both given; give one" },
        { "--lr-warmup-samples 32 --lr-warmup-iters 2", "--lr-warmup-iters and --lr-warmup-samples both given" },
        { "--lr-warmup-fraction 0.1 --lr-warmup-iters 2", "--lr-warmup-fraction and --lr-warmup-iters" },
        { "--lr-warmup-fraction 1.5", "--lr-warmup-fraction: 1.5 is above the largest accepted value, 1" },
        { "--use-torch-fsdp2", "--use-torch-fsdp2: FSDP is not implemented; --use-distributed-optimizer" },
        { "--eod-mask-loss --calculate-per-token-loss", "--calculate-per-token-loss with --eod-mask-loss is not "
                                                        "implemented: the loss is the mean over micro-batches" },
        { "--no-save-optim", "--no-save-optim: checkpoints always keep the optimizer state" },
        { "--data-path a --train-data-path b", "--data-path (split by --split) and --train-data-path are both given" },
        { "--test-data-path t", "--test-data-path needs --train-data-path (the training data)" },
        { "--mock-data --train-data-path b", "--mock-data trains on the built-in corpus, and --train-data-path is" },
        { "--ckpt-format zarr", "--ckpt-format zarr: atoll writes its own format" },
        { "--recompute-granularity full --recompute-method blocks", "--recompute-method 'blocks': expected uniform "
                                                                    "(every layer rebuilt, in groups of" },
        { "--recompute-method block --recompute-num-layers 1", "--recompute-method and --recompute-num-layers say "
                                                               "which layers --recompute-granularity full rebuilds" },
        { "--recompute-granularity full --recompute-num-layers 2", "--recompute-num-layers 2 needs --recompute-method" },
        { "--recompute-granularity full --recompute-method block", "--recompute-method block needs "
                                                                   "--recompute-num-layers N" },
        { "--recompute-activations --recompute-granularity full", "--recompute-activations is --recompute-granularity "
                                                                  "selective, and --recompute-granularity full" },
        { "--mock-data --data-path d", "--mock-data trains on the built-in corpus, and --data-path is given too" },
        { "--moe-router-topk 2", "--moe-router-topk: mixture-of-experts models are not implemented" },
        { "--moe-grouped-gemm", "--moe-grouped-gemm: mixture-of-experts models are not implemented" },
        { "--rotary-interleaved", "--rotary-interleaved: rope rotates the two halves of each head" },
        { "--fp8-recipe delayed", "--fp8-recipe: fp8 is not implemented; --bf16 is" },
        { "--fp8-param-gather", "--fp8-param-gather: fp8 is not implemented; --bf16 is" },
        { "--num-distributed-optimizer-instances 2", "--num-distributed-optimizer-instances 2: one distributed "
                                                     "optimizer spans the whole data-parallel group; accepted: 1" },
        { "--multi-latent-attention", "--multi-latent-attention: multi-latent attention (DeepSeek's) is not "
                                      "implemented" },
        { "--mtp-num-layers 1", "--mtp-num-layers: multi-token prediction is not implemented" },
        { "--start-weight-decay 0", "--start-weight-decay goes with --weight-decay-incr-style linear or cosine" },
        { "--end-weight-decay 0.1 --weight-decay-incr-style constant", "--end-weight-decay goes with "
                                                                         "--weight-decay-incr-style linear or cosine" },
        { "--weight-decay-incr-style cosine --start-weight-decay 0", "--weight-decay-incr-style cosine needs "
                                                                     "--start-weight-decay and --end-weight-decay" },
        { "--weight-decay-incr-style exponential", "--weight-decay-incr-style: 'exponential' is not one of constant, "
                                                   "linear, cosine" },
        { "--optimizer sgd", "--optimizer sgd: atoll's optimizer is Megatron's adam (AdamW: decoupled weight decay, "
                             "fp32 moments); accepted: adam" },
        { "--dataloader-type cyclic", "--dataloader-type cyclic: samples are read in order, from each epoch's keyed "
                                      "shuffle of the dataset, as Megatron's single loader reads its dataset's; "
                                      "accepted: single" },
        { "--exp-avg-dtype bf16", "--exp-avg-dtype bf16: Adam's moments are fp32; accepted: fp32" },
        { "--vocab-extra-ids 100", "--vocab-extra-ids 100: extra sentinel ids are T5's" },
        { "--rope-scaling-factor -2", "--rope-scaling-factor: -2 is below the smallest accepted value, 0" },
        { "--data-path a --data-args-path f", "--data-path and --data-args-path (a file holding a --data-path) are "
                                              "both given" },
        { "--per-split-data-args-path f --valid-data-path v", "--per-split-data-args-path (a file holding the three "
                                                              "splits' paths) and --valid-data-path are both given" },
        { "--data-args-path f --per-split-data-args-path g", "--data-args-path (split by --split) and "
                                                             "--per-split-data-args-path are both given" },
        { "--mock-data --data-args-path f", "--mock-data trains on the built-in corpus, and --data-args-path is given" },
        { "--recompute-granularity selective --recompute-modules core_attn mlp", "--recompute-modules core_attn mlp: "
          "--recompute-granularity selective rebuilds the core attention (its softmax and dropout); recomputing other "
          "modules is not implemented; accepted: core_attn" },
        { "--softmax-type off-by-one", "--softmax-type off-by-one: attention takes the standard softmax; accepted: "
                                       "vanilla" },
        { "--use-megatron-fsdp", "--use-megatron-fsdp: FSDP is not implemented" },
        { "--ckpt-step 5", "--ckpt-step says how to take the checkpoint in --load: give --load DIR" },
        { "--account-for-loss-in-pipeline-split --pipeline-model-parallel-size 3", "--account-for-loss-in-pipeline-"
          "split: --num-layers 4 with the loss is 5 layers, which must split evenly over --pipeline-model-parallel-size "
          "3 with a transformer layer on every stage; e.g. --num-layers 5" },
        { "--account-for-embedding-in-pipeline-split --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1",
          "--account-for-embedding-in-pipeline-split and --decoder-last-pipeline-num-layers both set the pipeline split" },
        { "--account-for-embedding-in-pipeline-split --pipeline-model-parallel-size 2 "
          "--num-layers-per-virtual-pipeline-stage 1", "with an interleaved schedule is not supported" },
        { "--checkpoint-activations --recompute-granularity selective", "--checkpoint-activations is "
                                                                          "--recompute-granularity full" },
        { "--use-tp-pp-dp-mapping --rank-order tp-dp-pp", "--use-tp-pp-dp-mapping is --rank-order tp-cp-ep-pp-dp, and "
                                                          "--rank-order tp-dp-pp is given too" },
        { "--decoupled-min-lr 5e-5", "--decoupled-min-lr 5e-05 is where --decoupled-lr's schedule ends: give "
                                     "--decoupled-lr" },
        { "--exit-duration-in-mins -1", "--exit-duration-in-mins: -1 is below the smallest accepted value, 0" },
        /* the checkpoint and schedule flags say what they need (cfg_validate_training) */
        { "--exit-duration-in-mins 230", "--exit-duration-in-mins 230 stops the run with a checkpoint: give --save" },
        { "--finetune", "--finetune says how to take the checkpoint in --load: give --load DIR" },
        { "--no-load-rng", "--no-load-rng says how to take the checkpoint in --load" },
        { "--exit-on-missing-checkpoint", "--exit-on-missing-checkpoint says how to take the checkpoint in --load" },
        { "--lr 1e-4 --lr-warmup-init 1e-3", "--lr-warmup-init 0.001 is above --lr 0.0001" },
        { "--lr-decay-style WSD --train-iters 100", "--lr-decay-style WSD needs --lr-wsd-decay-iters (or -samples) from "
                                                    "1 to the 100 iterations after the warm-up" },
        { "--lr-decay-style WSD --train-iters 100 --lr-warmup-iters 10 --lr-wsd-decay-iters 95", "1 to the 90 iterations" },
        { "--lr-decay-style step", "--lr-decay-style: 'step' is not one of cosine, linear, constant, WSD, "
                                   "inverse-square-root" },
        { "--lr-wsd-decay-style log", "--lr-wsd-decay-style: 'log' is not one of exponential, linear, cosine, minus_sqrt" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(line, sizeof line, "%s%s", model, refused[i].flags);
        CHECK((parse(&c, line, err, sizeof err) == -1 || cfg_validate_training(&c, err, sizeof err) == -1) &&
                  strstr(err, refused[i].says), "%s: '%s'", refused[i].flags, err);
    }
    /* LLaMA-3.1's rope scaling needs rotary positions; the scale is the factor only with the switch */
    snprintf(line, sizeof line, "%s--use-rope-scaling", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == -1 &&
              strstr(err, "--use-rope-scaling stretches rotary positions' long wavelengths (LLaMA-3.x's): add "
                          "--position-embedding-type rope"), "--use-rope-scaling without rope: %s", err);
    snprintf(line, sizeof line, "%s--position-embedding-type rope --rope-scaling-factor 32", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_rope_scale(&c) == 1.0, "a factor without the switch scales");
    snprintf(line, sizeof line, "%s--position-embedding-type rope --use-rope-scaling", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == 0 &&
              cfg_rope_scale(&c) == 8.0, "--use-rope-scaling: Megatron's default factor 8 (%s)", err);
    c.rope_scaling_factor = 0; /* a JobSpec that leaves the field out */
    CHECK(cfg_rope_scale(&c) == 8.0, "a factor of 0 reads as 8");
    /* --rotary-seq-len-interpolation-factor: rope's positions divided by it; rope only, and not with LLaMA-3.1's
     * scaling (a Hugging Face config names one rope type) */
    snprintf(line, sizeof line, "%s--position-embedding-type rope --rotary-seq-len-interpolation-factor 4", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == 0 &&
              cfg_rope_interp(&c) == 4.0 && cfg_rope_scale(&c) == 1.0, "position interpolation 4: %s", err);
    c.rotary_seq_len_interpolation_factor = 0; /* not given */
    CHECK(cfg_rope_interp(&c) == 1.0, "no interpolation factor reads as 1");
    snprintf(line, sizeof line, "%s--rotary-seq-len-interpolation-factor 4", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == -1 &&
              strstr(err, "--rotary-seq-len-interpolation-factor 4 divides rotary positions: add "
                          "--position-embedding-type rope"), "interpolation without rope: %s", err);
    snprintf(line, sizeof line, "%s--position-embedding-type rope --use-rope-scaling "
             "--rotary-seq-len-interpolation-factor 2", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == -1 &&
              strstr(err, "with --use-rope-scaling: atoll takes one of the two"), "interpolation and scaling: %s", err);
    snprintf(line, sizeof line, "%s--position-embedding-type rope --rotary-seq-len-interpolation-factor 2.5", model);
    CHECK(parse(&c, line, err, sizeof err) == -1 && strstr(err, "--rotary-seq-len-interpolation-factor"),
          "a fractional factor (Megatron's is an integer): %s", err);
    /* --qk-layernorm: the LLaMA family's, two weights of the head dimension more per layer */
    snprintf(line, sizeof line, "%s--qk-layernorm", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 &&
              strstr(err, "--qk-layernorm is implemented for the LLaMA family"), "GPT with --qk-layernorm: %s", err);
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope", model);
    CHECK(parse(&plain, line, err, sizeof err) == 0, "LLaMA: %s", err);
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope --qk-layernorm", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 &&
              cfg_layer_params(&c) == cfg_layer_params(&plain) + 2 * 16, "LLaMA with --qk-layernorm: %s (%g vs %g)", err,
          cfg_layer_params(&c), cfg_layer_params(&plain));
    /* --kv-channels: heads of another width than hidden / heads (Qwen3-0.6B: 16 heads of 128 over hidden 1024):
     * q, k, v (and their biases) and the output projection 4 x 32 wide instead of 64; the default width reads as
     * not given; an attention wider than the limit, or an odd head dim with rope, is refused */
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope --kv-channels 32",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 &&
              cfg_head_dim(&c) == 32 &&
              cfg_layer_params(&c) == cfg_layer_params(&plain) + 4 * 64.0 * (128 - 64) + 3 * (128 - 64) &&
              cfg_flops_per_token(&c) > cfg_flops_per_token(&plain), "--kv-channels 32: %s (%g vs %g)", err,
          cfg_layer_params(&c), cfg_layer_params(&plain));
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope --kv-channels 16",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && !c.kv_channels && !memcmp(&c, &plain, sizeof c),
          "--kv-channels 16 = 64 / 4: %s", err);
    snprintf(line, sizeof line, "%s--kv-channels 1048576 --num-attention-heads 65536", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_model(&c, err, sizeof err) == -1 &&
              strstr(err, "--kv-channels 1048576 x --num-attention-heads 65536 = 68719476736, the attention's width, is "
                          "over 1048576"), "too wide: %s", err);
    snprintf(line, sizeof line, "%s--kv-channels 15 --position-embedding-type rope", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 &&
              strstr(err, "rope needs an even head dim, not 15 (--kv-channels)"), "odd head dim: %s", err);
    /* Nemotron-4's --squared-relu and --apply-layernorm-1p: the GPT family's, the same parameter count;
     * --squared-relu not with the LLaMA family (SwiGLU is its activation); 1p is, for RMSNorm (Megatron's
     * LLaMA-3 example gives it: Transformer Engine's zero-centred gamma) */
    snprintf(line, sizeof line, "%s--squared-relu --apply-layernorm-1p --position-embedding-type rope", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 &&
              c.squared_relu && c.apply_layernorm_1p, "GPT with --squared-relu --apply-layernorm-1p: %s", err);
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope --squared-relu",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == -1 &&
              strstr(err, "--squared-relu and --swiglu are two MLP activations: give one"),
          "SwiGLU + squared ReLU: %s", err);
    snprintf(line, sizeof line, "%s--normalization RMSNorm --swiglu --position-embedding-type rope --apply-layernorm-1p",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 &&
              c.apply_layernorm_1p && cfg_layer_params(&c) == cfg_layer_params(&plain), "RMSNorm + 1p: %s", err);
    /* --norm-epsilon: Qwen's 1e-6 taken; 0 (a JobSpec that does not carry it) reads as Megatron's 1e-5 */
    snprintf(line, sizeof line, "%s--norm-epsilon 1e-6", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_norm_eps(&c) == 1e-6, "--norm-epsilon 1e-6: %s", err);
    snprintf(line, sizeof line, "%s--norm-epsilon 0", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_norm_eps(&c) == 1e-5, "--norm-epsilon 0: %s", err);
    /* --rotary-percent: int(head dim 16 * p) dims turn, an even number of at least 2, rotary positions only, GPT
     * family only */
    snprintf(line, sizeof line, "%s--position-embedding-type rope --rotary-percent 0.5", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 &&
              cfg_rotary_dim(&c) == 8, "rope on half the head: %s (%d dims)", err, cfg_rotary_dim(&c));
    snprintf(line, sizeof line, "%s", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_rotary_dim(&c) == 16, "rope turns the whole head by default");
    const struct { const char *flags, *says; } rot[] = {
        { "--rotary-percent 0.5", "--rotary-percent 0.5 says how much of each head rotary positions turn: add "
                                  "--position-embedding-type rope" },
        { "--position-embedding-type rope --rotary-percent 0.1", "--rotary-percent 0.1 turns 1 of the head's 16 dims" },
        { "--position-embedding-type rope --rotary-percent 0.2", "--rotary-percent 0.2 turns 3 of the head's 16 dims" },
        { "--normalization RMSNorm --swiglu --position-embedding-type rope --rotary-percent 0.5",
          "--rotary-percent below 1 is implemented for the GPT family" },
        { "--rotary-percent 1.5", "--rotary-percent: 1.5 is above the largest accepted value, 1" },
    };
    for (size_t i = 0; i < sizeof rot / sizeof rot[0]; i++) {
        snprintf(line, sizeof line, "%s%s", model, rot[i].flags);
        int rc = parse(&c, line, err, sizeof err);
        if (!rc) rc = cfg_validate_layout(&c, 1, 0, err, sizeof err);
        CHECK(rc == -1 && strstr(err, rot[i].says), "%s: '%s'", rot[i].flags, err);
    }
    /* --account-for-embedding/loss-in-pipeline-split: the split that counts them as layers, as Megatron's */
    const char *split = "--num-layers 30 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                        "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split";
    snprintf(line, sizeof line, "%s --account-for-loss-in-pipeline-split", split);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 4, 0, err, sizeof err) == 0 &&
              cfg_stage_num_layers(&c, 0) == 7 && cfg_stage_num_layers(&c, 1) == 8 && cfg_stage_num_layers(&c, 2) == 8 &&
              cfg_stage_num_layers(&c, 3) == 7 && !c.account_for_embedding_in_pipeline_split &&
              !c.account_for_loss_in_pipeline_split, "embedding and loss: %s (%d, %d)", err,
          c.decoder_first_pipeline_num_layers, c.decoder_last_pipeline_num_layers);
    snprintf(line, sizeof line, "%s --num-layers 31", split);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 4, 0, err, sizeof err) == 0 &&
              cfg_stage_num_layers(&c, 0) == 7 && cfg_stage_num_layers(&c, 3) == 8, "embedding: %s (%d, %d)", err,
          c.decoder_first_pipeline_num_layers, c.decoder_last_pipeline_num_layers);
    snprintf(line, sizeof line, "%s --pipeline-model-parallel-size 1", split);
    CHECK(parse(&c, line, err, sizeof err) == 0 && !c.decoder_first_pipeline_num_layers, "pp 1: %s", err);
    snprintf(line, sizeof line, "%s--ckpt-step 5 --load a --save a", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_training(&c, err, sizeof err) == 0 &&
              cfg_validate_submission(&c, err, sizeof err) == -1 &&
              strstr(err, "--ckpt-step 5 with --load the same directory as --save (a)"), "--ckpt-step in place: %s", err);
    snprintf(line, sizeof line, "%s--ckpt-step 5 --load a --save b", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_submission(&c, err, sizeof err) == 0 && c.ckpt_step == 5,
          "--ckpt-step: %s", err);
    snprintf(line, sizeof line, "%s--finetune --no-load-optim --no-load-rng --load a --save b --exit-duration-in-mins 1",
             model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_training(&c, err, sizeof err) == 0 && c.finetune &&
              c.no_load_optim && c.no_load_rng && c.exit_duration_in_mins == 1, "fine-tune flags: %s", err);
    CHECK(parse(&c, "--num-layers 4 --train-samples 1600", err, sizeof err) == -1 &&
              strstr(err, "--train-samples needs --global-batch-size"), "samples without a batch: '%s'", err);
    /* the sample-based schedule in iterations of 16 samples: whole steps to train, the nearest for the LR */
    snprintf(line, sizeof line, "%s--train-samples 1610 --lr-decay-samples 1000 --lr-warmup-samples 100", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.train_iters == 100 && c.lr_decay_iters == 63 &&
              c.lr_warmup_iters == 6 && !c.train_samples && !c.lr_decay_samples && !c.lr_warmup_samples,
          "samples: %d %d %d (%s)", c.train_iters, c.lr_decay_iters, c.lr_warmup_iters, err);
    snprintf(line, sizeof line, "%s--train-samples 1600 --lr-decay-style WSD --lr-wsd-decay-samples 320 "
             "--lr-wsd-decay-style minus_sqrt", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_training(&c, err, sizeof err) == 0 &&
              c.lr_decay_style == LR_DECAY_WSD && c.lr_wsd_decay_iters == 20 && !c.lr_wsd_decay_samples &&
              c.lr_wsd_decay_style == WSD_MINUS_SQRT, "WSD in samples: %s (%d)", err, c.lr_wsd_decay_iters);
    snprintf(line, sizeof line, "%s--train-iters 200 --lr-warmup-fraction 0.1", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.lr_warmup_iters == 20 && c.lr_warmup_fraction == 0,
          "warmup fraction of the train iterations: %d", c.lr_warmup_iters);
    snprintf(line, sizeof line, "%s--train-iters 200 --lr-decay-iters 150 --lr-warmup-fraction 0.01", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.lr_warmup_iters == 2, "warmup fraction of the decay: %d",
          c.lr_warmup_iters);
    snprintf(line, sizeof line, "%s--use-rotary-position-embeddings --no-position-embedding", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_rope(&c) && !c.use_rotary_position_embeddings &&
              !c.no_position_embedding, "rope: %s", err);
    /* a Megatron YAML: switches that ask for nothing are accepted */
    const char *y = "use_mcore_models: true\nfp16: false\ntensorboard_dir: null\ncontext_parallel_size: 1\n"
                    "overlap_param_gather: false\ntrain_samples: 320\nglobal_batch_size: 16\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "m.yaml", err, sizeof err) == 0 && cfg_resolve_megatron(&c, err, sizeof err) == 0 &&
              c.train_iters == 20 && !c.megatron_ignored[0] && !c.megatron_ignored[1], "Megatron YAML: %s (iters %d)", err, c.train_iters);
    /* YAML's nulls leave a setting alone, whatever its type (Megatron's gpt_config.yaml gives dozens); a quoted
     * "null" is a string */
    y = "tensorboard_dir: null\nload: ~\nsave:\nlr_decay_iters: null\nstart_weight_decay: Null\n"
        "decoupled_min_lr: NULL\nrecompute_granularity: null\nnum_layers: 4\nhidden_size: 64\n"
        "num_attention_heads: 4\nseq_length: 32\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "m.yaml", err, sizeof err) == 0 && cfg_resolve_megatron(&c, err, sizeof err) == 0 &&
              !c.tensorboard_dir[0] && !c.load[0] && !c.save[0] && c.lr_decay_iters == 0 &&
              isnan(c.start_weight_decay) && isnan(c.decoupled_min_lr) && c.num_layers == 4,
          "YAML nulls: %s (tensorboard_dir '%s')", err, c.tensorboard_dir);
    y = "tensorboard_dir: \"null\"\nlr: nul\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "m.yaml", err, sizeof err) == -1 && !strcmp(c.tensorboard_dir, "null") &&
              strstr(err, "line 2: --lr: 'nul' is not a finite number"), "quoted null, a typo: %s", err);
    y = "fp16: true\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "m.yaml", err, sizeof err) == -1 && strstr(err, "m.yaml: line 1: --fp16: fp16"),
          "YAML fp16: '%s'", err);
}

/* Megatron's ramp, step by step in floating point as its calculator does: the
 * batch after `done` samples, and the iterations --train-samples takes. */
static int naive_batch(int start, int inc, double samples, int gbs, uint64_t done)
{
    if ((double)done > samples) return gbs;
    double per = samples / ((gbs - start) / inc);
    int b = start + (int)((double)done / per) * inc;
    return b < gbs ? b : gbs;
}

static long long naive_iters(int start, int inc, uint64_t ramp, int gbs, uint64_t train)
{
    long long it = 0;
    uint64_t done = 0;
    while (done <= ramp && done <= train) {
        done += (uint64_t)naive_batch(start, inc, (double)ramp, gbs, done);
        it++;
    }
    return it + (train > done ? (long long)((train - done) / (uint64_t)gbs) : 0);
}

/* --rampup-batch-size: the batch each step takes, the iterations samples make,
 * the schedule's decay, the layout rules, and the JobSpec-like round trip. */
static void test_rampup(void)
{
    atoll_config c;
    char err[512] = "", line[1024];
    const char *model = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 ";
    snprintf(line, sizeof line, "%s--global-batch-size 12 --rampup-batch-size 4 4 24 --train-samples 100", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && !strcmp(c.rampup_batch_size, "4 4 24"), "ramp: %s", err);
    /* 3 increments over 24 samples, one per 8: 4, 4, 4 (12 done), 8, 8 (28 > 24), then 12 */
    const int want[] = { 4, 4, 4, 8, 8, 12, 12 };
    uint64_t done = 0;
    for (int i = 0; i < 7; i++) {
        CHECK(cfg_batch_at(&c, 1, done) == want[i], "step %d after %llu samples: %d, want %d", i + 1,
              (unsigned long long)done, cfg_batch_at(&c, 1, done), want[i]);
        done += (uint64_t)want[i];
    }
    CHECK(c.train_iters == 11 && cfg_samples_after(&c, 1, 11) == 100 && cfg_samples_after(&c, 1, 3) == 12,
          "iterations %d, samples after 11: %llu", c.train_iters, (unsigned long long)cfg_samples_after(&c, 1, 11));
    CHECK(c.lr_decay_iters == 8, "the decay spans 100 samples, 8 batches of 12: %d", c.lr_decay_iters);
    CHECK(cfg_validate_layout(&c, 1, 0, err, sizeof err) == 0 && cfg_validate_layout(&c, 2, 0, err, sizeof err) == 0,
          "dp 1 and 2: %s", err);
    c.global_batch_size = 24; /* 4 + 5 x 4: whole micro-batches for dp 4 at the end, not on the way */
    CHECK(cfg_validate_layout(&c, 4, 0, err, sizeof err) == -1 && strstr(err, "every batch of the ramp must be divisible "
          "by micro-batch * dp = 2*4 = 8"), "dp 4: %s", err);
    c.pipeline_model_parallel_size = 2;
    c.num_layers_per_virtual_pipeline_stage = 1;
    CHECK(cfg_validate_layout(&c, 2, 0, err, sizeof err) == 0 && cfg_validate_layout(&c, 4, 0, err, sizeof err) == -1 &&
              strstr(err, "2*2 times pp (interleaved) = 8"), "interleaved: %s", err);
    /* a YAML list and commas, as Megatron's nargs=3 */
    const char *y = "rampup_batch_size: [4, 4, 24]\nglobal_batch_size: 12\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "r.yaml", err, sizeof err) == 0 && !strcmp(c.rampup_batch_size, "4 4 24"),
          "YAML list: %s '%s'", err, c.rampup_batch_size);
    CHECK(cfg_set(&c, "rampup-batch-size", "4,4,24", err, sizeof err) == CFG_OK && !strcmp(c.rampup_batch_size, "4 4 24") &&
              cfg_set(&c, "rampup-batch-size", "", err, sizeof err) == CFG_OK && !c.rampup_batch_size[0] &&
              cfg_batch_at(&c, 1, 0) == 12, "commas, then cleared: %s", err);
    /* --train-iters given: the decay spans the samples those iterations take */
    snprintf(line, sizeof line, "%s--global-batch-size 12 --rampup-batch-size 4 4 24 --train-iters 20", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && c.lr_decay_iters == (int)((cfg_samples_after(&c, 1, 20) + 6) / 12) &&
              cfg_samples_after(&c, 1, 20) == 28 + 15 * 12, "--train-iters: decay %d: %s", c.lr_decay_iters, err);
    snprintf(line, sizeof line, "%s--rampup-batch-size 4 4 24 --train-samples 100", model);
    CHECK(parse(&c, line, err, sizeof err) == -1 && strstr(err, "--rampup-batch-size needs --global-batch-size"),
          "no global batch: %s", err);
    /* --decrease-batch-size-if-needed: each batch down to whole micro-batches on every DP rank (times pp
     * when interleaved), the ramp's too; refused only when not even one round fits */
    snprintf(line, sizeof line, "%s--global-batch-size 16 --decrease-batch-size-if-needed", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_validate_layout(&c, 3, 0, err, sizeof err) == 0 &&
              cfg_batch_at(&c, 3, 0) == 12 && cfg_micro_batches(&c, 3) == 2 && cfg_batch_at(&c, 4, 0) == 16 &&
              cfg_micro_batches(&c, 4) == 2, "mb 2, dp 3: %d a step (%s)", cfg_batch_at(&c, 3, 0), err);
    CHECK(cfg_validate_layout(&c, 16, 0, err, sizeof err) == -1 && strstr(err, "--decrease-batch-size-if-needed: the "
          "--global-batch-size 16 is less than micro-batch * dp = 2*16 = 32"), "dp 16: %s", err);
    c.pipeline_model_parallel_size = 2;
    c.num_layers_per_virtual_pipeline_stage = 1;
    CHECK(cfg_validate_layout(&c, 6, 0, err, sizeof err) == 0 && cfg_batch_at(&c, 3, 0) == 12 &&
              cfg_micro_batches(&c, 3) == 2 && cfg_batch_at(&c, 2, 0) == 16, "interleaved dp 3: %d (%s)",
          cfg_batch_at(&c, 3, 0), err);
    c.pipeline_model_parallel_size = 1;
    c.num_layers_per_virtual_pipeline_stage = 0;
    snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "4 4 24");
    CHECK(cfg_validate_layout(&c, 3, 0, err, sizeof err) == -1 && strstr(err, "the ramp's first batch 4 is less than "
          "micro-batch * dp = 2*3 = 6"), "ramp from 4 at dp 3: %s", err);
    snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "6 5 20");
    CHECK(cfg_validate_layout(&c, 3, 0, err, sizeof err) == 0 && cfg_batch_at(&c, 3, 0) == 6 &&
              cfg_batch_at(&c, 3, 10) == 6 && cfg_batch_at(&c, 3, 20) == 12, "ramp 6 11 16 at dp 3 is 6 6 12: %d %d (%s)",
          cfg_batch_at(&c, 3, 10), cfg_batch_at(&c, 3, 20), err);
    /* against the step-by-step count, for ramps small and as large as GPT-3's (16 16 5859375 to 1536) */
    CHECK(naive_iters(16, 16, 5859375, 1536, 146484375) > 0, "naive count");
    unsigned seed = 7;
    for (int t = 0; t < 300; t++) {
        seed = seed * 1103515245u + 12345u;
        int inc = 1 + (int)(seed >> 8) % 9, n = 1 + (int)(seed >> 12) % 30, start = inc * (1 + (int)(seed >> 4) % 5);
        int gbs = start + n * inc;
        uint64_t ramp = (uint64_t)n * (1 + (seed >> 16) % 97) + (seed >> 3) % 7, train = ramp / 2 + (seed >> 5) % 5000;
        if (t == 0) { start = 16; inc = 16; gbs = 1536; ramp = 5859375; train = 146484375; }
        snprintf(line, sizeof line, "%s--global-batch-size %d --rampup-batch-size %d %d %llu --train-samples %llu", model,
                 gbs, start, inc, (unsigned long long)ramp, (unsigned long long)train);
        long long want_it = naive_iters(start, inc, ramp, gbs, train);
        CHECK(parse(&c, line, err, sizeof err) == 0 && c.train_iters == want_it, "%s: %d iterations, want %lld (%s)",
              line, c.train_iters, want_it, err);
        uint64_t at = 0;
        for (long long i = 0; i < want_it && i < 400; i++) {
            int b = naive_batch(start, inc, (double)ramp, gbs, at);
            if (cfg_batch_at(&c, 1, at) != b) {
                CHECK(0, "%s: step %lld after %llu samples: %d, want %d", line, i + 1, (unsigned long long)at,
                      cfg_batch_at(&c, 1, at), b);
                break;
            }
            at += (uint64_t)b;
        }
    }
}

/* Megatron's step schedule as its calculator reads it, for `n` entries of
 * thresholds in tokens (ascending) and batches: the batch after `done` samples,
 * and the iterations --train-samples takes (steps while fewer are consumed). */
static int naive_sched_batch(const unsigned long long *tokens, const int *bs, int n, int seq, uint64_t done)
{
    int b = bs[0];
    for (int i = 0; i < n; i++) {
        if (done >= tokens[i] / (unsigned long long)seq) b = bs[i];
        else break;
    }
    return b;
}

static long long naive_sched_iters(const unsigned long long *tokens, const int *bs, int n, int seq, uint64_t train)
{
    long long it = 0;
    for (uint64_t done = 0; done < train; it++) done += (uint64_t)naive_sched_batch(tokens, bs, n, seq, done);
    return it;
}

/* --step-batch-size-schedule (Megatron's, GPT-3's in its example script): the
 * text read as Megatron reads it, the batch of each step, the iterations
 * samples make, the rules against the other batch flags and the layout. */
static void test_step_schedule(void)
{
    atoll_config c;
    char err[768] = "", line[2048];
    /* Megatron's GPT-3 175B launch line (examples/gpt3), one quoted word; it gives --global-batch-size too,
     * equal to the schedule's last batch */
    char *gpt3[] = { "--num-layers", "96", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length",
                     "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size",
                     "1536", "--step-batch-size-schedule", "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536",
                     "--train-iters", "500000", "--lr-decay-iters", "430000", "--lr-warmup-fraction", ".001",
                     "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--bf16" };
    cfg_defaults(&c);
    CHECK(cfg_parse_args(&c, (int)(sizeof gpt3 / sizeof *gpt3), gpt3, 0, NULL, NULL, err, sizeof err) == 0 &&
              !strcmp(c.step_batch_size_schedule, "0:16 2400000000:320 4800000000:624 7200000000:928 9600000000:1232 "
                      "12000000000:1536") && c.global_batch_size == 1536,
          "GPT-3's schedule: %s '%s'", err, c.step_batch_size_schedule);
    uint64_t from[CFG_MAX_SCHEDULE];
    int bs[CFG_MAX_SCHEDULE];
    CHECK(cfg_batch_schedule(&c, from, bs) == 6 && from[1] == 1171875 && bs[1] == 320 && from[5] == 5859375 &&
              bs[5] == 1536, "in samples: %llu:%d .. %llu:%d", (unsigned long long)from[1], bs[1],
          (unsigned long long)from[5], bs[5]);
    CHECK(cfg_batch_at(&c, 8, 0) == 16 && cfg_batch_at(&c, 8, 1171874) == 16 && cfg_batch_at(&c, 8, 1171875) == 320 &&
              cfg_batch_at(&c, 8, 5859375) == 1536 && cfg_batch_at(&c, 8, UINT64_MAX / 2) == 1536 &&
              cfg_batch_max(&c, 8) == 1536 && cfg_batch_varies(&c),
          "batches: %d %d %d", cfg_batch_at(&c, 8, 0), cfg_batch_at(&c, 8, 1171875), cfg_batch_at(&c, 8, 5859375));
    CHECK(cfg_validate_layout(&c, 1024, 0, err, sizeof err) == 0, "1024 GPUs, dp 8: %s", err);
    CHECK(cfg_validate_layout(&c, 4096, 0, err, sizeof err) == -1 && strstr(err, "every batch must be divisible by "
          "micro-batch * dp = 1*32 = 32; entry 1's, 16, is not"), "4096 GPUs, dp 32: %s", err);
    /* the same schedule as Megatron's launch lines give it otherwise: entries unquoted, commas, lower-case
     * suffixes, fractions of a suffix, out of order; no --global-batch-size: the last batch is it */
    const char *model = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 ";
    snprintf(line, sizeof line, "%s--step-batch-size-schedule 1.5k:16,0:4 64:8 --train-iters 9", model);
    CHECK(parse(&c, line, err, sizeof err) == 0 && !strcmp(c.step_batch_size_schedule, "0:4 64:8 1500:16") &&
              c.global_batch_size == 16 && cfg_global_batch(&c, 1) == 16,
          "words: %s '%s' %d", err, c.step_batch_size_schedule, c.global_batch_size);
    /* 64 tokens are sample 2, 1500 sample 46: 4 at sample 0, 8 from 4 to 44, 16 from 52 */
    const int want[] = { 4, 8, 8, 8, 8, 8, 8, 16, 16 };
    uint64_t done = 0;
    for (int i = 0; i < 9; i++) {
        CHECK(cfg_batch_at(&c, 1, done) == want[i], "step %d after %llu samples: %d, want %d", i + 1,
              (unsigned long long)done, cfg_batch_at(&c, 1, done), want[i]);
        done += (uint64_t)want[i];
    }
    CHECK(cfg_samples_after(&c, 1, 9) == done && c.lr_decay_iters == (int)((done + 8) / 16),
          "9 steps take %llu samples; the decay spans them in batches of 16: %d", (unsigned long long)done,
          c.lr_decay_iters);
    /* a batch above the last one: buffers are sized by the largest */
    CHECK(cfg_set(&c, "step-batch-size-schedule", "0:32 1K:16", err, sizeof err) == CFG_OK && cfg_batch_max(&c, 1) == 32 &&
              cfg_global_batch(&c, 1) == 16, "largest batch %d: %s", cfg_batch_max(&c, 1), err);
    /* YAML: a string, as Megatron's, or a list */
    const char *y = "step_batch_size_schedule: \"0:8 1K:16\"\nseq_length: 32\n";
    cfg_defaults(&c);
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "s.yaml", err, sizeof err) == 0 &&
              !strcmp(c.step_batch_size_schedule, "0:8 1000:16"), "YAML: %s '%s'", err, c.step_batch_size_schedule);
    y = "step_batch_size_schedule: [\"0:8\", \"2K:16\"]\n";
    CHECK(cfg_parse_yaml(&c, y, strlen(y), "s.yaml", err, sizeof err) == 0 &&
              !strcmp(c.step_batch_size_schedule, "0:8 2000:16"), "YAML list: %s '%s'", err, c.step_batch_size_schedule);
    CHECK(cfg_set(&c, "step-batch-size-schedule", "", err, sizeof err) == CFG_OK && !c.step_batch_size_schedule[0] &&
              !cfg_batch_varies(&c), "cleared");
    /* every bad value named, with what is accepted */
    const struct { const char *flags, *says; } bad[] = {
        { "--step-batch-size-schedule 0:16 abc", "takes entries THRESHOLD:BATCH" },
        { "--step-batch-size-schedule 16", "'16' is not one" },
        { "--step-batch-size-schedule 0:16 -5:32", "'-5:32' is not one" },
        { "--step-batch-size-schedule 0:0x10", "'0:0x10' is not one" },
        { "--step-batch-size-schedule 0:16 1K:0", "entry '1K:0': its batch must be 1 to" },
        { "--step-batch-size-schedule 0:2G", "'0:2G' is not one" },
        { "--step-batch-size-schedule 64:16 1K:32", "the first entry must start at 0 tokens" },
        { "--step-batch-size-schedule 0:8 16:16", "entries 1 and 2 both start at sample 0 (tokens / --seq-length 32" },
        { "--step-batch-size-schedule 0:8 1K:16 --global-batch-size 8", "--global-batch-size 8 and "
          "--step-batch-size-schedule 0:8 1000:16, whose last batch is 16" },
        { "--step-batch-size-schedule 0:8 1K:16 --rampup-batch-size 4 4 100", "both say how the batch grows; give one" },
        { "--step-batch-size-schedule 0:8 1K:16 --decrease-batch-size-if-needed", "leave --decrease-batch-size-if-"
          "needed out" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(line, sizeof line, "%s%s", model, bad[i].flags);
        err[0] = 0;
        CHECK(parse(&c, line, err, sizeof err) == -1 && strstr(err, bad[i].says), "%s: '%s'", bad[i].flags, err);
    }
    /* 32 entries are taken, 33 are not */
    size_t at = (size_t)snprintf(line, sizeof line, "%s--step-batch-size-schedule", model);
    for (int i = 0; i < 33; i++) at += (size_t)snprintf(line + at, sizeof line - at, " %dK:%d", i, 2 * (i + 1));
    CHECK(parse(&c, line, err, sizeof err) == -1 && strstr(err, "more than 32 entries"), "33 entries: %s", err);
    *strrchr(line, ' ') = 0;
    CHECK(parse(&c, line, err, sizeof err) == 0 && cfg_batch_schedule(&c, NULL, NULL) == 32 &&
              c.global_batch_size == 64, "32 entries: %s", err);
    /* against Megatron's step-by-step reading, on random schedules */
    unsigned seed = 11;
    for (int t = 0; t < 300; t++) {
        unsigned long long tokens[8];
        int b[8], n = 1 + (int)((seed >> 7) % 8), seq = 1 + (int)((seed >> 3) % 64);
        at = (size_t)snprintf(line, sizeof line, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                              "--seq-length %d --step-batch-size-schedule", seq);
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            tokens[i] = i ? tokens[i - 1] + (unsigned long long)seq * (1 + (seed >> 9) % 500) : (seed >> 5) % seq;
            b[i] = 1 + (int)((seed >> 16) % 40);
            at += (size_t)snprintf(line + at, sizeof line - at, " %llu:%d", tokens[i], b[i]);
        }
        uint64_t train = 1 + (seed >> 4) % 20000;
        snprintf(line + at, sizeof line - at, " --train-samples %llu", (unsigned long long)train);
        long long want_it = naive_sched_iters(tokens, b, n, seq, train);
        CHECK(parse(&c, line, err, sizeof err) == 0 && c.train_iters == want_it, "%s: %d iterations, want %lld (%s)",
              line, c.train_iters, want_it, err);
        uint64_t d = 0;
        for (long long i = 0; i < want_it && i < 2000; i++) {
            int nb = naive_sched_batch(tokens, b, n, seq, d);
            if (cfg_batch_at(&c, 1, d) != nb) {
                CHECK(0, "%s: step %lld after %llu samples: %d, want %d", line, i + 1, (unsigned long long)d,
                      cfg_batch_at(&c, 1, d), nb);
                break;
            }
            d += (uint64_t)nb;
        }
    }
}

/* --dependency text: Slurm's syntax in, one canonical form out, and every bad
 * form named with what is accepted. */
static void test_dependency_text(void)
{
    dep_list d;
    char err[256] = "", out[256];
    CHECK(dep_parse("afterany:5,afterok:3:4", &d, err, sizeof err) == 0 && d.n == 3 && d.item[0].kind == DEP_AFTERANY &&
              d.item[2].job == 4, "parse: %s", err);
    dep_format(&d, out, sizeof out);
    CHECK(!strcmp(out, "afterok:3:4,afterany:5"), "format: '%s'", out);
    CHECK(dep_parse(NULL, &d, err, sizeof err) == 0 && d.n == 0 && dep_parse("", &d, err, sizeof err) == 0 && d.n == 0,
          "no dependency");
    const struct { const char *text, *says; } bad[] = {
        { "afterok", "'afterok' is not a condition" },
        { "afterok:3x", "'3x' after afterok: is not a job id" },
        { "afterok:0", "'0' after afterok: is not a job id" },
        { "afterok:-3", "'-3' after afterok: is not a job id" },
        { "afterok:18446744073709551616", "is not a job id" },
        { "afterok:3::4", "'' after afterok: is not a job id" },
        { "singleton", "'singleton' is not a condition (accepted: afterok:JOB[:JOB...]" },
        { ",afterok:3", "'' is not a condition" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(dep_parse(bad[i].text, &d, err, sizeof err) == -1 && strstr(err, bad[i].says), "%s: '%s'", bad[i].text,
              err);
    char many[1024] = "afterok";
    for (int k = 1; k <= DEP_MAX + 1; k++) snprintf(many + strlen(many), sizeof many - strlen(many), ":%d", k);
    CHECK(dep_parse(many, &d, err, sizeof err) == -1 && strstr(err, "more than 64 jobs"), "65 jobs: '%s'", err);
    CHECK(dep_met(DEP_AFTEROK, ATOLL__JOB_STATE__JOB_RUNNING) == 0 &&
              dep_met(DEP_AFTEROK, ATOLL__JOB_STATE__JOB_FAILED) == -1 && dep_met(DEP_AFTERNOTOK, ATOLL__JOB_STATE__JOB_CANCELLED) == 1 &&
              dep_met(DEP_AFTERANY, ATOLL__JOB_STATE__JOB_COMPLETED) == 1, "dep_met");
}

int main(int argc, char **argv)
{
    (void)argc;
    test_flags();
    test_yaml();
    test_layout_rules();
    test_uneven_stages();
    test_ranges_and_overflow();
    test_rank_order();
    test_yaml_refusals();
    test_flops();
    test_specs_and_topo();
    test_megatron_flags();
    test_rampup();
    test_step_schedule();
    test_dependency_text();
    return check_summary(argv[0]);
}
