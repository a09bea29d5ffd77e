/* kv: the rendezvous key-value store's semantics, whoever serves it.
 *
 * Ranks of a job exchange their transport addresses or NCCL unique ids through
 * it before any communicator exists. The coordinator serves it to the ranks of
 * cluster jobs (coordinatord/rendezvous.c), the standalone launcher to its own
 * ranks (engine/store.c); both speak KvSet/KvGet/KvAdd frames (proto/atoll.proto)
 * on connections authenticated with the job secret of the scope they use, and
 * both keep the keys here, in memory.
 *
 * Keys live in scopes (job, epoch): a restart starts from an empty scope. Each
 * scope is bounded (KV_SCOPE_BYTES of keys and values, KV_SCOPE_KEYS keys), so
 * no client can exhaust the server's memory; a set over the bound is refused.
 * A get may wait: the waiter is answered when the key is set (through the
 * answer callback) or, at its deadline, as not found by kv_expire.
 *
 * Time is the caller's (milliseconds of any monotonic clock). No I/O, no
 * threads: the caller's loop drives it. Ownership: the store owns its keys and
 * values; `who` pointers of waiters are the caller's and only passed back. */
#ifndef ATOLL_KV_H
#define ATOLL_KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_MAX_KEY 1024
#define KV_MAX_VALUE (1u << 20)
#define KV_SCOPE_BYTES (16u << 20)
#define KV_SCOPE_KEYS 200000
#define KV_MAX_WAIT_MS 600000

typedef struct kv_store kv_store;

/* A parked get is answered: found with its value, or not (timed out). */
typedef void (*kv_answer_fn)(void *ctx, void *who, int found, const uint8_t *v, size_t len);

kv_store *kv_new(kv_answer_fn answer, void *ctx);
void kv_free(kv_store *kv);

/* 0, or -1 with err saying which bound the set would break. Answers waiters of the key. */
int kv_set(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t *v, size_t len,
           char *err, size_t errlen);
/* 1 found (*v points into the store until the next change), 0 not found. */
int kv_get(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t **v, size_t *len);
/* Adds delta to the key's decimal value (absent = 0). 0 with *out, or -1 with err. */
int kv_add(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, int64_t delta, int64_t *out,
           char *err, size_t errlen);
/* Parks a get of a key that is not there yet until deadline_ms. -1 when out of memory. */
int kv_wait(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, void *who, int64_t deadline_ms);
/* Answers every waiter whose deadline has passed (not found). */
void kv_expire(kv_store *kv, int64_t now_ms);
/* Forgets the waiters of `who` (its connection closed); no answer. */
void kv_forget(kv_store *kv, void *who);
/* Drops every scope of `job` (it ended) and of its epochs below `keep_epoch`. */
void kv_drop(kv_store *kv, uint64_t job, uint32_t keep_epoch, int all);

/* Bytes held by a scope (keys + values), for tests and metrics. */
size_t kv_scope_bytes(const kv_store *kv, uint64_t job, uint32_t epoch);

/* "" when the key is acceptable, else why not (length 1..KV_MAX_KEY, no NUL). */
const char *kv_check_key(const char *key);

#endif
