/* http: the coordinator's read-only HTTP side on the same loop.
 *   GET /metrics          Prometheus text exposition (cluster and per-job series)
 *   GET /api/nodes        {"nodes":[...]} (the shapes of `atoll ... --json`), each GPU or CPU
 *                         slot with the job that holds it
 *   GET /api/jobs         {"jobs":[...],"next":ID|null}; ?after=ID&limit=N (default 100, at most 1000)
 *   GET /api/jobs/ID      {"job":{...},"layout":{...}|null,"series":[...],"events":[...]};
 *                         ?after=ITERATION for only the newer steps
 *   GET /api/events       {"events":[...]}; ?after=ID&limit=N (default 200)
 *   GET /                 the dashboard (dashboard.html, self-contained)
 * The loop never waits on a client: one request per connection (HTTP/1.0 style,
 * Connection: close), replies written by libuv as the client takes them, at most
 * --http-max-conns connections at once (the rest wait in the listen queue), and
 * a connection that has not sent its request within HTTP_IDLE_MS or taken its
 * reply within HTTP_WRITE_MS is closed. Lists are paginated; replies many
 * readers ask for at once (/api/jobs pages, /metrics) are built once per change
 * of the jobs and shared. With --http-token FILE, /metrics and /api/ require
 * `Authorization: Bearer <token>`; the dashboard page itself holds no data. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#include "coord.h"
#include "goodput.h"
#include "jobs.h"
#include "jsonw.h"
#include "log.h"
#include "turnq.h"
#include "msg.h"
#include "msg_json.h"
#include "rpc.h"
#include "series.h"
#include "topo.h"

#define HTTP_MAX_REQUEST 8192
#define HTTP_IDLE_MS 10000
#define HTTP_WRITE_MS 30000
#define HTTP_CACHE 8
/* Requests answered per loop turn; the rest wait for the next turn, so heartbeats
 * (read in between) never queue behind a crowd of HTTP readers. */
#define HTTP_REQUESTS_PER_TURN 8
#define METRICS_CACHE_MS 500

extern const unsigned char DASHBOARD_HTML[];
extern const size_t DASHBOARD_HTML_LEN;

typedef struct http_state http_state;

typedef struct http_conn {
    http_state *hs;
    uv_tcp_t tcp;   /* not first: server.c tells rpc connections (tcp first) apart by that */
    struct http_conn *prev, *next;
    uint64_t since_ms;   /* accept, then the start of the reply */
    int writing, closing;
    turnq_link turn;              /* a whole request waits for its turn */
    size_t len;
    char req[HTTP_MAX_REQUEST + 1];
} http_conn;

/* A reply body shared by the cache and the writes in flight; freed by the last. */
typedef struct body {
    int refs;
    size_t len;
    char data[];
} body;

typedef struct cached {
    char key[96];
    uint64_t gen;
    uint64_t made_ms;
    body *b;
} cached;

struct http_state {
    coord *c;
    uv_tcp_t tcp;   /* not first, as in http_conn */
    uv_timer_t sweep;
    uv_idle_t pump;       /* runs while requests wait (ready) */
    turnq ready;
    http_conn *conns;
    int nconns, waiting;  /* waiting: a connection is pending in the listen queue */
    cached cache[HTTP_CACHE];
    int next_slot;
};

static http_state *g_http;

/* ---- connections ---- */

static void conn_closed(uv_handle_t *h)
{
    http_conn *hc = h->data;
    http_state *hs = hc->hs;
    turnq_remove(&hs->ready, &hc->turn); /* closed while waiting for its turn */
    if (hc->prev) hc->prev->next = hc->next;
    else hs->conns = hc->next;
    if (hc->next) hc->next->prev = hc->prev;
    hs->nconns--;
    free(hc);
    if (hs->waiting && hs->nconns < hs->c->o.http_max_conns && !uv_is_closing((uv_handle_t *)&hs->tcp)) {
        hs->waiting = 0;
        extern void http_accept_one(http_state * hs);
        http_accept_one(hs);
    }
}

static void conn_close(http_conn *hc)
{
    if (hc->closing) return;
    hc->closing = 1;
    uv_close((uv_handle_t *)&hc->tcp, conn_closed);
}

static body *body_new(char *text) /* takes a malloc'd string */
{
    size_t n = text ? strlen(text) : 0;
    body *b = malloc(sizeof *b + n + 1);
    if (b) {
        b->refs = 1;
        b->len = n;
        if (n) memcpy(b->data, text, n);
        b->data[n] = 0;
    }
    free(text);
    return b;
}

static void body_unref(body *b)
{
    if (b && --b->refs == 0) free(b);
}

typedef struct {
    uv_write_t req;
    char *head;
    body *b;        /* NULL when the data is static */
} http_write;

