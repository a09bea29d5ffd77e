#include "config.h"
#include "errf.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef enum { K_INT, K_DOUBLE, K_U64, K_BOOL, K_STR, K_RECOMPUTE, K_DECAY, K_WSD, K_WDINCR, K_RAMP, K_SCHED } key_type;

typedef struct {
    const char *name; /* canonical, dashes */
    key_type type;
    size_t offset;
    size_t size;      /* for K_STR */
    double lo, hi;    /* K_INT, K_DOUBLE: accepted values; hi excluded when hi_open */
    int hi_open;
} key_def;

/* The accepted range of every number is stated once, here. Integers default to
 * 0..INT_MAX, reals to finite and >= 0. The limits keep each product the layout
 * rules and the engine form (tp*pp, micro-batch*dp, tokens per step) exact in
 * 64-bit arithmetic; memory is checked separately, against the device. */
#define F(name, type, field) { name, type, offsetof(atoll_config, field), sizeof(((atoll_config *)0)->field), 0, 0, 0 }
#define R(name, type, field, lo, hi, open) \
    { name, type, offsetof(atoll_config, field), sizeof(((atoll_config *)0)->field), lo, hi, open }
static const key_def KEYS[] = {
    R("num-layers", K_INT, num_layers, 0, CFG_MAX_LAYERS, 0),
    R("hidden-size", K_INT, hidden_size, 0, CFG_MAX_HIDDEN, 0),
    R("num-attention-heads", K_INT, num_attention_heads, 0, CFG_MAX_HEADS, 0),
    R("ffn-hidden-size", K_INT, ffn_hidden_size, 0, 4.0 * CFG_MAX_HIDDEN, 0),
    R("seq-length", K_INT, seq_length, 0, CFG_MAX_SEQ, 0),
    R("max-position-embeddings", K_INT, max_position_embeddings, 0, CFG_MAX_SEQ, 0),
    R("vocab-size", K_INT, vocab_size, 0, CFG_MAX_VOCAB, 0),
    F("untie-embeddings-and-output-weights", K_BOOL, untie_embeddings_and_output_weights),
    R("tensor-model-parallel-size", K_INT, tensor_model_parallel_size, 1, CFG_MAX_RANKS, 0),
    R("pipeline-model-parallel-size", K_INT, pipeline_model_parallel_size, 1, CFG_MAX_RANKS, 0),
    R("num-layers-per-virtual-pipeline-stage", K_INT, num_layers_per_virtual_pipeline_stage, 0, CFG_MAX_LAYERS, 0),
    R("num-virtual-stages-per-pipeline-rank", K_INT, num_virtual_stages_per_pipeline_rank, 0, CFG_MAX_LAYERS, 0),
    R("microbatch-group-size-per-virtual-pipeline-stage", K_INT, microbatch_group_size_per_virtual_pipeline_stage, 0,
      CFG_MAX_GLOBAL_BATCH, 0),
    R("decoder-first-pipeline-num-layers", K_INT, decoder_first_pipeline_num_layers, 0, CFG_MAX_LAYERS, 0),
    R("decoder-last-pipeline-num-layers", K_INT, decoder_last_pipeline_num_layers, 0, CFG_MAX_LAYERS, 0),
    F("sequence-parallel", K_BOOL, sequence_parallel),
    F("use-distributed-optimizer", K_BOOL, use_distributed_optimizer),
    F("recompute-granularity", K_RECOMPUTE, recompute_granularity),
    F("recompute-method", K_STR, recompute_method),
    R("recompute-num-layers", K_INT, recompute_num_layers, 0, CFG_MAX_LAYERS, 0),
    R("micro-batch-size", K_INT, micro_batch_size, 1, CFG_MAX_MICRO_BATCH, 0),
    R("global-batch-size", K_INT, global_batch_size, 0, CFG_MAX_GLOBAL_BATCH, 0),
    R("num-gpus", K_INT, num_gpus, 0, CFG_MAX_RANKS, 0),
    F("rank-order", K_STR, rank_order),
    R("train-iters", K_INT, train_iters, 0, 2147483647.0, 0),
    R("lr-warmup-iters", K_INT, lr_warmup_iters, 0, 2147483647.0, 0),
    R("lr-decay-iters", K_INT, lr_decay_iters, 0, 2147483647.0, 0),
    R("lr", K_DOUBLE, lr, 0, HUGE_VAL, 0),
    R("min-lr", K_DOUBLE, min_lr, 0, HUGE_VAL, 0),
    R("decoupled-lr", K_DOUBLE, decoupled_lr, 0, HUGE_VAL, 0),
    R("decoupled-min-lr", K_DOUBLE, decoupled_min_lr, 0, HUGE_VAL, 0),
    R("weight-decay", K_DOUBLE, weight_decay, 0, HUGE_VAL, 0),
    R("adam-beta1", K_DOUBLE, adam_beta1, 0, 1, 1),
    R("adam-beta2", K_DOUBLE, adam_beta2, 0, 1, 1),
    R("adam-eps", K_DOUBLE, adam_eps, 0, HUGE_VAL, 0),
    R("clip-grad", K_DOUBLE, clip_grad, 0, HUGE_VAL, 0),
    F("lr-decay-style", K_DECAY, lr_decay_style),
    F("lr-wsd-decay-style", K_WSD, lr_wsd_decay_style),
    R("lr-wsd-decay-iters", K_INT, lr_wsd_decay_iters, 0, 2147483647.0, 0),
    F("weight-decay-incr-style", K_WDINCR, weight_decay_incr_style),
    R("start-weight-decay", K_DOUBLE, start_weight_decay, 0, HUGE_VAL, 0),
    R("end-weight-decay", K_DOUBLE, end_weight_decay, 0, HUGE_VAL, 0),
    F("seed", K_U64, seed),
    F("data-path", K_STR, data_path),
    F("train-data-path", K_STR, train_data_path),
    F("valid-data-path", K_STR, valid_data_path),
    F("test-data-path", K_STR, test_data_path),
    F("data-args-path", K_STR, data_args_path),
    F("per-split-data-args-path", K_STR, per_split_data_args_path),
    F("split", K_STR, split),
    F("save", K_STR, save),
    F("load", K_STR, load),
    R("save-interval", K_INT, save_interval, 0, 2147483647.0, 0),
    R("log-interval", K_INT, log_interval, 0, 2147483647.0, 0),
    R("eval-interval", K_INT, eval_interval, 0, 2147483647.0, 0),
    R("eval-iters", K_INT, eval_iters, 0, 2147483647.0, 0),
    F("bf16", K_BOOL, bf16),
    F("async-save", K_BOOL, async_save),
    R("save-mtbf", K_DOUBLE, save_mtbf, 0, HUGE_VAL, 0),
    R("save-keep", K_INT, save_keep, 0, 2147483647.0, 0),
    F("deterministic-dp", K_BOOL, deterministic_dp),
    R("lr-warmup-init", K_DOUBLE, lr_warmup_init, 0, HUGE_VAL, 0),
    R("init-method-std", K_DOUBLE, init_method_std, 0, HUGE_VAL, 0),
    R("embedding-init-method-std", K_DOUBLE, embedding_init_method_std, 0, HUGE_VAL, 0),
    F("eod-mask-loss", K_BOOL, eod_mask_loss),
    F("reset-position-ids", K_BOOL, reset_position_ids),
    F("reset-attention-mask", K_BOOL, reset_attention_mask),
    F("finetune", K_BOOL, finetune),
    F("no-load-optim", K_BOOL, no_load_optim),
    F("no-load-rng", K_BOOL, no_load_rng),
    F("exit-on-missing-checkpoint", K_BOOL, exit_on_missing_checkpoint),
    R("ckpt-step", K_INT, ckpt_step, 0, 2147483647.0, 0),
    R("exit-duration-in-mins", K_DOUBLE, exit_duration_in_mins, 0, HUGE_VAL, 0),
    R("exit-interval", K_INT, exit_interval, 0, 2147483647.0, 0),
    F("tensorboard-dir", K_STR, tensorboard_dir),
    R("tensorboard-log-interval", K_INT, tensorboard_log_interval, 0, 2147483647.0, 0),
    F("log-validation-ppl-to-tensorboard", K_BOOL, log_validation_ppl_to_tensorboard),
    F("log-timers-to-tensorboard", K_BOOL, log_timers_to_tensorboard),
    F("log-batch-size-to-tensorboard", K_BOOL, log_batch_size_to_tensorboard),
    F("log-world-size-to-tensorboard", K_BOOL, log_world_size_to_tensorboard),
    F("log-memory-to-tensorboard", K_BOOL, log_memory_to_tensorboard),
    F("log-params-norm", K_BOOL, log_params_norm),
    F("log-num-zeros-in-grad", K_BOOL, log_num_zeros_in_grad),
    F("no-log-learning-rate-to-tensorboard", K_BOOL, no_log_learning_rate_to_tensorboard),
    F("attention-backend", K_STR, attention_backend),
    F("tune-gemms", K_BOOL, tune_gemms),
    F("enable-cuda-graph", K_BOOL, enable_cuda_graph),
    F("nondeterministic-attention", K_BOOL, nondeterministic_attention),
    F("overlap-wgrad", K_BOOL, overlap_wgrad),
    F("normalization", K_STR, normalization),
    F("swiglu", K_BOOL, swiglu),
    F("squared-relu", K_BOOL, squared_relu),
    F("apply-layernorm-1p", K_BOOL, apply_layernorm_1p),
    F("position-embedding-type", K_STR, position_embedding_type),
    R("rotary-base", K_INT, rotary_base, 0, 2147483647.0, 0),
    R("rotary-percent", K_DOUBLE, rotary_percent, 0, 1, 0),
    F("use-rope-scaling", K_BOOL, use_rope_scaling),
    R("rope-scaling-factor", K_DOUBLE, rope_scaling_factor, 0, HUGE_VAL, 0),
    R("rotary-seq-len-interpolation-factor", K_INT, rotary_seq_len_interpolation_factor, 0, CFG_MAX_SEQ, 0),
    R("norm-epsilon", K_DOUBLE, norm_epsilon, 0, 1, 0),
    F("disable-bias-linear", K_BOOL, disable_bias_linear),
    F("add-qkv-bias", K_BOOL, add_qkv_bias),
    F("qk-layernorm", K_BOOL, qk_layernorm),
    F("group-query-attention", K_BOOL, group_query_attention),
    R("num-query-groups", K_INT, num_query_groups, 0, CFG_MAX_HEADS, 0),
    R("hidden-dropout", K_DOUBLE, hidden_dropout, 0, 1, 1),
    R("attention-dropout", K_DOUBLE, attention_dropout, 0, 1, 1),
    F("tokenizer-type", K_STR, tokenizer_type),
    F("vocab-file", K_STR, vocab_file),
    F("merge-file", K_STR, merge_file),
    F("tokenizer-model", K_STR, tokenizer_model),
    R("make-vocab-size-divisible-by", K_INT, make_vocab_size_divisible_by, 0, CFG_MAX_VOCAB, 0),
    R("padded-vocab-size", K_INT, padded_vocab_size, 0, CFG_MAX_VOCAB, 0),
    /* Megatron spellings of the settings above (cfg_resolve_megatron) */
    F("rampup-batch-size", K_RAMP, rampup_batch_size),
    F("step-batch-size-schedule", K_SCHED, step_batch_size_schedule),
    F("decrease-batch-size-if-needed", K_BOOL, decrease_batch_size_if_needed),
    F("train-samples", K_U64, train_samples),
    F("lr-decay-samples", K_U64, lr_decay_samples),
    F("lr-warmup-samples", K_U64, lr_warmup_samples),
    F("lr-wsd-decay-samples", K_U64, lr_wsd_decay_samples),
    R("lr-warmup-fraction", K_DOUBLE, lr_warmup_fraction, 0, 1, 0),
    F("use-rotary-position-embeddings", K_BOOL, use_rotary_position_embeddings),
    F("no-position-embedding", K_BOOL, no_position_embedding),
    F("recompute-activations", K_BOOL, recompute_activations),
    F("checkpoint-activations", K_BOOL, checkpoint_activations),
    F("use-tp-pp-dp-mapping", K_BOOL, use_tp_pp_dp_mapping),
    F("mock-data", K_BOOL, mock_data),
    R("kv-channels", K_INT, kv_channels, 0, CFG_MAX_HIDDEN, 0),
    F("use-checkpoint-args", K_BOOL, use_checkpoint_args),
    F("calculate-per-token-loss", K_BOOL, calculate_per_token_loss),
    F("account-for-embedding-in-pipeline-split", K_BOOL, account_for_embedding_in_pipeline_split),
    F("account-for-loss-in-pipeline-split", K_BOOL, account_for_loss_in_pipeline_split),
};
#undef F
#undef R
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))

static uint64_t ramp_walk(const atoll_config *c, int dp, uint64_t limit, long long max_iters, long long *iters);

void cfg_defaults(atoll_config *c)
{
    memset(c, 0, sizeof *c);
    c->vocab_size = 256; /* byte-level when no tokenizer is given */
    c->tensor_model_parallel_size = 1;
    c->pipeline_model_parallel_size = 1;
    c->micro_batch_size = 1;
    snprintf(c->rank_order, sizeof c->rank_order, "%s", CFG_DEFAULT_RANK_ORDER);
    c->train_iters = 10;
    c->lr = 1e-4;
    c->min_lr = 0.0;
    c->weight_decay = 0.01;
    c->start_weight_decay = c->end_weight_decay = NAN; /* not given */
    c->decoupled_min_lr = NAN;
    c->adam_beta1 = 0.9;
    c->adam_beta2 = 0.999;
    c->adam_eps = 1e-8;
    c->clip_grad = 1.0;
    c->lr_decay_style = LR_DECAY_COSINE;
    c->seed = 1234;
    snprintf(c->split, sizeof c->split, "969,30,1");
    c->save_interval = 0;
    c->log_interval = 1;
    c->eval_iters = 0;
    snprintf(c->attention_backend, sizeof c->attention_backend, "auto");
    snprintf(c->normalization, sizeof c->normalization, "LayerNorm");
    snprintf(c->position_embedding_type, sizeof c->position_embedding_type, "learned_absolute");
    c->rotary_base = 10000;
    c->rotary_percent = 1.0;
    c->rope_scaling_factor = 8.0; /* Megatron's default, LLaMA-3.1's (0 reads as 8: cfg_rope_factor) */
    c->norm_epsilon = 1e-5;
    c->init_method_std = 0.02;
    c->make_vocab_size_divisible_by = 128;
}

