#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int auth_random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int create_token(const char *path, char *err, size_t errlen)
{
    uint8_t raw[32];
    if (auth_random(raw, sizeof raw)) {
        snprintf(err, errlen, "%s: cannot read random bytes: %s", path, strerror(errno));
        return -1;
    }
    char hex[2 * sizeof raw + 2];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * sizeof raw] = '\n';
    hex[2 * sizeof raw + 1] = 0;
    /* O_EXCL: two coordinators starting at once must not overwrite each other's token. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        if (errno == EEXIST) return 0;
        snprintf(err, errlen, "%s: cannot create the token file: %s", path, strerror(errno));
        return -1;
    }
    size_t n = strlen(hex);
    int ok = write(fd, hex, n) == (ssize_t)n && fsync(fd) == 0;
    close(fd);
    if (!ok) {
        snprintf(err, errlen, "%s: cannot write the token file", path);
        unlink(path);
        return -1;
    }
    return 1;
}

int auth_token_load(auth_token *t, const char *path, int create, int *created, char *err, size_t errlen)
{
    if (created) *created = 0;
    if (create && access(path, F_OK) != 0) {
        int r = create_token(path, err, errlen);
        if (r < 0) return -1;
        if (created) *created = r;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "token file %s: %s (the coordinator creates it in its --state-dir "
                 "on first start; pass it with --token-file)", path, strerror(errno));
        return -1;
    }
    char buf[AUTH_TOKEN_MAX + 64];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = buf;
    while (*s && isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len < 16 || len > AUTH_TOKEN_MAX) {
        snprintf(err, errlen, "token file %s: the token must be 16 to %d characters, found %zu",
                 path, AUTH_TOKEN_MAX, len);
        return -1;
    }
    memcpy(t->bytes, s, len);
    t->len = len;
    return 0;
}

void auth_mac(const auth_token *t, const char *label, const uint8_t a[AUTH_NONCE_LEN],
              const uint8_t b[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN])
{
    hmac_sha256_ctx c;
    hmac_sha256_init(&c, t->bytes, t->len);
    hmac_sha256_update(&c, label, strlen(label));
    hmac_sha256_update(&c, a, AUTH_NONCE_LEN);
    hmac_sha256_update(&c, b, AUTH_NONCE_LEN);
    hmac_sha256_final(&c, out);
}

void auth_client_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN])
{
    auth_mac(t, "atoll-v1 client", nonce, client_nonce, out);
}

void auth_server_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[SHA256_LEN])
{
    auth_mac(t, "atoll-v1 server", client_nonce, nonce, out);
}

void auth_job_secret(const auth_token *cluster, uint64_t job, uint32_t epoch, auth_token *out)
{
    uint8_t scope[12], raw[SHA256_LEN];
    for (int i = 0; i < 8; i++) scope[i] = (uint8_t)(job >> (56 - 8 * i));
    for (int i = 0; i < 4; i++) scope[8 + i] = (uint8_t)(epoch >> (24 - 8 * i));
    hmac_sha256_ctx c;
    hmac_sha256_init(&c, cluster->bytes, cluster->len);
    hmac_sha256_update(&c, "atoll-v1 job", 12);
    hmac_sha256_update(&c, scope, sizeof scope);
    hmac_sha256_final(&c, raw);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_LEN; i++) {
        out->bytes[2 * i] = (uint8_t)hex[raw[i] >> 4];
        out->bytes[2 * i + 1] = (uint8_t)hex[raw[i] & 15];
    }
    out->len = 2 * SHA256_LEN;
}
