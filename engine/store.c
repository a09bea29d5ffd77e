#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "atoll.pb-c.h"
#include "msg.h"
#include "rpc.h"

int store_scope_from_env(uint64_t *job, uint32_t *epoch, char *err, size_t errlen)
{
    const char *j = getenv("ATOLL_JOB_ID"), *e = getenv("ATOLL_JOB_EPOCH");
    char *end;
    if (!j || !*j || (*job = strtoull(j, &end, 10), *end)) {
        snprintf(err, errlen, "store: ATOLL_JOB_ID must be the job's id (got '%s'); start ranks with "
                 "atoll-train --nproc-per-node or through workerd", j ? j : "(unset)");
        return -1;
    }
    if (!e || !*e || (*epoch = (uint32_t)strtoul(e, &end, 10), *end)) {
        snprintf(err, errlen, "store: ATOLL_JOB_EPOCH must be the restart epoch (got '%s')", e ? e : "(unset)");
        return -1;
    }
    return 0;
}

int store_auth_from_env(store_auth *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (store_scope_from_env(&a->job, &a->epoch, err, errlen)) return -1;
    const char *fd = getenv("ATOLL_JOB_SECRET_FD");
    char *end;
    long f = fd && *fd ? strtol(fd, &end, 10) : -1;
    if (f < 0 || *end) {
        snprintf(err, errlen, "store: ATOLL_JOB_SECRET_FD must name the descriptor holding the job secret "
                 "(got '%s')", fd ? fd : "(unset)");
        return -1;
    }
    char buf[AUTH_TOKEN_MAX + 1];
    ssize_t n = pread((int)f, buf, sizeof buf - 1, 0);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) n--;
    if (n < 16) {
        snprintf(err, errlen, "store: cannot read the job secret from descriptor %ld: %s", f,
                 n < 0 ? strerror(errno) : "too short");
        return -1;
    }
    memcpy(a->secret.bytes, buf, (size_t)n);
    a->secret.len = (size_t)n;
    return 0;
}

/* ======================= server ======================= */

struct store_server {
    uv_loop_t *loop;
    rpc_server rpc;
    auth_token token;        /* random: nobody but this server and its launcher knows it */
    kv_store *kv;
    uv_timer_t expiry;
    int port, closing;
    /* thread mode */
    uv_loop_t own_loop;
    uv_async_t stop_async;
    pthread_t thread;
    int threaded;
};

static void kv_answer(void *ctx, void *who, int found, const uint8_t *v, size_t len)
{
    (void)ctx;
    Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
    r.found = found;
    r.value.data = (uint8_t *)v;
    r.value.len = len;
    rpc_send(who, ATOLL__MSG_TYPE__MSG_KV_REPLY, &r.base);
}

static void srv_ready(rpc_conn *c)
{
    if (c->role != ATOLL__ROLE__ROLE_RANK) {
        rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                       "this is a launcher's rendezvous store: only its ranks (ROLE_RANK) may connect");
        rpc_close(c, "not a rank");
    }
}

