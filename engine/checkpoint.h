/* checkpoint: layout-independent checkpoints, Megatron-style step directories.
 *
 *   DIR/iter_0000010/model.safetensors   every tensor once, full logical shape
 *   DIR/iter_0000010/optim.safetensors   NAME.master, NAME.exp_avg, NAME.exp_avg_sq (fp32)
 *   DIR/iter_0000010/train_state.json    iteration, consumed samples, rng, data position,
 *                                        the figures of the last steps (re-reported on resume)
 *   DIR/iter_0000010/manifest.json       bytes + FNV-1a-64 of each file above; written
 *                                        last (temp name, fsync, rename): its presence
 *                                        is what makes the step committed
 *   DIR/latest_checkpointed_iteration.txt  updated after the manifest
 *
 * With --save-keep N, a commit then removes the steps older than the N newest
 * committed ones (ckpt_prune).
 *
 *   DIR/placement.txt                    "job J epoch E": the placement of a job whose
 *                                        ranks write here (ckpt_claim); none for a run
 *                                        that is no job's (atoll-train by hand)
 *
 * Both safetensors layouts come from the config alone (eng_full_table), so every
 * rank pwrites its slices into the same files (ckpt_write_shards), then one rank
 * commits the step (ckpt_commit) after all have finished. ckpt_save does both for
 * a single rank. Loading checks every tensor's name and shape against the model
 * before reading anything, and reads only this rank's slices, so any layout can
 * resume any checkpoint. */
#ifndef ATOLL_ENGINE_CHECKPOINT_H
#define ATOLL_ENGINE_CHECKPOINT_H

#include "model.h"
#include "optimizer.h"
#include "safetensors.h"

#include <stdint.h>

/* A step's figures, kept in the checkpoint so a run resumed from it can report
 * them again: a supervisor that died with the reports unsent loses none. */
#define CKPT_STEPS 64
typedef struct ckpt_step {
    long long iteration;
    double loss, lr, grad_norm;
} ckpt_step;

typedef struct eng_train_state {
    long long iteration;        /* optimizer steps done */
    long long consumed_samples; /* global samples consumed: the data position */
    uint64_t seed;              /* init and data-order seed (the RNG is counter based) */
    long long adam_from;        /* the iteration the Adam moments started from zero at (--no-load-optim) */
    int nsteps;                 /* the newest steps up to `iteration`, oldest first */
    ckpt_step steps[CKPT_STEPS];
} eng_train_state;

/* Appends a finished step to st->steps (dropping the oldest when full). */
void ckpt_note_step(eng_train_state *st, long long iteration, double loss, double lr, double grad_norm);

/* "DIR/iter_0000010" */
void ckpt_step_dir(char *out, size_t n, const char *dir, long long iteration);

/* Writes this rank's slices of params and optimizer state into the step's files,
 * creating the directory; `write_headers` on exactly one rank. */
int ckpt_write_shards(const char *dir, long long iteration, const eng_model *m,
                      const eng_optim *o, int write_headers, char *err, size_t errlen);

/* Part of the state one rank writes. `params`: the model file's slices of its
 * parameters. Optimizer file: flat elements [lo, hi) of the rank's buffer
 * layout (eng_param.offset), from opt[0] = master, opt[1] = exp_avg, opt[2] =
 * exp_avg_sq, each holding element lo at index 0 (backend memory). A ZeRO-1
 * rank passes its shard; ckpt_write_shards passes the whole buffer. */
typedef struct ckpt_part {
    int params;
    const float *opt[3];
    size_t lo, hi;
    const float *params_src; /* NULL: m->params; else a copy with the same layout */
    int host;                /* params_src and opt[] are host memory (a snapshot), not the backend's */
} ckpt_part;
int ckpt_write_part(const char *dir, long long iteration, const eng_model *m, const ckpt_part *part,
                    int write_headers, char *err, size_t errlen);
