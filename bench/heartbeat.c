/* bench_heartbeat: one process that simulates thousands of nodes over loopback
 * against a real coordinatord. Each simulated node opens its own connection,
 * authenticates, registers a dgx-h100 topology, then heartbeats at --rate Hz,
 * phases spread evenly so the coordinator sees a smooth load. The round trip
 * (heartbeat sent -> ack received, timestamps from this process) bounds the
 * coordinator's handling latency from above; bench/heartbeat.sh also reads the
 * coordinator's own handling-time histogram from /metrics.
 *
 * Load beside the heartbeats, for the fairness bench (bench/fairness.sh) and the
 * regression tests: --seed-jobs N first submits N jobs too big for the cluster
 * (they stay pending), pipelined on one CLI connection; when the measured window
 * opens, --bulk-requests N pipelines N JobsRequests for every job on one CLI
 * connection, and --http-readers N keeps N connections reading GET /api/jobs from
 * --http until the window closes.
 *
 * SIGTERM ends the measured window early (the results are still written), so a
 * test can measure exactly while something else happens.
 *
 *   bench_heartbeat --coordinator HOST:PORT --token-file FILE [--nodes N] [--rate HZ]
 *                   [--warmup SEC] [--duration SEC] [--json FILE] [--seed-jobs N]
 *                   [--bulk-requests N] [--http HOST:PORT --http-readers N]
 */
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#include "log.h"
#include "msg.h"
#include "rpc.h"
#include "topo.h"

typedef struct sim_node {
    rpc_conn *conn;
    int registered;
    uint64_t seq;
    int64_t next_us;        /* when its next heartbeat is due */
} sim_node;

static struct {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    auth_token token;
    sim_node *nodes;
    int n, connected_upto, registered, failed;
    double rate;
    int64_t period_us, start_us, measure_from_us, measure_to_us, warmup_us, duration_us;
    uint64_t sent, acked, errors;
    int64_t *rtt;           /* RTT samples (us) in the measured window */
    size_t nrtt, caprtt;
    uv_timer_t tick;
    uv_signal_t term;
    int phase;              /* 0 connecting, 1 heartbeating, 2 done */
    uint8_t *reg_frame;
    /* load beside the heartbeats */
    int seed_jobs, seeded, seed_errors;
    rpc_conn *seeder;
    int bulk, bulk_replies, bulk_errors;
    uint64_t bulk_jobs;
    int64_t bulk_start_us, bulk_done_us;
    rpc_conn *bulker;
    struct sockaddr_storage http_addr;
    int http_readers, http_on;
    uint64_t http_responses, http_errors, http_bytes;
} B;

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_ready(rpc_conn *c)
{
    sim_node *s = c->data;
    topo_node t;
    char err[128], name[32];
    snprintf(name, sizeof name, "sim-%05d", (int)(s - B.nodes));
    topo_simulate(&t, "dgx-h100", name, NULL, err, sizeof err);
    msg_arena a = { 0 };
    Atoll__Node node;
    msg_node_from_topo(&node, &t, 0, &a);
    Atoll__Register r = ATOLL__REGISTER__INIT;
    r.node = &node;
    rpc_send(c, ATOLL__MSG_TYPE__MSG_REGISTER, &r.base);
    msg_arena_free(&a);
}

static void on_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    sim_node *s = c->data;
    if (type == ATOLL__MSG_TYPE__MSG_REGISTER_REPLY) {
        s->registered = 1;
        B.registered++;
    } else if (type == ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK) {
        Atoll__HeartbeatAck *a = atoll__heartbeat_ack__unpack(NULL, len, p);
        if (!a) return;
        int64_t now = mono_us();
        B.acked++;
        if (a->sent_us >= B.measure_from_us && a->sent_us < B.measure_to_us) {
            if (B.nrtt == B.caprtt) {
                B.caprtt = B.caprtt ? 2 * B.caprtt : 1 << 16;
                B.rtt = realloc(B.rtt, B.caprtt * sizeof *B.rtt);
            }
            B.rtt[B.nrtt++] = now - a->sent_us;
        }
        atoll__heartbeat_ack__free_unpacked(a, NULL);
    } else if (type == ATOLL__MSG_TYPE__MSG_ERROR) {
        B.errors++;
    }
}

/* ---- the CLI connections: seeding jobs, bulk requests ---- */

