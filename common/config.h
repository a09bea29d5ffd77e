/* config: one parser for the Megatron-LM style settings of a training job.
 *
 * atoll-train, `atoll submit` and `atoll plan` all take the same flags
 * (`--num-layers`, `--tensor-model-parallel-size`, ...) and the same keys in a
 * `--yaml-cfg` file (underscores or dashes, as Megatron accepts). This module is
 * the single table of those keys, their defaults and the layout rules that every
 * job must satisfy. Each caller handles its own extra flags and hands the rest here.
 *
 * Ownership: atoll_config holds no pointers to caller memory; strings are copied
 * into fixed buffers. All functions are pure apart from cfg_load_yaml (reads a file).
 */
#ifndef ATOLL_CONFIG_H
#define ATOLL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_STR 512
#define CFG_DATA_PATH 4096 /* --data-path: a blend names many prefixes */

/* The largest values accepted; each is refused above its limit with a message.
 * They keep every product of the layout rules exact in 64 bits (and in int where
 * the engine stores it); whether a model fits is a separate, memory check. */
#define CFG_MAX_RANKS (1 << 20)          /* --num-gpus, tp, pp */
#define CFG_MAX_LAYERS (1 << 20)
#define CFG_MAX_HIDDEN (1 << 20)
#define CFG_MAX_HEADS (1 << 16)
#define CFG_MAX_SEQ (1 << 24)            /* --seq-length, --max-position-embeddings */
#define CFG_MAX_VOCAB (1 << 24)
#define CFG_MAX_MICRO_BATCH (1 << 20)
#define CFG_MAX_GLOBAL_BATCH (1 << 30)
#define CFG_MAX_SCHEDULE 32   /* entries of --step-batch-size-schedule */
#define CFG_SCHEDULE_LEN 1024 /* its normalised text, with room for them all */
#define CFG_YAML_MAX_BYTES (1 << 20)     /* a --yaml-cfg file */
#define CFG_YAML_MAX_DEPTH 16            /* nested sections in it */
#define CFG_DEFAULT_RANK_ORDER "tp-cp-ep-dp-pp"

typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } cfg_recompute;
typedef enum { LR_DECAY_COSINE = 0, LR_DECAY_LINEAR, LR_DECAY_CONSTANT, LR_DECAY_WSD, LR_DECAY_INVSQRT } cfg_lr_decay;
/* --lr-wsd-decay-style: the WSD schedule's final decay */
typedef enum { WSD_EXPONENTIAL = 0, WSD_LINEAR, WSD_COSINE, WSD_MINUS_SQRT } cfg_wsd_decay;
/* --weight-decay-incr-style: how weight decay goes from --start-weight-decay to --end-weight-decay */
typedef enum { WD_INCR_CONSTANT = 0, WD_INCR_LINEAR, WD_INCR_COSINE } cfg_wd_incr;

