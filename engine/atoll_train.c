/* atoll-train: one engine rank. Megatron-LM flags (and --yaml-cfg) go through
 * common/config; the engine's own flags are handled here. */
#include "config.h"
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: atoll-train [Megatron-LM flags] [--yaml-cfg FILE] [engine flags]\n"
            "model:    --num-layers N --hidden-size H --num-attention-heads A --seq-length T\n"
            "          [--max-position-embeddings P] [--vocab-size V (256)] [--ffn-hidden-size F]\n"
            "          [--untie-embeddings-and-output-weights]\n"
            "training: --micro-batch-size B --global-batch-size G --train-iters I --lr LR --min-lr LR\n"
            "          --lr-decay-style {cosine,linear,constant} --lr-warmup-iters N --lr-decay-iters N\n"
            "          --weight-decay W --adam-beta1 B1 --adam-beta2 B2 --adam-eps E --clip-grad C --seed S\n"
            "data:     --data-path PREFIX (Megatron .bin/.idx; without it the built-in corpus) --split 969,30,1\n"
            "ckpt:     --save DIR --save-interval N --load DIR\n"
            "logging:  --log-interval N --metrics-file FILE (one JSON object per logged step)\n"
            "engine:   --device {cpu,cuda} --exit-interval N\n");
}

static int extra(void *ctx, int argc, char **argv, int i, char *err, size_t errlen)
{
    eng_run_opts *o = ctx;
    const char *a = argv[i];
    struct { const char *flag; char *dst; size_t size; } strs[] = {
        { "--device", o->device, sizeof o->device },
        { "--metrics-file", o->metrics_file, sizeof o->metrics_file },
        { "--dump-dir", o->dump_dir, sizeof o->dump_dir },
    };
    for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++) {
        size_t fl = strlen(strs[k].flag);
        if (strncmp(a, strs[k].flag, fl) || (a[fl] && a[fl] != '=')) continue;
        const char *v = a[fl] == '=' ? a + fl + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        if (!v) { snprintf(err, errlen, "%s needs a value", strs[k].flag); return -1; }
        if (strlen(v) >= strs[k].size) { snprintf(err, errlen, "%s: value too long", strs[k].flag); return -1; }
        snprintf(strs[k].dst, strs[k].size, "%s", v);
        return a[fl] == '=' ? 1 : 2;
    }
    if (!strcmp(a, "--exit-interval")) {
        char *end;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
        if (i + 1 >= argc || *end || v < 0) {
            snprintf(err, errlen, "--exit-interval needs a non-negative iteration count");
            return -1;
        }
        o->exit_interval = (int)v;
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    atoll_config c;
    eng_run_opts o;
    char err[1024] = "";
    cfg_defaults(&c);
    eng_run_opts_defaults(&o);
    if (cfg_parse_args(&c, argc, argv, 1, extra, &o, err, sizeof err)) {
        fprintf(stderr, "atoll-train: %s\n", err);
        return 2;
    }
    if (c.bf16 && !strcmp(o.device, "cpu"))
        fprintf(stderr, "atoll-train: note: --bf16 has no effect on --device cpu (fp32 reference)\n");
    if (c.recompute_granularity != RECOMPUTE_NONE)
        fprintf(stderr, "atoll-train: note: --recompute-granularity %s is accepted; this engine keeps every "
                "activation (same results, more memory)\n", cfg_recompute_name(c.recompute_granularity));
    if (eng_train(&c, &o, err, sizeof err)) {
        fprintf(stderr, "atoll-train: %s\n", err);
        return 1;
    }
    return 0;
}
