/* atoll-train: one engine rank, or with --nproc-per-node N the local launcher
 * of N ranks. Megatron-LM flags (and --yaml-cfg) go through common/config; the
 * engine's own flags are handled here. */
#include "config.h"
#include "groups.h"
#include "launcher.h"
#include "supervise.h"
#include "checkpoint.h"
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: atoll-train [Megatron-LM flags] [--yaml-cfg FILE] [engine flags]\n"
            "       atoll-train {generate,export,import,data prepare} ... (the atoll commands of that name)\n"
            "model:    --num-layers N --hidden-size H --num-attention-heads A --seq-length T\n"
            "          [--max-position-embeddings P] [--vocab-size V (256)] [--ffn-hidden-size F]\n"
            "          [--untie-embeddings-and-output-weights]\n"
            "training: --micro-batch-size B --global-batch-size G --train-iters I --lr LR --min-lr LR\n"
            "          --rampup-batch-size START INCREMENT SAMPLES (the global batch grows to G, Megatron's)\n"
            "          --step-batch-size-schedule \"0:16 2.4B:320 ..\" (BATCH from THRESHOLD tokens; the last is G)\n"
            "          --lr-decay-style {cosine,linear,constant,WSD,inverse-square-root} --lr-warmup-iters N\n"
            "          --lr-decay-iters N --lr-wsd-decay-iters N --lr-wsd-decay-style {exponential,linear,cosine,\n"
            "          minus_sqrt}\n"
            "          --weight-decay W --adam-beta1 B1 --adam-beta2 B2 --adam-eps E --clip-grad C --seed S\n"
            "          --weight-decay-incr-style {constant,linear,cosine} --start-weight-decay W0\n"
            "          --end-weight-decay W1 (linear, cosine: from W0 to W1 over the run, Megatron's)\n"
            "          --decoupled-lr LR --decoupled-min-lr LR (the token embedding and output layer's)\n"
            "          --lr-warmup-init LR --exit-interval N (stop after iteration N)\n"
            "          --exit-duration-in-mins M (then a checkpoint and exit 75)\n"
            "data:     --data-path PREFIX (Megatron .bin/.idx; without it the built-in corpus) --split 969,30,1\n"
            "          or --train-data-path P --valid-data-path P --test-data-path P (each used whole)\n"
            "ckpt:     --save DIR --save-interval N --load DIR --async-save --save-mtbf SEC --save-keep N\n"
            "          another run's --load: --finetune (weights only, from iteration 0) --no-load-optim\n"
            "          --no-load-rng --exit-on-missing-checkpoint --ckpt-step N\n"
            "numerics: --deterministic-dp (gradients summed in fp64: the same weights whatever the DP size)\n"
            "logging:  --log-interval N --metrics-file FILE (one JSON object per logged step) --log-params-norm\n"
            "          --tensorboard-dir DIR --tensorboard-log-interval N --log-validation-ppl-to-tensorboard\n"
            "          --log-timers-to-tensorboard --log-batch-size-to-tensorboard --log-world-size-to-tensorboard\n"
            "          --log-memory-to-tensorboard --log-num-zeros-in-grad\n"
            "          (Megatron's TensorBoard scalars, written by rank 0)\n"
            "parallel: --tensor-model-parallel-size T --pipeline-model-parallel-size P\n"
            "          --num-layers-per-virtual-pipeline-stage L --sequence-parallel --use-distributed-optimizer\n"
            "          --microbatch-group-size-per-virtual-pipeline-stage G (interleaved: G micro-batches through\n"
            "          each chunk in turn; P by default)\n"
            "          --decoder-first-pipeline-num-layers N --decoder-last-pipeline-num-layers N (uneven stages)\n"
            "          --recompute-granularity {selective,full}\n"
            "engine:   --device {cpu,cuda} --attention-backend {auto,flash,fused} (fused: cuDNN, cuda bf16)\n"
            "          --tune-gemms (cuda: each GEMM's cuBLASLt algorithm chosen by time; kept in --save)\n"
            "          --enable-cuda-graph (cuda, one rank: a micro-batch's kernels launched as one CUDA graph)\n"
            "          --nondeterministic-attention (cuda, cuDNN attention: dQ summed by atomic adds; faster, but\n"
            "          not bit-reproducible)\n"
            "          --overlap-wgrad (cuda: the weight-gradient GEMMs on a second stream, beside the rest of the\n"
            "          backward; the same bits)\n"
            "          --nproc-per-node N (local launcher)\n"
            "          --print-groups (the rank groups as JSON for --nproc-per-node, WORLD_SIZE or --num-gpus)\n");
}

typedef struct cli {
    eng_run_opts o;
    int nproc, print_groups;
} cli;