/* Flags compare with '-' and '_' as the same character, as Megatron's YAML does. */
static int same_key(const char *name, const char *key)
{
    while (*name && *key && (*name == *key || (*name == '-' && *key == '_'))) name++, key++;
    return !*name && !*key;
}

/* The keys that take several words, as Megatron's nargs='*' (a blend) or
 * nargs=3 (the ramp): the words up to the next flag, or a YAML list. A
 * schedule is one word in Megatron's launch lines; its entries unquoted are
 * taken too. */
static int list_key(const char *key)
{
    return same_key("data-path", key) || same_key("train-data-path", key) || same_key("valid-data-path", key) ||
           same_key("test-data-path", key) || same_key("rampup-batch-size", key) ||
           same_key("step-batch-size-schedule", key) || same_key("recompute-modules", key);
}

static const key_def *find_key(const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (same_key(KEYS[i].name, key)) return &KEYS[i];
    return NULL;
}

/* ---- Megatron-LM flags that are not settings here (config.h) ---- */
typedef enum {
    MG_SAME,    /* atoll does what it asks anyway: accepted */
    MG_VALUE,   /* accepted with the values atoll implements (`values`), refused with others */
    MG_REFUSED, /* asks for what atoll does not do: refused (a false or empty value asks for nothing) */
    MG_IGNORED, /* only speed in Megatron, not here: accepted and noted (cfg_megatron_notes) */
} mg_kind;

/* fp16's dynamic loss-scale flags, which bf16 launch lines often keep */
#define NO_LOSS_SCALE "loss scaling is for --fp16, which atoll does not implement; bf16 and fp32 train without a " \
                      "loss scale"