static void written(uv_write_t *req, int status)
{
    (void)status;
    http_write *w = (http_write *)req;
    conn_close(req->handle->data);
    free(w->head);
    body_unref(w->b);
    free(w);
}

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    default: return "Internal Server Error";
    }
}

/* Sends head + data; holds a reference to `b` (may be NULL for static data) until written. */
static void respond_data(http_conn *hc, int code, const char *type, const char *data, size_t len, body *b)
{
    char *head = malloc(512);
    http_write *w = malloc(sizeof *w);
    if (!head || !w || !data) {
        free(head);
        free(w);
        conn_close(hc);
        return;
    }
    int hl = snprintf(head, 512, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n", code, reason(code), type, len,
                      code == 401 ? "WWW-Authenticate: Bearer realm=\"atoll\"\r\n" : "");
    w->head = head;
    w->b = b;
    if (b) b->refs++;
    uv_buf_t bufs[2] = { uv_buf_init(head, (unsigned)hl), uv_buf_init((char *)data, (unsigned)len) };
    hc->writing = 1;
    hc->since_ms = uv_now(hc->tcp.loop);
    uv_read_stop((uv_stream_t *)&hc->tcp);
    if (uv_write(&w->req, (uv_stream_t *)&hc->tcp, bufs, 2, written)) {
        free(head);
        body_unref(b);
        free(w);
        conn_close(hc);
    }
}

/* Sends a malloc'd string (taken). */
static void respond(http_conn *hc, int code, const char *type, char *text)
{
    body *b = body_new(text);
    if (!b) {
        conn_close(hc);
        return;
    }
    respond_data(hc, code, type, b->data, b->len, b);
    body_unref(b);
}

static void respond_text(http_conn *hc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void respond_text(http_conn *hc, int code, const char *fmt, ...)
{
    char *b = malloc(600);
    if (b) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b, 600, fmt, ap);
        va_end(ap);
    }
    respond(hc, code, "text/plain; charset=utf-8", b);
}

/* ---- shared replies ---- */

static cached *cache_get(http_state *hs, const char *key, uint64_t gen, uint64_t max_age_ms)
{
    uint64_t now = uv_now(hs->tcp.loop);
    for (int i = 0; i < HTTP_CACHE; i++) {
        cached *x = &hs->cache[i];
        if (x->b && x->gen == gen && !strcmp(x->key, key) && (!max_age_ms || now - x->made_ms < max_age_ms))
            return x;
    }
    return NULL;
}

static cached *cache_put(http_state *hs, const char *key, uint64_t gen, char *text)
{
    cached *x = &hs->cache[hs->next_slot];
    hs->next_slot = (hs->next_slot + 1) % HTTP_CACHE;
    body_unref(x->b); /* writes still sending it hold their own reference */
    snprintf(x->key, sizeof x->key, "%s", key);
    x->gen = gen;
    x->made_ms = uv_now(hs->tcp.loop);
    x->b = body_new(text);
    return x;
}