static int extra(void *ctx, int argc, char **argv, int i, char *err, size_t errlen)
{
    cli *cl = ctx;
    eng_run_opts *o = &cl->o;
    const char *a = argv[i];
    if (!strcmp(a, "--print-groups")) {
        cl->print_groups = 1;
        return 1;
    }
    if (!strcmp(a, "--nproc-per-node") || !strcmp(a, "--nproc_per_node") || !strncmp(a, "--nproc-per-node=", 17) ||
        !strncmp(a, "--nproc_per_node=", 17)) {
        int eq = a[16] == '=';
        const char *v = eq ? a + 17 : (i + 1 < argc ? argv[i + 1] : "");
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 1 || n > 1024) {
            snprintf(err, errlen, "--nproc-per-node needs a rank count from 1 to 1024, not '%s'", v);
            return -1;
        }
        cl->nproc = (int)n;
        return eq ? 1 : 2;
    }
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
    return 0;
}

/* `atoll generate|export|import|data prepare` run here: the CLI execs
 * atoll-train with the command's words, so that it links no engine. */
static int command(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = { { "generate", generate_main }, { "export", export_main }, { "import", import_main } };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    if (!strcmp(argv[1], "data") && argc > 2 && !strcmp(argv[2], "prepare")) return data_prepare_main(argc - 2, argv + 2);
    fprintf(stderr, "atoll-train: unknown command '%s'; the commands are generate, export, import and data prepare "
                    "(or, with flags alone, a training run: --help)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] != '-') return command(argc, argv);
    if (sup_child_guard()) {
        fprintf(stderr, "atoll-train: the process that started this rank is gone; exiting\n");
        return 1;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    atoll_config c;
    cli cl = { .nproc = 0 };
    eng_run_opts *o = &cl.o;
    char err[2048] = "";
    cfg_defaults(&c);
    eng_run_opts_defaults(o);
    if (cfg_parse_args(&c, argc, argv, 1, extra, &cl, err, sizeof err)) {
        fprintf(stderr, "atoll-train: %s\n", err);
        return 2;
    }
    int by_hand = !getenv("ATOLL_SUPERVISOR_PID"); /* not a rank a supervisor (launcher, workerd) started */
    int says = by_hand && (!getenv("RANK") || !strcmp(getenv("RANK"), "0"));
    if (says) cfg_megatron_notes(&c, "atoll-train", stderr); /* once, not by every rank of a launch */
    if (c.use_checkpoint_args) {
        char taken[1024];
        if (ckpt_use_args(&c, taken, sizeof taken, err, sizeof err)) {
            fprintf(stderr, "atoll-train: %s\n", err);
            return SUP_EXIT_CONFIG;
        }
        if (says) fprintf(stderr, "atoll-train: --use-checkpoint-args: from %s/%s\n", c.load, taken);
    }
    /* a supervised rank's --load may be the job's --save (a restart): not a submission */
    if (by_hand && cfg_validate_submission(&c, err, sizeof err)) {
        fprintf(stderr, "atoll-train: %s\n", err);
        return 2;
    }
    if (cl.print_groups) {
        int world = cl.nproc ? cl.nproc : getenv("WORLD_SIZE") ? atoi(getenv("WORLD_SIZE")) : c.num_gpus ? c.num_gpus : 1;
        return groups_print_json(stdout, world, c.tensor_model_parallel_size, c.pipeline_model_parallel_size,
                                 c.rank_order) ? 2 : 0;
    }
    /* The launcher: check the layout once here rather than in N ranks. */
    if (cl.nproc && !getenv("RANK")) {
        if (cfg_validate_layout(&c, cl.nproc, 0, err, sizeof err)) {
            fprintf(stderr, "atoll-train: --nproc-per-node %d: %s\n", cl.nproc, err);
            return 2;
        }
        /* host memory is shared by the N ranks; a GPU rank checks its own device */
        if (strcmp(o->device, "cuda") && eng_memory_check(&c, cl.nproc, cl.nproc, o->device, NULL, NULL, err, sizeof err)) {
            fprintf(stderr, "atoll-train: --nproc-per-node %d: %s\n", cl.nproc, err);
            return SUP_EXIT_CONFIG;
        }
        return launcher_run(cl.nproc, argc, argv);
    }
    int rc = eng_train(&c, o, err, sizeof err);
    if (rc < 0) {
        const char *r = getenv("RANK");
        if (r) fprintf(stderr, "atoll-train: rank %s: %s\n", r, err);
        else fprintf(stderr, "atoll-train: %s\n", err);
        return rc == ENG_ERR_CONFIG ? SUP_EXIT_CONFIG : 1;
    }
    return rc ? SUP_EXIT_SAVED : 0;
}