typedef struct atoll_config {
    /* model */
    int num_layers, hidden_size, num_attention_heads, ffn_hidden_size; /* ffn 0 -> 4*hidden */
    int seq_length, max_position_embeddings, vocab_size;            /* max_pos 0 -> seq_length */
    int untie_embeddings_and_output_weights;
    /* parallel layout */
    int tensor_model_parallel_size, pipeline_model_parallel_size;
    int num_layers_per_virtual_pipeline_stage; /* 0 -> no interleaving */
    int num_virtual_stages_per_pipeline_rank;  /* Megatron's other spelling of v (needed with an uneven split); 0: not given */
    int microbatch_group_size_per_virtual_pipeline_stage; /* interleaved: micro-batches per group through a chunk;
                                                           * 0 -> --pipeline-model-parallel-size */
    int decoder_first_pipeline_num_layers;     /* layers on the first pipeline stage; 0 -> an even split */
    int decoder_last_pipeline_num_layers;      /* layers on the last one (its LM head and loss); 0 -> even */
    int sequence_parallel, use_distributed_optimizer;
    cfg_recompute recompute_granularity;
    /* with full: "block" recomputes the first --recompute-num-layers layers of
     * each model chunk and keeps the others' activations; "uniform" (or "")
     * every layer, in groups of --recompute-num-layers (1 when not given),
     * each group rebuilt from its first layer's input */
    char recompute_method[16];
    int recompute_num_layers;                  /* 0: not given */
    int micro_batch_size, global_batch_size;
    /* Megatron's --rampup-batch-size "START INCREMENT SAMPLES": the global batch
     * grows from START by INCREMENT over SAMPLES samples to --global-batch-size
     * (cfg_batch_at); "" = none. Stored as given, normalised. */
    char rampup_batch_size[64];
    /* Megatron's --step-batch-size-schedule "THRESHOLD:BATCH ...": from each
     * THRESHOLD tokens consumed (over --seq-length: samples) the global batch is
     * BATCH; the last BATCH is the global batch (cfg_batch_schedule). "" = none.
     * Stored normalised: whole tokens, ascending, "0:16 2400000000:320". */
    char step_batch_size_schedule[CFG_SCHEDULE_LEN];
    /* Megatron's --decrease-batch-size-if-needed: a batch that is not whole
     * micro-batches on every DP rank (a restart on fewer GPUs) trains on the
     * largest one that is, instead of being refused */
    int decrease_batch_size_if_needed;
    int num_gpus;                              /* world size; 0 -> the launcher's */
    char rank_order[32];                       /* Megatron-Core order string */
    /* training */
    int train_iters, lr_warmup_iters, lr_decay_iters; /* decay 0 -> train_iters */
    double lr, min_lr, weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad;
    /* Megatron's --decoupled-lr: the token embedding's and output layer's peak rate
     * (0: not given, --lr's), on the same schedule down to --decoupled-min-lr
     * (NAN: not given; cfg_decoupled_min_lr) */
    double decoupled_lr, decoupled_min_lr;
    cfg_lr_decay lr_decay_style;
    cfg_wsd_decay lr_wsd_decay_style;          /* WSD: how the last lr_wsd_decay_iters decay (exponential) */
    int lr_wsd_decay_iters;                    /* WSD: iterations of the final decay, ending at lr_decay_iters */
    /* Megatron's weight-decay schedule: constant (--weight-decay throughout), or
     * linear / cosine from start to end over the run's samples (eng_wd_at);
     * start and end are NAN when not given */
    cfg_wd_incr weight_decay_incr_style;
    double start_weight_decay, end_weight_decay;
    uint64_t seed;
    char data_path[CFG_DATA_PATH];             /* PREFIX, or a blend: "W1 PREFIX1 W2 PREFIX2 ..." */
    /* or one path (or blend) per split, each used whole (--split then has no say): */
    char train_data_path[CFG_DATA_PATH], valid_data_path[CFG_DATA_PATH], test_data_path[CFG_DATA_PATH];
    /* or Megatron's files that hold them, for blends too long for a flag
     * (eng_data_paths_load): --data-args-path (a --data-path's words),
     * --per-split-data-args-path (JSON: "train", "valid", "test") */
    char data_args_path[CFG_STR], per_split_data_args_path[CFG_STR];
    char split[64], save[CFG_STR], load[CFG_STR];
    int save_interval, log_interval, eval_interval, eval_iters;
    int bf16;
    int async_save;                            /* checkpoints written in the background */
    double save_mtbf;                          /* > 0: save every sqrt(2 x this x measured stall) seconds */
    int save_keep;                             /* > 0: keep only this many newest committed checkpoints */
    int deterministic_dp;                      /* gradients summed in fp64: the same bits whatever the DP size */
    double lr_warmup_init;                     /* the learning rate warm-up starts from (Megatron's; 0) */
    double init_method_std;                    /* weights start N(0, this); output layers / sqrt(2 x layers) */
    double embedding_init_method_std;          /* the token and position embeddings' (0: init_method_std) */
    int eod_mask_loss;                         /* positions whose input ends a document do not count */
    /* documents packed in a sample, each ending at the end-of-document token: */
    int reset_position_ids;                    /* learned positions start again at 0 after each one */
    int reset_attention_mask;                  /* a token attends only to the tokens of its own document */
    /* what a --load that is not this run's own --save brings in (Megatron's flags): */
    int finetune;                              /* the weights only, from iteration 0 */
    int no_load_optim;                         /* not the Adam moments: they start again at zero */
    int no_load_rng;                           /* not the seed: --seed orders the data */
    int exit_on_missing_checkpoint;            /* --load without a committed step refuses to start */
    int ckpt_step;                             /* > 0: that step of --load, not its newest */
    double exit_duration_in_mins;              /* > 0: commit a checkpoint and stop after this long */
    int exit_interval;                         /* > 0: stop after this iteration (saving with --save) */
    /* TensorBoard (Megatron's flags): scalars written by rank 0 into an event file */
    char tensorboard_dir[CFG_STR];             /* "": none */
    int tensorboard_log_interval;              /* every N iterations (0 reads as 1: cfg_tb_interval) */
    int log_validation_ppl_to_tensorboard;     /* the validation perplexity too */
    int log_timers_to_tensorboard;             /* iteration-time too */
    int log_batch_size_to_tensorboard;         /* batch-size (each step's: --rampup-batch-size grows it) */
    int log_world_size_to_tensorboard;         /* world-size */
    int log_memory_to_tensorboard;             /* mem-max-allocated-bytes: rank 0's peak (GPU, or resident on CPU) */
    int log_params_norm;                       /* the parameters' L2 norm each logged step (Megatron's params norm) */
    int log_num_zeros_in_grad;                 /* the gradient's exact zeros each logged step (Megatron's num zeros) */
    int no_log_learning_rate_to_tensorboard;   /* leave learning-rate out of TensorBoard */
    /* the LLaMA family and regularisation (Megatron's flags) */
    char attention_backend[8];         /* "auto" (default), "flash", "fused": bf16 attention on cuda */
    int tune_gemms;                    /* cuda: GEMM algorithms chosen by time, kept in --save for restarts */
    int enable_cuda_graph;             /* cuda, one rank: each micro-batch's forward and backward as one CUDA graph */
    int nondeterministic_attention;    /* cuda, cuDNN attention: the backward's dQ summed by atomic adds */
    int overlap_wgrad;                 /* cuda: weight-gradient GEMMs on a second stream beside the backward */
    char normalization[16];            /* "LayerNorm" (default) or "RMSNorm" */
    int swiglu;
    int squared_relu;                  /* the MLP's activation is relu(x)^2 instead of GELU (Nemotron's) */
    int apply_layernorm_1p;            /* norm weights stored zero-centred (w, from 0), applied as 1 + w */
    char position_embedding_type[24];  /* "learned_absolute" (default) or "rope" */
    int rotary_base;                   /* 10000 (0 reads as 10000: cfg_rotary_base) */
    int use_rope_scaling;              /* LLaMA-3.x's rope scaling, by rope_scaling_factor (8; cfg_rope_scale) */
    double rope_scaling_factor;
    int rotary_seq_len_interpolation_factor; /* rope's positions divided by it (position interpolation; 0 reads as 1) */
    double rotary_percent;             /* rope turns the first head dim * this of each head (1; 0 reads as 1) */
    double norm_epsilon;               /* LayerNorm's and RMSNorm's epsilon (1e-5; 0 reads as 1e-5) */
    int disable_bias_linear;
    int add_qkv_bias;                  /* biases on the query, key and value projections even so (Qwen2's) */
    int qk_layernorm;                  /* an RMSNorm on each query and key head before rope (Qwen3's) */
    int group_query_attention, num_query_groups;
    double hidden_dropout, attention_dropout; /* 0 here; Megatron's default is 0.1 */
    /* the tokenizer the data was prepared with (recorded in checkpoints) */
    char tokenizer_type[32], vocab_file[CFG_STR], merge_file[CFG_STR];
    char tokenizer_model[CFG_STR]; /* HuggingFaceTokenizer: tokenizer.json, or its directory */
    int make_vocab_size_divisible_by;  /* 128 (0 reads as 128: cfg_vocab_multiple) */
    int padded_vocab_size;             /* Megatron's: the model's vocab as given, no padding (0: not given) */
    /* Megatron spellings resolved into the settings above when parsing ends
     * (cfg_parse_args), then cleared: never sent in a JobSpec. */
    uint64_t train_samples, lr_decay_samples, lr_warmup_samples, lr_wsd_decay_samples; /* 0: not given */
    double lr_warmup_fraction;                                   /* 0: not given */
    int use_rotary_position_embeddings, no_position_embedding;
    int recompute_activations;                 /* --recompute-granularity selective */
    int checkpoint_activations;                /* (older Megatron) --recompute-granularity full */
    int use_tp_pp_dp_mapping;                  /* --rank-order tp-cp-ep-pp-dp */
    int mock_data;                             /* the built-in corpus: no --data-path */
    int kv_channels;                           /* the head dimension (0: hidden / heads); Qwen3-0.6B's 128 */
    int use_checkpoint_args;                   /* the model from --load's manifest (ckpt_use_args clears it) */
    int calculate_per_token_loss;              /* the mean over micro-batches' tokens: the same unless masking */
    int account_for_embedding_in_pipeline_split; /* the embedding, the loss: a layer each of the first, last */
    int account_for_loss_in_pipeline_split;      /* stage (--decoder-first/last-pipeline-num-layers) */
    uint64_t megatron_ignored[2];              /* flags accepted without effect (cfg_megatron_notes) */
} atoll_config;