static void respond_cached(http_conn *hc, const char *type, cached *x)
{
    if (!x->b) {
        respond_text(hc, 500, "out of memory\n");
        return;
    }
    respond_data(hc, 200, type, x->b->data, x->b->len, x->b);
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

static void metric_head(text *t, const char *name, const char *type, const char *help)
{
    tprintf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values are job names: escape as the exposition format requires. */
static void label_escape(char *out, size_t cap, const char *in)
{
    size_t k = 0;
    for (; *in && k + 3 < cap; in++) {
        if (*in == '\\' || *in == '"') out[k++] = '\\', out[k++] = *in;
        else if (*in == '\n') out[k++] = '\\', out[k++] = 'n';
        else out[k++] = *in;
    }
    out[k] = 0;
}

typedef struct job_row {
    store_job j;
    Atoll__JobMetrics m;
    int have;
    int nodes;
    live_job *lj;            /* valid while the body is built (one loop) */
} job_row;

typedef struct {
    job_row *v;
    size_t n, cap;
    msg_arena a;
} job_rows;

static int count_nodes(coord *c, const store_job *j)
{
    Atoll__JobLayout *l = coord_layout(c, j->id, j->epoch);
    int n = coord_layout_nodes(c, l, NULL, NULL);
    if (l) atoll__job_layout__free_unpacked(l, NULL);
    return n;
}

static void collect_live(coord *c, live_job *lj, void *ctx)
{
    job_rows *r = ctx;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        job_row *v = realloc(r->v, cap * sizeof *v);
        if (!v) return;
        r->v = v;
        r->cap = cap;
    }
    job_row *x = &r->v[r->n];
    memset(x, 0, sizeof *x);
    if (store_job_get(c->st, lj->id, &x->j)) return;
    x->have = series_latest(c, lj->id, &x->m, &r->a) == 0;
    x->nodes = count_nodes(c, &x->j);
    x->lj = lj;
    r->n++;
}

static char *metrics_body(coord *c)
{
    text t = { 0 };
    int states[4] = { 0 };
    uint64_t gpus = 0, slots = 0;
    for (size_t i = 0; i < c->reg.n; i++) {
        states[registry_state(c->reg.nodes[i])]++;
        gpus += (uint64_t)c->reg.nodes[i]->ngpus;
        slots += (uint64_t)c->reg.nodes[i]->slots;
    }
    metric_head(&t, "atoll_nodes", "gauge", "Nodes known to the coordinator by state.");
    for (int s = 0; s < 4; s++) tprintf(&t, "atoll_nodes{state=\"%s\"} %d\n", topo_state_name(s), states[s]);
    metric_head(&t, "atoll_gpus", "gauge", "GPUs on registered nodes.");
    tprintf(&t, "atoll_gpus %llu\n", (unsigned long long)gpus);
    metric_head(&t, "atoll_rank_slots", "gauge", "Rank slots on registered nodes (GPUs, or CPU ranks of CPU nodes).");
    tprintf(&t, "atoll_rank_slots %llu\n", (unsigned long long)slots);
    int counts[8] = { 0 };
    for (int s = 0; s < 8; s++) {
        store_idlist ids = { 0 };
        store_job_ids(c->st, s, 0, 0, &ids);
        counts[s] = (int)ids.n;
        free(ids.ids);
    }
    metric_head(&t, "atoll_jobs", "gauge", "Jobs by state.");
    for (int s = 0; s < 8; s++) tprintf(&t, "atoll_jobs{state=\"%s\"} %d\n", msg_job_state_name(s), counts[s]);
    metric_head(&t, "atoll_rpc_frames_total", "counter", "Frames handled after authentication.");
    tprintf(&t, "atoll_rpc_frames_total %llu\n", (unsigned long long)c->frames);
    metric_head(&t, "atoll_rpc_errors_total", "counter", "Requests refused with an Error reply.");
    tprintf(&t, "atoll_rpc_errors_total %llu\n", (unsigned long long)c->errors_sent);
    metric_head(&t, "atoll_registrations_total", "counter", "Node registrations.");
    tprintf(&t, "atoll_registrations_total %llu\n", (unsigned long long)c->registrations);
    metric_head(&t, "atoll_rank_reports_total", "counter", "Per-step rank reports relayed by the workers.");
    tprintf(&t, "atoll_rank_reports_total %llu\n", (unsigned long long)c->metrics_records);
    const coord_hist *h = &c->hb_hist;
    metric_head(&t, "atoll_heartbeat_handle_seconds", "histogram",
                "Time to handle one heartbeat (decode, update, reply).");
    uint64_t cum = 0;
    for (int b = 0; b < COORD_HIST_BUCKETS; b++) {
        cum += h->bucket[b];
        tprintf(&t, "atoll_heartbeat_handle_seconds_bucket{le=\"%g\"} %llu\n", (double)(1ull << b) / 1e6,
                (unsigned long long)cum);
    }
    tprintf(&t, "atoll_heartbeat_handle_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
    tprintf(&t, "atoll_heartbeat_handle_seconds_sum %.6f\natoll_heartbeat_handle_seconds_count %llu\n",
            h->sum_us / 1e6, (unsigned long long)h->count);
    metric_head(&t, "atoll_uptime_seconds", "gauge", "Seconds since the coordinator started.");
    tprintf(&t, "atoll_uptime_seconds %.3f\n", (coord_wall_ms() - c->started_ms) / 1000.0);

    /* Per job: the active ones (placing, starting, running, restarting). */
    job_rows r = { 0 };
    jobs_live_each(c, collect_live, &r);
    static const struct { const char *name, *type, *help; } JM[] = {
        { "atoll_job_info", "gauge", "An active job: its name, state and layout (value 1)." },
        { "atoll_job_ranks", "gauge", "Ranks (GPUs) of the job." },
        { "atoll_job_nodes", "gauge", "Nodes the job's ranks run on." },
        { "atoll_job_restarts_total", "counter", "Times the job was placed again after a failure." },
        { "atoll_job_step", "gauge", "Last training iteration reported." },
        { "atoll_job_loss", "gauge", "Training loss of the last reported step." },
        { "atoll_job_valid_loss", "gauge", "Loss on the validation split at the newest evaluation (--eval-interval)." },
        { "atoll_job_tokens_per_second", "gauge", "Tokens trained per second, whole job." },
        { "atoll_job_step_seconds", "gauge", "Time of the last reported step." },
        { "atoll_job_achieved_flops_per_gpu", "gauge", "Achieved model FLOP/s per GPU (PaLM count)." },
        { "atoll_job_mfu_ratio", "gauge", "Model FLOPs utilization against the GPU's dense bf16 peak (absent for CPU ranks)." },
        { "atoll_job_memory_bytes", "gauge", "Largest peak resident memory of a rank." },
        { "atoll_job_bubble_ratio", "gauge", "Pipeline bubble per stage: idle time over step time (kind=measured), or (p-1)/(v*m+p-1) (kind=theory)." },
        { "atoll_job_transfer_ratio", "gauge", "Per stage: activation transfer time over step time." },
    };
    for (size_t k = 0; k < sizeof JM / sizeof JM[0]; k++) {
        metric_head(&t, JM[k].name, JM[k].type, JM[k].help);
        for (size_t i = 0; i < r.n; i++) {
            job_row *x = &r.v[i];
            const Atoll__JobMetrics *m = &x->m;
            unsigned long long id = (unsigned long long)x->j.id;
            atoll_config cfg;
            int have_cfg = jobs_config(&x->j, &cfg) == 0;
            switch (k) {
            case 0: {
                char name[300];
                label_escape(name, sizeof name, x->j.name);
                tprintf(&t, "atoll_job_info{job=\"%llu\",name=\"%s\",state=\"%s\",tp=\"%d\",pp=\"%d\",dp=\"%d\"} 1\n", id,
                        name, msg_job_state_name(x->j.state), have_cfg ? cfg.tensor_model_parallel_size : 0,
                        have_cfg ? cfg.pipeline_model_parallel_size : 0,
                        have_cfg ? cfg_data_parallel_size(&cfg, cfg.num_gpus) : 0);
                break;
            }
            case 1: tprintf(&t, "atoll_job_ranks{job=\"%llu\"} %d\n", id, have_cfg ? cfg.num_gpus : 0); break;
            case 2: tprintf(&t, "atoll_job_nodes{job=\"%llu\"} %d\n", id, x->nodes); break;
            case 3: tprintf(&t, "atoll_job_restarts_total{job=\"%llu\"} %u\n", id, x->j.restarts); break;
            default:
                if (!x->have) break;
                if (k == 4) tprintf(&t, "atoll_job_step{job=\"%llu\"} %lld\n", id, (long long)m->step);
                if (k == 5) tprintf(&t, "atoll_job_loss{job=\"%llu\"} %.9g\n", id, m->loss);
                if (k == 6 && m->valid_step > 0)
                    tprintf(&t, "atoll_job_valid_loss{job=\"%llu\"} %.9g\n", id, m->valid_loss);
                if (k == 7) tprintf(&t, "atoll_job_tokens_per_second{job=\"%llu\"} %.6g\n", id, m->tokens_per_s);
                if (k == 8) tprintf(&t, "atoll_job_step_seconds{job=\"%llu\"} %.6g\n", id, m->step_ms / 1e3);
                if (k == 9) tprintf(&t, "atoll_job_achieved_flops_per_gpu{job=\"%llu\"} %.6g\n", id, m->flops_per_gpu);
                if (k == 10 && msg_mfu_known(m)) tprintf(&t, "atoll_job_mfu_ratio{job=\"%llu\"} %.6g\n", id, m->mfu);
                if (k == 11)
                    tprintf(&t, "atoll_job_memory_bytes{job=\"%llu\"} %llu\n", id, (unsigned long long)m->memory_bytes);
                for (size_t s = 0; (k == 12 || k == 13) && s < m->n_stages; s++) {
                    const Atoll__StageBubble *b = m->stages[s];
                    if (k == 12) {
                        if (b->measured >= 0)
                            tprintf(&t, "atoll_job_bubble_ratio{job=\"%llu\",stage=\"%d\",kind=\"measured\"} %.6g\n", id,
                                    b->stage, b->measured);
                        tprintf(&t, "atoll_job_bubble_ratio{job=\"%llu\",stage=\"%d\",kind=\"theory\"} %.6g\n", id,
                                b->stage, b->theory);
                    } else if (b->transfer >= 0) {
                        tprintf(&t, "atoll_job_transfer_ratio{job=\"%llu\",stage=\"%d\"} %.6g\n", id, b->stage,
                                b->transfer);
                    }
                }
            }
        }
    }
    /* Per rank of the running placements: straggler scores. */
    metric_head(&t, "atoll_rank_compute_seconds", "gauge",
                "Per rank: smoothed compute time per step (the step less time blocked in communication).");
    for (size_t i = 0; i < r.n; i++)
        for (int k = 0; r.v[i].lj && k < r.v[i].lj->nranks; k++)
            if (r.v[i].lj->ranks[k].samples)
                tprintf(&t, "atoll_rank_compute_seconds{job=\"%llu\",rank=\"%d\",node=\"%s\"} %.6g\n",
                        (unsigned long long)r.v[i].j.id, k, r.v[i].lj->ranks[k].node,
                        r.v[i].lj->ranks[k].compute_ms / 1e3);
    metric_head(&t, "atoll_rank_straggler_score", "gauge",
                "Per rank: compute time over the median of its peers (1 = typical; a straggler from "
                "--straggler-threshold).");
    for (size_t i = 0; i < r.n; i++)
        for (int k = 0; r.v[i].lj && k < r.v[i].lj->nranks; k++)
            if (r.v[i].lj->ranks[k].score > 0)
                tprintf(&t, "atoll_rank_straggler_score{job=\"%llu\",rank=\"%d\",node=\"%s\"} %.6g\n",
                        (unsigned long long)r.v[i].j.id, k, r.v[i].lj->ranks[k].node, r.v[i].lj->ranks[k].score);
    metric_head(&t, "atoll_job_stragglers", "gauge", "Ranks of the job that are stragglers now.");
    for (size_t i = 0; i < r.n; i++) {
        int n = 0;
        for (int k = 0; r.v[i].lj && k < r.v[i].lj->nranks; k++) n += r.v[i].lj->ranks[k].straggler;
        tprintf(&t, "atoll_job_stragglers{job=\"%llu\"} %d\n", (unsigned long long)r.v[i].j.id, n);
    }
    /* Goodput: where each active job's wall time went. */
    Atoll__Goodput *gp = calloc(r.n + 1, sizeof *gp);
    for (size_t i = 0; gp && i < r.n; i++) goodput_of(c, &r.v[i].j, &gp[i]);
    metric_head(&t, "atoll_job_goodput_ratio", "gauge",
                "Effective training time: productive time over wall time since the job first started, 0..1.");
    for (size_t i = 0; gp && i < r.n; i++)
        if (gp[i].wall_s > 0)
            tprintf(&t, "atoll_job_goodput_ratio{job=\"%llu\"} %.6g\n", (unsigned long long)r.v[i].j.id, gp[i].ratio);
    metric_head(&t, "atoll_job_wall_seconds_total", "counter", "Wall time since the job first started.");
    for (size_t i = 0; gp && i < r.n; i++)
        if (gp[i].wall_s > 0)
            tprintf(&t, "atoll_job_wall_seconds_total{job=\"%llu\"} %.3f\n", (unsigned long long)r.v[i].j.id,
                    gp[i].wall_s);
    metric_head(&t, "atoll_job_lost_seconds_total", "counter",
                "Wall time lost, by cause: startup, checkpoint (save stalls), detection (fault to detection), "
                "restart (detection to the next placement's first step), recompute (steps done again).");
    for (size_t i = 0; gp && i < r.n; i++) {
        const Atoll__Goodput *g = &gp[i];
        if (g->wall_s <= 0) continue;
        const struct { const char *cause; double s; } lost[] = {
            { "startup", g->startup_s }, { "checkpoint", g->checkpoint_s }, { "detection", g->detection_s },
            { "restart", g->restart_s }, { "recompute", g->recompute_s },
        };
        for (size_t k = 0; k < sizeof lost / sizeof lost[0]; k++)
            tprintf(&t, "atoll_job_lost_seconds_total{job=\"%llu\",cause=\"%s\"} %.3f\n",
                    (unsigned long long)r.v[i].j.id, lost[k].cause, lost[k].s);
    }
    free(gp);
    for (size_t i = 0; i < r.n; i++) store_job_clear(&r.v[i].j);
    free(r.v);
    msg_arena_free(&r.a);
    return t.buf;
}

/* Which job holds each GPU (or CPU slot) of each node: from the active jobs' layouts. */
typedef struct holder {
    const char *node;
    int gpu, local_rank, rank;
    uint64_t job;
} holder;

typedef struct {
    holder *v;
    size_t n, cap;
    Atoll__JobLayout **layouts;
    size_t nl, capl;
} holders;

static void collect_holders(coord *c, live_job *lj, void *ctx)
{
    holders *h = ctx;
    Atoll__JobLayout *l = coord_layout(c, lj->id, lj->epoch);
    if (!l) return;
    if (h->nl == h->capl) {
        size_t cap = h->capl ? 2 * h->capl : 16;
        Atoll__JobLayout **v = realloc(h->layouts, cap * sizeof *v);
        if (!v) {
            atoll__job_layout__free_unpacked(l, NULL);
            return;
        }
        h->layouts = v;
        h->capl = cap;
    }
    h->layouts[h->nl++] = l;
    for (size_t i = 0; i < l->n_ranks; i++) {
        if (h->n == h->cap) {
            size_t cap = h->cap ? 2 * h->cap : 64;
            holder *v = realloc(h->v, cap * sizeof *v);
            if (!v) return;
            h->v = v;
            h->cap = cap;
        }
        h->v[h->n++] = (holder){ l->ranks[i]->node, l->ranks[i]->gpu, l->ranks[i]->local_rank, l->ranks[i]->rank, l->job };
    }
}

static char *nodes_body(coord *c)
{
    msg_arena a = { 0 };
    Atoll__NodesReply r;
    holders h = { 0 };
    jobs_live_each(c, collect_holders, &h);
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "nodes");
    jsonw_arr(&w);
    if (coord_nodes_reply(c, "", &r, &a) == 0)
        for (size_t i = 0; i < r.n_nodes; i++) {
            const Atoll__Node *n = r.nodes[i];
            jsonw_obj(&w);
            msg_json_node_fields(&w, n);
            jsonw_key(&w, "held"); /* which job holds which GPU (or CPU slot) */
            jsonw_arr(&w);
            for (size_t k = 0; k < h.n; k++) {
                if (strcmp(h.v[k].node, n->name)) continue;
                jsonw_obj(&w);
                jsonw_kint(&w, "gpu", h.v[k].gpu);
                jsonw_kint(&w, "slot", h.v[k].gpu >= 0 ? h.v[k].gpu : h.v[k].local_rank);
                jsonw_key(&w, "job");
                jsonw_uint(&w, h.v[k].job);
                jsonw_kint(&w, "rank", h.v[k].rank);
                jsonw_obj_end(&w);
            }
            jsonw_arr_end(&w);
            jsonw_obj_end(&w);
        }
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    for (size_t k = 0; k < h.nl; k++) atoll__job_layout__free_unpacked(h.layouts[k], NULL);
    free(h.layouts);
    free(h.v);
    msg_arena_free(&a);
    return jsonw_take(&w);
}

typedef struct {
    coord *c;
    jsonw *w;
    uint64_t last;
    unsigned n;
} page_ctx;

static int json_job(void *ctx, store_job *j)
{
    page_ctx *x = ctx;
    msg_arena a = { 0 };
    Atoll__Job m;
    coord_job_msg(j, &m, NULL, &a);
    Atoll__Goodput g; /* the list shows each job's effective training time */
    goodput_of(x->c, j, &g);
    m.goodput = &g;
    msg_json_job(x->w, &m);
    msg_arena_free(&a);
    x->last = j->id;
    x->n++;
    return 0;
}

static char *jobs_body(coord *c, uint64_t after, unsigned limit)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "jobs");
    jsonw_arr(&w);
    page_ctx x = { c, &w, 0, 0 };
    store_jobs_page(c->st, after, limit, json_job, &x);
    jsonw_arr_end(&w);
    jsonw_key(&w, "next");
    if (x.n == limit) jsonw_uint(&w, x.last);
    else jsonw_null(&w);
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

