/* rpc over real loopback sockets in one process: the libuv server and client
 * complete the token handshake, frames flow both ways, a wrong token and an
 * oversized frame are refused with their reasons, a connection pipelining many
 * requests gets one per loop turn so another connection is served in between,
 * frames before authentication are limited to the handshake's size, failed
 * authentications are throttled per address, and the blocking client (run in a
 * forked child, since it blocks) speaks the same protocol. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "log.h"
#include "msg.h"
#include "rpc.h"

static auth_token good = { .len = 32 }, bad = { .len = 32 };
static rpc_server srv;
static int server_ready, server_frames, client_ready, client_closed, client_errors;
static char client_err[256], last_error_msg[512];
static uint16_t echoed_type;
static size_t echoed_len;

/* Which connection each handled frame came from ('A' pipelining, 'B' the other). */
static char order[512];
static size_t norder;
static struct sockaddr_storage g_addr;
static void start_b(void);

/* Server: echo every frame back with the same type. */
static void s_ready(rpc_conn *c) { (void)c; server_ready++; }
static void s_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    server_frames++;
    Atoll__KvGet *g = type == ATOLL__MSG_TYPE__MSG_KV_GET ? atoll__kv_get__unpack(NULL, len, p) : NULL;
    if (g && g->key && (!strcmp(g->key, "A") || !strcmp(g->key, "B")) && norder < sizeof order - 1) {
        order[norder++] = g->key[0];
        if (norder == 1 && g->key[0] == 'A') start_b(); /* A's 200 requests are buffered: B arrives now */
    }
    if (g) atoll__kv_get__free_unpacked(g, NULL);
    Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
    r.found = 1;
    r.value.data = (uint8_t *)p;
    r.value.len = len;
    rpc_send(c, type == ATOLL__MSG_TYPE__MSG_KV_GET ? ATOLL__MSG_TYPE__MSG_KV_REPLY : type, &r.base);
}
static void s_close(rpc_conn *c) { (void)c; }

static void c_ready(rpc_conn *c)
{
    client_ready++;
    Atoll__KvGet g = ATOLL__KV_GET__INIT;
    g.key = (char *)c->data;
    rpc_send(c, ATOLL__MSG_TYPE__MSG_KV_GET, &g.base);
}
static void c_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    if (type == ATOLL__MSG_TYPE__MSG_ERROR) {
        Atoll__Error *e = atoll__error__unpack(NULL, len, p);
        if (e) snprintf(last_error_msg, sizeof last_error_msg, "%s", e->message);
        if (e) atoll__error__free_unpacked(e, NULL);
        client_errors++;
        return;
    }
    echoed_type = type;
    echoed_len = len;
    rpc_close(c, NULL);
}
static void c_close(rpc_conn *c)
{
    client_closed++;
    snprintf(client_err, sizeof client_err, "%s", c->err);
}

static void run_until_closed(uv_loop_t *loop, int want_closed)
{
    for (int i = 0; i < 5000 && client_closed < want_closed; i++) uv_run(loop, UV_RUN_ONCE);
}

/* A client whose first (and only) request is a payload over the server's limit. */
static void big_ready(rpc_conn *c)
{
    uint8_t *blob = calloc(1, 5000);
    Atoll__KvSet s = ATOLL__KV_SET__INIT;
    s.key = "big";
    s.value.data = blob;
    s.value.len = 5000;
    rpc_send(c, ATOLL__MSG_TYPE__MSG_KV_SET, &s.base);
    free(blob);
}

/* A: 200 requests written at once, before any answer. B: one request. Their key
 * is one byte, 'A' or 'B', which the server records in handling order. */
static void pipe_ready(rpc_conn *c)
{
    const char *who = c->data;
    Atoll__KvGet g = ATOLL__KV_GET__INIT;
    g.key = (char *)who;
    for (int i = 0; i < (who[0] == 'A' ? 200 : 1); i++) rpc_send(c, ATOLL__MSG_TYPE__MSG_KV_GET, &g.base);
}
static int pipe_replies[2];
static void pipe_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    (void)type; (void)p; (void)len;
    const char *who = c->data;
    if (++pipe_replies[who[0] == 'B'] == (who[0] == 'A' ? 200 : 1)) rpc_close(c, NULL);
}
static void start_b(void)
{
    rpc_handlers h = { pipe_ready, pipe_frame, c_close };
    rpc_connect(uv_default_loop(), (struct sockaddr *)&g_addr, &good, ATOLL__ROLE__ROLE_CLI, "B", 0, &h, "B");
}