static void srv_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    store_server *s = c->server->data;
    char err[300];
    if (type == ATOLL__MSG_TYPE__MSG_KV_SET) {
        Atoll__KvSet *m = atoll__kv_set__unpack(NULL, len, p);
        if (!m) goto bad;
        if (kv_set(s->kv, c->job, c->epoch, m->key, m->value.data, m->value.len, err, sizeof err))
            rpc_send_error(c, ATOLL__ERROR_CODE__ERR_INVALID, "%s", err);
        else
            kv_answer(s, c, 1, NULL, 0);
        atoll__kv_set__free_unpacked(m, NULL);
        return;
    }
    if (type == ATOLL__MSG_TYPE__MSG_KV_GET) {
        Atoll__KvGet *m = atoll__kv_get__unpack(NULL, len, p);
        if (!m) goto bad;
        const uint8_t *v;
        size_t vl;
        const char *why = kv_check_key(m->key);
        if (*why) rpc_send_error(c, ATOLL__ERROR_CODE__ERR_INVALID, "%s", why);
        else if (kv_get(s->kv, c->job, c->epoch, m->key, &v, &vl)) kv_answer(s, c, 1, v, vl);
        else if (!m->wait_ms) kv_answer(s, c, 0, NULL, 0);
        else {
            uint32_t w = m->wait_ms > KV_MAX_WAIT_MS ? KV_MAX_WAIT_MS : m->wait_ms;
            if (kv_wait(s->kv, c->job, c->epoch, m->key, c, (int64_t)uv_now(s->loop) + w))
                rpc_send_error(c, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
        }
        atoll__kv_get__free_unpacked(m, NULL);
        return;
    }
    if (type == ATOLL__MSG_TYPE__MSG_KV_ADD) {
        Atoll__KvAdd *m = atoll__kv_add__unpack(NULL, len, p);
        if (!m) goto bad;
        int64_t out;
        if (kv_add(s->kv, c->job, c->epoch, m->key, m->delta, &out, err, sizeof err)) {
            rpc_send_error(c, ATOLL__ERROR_CODE__ERR_INVALID, "%s", err);
        } else {
            Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
            r.found = 1;
            r.number = out;
            rpc_send(c, ATOLL__MSG_TYPE__MSG_KV_REPLY, &r.base);
        }
        atoll__kv_add__free_unpacked(m, NULL);
        return;
    }
    rpc_send_error(c, ATOLL__ERROR_CODE__ERR_UNKNOWN_TYPE, "a rendezvous store serves KvSet, KvGet and KvAdd, "
                   "not %s (type %u)", msg_type_name(type), type);
    return;
bad:
    rpc_send_error(c, ATOLL__ERROR_CODE__ERR_BAD_MESSAGE, "the payload of a %s frame does not decode",
                   msg_type_name(type));
}

static void srv_close(rpc_conn *c)
{
    store_server *s = c->server->data;
    kv_forget(s->kv, c);
}

static void on_expiry(uv_timer_t *t)
{
    store_server *s = t->data;
    kv_expire(s->kv, (int64_t)uv_now(s->loop));
}

static int server_listen(store_server *s, uv_loop_t *loop, const char *host, int port, char *err, size_t errlen)
{
    s->loop = loop;
    uint8_t raw[32];
    static const char hex[] = "0123456789abcdef";
    if (auth_random(raw, sizeof raw)) {
        snprintf(err, errlen, "store: cannot read random bytes for the job secret");
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        s->token.bytes[2 * i] = (uint8_t)hex[raw[i] >> 4];
        s->token.bytes[2 * i + 1] = (uint8_t)hex[raw[i] & 15];
    }
    s->token.len = 64;
    if (!(s->kv = kv_new(kv_answer, s))) {
        snprintf(err, errlen, "store: out of memory");
        return -1;
    }
    char hp[300], why[256];
    snprintf(hp, sizeof hp, "%s:%d", host, port);
    rpc_handlers h = { srv_ready, srv_frame, srv_close };
    if (rpc_server_listen(&s->rpc, loop, hp, &s->token, 0, &h, s, why, sizeof why)) {
        snprintf(err, errlen, "store: %s", why);
        kv_free(s->kv);
        s->kv = NULL;
        return -1;
    }
    s->port = s->rpc.port;
    uv_timer_init(loop, &s->expiry);
    s->expiry.data = s;
    uv_timer_start(&s->expiry, on_expiry, 50, 50);
    return 0;
}

