/* par_store: the rendezvous store, server in a thread, clients over TCP.
 * set/get/add; wait released by another client's set; wait timeout with a
 * message naming the key; a malformed frame closes only that client; a client
 * without the job secret is refused, one of another scope sees none of the
 * keys, and a scope's memory is bounded; connect to a port nobody serves times
 * out with the address in the message. */
#include "check.h"
#include "store.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;
static store_auth auth;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *late_setter(void *arg)
{
    (void)arg;
    store_client *c;
    char err[256];
    usleep(200000);
    if (store_connect("127.0.0.1", port, &auth, 2000, &c, err, sizeof err) != STORE_OK) return NULL;
    store_set(c, "late", "here", 4);
    store_close(c);
    return NULL;
}

static void *adder(void *arg)
{
    (void)arg;
    store_client *c;
    char err[256];
    if (store_connect("127.0.0.1", port, &auth, 2000, &c, err, sizeof err) != STORE_OK) return NULL;
    for (int i = 0; i < 100; i++) store_add(c, "counter", 1, NULL);
    store_close(c);
    return NULL;
}

/* Reads until the server closes the connection (what it sends first is ignored). */
static int reads_to_eof(int fd)
{
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    for (int i = 0; i < 100; i++) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0) return 1;
        if (n < 0) return 0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    store_server *srv;
    char err[256];
    CHECK(store_server_start_thread("127.0.0.1", 0, &srv, err, sizeof err) == 0, "%s", err);
    port = store_server_port(srv);
    CHECK(port > 0, "ephemeral port %d", port);
    store_server_auth(srv, &auth);

    store_client *c;
    CHECK(store_connect("127.0.0.1", port, &auth, 2000, &c, err, sizeof err) == STORE_OK, "%s", err);
    void *v = NULL;
    size_t len = 0;
    CHECK(store_get(c, "missing", &v, &len) == STORE_NOT_FOUND && strstr(store_error(c), "'missing'"),
          "get of an absent key: %s", store_error(c));
    CHECK(store_set(c, "a", "hello", 5) == STORE_OK, "%s", store_error(c));
    CHECK(store_get(c, "a", &v, &len) == STORE_OK && len == 5 && memcmp(v, "hello", 5) == 0, "get a");
    free(v);
    CHECK(store_set(c, "a", "", 0) == STORE_OK, "overwrite with empty");
    CHECK(store_get(c, "a", &v, &len) == STORE_OK && len == 0, "empty value, len %zu", len);
    free(v);

    /* a large binary value round-trips; a larger one is refused */
    size_t big = STORE_MAX_VALUE;
    unsigned char *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)(i * 131 + 7);
    CHECK(store_set(c, "big", b, big) == STORE_OK, "set big");
    CHECK(store_wait(c, "big", 1000, &v, &len) == STORE_OK && len == big && memcmp(v, b, big) == 0, "big value");
    free(v);
    free(b);
    b = calloc(1, big + 1);
    CHECK(store_set(c, "bigger", b, big + 1) == STORE_ERROR && strstr(store_error(c), "limit"), "%s", store_error(c));
    free(b);

    /* without the job secret: refused; with another scope's secret: none of our keys */
    store_client *x;
    store_auth wrong = auth;
    wrong.secret.bytes[0] ^= 1;
    CHECK(store_connect("127.0.0.1", port, &wrong, 2000, &x, err, sizeof err) == STORE_ERROR &&
          strstr(err, "wrong job secret"), "a wrong secret is refused: %s", err);
    /* the secret of scope (job 7, epoch 0) cannot be made without the server's token */
    wrong = auth;
    wrong.job = 7;
    CHECK(store_connect("127.0.0.1", port, &wrong, 2000, &x, err, sizeof err) == STORE_ERROR,
          "scope 0's secret does not open scope 7: %s", err);
    /* a scope holds at most KV_SCOPE_BYTES */
    unsigned char *chunk = calloc(1, STORE_MAX_VALUE);
    int refused = 0;
    for (int i = 0; i < (int)(KV_SCOPE_BYTES / STORE_MAX_VALUE) + 2 && !refused; i++) {
        char key[32];
        snprintf(key, sizeof key, "fill/%d", i);
        refused = store_set(c, key, chunk, STORE_MAX_VALUE) != STORE_OK;
    }
    free(chunk);
    CHECK(refused && strstr(store_error(c), "refused"), "a scope's memory is bounded: %s", store_error(c));
    CHECK(store_set(c, "small-after-full", "x", 1) == STORE_OK, "what still fits is taken: %s", store_error(c));

    /* add is atomic across clients */
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, adder, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    int64_t total = 0;
    CHECK(store_add(c, "counter", 0, &total) == STORE_OK && total == 400, "counter %lld", (long long)total);
    CHECK(store_get(c, "counter", &v, &len) == STORE_OK && strcmp(v, "400") == 0, "counter as text");
    free(v);

    /* wait is released by a set from another client */
    pthread_t ls;
    pthread_create(&ls, NULL, late_setter, NULL);
    double t0 = now();
    CHECK(store_wait(c, "late", 5000, &v, &len) == STORE_OK && len == 4 && memcmp(v, "here", 4) == 0,
          "wait released: %s", store_error(c));
    double waited = now() - t0;
    CHECK(waited > 0.1 && waited < 3, "waited %.3f s for the late set", waited);
    free(v);
    pthread_join(ls, NULL);

    /* wait times out with the key named */
    t0 = now();
    CHECK(store_wait(c, "never", 300, &v, &len) == STORE_TIMEOUT, "wait timeout status");
    waited = now() - t0;
    CHECK(strstr(store_error(c), "timed out") && strstr(store_error(c), "'never'"), "message: %s", store_error(c));
    CHECK(waited >= 0.29 && waited < 2, "timeout after %.3f s", waited);
    CHECK(store_set(c, "after-timeout", "x", 1) == STORE_OK, "client still usable after a timeout");

    /* garbage closes that connection only (after an Error frame saying why) */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "raw connect");
    unsigned char junk[16] = {12, 0, 0, 0, 99, 1, 0, 0, 0, 'k', 0, 0, 0, 0, 0, 0};
    CHECK(send(fd, junk, sizeof junk, 0) == (ssize_t)sizeof junk, "send junk");
    CHECK(reads_to_eof(fd), "server closes a client sending a bad frame");
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    connect(fd, (struct sockaddr *)&sa, sizeof sa);
    unsigned char huge[8] = {'A', 'T', 0, 41, 0x7f, 0xff, 0xff, 0xff};
    send(fd, huge, sizeof huge, 0);
    CHECK(reads_to_eof(fd), "server closes a client announcing a huge frame");
    close(fd);
    CHECK(store_get(c, "after-timeout", &v, &len) == STORE_OK, "server still serves: %s", store_error(c));
    free(v);

    /* bad key lengths are refused client-side */
    char longkey[STORE_MAX_KEY + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK(store_set(c, longkey, "x", 1) == STORE_ERROR && strstr(store_error(c), "at most 1024 bytes"), "%s",
          store_error(c));
    CHECK(store_set(c, "", "x", 1) == STORE_ERROR, "empty key refused");
    store_close(c);
    store_server_stop_thread(srv);

    /* nobody listening: connect gives up with the address */
    t0 = now();
    CHECK(store_connect("127.0.0.1", port, &auth, 300, &c, err, sizeof err) == STORE_TIMEOUT, "connect to a dead port");
    CHECK(strstr(err, "127.0.0.1") && now() - t0 < 3, "connect error: %s", err);
    setenv("MASTER_PORT", "notaport", 1);
    CHECK(store_connect_env(100, &c, err, sizeof err) == STORE_ERROR && strstr(err, "MASTER_PORT"), "%s", err);
    return check_summary(argv[0]);
}
