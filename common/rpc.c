#include "rpc.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

int rpc_resolve(const char *hostport, struct sockaddr_storage *out, char *err, size_t errlen)
{
    const char *colon = hostport ? strrchr(hostport, ':') : NULL;
    if (!colon || colon == hostport || !colon[1]) {
        snprintf(err, errlen, "address '%s' is not HOST:PORT (e.g. 127.0.0.1:7420)", hostport ? hostport : "");
        return -1;
    }
    char host[256];
    size_t hl = (size_t)(colon - hostport);
    if (hl >= sizeof host) hl = sizeof host - 1;
    memcpy(host, hostport, hl);
    host[hl] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535) {
        snprintf(err, errlen, "address '%s': port must be 0..65535", hostport);
        return -1;
    }
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res) {
        snprintf(err, errlen, "address '%s': cannot resolve host '%s': %s", hostport, host, gai_strerror(rc));
        return -1;
    }
    memset(out, 0, sizeof *out);
    memcpy(out, res->ai_addr, res->ai_addrlen);
    ((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

/* ---- connection lifecycle ---- */

static void unauthed_done(rpc_conn *c);
static void ready_remove(rpc_conn *c);

static void on_closed(uv_handle_t *h)
{
    rpc_conn *c = h->data;
    if (c->server) { /* unlink from the server's lists */
        if (c->prev) c->prev->next = c->next;
        else c->server->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        ready_remove(c);
        unauthed_done(c);
    }
    if (c->h.on_close) c->h.on_close(c);
    frame_decoder_free(&c->dec);
    free(c);
}

static void close_now(rpc_conn *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    close_now(req->data);
}

void rpc_close(rpc_conn *c, const char *reason)
{
    if (c->closing) return;
    c->closing = 1;
    if (reason && !c->err[0]) snprintf(c->err, sizeof c->err, "%.*s", (int)sizeof c->err - 1, reason);
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->shutdown_req.data = c;
    if (!c->connected || uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown))
        close_now(c);
}

static rpc_conn *conn_new(uv_loop_t *loop, const auth_token *token, uint32_t max_frame,
                          const rpc_handlers *h, void *data)
{
    rpc_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    c->token = token;
    c->h = *h;
    c->data = data;
    c->max_frame = max_frame ? max_frame : FRAME_MAX_DEFAULT;
    /* Until the handshake is done only its small frames are accepted. */
    frame_decoder_init(&c->dec, RPC_PREAUTH_MAX);
    return c;
}

static void peer_name(rpc_conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET) {
        char ip[48];
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        uv_ip4_name(in, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "%s:%d", ip, ntohs(in->sin_port));
        c->peer_ip = ntohl(in->sin_addr.s_addr);
    } else {
        snprintf(c->peer, sizeof c->peer, "?");
    }
}

/* ---- writing ---- */

typedef struct {
    uv_write_t req;
    uint8_t *buf;
} write_req;

static void settle(rpc_conn *c);

static void on_written(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    rpc_conn *c = req->handle->data;
    free(w->buf);
    free(w);
    (void)status; /* a failed write shows up as a read error / EOF as well */
    /* Its replies drained: serve the peer's waiting requests again. */
    if (c->write_wait && !c->closing &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <= RPC_WRITE_PAUSE / 2) {
        c->write_wait = 0;
        settle(c);
    }
}

static int send_raw(rpc_conn *c, uint8_t *buf, size_t len)
{
    if (c->closing || !c->connected) {
        free(buf);
        return -1;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > RPC_MAX_QUEUED) {
        free(buf);
        log_warn("dropping %s: it is not reading its replies", c->peer);
        rpc_close(c, "peer not reading");
        return -1;
    }
    /* Most frames are small: write them straight away and queue only a remainder. */
    size_t off = 0;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0) {
        uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n > 0) off = (size_t)n;
    }
    if (off == len) {
        free(buf);
        return 0;
    }
    write_req *w = malloc(sizeof *w);
    if (!w) {
        free(buf);
        return -1;
    }
    w->buf = buf;
    uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)(len - off));
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
        free(buf);
        free(w);
        rpc_close(c, "write failed");
        return -1;
    }
    return 0;
}

int rpc_send(rpc_conn *c, uint16_t type, const ProtobufCMessage *m)
{
    size_t len;
    uint8_t *buf = msg_frame(type, m, c->sealed_out ? AUTH_TAG_LEN : 0, &len);
    if (!buf) return -1;
    if (c->sealed_out) {
        auth_session_seal(&c->sess, buf, len, buf + len);
        len += AUTH_TAG_LEN;
    }
    return send_raw(c, buf, len);
}

