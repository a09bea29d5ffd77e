/* http: the coordinator's read-only HTTP side on the same loop.
 *   GET /metrics     Prometheus text exposition
 *   GET /api/nodes   {"nodes":[...]}   (the shapes of `atoll ... --json`)
 *   GET /api/jobs    {"jobs":[...]}
 *   GET /api/events  {"events":[...]} (newest 200)
 *   GET /            a small page linking the above
 * One request per connection (HTTP/1.0 style, Connection: close); requests
 * larger than 8 KiB are refused. No authentication: it exposes no secrets and
 * changes nothing, and binds to loopback by default. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "coord.h"
#include "jobs.h"
#include "jsonw.h"
#include "log.h"
#include "msg.h"
#include "msg_json.h"
#include "rpc.h"
#include "topo.h"

#define HTTP_MAX_REQUEST 8192

typedef struct http_conn {
    coord *c;
    uv_tcp_t tcp;   /* not first: server.c tells rpc connections apart by that */
    char req[HTTP_MAX_REQUEST + 1];
    size_t len;
    int done;
} http_conn;

typedef struct http_state {
    uv_tcp_t tcp;
    coord *c;
} http_state;

static http_state *g_http;

static void conn_closed(uv_handle_t *h)
{
    free(h->data);
}

typedef struct {
    uv_write_t req;
    char *buf;
} http_write;

static void written(uv_write_t *req, int status)
{
    (void)status;
    http_write *w = (http_write *)req;
    uv_close((uv_handle_t *)req->handle, conn_closed);
    free(w->buf);
    free(w);
}

static void respond(http_conn *hc, int code, const char *type, char *body)
{
    const char *reason = code == 200 ? "OK" : code == 404 ? "Not Found" : code == 405 ? "Method Not Allowed"
                                                                                    : "Bad Request";
    size_t blen = strlen(body);
    char head[256];
    int hl = snprintf(head, sizeof head, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", code, reason, type, blen);
    http_write *w = malloc(sizeof *w);
    char *buf = malloc((size_t)hl + blen + 1);
    if (!w || !buf) {
        free(w);
        free(buf);
        free(body);
        uv_close((uv_handle_t *)&hc->tcp, conn_closed);
        return;
    }
    memcpy(buf, head, (size_t)hl);
    memcpy(buf + hl, body, blen);
    free(body);
    w->buf = buf;
    uv_buf_t b = uv_buf_init(buf, (unsigned)(hl + blen));
    hc->done = 1;
    uv_read_stop((uv_stream_t *)&hc->tcp);
    if (uv_write(&w->req, (uv_stream_t *)&hc->tcp, &b, 1, written)) {
        free(buf);
        free(w);
        uv_close((uv_handle_t *)&hc->tcp, conn_closed);
    }
}

/* ---- bodies ---- */

typedef struct {
    char *buf;
    size_t len, cap;
} text;

static void tprintf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (t->buf && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap < t->len + (size_t)n + 1) cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) abort();
        t->buf = b;
        t->cap = cap;
    }
}

typedef struct {
    int count[8];
} job_counts;

static int count_job(void *ctx, store_job *j)
{
    job_counts *jc = ctx;
    if (j->state >= 0 && j->state < 8) jc->count[j->state]++;
    return 0;
}

static char *metrics_body(coord *c)
{
    text t = { 0 };
    int states[4] = { 0 };
    uint64_t gpus = 0;
    for (size_t i = 0; i < c->reg.n; i++) {
        states[registry_state(c->reg.nodes[i])]++;
        gpus += (uint64_t)c->reg.nodes[i]->ngpus;
    }
    tprintf(&t, "# HELP atoll_nodes Nodes known to the coordinator by state.\n# TYPE atoll_nodes gauge\n");
    for (int s = 0; s < 4; s++) tprintf(&t, "atoll_nodes{state=\"%s\"} %d\n", topo_state_name(s), states[s]);
    tprintf(&t, "# HELP atoll_gpus GPUs on registered nodes.\n# TYPE atoll_gpus gauge\natoll_gpus %llu\n",
            (unsigned long long)gpus);
    job_counts jc = { { 0 } };
    store_jobs_each(c->st, -1, count_job, &jc);
    tprintf(&t, "# HELP atoll_jobs Jobs by state.\n# TYPE atoll_jobs gauge\n");
    for (int s = 0; s < 8; s++) tprintf(&t, "atoll_jobs{state=\"%s\"} %d\n", msg_job_state_name(s), jc.count[s]);
    tprintf(&t, "# HELP atoll_rpc_frames_total Frames handled after authentication.\n"
                "# TYPE atoll_rpc_frames_total counter\natoll_rpc_frames_total %llu\n",
            (unsigned long long)c->frames);
    tprintf(&t, "# HELP atoll_rpc_errors_total Requests refused with an Error reply.\n"
                "# TYPE atoll_rpc_errors_total counter\natoll_rpc_errors_total %llu\n",
            (unsigned long long)c->errors_sent);
    tprintf(&t, "# HELP atoll_registrations_total Node registrations.\n"
                "# TYPE atoll_registrations_total counter\natoll_registrations_total %llu\n",
            (unsigned long long)c->registrations);
    const coord_hist *h = &c->hb_hist;
    tprintf(&t, "# HELP atoll_heartbeat_handle_seconds Time to handle one heartbeat (decode, update, reply).\n"
                "# TYPE atoll_heartbeat_handle_seconds histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < COORD_HIST_BUCKETS; b++) {
        cum += h->bucket[b];
        tprintf(&t, "atoll_heartbeat_handle_seconds_bucket{le=\"%g\"} %llu\n", (double)(1ull << b) / 1e6,
                (unsigned long long)cum);
    }
    tprintf(&t, "atoll_heartbeat_handle_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
    tprintf(&t, "atoll_heartbeat_handle_seconds_sum %.6f\natoll_heartbeat_handle_seconds_count %llu\n",
            h->sum_us / 1e6, (unsigned long long)h->count);
    tprintf(&t, "# HELP atoll_uptime_seconds Seconds since the coordinator started.\n"
                "# TYPE atoll_uptime_seconds gauge\natoll_uptime_seconds %.3f\n",
            (coord_wall_ms() - c->started_ms) / 1000.0);
    return t.buf;
}

static char *nodes_body(coord *c)
{
    msg_arena a = { 0 };
    Atoll__NodesReply r;
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "nodes");
    jsonw_arr(&w);
    if (coord_nodes_reply(c, "", &r, &a) == 0)
        for (size_t i = 0; i < r.n_nodes; i++) msg_json_node(&w, r.nodes[i]);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    msg_arena_free(&a);
    return jsonw_take(&w);
}