typedef enum { CFG_OK = 0, CFG_UNKNOWN = 1, CFG_BAD_VALUE = 2 } cfg_status;

/* Megatron's defaults where it has them; model sizes 0 (must be given). */
void cfg_defaults(atoll_config *c);

/* Sets one key ("num-layers" or "num_layers", no leading dashes). `value` is NULL
 * for a bare boolean flag; an empty string gives a text key its default (as an
 * empty string field of a protobuf JobSpec does). CFG_UNKNOWN leaves `err` empty so the caller can try
 * its own flags; CFG_BAD_VALUE fills `err` with what was wrong. */
cfg_status cfg_set(atoll_config *c, const char *key, const char *value, char *err, size_t errlen);

/* 1 when `key` names a boolean flag that takes no value on the command line. */
int cfg_is_flag(const char *key);
/* What a submission (atoll submit, the coordinator, atoll-train started by hand)
 * may not ask, beyond cfg_validate_training, that a restarted rank legitimately
 * has: its supervisor points --load at the job's own --save. 0, or -1 with err. */
int cfg_validate_submission(const atoll_config *c, char *err, size_t errlen);
/* 1 when key's setting in c is its default, 0 when not, -1 for an unknown key. */
int cfg_is_default(const atoll_config *c, const char *key);

/* Parses argv[start..argc). For each `--key [value]` it first offers the pair to
 * `extra` (may be NULL), which returns the number of argv entries it consumed
 * (0 = not mine, -1 = error already written to err). `--yaml-cfg FILE` loads that
 * file at that point, so later flags override it. Returns 0, or -1 with err set. */