static const struct {
    const char *name;
    int takes_value;
    mg_kind kind;
    const char *values; /* MG_VALUE: the accepted values, space-separated (numbers compare as numbers) */
    const char *why;
} MEGATRON[] = {
    { "use-mcore-models", 0, MG_SAME, NULL, "atoll's model is Megatron-Core's GPT" },
    { "use-legacy-models", 0, MG_REFUSED, NULL, "atoll's model is Megatron-Core's GPT; leave the flag out" },
    { "transformer-impl", 1, MG_VALUE, "local transformer_engine", "atoll runs its own kernels either way" },
    { "use-flash-attn", 0, MG_SAME, NULL, "attention is computed the flash-attention way" },
    { "no-masked-softmax-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-bias-gelu-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-bias-swiglu-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-bias-dropout-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-rope-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-gradient-accumulation-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "attention-softmax-in-fp32", 0, MG_SAME, NULL, "the attention softmax is computed in fp32" },
    { "overlap-grad-reduce", 0, MG_SAME, NULL, "the data-parallel gradient reduction overlaps the backward pass" },
    { "overlap-param-gather", 0, MG_IGNORED, NULL,
      "the ZeRO-1 parameter all-gather runs after the optimizer step, not overlapped with the forward pass" },
    { "distributed-backend", 1, MG_VALUE, "nccl gloo", "ranks talk over NCCL on GPUs and atoll's host transport on CPUs" },
    { "num-workers", 1, MG_IGNORED, NULL, "the indexed dataset is read memory-mapped in the training process" },
    { "log-throughput", 0, MG_SAME, NULL, "tokens/s, TFLOP/s and MFU are logged every step" },
    { "timing-log-level", 1, MG_SAME, NULL, "step time and each pipeline stage's bubble are measured every step" },
    { "context-parallel-size", 1, MG_VALUE, "1", "context parallelism is not implemented (tensor, pipeline and data "
      "parallel and --sequence-parallel are)" },
    { "expert-model-parallel-size", 1, MG_VALUE, "1", "mixture-of-experts models are not implemented" },
    { "num-experts", 1, MG_REFUSED, NULL, "mixture-of-experts models are not implemented (dense GPT and LLaMA are)" },
    { "fp16", 0, MG_REFUSED, NULL, "fp16 with loss scaling is not implemented; --bf16 is (bf16 weights and "
      "activations, fp32 master weights)" },
    { "wandb-project", 1, MG_REFUSED, NULL, "atoll does not log to Weights & Biases: every step's metrics are kept by "
      "the coordinator (atoll metrics JOB, /metrics for Prometheus) and --metrics-file FILE writes them as JSON lines" },
    { "wandb-exp-name", 1, MG_REFUSED, NULL, "atoll does not log to Weights & Biases (see --wandb-project)" },
    { "no-log-loss-scale-to-tensorboard", 0, MG_SAME, NULL, "bf16 trains without a loss scale, so none is written" },
    { "tensorboard-queue-size", 1, MG_SAME, NULL, "TensorBoard events are written as each step ends" },
    { "accumulate-allreduce-grads-in-fp32", 0, MG_SAME, NULL, "gradients are accumulated and reduced in fp32" },
    { "cross-entropy-loss-fusion", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "no-create-attention-mask-in-dataloader", 0, MG_SAME, NULL, "causal attention needs no mask tensor" },
    { "use-cpu-initialization", 0, MG_SAME, NULL, "weights start the same wherever they are initialised" },
    { "manual-gc", 0, MG_SAME, NULL, "atoll has no garbage collector to pause" },
    { "manual-gc-interval", 1, MG_SAME, NULL, "atoll has no garbage collector to pause" },
    { "exit-signal-handler", 0, MG_SAME, NULL, "with --save, SIGTERM (Slurm's warning, atoll cancel --checkpoint) "
      "commits a checkpoint after the step and stops" },
    { "use-dist-ckpt", 0, MG_SAME, NULL, "every rank writes its part and any layout loads any checkpoint" },
    { "auto-detect-ckpt-format", 0, MG_SAME, NULL, "atoll reads the one format it writes" },
    { "ckpt-format", 1, MG_VALUE, "torch_dist torch", "atoll writes its own format (safetensors parts with a "
      "manifest), which any layout loads as torch_dist does" },
    { "ckpt-fully-parallel-save", 0, MG_SAME, NULL, "every rank writes its own part of the checkpoint" },
    { "ckpt-fully-parallel-load", 0, MG_SAME, NULL, "every rank reads only its own slices" },
    { "ckpt-assume-constant-structure", 0, MG_SAME, NULL, "checkpoints change speed here, not structure" },
    { "dist-ckpt-strictness", 1, MG_IGNORED, NULL, "a tensor missing from the checkpoint, one it does not expect "
      "and one of another shape are each refused, naming the tensor" },
    { "override-opt_param-scheduler", 0, MG_SAME, NULL, "the learning-rate schedule always comes from the flags" },
    { "use-checkpoint-opt_param-scheduler", 0, MG_REFUSED, NULL, "the learning-rate schedule comes from the flags, "
      "not the checkpoint: give the run's --lr, --min-lr, --lr-decay-style and their iterations" },
    { "no-save-optim", 0, MG_REFUSED, NULL, "checkpoints always keep the optimizer state, so a restart resumes exactly" },
    { "no-save-rng", 0, MG_REFUSED, NULL, "checkpoints always keep the seed, so a restart resumes exactly" },
    { "distributed-timeout-minutes", 1, MG_IGNORED, NULL, "a hung collective is found by the step watchdog and by "
      "the coordinator's hang detection (coordinatord --hang-floor, --hang-factor)" },
    { "data-cache-path", 1, MG_IGNORED, NULL, "the sample order is computed at start-up, not cached" },
    { "tiktoken-pattern", 1, MG_IGNORED, NULL, "it is TikTokenizer's split pattern, a tokenizer atoll does not read "
      "(HuggingFaceTokenizer reads LLaMA-3's tokenizer.json, which holds the same split)" },
    { "num-dataset-builder-threads", 1, MG_IGNORED, NULL, "the sample order is computed at start-up, not cached" },
    { "empty-unused-memory-level", 1, MG_IGNORED, NULL, "there is no caching allocator to empty" },
    { "tp-comm-overlap", 0, MG_IGNORED, NULL, "tensor-parallel communication is not overlapped with its GEMMs" },
    { "ddp-bucket-size", 1, MG_IGNORED, NULL, "the data-parallel reduction's bucket is fixed (2^18 floats)" },
    { "use-torch-fsdp2", 0, MG_REFUSED, NULL, "FSDP is not implemented; --use-distributed-optimizer shards the "
      "optimizer state over data-parallel ranks (ZeRO-1)" },
    { "fp8-format", 1, MG_REFUSED, NULL, "fp8 is not implemented; --bf16 is" },
    { "grad-reduce-in-bf16", 0, MG_IGNORED, NULL, "gradients are reduced in fp32" },
    { "profile", 0, MG_IGNORED, NULL, "no profiler is started; run atoll-train under nsys or perf instead" },
    { "use-pytorch-profiler", 0, MG_IGNORED, NULL, "no profiler is started; run atoll-train under nsys or perf instead" },
    { "profile-step-start", 1, MG_IGNORED, NULL, "no profiler is started; run atoll-train under nsys or perf instead" },
    { "profile-step-end", 1, MG_IGNORED, NULL, "no profiler is started; run atoll-train under nsys or perf instead" },
    { "profile-ranks", 1, MG_IGNORED, NULL, "no profiler is started; run atoll-train under nsys or perf instead" },
    { "distribute-saved-activations", 0, MG_IGNORED, NULL, "recomputation keeps each rank's whole layer inputs" },
    { "data-impl", 1, MG_SAME, NULL, "the indexed dataset is read memory-mapped" },
    { "DDP-impl", 1, MG_SAME, NULL, "atoll has one data-parallel implementation" },
    { "no-async-tensor-model-parallel-allreduce", 0, MG_SAME, NULL, "overlap changes speed, not results" },
    { "no-persist-layer-norm", 0, MG_SAME, NULL, "fusions change speed, not results" },
    { "fp16-lm-cross-entropy", 0, MG_IGNORED, NULL, "the cross-entropy is computed in fp32" },
    { "openai-gelu", 0, MG_SAME, NULL, "GELU is the tanh approximation (OpenAI's, GPT-2's) here" },
    { "valid-num-workers", 1, MG_IGNORED, NULL, "the indexed dataset is read memory-mapped in the training process" },
    { "overlap-p2p-communication", 0, MG_IGNORED, NULL, "pipeline sends and receives run between compute steps" },
    { "defer-embedding-wgrad-compute", 0, MG_IGNORED, NULL, "the embedding's weight gradient is computed in the "
      "backward pass" },
    { "te-rng-tracker", 0, MG_SAME, NULL, "dropout masks come from atoll's counter-based generator either way" },
    { "log-straggler", 0, MG_SAME, NULL, "the coordinator finds stragglers every step (atoll status JOB)" },
    { "enable-one-logger", 0, MG_IGNORED, NULL, "metrics go to the coordinator and --metrics-file" },
    { "check-for-nan-in-loss-and-grad", 0, MG_SAME, NULL, "a non-finite loss stops the run, naming the iteration" },
    { "no-check-for-nan-in-loss-and-grad", 0, MG_IGNORED, NULL, "a non-finite loss always stops the run" },
    { "rerun-mode", 1, MG_IGNORED, NULL, "steps are not re-run to check their results" },
    { "timing-log-option", 1, MG_SAME, NULL, "step time and each pipeline stage's bubble are measured every step" },
    { "barrier-with-L1-time", 0, MG_SAME, NULL, "step time is measured the same on every rank" },
    { "log-progress", 0, MG_IGNORED, NULL, "progress and goodput are in atoll status JOB" },
    { "non-persistent-save-interval", 1, MG_IGNORED, NULL, "only --save checkpoints are written; --async-save keeps "
      "their stall short" },
    { "apply-residual-connection-post-layernorm", 0, MG_REFUSED, NULL, "the residual is taken before the norm "
      "(pre-LN, Megatron's default)" },
    { "rotary-interleaved", 0, MG_REFUSED, NULL, "rope rotates the two halves of each head (Megatron's default, "
      "Hugging Face's layout), not interleaved pairs" },
    { "optimizer", 1, MG_VALUE, "adam", "atoll's optimizer is Megatron's adam (AdamW: decoupled weight decay, fp32 "
      "moments)" },
    { "dataloader-type", 1, MG_VALUE, "single", "samples are read in order, from each epoch's keyed shuffle of the "
      "dataset, as Megatron's single loader reads its dataset's" },
    { "loss-scale", 1, MG_IGNORED, NULL, NO_LOSS_SCALE },
    { "initial-loss-scale", 1, MG_IGNORED, NULL, NO_LOSS_SCALE },
    { "min-loss-scale", 1, MG_IGNORED, NULL, NO_LOSS_SCALE },
    { "loss-scale-window", 1, MG_IGNORED, NULL, NO_LOSS_SCALE },
    { "hysteresis", 1, MG_IGNORED, NULL, NO_LOSS_SCALE },
#undef NO_LOSS_SCALE
    { "vocab-extra-ids", 1, MG_VALUE, "0", "extra sentinel ids are T5's; GPT and LLaMA models take none" },
    { "apply-query-key-layer-scaling", 0, MG_SAME, NULL, "the attention scores and softmax are computed in fp32, "
      "where this scaling changes nothing" },
    { "use-precision-aware-optimizer", 0, MG_SAME, NULL, "the optimizer keeps fp32 master weights, gradients and "
      "moments" },
    { "main-grads-dtype", 1, MG_VALUE, "fp32", "gradients are accumulated and reduced in fp32" },
    { "main-params-dtype", 1, MG_VALUE, "fp32", "the master weights are fp32" },
    { "exp-avg-dtype", 1, MG_VALUE, "fp32", "Adam's moments are fp32" },
    { "exp-avg-sq-dtype", 1, MG_VALUE, "fp32", "Adam's moments are fp32" },
    { "no-overlap-p2p-communication", 0, MG_SAME, NULL, "pipeline sends and receives run between compute steps" },
    { "no-mmap-bin-files", 0, MG_IGNORED, NULL, "the indexed dataset is read memory-mapped" },
    { "disable-gloo-process-groups", 0, MG_SAME, NULL, "atoll creates no Gloo process groups" },
    { "cross-entropy-fusion-impl", 1, MG_VALUE, "native te", "fusions change speed, not results" },
    { "init-model-with-meta-device", 0, MG_SAME, NULL, "each rank allocates only its own part of the model" },
    { "use-megatron-fsdp", 0, MG_REFUSED, NULL, "FSDP is not implemented; --use-distributed-optimizer shards the "
      "optimizer state over data-parallel ranks (ZeRO-1)" },
    { "softmax-type", 1, MG_VALUE, "vanilla", "attention takes the standard softmax" },
    { "recompute-modules", 1, MG_VALUE, "core_attn", "--recompute-granularity selective rebuilds the core attention "
      "(its softmax and dropout); recomputing other modules is not implemented" },
    { "cuda-graph-impl", 1, MG_IGNORED, NULL, "atoll records its own CUDA graphs, with --enable-cuda-graph (one-rank "
      "cuda runs); this flag chooses nothing" },
    { "logging-level", 1, MG_IGNORED, NULL, "atoll's log lines do not change with a level" },
    { "moe-*", 0, MG_REFUSED, NULL, "mixture-of-experts models are not implemented (dense GPT and LLaMA are)" },
    { "fp8-*", 0, MG_REFUSED, NULL, "fp8 is not implemented; --bf16 is" },
    { "first-last-layers-bf16", 0, MG_SAME, NULL, "every layer runs in bf16 under --bf16" },
    { "num-distributed-optimizer-instances", 1, MG_VALUE, "1", "one distributed optimizer spans the whole "
      "data-parallel group" },
    { "deterministic-mode", 0, MG_IGNORED, NULL, "atoll's kernels are deterministic unless "
      "--nondeterministic-attention is given" },
    { "log-energy", 0, MG_IGNORED, NULL, "GPU energy is not read; each step logs its time, tokens/s and MFU" },
    { "timers-to-log", 1, MG_IGNORED, NULL, "each step logs its time and each pipeline stage's bubble, not "
      "Megatron's timers" },
    { "glu-linear-offset", 1, MG_VALUE, "0", "SwiGLU's linear branch takes no offset" },
    { "use-persistent-ckpt-worker", 0, MG_IGNORED, NULL, "--async-save writes from a thread of each rank" },
    { "load-main-params-from-ckpt", 0, MG_SAME, NULL, "a checkpoint holds the fp32 master weights, and they are "
      "what a run loads" },
    { "straggler-detector-enabled", 0, MG_SAME, NULL, "the coordinator finds stragglers every step (atoll status "
      "JOB)" },
    { "disable-straggler-on-startup", 0, MG_IGNORED, NULL, "the coordinator's straggler detection is always on" },
    { "external-cuda-graph", 0, MG_IGNORED, NULL, "atoll records its own CUDA graphs, with --enable-cuda-graph" },
    { "store-param-remainders", 0, MG_IGNORED, NULL, "the optimizer keeps whole fp32 master weights" },
    { "multi-latent-attention", 0, MG_REFUSED, NULL, "multi-latent attention (DeepSeek's) is not implemented" },
    { "kv-lora-rank", 1, MG_REFUSED, NULL, "multi-latent attention (DeepSeek's) is not implemented" },
    { "mtp-num-layers", 1, MG_REFUSED, NULL, "multi-token prediction is not implemented" },
    { "hybrid-override-pattern", 1, MG_REFUSED, NULL, "hybrid Mamba models are not implemented" },
};
#define NMEGATRON (sizeof(MEGATRON) / sizeof(MEGATRON[0]))
_Static_assert(NMEGATRON <= 128, "atoll_config.megatron_ignored has a bit per entry");

/* A name ending in '*' stands for every flag it begins (moe-*): key is longer
 * and starts with the name's head, '-' and '_' alike. */
static int prefix_of(const char *name, const char *key)
{
    size_t n = strlen(name);
    if (!n || name[n - 1] != '*' || strlen(key) < n) return 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (name[i] != key[i] && !(name[i] == '-' && key[i] == '_')) return 0;
    return 1;
}

static int find_megatron(const char *key)
{
    for (size_t i = 0; i < NMEGATRON; i++)
        if (same_key(MEGATRON[i].name, key) || prefix_of(MEGATRON[i].name, key)) return (int)i;
    return -1;
}

/* A switch's value: 1 bare (NULL), true, True or 1; 0 false, False or 0; -1 anything else. */
static int switch_value(const char *v)
{
    if (!v || !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) return 1;
    return !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0") ? 0 : -1;
}

/* A YAML value that says nothing: empty, null or ~. */
static int is_null(const char *v)
{
    return v && (!*v || !strcmp(v, "null") || !strcmp(v, "~"));
}

/* v among the space-separated `values` (numbers compared as numbers). */
static int one_of(const char *values, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    int num = end != v && !*end;
    for (const char *p = values; *p;) {
        size_t n = strcspn(p, " ");
        char one[32];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        if (!strcmp(one, v) || (num && strtod(one, NULL) == x)) return 1;
        p += n + (p[n] == ' ');
    }
    return 0;
}

static cfg_status set_megatron(atoll_config *c, int i, const char *key, const char *value, char *err, size_t errlen)
{
    const char *name = MEGATRON[i].name;
    int takes = MEGATRON[i].takes_value;
    if (prefix_of(name, key)) { /* a family refused whole, whatever its flags take: only false or null pass */
        if (value && (is_null(value) || switch_value(value) == 0)) return CFG_OK;
        atoll_errf(err, errlen, "--%s: %s", key, MEGATRON[i].why);
        return CFG_BAD_VALUE;
    }
    if (takes && !value) {
        atoll_errf(err, errlen, "--%s needs a value", name);
        return CFG_BAD_VALUE;
    }
    /* whether it asks for anything: a switch set, a value neither null nor false */
    int asks = is_null(value) ? 0 : takes ? switch_value(value) != 0 : switch_value(value);
    if (asks < 0) {
        atoll_errf(err, errlen, "--%s: '%s' is not true or false", name, value);
        return CFG_BAD_VALUE;
    }
    switch (MEGATRON[i].kind) {
    case MG_SAME:
        return CFG_OK;
    case MG_VALUE:
        if (is_null(value) || one_of(MEGATRON[i].values, value)) return CFG_OK;
        atoll_errf(err, errlen, "--%s %s: %s; accepted: %s", name, value, MEGATRON[i].why, MEGATRON[i].values);
        return CFG_BAD_VALUE;
    case MG_REFUSED:
        if (!asks) return CFG_OK;
        atoll_errf(err, errlen, "--%s: %s", name, MEGATRON[i].why);
        return CFG_BAD_VALUE;
    case MG_IGNORED:
        if (asks || takes) c->megatron_ignored[i / 64] |= 1ull << i % 64;
        return CFG_OK;
    }
    return CFG_UNKNOWN;
}

/* Whether MEGATRON[i], a flag accepted without effect, was given (set_megatron's bit). */
static int megatron_given(const atoll_config *c, int i)
{
    return i >= 0 && (c->megatron_ignored[i / 64] >> i % 64 & 1);
}

void cfg_megatron_notes(const atoll_config *c, const char *prog, FILE *out)
{
    for (size_t k = 0; k < NMEGATRON; k++)
        if (megatron_given(c, (int)k))
            fprintf(out, "%s: note: --%s has no effect here: %s\n", prog, MEGATRON[k].name, MEGATRON[k].why);
    if (c->reset_position_ids && cfg_rope(c))
        fprintf(out, "%s: note: --reset-position-ids has no effect with --position-embedding-type rope: as in "
                "Megatron, rotary positions count from the sample's start (--reset-attention-mask keeps documents "
                "apart)\n", prog);
}

/* Megatron's --account-for-embedding-in-pipeline-split and --account-for-loss-
 * in-pipeline-split: the embedding (the loss) counts as one more layer of the
 * first (last) pipeline stage, and the layers with them split evenly; here the
 * --decoder-first/last-pipeline-num-layers that split is. A no-op without
 * pipelining, as in Megatron. */
static int resolve_split_accounting(atoll_config *c, char *err, size_t errlen)
{
    int e = c->account_for_embedding_in_pipeline_split, l = c->account_for_loss_in_pipeline_split;
    int pp = c->pipeline_model_parallel_size, L = c->num_layers;
    const char *flag = e ? "--account-for-embedding-in-pipeline-split" : "--account-for-loss-in-pipeline-split";
    c->account_for_embedding_in_pipeline_split = c->account_for_loss_in_pipeline_split = 0;
    if ((!e && !l) || pp < 2) return 0;
    if (c->decoder_first_pipeline_num_layers || c->decoder_last_pipeline_num_layers) {
        atoll_errf(err, errlen, "%s and --decoder-%s-pipeline-num-layers both set the pipeline split; give one", flag,
                   c->decoder_first_pipeline_num_layers ? "first" : "last");
        return -1;
    }
    if (cfg_interleaved(c)) {
        atoll_errf(err, errlen, "%s with an interleaved schedule is not supported (Megatron counts it in one model "
                   "chunk alone; atoll splits each stage's layers evenly over its chunks): give "
                   "--decoder-first/last-pipeline-num-layers with --num-virtual-stages-per-pipeline-rank", flag);
        return -1;
    }
    int total = L + e + l, per = total / pp;
    if (L < 1 || total % pp || per < 2) {
        int fit = L + 1; /* the next that splits with a transformer layer on every stage */
        while ((fit + e + l) % pp || (fit + e + l) / pp < 2) fit++;
        atoll_errf(err, errlen, "%s: --num-layers %d with the %s is %d layers, which must split evenly over "
                   "--pipeline-model-parallel-size %d with a transformer layer on every stage; e.g. --num-layers %d",
                   flag, L, e && l ? "embedding and the loss" : e ? "embedding" : "loss", total, pp, fit);
        return -1;
    }
    c->decoder_first_pipeline_num_layers = e ? per - 1 : 0;
    c->decoder_last_pipeline_num_layers = l ? per - 1 : 0;
    return 0;
}

/* Iterations from samples: Megatron stops after train_samples / global batch
 * whole steps; its learning-rate schedule counts samples, here the nearest
 * iteration (within half a step of Megatron's). */
int cfg_resolve_megatron(atoll_config *c, char *err, size_t errlen)
{
    if (c->use_rotary_position_embeddings)
        snprintf(c->position_embedding_type, sizeof c->position_embedding_type, "rope");
    if (c->checkpoint_activations) {
        if (c->recompute_granularity == RECOMPUTE_SELECTIVE || c->recompute_activations) {
            atoll_errf(err, errlen, "--checkpoint-activations is --recompute-granularity full, and selective "
                       "recomputation is asked for too; give one");
            return -1;
        }
        c->recompute_granularity = RECOMPUTE_FULL;
    }
    if (c->use_tp_pp_dp_mapping) {
        if (strcmp(c->rank_order, CFG_DEFAULT_RANK_ORDER) && strcmp(c->rank_order, "tp-cp-ep-pp-dp")) {
            atoll_errf(err, errlen, "--use-tp-pp-dp-mapping is --rank-order tp-cp-ep-pp-dp, and --rank-order %s is "
                       "given too; give one", c->rank_order);
            return -1;
        }
        snprintf(c->rank_order, sizeof c->rank_order, "tp-cp-ep-pp-dp");
    }
    if (c->recompute_activations) {
        if (c->recompute_granularity == RECOMPUTE_FULL) {
            atoll_errf(err, errlen, "--recompute-activations is --recompute-granularity selective, and --recompute-"
                       "granularity full is given too; give one");
            return -1;
        }
        c->recompute_granularity = RECOMPUTE_SELECTIVE;
    }
    if (c->recompute_method[0] && strcmp(c->recompute_method, "uniform") && strcmp(c->recompute_method, "block")) {
        atoll_errf(err, errlen, "--recompute-method '%s': expected uniform (every layer rebuilt, in groups of "
                   "--recompute-num-layers) or block (the first --recompute-num-layers layers of each model chunk)",
                   c->recompute_method);
        return -1;
    }
    if ((c->recompute_method[0] || c->recompute_num_layers) && c->recompute_granularity != RECOMPUTE_FULL) {
        atoll_errf(err, errlen, "--recompute-method and --recompute-num-layers say which layers --recompute-"
                   "granularity full rebuilds; give it (selective recompute takes neither)");
        return -1;
    }
    if (c->recompute_num_layers && !c->recompute_method[0]) {
        atoll_errf(err, errlen, "--recompute-num-layers %d needs --recompute-method: block (the first %d layers of "
                   "each model chunk are rebuilt) or uniform", c->recompute_num_layers, c->recompute_num_layers);
        return -1;
    }
    if (!strcmp(c->recompute_method, "block") && !c->recompute_num_layers) {
        atoll_errf(err, errlen, "--recompute-method block needs --recompute-num-layers N: the first N layers of each "
                   "model chunk are rebuilt in the backward pass, the others keep their activations");
        return -1;
    }
    if (c->kv_channels && c->num_attention_heads > 0 &&
        (long long)c->kv_channels * c->num_attention_heads == c->hidden_size) /* both up to 2^20: 64-bit */
        c->kv_channels = 0; /* the default head dim: one form of the config */
    /* Every micro-batch counts the same number of tokens unless --eod-mask-loss
     * drops some: then the two means differ, and atoll takes Megatron's default. */
    if (c->calculate_per_token_loss && c->eod_mask_loss) {
        atoll_errf(err, errlen, "--calculate-per-token-loss with --eod-mask-loss is not implemented: the loss is the "
                   "mean over micro-batches of each one's mean over the tokens it keeps (Megatron's default); leave "
                   "--calculate-per-token-loss out");
        return -1;
    }
    /* Megatron's two ways to name the data, each on the command line or in a file: one path split by --split,
     * or one per split */
    const char *whole = c->data_path[0] ? "data-path" : c->data_args_path[0] ? "data-args-path" : NULL;
    const char *per = c->train_data_path[0] ? "train-data-path" : c->valid_data_path[0] ? "valid-data-path"
                    : c->test_data_path[0] ? "test-data-path"
                    : c->per_split_data_args_path[0] ? "per-split-data-args-path" : NULL;
    if (c->mock_data && (whole || per)) {
        atoll_errf(err, errlen, "--mock-data trains on the built-in corpus, and --%s is given too; give one",
                   whole ? whole : per);
        return -1;
    }
    if (c->data_path[0] && c->data_args_path[0]) {
        atoll_errf(err, errlen, "--data-path and --data-args-path (a file holding a --data-path) are both given; give "
                   "one");
        return -1;
    }
    if (c->per_split_data_args_path[0] && (c->train_data_path[0] || c->valid_data_path[0] || c->test_data_path[0])) {
        atoll_errf(err, errlen, "--per-split-data-args-path (a file holding the three splits' paths) and --%s are both "
                   "given; give one", per);
        return -1;
    }
    if (whole && per) {
        atoll_errf(err, errlen, "--%s (split by --split) and --%s are both given; give --data-path (or "
                   "--data-args-path), or --train-data-path with --valid-data-path and --test-data-path (or "
                   "--per-split-data-args-path)", whole, per);
        return -1;
    }
    if (!c->train_data_path[0] && (c->valid_data_path[0] || c->test_data_path[0])) {
        atoll_errf(err, errlen, "--%s-data-path needs --train-data-path (the training data); or give --data-path and "
                   "--split", c->valid_data_path[0] ? "valid" : "test");
        return -1;
    }
    if (c->no_position_embedding && !cfg_rope(c)) {
        atoll_errf(err, errlen, "--no-position-embedding: atoll's models need a position encoding; with it give "
                   "--position-embedding-type rope (or --use-rotary-position-embeddings)");
        return -1;
    }
    int ramp_start, ramp_inc;
    uint64_t ramp_samples, train_samples = c->train_samples;
    int ramp = cfg_rampup(c, &ramp_start, &ramp_inc, &ramp_samples), sched = cfg_batch_schedule(c, NULL, NULL);
    if (sched && !c->global_batch_size) c->global_batch_size = cfg_global_batch(c, 1); /* its last batch */
    if ((ramp || sched) && cfg_validate_batch_schedule(c, err, errlen)) return -1;
    uint64_t *samples[4] = { &c->train_samples, &c->lr_decay_samples, &c->lr_warmup_samples, &c->lr_wsd_decay_samples };
    int *iters[4] = { &c->train_iters, &c->lr_decay_iters, &c->lr_warmup_iters, &c->lr_wsd_decay_iters };
    const char *names[4] = { "train", "lr-decay", "lr-warmup", "lr-wsd-decay" };
    atoll_config d;
    cfg_defaults(&d);
    int *dflt[4] = { &d.train_iters, &d.lr_decay_iters, &d.lr_warmup_iters, &d.lr_wsd_decay_iters };
    for (int k = 0; k < 4; k++) {
        if (!*samples[k]) continue;
        if (*iters[k] != *dflt[k]) {
            atoll_errf(err, errlen, "--%s-iters and --%s-samples both given; give one", names[k], names[k]);
            return -1;
        }
        if (c->global_batch_size < 1) {
            atoll_errf(err, errlen, "--%s-samples needs --global-batch-size (iterations are samples / global batch)",
                       names[k]);
            return -1;
        }
        uint64_t gbs = (uint64_t)c->global_batch_size, n = k ? (*samples[k] + gbs / 2) / gbs : *samples[k] / gbs;
        if (!k && ramp) { /* Megatron's count: the ramp's steps, then whole global batches */
            long long it;
            uint64_t done = ramp_walk(c, 1, ramp_samples < *samples[k] ? ramp_samples : *samples[k], LLONG_MAX, &it);
            n = (uint64_t)it + (*samples[k] > done ? (*samples[k] - done) / gbs : 0);
        } else if (!k && sched) { /* Megatron's count: steps while fewer than the samples are consumed */
            long long it;
            ramp_walk(c, 1, *samples[k] - 1, LLONG_MAX, &it);
            n = (uint64_t)it;
        }
        if (n > 2147483647u) {
            atoll_errf(err, errlen, "--%s-samples %llu is %llu iterations of %llu samples; at most 2147483647",
                       names[k], (unsigned long long)*samples[k], (unsigned long long)n, (unsigned long long)gbs);
            return -1;
        }
        *iters[k] = (int)n;
        *samples[k] = 0;
    }
    /* With a ramp or a batch schedule the lr schedule counts samples, in global
     * batches (eng_lr_at): by default it decays over the samples training takes,
     * as Megatron's does. */
    if ((ramp || sched) && !c->lr_decay_iters) {
        uint64_t gbs = (uint64_t)c->global_batch_size,
                 total = train_samples ? train_samples : cfg_samples_after(c, 1, c->train_iters);
        c->lr_decay_iters = (int)((total + gbs / 2) / gbs); /* at most train_iters */
    }
    if (c->lr_warmup_fraction > 0) {
        if (c->lr_warmup_iters) {
            atoll_errf(err, errlen, "--lr-warmup-fraction and --lr-warmup-iters (or -samples) both given; give one");
            return -1;
        }
        c->lr_warmup_iters = (int)(c->lr_warmup_fraction * (c->lr_decay_iters ? c->lr_decay_iters : c->train_iters) + 0.5);
        c->lr_warmup_fraction = 0;
    }
    /* Megatron's rules, checked where the flags are parsed (atoll submit too: a JobSpec carries the ends only
     * where they are read): constant is --weight-decay throughout, the other styles go from start to end */
    int wd_given = !isnan(c->start_weight_decay) + !isnan(c->end_weight_decay);
    if (c->weight_decay_incr_style == WD_INCR_CONSTANT && wd_given) {
        atoll_errf(err, errlen, "--%s-weight-decay goes with --weight-decay-incr-style linear or cosine (from "
                   "--start-weight-decay to --end-weight-decay over the run); with constant, the default, "
                   "--weight-decay is the decay throughout", isnan(c->start_weight_decay) ? "end" : "start");
        return -1;
    }
    if (c->weight_decay_incr_style != WD_INCR_CONSTANT && wd_given < 2) {
        atoll_errf(err, errlen, "--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay (the "
                   "decay at the first step and once the run's samples are consumed)",
                   cfg_wd_incr_name(c->weight_decay_incr_style));
        return -1;
    }
    if (!isnan(c->decoupled_min_lr) && c->decoupled_lr <= 0) {
        atoll_errf(err, errlen, "--decoupled-min-lr %g is where --decoupled-lr's schedule ends: give --decoupled-lr "
                   "(the token embedding's and output layer's peak rate) with it, or leave it out",
                   c->decoupled_min_lr);
        return -1;
    }
    c->use_rotary_position_embeddings = c->no_position_embedding = c->recompute_activations = c->mock_data = 0;
    c->checkpoint_activations = c->use_tp_pp_dp_mapping = 0;
    c->calculate_per_token_loss = 0;
    return resolve_split_accounting(c, err, errlen);
}

int cfg_is_flag(const char *key)
{
    const key_def *k = find_key(key);
    int m = k ? -1 : find_megatron(key);
    return (k && k->type == K_BOOL) || (m >= 0 && !MEGATRON[m].takes_value);
}

int cfg_validate_submission(const atoll_config *c, char *err, size_t errlen)
{
    if (c->ckpt_step && c->save[0] && !strcmp(c->load, c->save)) {
        atoll_errf(err, errlen, "--ckpt-step %d with --load the same directory as --save (%s): once the run saves, "
                   "a restart resumes its newest step there, so step %d would not stay the start; --save elsewhere, "
                   "or move the steps after %d out of it and leave --ckpt-step out", c->ckpt_step, c->save,
                   c->ckpt_step, c->ckpt_step);
        return -1;
    }
    return 0;
}

int cfg_is_default(const atoll_config *c, const char *key)
{
    const key_def *k = find_key(key);
    if (!k) return -1;
    atoll_config d;
    cfg_defaults(&d);
    const char *a = (const char *)c + k->offset, *b = (const char *)&d + k->offset;
    return k->type == K_STR || k->type == K_RAMP || k->type == K_SCHED ? !strcmp(a, b) : !memcmp(a, b, k->size);
}

/* "--KEY: VALUE is ..." for a number outside the key's range. */
static int out_of_range(const key_def *k, double x, const char *value, char *err, size_t errlen)
{
    if (x < k->lo)
        atoll_errf(err, errlen, "--%s: %s is below the smallest accepted value, %.17g", k->name, value, k->lo);
    else if (k->hi_open)
        atoll_errf(err, errlen, "--%s: %s is not below %.17g (accepted: %.17g <= value < %.17g)", k->name, value,
             k->hi, k->lo, k->hi);
    else
        atoll_errf(err, errlen, "--%s: %s is above the largest accepted value, %.17g", k->name, value, k->hi);
    return -1;
}

/* An empty value, YAML's null or Python's None: the setting is not given. */
static int no_value(const char *value)
{
    return !*value || !strcmp(value, "null") || !strcmp(value, "None");
}

/* --rampup-batch-size START INCREMENT SAMPLES (Megatron's nargs=3; commas or
 * spaces between them): START and INCREMENT at least 1, SAMPLES at least 1 and
 * at most CFG_MAX_RAMP_SAMPLES. Whether they fit the global batch and the layout
 * is cfg_validate_training's and cfg_validate_layout's. Stored normalised. */
#define CFG_MAX_RAMP_SAMPLES (1ull << 40)
static cfg_status set_rampup(atoll_config *c, const char *value, char *err, size_t errlen)
{
    const char *what = "--rampup-batch-size takes three numbers, START INCREMENT SAMPLES: the global batch starts at "
                       "START and grows by INCREMENT over SAMPLES samples to --global-batch-size (e.g. 16 16 5859375)";
    unsigned long long v[3];
    const char *p = value;
    for (int i = 0; i < 3; i++) {
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        char *end;
        errno = 0;
        v[i] = strtoull(p, &end, 10);
        if (end == p || *p == '-' || errno || (*end && *end != ' ' && *end != ',' && *end != '\t')) {
            atoll_errf(err, errlen, "%s, not '%s'", what, value);
            return CFG_BAD_VALUE;
        }
        p = end;
    }
    while (*p == ' ' || *p == ',' || *p == '\t') p++;
    if (*p) {
        atoll_errf(err, errlen, "%s, not '%s'", what, value);
        return CFG_BAD_VALUE;
    }
    if (!v[0] || !v[1] || v[0] > CFG_MAX_GLOBAL_BATCH || v[1] > CFG_MAX_GLOBAL_BATCH) {
        atoll_errf(err, errlen, "--rampup-batch-size %s: START and INCREMENT must be 1 to %d samples", value,
                   CFG_MAX_GLOBAL_BATCH);
        return CFG_BAD_VALUE;
    }
    if (!v[2] || v[2] > CFG_MAX_RAMP_SAMPLES) {
        atoll_errf(err, errlen, "--rampup-batch-size %s: SAMPLES, over which the batch grows, must be 1 to %llu", value,
                   CFG_MAX_RAMP_SAMPLES);
        return CFG_BAD_VALUE;
    }
    snprintf(c->rampup_batch_size, sizeof c->rampup_batch_size, "%llu %llu %llu", v[0], v[1], v[2]);
    return CFG_OK;
}

/* One number of a schedule entry as Megatron reads it: a decimal with an
 * optional K, M, B or T (1e3 .. 1e12, either case), int(float(x) * multiplier),
 * truncated. -1 when it is not one, or negative, or at least 2^62. */
static long long schedule_number(const char *s, size_t n)
{
    char buf[64];
    if (!n || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    double mult = 1;
    switch (buf[n - 1]) {
    case 'K': case 'k': mult = 1e3; break;
    case 'M': case 'm': mult = 1e6; break;
    case 'B': case 'b': mult = 1e9; break;
    case 'T': case 't': mult = 1e12; break;
    }
    if (mult > 1) buf[--n] = 0;
    if (strspn(buf, "0123456789.eE+-") != n) return -1; /* decimals only, as Python's float reads them */
    char *end;
    double x = strtod(buf, &end);
    if (!n || end != buf + n || !isfinite(x) || buf[0] == '-') return -1;
    x *= mult;
    return x < 0x1p62 ? (long long)x : -1;
}

/* --step-batch-size-schedule "THRESHOLD:BATCH ..." (Megatron's; entries between
 * spaces or commas): THRESHOLD tokens and BATCH samples, each with an optional
 * K/M/B/T. Stored normalised, whole tokens in ascending order. Where the
 * entries stand in samples (from 0, rising) is cfg_validate_batch_schedule's:
 * it needs --seq-length. */
static cfg_status set_schedule(atoll_config *c, const char *value, char *err, size_t errlen)
{
    const char *what = "--step-batch-size-schedule takes entries THRESHOLD:BATCH, the global batch from THRESHOLD "
                       "tokens on, numbers with an optional K, M, B or T (e.g. \"0:768 250B:1536 500B:3072\")";
    long long thr[CFG_MAX_SCHEDULE], bs[CFG_MAX_SCHEDULE];
    int n = 0;
    for (const char *p = value;;) {
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        if (!*p) break;
        size_t len = strcspn(p, " ,\t");
        const char *colon = memchr(p, ':', len);
        if (n == CFG_MAX_SCHEDULE) {
            atoll_errf(err, errlen, "--step-batch-size-schedule: more than %d entries", CFG_MAX_SCHEDULE);
            return CFG_BAD_VALUE;
        }
        long long t = colon ? schedule_number(p, (size_t)(colon - p)) : -1;
        long long b = colon ? schedule_number(colon + 1, len - (size_t)(colon + 1 - p)) : -1;
        if (t < 0 || b < 0) {
            atoll_errf(err, errlen, "%s; '%.*s' is not one", what, (int)(len < 64 ? len : 64), p);
            return CFG_BAD_VALUE;
        }
        if (b < 1 || b > CFG_MAX_GLOBAL_BATCH) {
            atoll_errf(err, errlen, "--step-batch-size-schedule: entry '%.*s': its batch must be 1 to %d samples",
                       (int)(len < 64 ? len : 64), p, CFG_MAX_GLOBAL_BATCH);
            return CFG_BAD_VALUE;
        }
        int i = n++; /* sorted by threshold, equal ones in the order given (Megatron's stable sort) */
        for (; i > 0 && thr[i - 1] > t; i--) thr[i] = thr[i - 1], bs[i] = bs[i - 1];
        thr[i] = t;
        bs[i] = b;
        p += len;
    }
    if (!n) {
        atoll_errf(err, errlen, "%s; it has none", what);
        return CFG_BAD_VALUE;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) /* at most 32 x 31 bytes: fits */
        at += (size_t)snprintf(c->step_batch_size_schedule + at, sizeof c->step_batch_size_schedule - at, "%s%lld:%lld",
                               i ? " " : "", thr[i], bs[i]);
    return CFG_OK;
}

cfg_status cfg_set(atoll_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    const key_def *k = find_key(key);
    if (!k) {
        int m = find_megatron(key);
        return m < 0 ? CFG_UNKNOWN : set_megatron(c, m, key, value, err, errlen);
    }
    char *field = (char *)c + k->offset;
    if (k->type != K_BOOL && !value) {
        atoll_errf(err, errlen, "--%s needs a value", k->name);
        return CFG_BAD_VALUE;
    }
    switch (k->type) {
    case K_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(value, &end, 10);
        if (errno == ERANGE || end == value || *end) {
            atoll_errf(err, errlen, "--%s: '%s' is not an integer (accepted: %.0f to %.0f)", k->name, value, k->lo, k->hi);
            return CFG_BAD_VALUE;
        }
        if ((double)x < k->lo || (double)x > k->hi) {
            out_of_range(k, (double)x, value, err, errlen);
            return CFG_BAD_VALUE;
        }
        *(int *)field = (int)x;
        return CFG_OK;
    }
    case K_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-') {
            atoll_errf(err, errlen, "--%s: '%s' is not an unsigned integer", k->name, value);
            return CFG_BAD_VALUE;
        }
        *(uint64_t *)field = x;
        return CFG_OK;
    }
    case K_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(value, &end);
        if (end == value || *end || !isfinite(x)) {
            atoll_errf(err, errlen, "--%s: '%s' is not a finite number", k->name, value);
            return CFG_BAD_VALUE;
        }
        if (x < k->lo || x > k->hi || (k->hi_open && x >= k->hi)) {
            out_of_range(k, x, value, err, errlen);
            return CFG_BAD_VALUE;
        }
        *(double *)field = x;
        return CFG_OK;
    }
    case K_BOOL:
        if (switch_value(value) < 0) {
            atoll_errf(err, errlen, "--%s: '%s' is not true or false", k->name, value);
            return CFG_BAD_VALUE;
        }
        *(int *)field = switch_value(value);
        return CFG_OK;
    case K_STR:
        if (!*value) { /* empty means the default, as an empty string in a protobuf JobSpec does */
            atoll_config d;
            cfg_defaults(&d);
            memcpy(field, (char *)&d + k->offset, k->size);
            return CFG_OK;
        }
        if (strlen(value) >= k->size) {
            atoll_errf(err, errlen, "--%s: value longer than %zu bytes", k->name, k->size - 1);
            return CFG_BAD_VALUE;
        }
        memcpy(field, value, strlen(value) + 1);
        return CFG_OK;
    case K_RAMP:
    case K_SCHED:
        if (no_value(value)) { /* not given */
            field[0] = 0;
            return CFG_OK;
        }
        return k->type == K_RAMP ? set_rampup(c, value, err, errlen) : set_schedule(c, value, err, errlen);
    case K_RECOMPUTE:
        if (!strcmp(value, "selective")) *(cfg_recompute *)field = RECOMPUTE_SELECTIVE;
        else if (!strcmp(value, "full")) *(cfg_recompute *)field = RECOMPUTE_FULL;
        else if (!strcmp(value, "none") || !strcmp(value, "null")) *(cfg_recompute *)field = RECOMPUTE_NONE;
        else {
            atoll_errf(err, errlen, "--%s: '%s' is not one of selective, full", k->name, value);
            return CFG_BAD_VALUE;
        }
        return CFG_OK;
    case K_DECAY:
    case K_WSD:
    case K_WDINCR: {
        int n = k->type == K_DECAY ? 5 : k->type == K_WSD ? 4 : 3;
        for (int i = 0; i < n; i++)
            if (!strcmp(value, k->type == K_DECAY ? cfg_lr_decay_name((cfg_lr_decay)i)
                               : k->type == K_WSD ? cfg_wsd_decay_name((cfg_wsd_decay)i)
                                                  : cfg_wd_incr_name((cfg_wd_incr)i))) {
                if (k->type == K_DECAY) *(cfg_lr_decay *)field = (cfg_lr_decay)i;
                else if (k->type == K_WSD) *(cfg_wsd_decay *)field = (cfg_wsd_decay)i;
                else *(cfg_wd_incr *)field = (cfg_wd_incr)i;
                return CFG_OK;
            }
        atoll_errf(err, errlen, "--%s: '%s' is not one of %s", k->name, value, k->type == K_DECAY
                   ? "cosine, linear, constant, WSD, inverse-square-root"
                   : k->type == K_WSD ? "exponential, linear, cosine, minus_sqrt" : "constant, linear, cosine");
        return CFG_BAD_VALUE;
    }
    }
    return CFG_UNKNOWN;
}