typedef struct {
    jsonw *w;
    const char *subject;
} job_events_ctx;

static int json_job_event(void *ctx, const store_event *e)
{
    job_events_ctx *x = ctx;
    if (!strcmp(e->subject, x->subject)) json_event(x->w, e);
    return 0;
}

static char *events_body(coord *c, uint64_t after, unsigned limit)
{
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "events");
    jsonw_arr(&w);
    store_events_each(c->st, after, limit, json_event, &w);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return jsonw_take(&w);
}

typedef struct {
    jsonw *w;
    double theory;
    msg_arena *a;
    int64_t settled;
} series_ctx;

static int json_step(void *ctx, const store_step *st)
{
    series_ctx *x = ctx;
    if (!series_shown(st, x->settled)) return 0;
    Atoll__JobMetrics m;
    series_msg(st, x->theory, &m, x->a);
    msg_json_metrics(x->w, &m);
    return 0;
}

/* 0 with *out, or 404. */
static int job_body(coord *c, uint64_t id, int64_t after, char **out)
{
    store_job j;
    if (store_job_get(c->st, id, &j)) return 404;
    msg_arena a = { 0 };
    Atoll__Job m;
    coord_job_msg(&j, &m, NULL, &a);
    coord_job_detail(c, &j, &m, &a);
    Atoll__JobMetrics *latest = msg_alloc(&a, sizeof *latest);
    if (series_latest(c, id, latest, &a) == 0) m.metrics = latest;
    jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    jsonw_key(&w, "job");
    msg_json_job(&w, &m);
    jsonw_key(&w, "layout");
    Atoll__JobLayout *l = coord_layout(c, j.id, j.epoch);
    if (l) {
        msg_json_layout(&w, l);
        atoll__job_layout__free_unpacked(l, NULL);
    } else {
        jsonw_null(&w);
    }
    jsonw_key(&w, "series");
    jsonw_arr(&w);
    series_ctx sx = { &w, j.bubble_theory, &a, series_settled(c, id) };
    store_steps_each(c->st, id, after, 2 * SERIES_FULL + 100, json_step, &sx);
    jsonw_arr_end(&w);
    jsonw_key(&w, "events");
    jsonw_arr(&w);
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)id);
    job_events_ctx ex = { &w, subject };
    store_events_each(c->st, 0, 2000, json_job_event, &ex);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    msg_arena_free(&a);
    store_job_clear(&j);
    *out = jsonw_take(&w);
    return 0;
}

