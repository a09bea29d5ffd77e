/* store: the rendezvous key-value store ranks meet through.
 *
 * Ranks of one job exchange their transport addresses (host backend) or the NCCL
 * unique id through a small key-value store before any communicator exists. In
 * standalone mode the local launcher serves it; in cluster mode the coordinator
 * will. Ranks find it through the torchrun-style environment MASTER_ADDR and
 * MASTER_PORT.
 *
 * Semantics: keys are strings (at most STORE_MAX_KEY bytes), values are byte
 * strings (at most STORE_MAX_VALUE bytes). set overwrites; get never blocks;
 * wait blocks until the key exists or the timeout passes; add treats the value as
 * a decimal integer (absent = 0), adds, and returns the new value atomically.
 *
 * Server: single-threaded, on a libuv loop, so it can live in the launcher's own
 * loop (or the coordinator's). A waiting client costs a timer, not a thread.
 * Client: blocking sockets, one thread at a time per client.
 *
 * Wire format (native little-endian, one request then one reply per frame):
 *   request  u32 len | u8 op | u32 klen | key | u32 vlen | value | i64 arg
 *   reply    u32 len | u8 status | u32 vlen | value | i64 num
 * where arg is the wait timeout in ms or the add delta, and len counts the bytes
 * after itself. A frame over the size limits closes that connection.
 */
#ifndef ATOLL_STORE_H
#define ATOLL_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_MAX_KEY 1024
#define STORE_MAX_VALUE (16u << 20)

typedef enum {
    STORE_OK = 0,
    STORE_ERROR = -1,    /* transport or protocol failure; message in store_error() */
    STORE_NOT_FOUND = 1, /* get: no such key */
    STORE_TIMEOUT = 2,   /* wait/connect: deadline passed; message names the key */
} store_status;

/* ---- server ---------------------------------------------------------------- */

typedef struct store_server store_server;
struct uv_loop_s;

/* Listens on host:port (port 0 = an ephemeral port, see store_server_port) on
 * `loop`. The caller runs the loop. Returns 0, or -1 with err set. */
int store_server_start(struct uv_loop_s *loop, const char *host, int port,
                       store_server **out, char *err, size_t errlen);
int store_server_port(const store_server *s);
/* Closes the listener and every connection; the server frees itself once the
 * loop has run the close callbacks (run the loop once more after this). */
void store_server_close(store_server *s);

/* The same server on its own loop in a background thread (for tests and callers
 * without a loop). stop joins the thread and frees everything. */
int store_server_start_thread(const char *host, int port, store_server **out,
                              char *err, size_t errlen);
void store_server_stop_thread(store_server *s);

/* ---- client ---------------------------------------------------------------- */

typedef struct store_client store_client;

/* Connects, retrying until the server accepts or timeout_ms passes (ranks may
 * start before the server listens). Returns STORE_OK, STORE_TIMEOUT or
 * STORE_ERROR with err set; *out is owned by the caller (store_close). */
int store_connect(const char *host, int port, int timeout_ms, store_client **out,
                  char *err, size_t errlen);
/* Same, from MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (required). */
int store_connect_env(int timeout_ms, store_client **out, char *err, size_t errlen);

int store_set(store_client *c, const char *key, const void *val, size_t len);
/* *val is malloc'd (NUL-terminated for convenience, not counted in *len); caller frees. */
int store_get(store_client *c, const char *key, void **val, size_t *len);
int store_wait(store_client *c, const char *key, int timeout_ms, void **val, size_t *len);
int store_add(store_client *c, const char *key, int64_t delta, int64_t *result);
/* Message for the last non-OK status of this client. */
const char *store_error(const store_client *c);
void store_close(store_client *c);

#endif