int cfg_parse_args(atoll_config *c, int argc, char **argv, int start,
                   cfg_extra_fn extra, void *ctx, char *err, size_t errlen)
{
    for (int i = start; i < argc;) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            atoll_errf(err, errlen, "unexpected argument '%s' (flags start with --)", a);
            return -1;
        }
        if (extra) {
            int used = extra(ctx, argc, argv, i, err, errlen);
            if (used < 0) return -1;
            if (used > 0) { i += used; continue; }
        }
        const char *key = a + 2;
        char keybuf[128];
        const char *value = NULL;
        const char *eq = strchr(key, '=');
        if (eq) { /* --key=value */
            size_t n = (size_t)(eq - key);
            if (n >= sizeof keybuf) n = sizeof keybuf - 1;
            memcpy(keybuf, key, n);
            keybuf[n] = 0;
            key = keybuf;
            value = eq + 1;
        }
        if (!strcmp(key, "yaml-cfg") || !strcmp(key, "yaml_cfg")) {
            if (!value && i + 1 >= argc) { atoll_errf(err, errlen, "--yaml-cfg needs a file"); return -1; }
            if (cfg_load_yaml(c, value ? value : argv[i + 1], err, errlen)) return -1;
            i += value ? 1 : 2;
            continue;
        }
        int consumed = 1;
        char blend[CFG_DATA_PATH];
        if (!value && !cfg_is_flag(key)) {
            if (i + 1 >= argc) {
                if (find_key(key)) { atoll_errf(err, errlen, "%s needs a value", a); return -1; }
            } else {
                value = argv[i + 1];
                consumed = 2;
            }
            /* --data-path takes a blend as Megatron's does: the words up to the next flag */
            if (value && list_key(key) && i + 2 < argc && strncmp(argv[i + 2], "--", 2)) {
                size_t at = 0;
                for (consumed = 1; i + consumed < argc && strncmp(argv[i + consumed], "--", 2); consumed++) {
                    int n = snprintf(blend + at, sizeof blend - at, "%s%s", at ? " " : "", argv[i + consumed]);
                    if (n < 0 || (size_t)n >= sizeof blend - at) {
                        atoll_errf(err, errlen, "--%s: its words are longer than %d bytes", key, CFG_DATA_PATH - 1);
                        return -1;
                    }
                    at += (size_t)n;
                }
                value = blend;
            }
        }
        cfg_status st = cfg_set(c, key, value, err, errlen);
        if (st == CFG_UNKNOWN) {
            atoll_errf(err, errlen, "unknown flag '--%s' (see --help)", key);
            return -1;
        }
        if (st != CFG_OK) return -1;
        i += consumed;
    }
    return cfg_resolve_megatron(c, err, errlen);
}

