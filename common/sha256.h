/* sha256: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the cluster-token
 * challenge-response. Written from the standards so the daemons need no crypto
 * library; tested on the FIPS and RFC 4231 vectors (tests/control/test_ctl_sha256.c).
 * No heap; contexts are plain values owned by the caller. */
#ifndef ATOLL_SHA256_H
#define ATOLL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32
#define SHA256_BLOCK 64

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;              /* message length so far */
    uint8_t block[SHA256_BLOCK];
    size_t fill;                 /* bytes waiting in block */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_LEN]);
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

typedef struct hmac_sha256_ctx {
    sha256_ctx inner, outer;
} hmac_sha256_ctx;

void hmac_sha256_init(hmac_sha256_ctx *c, const void *key, size_t keylen);
void hmac_sha256_update(hmac_sha256_ctx *c, const void *data, size_t len);
void hmac_sha256_final(hmac_sha256_ctx *c, uint8_t out[SHA256_LEN]);
void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* Compares in time independent of where the bytes differ. 1 when equal. */
int sha256_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