typedef int (*cfg_extra_fn)(void *ctx, int argc, char **argv, int i, char *err, size_t errlen);
int cfg_parse_args(atoll_config *c, int argc, char **argv, int start,
                   cfg_extra_fn extra, void *ctx, char *err, size_t errlen);

/* Megatron-LM flags that are not settings here. A script written for Megatron
 * carries flags that pick its implementation (fusions, Transformer Engine, flash
 * attention), its logging integrations, or features atoll does not have; each is
 * in one table with what atoll does about it. Accepted: those asking for what
 * atoll does anyway, and those with only the value atoll implements
 * (--context-parallel-size 1). Refused with what atoll does instead: those asking
 * for what it does not (--fp16, --tensorboard-dir, MoE). Accepted but noted: those
 * that only change speed in Megatron and that atoll does not have
 * (--overlap-param-gather): cfg_megatron_notes writes a line for each such flag
 * the config was given to `out` ("PROG: note: --X has no effect here: why";
 * nothing when none). The sample-based schedule (--train-samples,
 * --lr-decay-samples, --lr-warmup-samples), --lr-warmup-fraction and
 * --use-rotary-position-embeddings are turned into iterations and
 * --position-embedding-type when parsing ends. */
void cfg_megatron_notes(const atoll_config *c, const char *prog, FILE *out);
/* Turns the Megatron spellings above into settings; cfg_parse_args calls it at
 * its end. 0, or -1 with err (e.g. both --train-iters and --train-samples). */
int cfg_resolve_megatron(atoll_config *c, char *err, size_t errlen);