int rpc_send_error(rpc_conn *c, int code, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    Atoll__Error e = ATOLL__ERROR__INIT;
    e.code = (Atoll__ErrorCode)code;
    e.message = text;
    return rpc_send(c, ATOLL__MSG_TYPE__MSG_ERROR, &e.base);
}

/* ---- handshake ---- */

static void refuse(rpc_conn *c, const char *why)
{
    if (c->server) c->server->refused++;
    log_warn("refused %s%s%s: %s", c->peer, c->name[0] ? " " : "", c->name, why);
    rpc_close(c, why);
}

/* ---- failed authentications per peer address ---- */

static rpc_throttle *throttle_of(rpc_server *s, uint32_t ip, int create)
{
    rpc_throttle *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < RPC_THROTTLE_SLOTS; i++) {
        rpc_throttle *t = &s->throttle[i];
        if (t->ip == ip && (t->at_ms || t->unauthed)) return t;
        if (!t->at_ms && !t->unauthed) { if (!free_slot) free_slot = t; }
        else if (!t->unauthed && (!oldest || t->at_ms < oldest->at_ms)) oldest = t;
    }
    if (!create) return NULL;
    rpc_throttle *t = free_slot ? free_slot : oldest; /* forget the address heard from longest ago */
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->ip = ip;
    t->tokens = RPC_AUTH_FAIL_BURST;
    t->at_ms = uv_now(s->loop);
    return t;
}

static void throttle_refill(rpc_server *s, rpc_throttle *t)
{
    uint64_t now = uv_now(s->loop);
    t->tokens += (double)(now - t->at_ms) / RPC_AUTH_FAIL_REFILL_MS;
    if (t->tokens > RPC_AUTH_FAIL_BURST) t->tokens = RPC_AUTH_FAIL_BURST;
    t->at_ms = now;
}

static void auth_failed(rpc_conn *c)
{
    rpc_throttle *t = c->server ? throttle_of(c->server, c->peer_ip, 1) : NULL;
    if (!t) return;
    throttle_refill(c->server, t);
    t->tokens -= 1;
}

static void unauthed_done(rpc_conn *c)
{
    if (!c->counted_unauthed) return;
    c->counted_unauthed = 0;
    c->server->unauthed--;
    rpc_throttle *t = throttle_of(c->server, c->peer_ip, 0);
    if (t && t->unauthed) t->unauthed--;
}

/* At accept: NULL to go on, or why this peer is not heard now. */
static const char *admit(rpc_conn *c, char *why, size_t n)
{
    rpc_server *s = c->server;
    rpc_throttle *t = throttle_of(s, c->peer_ip, 1);
    if (t) {
        throttle_refill(s, t);
        if (t->tokens < 1) {
            t->refused++;
            snprintf(why, n, "too many failed authentications from this address; retry in %.1f s",
                     (1 - t->tokens) * RPC_AUTH_FAIL_REFILL_MS / 1000.0);
            return why;
        }
        if (t->unauthed >= RPC_MAX_UNAUTHED_PER_PEER) {
            snprintf(why, n, "%u connections from this address are already authenticating; at most %d",
                     t->unauthed, RPC_MAX_UNAUTHED_PER_PEER);
            return why;
        }
    }
    if (s->unauthed >= RPC_MAX_UNAUTHED) {
        snprintf(why, n, "%u connections are already authenticating; at most %d", s->unauthed, RPC_MAX_UNAUTHED);
        return why;
    }
    s->unauthed++;
    if (t) t->unauthed++;
    c->counted_unauthed = 1;
    return NULL;
}

