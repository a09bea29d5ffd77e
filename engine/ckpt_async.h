/* ckpt_async: checkpoints saved in the background (--async-save).
 *
 * A save stalls training only while this rank copies its part (parameters, the
 * optimizer range it owns) into host memory; a thread then writes the copy into
 * the step's files and fsyncs them (checkpoint.h's ckpt_write_part), while the
 * rank trains on. The step is committed (manifest written, checksums read back)
 * only when every rank's part is durable: ranks learn that from each other in
 * the next steps' world all-reduce (train.c), and rank 0 then commits in the
 * background too. A single rank commits by itself once its write is done. A save
 * that never finishes (the rank was killed) leaves the step without a manifest,
 * which --load skips: no save is ever claimed before it is complete.
 *
 * The writer runs at the lowest CPU and I/O priority, so it takes what training
 * leaves. One save at a time per rank: a new one first waits for the previous one.
 *
 * Ownership: the save owns its snapshot and thread; it borrows the model (its
 * parameter table and config, which do not change while training) until freed. */
#ifndef ATOLL_ENGINE_CKPT_ASYNC_H
#define ATOLL_ENGINE_CKPT_ASYNC_H

#include "checkpoint.h"

typedef struct ckpt_async ckpt_async;

/* Snapshots `part` (backend memory) to host memory and starts writing it into
 * step st->iteration of `dir` (headers when write_headers). `alone`: this rank
 * commits the step itself when its write is done (one rank). NULL with err on
 * failure (out of memory, no thread). */
ckpt_async *ckpt_async_start(const char *dir, const eng_model *m, const ckpt_part *part, int write_headers,
                             const eng_train_state *st, int alone, char *err, size_t errlen);
/* 1 once this rank's part is written and fsynced, 0 while it is being written,
 * -1 when the write (or the commit) failed (ckpt_async_wait says why). */
int ckpt_async_durable(ckpt_async *a);
/* Rank 0, once every rank's part is durable: commit the step in the background. */
void ckpt_async_commit(ckpt_async *a);
/* 1 once the step is committed (its manifest durable). */
int ckpt_async_committed(ckpt_async *a);
/* Waits for whatever was started (the write, and the commit if asked for). 0, or
 * with err when the write or the commit failed: CKPT_SUPERSEDED when another
 * placement holds dir (checkpoint.h), else -1. */
int ckpt_async_wait(ckpt_async *a, char *err, size_t errlen);
long long ckpt_async_iteration(const ckpt_async *a);
/* Seconds from the start to the commit (0 until committed). */
double ckpt_async_seconds(const ckpt_async *a);
/* Waits (as _wait) and frees. */
void ckpt_async_free(ckpt_async *a);

#endif