int store_server_start(uv_loop_t *loop, const char *host, int port, store_server **out, char *err, size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    if (!s || server_listen(s, loop, host, port, err, errlen) != 0) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int store_server_port(const store_server *s) { return s->port; }

void store_server_auth(const store_server *s, store_auth *out)
{
    memset(out, 0, sizeof *out);
    auth_job_secret(&s->token, 0, 0, &out->secret);
}

void store_server_close(store_server *s)
{
    if (!s || s->closing) return;
    s->closing = 1;
    rpc_server_close(&s->rpc);
    uv_close((uv_handle_t *)&s->expiry, NULL);
}

void store_server_free(store_server *s)
{
    if (!s) return;
    kv_free(s->kv);
    free(s);
}

static void on_stop_async(uv_async_t *a)
{
    store_server_close(a->data);
    uv_close((uv_handle_t *)a, NULL);
}

static void *server_thread(void *arg)
{
    store_server *s = arg;
    uv_run(&s->own_loop, UV_RUN_DEFAULT);
    return NULL;
}

int store_server_start_thread(const char *host, int port, store_server **out, char *err, size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->threaded = 1;
    uv_loop_init(&s->own_loop);
    if (server_listen(s, &s->own_loop, host, port, err, errlen) != 0) {
        uv_run(&s->own_loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->own_loop);
        free(s);
        return -1;
    }
    uv_async_init(&s->own_loop, &s->stop_async, on_stop_async);
    s->stop_async.data = s;
    if (pthread_create(&s->thread, NULL, server_thread, s) != 0) {
        snprintf(err, errlen, "store: cannot start the server thread");
        return -1;
    }
    *out = s;
    return 0;
}

void store_server_stop_thread(store_server *s)
{
    uv_async_send(&s->stop_async);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->own_loop);
    store_server_free(s);
}

/* ======================= client ======================= */

struct store_client {
    rpc_sync rpc;
    store_auth auth;
    char where[300]; /* host:port, for messages */
    char err[600];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(store_client *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(store_client *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return status;
}

int store_connect(const char *host, int port, const store_auth *auth, int timeout_ms, store_client **out,
                  char *err, size_t errlen)
{
    store_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "store: out of memory");
        return STORE_ERROR;
    }
    c->auth = *auth;
    snprintf(c->where, sizeof c->where, "%s:%d", host, port);
    double deadline = now_ms() + timeout_ms;
    char why[400] = "";
    char name[32];
    const char *rank = getenv("RANK");
    snprintf(name, sizeof name, "rank %s", rank ? rank : "?");
    for (;;) {
        double left = deadline - now_ms();
        rpc_status st = rpc_sync_open_rank(&c->rpc, c->where, &auth->secret, auth->job, auth->epoch, name,
                                           left > 1000 ? 1000 : left > 1 ? (int)left : 1, why, sizeof why);
        if (st == RPC_OK) break;
        if (st != RPC_UNREACHABLE || now_ms() >= deadline) {
            snprintf(err, errlen, "store: %s %s within %d ms: %s", st == RPC_UNREACHABLE ? "cannot connect to"
                     : "refused by", c->where, timeout_ms, why);
            free(c);
            return st == RPC_UNREACHABLE ? STORE_TIMEOUT : STORE_ERROR;
        }
        usleep(20000); /* the server may not be listening yet */
    }
    *out = c;
    return STORE_OK;
}

int store_connect_env(int timeout_ms, store_client **out, char *err, size_t errlen)
{
    const char *host = getenv("MASTER_ADDR");
    const char *port = getenv("MASTER_PORT");
    if (!host || !*host) host = "127.0.0.1";
    char *end = NULL;
    long p = port ? strtol(port, &end, 10) : 0;
    if (!port || !*port || *end || p <= 0 || p > 65535) {
        snprintf(err, errlen, "store: MASTER_PORT must be a TCP port 1..65535 (got '%s')",
                 port ? port : "(unset)");
        return STORE_ERROR;
    }
    store_auth a;
    if (store_auth_from_env(&a, err, errlen)) return STORE_ERROR;
    return store_connect(host, (int)p, &a, timeout_ms, out, err, errlen);
}

