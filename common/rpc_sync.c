/* The blocking side of rpc.h: one socket, poll(2) for timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msg.h"
#include "rpc.h"

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) return -1;
        struct pollfd p = { .fd = fd, .events = ev };
        int r = poll(&p, 1, (int)left);
        if (r > 0) return 0;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static int write_all(rpc_sync *s, const uint8_t *p, size_t n)
{
    long long deadline = now_ms() + s->timeout_ms;
    while (n) {
        ssize_t w = send(s->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && !wait_fd(s->fd, POLLOUT, deadline)) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 0 ok, -1 error/EOF/timeout */
static int read_all(rpc_sync *s, uint8_t *p, size_t n)
{
    long long deadline = now_ms() + s->timeout_ms;
    while (n) {
        ssize_t r = recv(s->fd, p, n, 0);
        if (r == 0) return -1;
        if (r < 0) {
            if (errno == EINTR) continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && !wait_fd(s->fd, POLLIN, deadline)) continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

rpc_status rpc_sync_send(rpc_sync *s, uint16_t type, const ProtobufCMessage *m, char *err, size_t errlen)
{
    size_t len;
    uint8_t *buf = msg_frame(type, m, s->sealed ? AUTH_TAG_LEN : 0, &len);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return RPC_PROTOCOL_ERR;
    }
    if (s->sealed) {
        auth_session_seal(&s->sess, buf, len, buf + len);
        len += AUTH_TAG_LEN;
    }
    int rc = write_all(s, buf, len);
    free(buf);
    if (rc) {
        snprintf(err, errlen, "sending to the coordinator failed: %s", strerror(errno));
        return RPC_UNREACHABLE;
    }
    return RPC_OK;
}

rpc_status rpc_sync_recv(rpc_sync *s, uint16_t *type, ProtobufCMessage **reply, char *err, size_t errlen)
{
    *reply = NULL;
    uint8_t hdr[FRAME_HEADER_LEN];
    if (read_all(s, hdr, sizeof hdr)) {
        snprintf(err, errlen, "no reply from the coordinator (connection closed or timed out after %d ms)",
                 s->timeout_ms);
        return RPC_UNREACHABLE;
    }
    frame_header h;
    /* Before the handshake only its small frames are read. */
    if (frame_header_decode(hdr, s->sealed ? s->max_frame : RPC_PREAUTH_MAX, &h, err, errlen)) return RPC_PROTOCOL_ERR;
    size_t tail = s->sealed ? AUTH_TAG_LEN : 0;
    uint8_t *frame = malloc(FRAME_HEADER_LEN + (size_t)h.len + tail);
    if (!frame) {
        snprintf(err, errlen, "out of memory for a %u-byte reply", h.len);
        return RPC_PROTOCOL_ERR;
    }
    memcpy(frame, hdr, FRAME_HEADER_LEN);
    uint8_t *payload = frame + FRAME_HEADER_LEN;
    if (read_all(s, payload, h.len + tail)) {
        free(frame);
        snprintf(err, errlen, "the coordinator closed the connection mid-reply");
        return RPC_UNREACHABLE;
    }
    if (s->sealed && auth_session_open(&s->sess, frame, FRAME_HEADER_LEN + h.len, payload + h.len)) {
        free(frame);
        snprintf(err, errlen, "a reply from the coordinator fails its integrity check (altered, injected, dropped "
                 "or replayed on the way); not trusting this connection");
        return RPC_PROTOCOL_ERR;
    }
    *type = h.type;
    const ProtobufCMessageDescriptor *d = msg_descriptor(h.type);
    ProtobufCMessage *m = d ? protobuf_c_message_unpack(d, NULL, h.len, payload) : NULL;
    free(frame);
    if (!m) {
        snprintf(err, errlen, "the coordinator sent an undecodable %s (type %u)", msg_type_name(h.type), h.type);
        return RPC_PROTOCOL_ERR;
    }
    if (h.type == ATOLL__MSG_TYPE__MSG_ERROR) {
        snprintf(err, errlen, "%s", ((Atoll__Error *)m)->message);
        protobuf_c_message_free_unpacked(m, NULL);
        return RPC_REFUSED;
    }
    *reply = m;
    return RPC_OK;
}

rpc_status rpc_sync_call(rpc_sync *s, uint16_t type, const ProtobufCMessage *req, uint16_t reply_type,
                         ProtobufCMessage **reply, char *err, size_t errlen)
{
    rpc_status st = rpc_sync_send(s, type, req, err, errlen);
    if (st) return st;
    uint16_t got;
    st = rpc_sync_recv(s, &got, reply, err, errlen);
    if (st) return st;
    if (got != reply_type) {
        snprintf(err, errlen, "expected %s from the coordinator, got %s", msg_type_name(reply_type),
                 msg_type_name(got));
        protobuf_c_message_free_unpacked(*reply, NULL);
        *reply = NULL;
        return RPC_PROTOCOL_ERR;
    }
    return RPC_OK;
}

static rpc_status handshake(rpc_sync *s, const auth_token *token, int role, const char *name,
                            uint64_t job, uint32_t epoch, char *err, size_t errlen)
{
    uint16_t type;
    ProtobufCMessage *m;
    rpc_status st = rpc_sync_recv(s, &type, &m, err, errlen);
    if (st) return st;
    if (type != ATOLL__MSG_TYPE__MSG_CHALLENGE || ((Atoll__Challenge *)m)->nonce.len != AUTH_NONCE_LEN) {
        protobuf_c_message_free_unpacked(m, NULL);
        snprintf(err, errlen, "the server did not open with a Challenge; is it an atoll coordinator?");
        return RPC_PROTOCOL_ERR;
    }
    uint8_t nonce[AUTH_NONCE_LEN], cnonce[AUTH_NONCE_LEN], mac[AUTH_MAC_LEN];
    memcpy(nonce, ((Atoll__Challenge *)m)->nonce.data, AUTH_NONCE_LEN);
    protobuf_c_message_free_unpacked(m, NULL);
    auth_random(cnonce, sizeof cnonce);
    auth_client_mac(token, nonce, cnonce, mac);
    Atoll__Auth a = ATOLL__AUTH__INIT;
    a.client_nonce.data = cnonce;
    a.client_nonce.len = sizeof cnonce;
    a.mac.data = mac;
    a.mac.len = sizeof mac;
    a.role = (Atoll__Role)role;
    a.name = (char *)(name ? name : "");
    a.job = job;
    a.epoch = epoch;
    st = rpc_sync_call(s, ATOLL__MSG_TYPE__MSG_AUTH, &a.base, ATOLL__MSG_TYPE__MSG_AUTH_RESULT, &m, err, errlen);
    if (st) return st;
    Atoll__AuthResult *r = (Atoll__AuthResult *)m;
    uint8_t want[AUTH_MAC_LEN];
    auth_server_mac(token, nonce, cnonce, want);
    if (!r->ok) {
        snprintf(err, errlen, "%s", r->message);
        st = RPC_REFUSED;
    } else if (r->server_mac.len != AUTH_MAC_LEN || !auth_equal(want, r->server_mac.data, AUTH_MAC_LEN)) {
        snprintf(err, errlen, "the coordinator could not prove it holds the cluster token");
        st = RPC_REFUSED;
    } else {
        auth_session_init(&s->sess, token, nonce, cnonce, 1);
        s->sealed = 1; /* every later frame both ways carries its tag */
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

static rpc_status open_as(rpc_sync *s, const char *hostport, const auth_token *token, int role,
                         const char *name, uint64_t job, uint32_t epoch, int timeout_ms, char *err, size_t errlen)
{
    s->fd = -1;
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    s->max_frame = FRAME_MAX_DEFAULT;
    s->sealed = 0;
    struct sockaddr_storage ss;
    if (rpc_resolve(hostport, &ss, err, errlen)) return RPC_UNREACHABLE;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return RPC_UNREACHABLE;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->fd = fd;
    if (connect(fd, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) < 0) {
        int ok = 0;
        if (errno == EINPROGRESS && !wait_fd(fd, POLLOUT, now_ms() + s->timeout_ms)) {
            int e = 0;
            socklen_t el = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (!e) ok = 1;
            else errno = e;
        } else if (errno == EINPROGRESS) {
            errno = ETIMEDOUT;
        }
        if (!ok) {
            snprintf(err, errlen, "cannot reach the coordinator at %s: %s", hostport, strerror(errno));
            rpc_sync_close(s);
            return RPC_UNREACHABLE;
        }
    }
    rpc_status st = handshake(s, token, role, name, job, epoch, err, errlen);
    if (st) rpc_sync_close(s);
    return st;
}

rpc_status rpc_sync_open(rpc_sync *s, const char *hostport, const auth_token *token, int role,
                         const char *name, int timeout_ms, char *err, size_t errlen)
{
    return open_as(s, hostport, token, role, name, 0, 0, timeout_ms, err, errlen);
}

rpc_status rpc_sync_open_rank(rpc_sync *s, const char *hostport, const auth_token *secret, uint64_t job,
                              uint32_t epoch, const char *name, int timeout_ms, char *err, size_t errlen)
{
    return open_as(s, hostport, secret, ATOLL__ROLE__ROLE_RANK, name, job, epoch, timeout_ms, err, errlen);
}

void rpc_sync_close(rpc_sync *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}