/* ---- requests ---- */

static long long query_int(const char *q, const char *name, long long dflt, long long lo, long long hi)
{
    size_t nl = strlen(name);
    for (const char *p = q; p && *p;) {
        if (!strncmp(p, name, nl) && p[nl] == '=') {
            char *end;
            long long v = strtoll(p + nl + 1, &end, 10);
            if (end == p + nl + 1) return dflt;
            return v < lo ? lo : v > hi ? hi : v;
        }
        p = strchr(p, '&');
        if (p) p++;
    }
    return dflt;
}

/* The request's bearer token matches --http-token (constant time). */
static int authorized(coord *c, const char *req)
{
    if (!c->http_token.len) return 1;
    for (const char *p = strstr(req, "\n"); p; p = strstr(p + 1, "\n")) {
        if (strncasecmp(p + 1, "authorization:", 14)) continue;
        const char *v = p + 15;
        while (*v == ' ') v++;
        if (strncasecmp(v, "bearer ", 7)) return 0;
        v += 7;
        size_t n = strcspn(v, "\r\n");
        if (n != c->http_token.len) return 0;
        unsigned char diff = 0;
        for (size_t i = 0; i < n; i++) diff |= (unsigned char)v[i] ^ c->http_token.bytes[i];
        return diff == 0;
    }
    return 0;
}

