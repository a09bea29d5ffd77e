#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

enum { OP_SET = 1, OP_GET = 2, OP_WAIT = 3, OP_ADD = 4 };
enum { ST_OK = 0, ST_NOT_FOUND = 1, ST_TIMEOUT = 2, ST_BAD = 3 };

/* Largest frame either side accepts: op + key + value + lengths + arg. */
#define FRAME_MAX (1 + 4 + STORE_MAX_KEY + 4 + STORE_MAX_VALUE + 8)

static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int64_t get_i64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }

/* ======================= server ======================= */

typedef struct entry {
    char *key;
    unsigned char *val;
    size_t len;
    struct entry *next;
} entry;

typedef struct conn conn;

typedef struct waiter {
    uv_timer_t timer; /* first: the timer's close callback frees the waiter */
    conn *c;
    char *key;
    struct waiter *next;
} waiter;

struct conn {
    uv_tcp_t tcp; /* first: handle->data is not needed to get back to conn */
    store_server *srv;
    unsigned char *buf;
    size_t len, cap;
    int closing;
    conn *next;
};

struct store_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    entry *entries;
    waiter *waiters;
    conn *conns;
    int open_handles; /* listener + conns + timers still to be closed */
    int closing;
    /* thread mode */
    uv_loop_t own_loop;
    uv_async_t stop_async;
    pthread_t thread;
    int threaded;
};

