/* store: the rendezvous key-value store ranks meet through: its one client, and
 * the server the standalone launcher runs.
 *
 * Ranks of one job exchange their transport addresses (host backend) or the NCCL
 * unique id through a small key-value store before any communicator exists. In
 * cluster mode the coordinator serves it (coordinatord/rendezvous.c); standalone,
 * the local launcher does (store_server_*). Both speak the atoll wire protocol
 * (proto/README.md): frames of KvSet, KvGet and KvAdd answered by KvReply, on a
 * connection authenticated as ROLE_RANK of one (job, epoch) with that scope's job
 * secret (auth_job_secret), and both keep keys with the semantics of common/kv.h
 * (scoped, bounded). Ranks find the store and their scope in the environment
 * their supervisor gives them: MASTER_ADDR, MASTER_PORT, ATOLL_JOB_ID,
 * ATOLL_JOB_EPOCH and ATOLL_JOB_SECRET_FD (common/supervise.h).
 *
 * Semantics: keys are strings (at most STORE_MAX_KEY bytes), values byte strings
 * (at most STORE_MAX_VALUE bytes). set overwrites; get never blocks; wait blocks
 * until the key exists or the timeout passes; add treats the value as a decimal
 * integer (absent = 0), adds, and returns the new value atomically.
 *
 * Server: single-threaded, on a libuv loop, so it lives in the launcher's own
 * loop. A waiting client costs a list entry, not a thread. Client: blocking
 * sockets, one thread at a time per client.
 */
#ifndef ATOLL_STORE_H
#define ATOLL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "kv.h"

#define STORE_MAX_KEY KV_MAX_KEY
#define STORE_MAX_VALUE KV_MAX_VALUE

typedef enum {
    STORE_OK = 0,
    STORE_ERROR = -1,    /* transport, protocol or refusal; message in store_error() */
    STORE_NOT_FOUND = 1, /* get: no such key */
    STORE_TIMEOUT = 2,   /* wait/connect: deadline passed; message names the key */
} store_status;

/* Who a client is: the rendezvous scope and its job secret. */
typedef struct store_auth {
    uint64_t job;
    uint32_t epoch;
    auth_token secret;
} store_auth;

/* From ATOLL_JOB_ID, ATOLL_JOB_EPOCH and the secret readable at ATOLL_JOB_SECRET_FD.
 * 0, or -1 with err saying which variable is missing or bad. */
int store_auth_from_env(store_auth *a, char *err, size_t errlen);
/* The scope alone (ATOLL_JOB_ID, ATOLL_JOB_EPOCH): 0, or -1 with err. */
int store_scope_from_env(uint64_t *job, uint32_t *epoch, char *err, size_t errlen);

/* ---- server (the standalone launcher's) ------------------------------------ */

typedef struct store_server store_server;
struct uv_loop_s;

/* Listens on host:port (port 0 = an ephemeral port, see store_server_port) on
 * `loop`, with a fresh random secret. The caller runs the loop. 0, or -1 with err. */
int store_server_start(struct uv_loop_s *loop, const char *host, int port,
                       store_server **out, char *err, size_t errlen);
int store_server_port(const store_server *s);
/* The scope (job 0, epoch 0) and secret this server's clients must present. */
void store_server_auth(const store_server *s, store_auth *out);
/* Closes the listener and every connection; the handles finish closing while
 * the loop runs on. */
void store_server_close(store_server *s);
/* Frees a closed server once its loop has stopped running (uv_run returned). */
void store_server_free(store_server *s);

/* The same server on its own loop in a background thread (for tests and callers
 * without a loop). stop joins the thread and frees everything. */
int store_server_start_thread(const char *host, int port, store_server **out,
                              char *err, size_t errlen);
void store_server_stop_thread(store_server *s);

/* ---- client ---------------------------------------------------------------- */

typedef struct store_client store_client;

/* Connects and authenticates, retrying until the server accepts or timeout_ms
 * passes (ranks may start before the server listens). A refused authentication
 * fails at once. Returns STORE_OK, STORE_TIMEOUT or STORE_ERROR with err set;
 * *out is owned by the caller (store_close). */
int store_connect(const char *host, int port, const store_auth *auth, int timeout_ms, store_client **out,
                  char *err, size_t errlen);
/* Same, from MASTER_ADDR (default 127.0.0.1), MASTER_PORT and store_auth_from_env. */
int store_connect_env(int timeout_ms, store_client **out, char *err, size_t errlen);

int store_set(store_client *c, const char *key, const void *val, size_t len);
/* *val is malloc'd (NUL-terminated for convenience, not counted in *len); caller frees. */
int store_get(store_client *c, const char *key, void **val, size_t *len);
int store_wait(store_client *c, const char *key, int timeout_ms, void **val, size_t *len);
int store_add(store_client *c, const char *key, int64_t delta, int64_t *result);
/* Message for the last non-OK status of this client. */
const char *store_error(const store_client *c);
/* The scope and secret the client proved (the host transport proves it to peers too). */
const store_auth *store_client_auth(const store_client *c);
void store_close(store_client *c);

#endif