static void route(http_conn *hc)
{
    coord *c = hc->hs->c;
    http_state *hs = hc->hs;
    char method[8], target[512];
    if (sscanf(hc->req, "%7s %511s", method, target) != 2) {
        respond_text(hc, 400, "bad request line: expected 'GET /path HTTP/1.x'\n");
        return;
    }
    if (strcmp(method, "GET")) {
        respond_text(hc, 405, "only GET is served (the HTTP side is read-only)\n");
        return;
    }
    char *q = strchr(target, '?');
    if (q) *q++ = 0;
    const char *path = target;
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        respond_data(hc, 200, "text/html; charset=utf-8", (const char *)DASHBOARD_HTML, DASHBOARD_HTML_LEN, NULL);
        return;
    }
    if (!strcmp(path, "/favicon.ico")) {
        respond_text(hc, 404, "no icon\n");
        return;
    }
    if (!authorized(c, hc->req)) {
        respond_text(hc, 401, "this coordinator requires 'Authorization: Bearer <token>' (coordinatord --http-token)\n");
        return;
    }
    char key[96];
    if (!strcmp(path, "/metrics")) {
        cached *x = cache_get(hs, "metrics", 0, METRICS_CACHE_MS);
        if (!x) x = cache_put(hs, "metrics", 0, metrics_body(c));
        respond_cached(hc, "text/plain; version=0.0.4; charset=utf-8", x);
    } else if (!strcmp(path, "/api/nodes")) {
        respond(hc, 200, "application/json", nodes_body(c));
    } else if (!strcmp(path, "/api/jobs")) {
        unsigned long long after = (unsigned long long)query_int(q, "after", 0, 0, (long long)1 << 62);
        unsigned limit = (unsigned)query_int(q, "limit", 100, 1, 1000);
        snprintf(key, sizeof key, "jobs %llu %u", after, limit);
        cached *x = cache_get(hs, key, c->jobs_gen, 0);
        if (!x) x = cache_put(hs, key, c->jobs_gen, jobs_body(c, after, limit));
        respond_cached(hc, "application/json", x);
    } else if (!strncmp(path, "/api/jobs/", 10)) {
        char *end;
        unsigned long long id = strtoull(path + 10, &end, 10);
        char *body = NULL;
        if (!id || *end || job_body(c, id, query_int(q, "after", 0, 0, (long long)1 << 62), &body))
            respond_text(hc, 404, "no job '%s' (GET /api/jobs lists them)\n", path + 10);
        else
            respond(hc, 200, "application/json", body);
    } else if (!strcmp(path, "/api/events")) {
        respond(hc, 200, "application/json",
                events_body(c, (uint64_t)query_int(q, "after", 0, 0, (long long)1 << 62),
                            (unsigned)query_int(q, "limit", 200, 1, 10000)));
    } else {
        respond_text(hc, 404, "not found: try /, /metrics, /api/nodes, /api/jobs, /api/jobs/ID, /api/events\n");
    }
}