/* Loads a YAML mapping of the same keys (nested mappings are flattened, so
 * Megatron-style sections work). Refused, with the line: unknown keys, a key
 * given twice, an empty file, a bare scalar or list, aliases, nesting deeper than
 * CFG_YAML_MAX_DEPTH, files over CFG_YAML_MAX_BYTES. Values go through cfg_set. */
int cfg_load_yaml(atoll_config *c, const char *path, char *err, size_t errlen);
/* The same for YAML text in memory; `name` is used in messages. */
int cfg_parse_yaml(atoll_config *c, const char *text, size_t len, const char *name, char *err, size_t errlen);

/* Derived sizes. */
int cfg_ffn(const atoll_config *c);
int cfg_rmsnorm(const atoll_config *c);     /* --normalization RMSNorm: the LLaMA family */
int cfg_rope(const atoll_config *c);        /* --position-embedding-type rope */
int cfg_kv_groups(const atoll_config *c);   /* --num-query-groups with GQA, else the heads */
int cfg_rotary_base(const atoll_config *c); /* --rotary-base (0: 10000) */
int cfg_rotary_dim(const atoll_config *c);  /* the dims of each head rope turns: int(head dim * --rotary-percent) */
/* The attention heads' dimension: --kv-channels (Megatron's; Qwen3's 128 for
 * any hidden size), else --hidden-size / --num-attention-heads. The queries
 * and the attention output are heads x this wide, which need not be hidden. */
int cfg_head_dim(const atoll_config *c);
double cfg_norm_eps(const atoll_config *c); /* --norm-epsilon (0: 1e-5) */
double cfg_rotary_percent(const atoll_config *c); /* --rotary-percent (0: 1) */
/* --rope-scaling-factor (0: 8, Megatron's default) */
double cfg_rope_factor(const atoll_config *c);
/* the LLaMA-3.x frequency scale rope turns by (k_rope.h): cfg_rope_factor with
 * --use-rope-scaling, else 1 (none) */
double cfg_rope_scale(const atoll_config *c);
/* what rope divides positions by: --rotary-seq-len-interpolation-factor (0: 1, none) */
double cfg_rope_interp(const atoll_config *c);
int cfg_tb_interval(const atoll_config *c); /* --tensorboard-log-interval (0: 1) */
int cfg_qkv_bias(const atoll_config *c);    /* q, k, v have biases: no --disable-bias-linear, or --add-qkv-bias */
double cfg_init_std(const atoll_config *c); /* --init-method-std (0: 0.02) */
/* where --decoupled-lr's schedule ends: --decoupled-min-lr, or --min-lr when not given */
double cfg_decoupled_min_lr(const atoll_config *c);
/* --embedding-init-method-std: the token and learned position embeddings' spread
 * (0: cfg_init_std); an untied output layer keeps cfg_init_std, as in Megatron */
double cfg_embedding_init_std(const atoll_config *c);
int cfg_vocab_multiple(const atoll_config *c); /* --make-vocab-size-divisible-by (0: 128) */
int cfg_max_pos(const atoll_config *c);
int cfg_virtual_stages(const atoll_config *c); /* v: 1 when not interleaved */
int cfg_interleaved(const atoll_config *c);    /* the interleaved schedule's rules apply (micro-batches a multiple of pp,
                                                * or cfg_microbatch_group_check's with a group size) */
/* The interleaved schedule's rules for a step of m micro-batches on pp stages of
 * v chunks each, with g micro-batches per group through a chunk
 * (--microbatch-group-size-per-virtual-pipeline-stage, Megatron's rules): nothing
 * to check when v <= 1; g 0 (the default, pp) needs m a multiple of pp; else
 * pp <= g <= m, and a last group smaller than g (m % g) holds at least pp
 * micro-batches. 0, or -1 with err. */
int cfg_microbatch_group_check(int pp, int m, int v, int g, char *err, size_t errlen);
/* The group size the schedule runs: g when interleaved (v > 1) and given, else pp */
int cfg_microbatch_group(int pp, int v, int g);
/* Megatron's warm-up on pipeline rank `rank`: the forwards of model chunks before
 * its first backward, pp - rank - 1 for 1F1B, 2 (pp - rank - 1) + (v - 1) g
 * interleaved (g: cfg_microbatch_group), at most the step's m v. The schedule
 * (sched_build) and the planner's memory model (plan_inflight_microbatches)
 * both count from it. */
