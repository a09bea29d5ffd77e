#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* libsodium: HMAC-SHA256 (crypto_auth_hmacsha256_*), sodium_memcmp and
 * randombytes_buf. sodium_init is idempotent and thread-safe; every entry point
 * that draws random bytes calls it. */
static int ready(void) { return sodium_init() >= 0 ? 0 : -1; }

int auth_random(void *buf, size_t n)
{
    if (ready()) return -1;
    randombytes_buf(buf, n);
    return 0;
}

int auth_equal(const uint8_t *a, const uint8_t *b, size_t n) { return sodium_memcmp(a, b, n) == 0; }

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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        snprintf(err, errlen, "token file %s: %s (the coordinator creates it in its --state-dir "
                 "on first start; pass it with --token-file)", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "token file %s: not a regular file", path);
        close(fd);
        return -1;
    }
    /* Like ssh with its keys: a secret others can read is no secret. */
    if (sb.st_mode & 077) {
        snprintf(err, errlen, "token file %s has mode %04o: group or others can read or write it; "
                 "make it private with `chmod 600 %s` (and give each host its own copy)",
                 path, (unsigned)(sb.st_mode & 07777), path);
        close(fd);
        return -1;
    }
    char buf[AUTH_TOKEN_MAX + 64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
        return -1;
    }
    buf[n] = 0;
    char *s = buf;
    while (*s && isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len < AUTH_TOKEN_MIN || len > AUTH_TOKEN_MAX) {
        snprintf(err, errlen, "token file %s: the token has %zu characters; %d to %d are accepted. Let "
                 "coordinatord create one (start it without the file), or write 64 random hex characters: "
                 "`head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > %s && chmod 600 %s`",
                 path, len, AUTH_TOKEN_MIN, AUTH_TOKEN_MAX, path, path);
        sodium_memzero(buf, sizeof buf);
        return -1;
    }
    memcpy(t->bytes, s, len);
    t->len = len;
    sodium_memzero(buf, sizeof buf);
    return 0;
}

/* HMAC-SHA256(token, label || a || b) */
void auth_mac(const auth_token *t, const char *label, const uint8_t a[AUTH_NONCE_LEN],
              const uint8_t b[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, t->bytes, t->len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, a, AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, b, AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_final(&st, out);
}

void auth_client_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN])
{
    auth_mac(t, "atoll-v1 client", nonce, client_nonce, out);
}

void auth_server_mac(const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                     const uint8_t client_nonce[AUTH_NONCE_LEN], uint8_t out[AUTH_MAC_LEN])
{
    auth_mac(t, "atoll-v1 server", client_nonce, nonce, out);
}

void auth_job_secret(const auth_token *cluster, uint64_t job, uint32_t epoch, auth_token *out)
{
    uint8_t scope[12], raw[AUTH_MAC_LEN];
    for (int i = 0; i < 8; i++) scope[i] = (uint8_t)(job >> (56 - 8 * i));
    for (int i = 0; i < 4; i++) scope[8 + i] = (uint8_t)(epoch >> (24 - 8 * i));
    crypto_auth_hmacsha256_state c;
    crypto_auth_hmacsha256_init(&c, cluster->bytes, cluster->len);
    crypto_auth_hmacsha256_update(&c, (const uint8_t *)"atoll-v1 job", 12);
    crypto_auth_hmacsha256_update(&c, scope, sizeof scope);
    crypto_auth_hmacsha256_final(&c, raw);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < AUTH_MAC_LEN; i++) {
        out->bytes[2 * i] = (uint8_t)hex[raw[i] >> 4];
        out->bytes[2 * i + 1] = (uint8_t)hex[raw[i] & 15];
    }
    out->len = 2 * AUTH_MAC_LEN;
    sodium_memzero(raw, sizeof raw);
}

/* ---- per-frame MACs ---- */

void auth_session_init(auth_session *s, const auth_token *t, const uint8_t nonce[AUTH_NONCE_LEN],
                       const uint8_t client_nonce[AUTH_NONCE_LEN], int is_client)
{
    uint8_t c2s[AUTH_MAC_LEN], s2c[AUTH_MAC_LEN];
    auth_mac(t, "atoll-v1 client->server", nonce, client_nonce, c2s);
    auth_mac(t, "atoll-v1 server->client", nonce, client_nonce, s2c);
    crypto_auth_hmacsha256_init(&s->send_key, is_client ? c2s : s2c, AUTH_MAC_LEN);
    crypto_auth_hmacsha256_init(&s->recv_key, is_client ? s2c : c2s, AUTH_MAC_LEN);
    s->send_seq = s->recv_seq = 0;
    sodium_memzero(c2s, sizeof c2s);
    sodium_memzero(s2c, sizeof s2c);
}

static void frame_tag(const crypto_auth_hmacsha256_state *key, uint64_t seq, const uint8_t *frame, size_t len,
                      uint8_t tag[AUTH_TAG_LEN])
{
    crypto_auth_hmacsha256_state st = *key; /* the keyed state, computed once per connection */
    uint8_t be[8];
    for (int i = 0; i < 8; i++) be[i] = (uint8_t)(seq >> (56 - 8 * i));
    crypto_auth_hmacsha256_update(&st, be, sizeof be);
    crypto_auth_hmacsha256_update(&st, frame, len);
    crypto_auth_hmacsha256_final(&st, tag);
}

void auth_session_seal(auth_session *s, const uint8_t *frame, size_t len, uint8_t tag[AUTH_TAG_LEN])
{
    frame_tag(&s->send_key, s->send_seq++, frame, len, tag);
}

int auth_session_open(auth_session *s, const uint8_t *frame, size_t len, const uint8_t tag[AUTH_TAG_LEN])
{
    uint8_t want[AUTH_TAG_LEN];
    frame_tag(&s->recv_key, s->recv_seq, frame, len, want);
    if (sodium_memcmp(want, tag, AUTH_TAG_LEN)) return -1;
    s->recv_seq++;
    return 0;
}