/* YAML job files: a mapping of the keys above, nested mappings flattened so
 * Megatron-style sections (`model: {num_layers: 2}`) work. Refused with a message:
 * a file that is not a mapping (empty, a bare scalar, a list), a key given twice
 * (in any section, with dashes or underscores), lists, aliases, nesting deeper
 * than CFG_YAML_MAX_DEPTH and files over CFG_YAML_MAX_BYTES. The walk is a loop
 * over libyaml's events with an explicit depth, so no input can exhaust the stack. */
static int yaml_walk(atoll_config *c, yaml_parser_t *p, const char *path, char *err, size_t errlen)
{
    char key[128] = "", list[CFG_DATA_PATH];
    int have_key = 0, depth = 0, docs = 0, rc = 0, in_list = 0;
    size_t key_line = 0, seen_line[NKEYS] = { 0 }, list_len = 0; /* 1-based line a key was set on */
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(p, &ev)) {
            atoll_errf(err, errlen, "%s: YAML error at line %zu: %s", path,
                 p->problem_mark.line + 1, p->problem ? p->problem : "parse failed");
            return -1;
        }
        size_t line = ev.start_mark.line + 1;
        int done = 0;
        switch (ev.type) {
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                atoll_errf(err, errlen, "%s: line %zu starts a second YAML document; a job file holds one mapping", path, line);
                rc = -1;
            }
            break;
        case YAML_MAPPING_START_EVENT:
            if (in_list) {
                atoll_errf(err, errlen, "%s: line %zu: the data_path list holds a mapping; expected weights and "
                           "prefixes", path, line);
                rc = -1;
                break;
            }
            if (++depth > CFG_YAML_MAX_DEPTH) {
                atoll_errf(err, errlen, "%s: line %zu: mappings nested %d deep; at most %d levels are accepted", path,
                     line, depth, CFG_YAML_MAX_DEPTH);
                rc = -1;
            }
            have_key = 0; /* a section name: flatten */
            break;
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        case YAML_SEQUENCE_END_EVENT:
            if (!in_list) break;
            in_list = 0; /* the data_path list, as one value */
            /* fall through */
        case YAML_SCALAR_EVENT: {
            const char *s = ev.type == YAML_SCALAR_EVENT ? (const char *)ev.data.scalar.value : list;
            if (in_list) { /* Megatron's data_path: [0.3, /data/a, 0.7, /data/b] */
                int n = snprintf(list + list_len, sizeof list - list_len, "%s%s", list_len ? " " : "", s);
                if (n < 0 || (size_t)n >= sizeof list - list_len) {
                    atoll_errf(err, errlen, "%s: line %zu: the %s list is longer than %d bytes", path, line, key,
                               CFG_DATA_PATH - 1);
                    rc = -1;
                }
                list_len += n > 0 ? (size_t)n : 0;
                break;
            }
            if (depth == 0) {
                if (*s) atoll_errf(err, errlen, "%s: line %zu: the file is a bare value ('%.40s'); expected a mapping of "
                             "atoll-train's keys, e.g. 'num_layers: 24'", path, line, s);
                else atoll_errf(err, errlen, "%s: the file holds no mapping; expected atoll-train's keys, e.g. "
                          "'num_layers: 24'", path);
                rc = -1;
            } else if (!have_key) {
                snprintf(key, sizeof key, "%.*s", (int)sizeof key - 1, s);
                key_line = line;
                have_key = 1;
            } else {
                const key_def *k = find_key(key);
                if (k && seen_line[k - KEYS]) {
                    atoll_errf(err, errlen, "%s: line %zu: key '%s' is given a second time (first on line %zu); "
                         "give each key once", path, key_line, key, seen_line[k - KEYS]);
                    rc = -1;
                    break;
                }
                /* YAML's null (a plain null, Null, NULL, ~ or nothing), which Megatron's YAML files give every
                 * setting they leave alone: not given, so the default stays (not a directory named "null") */
                if (k && ev.type == YAML_SCALAR_EVENT && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                    (!*s || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL") || !strcmp(s, "~"))) {
                    seen_line[k - KEYS] = key_line;
                    have_key = 0;
                    break;
                }
                char inner[256] = "";
                cfg_status st = cfg_set(c, key, s, inner, sizeof inner);
                if (st == CFG_UNKNOWN) {
                    atoll_errf(err, errlen, "%s: line %zu: unknown key '%s' (keys are atoll-train's flags)", path,
                         key_line, key);
                    rc = -1;
                } else if (st != CFG_OK) {
                    atoll_errf(err, errlen, "%s: line %zu: %s", path, line, inner);
                    rc = -1;
                } else if (k) {
                    seen_line[k - KEYS] = key_line;
                }
                have_key = 0;
            }
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
            if (depth > 0 && have_key && !in_list && list_key(key)) {
                in_list = 1;
                list[0] = 0;
                list_len = 0;
                break;
            }
            if (depth == 0)
                atoll_errf(err, errlen, "%s: line %zu: the file is a list; expected a mapping of atoll-train's keys", path, line);
            else
                atoll_errf(err, errlen, "%s: line %zu: key '%s' has a list; atoll keys take one value (data_path "
                           "and train/valid/test_data_path take a list, a blend; rampup_batch_size three numbers; "
                           "step_batch_size_schedule its entries)", path, line, key);
            rc = -1;
            break;
        case YAML_ALIAS_EVENT:
            atoll_errf(err, errlen, "%s: line %zu: YAML aliases (*name) are not accepted; write the value out", path, line);
            rc = -1;
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rc) return rc;
        if (done) break;
    }
    if (!docs) {
        atoll_errf(err, errlen, "%s: the file is empty; expected a mapping of atoll-train's keys, e.g. 'num_layers: 24'", path);
        return -1;
    }
    return 0;
}

int cfg_parse_yaml(atoll_config *c, const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    if (len > CFG_YAML_MAX_BYTES) {
        atoll_errf(err, errlen, "%s: %zu bytes; job files of at most %d bytes are accepted", name, len, CFG_YAML_MAX_BYTES);
        return -1;
    }
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = yaml_walk(c, &p, name, err, errlen);
    yaml_parser_delete(&p);
    return rc;
}