int cfg_pipeline_warmup(int pp, int rank, int m, int v, int g);
/* The layers [*begin, *end) of virtual pipeline stage `vstage` (chunk * pp +
 * stage; the stage itself when not interleaved): --decoder-first/last-pipeline-
 * num-layers on the first and last stage, the others' layers split evenly among
 * them; interleaved, each stage's layers split evenly over its v chunks and the
 * chunks in order (chunk 0 of every stage, then chunk 1, ...), as Megatron-Core
 * does. For a layout cfg_validate_layout accepts. */
void cfg_stage_layers(const atoll_config *c, int vstage, int *begin, int *end);
/* How many layers pipeline stage `stage` holds, all its model chunks together. */
int cfg_stage_num_layers(const atoll_config *c, int stage);

/* Checks the model alone: sizes given and positive, hidden divisible by heads. */
int cfg_validate_model(const atoll_config *c, char *err, size_t errlen);

/* Checks the training settings that ranges alone do not: --train-iters >= 1,
 * --min-lr <= --lr, --save-interval only with --save. (cfg_set already refused
 * non-finite and negative values.) */
int cfg_validate_training(const atoll_config *c, char *err, size_t errlen);
/* --rampup-batch-size or --step-batch-size-schedule against --global-batch-size
 * (cfg_validate_training's): a ramp needs it, START at most it and whole
 * INCREMENTs up to it; a schedule starts at 0 samples, rises in whole samples,
 * ends at it (when given), and goes with neither a ramp nor
 * --decrease-batch-size-if-needed. */
int cfg_validate_batch_schedule(const atoll_config *c, char *err, size_t errlen);

/* The one validator of a job: the model, the training settings and every layout
 * rule for `world` ranks, the rank order included; `island_gpus` is the largest
 * NVLink island available (0 = unknown, rule skipped). Arithmetic is overflow-safe
 * for any field values. Each message names the rule that failed and a value that
 * would pass. Returns 0 or -1. The CLI, the coordinator and atoll-train use it. */
int cfg_validate_layout(const atoll_config *c, int world, int island_gpus,
                        char *err, size_t errlen);

/* Data-parallel size for `world` ranks (world / (tp*pp)); 0 when it does not divide. */
int cfg_data_parallel_size(const atoll_config *c, int world);
/* The global batch: --global-batch-size, or the last batch of a
 * --step-batch-size-schedule, or Megatron's default of one micro-batch per DP
 * rank (0 when that is over CFG_MAX_GLOBAL_BATCH). */
int cfg_global_batch(const atoll_config *c, int dp);
/* The samples a step of dp ranks takes once any ramp is over: the global batch,
 * or with --decrease-batch-size-if-needed the largest part of it that is whole
 * micro-batches on every DP rank (whole rounds of pp when interleaved). */
int cfg_step_batch(const atoll_config *c, int dp);
/* Micro-batches each DP rank runs per step: global batch / (micro-batch * dp);
 * 0 when that is not a whole number (rounded down with
 * --decrease-batch-size-if-needed, to a multiple of pp when interleaved). */
int cfg_micro_batches(const atoll_config *c, int dp);
/* --rampup-batch-size's three numbers; 0 when there is no ramp (all zero then). */
int cfg_rampup(const atoll_config *c, int *start, int *increment, uint64_t *samples);
/* --step-batch-size-schedule in samples, as Megatron reads it: each entry's
 * threshold, its tokens over --seq-length rounded down, and its batch, in
 * ascending order; returns how many (0 when there is none, at most
 * CFG_MAX_SCHEDULE). Either array may be NULL. */
int cfg_batch_schedule(const atoll_config *c, uint64_t *from_samples, int *batch);
/* Whether the global batch changes during the run (a ramp or a schedule): the
 * lr and weight-decay schedules then count samples, in global batches. */