static void server_auth(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    if (type != ATOLL__MSG_TYPE__MSG_AUTH) {
        rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                       "not authenticated: answer the Challenge with Auth (type 2) carrying "
                       "HMAC-SHA256 of the cluster token before sending %s (type %u)",
                       msg_type_name(type), type);
        refuse(c, "request before authentication");
        return;
    }
    Atoll__Auth *a = atoll__auth__unpack(NULL, len, p);
    if (!a) {
        rpc_send_error(c, ATOLL__ERROR_CODE__ERR_BAD_MESSAGE, "Auth message does not decode as atoll.Auth");
        refuse(c, "undecodable Auth");
        return;
    }
    snprintf(c->name, sizeof c->name, "%s", a->name ? a->name : "");
    c->role = a->role;
    /* A rank proves its job's secret, derived from the token, never the token itself. */
    auth_token job_secret;
    const auth_token *key = c->token;
    if (c->role == ATOLL__ROLE__ROLE_RANK) {
        c->job = a->job;
        c->epoch = a->epoch;
        auth_job_secret(c->token, c->job, c->epoch, &job_secret);
        key = &job_secret;
    }
    uint8_t want[AUTH_MAC_LEN];
    int ok = a->client_nonce.len == AUTH_NONCE_LEN && a->mac.len == AUTH_MAC_LEN;
    if (ok) {
        memcpy(c->client_nonce, a->client_nonce.data, AUTH_NONCE_LEN);
        auth_client_mac(key, c->nonce, c->client_nonce, want);
        ok = auth_equal(want, a->mac.data, AUTH_MAC_LEN);
    }
    atoll__auth__free_unpacked(a, NULL);
    Atoll__AuthResult r = ATOLL__AUTH_RESULT__INIT;
    if (!ok) {
        auth_failed(c);
        r.message = key == c->token
                        ? "authentication failed: wrong cluster token (use the coordinator's token file, "
                          "STATE_DIR/token, via --token-file or ATOLL_TOKEN_FILE)"
                        : "authentication failed: wrong job secret for this job and epoch (a rank gets it "
                          "from its workerd or launcher through ATOLL_JOB_SECRET_FD)";
        rpc_send(c, ATOLL__MSG_TYPE__MSG_AUTH_RESULT, &r.base);
        refuse(c, key == c->token ? "wrong cluster token" : "wrong job secret");
        return;
    }
    uint8_t smac[AUTH_MAC_LEN];
    auth_server_mac(key, c->nonce, c->client_nonce, smac);
    r.ok = 1;
    r.message = "welcome";
    r.server_mac.data = smac;
    r.server_mac.len = sizeof smac;
    rpc_send(c, ATOLL__MSG_TYPE__MSG_AUTH_RESULT, &r.base);
    /* From here on every frame both ways carries its tag, keyed by what it proved. */
    auth_session_init(&c->sess, key, c->nonce, c->client_nonce, 0);
    c->sealed_in = c->sealed_out = 1;
    c->dec.trailer = AUTH_TAG_LEN;
    c->dec.max = c->max_frame;
    c->authed = 1;
    unauthed_done(c);
    if (c->h.on_ready) c->h.on_ready(c);
}

static void client_auth(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    if (type == ATOLL__MSG_TYPE__MSG_CHALLENGE) {
        Atoll__Challenge *ch = atoll__challenge__unpack(NULL, len, p);
        if (!ch || ch->nonce.len != AUTH_NONCE_LEN) {
            if (ch) atoll__challenge__free_unpacked(ch, NULL);
            rpc_close(c, "server sent a malformed Challenge");
            return;
        }
        memcpy(c->nonce, ch->nonce.data, AUTH_NONCE_LEN);
        atoll__challenge__free_unpacked(ch, NULL);
        uint8_t mac[AUTH_MAC_LEN];
        auth_random(c->client_nonce, AUTH_NONCE_LEN);
        auth_client_mac(c->token, c->nonce, c->client_nonce, mac);
        Atoll__Auth a = ATOLL__AUTH__INIT;
        a.client_nonce.data = c->client_nonce;
        a.client_nonce.len = AUTH_NONCE_LEN;
        a.mac.data = mac;
        a.mac.len = AUTH_MAC_LEN;
        a.role = (Atoll__Role)c->role;
        a.name = c->name;
        rpc_send(c, ATOLL__MSG_TYPE__MSG_AUTH, &a.base);
        auth_session_init(&c->sess, c->token, c->nonce, c->client_nonce, 1);
        c->sealed_out = 1; /* every frame after Auth carries its tag */
        return;
    }
    if (type == ATOLL__MSG_TYPE__MSG_AUTH_RESULT) {
        Atoll__AuthResult *r = atoll__auth_result__unpack(NULL, len, p);
        if (!r) {
            rpc_close(c, "server sent a malformed AuthResult");
            return;
        }
        uint8_t want[AUTH_MAC_LEN];
        auth_server_mac(c->token, c->nonce, c->client_nonce, want);
        int ok = r->ok && r->server_mac.len == AUTH_MAC_LEN && auth_equal(want, r->server_mac.data, AUTH_MAC_LEN);
        char why[256];
        snprintf(why, sizeof why, "%s", !r->ok ? r->message : "the server does not hold our cluster token");
        atoll__auth_result__free_unpacked(r, NULL);
        if (!ok) {
            rpc_close(c, why);
            return;
        }
        c->sealed_in = 1;
        c->dec.trailer = AUTH_TAG_LEN;
        c->dec.max = c->max_frame;
        c->authed = 1;
        if (c->h.on_ready) c->h.on_ready(c);
        return;
    }
    if (type == ATOLL__MSG_TYPE__MSG_ERROR) {
        Atoll__Error *e = atoll__error__unpack(NULL, len, p);
        char why[300];
        snprintf(why, sizeof why, "server refused: %s", e ? e->message : "(undecodable error)");
        if (e) atoll__error__free_unpacked(e, NULL);
        rpc_close(c, why);
        return;
    }
    rpc_close(c, "server spoke before the handshake finished");
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    rpc_conn *c = h->data;
    /* One loop, one thread: the read callback consumes the bytes before the next
     * alloc. Before authentication reads are small, so an unauthenticated peer
     * can make the process hold little memory. */
    static char shared[64 * 1024];
    *buf = uv_buf_init(shared, c->authed ? sizeof shared : 2 * (FRAME_HEADER_LEN + RPC_PREAUTH_MAX));
}