static void seed_ready(rpc_conn *c)
{
    /* Jobs for far more GPUs than the simulated cluster has: they stay pending. */
    atoll_config cfg;
    cfg_defaults(&cfg);
    cfg.num_layers = 4; cfg.hidden_size = 128; cfg.num_attention_heads = 4; cfg.seq_length = 128;
    cfg.num_gpus = 4096;
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, "bench-pending");
    Atoll__SubmitRequest req = ATOLL__SUBMIT_REQUEST__INIT;
    req.spec = &spec;
    for (int i = 0; i < B.seed_jobs; i++) rpc_send(c, ATOLL__MSG_TYPE__MSG_SUBMIT, &req.base);
}

static void seed_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    (void)p; (void)len;
    if (type == ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY) B.seeded++;
    else B.seed_errors++;
    if (B.seeded + B.seed_errors == B.seed_jobs) rpc_close(c, NULL);
}

static void bulk_ready(rpc_conn *c)
{
    (void)c;
    Atoll__JobsRequest req = ATOLL__JOBS_REQUEST__INIT; /* every job: the coordinator answers a page */
    B.bulk_start_us = mono_us();
    for (int i = 0; i < B.bulk; i++) rpc_send(c, ATOLL__MSG_TYPE__MSG_JOBS, &req.base);
}

static void bulk_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    if (type == ATOLL__MSG_TYPE__MSG_JOBS_REPLY) {
        Atoll__JobsReply *r = atoll__jobs_reply__unpack(NULL, len, p);
        if (r) B.bulk_jobs += r->n_jobs;
        if (r) atoll__jobs_reply__free_unpacked(r, NULL);
        B.bulk_replies++;
    } else {
        B.bulk_errors++;
    }
    if (B.bulk_replies + B.bulk_errors == B.bulk) {
        B.bulk_done_us = mono_us();
        rpc_close(c, NULL);
    }
}

static void cli_close(rpc_conn *c)
{
    if (c == B.seeder) B.seeder = NULL;
    if (c == B.bulker) B.bulker = NULL;
    if (c->err[0] && strcmp(c->err, "peer closed the connection"))
        fprintf(stderr, "bench: CLI connection closed: %s\n", c->err);
}

/* ---- HTTP readers: GET /api/jobs over and over, one request per connection ---- */

typedef struct http_reader {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    char buf[64 * 1024];
} http_reader;

static void http_start(http_reader *h);

static void http_closed(uv_handle_t *hd)
{
    http_reader *h = hd->data;
    if (B.http_on) http_start(h);
    else free(h);
}

static void http_alloc(uv_handle_t *hd, size_t sz, uv_buf_t *b)
{
    (void)sz;
    http_reader *h = hd->data;
    *b = uv_buf_init(h->buf, sizeof h->buf);
}

static void http_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n > 0) {
        B.http_bytes += (uint64_t)n;
        return;
    }
    if (n == UV_EOF) B.http_responses++;
    else if (n < 0) B.http_errors++;
    if (n < 0) uv_close((uv_handle_t *)st, http_closed);
}

static void http_written(uv_write_t *w, int status)
{
    http_reader *h = w->data;
    if (status < 0) {
        B.http_errors++;
        uv_close((uv_handle_t *)&h->tcp, http_closed);
        return;
    }
    uv_read_start((uv_stream_t *)&h->tcp, http_alloc, http_read);
}

static void http_connected(uv_connect_t *cr, int status)
{
    http_reader *h = cr->data;
    if (status < 0) {
        B.http_errors++;
        uv_close((uv_handle_t *)&h->tcp, http_closed);
        return;
    }
    static char req[] = "GET /api/jobs HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
    uv_buf_t b = uv_buf_init(req, sizeof req - 1);
    h->write.data = h;
    if (uv_write(&h->write, (uv_stream_t *)&h->tcp, &b, 1, http_written)) {
        B.http_errors++;
        uv_close((uv_handle_t *)&h->tcp, http_closed);
    }
}

static void http_start(http_reader *h)
{
    uv_tcp_init(B.loop, &h->tcp);
    h->tcp.data = h;
    h->connect.data = h;
    if (uv_tcp_connect(&h->connect, &h->tcp, (struct sockaddr *)&B.http_addr, http_connected)) {
        B.http_errors++;
        B.http_on = 0; /* cannot even start: stop this reader */
        uv_close((uv_handle_t *)&h->tcp, http_closed);
    }
}

static void start_load(void)
{
    rpc_handlers h = { NULL, bulk_frame, cli_close };
    if (B.bulk) {
        h.on_ready = bulk_ready;
        B.bulker = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_CLI, "bench-bulk", 0,
                               &h, NULL);
    }
    B.http_on = B.http_readers > 0;
    for (int i = 0; i < B.http_readers; i++) {
        http_reader *r = calloc(1, sizeof *r);
        if (r) http_start(r);
    }
}

