/* train: the single-rank training loop of atoll-train.
 *
 * Each iteration: global-batch-size / micro-batch-size micro-batches, forward and
 * backward each, gradients accumulated (each token's loss weighted 1/(gbs*T), so
 * the gradient is that of the mean loss over the global batch), global-norm
 * clipping, one AdamW step at the scheduled learning rate. Logs every
 * --log-interval iterations (text on stdout, JSON lines in --metrics-file),
 * checkpoints every --save-interval and at the end. With --save, SIGTERM stops it
 * after the step in progress (every rank after the same one), with a checkpoint. */
#ifndef ATOLL_ENGINE_TRAIN_H
#define ATOLL_ENGINE_TRAIN_H

#include "config.h"

#include <stddef.h>

typedef struct eng_run_opts {
    char device[16];          /* "cpu" or "cuda" */
    char metrics_file[1024];  /* "" = none */
    char dump_dir[1024];      /* test hook: initial weights, batches, step-1 logits and grads */
} eng_run_opts;

void eng_run_opts_defaults(eng_run_opts *o);

/* The kernels of --device "cpu" or "cuda" (that binds this process to the GPU
 * of LOCAL_RANK); NULL with err saying why (no device, a build without CUDA). */
struct k_ops;
const struct k_ops *eng_backend(const char *device, char *err, size_t errlen);

/* Runs training; returns 0, 1 when it stopped on SIGTERM with its checkpoint
 * committed, or an error with a one-line reason in err: ENG_ERR_CONFIG when the
 * run's configuration or inputs were refused before training (the layout, the
 * memory it needs, the device, --data-path, --save, --metrics-file: running it
 * again the same way fails the same way), else -1. */
#define ENG_ERR_CONFIG (-2)
int eng_train(const atoll_config *cfg, const eng_run_opts *o, char *err, size_t errlen);

/* What eng_memory_check counts, per rank, in bytes. */
typedef struct eng_memory {
    double params;               /* parameters this rank holds (the worst stage) */
    double state_bytes;          /* their weights, grads and Adam state */
    double act_bytes;            /* activations of the micro-batches in flight */
    double attn_workspace_bytes; /* cuDNN's fused attention (its plans' figure), else 0 */
    double total_bytes;
} eng_memory;

/* memory_check.c: refuses a layout whose memory per rank (the planner's model at
 * the engine's precision, fp32 or --bf16, plus the fused attention's workspace)
 * times the `local_ranks` sharing this host (cpu) is more than the device has
 * free; 0, or -1 with err saying what it needs, what there is and what would
 * lower it. Called before anything is allocated. need (if not NULL) gets what
 * it counted; in_use (if not NULL) the GPU's memory already in use when it
 * looked (cuda; -1 elsewhere or unknown), so a run can set its peak against
 * the estimate. */
int eng_memory_check(const atoll_config *c, int world, int local_ranks, const char *device, eng_memory *need,
                     double *in_use, char *err, size_t errlen);
void eng_memory_need(const atoll_config *c, int world, double attn_workspace_bytes, eng_memory *out);
/* The check against `room` bytes (-1: unknown, always fits). */
int eng_memory_verdict(const atoll_config *c, int world, int local_ranks, const char *device, double room,
                       double attn_workspace_bytes, char *err, size_t errlen);
/* --device cuda: make the GPU of LOCAL_RANK (modulo the devices visible) the
 * current one, before anything touches a device. */
void eng_cuda_select_device(void);
/* Bytes of host memory this process may still use (-1 when unknown). */
double eng_host_memory_available(void);

/* The atoll commands the engine runs, as `atoll-train generate|export|import|data
 * prepare ...` (the CLI execs that: it links no engine). argv[0] is the command's
 * name ("prepare" for data prepare); 0 done, 1 failed, 2 bad usage. */
int generate_main(int argc, char **argv);  /* generate.c */
int export_main(int argc, char **argv);    /* hf.c */
int import_main(int argc, char **argv);    /* hf.c */
int data_prepare_main(int argc, char **argv); /* data_prepare.c */

#endif