/* Once per loop turn while requests wait: up to HTTP_REQUESTS_PER_TURN of them,
 * oldest first; those queued during this turn wait for the next. */
static void on_pump(uv_idle_t *h)
{
    http_state *hs = h->data;
    turnq_link *l;
    for (int served = 0; served < HTTP_REQUESTS_PER_TURN && (l = turnq_pop(&hs->ready)); served++) {
        http_conn *hc = TURNQ_ENTRY(l, http_conn, turn);
        if (!hc->closing) route(hc);
    }
    if (!hs->ready.head) uv_idle_stop(&hs->pump);
}

/* A whole request: stop reading (one request per connection) and wait for a turn. */
static void queue_request(http_conn *hc)
{
    http_state *hs = hc->hs;
    uv_read_stop((uv_stream_t *)&hc->tcp);
    if (turnq_push(&hs->ready, &hc->turn) && !uv_is_active((uv_handle_t *)&hs->pump))
        uv_idle_start(&hs->pump, on_pump);
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
    if (hc->writing || hc->closing) return;
    if (n < 0) {
        conn_close(hc);
        return;
    }
    hc->len += (size_t)n;
    hc->req[hc->len] = 0;
    if (strstr(hc->req, "\r\n\r\n") || strstr(hc->req, "\n\n")) queue_request(hc);
    else if (hc->len >= HTTP_MAX_REQUEST) respond_text(hc, 400, "request larger than %d bytes\n", HTTP_MAX_REQUEST);
}