int cfg_load_yaml(atoll_config *c, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        atoll_errf(err, errlen, "--yaml-cfg %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > CFG_YAML_MAX_BYTES) {
        if (!S_ISREG(sb.st_mode)) atoll_errf(err, errlen, "--yaml-cfg %s: not a regular file", path);
        else atoll_errf(err, errlen, "--yaml-cfg %s: %lld bytes; job files of at most %d bytes are accepted", path,
                  (long long)sb.st_size, CFG_YAML_MAX_BYTES);
        close(fd);
        return -1;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (text && got < (size_t)sb.st_size) {
        ssize_t n = read(fd, text + got, (size_t)sb.st_size - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (!text || got != (size_t)sb.st_size) {
        atoll_errf(err, errlen, "--yaml-cfg %s: %s", path, text ? "short read" : "out of memory");
        free(text);
        return -1;
    }
    int rc = cfg_parse_yaml(c, text, got, path, err, errlen);
    free(text);
    return rc;
}

int cfg_ffn(const atoll_config *c) { return c->ffn_hidden_size ? c->ffn_hidden_size : 4 * c->hidden_size; }
int cfg_rmsnorm(const atoll_config *c) { return !strcmp(c->normalization, "RMSNorm"); }
int cfg_rope(const atoll_config *c) { return !strcmp(c->position_embedding_type, "rope"); }
int cfg_rotary_base(const atoll_config *c) { return c->rotary_base > 0 ? c->rotary_base : 10000; }
double cfg_norm_eps(const atoll_config *c) { return c->norm_epsilon > 0 ? c->norm_epsilon : 1e-5; }
double cfg_rotary_percent(const atoll_config *c) { return c->rotary_percent > 0 ? c->rotary_percent : 1.0; }
double cfg_rope_factor(const atoll_config *c) { return c->rope_scaling_factor > 0 ? c->rope_scaling_factor : 8.0; }
double cfg_rope_scale(const atoll_config *c) { return c->use_rope_scaling ? cfg_rope_factor(c) : 1.0; }
double cfg_rope_interp(const atoll_config *c)
{
    return c->rotary_seq_len_interpolation_factor > 0 ? c->rotary_seq_len_interpolation_factor : 1.0;
}
int cfg_head_dim(const atoll_config *c)
{
    if (c->kv_channels > 0) return c->kv_channels;
    return c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
}
int cfg_rotary_dim(const atoll_config *c)
{
    return (int)(cfg_head_dim(c) * cfg_rotary_percent(c)); /* Megatron's int(kv_channels * rotary_percent) */
}
int cfg_qkv_bias(const atoll_config *c) { return !c->disable_bias_linear || c->add_qkv_bias; }
int cfg_tb_interval(const atoll_config *c) { return c->tensorboard_log_interval > 0 ? c->tensorboard_log_interval : 1; }
double cfg_init_std(const atoll_config *c) { return c->init_method_std > 0 ? c->init_method_std : 0.02; }
double cfg_decoupled_min_lr(const atoll_config *c)
{
    return isnan(c->decoupled_min_lr) ? c->min_lr : c->decoupled_min_lr; /* Megatron's default floor */
}
double cfg_embedding_init_std(const atoll_config *c)
{
    return c->embedding_init_method_std > 0 ? c->embedding_init_method_std : cfg_init_std(c);
}
int cfg_vocab_multiple(const atoll_config *c)
{
    return c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 128;
}
int cfg_kv_groups(const atoll_config *c)
{
    /* Megatron: --num-query-groups defaults to 1 (multi-query) once GQA is on */
    if (!c->group_query_attention) return c->num_attention_heads;
    return c->num_query_groups > 0 ? c->num_query_groups : 1;
}

/* The LLaMA family's flags: values Megatron accepts, and the
 * combinations atoll builds (RMSNorm comes with SwiGLU and rotary positions). */
static int validate_family(const atoll_config *c, char *err, size_t errlen)
{
    if (strcmp(c->attention_backend, "auto") && strcmp(c->attention_backend, "flash") &&
        strcmp(c->attention_backend, "fused")) {
        atoll_errf(err, errlen, "--attention-backend '%s': expected auto, flash (atoll's own kernels) or fused "
                   "(cuDNN's fused attention)", c->attention_backend);
        return -1;
    }
    if (c->nondeterministic_attention && megatron_given(c, find_megatron("deterministic-mode"))) {
        atoll_errf(err, errlen, "--nondeterministic-attention and --deterministic-mode ask for opposite things; "
                   "give one (without either, atoll's kernels are deterministic)");
        return -1;
    }
    if (strcmp(c->normalization, "LayerNorm") && strcmp(c->normalization, "RMSNorm")) {
        atoll_errf(err, errlen, "--normalization '%s': expected LayerNorm or RMSNorm", c->normalization);
        return -1;
    }
    if (strcmp(c->position_embedding_type, "learned_absolute") && strcmp(c->position_embedding_type, "rope")) {
        atoll_errf(err, errlen, "--position-embedding-type '%s': expected learned_absolute or rope", c->position_embedding_type);
        return -1;
    }
    if (cfg_rmsnorm(c) && (!c->swiglu || !cfg_rope(c))) {
        atoll_errf(err, errlen, "--normalization RMSNorm builds the LLaMA family: it needs --swiglu and "
             "--position-embedding-type rope too");
        return -1;
    }
    if (c->qk_layernorm && !cfg_rmsnorm(c)) {
        atoll_errf(err, errlen, "--qk-layernorm is implemented for the LLaMA family (--normalization RMSNorm "
             "--swiglu --position-embedding-type rope): an RMSNorm on each query and key head, as Qwen3's");
        return -1;
    }
    if (c->squared_relu && c->swiglu) {
        atoll_errf(err, errlen, "--squared-relu and --swiglu are two MLP activations: give one (relu(x)^2 for "
             "--squared-relu, silu(gate) * up for --swiglu)");
        return -1;
    }
    if (c->swiglu && !cfg_rmsnorm(c)) {
        atoll_errf(err, errlen, "--swiglu comes with the LLaMA family: add --normalization RMSNorm "
             "--position-embedding-type rope");
        return -1;
    }
    if (cfg_rope(c) && cfg_head_dim(c) % 2) {
        atoll_errf(err, errlen, "--position-embedding-type rope needs an even head dim, not %d (%s)", cfg_head_dim(c),
                   c->kv_channels ? "--kv-channels" : "--hidden-size / --num-attention-heads");
        return -1;
    }
    if (c->use_rope_scaling && !cfg_rope(c)) {
        atoll_errf(err, errlen, "--use-rope-scaling stretches rotary positions' long wavelengths (LLaMA-3.x's): add "
                   "--position-embedding-type rope, or leave it out");
        return -1;
    }
    if (c->rotary_seq_len_interpolation_factor > 1 && !cfg_rope(c)) {
        atoll_errf(err, errlen, "--rotary-seq-len-interpolation-factor %d divides rotary positions: add "
                   "--position-embedding-type rope, or leave it out", c->rotary_seq_len_interpolation_factor);
        return -1;
    }
    if (c->rotary_seq_len_interpolation_factor > 1 && c->use_rope_scaling) {
        atoll_errf(err, errlen, "--rotary-seq-len-interpolation-factor %d with --use-rope-scaling: atoll takes one "
                   "of the two (a Hugging Face config names one rope type: \"linear\" or \"llama3\"); leave one out",
                   c->rotary_seq_len_interpolation_factor);
        return -1;
    }
    int hd = cfg_head_dim(c), rd = cfg_rotary_dim(c);
    if (rd != hd && !cfg_rope(c)) {
        atoll_errf(err, errlen, "--rotary-percent %g says how much of each head rotary positions turn: add "
             "--position-embedding-type rope, or leave it at 1", c->rotary_percent);
        return -1;
    }
    if (rd != hd && (rd < 2 || rd % 2)) {
        atoll_errf(err, errlen, "--rotary-percent %g turns %d of the head's %d dims (rounded down, as Megatron "
             "does); they must be an even number, at least 2", c->rotary_percent, rd, hd);
        return -1;
    }
    if (rd != hd && cfg_rmsnorm(c)) {
        atoll_errf(err, errlen, "--rotary-percent below 1 is implemented for the GPT family (Nemotron's); the LLaMA "
             "family's checkpoints are Hugging Face LLaMA's, which turn the whole head");
        return -1;
    }
    if (c->group_query_attention && c->num_attention_heads % cfg_kv_groups(c)) {
        atoll_errf(err, errlen, "--group-query-attention: --num-query-groups %d must divide --num-attention-heads %d",
             cfg_kv_groups(c), c->num_attention_heads);
        return -1;
    }
    return 0;
}
int cfg_max_pos(const atoll_config *c) { return c->max_position_embeddings ? c->max_position_embeddings : c->seq_length; }

void cfg_stage_layers(const atoll_config *c, int vstage, int *begin, int *end)
{
    int pp = c->pipeline_model_parallel_size, L = c->num_layers;
    int first = c->decoder_first_pipeline_num_layers, last = c->decoder_last_pipeline_num_layers;
    if (!first && !last) { /* even: every virtual stage holds L / (pp v) */
        int per = L / (pp * cfg_virtual_stages(c));
        *begin = vstage * per;
        *end = *begin + per;
        return;
    }
    /* a round of chunks: each stage's layers / v, stage by stage */
    int v = cfg_virtual_stages(c), chunk = vstage / pp, stage = vstage % pp, round = 0;
    *begin = 0;
    for (int s = 0; s < pp; s++) {
        int n = cfg_stage_num_layers(c, s) / v;
        if (s < stage) *begin += n;
        round += n;
    }
    *begin += chunk * round;
    *end = *begin + cfg_stage_num_layers(c, stage) / v;
}

int cfg_stage_num_layers(const atoll_config *c, int stage)
{
    if (!c->decoder_first_pipeline_num_layers && !c->decoder_last_pipeline_num_layers)
        return c->num_layers / c->pipeline_model_parallel_size;
    int first = c->decoder_first_pipeline_num_layers, last = c->decoder_last_pipeline_num_layers;
    int pp = c->pipeline_model_parallel_size, others = pp - !!first - !!last;
    if (stage == 0 && first) return first;
    if (stage == pp - 1 && last) return last;
    return others ? (c->num_layers - first - last) / others : 0;
}

int cfg_virtual_stages(const atoll_config *c)
{
    if (c->num_virtual_stages_per_pipeline_rank > 0) return c->num_virtual_stages_per_pipeline_rank;
    int per_stage = c->pipeline_model_parallel_size ? c->num_layers / c->pipeline_model_parallel_size : 0;
    if (!c->num_layers_per_virtual_pipeline_stage || !per_stage) return 1;
    return per_stage / c->num_layers_per_virtual_pipeline_stage;
}

int cfg_interleaved(const atoll_config *c)
{
    return c->num_layers_per_virtual_pipeline_stage > 0 || c->num_virtual_stages_per_pipeline_rank > 1;
}

/* The group size when one applies: interleaved, and given other than pp */
static int micro_group(const atoll_config *c)
{
    int g = c->microbatch_group_size_per_virtual_pipeline_stage;
    return cfg_interleaved(c) && g != c->pipeline_model_parallel_size ? g : 0;
}

int cfg_microbatch_group(int pp, int v, int g) { return v > 1 && g > 0 ? g : pp; }

int cfg_pipeline_warmup(int pp, int rank, int m, int v, int g)
{
    int total = m * v;
    int w = v <= 1 ? pp - rank - 1 : (pp - rank - 1) * 2 + (v - 1) * cfg_microbatch_group(pp, v, g);
    return w < total ? w : total;
}

int cfg_microbatch_group_check(int pp, int m, int v, int g, char *err, size_t errlen)
{
    if (v <= 1) return 0;
    if (g <= 0) {
        if (m % pp) {
            atoll_errf(err, errlen, "the interleaved schedule needs the number of micro-batches (%d) to be a multiple "
                       "of --pipeline-model-parallel-size (%d), or a --microbatch-group-size-per-virtual-pipeline-stage "
                       "between %d and %d", m, pp, pp, m);
            return -1;
        }
        return 0;
    }
    if (g < pp || g > m) {
        atoll_errf(err, errlen, "--microbatch-group-size-per-virtual-pipeline-stage %d must be between "
                   "--pipeline-model-parallel-size (%d) and the step's number of micro-batches (%d)", g, pp, m);
        return -1;
    }
    if (m % g && m % g < pp) {
        atoll_errf(err, errlen, "%d micro-batches in groups of %d (--microbatch-group-size-per-virtual-pipeline-stage) "
                   "leave a last group of %d, fewer than --pipeline-model-parallel-size %d: the pipeline would stall "
                   "on it; use a group size that divides %d or leaves at least %d", m, g, m % g, pp, m, pp);
        return -1;
    }
    return 0;
}

int cfg_validate_model(const atoll_config *c, char *err, size_t errlen)
{
    const struct { const char *flag; int v; } need[] = {
        { "--num-layers", c->num_layers }, { "--hidden-size", c->hidden_size },
        { "--num-attention-heads", c->num_attention_heads }, { "--seq-length", c->seq_length },
        { "--vocab-size", c->vocab_size }, { "--micro-batch-size", c->micro_batch_size },
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].v <= 0) {
            atoll_errf(err, errlen, "%s is required and must be positive", need[i].flag);
            return -1;
        }
    if (c->kv_channels && (long long)c->kv_channels * c->num_attention_heads > CFG_MAX_HIDDEN) {
        atoll_errf(err, errlen, "--kv-channels %d x --num-attention-heads %d = %lld, the attention's width, is over %d",
             c->kv_channels, c->num_attention_heads, (long long)c->kv_channels * c->num_attention_heads, CFG_MAX_HIDDEN);
        return -1;
    }
    if (!c->kv_channels && c->hidden_size % c->num_attention_heads) {
        atoll_errf(err, errlen, "--hidden-size %d is not divisible by --num-attention-heads %d (or give the head "
             "dim with --kv-channels)", c->hidden_size, c->num_attention_heads);
        return -1;
    }
    if (cfg_max_pos(c) < c->seq_length) {
        atoll_errf(err, errlen, "--max-position-embeddings %d is smaller than --seq-length %d",
             cfg_max_pos(c), c->seq_length);
        return -1;
    }
    return validate_family(c, err, errlen);
}

int cfg_validate_batch_schedule(const atoll_config *c, char *err, size_t errlen)
{
    uint64_t from[CFG_MAX_SCHEDULE];
    int bs[CFG_MAX_SCHEDULE], n = cfg_batch_schedule(c, from, bs);
    const char *sched = c->step_batch_size_schedule;
    if (n && c->rampup_batch_size[0]) {
        atoll_errf(err, errlen, "--step-batch-size-schedule and --rampup-batch-size both say how the batch grows; give "
                   "one (Megatron now reads only the schedule: a ramp START INCREMENT SAMPLES to G is the schedule "
                   "\"0:START\" then each next batch from the tokens where the ramp reaches it)");
        return -1;
    }
    if (n && c->decrease_batch_size_if_needed) {
        atoll_errf(err, errlen, "--step-batch-size-schedule with --decrease-batch-size-if-needed: a schedule's batches "
                   "are trained as given, each whole micro-batches on every DP rank (Megatron refuses the pair too); "
                   "leave --decrease-batch-size-if-needed out");
        return -1;
    }
    int seq = c->seq_length > 0 ? c->seq_length : 1;
    if (n && from[0]) {
        atoll_errf(err, errlen, "--step-batch-size-schedule %s: the first entry must start at 0 tokens (the batch of "
                   "the first step); it starts at sample %llu (tokens / --seq-length %d)", sched,
                   (unsigned long long)from[0], seq);
        return -1;
    }
    for (int i = 1; i < n; i++)
        if (from[i] == from[i - 1]) {
            atoll_errf(err, errlen, "--step-batch-size-schedule %s: entries %d and %d both start at sample %llu "
                       "(tokens / --seq-length %d, rounded down); each entry must start at least one sample (%d "
                       "tokens) after the one before", sched, i, i + 1, (unsigned long long)from[i], seq, seq);
            return -1;
        }
    if (n && c->global_batch_size && c->global_batch_size != bs[n - 1]) {
        atoll_errf(err, errlen, "--global-batch-size %d and --step-batch-size-schedule %s, whose last batch is %d: the "
                   "schedule gives the global batch; leave --global-batch-size out or make it %d",
                   c->global_batch_size, sched, bs[n - 1], bs[n - 1]);
        return -1;
    }
    int start, inc;
    uint64_t samples;
    if (!cfg_rampup(c, &start, &inc, &samples)) return 0;
    int gbs = c->global_batch_size;
    if (gbs < 1) {
        atoll_errf(err, errlen, "--rampup-batch-size needs --global-batch-size: the batch the ramp grows to");
        return -1;
    }
    if (start > gbs || (gbs - start) % inc) {
        atoll_errf(err, errlen, "--rampup-batch-size %s: the batch must grow from START by whole INCREMENTs to "
                   "--global-batch-size %d; %d + k x %d never equals it (e.g. START %d)", c->rampup_batch_size, gbs,
                   start, inc, start > gbs ? gbs : gbs - (gbs - start) / inc * inc);
        return -1;
    }
    if ((gbs - start) / inc > (1 << 20)) {
        atoll_errf(err, errlen, "--rampup-batch-size %s: %d increments; at most %d (raise INCREMENT)",
                   c->rampup_batch_size, (gbs - start) / inc, 1 << 20);
        return -1;
    }
    return 0;
}

int cfg_validate_training(const atoll_config *c, char *err, size_t errlen)
{
    if (cfg_validate_batch_schedule(c, err, errlen)) return -1;
    if (c->train_iters < 1) {
        atoll_errf(err, errlen, "--train-iters must be at least 1");
        return -1;
    }
    if (c->min_lr > c->lr) {
        atoll_errf(err, errlen, "--min-lr %g is above --lr %g; the schedule decays from --lr down to --min-lr", c->min_lr, c->lr);
        return -1;
    }
    if (c->save_interval && !c->save[0]) {
        atoll_errf(err, errlen, "--save-interval %d needs --save DIR", c->save_interval);
        return -1;
    }
    if (c->save_mtbf > 0 && !c->save[0]) {
        atoll_errf(err, errlen, "--save-mtbf %g needs --save DIR", c->save_mtbf);
        return -1;
    }
    if (c->deterministic_dp && c->use_distributed_optimizer) {
        atoll_errf(err, errlen, "--deterministic-dp does not work with --use-distributed-optimizer yet "
                   "(its reduce-scatter sums in fp32); leave one of them out");
        return -1;
    }
    if (c->save_keep > 0 && !c->save[0]) {
        atoll_errf(err, errlen, "--save-keep %d needs --save DIR", c->save_keep);
        return -1;
    }
    if (c->exit_duration_in_mins > 0 && !c->save[0]) {
        atoll_errf(err, errlen, "--exit-duration-in-mins %g stops the run with a checkpoint: give --save DIR",
                   c->exit_duration_in_mins);
        return -1;
    }
    const char *load_flag = c->ckpt_step ? "--ckpt-step" : c->finetune ? "--finetune" : c->no_load_optim ? "--no-load-optim"
                          : c->no_load_rng ? "--no-load-rng" : c->exit_on_missing_checkpoint
                          ? "--exit-on-missing-checkpoint" : NULL;
    if (load_flag && !c->load[0]) {
        atoll_errf(err, errlen, "%s says how to take the checkpoint in --load: give --load DIR", load_flag);
        return -1;
    }
    int decay = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    if (c->lr_decay_style == LR_DECAY_WSD &&
        (c->lr_wsd_decay_iters < 1 || c->lr_wsd_decay_iters > decay - c->lr_warmup_iters)) {
        atoll_errf(err, errlen, "--lr-decay-style WSD needs --lr-wsd-decay-iters (or -samples) from 1 to the %d "
                   "iterations after the warm-up and up to --lr-decay-iters (or --train-iters), not %d",
                   decay - c->lr_warmup_iters, c->lr_wsd_decay_iters);
        return -1;
    }
    if (c->lr_warmup_init > c->lr) {
        atoll_errf(err, errlen, "--lr-warmup-init %g is above --lr %g; the warm-up rises from it to --lr",
                   c->lr_warmup_init, c->lr);
        return -1;
    }
    return 0;
}

int cfg_data_parallel_size(const atoll_config *c, int world)
{
    int64_t mp = (int64_t)c->tensor_model_parallel_size * c->pipeline_model_parallel_size;
    if (mp <= 0 || world <= 0 || world % mp) return 0;
    return (int)(world / mp);
}

int cfg_global_batch(const atoll_config *c, int dp)
{
    if (c->global_batch_size) return c->global_batch_size;
    int bs[CFG_MAX_SCHEDULE], n = cfg_batch_schedule(c, NULL, bs);
    if (n) return bs[n - 1];
    int64_t g = (int64_t)c->micro_batch_size * dp; /* Megatron's default: one micro-batch per DP rank */
    return g > 0 && g <= CFG_MAX_GLOBAL_BATCH ? (int)g : 0;
}

/* The samples a step of dp ranks can take at a time: a micro-batch on each DP
 * rank, pp of them when interleaved (whole rounds of the schedule; with a group
 * size, any number its rules accept: cfg_microbatch_group_check). */
static int64_t batch_unit(const atoll_config *c, int dp)
{
    int64_t u = (int64_t)c->micro_batch_size * dp;
    return cfg_interleaved(c) && !micro_group(c) ? u * c->pipeline_model_parallel_size : u;
}

/* What batch_unit multiplies beyond micro-batch * dp, for messages */
static const char *batch_unit_note(const atoll_config *c)
{
    return cfg_interleaved(c) && !micro_group(c) ? " times pp (interleaved)" : "";
}

/* --decrease-batch-size-if-needed: the batch down to a whole number of units */
static int64_t running_batch(const atoll_config *c, int dp, int64_t batch)
{
    int64_t u = batch_unit(c, dp);
    return c->decrease_batch_size_if_needed && u > 0 ? batch / u * u : batch;
}

int cfg_rampup(const atoll_config *c, int *start, int *increment, uint64_t *samples)
{
    unsigned long long a = 0, b = 0, n = 0;
    int ok = c->rampup_batch_size[0] && sscanf(c->rampup_batch_size, "%llu %llu %llu", &a, &b, &n) == 3;
    *start = ok ? (int)a : 0;
    *increment = ok ? (int)b : 0;
    *samples = ok ? (uint64_t)n : 0;
    return ok;
}

int cfg_batch_schedule(const atoll_config *c, uint64_t *from_samples, int *batch)
{
    uint64_t seq = c->seq_length > 0 ? (uint64_t)c->seq_length : 1;
    int n = 0, used;
    unsigned long long t;
    int b;
    for (const char *p = c->step_batch_size_schedule;
         n < CFG_MAX_SCHEDULE && sscanf(p, " %llu:%d%n", &t, &b, &used) == 2; p += used, n++) {
        if (from_samples) from_samples[n] = (uint64_t)t / seq; /* Megatron's threshold // seq_length */
        if (batch) batch[n] = b;
    }
    return n;
}

int cfg_batch_varies(const atoll_config *c)
{
    return c->rampup_batch_size[0] || c->step_batch_size_schedule[0];
}

int cfg_batch_max(const atoll_config *c, int dp)
{
    int bs[CFG_MAX_SCHEDULE], n = cfg_batch_schedule(c, NULL, bs), m = cfg_global_batch(c, dp); /* a ramp's top */
    for (int i = 0; i < n; i++)
        if (bs[i] > m) m = bs[i];
    return m;
}

/* The ramp's level after `consumed` samples: floor(consumed / (SAMPLES / n)) for
 * n increments, at most n; Megatron divides in floating point, this exactly. */
static uint64_t ramp_level(uint64_t consumed, uint64_t n, uint64_t samples)
{
    unsigned __int128 l = (unsigned __int128)consumed * n / samples;
    return l < n ? (uint64_t)l : n;
}

/* The ramp's increments, (global - START) / INCREMENT; 0 without a ramp or when
 * it does not divide (cfg_validate_training refuses that). */
static uint64_t ramp_increments(const atoll_config *c, int gbs, int *start, int *inc, uint64_t *samples)
{
    if (!cfg_rampup(c, start, inc, samples) || gbs < *start || (gbs - *start) % *inc) return 0;
    return (uint64_t)((gbs - *start) / *inc);
}

/* The batch of the step that starts after `consumed` samples, before any
 * rounding, and in *next the first sample at which it may change (UINT64_MAX:
 * it does not): a schedule's entry, a ramp's level, or the global batch. */
static uint64_t batch_level(const atoll_config *c, int dp, uint64_t consumed, uint64_t *next)
{
    uint64_t from[CFG_MAX_SCHEDULE];
    int bs[CFG_MAX_SCHEDULE], m = cfg_batch_schedule(c, from, bs);
    *next = UINT64_MAX;
    if (m) {
        int i = 0;
        while (i + 1 < m && from[i + 1] <= consumed) i++;
        if (i + 1 < m) *next = from[i + 1];
        return (uint64_t)bs[i];
    }
    int gbs = cfg_global_batch(c, dp), start, inc;
    uint64_t samples, n = ramp_increments(c, gbs, &start, &inc, &samples);
    if (!n) return (uint64_t)gbs;
    uint64_t j = ramp_level(consumed, n, samples);
    if (j < n) *next = (uint64_t)(((unsigned __int128)(j + 1) * samples + n - 1) / n); /* ceil((j+1) SAMPLES / n) */
    return (uint64_t)start + (uint64_t)inc * j;
}

int cfg_batch_at(const atoll_config *c, int dp, uint64_t consumed)
{
    uint64_t next;
    return (int)running_batch(c, dp, (int64_t)batch_level(c, dp, consumed, &next));
}

/* Steps from the start while at most `limit` samples are consumed and fewer
 * than `max_iters` taken, a level of the ramp or schedule at a time: *iters,
 * and the samples they consume. */
static uint64_t ramp_walk(const atoll_config *c, int dp, uint64_t limit, long long max_iters, long long *iters)
{
    uint64_t done = 0;
    long long it = 0;
    int walks = cfg_global_batch(c, dp) > 0;
    while (walks && it < max_iters && done <= limit) {
        /* this level lasts while done < its end (the next level's first sample) and done <= limit */
        uint64_t next, b = batch_level(c, dp, done, &next);
        uint64_t end = limit == UINT64_MAX ? UINT64_MAX : limit + 1;
        if (next < end) end = next;
        uint64_t k = end == UINT64_MAX ? UINT64_MAX : (end - done + b - 1) / b;
        if (k > (uint64_t)(max_iters - it)) k = (uint64_t)(max_iters - it);
        done += k * b;
        it += (long long)k;
    }
    *iters = it;
    return done;
}

uint64_t cfg_samples_after(const atoll_config *c, int dp, long long iters)
{
    long long it;
    return ramp_walk(c, dp, UINT64_MAX, iters, &it);
}

int cfg_step_batch(const atoll_config *c, int dp)
{
    return (int)running_batch(c, dp, cfg_global_batch(c, dp));
}

int cfg_micro_batches(const atoll_config *c, int dp)
{
    int64_t per_step = (int64_t)c->micro_batch_size * dp, gbs = cfg_step_batch(c, dp);
    if (per_step <= 0 || gbs <= 0 || gbs % per_step) return 0;
    return (int)(gbs / per_step);
}

/* The layers per pipeline stage: an even split, or Megatron's uneven one with
 * --decoder-first/last-pipeline-num-layers and the rest even over the others. */
static int validate_stages(const atoll_config *c, char *err, size_t errlen)
{
    int pp = c->pipeline_model_parallel_size, L = c->num_layers;
    int first = c->decoder_first_pipeline_num_layers, last = c->decoder_last_pipeline_num_layers;
    if (!first && !last) {
        if (L % pp == 0) return 0;
        atoll_errf(err, errlen, "--num-layers %d is not divisible by --pipeline-model-parallel-size %d (or give "
                   "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers for an uneven split)",
                   L, pp);
        return -1;
    }
    const char *which = first && last ? "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers"
                        : first ? "--decoder-first-pipeline-num-layers" : "--decoder-last-pipeline-num-layers";
    if (pp < 2) {
        atoll_errf(err, errlen, "%s needs --pipeline-model-parallel-size > 1", which);
        return -1;
    }
    if (c->num_layers_per_virtual_pipeline_stage) {
        atoll_errf(err, errlen, "%s with --num-layers-per-virtual-pipeline-stage: the stages hold different numbers "
                   "of layers; give the model chunks per stage with --num-virtual-stages-per-pipeline-rank instead "
                   "(Megatron's flag for an uneven split)", which);
        return -1;
    }
    int others = pp - !!first - !!last, rest = L - first - last;
    if (others == 0 && rest != 0) {
        atoll_errf(err, errlen, "%s: %d + %d layers on the 2 pipeline stages, but --num-layers is %d; they must add "
                   "up to it", which, first, last, L);
        return -1;
    }
    if (others && (rest < others || rest % others)) {
        atoll_errf(err, errlen, "%s: %d of --num-layers %d are left for the other %d pipeline stage%s, which need the "
                   "same number each and at least one; choose values that leave a positive multiple of %d", which,
                   rest, L, others, others > 1 ? "s" : "", others);
        return -1;
    }
    int v = cfg_virtual_stages(c);
    const struct { const char *what; int n; } parts[] = {
        { "--decoder-first-pipeline-num-layers", first }, { "--decoder-last-pipeline-num-layers", last },
        { "the layers of each other stage,", others ? rest / others : 0 },
    };
    for (int i = 0; i < 3 && v > 1; i++)
        if (parts[i].n % v) {
            atoll_errf(err, errlen, "--num-virtual-stages-per-pipeline-rank %d splits each stage's layers evenly over "
                       "its %d model chunks: %s %d, is not a multiple of %d", v, v, parts[i].what, parts[i].n, v);
            return -1;
        }
    return 0;
}

int cfg_validate_layout(const atoll_config *c, int world, int island_gpus, char *err, size_t errlen)
{
    if (cfg_validate_model(c, err, errlen) || cfg_validate_training(c, err, errlen)) return -1;
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    if (tp < 1 || pp < 1) {
        atoll_errf(err, errlen, "--tensor-model-parallel-size and --pipeline-model-parallel-size must be at least 1");
        return -1;
    }
    if (world < 1 || world > CFG_MAX_RANKS) {
        atoll_errf(err, errlen, "the job needs 1 to %d GPUs (--num-gpus), not %d", CFG_MAX_RANKS, world);
        return -1;
    }
    /* Products in 64 bits: tp and pp are each at most CFG_MAX_RANKS. */
    int64_t mp = (int64_t)tp * pp;
    if (mp > world) {
        atoll_errf(err, errlen, "tp*pp = %d*%d = %lld is more than the job's %d ranks (--num-gpus, or the launched world); use a layout "
             "whose tp*pp divides it", tp, pp, (long long)mp, world);
        return -1;
    }
    if (world % mp) {
        atoll_errf(err, errlen, "--num-gpus %d is not divisible by tp*pp = %d*%d = %lld; use a multiple of %lld",
             world, tp, pp, (long long)mp, (long long)mp);
        return -1;
    }
    int dp = (int)(world / mp);
    if (c->num_attention_heads % tp) {
        atoll_errf(err, errlen, "--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d",
             c->num_attention_heads, tp);
        return -1;
    }
    if (cfg_ffn(c) % tp) {
        atoll_errf(err, errlen, "FFN hidden size %d is not divisible by --tensor-model-parallel-size %d",
             cfg_ffn(c), tp);
        return -1;
    }
    if (cfg_kv_groups(c) % tp) {
        atoll_errf(err, errlen, "--num-query-groups %d is not divisible by --tensor-model-parallel-size %d",
             cfg_kv_groups(c), tp);
        return -1;
    }
    if (c->vocab_size % tp) {
        atoll_errf(err, errlen, "--vocab-size %d is not divisible by --tensor-model-parallel-size %d (pad it to %lld)",
             c->vocab_size, tp, ((long long)c->vocab_size + tp - 1) / tp * tp);
        return -1;
    }
    int nv = c->num_virtual_stages_per_pipeline_rank;
    if (nv && c->num_layers_per_virtual_pipeline_stage) {
        atoll_errf(err, errlen, "--num-virtual-stages-per-pipeline-rank %d and --num-layers-per-virtual-pipeline-stage "
                   "%d both set the interleaving; give one", nv, c->num_layers_per_virtual_pipeline_stage);
        return -1;
    }
    if (nv > 1 && pp < 2) {
        atoll_errf(err, errlen, "--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size > 1");
        return -1;
    }
    if (nv > 1 && !c->decoder_first_pipeline_num_layers && !c->decoder_last_pipeline_num_layers &&
        (c->num_layers % pp == 0) && (c->num_layers / pp) % nv) {
        atoll_errf(err, errlen, "layers per pipeline stage (%d = %d/%d) is not divisible by "
             "--num-virtual-stages-per-pipeline-rank %d", c->num_layers / pp, c->num_layers, pp, nv);
        return -1;
    }
    if (validate_stages(c, err, errlen)) return -1;
    if (c->num_layers_per_virtual_pipeline_stage) {
        int per_stage = c->num_layers / pp, lv = c->num_layers_per_virtual_pipeline_stage;
        if (pp < 2) {
            atoll_errf(err, errlen, "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size > 1");
            return -1;
        }
        if (per_stage % lv) {
            atoll_errf(err, errlen, "layers per pipeline stage (%d = %d/%d) is not divisible by "
                 "--num-layers-per-virtual-pipeline-stage %d", per_stage, c->num_layers, pp, lv);
            return -1;
        }
    }
    if (c->sequence_parallel && tp > 1 && c->seq_length % tp) {
        atoll_errf(err, errlen, "--sequence-parallel needs --seq-length %d divisible by --tensor-model-parallel-size %d",
             c->seq_length, tp);
        return -1;
    }
    int64_t per_step = (int64_t)c->micro_batch_size * dp; /* both at most 2^20 */
    int gbs = cfg_global_batch(c, dp);
    if (!gbs) {
        atoll_errf(err, errlen, "the default --global-batch-size, micro-batch * dp = %d*%d = %lld, is over the limit "
             "of %d; give --global-batch-size", c->micro_batch_size, dp, (long long)per_step, CFG_MAX_GLOBAL_BATCH);
        return -1;
    }
    int64_t unit = batch_unit(c, dp);
    int start, inc;
    uint64_t ramp_samples;
    int ramp = cfg_rampup(c, &start, &inc, &ramp_samples);
    if (c->decrease_batch_size_if_needed) { /* each step's batch rounds down to whole units: at least one */
        if (gbs < unit || (ramp && start < unit)) {
            atoll_errf(err, errlen, "--decrease-batch-size-if-needed: the %s %d is less than micro-batch * dp = "
                 "%d*%d%s = %lld, the fewest samples a step of this layout takes; use a smaller layout or a larger "
                 "batch", gbs < unit ? "--global-batch-size" : "ramp's first batch", gbs < unit ? gbs : start,
                 c->micro_batch_size, dp, batch_unit_note(c), (long long)unit);
            return -1;
        }
        ramp = 0;
    } else if (gbs % per_step) {
        atoll_errf(err, errlen, "--global-batch-size %d is not divisible by micro-batch * dp = %d*%d = %lld; use a "
             "multiple of %lld (or --decrease-batch-size-if-needed to train on the largest batch that is)", gbs,
             c->micro_batch_size, dp, (long long)per_step, (long long)per_step);
        return -1;
    }
    int m = cfg_micro_batches(c, dp), group = micro_group(c), v = cfg_virtual_stages(c);
    if (cfg_microbatch_group_check(pp, m, v, group, err, errlen)) return -1;
    if (ramp && start < gbs) { /* each batch of the ramp: START + k x INCREMENT */
        if (start % unit || inc % unit) {
            atoll_errf(err, errlen, "--rampup-batch-size %s: every batch of the ramp must be divisible by micro-batch "
                 "* dp = %d*%d%s = %lld; START and INCREMENT must be multiples of %lld", c->rampup_batch_size,
                 c->micro_batch_size, dp, batch_unit_note(c),
                 (long long)unit, (long long)unit);
            return -1;
        }
    }
    if (group && ramp && start < gbs) /* and each batch of the ramp in groups */
        for (int64_t b = start; b < gbs; b += inc)
            if (cfg_microbatch_group_check(pp, (int)(b / unit), v, group, err, errlen)) return -1;
    int sched_bs[CFG_MAX_SCHEDULE], nsched = cfg_batch_schedule(c, NULL, sched_bs);
    for (int i = 0; i < nsched; i++) { /* every batch of the schedule, checked before the run reaches it */
        if (group && !(sched_bs[i] % unit) && cfg_microbatch_group_check(pp, (int)(sched_bs[i] / unit), v, group, err, errlen))
            return -1;
        if (sched_bs[i] % unit) {
            atoll_errf(err, errlen, "--step-batch-size-schedule %s: every batch must be divisible by micro-batch * dp = "
                 "%d*%d%s = %lld; entry %d's, %d, is not (a run resumed past an entry may change its batch to "
                 "a multiple: the steps it covers are done)", c->step_batch_size_schedule, c->micro_batch_size, dp,
                 batch_unit_note(c), (long long)unit, i + 1, sched_bs[i]);
            return -1;
        }
    }
    if (island_gpus > 0 && tp > island_gpus) {
        atoll_errf(err, errlen, "--tensor-model-parallel-size %d is larger than the biggest NVLink island (%d GPUs); "
             "use at most %d", tp, island_gpus, island_gpus);
        return -1;
    }
    cfg_rank_order o;
    return cfg_rank_order_parse(c->rank_order, tp, dp, pp, &o, err, errlen);
}

/* ---- rank order ---- */

static const char *const DIM_NAMES[CFG_NDIMS] = { "tp", "cp", "ep", "dp", "pp" };

const char *cfg_dim_name(cfg_dim d) { return d >= 0 && d < CFG_NDIMS ? DIM_NAMES[d] : "?"; }

int cfg_rank_order_parse(const char *order, int tp, int dp, int pp, cfg_rank_order *o, char *err, size_t errlen)
{
    const char *text = order && *order ? order : CFG_DEFAULT_RANK_ORDER;
    memset(o, 0, sizeof *o);
    o->size[CFG_DIM_TP] = tp;
    o->size[CFG_DIM_CP] = 1;
    o->size[CFG_DIM_EP] = 1;
    o->size[CFG_DIM_DP] = dp;
    o->size[CFG_DIM_PP] = pp;
    int seen[CFG_NDIMS] = { 0 };
    for (const char *t = text; *t;) {
        size_t n = strcspn(t, "-");
        int d = -1;
        for (int i = 0; i < CFG_NDIMS; i++)
            if (n == 2 && !strncmp(t, DIM_NAMES[i], 2)) d = i;
        if (d < 0 || seen[d]) {
            atoll_errf(err, errlen, "--rank-order '%s': %s token '%.*s' (use each of tp, cp, ep, dp, pp at most once, "
                 "joined by '-', e.g. %s)", text, d < 0 ? "unknown" : "repeated", (int)(n < 16 ? n : 16), t,
                 CFG_DEFAULT_RANK_ORDER);
            return -1;
        }
        seen[d] = 1;
        o->dim[o->ndim++] = (cfg_dim)d;
        t += n;
        if (*t == '-' && !*++t) {
            atoll_errf(err, errlen, "--rank-order '%s' ends with '-' (e.g. %s)", text, CFG_DEFAULT_RANK_ORDER);
            return -1;
        }
    }
    /* Megatron-Core appends absent dimensions of size 1 and refuses absent larger ones. */
    for (int d = 0; d < CFG_NDIMS; d++) {
        if (seen[d]) continue;
        if (o->size[d] != 1) {
            atoll_errf(err, errlen, "--rank-order '%s' leaves out %s, whose size is %d (e.g. %s)", text, DIM_NAMES[d],
                 o->size[d], CFG_DEFAULT_RANK_ORDER);
            return -1;
        }
        o->dim[o->ndim++] = (cfg_dim)d;
    }
    int64_t stride = 1;
    for (int i = 0; i < o->ndim; i++) {
        o->stride[o->dim[i]] = (int)stride;
        stride *= o->size[o->dim[i]];
        if (stride > CFG_MAX_RANKS) {
            atoll_errf(err, errlen, "--rank-order '%s': tp*cp*ep*dp*pp is over %d ranks", text, CFG_MAX_RANKS);
            return -1;
        }
    }
    return 0;
}

double cfg_layer_params(const atoll_config *c)
{
    double h = c->hidden_size, f = cfg_ffn(c), d = cfg_head_dim(c), q = (double)c->num_attention_heads * d;
    double qkv = q + 2.0 * cfg_kv_groups(c) * d;
    double bias = c->disable_bias_linear ? 0 : 1, norm = cfg_rmsnorm(c) ? h : 2 * h, up = c->swiglu ? 2 : 1;
    double qkv_bias = cfg_qkv_bias(c) ? 1 : 0;
    return 2 * norm                             /* ln_1, ln_2 / the RMSNorms */
           + (c->qk_layernorm ? 2 * d : 0)      /* the query and key heads' RMSNorms */
           + (h * qkv + qkv_bias * qkv)         /* c_attn, or q, k, v (GQA: smaller k, v) */
           + (q * h + bias * h)                 /* attention output (heads x head dim in, hidden out) */
           + up * (h * f + bias * f)            /* c_fc, or SwiGLU's gate and up */
           + (f * h + bias * h);                /* down projection */
}

double cfg_num_params(const atoll_config *c)
{
    double h = c->hidden_size, V = c->vocab_size, P = cfg_max_pos(c), norm = cfg_rmsnorm(c) ? h : 2 * h;
    double emb = V * h * (c->untie_embeddings_and_output_weights ? 2 : 1) + (cfg_rope(c) ? 0 : P * h);
    return c->num_layers * cfg_layer_params(c) + emb + norm /* ln_f */;
}

double cfg_flops_per_token(const atoll_config *c)
{
    /* PaLM's attention term, with the attention's width (heads x head dim) */
    return 6.0 * cfg_num_params(c) +
           12.0 * c->num_layers * (double)c->num_attention_heads * cfg_head_dim(c) * (double)c->seq_length;
}

int cfg_recompute_layers(const atoll_config *c, int chunk_layers)
{
    if (c->recompute_granularity != RECOMPUTE_FULL) return 0;
    if (strcmp(c->recompute_method, "block")) return chunk_layers;
    return c->recompute_num_layers < chunk_layers ? c->recompute_num_layers : chunk_layers;
}

int cfg_recompute_group(const atoll_config *c)
{
    if (c->recompute_granularity != RECOMPUTE_FULL || strcmp(c->recompute_method, "uniform")) return 1;
    return c->recompute_num_layers > 1 ? c->recompute_num_layers : 1;
}

int cfg_chunk_layers(const atoll_config *c, int stage_layers)
{
    int v = cfg_virtual_stages(c);
    return stage_layers / v > 0 ? stage_layers / v : stage_layers;
}

int cfg_recompute_stage_layers(const atoll_config *c, int stage_layers)
{
    int v = cfg_virtual_stages(c), r = v * cfg_recompute_layers(c, cfg_chunk_layers(c, stage_layers));
    return r < stage_layers ? r : stage_layers;
}

double cfg_recompute_fraction(const atoll_config *c)
{
    int pp = c->pipeline_model_parallel_size > 0 ? c->pipeline_model_parallel_size : 1;
    double rebuilt = 0;
    if (c->num_layers <= 0) return 0;
    for (int st = 0; st < pp; st++) rebuilt += cfg_recompute_stage_layers(c, cfg_stage_num_layers(c, st));
    return rebuilt / c->num_layers;
}

const char *cfg_recompute_name(cfg_recompute r)
{
    return r == RECOMPUTE_SELECTIVE ? "selective" : r == RECOMPUTE_FULL ? "full" : "none";
}

const char *cfg_lr_decay_name(cfg_lr_decay d)
{
    static const char *const n[] = { "cosine", "linear", "constant", "WSD", "inverse-square-root" };
    return d >= LR_DECAY_COSINE && d <= LR_DECAY_INVSQRT ? n[d] : "cosine";
}

const char *cfg_wsd_decay_name(cfg_wsd_decay d)
{
    static const char *const n[] = { "exponential", "linear", "cosine", "minus_sqrt" };
    return d >= WSD_EXPONENTIAL && d <= WSD_MINUS_SQRT ? n[d] : "exponential";
}

const char *cfg_wd_incr_name(cfg_wd_incr s)
{
    static const char *const n[] = { "constant", "linear", "cosine" };
    return s >= WD_INCR_CONSTANT && s <= WD_INCR_COSINE ? n[s] : "constant";
}

double cfg_bubble_theory(const atoll_config *c, int world, int batch)
{
    int dp = cfg_data_parallel_size(c, world);
    int pp = c->pipeline_model_parallel_size;
    if (!dp || pp < 2 || c->micro_batch_size < 1) return 0.0;
    double m = batch > 0 ? (double)batch / ((double)c->micro_batch_size * dp) : (double)cfg_micro_batches(c, dp);
    return (pp - 1) / (cfg_virtual_stages(c) * m + (pp - 1));
}