/* (These writers, ckpt_commit and ckpt_save return CKPT_SUPERSEDED, having written
 * nothing, when another placement has claimed dir: see ckpt_claim.) */

/* Writes train_state.json (and, for the LLaMA family, Hugging Face's
 * config.json beside model.safetensors, unless --apply-layernorm-1p stores
 * its norms as w where Hugging Face reads 1 + w: atoll export converts), then
 * the manifest (committing the
 * step), then the latest-iteration file. Call once, after every rank's
 * ckpt_write_shards. With `c` the manifest also records the model's settings
 * ("model": Megatron's flag names) and the tokenizer the data was prepared
 * with ("tokenizer": type, absolute vocab/merge file paths and checksums). */
int ckpt_commit(const char *dir, const eng_train_state *st, const atoll_config *c, char *err, size_t errlen);

/* Checkpoint retention (--save-keep N; ckpt_commit calls it when the config asks):
 * keeps the `keep` newest committed steps up to `newest` and removes every step
 * directory older than the oldest of them, committed or not (a removal takes the
 * manifest first, so one cut short leaves an uncommitted step). Steps newer than
 * `newest` are left alone. Returns how many were removed, or -1 with err. */
int ckpt_prune(const char *dir, int keep, long long newest, char *err, size_t errlen);

/* A step of the weights alone (atoll import): ckpt_weights_create lays out
 * dir/iter_N/model.safetensors for the model `c` describes (the tensors of
 * eng_full_table, F32, in its order) and creates it, header written, for the
 * caller to fill with st_write_all and st_close; ckpt_commit_weights then
 * commits the step with a manifest listing that file alone ("weights_only"),
 * the model's settings and, for the LLaMA family, config.json. Such a step is
 * read by --finetune, generate and export; a resume refuses it by name. 0, or
 * -1 with err. */
int ckpt_weights_create(const char *dir, long long iteration, const atoll_config *c, st_file *f, char *err,
                        size_t errlen);
int ckpt_commit_weights(const char *dir, long long iteration, const atoll_config *c, char *err, size_t errlen);

/* ---- the placement that writes a --save directory ----
 *
 * A job placed again (a restart after a failure, a scale-up) starts new ranks
 * while the old ones may still run where the coordinator could not stop them: a
 * node cut off from it, or its workerd stopped, keeps training and saving into
 * the same --save. So each placement claims the directory before it loads from
 * it, and a rank of any other placement refuses to write a step there: at the
 * start of its shards' write (a read of placement.txt) and, for the rank that
 * commits, under an exclusive flock(2) of placement.txt held from that check to
 * the latest-iteration file, so a claim waits for a commit in flight and a commit
 * after a claim never happens. The newer placement resumes from the newest step
 * committed before its claim; the older one's ranks stop at their next save,
 * writing nothing, and remove nothing.
 *
 * ckpt_set_owner: the placement this process writes for (workerd's ATOLL_JOB_ID,
 * ATOLL_JOB_EPOCH); job 0, the default, is no job's: it claims nothing and is
 * never refused. ckpt_claim (the job's rank 0, before it loads): creates or
 * rewrites placement.txt for this placement; a newer epoch of the same job there
 * is CKPT_SUPERSEDED. Another job's claim is taken over (a job submitted with
 * --load of a directory an earlier job wrote). A file system without flock
 * (Lustre mounted without it) is written and read unlocked. */
#define CKPT_SUPERSEDED (-3)
void ckpt_set_owner(uint64_t job, uint32_t epoch);
int ckpt_claim(const char *dir, char *err, size_t errlen);
/* Whether this process may still write steps of dir (a read of placement.txt,
 * unlocked): 0, CKPT_SUPERSEDED with err saying which placement holds it, or -1
 * with err when it cannot be read. The training loop asks every few seconds, so a
 * placement that was replaced stops soon, not only at its next save. */
int ckpt_may_write(const char *dir, char *err, size_t errlen);