static entry *find_entry(store_server *s, const char *key)
{
    for (entry *e = s->entries; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

static entry *put_entry(store_server *s, const char *key, const void *val, size_t len)
{
    entry *e = find_entry(s, key);
    if (!e) {
        e = calloc(1, sizeof *e);
        e->key = strdup(key);
        e->next = s->entries;
        s->entries = e;
    }
    free(e->val);
    e->val = malloc(len ? len : 1);
    memcpy(e->val, val, len);
    e->len = len;
    return e;
}

static void maybe_free_server(store_server *s)
{
    if (!s->closing || s->open_handles > 0) return;
    for (entry *e = s->entries, *n; e; e = n) {
        n = e->next;
        free(e->key);
        free(e->val);
        free(e);
    }
    s->entries = NULL;
    if (!s->threaded) free(s);
}

typedef struct {
    uv_write_t req;
    uv_buf_t buf;
} write_req;

static void on_written(uv_write_t *req, int status)
{
    (void)status; /* a client that went away is noticed by its read callback */
    write_req *w = (write_req *)req;
    free(w->buf.base);
    free(w);
}

static void reply(conn *c, int status, const void *val, size_t vlen, int64_t num)
{
    if (c->closing) return;
    size_t body = 1 + 4 + vlen + 8;
    unsigned char *p = malloc(4 + body);
    uint32_t b32 = (uint32_t)body, v32 = (uint32_t)vlen;
    memcpy(p, &b32, 4);
    p[4] = (unsigned char)status;
    memcpy(p + 5, &v32, 4);
    if (vlen) memcpy(p + 9, val, vlen);
    memcpy(p + 9 + vlen, &num, 8);
    write_req *w = malloc(sizeof *w);
    w->buf = uv_buf_init((char *)p, (unsigned)(4 + body));
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &w->buf, 1, on_written) != 0) {
        free(p);
        free(w);
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    store_server *s = h->data;
    s->open_handles--;
    maybe_free_server(s);
}

static void on_waiter_closed(uv_handle_t *h)
{
    waiter *w = (waiter *)h;
    store_server *s = w->c->srv;
    free(w->key);
    free(w);
    s->open_handles--;
    maybe_free_server(s);
}

static void on_conn_closed(uv_handle_t *h)
{
    conn *c = (conn *)h;
    store_server *s = c->srv;
    free(c->buf);
    free(c);
    s->open_handles--;
    maybe_free_server(s);
}

/* Removes waiters matching (conn, key); NULL matches anything. */
static void drop_waiters(store_server *s, conn *c, const char *key, int answer)
{
    waiter **pp = &s->waiters;
    while (*pp) {
        waiter *w = *pp;
        if ((!c || w->c == c) && (!key || strcmp(w->key, key) == 0)) {
            *pp = w->next;
            if (answer) {
                entry *e = find_entry(s, w->key);
                reply(w->c, ST_OK, e->val, e->len, 0);
            }
            uv_timer_stop(&w->timer);
            uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
        } else {
            pp = &w->next;
        }
    }
}

static void close_conn(conn *c)
{
    if (c->closing) return;
    store_server *s = c->srv;
    drop_waiters(s, c, NULL, 0);
    c->closing = 1;
    for (conn **pp = &s->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_wait_timeout(uv_timer_t *t)
{
    waiter *w = (waiter *)t;
    store_server *s = w->c->srv;
    for (waiter **pp = &s->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    reply(w->c, ST_TIMEOUT, NULL, 0, 0);
    uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

/* One complete request frame (without its length prefix). Returns -1 when the
 * frame is malformed, which closes the connection. */
static int handle_frame(conn *c, const unsigned char *p, size_t n)
{
    store_server *s = c->srv;
    if (n < 1 + 4) return -1;
    int op = p[0];
    uint32_t klen = get_u32(p + 1);
    if (klen == 0 || klen > STORE_MAX_KEY || n < 1 + 4 + (size_t)klen + 4 + 8) return -1;
    uint32_t vlen = get_u32(p + 5 + klen);
    if (vlen > STORE_MAX_VALUE || n != 1 + 4 + (size_t)klen + 4 + vlen + 8) return -1;
    char key[STORE_MAX_KEY + 1];
    memcpy(key, p + 5, klen);
    key[klen] = 0;
    if (memchr(key, 0, klen)) return -1;
    const unsigned char *val = p + 9 + klen;
    int64_t arg = get_i64(p + 9 + klen + vlen);

    entry *e;
    switch (op) {
    case OP_SET:
        put_entry(s, key, val, vlen);
        reply(c, ST_OK, NULL, 0, 0);
        drop_waiters(s, NULL, key, 1);
        return 0;
    case OP_GET:
        e = find_entry(s, key);
        if (e) reply(c, ST_OK, e->val, e->len, 0);
        else reply(c, ST_NOT_FOUND, NULL, 0, 0);
        return 0;
    case OP_WAIT: {
        e = find_entry(s, key);
        if (e) {
            reply(c, ST_OK, e->val, e->len, 0);
            return 0;
        }
        waiter *w = calloc(1, sizeof *w);
        w->c = c;
        w->key = strdup(key);
        uv_timer_init(s->loop, &w->timer);
        s->open_handles++;
        uv_timer_start(&w->timer, on_wait_timeout, arg > 0 ? (uint64_t)arg : 0, 0);
        w->next = s->waiters;
        s->waiters = w;
        return 0;
    }
    case OP_ADD: {
        e = find_entry(s, key);
        int64_t cur = 0;
        if (e) {
            char tmp[32];
            size_t l = e->len < sizeof tmp - 1 ? e->len : sizeof tmp - 1;
            memcpy(tmp, e->val, l);
            tmp[l] = 0;
            cur = strtoll(tmp, NULL, 10);
        }
        cur += arg;
        char num[32];
        int l = snprintf(num, sizeof num, "%lld", (long long)cur);
        put_entry(s, key, num, (size_t)l);
        reply(c, ST_OK, NULL, 0, cur);
        drop_waiters(s, NULL, key, 1);
        return 0;
    }
    default:
        return -1;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = (conn *)h;
    if (c->cap - c->len < suggested) {
        size_t ncap = c->cap ? c->cap : 4096;
        while (ncap - c->len < suggested) ncap *= 2;
        c->buf = realloc(c->buf, ncap);
        c->cap = ncap;
    }
    *buf = uv_buf_init((char *)c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = (conn *)stream;
    if (nread < 0) {
        close_conn(c);
        return;
    }
    c->len += (size_t)nread;
    size_t off = 0;
    while (c->len - off >= 4) {
        uint32_t flen = get_u32(c->buf + off);
        if (flen > FRAME_MAX) {
            fprintf(stderr, "store: closing a client that sent a %u-byte frame (limit %u)\n",
                    flen, (unsigned)FRAME_MAX);
            close_conn(c);
            return;
        }
        if (c->len - off - 4 < flen) break;
        if (handle_frame(c, c->buf + off + 4, flen) != 0) {
            fprintf(stderr, "store: closing a client that sent a malformed request\n");
            close_conn(c);
            return;
        }
        off += 4 + flen;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
}

static void on_connection(uv_stream_t *listener, int status)
{
    store_server *s = listener->data;
    if (status < 0 || s->closing) return;
    conn *c = calloc(1, sizeof *c);
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    s->open_handles++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->next = s->conns;
    s->conns = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static int server_listen(store_server *s, uv_loop_t *loop, const char *host, int port,
                         char *err, size_t errlen)
{
    struct sockaddr_in addr;
    s->loop = loop;
    int rc = uv_ip4_addr(host, port, &addr);
    if (rc == 0) rc = uv_tcp_init(loop, &s->listener);
    if (rc != 0) {
        snprintf(err, errlen, "store: bad listen address %s:%d: %s", host, port, uv_strerror(rc));
        return -1;
    }
    s->listener.data = s;
    s->open_handles = 1;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 512, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "store: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        return -1;
    }
    struct sockaddr_storage got;
    int glen = sizeof got;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &glen);
    s->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    return 0;
}

int store_server_start(uv_loop_t *loop, const char *host, int port, store_server **out,
                       char *err, size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    if (server_listen(s, loop, host, port, err, errlen) != 0) {
        if (s->open_handles) {
            s->closing = 1;
            uv_close((uv_handle_t *)&s->listener, on_handle_closed);
        } else {
            free(s);
        }
        return -1;
    }
    *out = s;
    return 0;
}

int store_server_port(const store_server *s) { return s->port; }

void store_server_close(store_server *s)
{
    if (s->closing) return;
    s->closing = 1;
    drop_waiters(s, NULL, NULL, 0);
    while (s->conns) close_conn(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_handle_closed);
}

static void on_stop_async(uv_async_t *a)
{
    store_server *s = a->data;
    store_server_close(s);
    uv_close((uv_handle_t *)a, NULL);
}

static void *server_thread(void *arg)
{
    store_server *s = arg;
    uv_run(&s->own_loop, UV_RUN_DEFAULT);
    return NULL;
}

int store_server_start_thread(const char *host, int port, store_server **out, char *err,
                              size_t errlen)
{
    store_server *s = calloc(1, sizeof *s);
    s->threaded = 1;
    uv_loop_init(&s->own_loop);
    if (server_listen(s, &s->own_loop, host, port, err, errlen) != 0) {
        if (s->open_handles) uv_close((uv_handle_t *)&s->listener, NULL);
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
    free(s);
}

/* ======================= client ======================= */

struct store_client {
    int fd;
    char where[300]; /* host:port, for messages */
    char err[512];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(store_client *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return status;
}

int store_connect(const char *host, int port, int timeout_ms, store_client **out, char *err,
                  size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "store: cannot resolve MASTER_ADDR '%s': %s", host, gai_strerror(gai));
        return STORE_ERROR;
    }
    double deadline = now_ms() + timeout_ms;
    int fd = -1, last_errno = 0;
    for (;;) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
        last_errno = errno;
        if (fd >= 0) close(fd);
        fd = -1;
        if (now_ms() >= deadline) break;
        usleep(20000); /* the server may not be listening yet */
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "store: cannot connect to %s:%d within %d ms: %s", host, port,
                 timeout_ms, strerror(last_errno));
        return STORE_TIMEOUT;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    store_client *c = calloc(1, sizeof *c);
    c->fd = fd;
    snprintf(c->where, sizeof c->where, "%s:%d", host, port);
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
    return store_connect(host, (int)p, timeout_ms, out, err, errlen);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads n bytes; poll_ms < 0 waits forever. Returns 0, -1 (error/EOF), -2 (timeout). */
static int read_all(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    while (n) {
        if (deadline > 0) {
            double left = deadline - now_ms();
            if (left <= 0) return -2;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int pr = poll(&pfd, 1, (int)left + 1);
            if (pr < 0 && errno == EINTR) continue;
            if (pr == 0) return -2;
        }
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Sends one request and reads its reply. timeout_ms < 0: no client-side deadline. */
static int roundtrip(store_client *c, int op, const char *key, const void *val, size_t vlen,
                     int64_t arg, int timeout_ms, void **rval, size_t *rlen, int64_t *num,
                     int *status)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > STORE_MAX_KEY)
        return fail(c, STORE_ERROR, "store: key length %zu outside 1..%d", klen, STORE_MAX_KEY);
    if (vlen > STORE_MAX_VALUE)
        return fail(c, STORE_ERROR, "store: value for '%s' is %zu bytes (limit %u)", key, vlen,
                    (unsigned)STORE_MAX_VALUE);
    if (c->fd < 0) return fail(c, STORE_ERROR, "store: connection to %s is closed", c->where);
    size_t body = 1 + 4 + klen + 4 + vlen + 8;
    unsigned char *p = malloc(4 + body);
    uint32_t b32 = (uint32_t)body, k32 = (uint32_t)klen, v32 = (uint32_t)vlen;
    memcpy(p, &b32, 4);
    p[4] = (unsigned char)op;
    memcpy(p + 5, &k32, 4);
    memcpy(p + 9, key, klen);
    memcpy(p + 9 + klen, &v32, 4);
    if (vlen) memcpy(p + 13 + klen, val, vlen);
    memcpy(p + 13 + klen + vlen, &arg, 8);
    int wr = write_all(c->fd, p, 4 + body);
    free(p);
    if (wr != 0)
        return fail(c, STORE_ERROR, "store: lost the connection to %s while sending '%s'",
                    c->where, key);

    /* The server answers a wait at its own deadline; allow it a little slack. */
    double deadline = timeout_ms >= 0 ? now_ms() + timeout_ms + 5000 : 0;
    unsigned char hdr[4 + 1 + 4];
    int rr = read_all(c->fd, hdr, sizeof hdr, deadline);
    uint32_t flen = get_u32(hdr), rv = get_u32(hdr + 5);
    if (rr == 0 && (flen != 1 + 4 + (size_t)rv + 8 || rv > STORE_MAX_VALUE)) rr = -3;
    unsigned char *v = NULL;
    if (rr == 0) {
        v = malloc((size_t)rv + 1);
        rr = read_all(c->fd, v, rv, deadline);
        if (rr == 0) {
            unsigned char tail[8];
            rr = read_all(c->fd, tail, 8, deadline);
            if (num) *num = get_i64(tail);
        }
    }
    if (rr != 0) {
        free(v);
        close(c->fd); /* the stream is out of step now; later calls report it closed */
        c->fd = -1;
        if (rr == -2)
            return fail(c, STORE_TIMEOUT, "store: no reply from %s for '%s'", c->where, key);
        return fail(c, STORE_ERROR, "store: lost the connection to %s waiting on '%s'",
                    c->where, key);
    }
    v[rv] = 0;
    *status = hdr[4];
    if (rval) {
        *rval = v;
        if (rlen) *rlen = rv;
    } else {
        free(v);
    }
    return STORE_OK;
}

int store_set(store_client *c, const char *key, const void *val, size_t len)
{
    int st = 0;
    int rc = roundtrip(c, OP_SET, key, val, len, 0, -1, NULL, NULL, NULL, &st);
    if (rc != STORE_OK) return rc;
    return st == ST_OK ? STORE_OK : fail(c, STORE_ERROR, "store: set '%s' refused", key);
}

int store_get(store_client *c, const char *key, void **val, size_t *len)
{
    int st = 0;
    void *v = NULL;
    int rc = roundtrip(c, OP_GET, key, NULL, 0, 0, -1, &v, len, NULL, &st);
    if (rc != STORE_OK) return rc;
    if (st == ST_NOT_FOUND) {
        free(v);
        return fail(c, STORE_NOT_FOUND, "store: no key '%s' at %s", key, c->where);
    }
    *val = v;
    return STORE_OK;
}

int store_wait(store_client *c, const char *key, int timeout_ms, void **val, size_t *len)
{
    int st = 0;
    void *v = NULL;
    size_t l = 0;
    int rc = roundtrip(c, OP_WAIT, key, NULL, 0, timeout_ms, timeout_ms, &v, &l, NULL, &st);
    if (rc != STORE_OK) return rc;
    if (st == ST_TIMEOUT) {
        free(v);
        return fail(c, STORE_TIMEOUT,
                    "store: timed out after %d ms waiting for key '%s' at %s (did every rank start?)",
                    timeout_ms, key, c->where);
    }
    if (val) {
        *val = v;
        if (len) *len = l;
    } else {
        free(v);
    }
    return STORE_OK;
}

int store_add(store_client *c, const char *key, int64_t delta, int64_t *result)
{
    int st = 0;
    int64_t num = 0;
    int rc = roundtrip(c, OP_ADD, key, NULL, 0, delta, -1, NULL, NULL, &num, &st);
    if (rc != STORE_OK) return rc;
    if (result) *result = num;
    return STORE_OK;
}

const char *store_error(const store_client *c) { return c->err; }

void store_close(store_client *c)
{
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c);
}
