/* auth: the handshake MACs and per-frame tags against values computed with
 * Python's hmac/hashlib from proto/README.md's definitions (so a client in another
 * language computes the same bytes), tags refusing altered/replayed/reordered/
 * dropped frames, and the token file's checks with their messages. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "check.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static void test_known_answers(void)
{
    auth_token t = { .len = 32 };
    memcpy(t.bytes, "0123456789abcdef0123456789abcdef", 32);
    uint8_t n[AUTH_NONCE_LEN], cn[AUTH_NONCE_LEN], m[AUTH_MAC_LEN];
    for (int i = 0; i < 32; i++) n[i] = (uint8_t)i, cn[i] = (uint8_t)(32 + i);
    char h[2 * AUTH_MAC_LEN + 1];
    auth_client_mac(&t, n, cn, m);
    hex(m, sizeof m, h);
    CHECK(!strcmp(h, "09aafb23aa01f9a69a46fd08b84e0db6ff8cca58f71370643ec98068bae78698"), "client MAC %s", h);
    auth_server_mac(&t, n, cn, m);
    hex(m, sizeof m, h);
    CHECK(!strcmp(h, "6bfef6b554fc933b16946ff144417846175a874f98ace814029dfd546e2f9ad3"), "server MAC %s", h);

    /* The client's first two frames (a NodesRequest with an empty payload). */
    auth_session cli, srv;
    auth_session_init(&cli, &t, n, cn, 1);
    auth_session_init(&srv, &t, n, cn, 0);
    const uint8_t frame[8] = { 'A', 'T', 0, 20, 0, 0, 0, 0 };
    uint8_t tag0[AUTH_TAG_LEN], tag1[AUTH_TAG_LEN];
    auth_session_seal(&cli, frame, sizeof frame, tag0);
    auth_session_seal(&cli, frame, sizeof frame, tag1);
    hex(tag0, sizeof tag0, h);
    CHECK(!strcmp(h, "965391838cefcf71c9569c3f739da0cd65a6b5dba9747d7896b591996c4fa295"), "tag of frame 0 %s", h);
    hex(tag1, sizeof tag1, h);
    CHECK(!strcmp(h, "d3b98d2c14d0d15e6360471c3ed27a47d88cd3a2aed73e552ba0d392441a9064"), "tag of frame 1 %s", h);

    /* The server accepts them in order, once. */
    CHECK(auth_session_open(&srv, frame, sizeof frame, tag1) == -1, "frame 1 before frame 0 (reorder/drop) accepted");
    CHECK(auth_session_open(&srv, frame, sizeof frame, tag0) == 0, "frame 0 refused");
    CHECK(auth_session_open(&srv, frame, sizeof frame, tag0) == -1, "frame 0 replayed accepted");
    uint8_t altered[8];
    memcpy(altered, frame, 8);
    altered[3] = 22; /* a DrainRequest instead */
    CHECK(auth_session_open(&srv, altered, sizeof altered, tag1) == -1, "altered frame accepted");
    CHECK(auth_session_open(&srv, frame, sizeof frame, tag1) == 0, "frame 1 refused");
    /* Directions have their own keys: a frame reflected back is refused. */
    uint8_t stag[AUTH_TAG_LEN];
    auth_session_seal(&srv, frame, sizeof frame, stag);
    CHECK(auth_session_open(&srv, frame, sizeof frame, stag) == -1, "reflected frame accepted");
    CHECK(auth_session_open(&cli, frame, sizeof frame, stag) == 0, "server's frame 0 refused by the client");
    /* Another connection (other nonces) has other keys. */
    auth_session other;
    n[0] ^= 1;
    auth_session_init(&other, &t, n, cn, 0);
    CHECK(auth_session_open(&other, frame, sizeof frame, tag0) == -1, "frame of another connection accepted");
}

static int write_token(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    ssize_t w = write(fd, text, strlen(text));
    close(fd);
    return w == (ssize_t)strlen(text) ? chmod(path, mode) : -1;
}

static void test_token_file(void)
{
    char dir[] = "/tmp/atoll_auth_XXXXXX", path[64], err[512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/token", dir);
    auth_token t;
    int created = 0;
    CHECK(auth_token_load(&t, path, 1, &created, err, sizeof err) == 0 && created && t.len == 64, "create: %s", err);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600, "created with mode %o", sb.st_mode & 0777);
    auth_token again;
    CHECK(auth_token_load(&again, path, 1, &created, err, sizeof err) == 0 && !created &&
          again.len == t.len && !memcmp(again.bytes, t.bytes, t.len), "second start keeps the token");

    const char *tok64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";
    CHECK(write_token(path, tok64, 0644) == 0, "write");
    CHECK(auth_token_load(&t, path, 0, NULL, err, sizeof err) == -1 && strstr(err, "mode 0644") &&
          strstr(err, "chmod 600"), "group/other-readable token: %s", err);
    CHECK(write_token(path, tok64, 0620) == 0 && auth_token_load(&t, path, 0, NULL, err, sizeof err) == -1 &&
          strstr(err, "mode 0620"), "group-writable token: %s", err);
    CHECK(write_token(path, "0123456789abcdef\n", 0600) == 0 && auth_token_load(&t, path, 0, NULL, err, sizeof err) == -1 &&
          strstr(err, "has 16 characters; 32 to 256 are accepted") && strstr(err, "/dev/urandom"),
          "short token: %s", err);
    CHECK(write_token(path, "  0123456789abcdef0123456789abcdef \n", 0400) == 0 &&
          auth_token_load(&t, path, 0, NULL, err, sizeof err) == 0 && t.len == 32, "32 characters, mode 0400: %s", err);
    CHECK(auth_token_load(&t, dir, 0, NULL, err, sizeof err) == -1 && strstr(err, "not a regular file"), "%s", err);
    unlink(path);
    CHECK(auth_token_load(&t, path, 0, NULL, err, sizeof err) == -1 && strstr(err, "--token-file"), "missing: %s", err);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    (void)argc;
    uint8_t a[32], b[32];
    CHECK(auth_random(a, sizeof a) == 0 && auth_random(b, sizeof b) == 0 && memcmp(a, b, 32), "random bytes");
    test_known_answers();
    test_token_file();
    return check_summary(argv[0]);
}