/* Single rank: shards + commit. */
int ckpt_save(const char *dir, const eng_model *m, const eng_optim *o,
              const eng_train_state *st, char *err, size_t errlen);

/* What a reader of a step needs intact: every file (a run resuming from it),
 * only model.safetensors (generate, export: the weights alone), or the manifest
 * alone (--use-checkpoint-args, whose model settings are in it; a resubmit
 * choosing --load): committed, parsing, and every file there at the size it
 * lists, no checksum read. The run that loads the step checks its sums then. */
typedef enum { CKPT_RESUME, CKPT_WEIGHTS, CKPT_MANIFEST } ckpt_need;

/* Finds the newest committed step under `dir` whose files `need` asks for are
 * intact (manifest present, sizes and checksums match). Newer steps that are uncommitted, torn or corrupt are
 * reported on stderr and skipped. Returns 0 with *iteration set, 1 when `dir` is
 * absent or holds no committed step (a fresh run: uncommitted steps are saves a
 * fault interrupted, nothing durable), -1 on an error (err set) -- including a
 * committed step that is damaged with no intact one before it. */
int ckpt_latest(const char *dir, ckpt_need need, long long *iteration, char *err, size_t errlen);

/* 0 when step `iteration` of dir is committed and the files `need` asks for are
 * intact; else -1 with err saying what it is (missing, not committed, torn, corrupt). */
int ckpt_step_check(const char *dir, ckpt_need need, long long iteration, char *err, size_t errlen);

/* Loads step `iteration` into the model and optimizer (this rank's slices) and
 * the train state. A tensor missing from the files, a shape that differs from the
 * model's, or a tensor the model does not have is a one-line error naming it;
 * nothing is changed in the model when the check fails; that check returns
 * CKPT_MISMATCH (this configuration can never load the step), any other failure
 * -1. With o NULL (inference) only the weights are read, from model.safetensors,
 * and st is untouched. */
#define CKPT_MISMATCH (-2)
int ckpt_load(const char *dir, long long iteration, eng_model *m, eng_optim *o,
              eng_train_state *st, char *err, size_t errlen);

/* The model settings and tokenizer a step's manifest records, into `c`
 * (through cfg_set, so their values are checked as flags are); -1 with err
 * when the manifest has none. */
int ckpt_read_model(const char *dir, long long iteration, atoll_config *c, char *err, size_t errlen);

/* Writes len bytes of data to `path` (in directory `dir`) through path.tmp,
 * fsynced and renamed into place, the directory fsynced: a reader sees the old
 * file or the whole new one. 0, or -1 with err naming the file (path.tmp
 * removed). ckpt_write_text writes a NUL-terminated text so. */
int ckpt_write_file(const char *dir, const char *path, const void *data, size_t len, char *err, size_t errlen);
int ckpt_write_text(const char *dir, const char *path, const char *text, char *err, size_t errlen);

/* Hugging Face's config.json for a LLaMA-family model (the caller frees; NULL:
 * out of memory), written beside each committed step, whose model.safetensors
 * holds Hugging Face's tensor names: LlamaForCausalLM.from_pretrained loads the
 * step directory (atoll export adds the tokenizer). */
char *ckpt_hf_llama_config(const atoll_config *c, const char *torch_dtype);

/* --use-checkpoint-args (Megatron's): the model settings and tokenizer of the
 * newest committed step in c->load, for every one the flags left at its default
 * (a flag given wins); `taken` says from which step and what, as flags. -1 with
 * err when --load is missing or holds no committed step. Clears the switch. */
int ckpt_use_args(atoll_config *c, char *taken, size_t takenlen, char *err, size_t errlen);

/* atoll64 (the manifests' checksum, defined in checkpoint.c) of a whole file;
 * -1 when it cannot be read. */
int ckpt_file_checksum(const char *path, uint64_t *sum, uint64_t *bytes);

#endif