/* One request, one KvReply. wait_ms > 0 lets the reply take that long. */
static int call(store_client *c, uint16_t type, const ProtobufCMessage *m, const char *key, int wait_ms,
                Atoll__KvReply **reply)
{
    if (c->rpc.fd < 0) return fail(c, STORE_ERROR, "store: connection to %s is closed", c->where);
    const char *why = kv_check_key(key);
    if (*why) return fail(c, STORE_ERROR, "store: %s", why);
    int saved = c->rpc.timeout_ms;
    c->rpc.timeout_ms = wait_ms > 0 ? wait_ms + 5000 : 60000;
    char err[512];
    rpc_status st = rpc_sync_call(&c->rpc, type, m, ATOLL__MSG_TYPE__MSG_KV_REPLY, (ProtobufCMessage **)reply,
                                  err, sizeof err);
    c->rpc.timeout_ms = saved;
    if (st == RPC_OK) return STORE_OK;
    if (st != RPC_REFUSED) rpc_sync_close(&c->rpc); /* the stream is out of step now */
    return fail(c, STORE_ERROR, "store %s, key '%s': %s", c->where, key, err);
}

int store_set(store_client *c, const char *key, const void *val, size_t len)
{
    if (len > STORE_MAX_VALUE)
        return fail(c, STORE_ERROR, "store: value for '%s' is %zu bytes (limit %u)", key, len, STORE_MAX_VALUE);
    Atoll__KvSet m = ATOLL__KV_SET__INIT;
    m.job = c->auth.job;
    m.epoch = c->auth.epoch;
    m.key = (char *)key;
    m.value.data = (uint8_t *)val;
    m.value.len = len;
    Atoll__KvReply *r;
    int rc = call(c, ATOLL__MSG_TYPE__MSG_KV_SET, &m.base, key, 0, &r);
    if (rc == STORE_OK) atoll__kv_reply__free_unpacked(r, NULL);
    return rc;
}

static int get(store_client *c, const char *key, int wait_ms, void **val, size_t *len)
{
    Atoll__KvGet m = ATOLL__KV_GET__INIT;
    m.job = c->auth.job;
    m.epoch = c->auth.epoch;
    m.key = (char *)key;
    m.wait_ms = wait_ms > 0 ? (uint32_t)wait_ms : 0;
    Atoll__KvReply *r;
    int rc = call(c, ATOLL__MSG_TYPE__MSG_KV_GET, &m.base, key, wait_ms, &r);
    if (rc != STORE_OK) return rc;
    if (!r->found) {
        atoll__kv_reply__free_unpacked(r, NULL);
        if (wait_ms > 0)
            return fail(c, STORE_TIMEOUT, "store: timed out after %d ms waiting for key '%s' at %s (did every "
                        "rank start?)", wait_ms, key, c->where);
        return fail(c, STORE_NOT_FOUND, "store: no key '%s' at %s", key, c->where);
    }
    if (val) {
        char *v = malloc(r->value.len + 1);
        if (!v) {
            atoll__kv_reply__free_unpacked(r, NULL);
            return fail(c, STORE_ERROR, "store: out of memory");
        }
        if (r->value.len) memcpy(v, r->value.data, r->value.len);
        v[r->value.len] = 0;
        *val = v;
        if (len) *len = r->value.len;
    }
    atoll__kv_reply__free_unpacked(r, NULL);
    return STORE_OK;
}

int store_get(store_client *c, const char *key, void **val, size_t *len)
{
    return get(c, key, 0, val, len);
}

int store_wait(store_client *c, const char *key, int timeout_ms, void **val, size_t *len)
{
    return get(c, key, timeout_ms > 0 ? timeout_ms : 1, val, len);
}

int store_add(store_client *c, const char *key, int64_t delta, int64_t *result)
{
    Atoll__KvAdd m = ATOLL__KV_ADD__INIT;
    m.job = c->auth.job;
    m.epoch = c->auth.epoch;
    m.key = (char *)key;
    m.delta = delta;
    Atoll__KvReply *r;
    int rc = call(c, ATOLL__MSG_TYPE__MSG_KV_ADD, &m.base, key, 0, &r);
    if (rc != STORE_OK) return rc;
    if (result) *result = r->number;
    atoll__kv_reply__free_unpacked(r, NULL);
    return STORE_OK;
}

const char *store_error(const store_client *c) { return c->err; }
const store_auth *store_client_auth(const store_client *c) { return &c->auth; }

void store_close(store_client *c)
{
    if (!c) return;
    rpc_sync_close(&c->rpc);
    free(c);
}