/* Handles up to `budget` whole frames (all when budget < 0). */
static void pump(rpc_conn *c, int budget)
{
    while (budget-- != 0 && !c->closing && !c->write_wait) {
        frame_header h;
        const uint8_t *payload;
        int r = frame_decoder_next(&c->dec, &h, &payload);
        if (r == 0) return;
        if (r < 0) {
            if (!c->is_client) rpc_send_error(c, ATOLL__ERROR_CODE__ERR_BAD_FRAME, "%s", c->dec.err);
            if (c->server) c->server->refused++;
            log_warn("closing %s: %s", c->peer, c->dec.err);
            rpc_close(c, c->dec.err);
            return;
        }
        if (c->sealed_in &&
            auth_session_open(&c->sess, payload - FRAME_HEADER_LEN, FRAME_HEADER_LEN + h.len, payload + h.len)) {
            /* Altered, injected, dropped, replayed or reordered: nothing after it can be trusted. */
            char why[160];
            snprintf(why, sizeof why, "frame %llu (%s) fails its integrity check: altered, injected, dropped, "
                     "replayed or reordered on the way", (unsigned long long)c->sess.recv_seq,
                     msg_type_name(h.type));
            if (!c->is_client) rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED, "%s", why);
            refuse(c, why);
            return;
        }
        if (!c->authed) {
            if (c->is_client) client_auth(c, h.type, payload, h.len);
            else server_auth(c, h.type, payload, h.len);
        } else if (c->h.on_frame) {
            c->h.on_frame(c, h.type, payload, h.len);
        }
        /* A reply that is not being read: stop serving this peer until it drains. */
        if (c->server && !c->closing &&
            uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > RPC_WRITE_PAUSE)
            c->write_wait = 1;
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void on_pump(uv_idle_t *h);

static void ready_push(rpc_conn *c)
{
    rpc_server *s = c->server;
    if (turnq_push(&s->ready, &c->turn) && !uv_is_active((uv_handle_t *)&s->pump)) uv_idle_start(&s->pump, on_pump);
}

static void ready_remove(rpc_conn *c) { turnq_remove(&c->server->ready, &c->turn); }

/* After a connection's turn: read on when its buffer holds no whole frame; else
 * stop reading (TCP pushes back) and queue it for a later turn. While its replies
 * are not being read it waits for on_written. */
static void settle(rpc_conn *c)
{
    if (c->closing) return;
    int more = frame_decoder_pending(&c->dec);
    if (c->write_wait || more) {
        if (c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
        if (!c->write_wait) ready_push(c);
        return;
    }
    if (!c->reading && !uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) c->reading = 1;
}

/* Once per loop turn while connections wait: each gets its turn, in order. */
static void on_pump(uv_idle_t *h)
{
    rpc_server *s = h->data;
    turnq_link *last = s->ready.tail, *l; /* connections queued during this turn wait for the next */
    while ((l = turnq_pop(&s->ready))) {
        rpc_conn *c = TURNQ_ENTRY(l, rpc_conn, turn);
        pump(c, RPC_FRAMES_PER_TURN);
        settle(c);
        if (l == last) break;
    }
    if (!s->ready.head) uv_idle_stop(&s->pump);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    rpc_conn *c = s->data;
    if (n < 0) {
        rpc_close(c, n == UV_EOF ? "peer closed the connection" : uv_strerror((int)n));
        return;
    }
    if (n == 0 || c->closing) return;
    if (frame_decoder_feed(&c->dec, buf->base, (size_t)n)) {
        rpc_close(c, c->dec.err);
        return;
    }
    /* Outgoing connections talk to our own coordinator: all frames at once. */
    if (!c->server) {
        pump(c, -1);
        return;
    }
    pump(c, RPC_FRAMES_PER_TURN);
    settle(c);
}

/* ---- server ---- */

static void on_connection(uv_stream_t *ls, int status)
{
    rpc_server *s = ls->data;
    if (status < 0) {
        log_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    rpc_conn *c = conn_new(s->loop, s->token, s->max_frame, &s->h, NULL); /* data is the owner's, set on ready */
    if (!c) return;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp)) {
        close_now(c);
        return;
    }
    c->server = s;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    c->accepted_ms = uv_now(s->loop);
    c->connected = 1;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, 30); /* let the kernel find peers that vanished without a FIN */
    peer_name(c);
    char why[160];
    if (admit(c, why, sizeof why)) {
        rpc_throttle *t = throttle_of(s, c->peer_ip, 0);
        rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED, "%s", why);
        s->refused++;
        /* One line per burst, not per connection of a flood. */
        if (!t || t->refused == 1 || t->refused % 1000 == 0)
            log_warn("refused %s: %s (%llu refused from it so far)", c->peer, why,
                     (unsigned long long)(t ? t->refused : 1));
        rpc_close(c, why);
        return;
    }
    auth_random(c->nonce, AUTH_NONCE_LEN);
    Atoll__Challenge ch = ATOLL__CHALLENGE__INIT;
    ch.nonce.data = c->nonce;
    ch.nonce.len = AUTH_NONCE_LEN;
    ch.protocol = RPC_PROTOCOL;
    ch.server = "coordinatord";
    rpc_send(c, ATOLL__MSG_TYPE__MSG_CHALLENGE, &ch.base);
    if (!uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) c->reading = 1;
}