void http_accept_one(http_state *hs);
void http_accept_one(http_state *hs)
{
    http_conn *hc = calloc(1, sizeof *hc);
    if (!hc) return;
    hc->hs = hs;
    uv_tcp_init(hs->tcp.loop, &hc->tcp);
    hc->tcp.data = hc;
    hc->next = hs->conns;
    if (hs->conns) hs->conns->prev = hc;
    hs->conns = hc;
    hs->nconns++;
    if (uv_accept((uv_stream_t *)&hs->tcp, (uv_stream_t *)&hc->tcp)) {
        conn_close(hc);
        return;
    }
    hc->since_ms = uv_now(hs->tcp.loop);
    uv_read_start((uv_stream_t *)&hc->tcp, on_alloc, on_read);
}

static void on_conn(uv_stream_t *ls, int status)
{
    http_state *hs = ls->data;
    if (status < 0) return;
    /* At the cap, leave it in the listen queue: libuv stops accepting until we do. */
    if (hs->nconns >= hs->c->o.http_max_conns) {
        hs->waiting = 1;
        return;
    }
    http_accept_one(hs);
}

static void on_sweep(uv_timer_t *t)
{
    http_state *hs = t->data;
    uint64_t now = uv_now(t->loop);
    for (http_conn *hc = hs->conns, *next; hc; hc = next) {
        next = hc->next;
        if (!hc->closing && now - hc->since_ms > (hc->writing ? HTTP_WRITE_MS : HTTP_IDLE_MS)) conn_close(hc);
    }
}

static void state_closed(uv_handle_t *h)
{
    http_state *hs = h->data;
    for (int i = 0; i < HTTP_CACHE; i++) body_unref(hs->cache[i].b);
    free(hs);
}

static void pump_closed(uv_handle_t *h)
{
    http_state *hs = h->data;
    if (!uv_is_closing((uv_handle_t *)&hs->tcp)) uv_close((uv_handle_t *)&hs->tcp, state_closed);
}

int http_start(coord *c, void *loop, const char *hostport, int *port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    if (rpc_resolve(hostport, &ss, err, errlen)) return -1;
    http_state *hs = calloc(1, sizeof *hs);
    if (!hs) return -1;
    hs->c = c;
    if (c->o.http_max_conns < 1) c->o.http_max_conns = 512;
    uv_tcp_init(loop, &hs->tcp);
    hs->tcp.data = hs;
    int rc = uv_tcp_bind(&hs->tcp, (struct sockaddr *)&ss, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&hs->tcp, 1024, on_conn);
    if (rc) {
        snprintf(err, errlen, "cannot listen for HTTP on %s: %s (use --http HOST:PORT or --http off)", hostport,
                 uv_strerror(rc));
        uv_close((uv_handle_t *)&hs->tcp, state_closed);
        return -1;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&hs->tcp, (struct sockaddr *)&bound, &blen);
    *port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    uv_timer_init(loop, &hs->sweep);
    hs->sweep.data = hs;
    uv_idle_init(loop, &hs->pump);
    hs->pump.data = hs;
    uv_timer_start(&hs->sweep, on_sweep, 1000, 1000);
    g_http = hs;
    return 0;
}

void http_stop(coord *c)
{
    (void)c;
    if (!g_http) return;
    for (http_conn *hc = g_http->conns; hc; hc = hc->next) conn_close(hc);
    uv_close((uv_handle_t *)&g_http->sweep, NULL);
    /* The listener (whose close frees the state) only after the pump's close has run. */
    uv_close((uv_handle_t *)&g_http->pump, pump_closed);
    g_http = NULL;
}