static void on_close(rpc_conn *c)
{
    sim_node *s = c->data;
    s->conn = NULL;
    if (B.phase < 2) {
        B.failed++;
        if (B.failed <= 5) fprintf(stderr, "bench: node %d lost its connection: %s\n", (int)(s - B.nodes), c->err);
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    int64_t now = mono_us();
    if (B.phase == 0) {
        /* Ramp connections so the listen backlog never overflows. */
        rpc_handlers h = { on_ready, on_frame, on_close };
        for (int k = 0; k < 100 && B.connected_upto < B.n; k++) {
            sim_node *s = &B.nodes[B.connected_upto++];
            s->conn = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_WORKER,
                                  "bench", 0, &h, s);
        }
        if (B.seed_jobs && !B.seeder && B.seeded + B.seed_errors == 0) {
            rpc_handlers h = { seed_ready, seed_frame, cli_close };
            B.seeder = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_CLI, "bench-seed",
                                   0, &h, NULL);
        }
        if (B.seed_jobs && B.seeded + B.seed_errors < B.seed_jobs) return; /* the jobs go in first */
        if (B.registered + B.failed >= B.n) {
            B.phase = 1;
            B.measure_from_us = now + B.warmup_us; /* the window starts after registration + warmup */
            B.measure_to_us = B.measure_from_us + B.duration_us;
            /* Spread the heartbeats evenly over one period, in node order. */
            for (int i = 0; i < B.n; i++) B.nodes[i].next_us = now + (int64_t)((double)i / B.n * (double)B.period_us);
            fprintf(stderr, "bench: %d nodes registered (%d failed) in %.1f s; heartbeating\n", B.registered,
                    B.failed, (now - B.start_us) / 1e6);
        }
        return;
    }
    if ((B.bulk || B.http_readers) && now >= B.measure_from_us && !B.bulk_start_us && !B.http_on) {
        B.bulk_start_us = 1; /* load started (bulk_ready sets the real time) */
        start_load();
    }
    if (now >= B.measure_to_us) B.http_on = 0;
    if (now >= B.measure_to_us + 500000) { /* let the last acks arrive */
        B.phase = 2;
        if (B.bulker) rpc_close(B.bulker, "bench done");
        if (!uv_is_closing((uv_handle_t *)&B.term)) uv_close((uv_handle_t *)&B.term, NULL);
        uv_timer_stop(&B.tick);
        for (int i = 0; i < B.n; i++)
            if (B.nodes[i].conn) rpc_close(B.nodes[i].conn, "bench done");
        uv_close((uv_handle_t *)&B.tick, NULL);
        return;
    }
    for (int i = 0; i < B.n; i++) {
        sim_node *s = &B.nodes[i];
        if (!s->registered || !s->conn || s->next_us > now) continue;
        Atoll__Heartbeat hb = ATOLL__HEARTBEAT__INIT;
        hb.seq = ++s->seq;
        hb.sent_us = now;
        if (now < B.measure_to_us && rpc_send(s->conn, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base) == 0) B.sent++;
        s->next_us += B.period_us;
        if (s->next_us < now) s->next_us = now + B.period_us; /* fell behind: do not burst */
    }
}

