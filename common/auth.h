/* auth: the cluster token, the HMAC challenge-response built on it, and the
 * per-frame MACs of an authenticated connection (spec: proto/README.md).
 *
 * The token is a secret text file (64 hex characters from the OS random source,
 * created with mode 0600 on the coordinator's first start). A connection proves
 * it knows the token without sending it:
 *   server -> Challenge{nonce N (32 random bytes)}
 *   client -> Auth{client_nonce C, mac = HMAC-SHA256(token, "atoll-v1 client" || N || C)}
 *   server -> AuthResult{ok, server_mac = HMAC-SHA256(token, "atoll-v1 server" || C || N)}
 * The client checks server_mac too, so a worker never reports to a coordinator that
 * does not hold the token. Both nonces are fresh per connection, so a recorded
 * exchange cannot be replayed. A rank proves its job's secret (auth_job_secret)
 * the same way, and its session keys come from that secret.
 *
 * Every later frame carries a tag: HMAC-SHA256 under a key of its direction,
 *   k_c2s = HMAC-SHA256(token, "atoll-v1 client->server" || N || C)
 *   k_s2c = HMAC-SHA256(token, "atoll-v1 server->client" || N || C)
 * over the frame's sequence number in that direction (u64 big-endian, from 0)
 * followed by the frame's header and payload. A frame that was altered, injected,
 * dropped, replayed or reordered fails the check at the receiver.
 *
 * The primitives are libsodium's (HMAC-SHA256, constant-time comparison, the OS
 * random source); nothing cryptographic is written here. Contexts are plain values
 * owned by the caller; no heap. */
#ifndef ATOLL_AUTH_H
#define ATOLL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32      /* HMAC-SHA256 */
#define AUTH_TAG_LEN 32      /* per-frame tag, the whole HMAC-SHA256 */
#define AUTH_TOKEN_MIN 32    /* characters; the coordinator writes 64 */
#define AUTH_TOKEN_MAX 256

typedef struct auth_token {
    uint8_t bytes[AUTH_TOKEN_MAX];
    size_t len;
} auth_token;

/* Fills buf with n bytes from the OS random source. 0 or -1. */
int auth_random(void *buf, size_t n);

/* Reads the token (surrounding whitespace trimmed). Refused, with a message
 * saying how to fix it: a file readable or writable by group or others, and a
 * token shorter than AUTH_TOKEN_MIN or longer than AUTH_TOKEN_MAX characters.
 * With `create` set and the file absent, writes a new random token with mode
 * 0600 first (*created set to 1). 0, or -1 with err naming the file. */
int auth_token_load(auth_token *t, const char *path, int create, int *created, char *err, size_t errlen);

void auth_client_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN]);
void auth_server_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN]);

/* Compares in time independent of where the bytes differ. 1 when equal. */
int auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* One end of an authenticated connection: the keyed HMAC states of both
 * directions (computed once; each frame starts from a copy) and the sequence
 * numbers of the next frame sent and expected. */
typedef struct auth_session {
    crypto_auth_hmacsha256_state send_key, recv_key;
    uint64_t send_seq, recv_seq;
} auth_session;

/* Derives the session of one end from the handshake's nonces. */
void auth_session_init(auth_session *s, const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                       const uint8_t client_nonce[AUTH_NONCE_LEN], int is_client);
/* The tag of the next frame sent (`frame` = header + payload); advances send_seq. */
void auth_session_seal(auth_session *s, const uint8_t *frame, size_t len, uint8_t tag[AUTH_TAG_LEN]);
/* 0 when `tag` is that of the next expected frame (recv_seq advances), -1 when not. */
int auth_session_open(auth_session *s, const uint8_t *frame, size_t len, const uint8_t tag[AUTH_TAG_LEN]);

/* The secret of one job's restart epoch, given to its ranks instead of the token:
 * hex(HMAC-SHA256(token, "atoll-v1 job" || job (8 bytes BE) || epoch (4 bytes BE))).
 * It proves membership of that (job, epoch) and nothing else; the token cannot be
 * recovered from it. */
void auth_job_secret(const auth_token *cluster, uint64_t job, uint32_t epoch, auth_token *out);

/* HMAC-SHA256(t, label || a || b) over two nonces: the one primitive of every
 * challenge-response here (the handshake above, rank-to-rank links). */
void auth_mac(const auth_token *t, const char *label, const uint8_t a[AUTH_NONCE_LEN],
              const uint8_t b[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN]);

#endif
