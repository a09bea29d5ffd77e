/* SHA-256 on the FIPS 180-4 examples, HMAC-SHA256 on RFC 4231's test cases,
 * and the auth MACs: both sides agree, and any change to token or nonce breaks it. */
#include <string.h>

#include "auth.h"
#include "check.h"
#include "sha256.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void unhex(const char *s, uint8_t *out, size_t *n)
{
    *n = strlen(s) / 2;
    for (size_t i = 0; i < *n; i++) sscanf(s + 2 * i, "%2hhx", &out[i]);
}

static void check_sha(const void *msg, size_t len, const char *want)
{
    uint8_t d[32];
    char h[65];
    sha256(msg, len, d);
    hex(d, 32, h);
    CHECK(!strcmp(h, want), "sha256 of %zu bytes: %s, want %s", len, h, want);
}

static void check_hmac(const char *key_hex, const char *data_hex, const char *want, size_t cmp_bytes)
{
    uint8_t key[256], data[256], d[32];
    size_t kl, dl;
    unhex(key_hex, key, &kl);
    unhex(data_hex, data, &dl);
    hmac_sha256(key, kl, data, dl, d);
    char h[65];
    hex(d, cmp_bytes, h);
    CHECK(!strncmp(h, want, 2 * cmp_bytes), "hmac: %s, want %s", h, want);
}

int main(int argc, char **argv)
{
    (void)argc;
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* One million 'a', fed in uneven pieces to exercise the block buffer. */
    sha256_ctx c;
    sha256_init(&c);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof a ? left : sizeof a;
        sha256_update(&c, a, n);
        left -= n;
    }
    uint8_t d[32];
    char h[65];
    sha256_final(&c, d);
    hex(d, 32, h);
    CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "million a: %s", h);

    /* RFC 4231 test cases 1-4, 5 (truncated to 128 bits), 6, 7. */
    check_hmac("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32);
    check_hmac("4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32);
    char k3[41], d3[101], k4[51], d4[101];
    memset(k3, 'a', 40); k3[40] = 0;
    for (int i = 0; i < 50; i++) memcpy(d3 + 2 * i, "dd", 2);
    d3[100] = 0;
    check_hmac(k3, d3, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32);
    strcpy(k4, "0102030405060708090a0b0c0d0e0f10111213141516171819");
    for (int i = 0; i < 50; i++) memcpy(d4 + 2 * i, "cd", 2);
    d4[100] = 0;
    check_hmac(k4, d4, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32);
    check_hmac("0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "546573742057697468205472756e636174696f6e",
               "a3b6167473100ee06e0c796c2955552b", 16);
    char k6[263];
    for (int i = 0; i < 131; i++) memcpy(k6 + 2 * i, "aa", 2);
    k6[262] = 0;
    check_hmac(k6, "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669727374",
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32);
    const char *t7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                     "The key needs to be hashed before being used by the HMAC algorithm.";
    uint8_t key7[131];
    memset(key7, 0xaa, sizeof key7);
    hmac_sha256(key7, sizeof key7, t7, strlen(t7), d);
    hex(d, 32, h);
    CHECK(!strcmp(h, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"), "rfc4231 case 7: %s", h);

    /* The handshake MACs. */
    auth_token t = { .len = 20 }, t2 = { .len = 20 };
    memcpy(t.bytes, "0123456789abcdef0123", 20);
    memcpy(t2.bytes, "0123456789abcdef0124", 20);
    uint8_t n[AUTH_NONCE_LEN], cn[AUTH_NONCE_LEN], m1[32], m2[32], m3[32], s1[32];
    CHECK(auth_random(n, sizeof n) == 0 && auth_random(cn, sizeof cn) == 0, "getrandom");
    CHECK(memcmp(n, cn, sizeof n) != 0, "two random nonces are equal");
    auth_client_mac(&t, n, cn, m1);
    auth_client_mac(&t, n, cn, m2);
    CHECK(sha256_equal(m1, m2, 32), "client MAC is deterministic");
    auth_client_mac(&t2, n, cn, m3);
    CHECK(!sha256_equal(m1, m3, 32), "a different token gives the same MAC");
    auth_server_mac(&t, n, cn, s1);
    CHECK(!sha256_equal(m1, s1, 32), "server and client MACs must differ (no reflection)");
    cn[5] ^= 1;
    auth_client_mac(&t, n, cn, m3);
    CHECK(!sha256_equal(m1, m3, 32), "nonce change not reflected in MAC");
    return check_summary(argv[0]);
}