static void on_term(uv_signal_t *h, int signum)
{
    (void)signum;
    int64_t now = mono_us();
    if (B.phase == 1 && now < B.measure_to_us) B.measure_to_us = now > B.measure_from_us ? now : B.measure_from_us;
    uv_close((uv_handle_t *)h, NULL);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(double q)
{
    if (!B.nrtt) return 0;
    size_t i = (size_t)(q * (double)(B.nrtt - 1) + 0.5);
    return B.rtt[i];
}

int main(int argc, char **argv)
{
    const char *coordinator = "127.0.0.1:7420", *token_file = "./atoll-state/token", *json = NULL, *http = NULL;
    int nodes = 1000;
    double rate = 1.0, warmup = 3, duration = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--coordinator")) coordinator = argv[i + 1];
        else if (!strcmp(argv[i], "--token-file")) token_file = argv[i + 1];
        else if (!strcmp(argv[i], "--nodes")) nodes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate")) rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
        else if (!strcmp(argv[i], "--seed-jobs")) B.seed_jobs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bulk-requests")) B.bulk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--http-readers")) B.http_readers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--http")) http = argv[i + 1];
        else {
            fprintf(stderr, "bench_heartbeat: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (nodes < 1 || rate <= 0 || duration <= 0) {
        fprintf(stderr, "bench_heartbeat: --nodes, --rate and --duration must be positive\n");
        return 2;
    }
    log_init("bench_heartbeat", LOG_WARN);
    /* A peer that goes away mid-write must cost us that connection (EPIPE), not the process. */
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if ((rlim_t)nodes + B.http_readers + 64 > rl.rlim_cur) {
        fprintf(stderr, "bench_heartbeat: %d nodes and %d HTTP readers need %d file descriptors; the limit is %llu\n",
                nodes, B.http_readers, nodes + B.http_readers + 64, (unsigned long long)rl.rlim_cur);
        return 2;
    }
    char err[512];
    if (B.http_readers && (!http || rpc_resolve(http, &B.http_addr, err, sizeof err))) {
        fprintf(stderr, "bench_heartbeat: --http-readers needs --http HOST:PORT%s%s\n", http ? ": " : "", http ? err : "");
        return 2;
    }
    if (rpc_resolve(coordinator, &B.addr, err, sizeof err) ||
        auth_token_load(&B.token, token_file, 0, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_heartbeat: %s\n", err);
        return 2;
    }
    B.loop = uv_default_loop();
    B.n = nodes;
    B.rate = rate;
    B.period_us = (int64_t)(1e6 / rate);
    B.nodes = calloc((size_t)nodes, sizeof *B.nodes);
    B.start_us = mono_us();
    B.warmup_us = (int64_t)(warmup * 1e6);
    B.duration_us = (int64_t)(duration * 1e6);
    B.measure_from_us = B.measure_to_us = INT64_MAX; /* set once every node has registered */
    uv_timer_init(B.loop, &B.tick);
    uv_timer_start(&B.tick, on_tick, 1, 1);
    uv_signal_init(B.loop, &B.term);
    uv_signal_start(&B.term, on_term, SIGTERM);
    uv_run(B.loop, UV_RUN_DEFAULT);

    qsort(B.rtt, B.nrtt, sizeof *B.rtt, cmp64);
    double window = (B.measure_to_us - B.measure_from_us) / 1e6;
    double hb_rate = B.nrtt / window;
    printf("nodes %d registered %d failed %d\n", B.n, B.registered, B.failed);
    printf("target %.0f heartbeats/s, acknowledged %.0f heartbeats/s in the %.1f s window (%zu samples, %llu errors)\n",
           B.n * rate, hb_rate, window, B.nrtt, (unsigned long long)B.errors);
    printf("round trip us: p50 %lld p90 %lld p99 %lld p99.9 %lld max %lld\n", (long long)pct(0.5),
           (long long)pct(0.9), (long long)pct(0.99), (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0));
    double bulk_s = B.bulk_done_us > B.bulk_start_us ? (B.bulk_done_us - B.bulk_start_us) / 1e6 : -1;
    if (B.seed_jobs) printf("seeded %d pending jobs (%d refused)\n", B.seeded, B.seed_errors);
    if (B.bulk)
        printf("bulk: %d pipelined JobsRequests, %d replies (%llu jobs), %d errors, all answered in %.2f s\n", B.bulk,
               B.bulk_replies, (unsigned long long)B.bulk_jobs, B.bulk_errors, bulk_s);
    if (B.http_readers)
        printf("http: %d readers, %llu responses (%.1f MB), %llu errors\n", B.http_readers,
               (unsigned long long)B.http_responses, B.http_bytes / 1e6, (unsigned long long)B.http_errors);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"nodes\":%d,\"registered\":%d,\"failed\":%d,\"rate_hz\":%g,\"target_per_s\":%.1f,"
                       "\"acked_per_s\":%.1f,\"window_s\":%.2f,\"samples\":%zu,\"errors\":%llu,"
                       "\"rtt_us\":{\"p50\":%lld,\"p90\":%lld,\"p99\":%lld,\"p999\":%lld,\"max\":%lld},"
                       "\"seeded\":%d,\"bulk\":{\"requests\":%d,\"replies\":%d,\"jobs\":%llu,\"errors\":%d,\"seconds\":%.3f},"
                       "\"http\":{\"readers\":%d,\"responses\":%llu,\"errors\":%llu,\"bytes\":%llu}}\n",
                    B.n, B.registered, B.failed, rate, B.n * rate, hb_rate, window, B.nrtt,
                    (unsigned long long)B.errors, (long long)pct(0.5), (long long)pct(0.9), (long long)pct(0.99),
                    (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0), B.seeded, B.bulk,
                    B.bulk_replies, (unsigned long long)B.bulk_jobs, B.bulk_errors, bulk_s, B.http_readers,
                    (unsigned long long)B.http_responses, (unsigned long long)B.http_errors,
                    (unsigned long long)B.http_bytes);
            fclose(f);
        }
    }
    uv_loop_close(B.loop);
    free(B.nodes);
    free(B.rtt);
    return B.failed || B.registered < B.n || (B.bulk && B.bulk_replies < B.bulk) ? 1 : 0;
}