/* Sends raw bytes on a fresh socket; returns what came back (printable) until EOF. */
static void raw_exchange(uv_loop_t *loop, const void *bytes, size_t n, char *out, size_t outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&g_addr, sizeof(struct sockaddr_in))) {
        snprintf(out, outlen, "connect failed");
        close(fd);
        return;
    }
    if (n && write(fd, bytes, n) != (ssize_t)n) {
        snprintf(out, outlen, "write failed");
        close(fd);
        return;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t got = 0;
    int eof = 0;
    for (int i = 0; i < 4000 && !eof; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        ssize_t r = recv(fd, out + got, outlen - 1 - got, 0);
        if (r > 0) got += (size_t)r;
        else if (r == 0) eof = 1;
        else usleep(1000);
    }
    close(fd);
    for (size_t i = 0; i < got; i++) if (out[i] < 32 || out[i] > 126) out[i] = '.';
    out[got] = 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    log_init("test_ctl_rpc", LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    memset(good.bytes, 'g', good.len);
    memset(bad.bytes, 'b', bad.len);
    uv_loop_t *loop = uv_default_loop();
    char err[256], addr[64];
    rpc_handlers sh = { s_ready, s_frame, s_close };
    CHECK(rpc_server_listen(&srv, loop, "127.0.0.1:0", &good, 4096, &sh, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(srv.port > 0, "bound port %d", srv.port);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", srv.port);
    struct sockaddr_storage ss;
    CHECK(rpc_resolve(addr, &ss, err, sizeof err) == 0, "%s", err);
    CHECK(rpc_resolve("127.0.0.1", &ss, err, sizeof err) == -1 && strstr(err, "HOST:PORT"), "no port: %s", err);
    CHECK(rpc_resolve("127.0.0.1:99999", &ss, err, sizeof err) == -1, "port range");
    rpc_resolve(addr, &ss, err, sizeof err);

    /* Right token: handshake, request, echo. */
    rpc_handlers ch = { c_ready, c_frame, c_close };
    rpc_connect(loop, (struct sockaddr *)&ss, &good, ATOLL__ROLE__ROLE_CLI, "t1", 0, &ch, "hello");
    run_until_closed(loop, 1);
    CHECK(client_ready == 1 && server_ready == 1, "handshake: client %d server %d", client_ready, server_ready);
    CHECK(echoed_type == ATOLL__MSG_TYPE__MSG_KV_REPLY && echoed_len > 5, "echo type %u len %zu", echoed_type, echoed_len);

    /* Wrong token: refused by the server, the client learns why. */
    rpc_connect(loop, (struct sockaddr *)&ss, &bad, ATOLL__ROLE__ROLE_CLI, "t2", 0, &ch, "x");
    run_until_closed(loop, 2);
    CHECK(client_ready == 1 && server_ready == 1, "a wrong token got through");
    CHECK(strstr(client_err, "wrong cluster token"), "client saw: '%s'", client_err);
    CHECK(srv.refused == 1, "server refused %llu", (unsigned long long)srv.refused);

    /* Oversized frame after authenticating: Error with the limit, then closed. */
    rpc_handlers bh = { big_ready, c_frame, c_close };
    rpc_connect(loop, (struct sockaddr *)&ss, &good, ATOLL__ROLE__ROLE_CLI, "t3", 0, &bh, NULL);
    run_until_closed(loop, 3);
    CHECK(client_errors == 1 && strstr(last_error_msg, "the limit is 4096"), "oversized: '%s'", last_error_msg);
    CHECK(server_frames == 1, "the oversized frame reached the handler");

    /* Connecting and never authenticating: told why, then closed, after the deadline. */
    srv.auth_timeout_ms = 300;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(fd, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) == 0, "raw connect");
    fcntl(fd, F_SETFL, O_NONBLOCK);
    char raw[4096];
    size_t got = 0;
    int eof = 0;
    for (int i = 0; i < 4000 && !eof; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, raw + got, sizeof raw - 1 - got, 0);
        if (n > 0) got += (size_t)n;
        else if (n == 0) eof = 1;
        else usleep(1000);
    }
    close(fd);
    for (size_t i = 0; i < got; i++) if (!raw[i]) raw[i] = '.';
    raw[got] = 0;
    CHECK(eof && strstr(raw, "not authenticated within 300 ms"), "idle peer: eof %d, got '%s'", eof, raw);
    CHECK(srv.refused == 3, "refusals %llu (wrong token, oversized frame, idle peer)", (unsigned long long)srv.refused);
    srv.auth_timeout_ms = 10000;

    /* Nobody listening: the connect fails and is reported through on_close. */
    struct sockaddr_storage none;
    rpc_resolve("127.0.0.1:1", &none, err, sizeof err);
    rpc_connect(loop, (struct sockaddr *)&none, &good, ATOLL__ROLE__ROLE_CLI, "t4", 0, &ch, "x");
    run_until_closed(loop, 4);
    CHECK(strstr(client_err, "connect failed"), "refused connect: '%s'", client_err);

    /* Fairness: B's one request is handled long before A's 200 pipelined ones are done. */
    g_addr = ss;
    rpc_handlers ph = { pipe_ready, pipe_frame, c_close };
    rpc_connect(loop, (struct sockaddr *)&ss, &good, ATOLL__ROLE__ROLE_CLI, "A", 0, &ph, "A");
    run_until_closed(loop, 6);
    order[norder] = 0;
    const char *b_at = strchr(order, 'B');
    CHECK(pipe_replies[0] == 200 && pipe_replies[1] == 1, "replies A %d B %d", pipe_replies[0], pipe_replies[1]);
    CHECK(b_at && b_at - order < 20, "B's request handled after %ld of A's 200 (order %.40s...)",
          b_at ? (long)(b_at - order) : -1L, order);

    /* Before authentication only handshake-sized frames: a 2000-byte Auth is refused at its header. */
    uint8_t hdr[FRAME_HEADER_LEN];
    frame_header_encode(hdr, ATOLL__MSG_TYPE__MSG_AUTH, 2000);
    char out[4096];
    raw_exchange(loop, hdr, sizeof hdr, out, sizeof out);
    CHECK(strstr(out, "frame too large: 2000 bytes of payload, the limit is 1024"), "pre-auth limit: '%s'", out);

    /* Failed authentications are throttled per address: after the burst, new
     * connections from it are refused before any MAC is checked. */
    int before = client_closed;
    for (int i = 0; i < RPC_AUTH_FAIL_BURST + 5; i++) {
        rpc_connect(loop, (struct sockaddr *)&ss, &bad, ATOLL__ROLE__ROLE_CLI, "guess", 0, &ch, "x");
        run_until_closed(loop, before + i + 1);
    }
    CHECK(strstr(client_err, "too many failed authentications from this address; retry in"), "throttled: '%s'",
          client_err);
    /* The right token is refused too while the address is throttled, then accepted once a try has refilled. */
    rpc_connect(loop, (struct sockaddr *)&ss, &good, ATOLL__ROLE__ROLE_CLI, "t5", 0, &ch, "after");
    run_until_closed(loop, before + RPC_AUTH_FAIL_BURST + 6);
    CHECK(strstr(client_err, "too many failed"), "good token during the penalty: '%s'", client_err);
    usleep(RPC_AUTH_FAIL_REFILL_MS * 1000 + 100000);
    int ready_before = client_ready;
    rpc_connect(loop, (struct sockaddr *)&ss, &good, ATOLL__ROLE__ROLE_CLI, "t6", 0, &ch, "after");
    run_until_closed(loop, before + RPC_AUTH_FAIL_BURST + 7);
    CHECK(client_ready == ready_before + 1, "the right token after the penalty: '%s'", client_err);

    /* The blocking client, in a child process, against this loop. */
    pid_t pid = fork();
    if (pid == 0) {
        rpc_sync s;
        int rc = 0;
        if (rpc_sync_open(&s, addr, &good, ATOLL__ROLE__ROLE_CLI, "sync", 5000, err, sizeof err)) rc |= 1;
        Atoll__KvGet g = ATOLL__KV_GET__INIT;
        g.key = "sync";
        ProtobufCMessage *reply = NULL;
        if (!rc && rpc_sync_call(&s, ATOLL__MSG_TYPE__MSG_KV_GET, &g.base, ATOLL__MSG_TYPE__MSG_KV_REPLY, &reply, err,
                                 sizeof err))
            rc |= 2;
        if (reply) protobuf_c_message_free_unpacked(reply, NULL);
        rpc_sync_close(&s);
        rpc_status st = rpc_sync_open(&s, addr, &bad, ATOLL__ROLE__ROLE_CLI, "sync", 5000, err, sizeof err);
        if (st != RPC_REFUSED || !strstr(err, "wrong cluster token")) rc |= 4;
        st = rpc_sync_open(&s, "127.0.0.1:1", &good, ATOLL__ROLE__ROLE_CLI, "sync", 5000, err, sizeof err);
        if (st != RPC_UNREACHABLE) rc |= 8;
        _exit(rc);
    }
    int status = -1;
    for (int i = 0; i < 20000; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        usleep(500);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "blocking client failed checks, mask %d",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    rpc_server_close(&srv);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return check_summary(argv[0]);
}