/* Peers that connect and never authenticate would hold a connection forever. */
static void on_sweep(uv_timer_t *t)
{
    rpc_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    for (rpc_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->authed || c->closing || now - c->accepted_ms < s->auth_timeout_ms) continue;
        rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                       "not authenticated within %u ms of the Challenge; closing", s->auth_timeout_ms);
        refuse(c, "no authentication in time");
    }
}

int rpc_server_listen(rpc_server *s, uv_loop_t *loop, const char *hostport, const auth_token *token,
                      uint32_t max_frame, const rpc_handlers *h, void *data, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->token = token;
    s->max_frame = max_frame ? max_frame : FRAME_MAX_DEFAULT;
    s->h = *h;
    s->data = data;
    struct sockaddr_storage ss;
    if (rpc_resolve(hostport, &ss, err, errlen)) return -1;
    uv_tcp_init(loop, &s->tcp);
    s->tcp.data = s;
    int rc = uv_tcp_bind(&s->tcp, (struct sockaddr *)&ss, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&s->tcp, 4096, on_connection);
    if (rc) {
        snprintf(err, errlen, "cannot listen on %s: %s", hostport, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->tcp, NULL);
        return -1;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&bound, &blen);
    s->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    s->auth_timeout_ms = 10000;
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    uv_timer_start(&s->sweep, on_sweep, 250, 250);
    uv_idle_init(loop, &s->pump);
    s->pump.data = s;
    return 0;
}

void rpc_server_close(rpc_server *s)
{
    if (!uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, NULL);
    if (!uv_is_closing((uv_handle_t *)&s->sweep)) uv_close((uv_handle_t *)&s->sweep, NULL);
    if (!uv_is_closing((uv_handle_t *)&s->pump)) uv_close((uv_handle_t *)&s->pump, NULL);
    for (rpc_conn *c = s->conns; c; c = c->next) rpc_close(c, "server closing");
}

/* ---- client ---- */

static void on_connected(uv_connect_t *req, int status)
{
    rpc_conn *c = req->data;
    if (status < 0) {
        snprintf(c->err, sizeof c->err, "connect failed: %s", uv_strerror(status));
        c->closing = 1;
        close_now(c);
        return;
    }
    c->connected = 1;
    uv_tcp_nodelay(&c->tcp, 1);
    peer_name(c);
    if (!uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) c->reading = 1;
}

rpc_conn *rpc_connect(uv_loop_t *loop, const struct sockaddr *addr, const auth_token *token,
                      int role, const char *name, uint32_t max_frame, const rpc_handlers *h, void *data)
{
    rpc_conn *c = conn_new(loop, token, max_frame, h, data);
    if (!c) return NULL;
    c->is_client = 1;
    c->role = role;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, on_connected);
    if (rc) {
        snprintf(c->err, sizeof c->err, "connect failed: %s", uv_strerror(rc));
        c->closing = 1;
        close_now(c);
    }
    return c;
}
