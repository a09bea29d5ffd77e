/* rpc over real loopback sockets in one process: the libuv server and client
 * complete the token handshake, frames flow both ways, a wrong token and an
 * oversized frame are refused with their reasons, and the blocking client
 * (run in a forked child, since it blocks) speaks the same protocol. */
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

/* Server: echo every frame back with the same type. */
static void s_ready(rpc_conn *c) { (void)c; server_ready++; }
static void s_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    server_frames++;
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

    /* Nobody listening: the connect fails and is reported through on_close. */
    struct sockaddr_storage none;
    rpc_resolve("127.0.0.1:1", &none, err, sizeof err);
    rpc_connect(loop, (struct sockaddr *)&none, &good, ATOLL__ROLE__ROLE_CLI, "t4", 0, &ch, "x");
    run_until_closed(loop, 4);
    CHECK(strstr(client_err, "connect failed"), "refused connect: '%s'", client_err);

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
