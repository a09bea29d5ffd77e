/* auth: the cluster token and the HMAC challenge-response built on it.
 *
 * The token is a secret text file (64 hex characters from the OS random source,
 * created with mode 0600 on the coordinator's first start). A connection proves
 * it knows the token without sending it:
 *   server -> Challenge{nonce N (32 random bytes)}
 *   client -> Auth{client_nonce C, mac = HMAC-SHA256(token, "atoll-v1 client" || N || C)}
 *   server -> AuthResult{ok, server_mac = HMAC-SHA256(token, "atoll-v1 server" || C || N)}
 * The client checks server_mac too, so a worker never reports to a coordinator that
 * does not hold the token. Both nonces are fresh per connection, so a recorded
 * exchange cannot be replayed. */
#ifndef ATOLL_AUTH_H
#define ATOLL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

#define AUTH_NONCE_LEN 32
#define AUTH_TOKEN_MAX 256

typedef struct auth_token {
    uint8_t bytes[AUTH_TOKEN_MAX];
    size_t len;
} auth_token;

/* Fills buf with n bytes from getrandom(2). 0 or -1. */
int auth_random(void *buf, size_t n);

/* Reads the token (surrounding whitespace trimmed; at least 16 characters).
 * With `create` set and the file absent, writes a new random token with mode 0600
 * first (*created set to 1). 0, or -1 with err naming the file and the problem. */
int auth_token_load(auth_token *t, const char *path, int create, int *created, char *err, size_t errlen);

void auth_client_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN]);
void auth_server_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN]);

/* The secret of one job's restart epoch, given to its ranks instead of the token:
 * hex(HMAC-SHA256(token, "atoll-v1 job" || job (8 bytes BE) || epoch (4 bytes BE))).
 * It proves membership of that (job, epoch) and nothing else; the token cannot be
 * recovered from it. */
void auth_job_secret(const auth_token *cluster, uint64_t job, uint32_t epoch, auth_token *out);

/* HMAC-SHA256(t, label || a || b) over two nonces: the one primitive of every
 * challenge-response here (the handshake above, rank-to-rank links). */
void auth_mac(const auth_token *t, const char *label, const uint8_t a[AUTH_NONCE_LEN],
              const uint8_t b[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN]);

#endif