static int json_job(void *ctx, store_job *j)
{
    msg_arena a = { 0 };
    Atoll__Job m;
    coord_job_msg(j, &m, NULL, &a);
    msg_json_job(ctx, &m);
    msg_arena_free(&a);
    return 0;
}

static char *jobs_body(coord *c)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "jobs");
    jsonw_arr(&w);
    store_jobs_each(c->st, -1, json_job, &w);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return jsonw_take(&w);
}

static int json_event(void *ctx, const store_event *e)
{
    Atoll__Event m = ATOLL__EVENT__INIT;
    m.id = e->id;
    m.time_ms = e->time_ms;
    m.kind = (char *)e->kind;
    m.subject = (char *)e->subject;
    m.message = (char *)e->message;
    msg_json_event(ctx, &m);
    return 0;
}

static char *events_body(coord *c)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "events");
    jsonw_arr(&w);
    store_events_each(c->st, 0, 200, json_event, &w);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return jsonw_take(&w);
}

static void route(http_conn *hc)
{
    char method[8], path[256];
    if (sscanf(hc->req, "%7s %255s", method, path) != 2) {
        respond(hc, 400, "text/plain", strdup("bad request line\n"));
        return;
    }
    if (strcmp(method, "GET")) {
        respond(hc, 405, "text/plain", strdup("only GET is served\n"));
        return;
    }
    char *q = strchr(path, '?');
    if (q) *q = 0;
    coord *c = hc->c;
    if (!strcmp(path, "/metrics")) respond(hc, 200, "text/plain; version=0.0.4", metrics_body(c));
    else if (!strcmp(path, "/api/nodes")) respond(hc, 200, "application/json", nodes_body(c));
    else if (!strcmp(path, "/api/jobs")) respond(hc, 200, "application/json", jobs_body(c));
    else if (!strcmp(path, "/api/events")) respond(hc, 200, "application/json", events_body(c));
    else if (!strcmp(path, "/"))
        respond(hc, 200, "text/html",
                strdup("<!doctype html><title>atoll</title><h1>atoll coordinator</h1><ul>"
                       "<li><a href=\"/api/nodes\">nodes</a><li><a href=\"/api/jobs\">jobs</a>"
                       "<li><a href=\"/api/events\">events</a><li><a href=\"/metrics\">metrics</a></ul>"));
    else respond(hc, 404, "text/plain", strdup("not found: try /metrics, /api/nodes, /api/jobs, /api/events\n"));
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    http_conn *hc = h->data;
    *buf = uv_buf_init(hc->req + hc->len, (unsigned)(HTTP_MAX_REQUEST - hc->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    http_conn *hc = s->data;
    if (hc->done) return;
    if (n < 0) {
        uv_close((uv_handle_t *)s, conn_closed);
        return;
    }
    hc->len += (size_t)n;
    hc->req[hc->len] = 0;
    if (strstr(hc->req, "\r\n\r\n") || strstr(hc->req, "\n\n")) route(hc);
    else if (hc->len >= HTTP_MAX_REQUEST) respond(hc, 400, "text/plain", strdup("request too large\n"));
}

static void on_conn(uv_stream_t *ls, int status)
{
    http_state *hs = ls->data;
    if (status < 0) return;
    http_conn *hc = calloc(1, sizeof *hc);
    if (!hc) return;
    hc->c = hs->c;
    uv_tcp_init(ls->loop, &hc->tcp);
    hc->tcp.data = hc;
    if (uv_accept(ls, (uv_stream_t *)&hc->tcp)) {
        uv_close((uv_handle_t *)&hc->tcp, conn_closed);
        return;
    }
    uv_read_start((uv_stream_t *)&hc->tcp, on_alloc, on_read);
}

int http_start(coord *c, void *loop, const char *hostport, int *port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    if (rpc_resolve(hostport, &ss, err, errlen)) return -1;
    http_state *hs = calloc(1, sizeof *hs);
    if (!hs) return -1;
    hs->c = c;
    uv_tcp_init(loop, &hs->tcp);
    hs->tcp.data = hs;
    int rc = uv_tcp_bind(&hs->tcp, (struct sockaddr *)&ss, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&hs->tcp, 128, on_conn);
    if (rc) {
        snprintf(err, errlen, "cannot listen for HTTP on %s: %s (use --http HOST:PORT or --http off)", hostport,
                 uv_strerror(rc));
        uv_close((uv_handle_t *)&hs->tcp, conn_closed);
        return -1;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&hs->tcp, (struct sockaddr *)&bound, &blen);
    *port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    g_http = hs;
    return 0;
}

void http_stop(coord *c)
{
    (void)c;
    if (g_http && !uv_is_closing((uv_handle_t *)&g_http->tcp)) uv_close((uv_handle_t *)&g_http->tcp, conn_closed);
    g_http = NULL;
}