int cfg_batch_varies(const atoll_config *c);
/* The largest global batch any step of the run takes (buffers are sized by it). */
int cfg_batch_max(const atoll_config *c, int dp);
/* The global batch of the step that starts after `consumed` samples: with a ramp,
 * Megatron's: START + INCREMENT x floor(consumed / (SAMPLES / increments)) until
 * more than SAMPLES are consumed, then the global batch; with a schedule, the
 * batch of its last entry at or below `consumed`; else cfg_global_batch.
 * With --decrease-batch-size-if-needed, rounded down to whole micro-batches on
 * every DP rank (whole rounds of pp when interleaved). */
int cfg_batch_at(const atoll_config *c, int dp, uint64_t consumed);
/* Samples consumed after `iters` steps from the start (each step its cfg_batch_at). */
uint64_t cfg_samples_after(const atoll_config *c, int dp, long long iters);

/* Megatron-Core's rank order ("tp-cp-ep-dp-pp", first = fastest): ranks are a
 * mixed-radix number whose digits are the parallel dimensions in that order.
 * Parsed here once for the engine's groups, the scheduler and placement. */
typedef enum { CFG_DIM_TP, CFG_DIM_CP, CFG_DIM_EP, CFG_DIM_DP, CFG_DIM_PP, CFG_NDIMS } cfg_dim;
typedef struct cfg_rank_order {
    int ndim;                 /* CFG_NDIMS after parsing */
    cfg_dim dim[CFG_NDIMS];   /* fastest first: the named dimensions, then the absent (size 1) ones */
    int size[CFG_NDIMS];      /* by cfg_dim: tp, 1, 1, dp, pp */
    int stride[CFG_NDIMS];    /* by cfg_dim: rank = sum of coordinate * stride */
} cfg_rank_order;
/* `order` NULL or "" = CFG_DEFAULT_RANK_ORDER. Each of tp, cp, ep, dp, pp at most
 * once; an absent one must have size 1 (as Megatron-Core refuses otherwise).
 * 0, or -1 with err naming the token and a valid order. */
int cfg_rank_order_parse(const char *order, int tp, int dp, int pp, cfg_rank_order *o, char *err, size_t errlen);
const char *cfg_dim_name(cfg_dim d); /* "tp", ... */

/* Model FLOPs, PaLM count: 6N + 12*L*H*Q*T per token (H heads * Q head dim = hidden,
 * T = seq length). N is every parameter of the full (unsharded) model; with tied
 * embeddings the V*h matrix is counted once, as the output GEMM that costs it. */
/* Parameters of one transformer layer (all of them, before any split). */
double cfg_layer_params(const atoll_config *c);
double cfg_num_params(const atoll_config *c);
double cfg_flops_per_token(const atoll_config *c);

/* The pipeline bubble of the layout in an ideal schedule, as a share of the step:
 * (p-1)/(v*m + p-1), m = micro-batches per DP rank of a step of `batch` samples
 * (0: the global batch). It compares with a measured bubble (idle time / step
 * time). 0 without pipelining. */
double cfg_bubble_theory(const atoll_config *c, int world, int batch);

const char *cfg_recompute_name(cfg_recompute r);
/* How many layers of a model chunk of `chunk_layers` layers are rebuilt in the
 * backward pass (the first ones): all under full recompute, the first
 * --recompute-num-layers with --recompute-method block, none otherwise. */
int cfg_recompute_layers(const atoll_config *c, int chunk_layers);
/* The same for a pipeline stage of `stage_layers` layers: its v chunks' share. */
int cfg_recompute_stage_layers(const atoll_config *c, int stage_layers);
/* The layers of one model chunk of a stage of `stage_layers`: stage_layers / v,
 * or the whole stage when it holds fewer than v. */
int cfg_chunk_layers(const atoll_config *c, int stage_layers);
/* Full recompute, --recompute-method uniform: the layers of a chunk rebuilt
 * together from the first one's input (--recompute-num-layers); 1 otherwise. */
int cfg_recompute_group(const atoll_config *c);
/* The share of the model's layers rebuilt in the backward pass, over every
 * stage and model chunk of the layout (1 under full recompute, 0 without). */
double cfg_recompute_fraction(const atoll_config *c);
const char *cfg_lr_decay_name(cfg_lr_decay d);
const char *cfg_wsd_decay_name(cfg_wsd_decay d);
const char *cfg_wd_incr_name(cfg_wd_incr s);

#endif
