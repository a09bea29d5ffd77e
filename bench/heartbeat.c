/* bench_heartbeat: one process that simulates thousands of nodes over loopback
 * against a real coordinatord. Each simulated node opens its own connection,
 * authenticates, registers a dgx-h100 topology, then heartbeats at --rate Hz,
 * phases spread evenly so the coordinator sees a smooth load. The round trip
 * (heartbeat sent -> ack received, timestamps from this process) bounds the
 * coordinator's handling latency from above; bench/heartbeat.sh also reads the
 * coordinator's own handling-time histogram from /metrics.
 *
 * With --ranks-per-node R every heartbeat carries R per-rank step reports, as a
 * workerd relays them: after registration the bench submits --finished-jobs F
 * jobs and cancels them (so the job list is long), then --jobs J jobs of
 * --nodes-per-job M whole nodes; nodes placed in one report their ranks'
 * steps of that job (stored by the coordinator), the others report ranks of no
 * active job (looked up and dropped). With --http-readers K, K concurrent
 * clients GET --http-path from --http HOST:PORT during the window, each pausing
 * --http-interval seconds between requests (a dashboard refreshing; 0 = flood).
 *
 * --pending-jobs P adds P jobs too large for any cluster (they stay pending, for
 * the scheduler); --bulk-requests Q opens one more CLI connection when the window
 * opens and pipelines Q JobsRequests for every job on it (each answered with a
 * page). SIGTERM ends the window early (the results are still written), so a test
 * can measure heartbeats exactly while something else happens.
 *
 *   bench_heartbeat --coordinator HOST:PORT --token-file FILE [--nodes N] [--rate HZ]
 *                   [--warmup SEC] [--duration SEC] [--json FILE]
 *                   [--ranks-per-node R] [--jobs J] [--nodes-per-job M] [--finished-jobs F]
 *                   [--pending-jobs P] [--bulk-requests Q]
 *                   [--http HOST:PORT] [--http-readers K] [--http-path PATH] [--http-interval SEC]
 */
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#include "config.h"
#include "log.h"
#include "msg.h"
#include "rpc.h"
#include "topo.h"

#define MAX_RANKS 16

typedef struct sim_node {
    rpc_conn *conn;
    int registered;
    uint64_t seq;
    int64_t next_us;        /* when its next heartbeat is due */
    uint64_t job;           /* placed here by a Launch; 0 = none */
    uint32_t epoch;
    int nranks, rank[MAX_RANKS];
} sim_node;

typedef struct reader {
    uv_timer_t pause;       /* between requests */
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_write_t wreq;
    char buf[65536];
    int idx;
} reader;

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
    int phase;              /* -1 finished jobs, 0 connecting, 1 jobs, 2 heartbeating, 3 done */
    uint8_t *reg_frame;
    /* jobs and rank reports */
    int ranks_per_node, jobs, nodes_per_job, finished_jobs, pending_jobs;
    rpc_conn *cli;
    int cli_ready, submitted, cancelled, launched_nodes, job_wait;
    uint64_t last_job;
    int64_t jobs_deadline_us;
    /* HTTP readers */
    struct sockaddr_storage http_addr;
    int http_readers;
    const char *http_path;
    double http_interval;   /* seconds between one reader's requests; 0 = back to back */
    reader *readers;
    uint64_t http_done, http_bytes, http_failed;
    /* pipelined bulk requests */
    int bulk, bulk_replies, bulk_errors;
    uint64_t bulk_jobs;
    int64_t bulk_start_us, bulk_done_us;
    int measuring; /* the window has opened (announced once, for callers that wait for it) */
    rpc_conn *bulker;
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
    } else if (type == ATOLL__MSG_TYPE__MSG_LAUNCH) {
        Atoll__Launch *m = atoll__launch__unpack(NULL, len, p);
        if (!m || !m->layout) return;
        char name[32];
        snprintf(name, sizeof name, "sim-%05d", (int)(s - B.nodes));
        s->nranks = 0;
        for (size_t i = 0; i < m->layout->n_ranks && s->nranks < MAX_RANKS; i++)
            if (!strcmp(m->layout->ranks[i]->node, name)) s->rank[s->nranks++] = m->layout->ranks[i]->rank;
        if (s->nranks && !s->job) B.launched_nodes++;
        s->job = m->layout->job;
        s->epoch = m->layout->epoch;
        Atoll__LaunchAck ack = ATOLL__LAUNCH_ACK__INIT;
        ack.job = s->job;
        ack.epoch = s->epoch;
        ack.ok = 1;
        ack.message = "simulated";
        rpc_send(c, ATOLL__MSG_TYPE__MSG_LAUNCH_ACK, &ack.base);
        atoll__launch__free_unpacked(m, NULL);
    } else if (type == ATOLL__MSG_TYPE__MSG_ERROR) {
        B.errors++;
    }
}

/* ---- the CLI side: finished jobs, then the jobs the nodes report for ---- */

static void submit_next(void);

static void cli_ready(rpc_conn *c)
{
    (void)c;
    B.cli_ready = 1;
    submit_next();
}

static void submit_next(void)
{
    int finished_left = B.submitted < B.finished_jobs;
    int pending_left = !finished_left && B.submitted < B.finished_jobs + B.pending_jobs;
    if (B.submitted >= B.finished_jobs + B.pending_jobs + B.jobs) return;
    if (!finished_left && !pending_left && B.phase < 1) return; /* the active jobs once the nodes are there */
    atoll_config cfg;
    cfg_defaults(&cfg);
    cfg.num_layers = 2;
    cfg.hidden_size = 64;
    cfg.num_attention_heads = 8;
    cfg.seq_length = 32;
    cfg.tensor_model_parallel_size = 8;
    cfg.num_gpus = 8 * (finished_left ? 1 : pending_left ? 4096 : B.nodes_per_job); /* pending: no cluster fits */
    cfg.micro_batch_size = 1;
    cfg.global_batch_size = cfg.num_gpus / 8;
    cfg.train_iters = 1000000;
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, finished_left ? "finished" : pending_left ? "pending" : "bench");
    Atoll__SubmitRequest r = ATOLL__SUBMIT_REQUEST__INIT;
    r.spec = &spec;
    rpc_send(B.cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &r.base);
}

static void cli_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    (void)c;
    if (type == ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY) {
        Atoll__SubmitReply *r = atoll__submit_reply__unpack(NULL, len, p);
        if (!r) return;
        B.last_job = r->job;
        atoll__submit_reply__free_unpacked(r, NULL);
        if (B.submitted++ < B.finished_jobs) { /* cancel it: a long list of finished jobs */
            Atoll__CancelRequest cr = ATOLL__CANCEL_REQUEST__INIT;
            cr.job = B.last_job;
            rpc_send(B.cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
            return;
        }
        if (B.submitted <= B.finished_jobs + B.pending_jobs) B.cancelled++; /* a pending job counts as done here */
        submit_next();
    } else if (type == ATOLL__MSG_TYPE__MSG_JOBS_REPLY) {
        B.cancelled++;
        submit_next();
    } else if (type == ATOLL__MSG_TYPE__MSG_ERROR) {
        Atoll__Error *e = atoll__error__unpack(NULL, len, p);
        fprintf(stderr, "bench: the coordinator refused a job request: %s\n", e ? e->message : "?");
        if (e) atoll__error__free_unpacked(e, NULL);
        B.submitted = B.finished_jobs + B.pending_jobs + B.jobs; /* give up on jobs */
        B.cancelled = B.finished_jobs + B.pending_jobs;
    }
}

static void cli_close(rpc_conn *c)
{
    (void)c;
    B.cli = NULL;
}

/* ---- bulk: one more CLI connection pipelining JobsRequests ---- */

static void bulk_ready(rpc_conn *c)
{
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

static void bulk_close(rpc_conn *c)
{
    if (c->err[0] && B.bulk_replies + B.bulk_errors < B.bulk) fprintf(stderr, "bench: bulk connection: %s\n", c->err);
    B.bulker = NULL;
}

/* SIGTERM: the window ends now. */
static void on_term(uv_signal_t *h, int signum)
{
    (void)signum;
    int64_t now = mono_us();
    B.duration_us = 0; /* before the window: it will be empty */
    if (B.phase == 2 && now < B.measure_to_us) B.measure_to_us = now > B.measure_from_us ? now : B.measure_from_us;
    uv_close((uv_handle_t *)h, NULL);
}

/* ---- HTTP readers ---- */

static void reader_start(reader *r);

static void on_pause(uv_timer_t *t) { reader_start(t->data); }

static void reader_closed(uv_handle_t *h)
{
    reader *r = h->data;
    if (B.phase != 2) return;
    if (B.http_interval <= 0) {
        reader_start(r);
        return;
    }
    if (!r->pause.data) {
        uv_timer_init(B.loop, &r->pause);
        r->pause.data = r;
    }
    uv_timer_start(&r->pause, on_pause, (uint64_t)(B.http_interval * 1000), 0);
}

static void reader_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf)
{
    (void)s;
    reader *r = h->data;
    *buf = uv_buf_init(r->buf, sizeof r->buf);
}

static void reader_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    reader *r = st->data;
    if (n > 0) {
        B.http_bytes += (uint64_t)n;
        return;
    }
    if (n == UV_EOF) B.http_done++;
    else if (n < 0) B.http_failed++;
    if (n < 0) uv_close((uv_handle_t *)&r->tcp, reader_closed);
}

static void reader_written(uv_write_t *w, int status)
{
    reader *r = w->data;
    if (status) {
        B.http_failed++;
        uv_close((uv_handle_t *)&r->tcp, reader_closed);
        return;
    }
    uv_read_start((uv_stream_t *)&r->tcp, reader_alloc, reader_read);
}

static void reader_connected(uv_connect_t *req, int status)
{
    reader *r = req->data;
    if (status) {
        B.http_failed++;
        uv_close((uv_handle_t *)&r->tcp, reader_closed);
        return;
    }
    static char get[300];
    int n = snprintf(get, sizeof get, "GET %s HTTP/1.0\r\n\r\n", B.http_path);
    uv_buf_t b = uv_buf_init(get, (unsigned)n);
    r->wreq.data = r;
    if (uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &b, 1, reader_written)) uv_close((uv_handle_t *)&r->tcp, reader_closed);
}

static void reader_start(reader *r)
{
    uv_tcp_init(B.loop, &r->tcp);
    r->tcp.data = r;
    r->req.data = r;
    if (uv_tcp_connect(&r->req, &r->tcp, (struct sockaddr *)&B.http_addr, reader_connected))
        uv_close((uv_handle_t *)&r->tcp, NULL);
}

static void on_close(rpc_conn *c)
{
    sim_node *s = c->data;
    s->conn = NULL;
    if (B.phase < 3) {
        B.failed++;
        if (B.failed <= 5) fprintf(stderr, "bench: node %d lost its connection: %s\n", (int)(s - B.nodes), c->err);
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
    int64_t now = mono_us();
    if (B.phase == -1) {
        /* The finished jobs first, while no node is registered: placing them would cost
         * the scheduler a pass over every node each (see bench/results/heartbeat.md). */
        if (!B.cli) {
            rpc_handlers ch = { cli_ready, cli_frame, cli_close };
            B.cli = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_CLI, "bench", 0, &ch,
                                NULL);
        }
        if (B.cancelled >= B.finished_jobs + B.pending_jobs) {
            B.phase = 0;
            fprintf(stderr, "bench: %d finished and %d pending jobs in %.1f s\n", B.finished_jobs, B.pending_jobs,
                    (now - B.start_us) / 1e6);
        }
        return;
    }
    if (B.phase == 0) {
        /* Ramp connections so the listen backlog never overflows. */
        rpc_handlers h = { on_ready, on_frame, on_close };
        for (int k = 0; k < 100 && B.connected_upto < B.n; k++) {
            sim_node *s = &B.nodes[B.connected_upto++];
            s->conn = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_WORKER,
                                  "bench", 0, &h, s);
        }
        if (B.registered + B.failed >= B.n) {
            B.phase = 1;
            fprintf(stderr, "bench: %d nodes registered (%d failed) in %.1f s\n", B.registered, B.failed,
                    (now - B.start_us) / 1e6);
            B.jobs_deadline_us = now + 300 * 1000000ll;
            if (B.jobs && B.cli) submit_next();
        }
        return;
    }
    if (B.phase == 1) {
        /* Heartbeat (without reports) meanwhile, so the nodes stay alive while jobs are placed. */
        int placed = B.launched_nodes >= B.jobs * B.nodes_per_job &&
                     B.submitted >= B.finished_jobs + B.pending_jobs + B.jobs;
        if (!B.jobs || placed || now > B.jobs_deadline_us) {
            B.phase = 2;
            B.measure_from_us = now + B.warmup_us; /* the window starts after registration + warmup */
            B.measure_to_us = B.measure_from_us + B.duration_us;
            /* Spread the heartbeats evenly over one period, in node order. */
            for (int i = 0; i < B.n; i++) B.nodes[i].next_us = now + (int64_t)((double)i / B.n * (double)B.period_us);
            fprintf(stderr, "bench: %d jobs submitted (%d cancelled), %d nodes hold ranks, after %.1f s; "
                    "heartbeating with %d rank reports each\n", B.submitted, B.cancelled, B.launched_nodes,
                    (now - B.start_us) / 1e6, B.ranks_per_node);
            for (int i = 0; i < B.http_readers; i++) reader_start(&B.readers[i]);
            return;
        }
    }
    if (B.phase == 2 && !B.measuring && now >= B.measure_from_us) {
        B.measuring = 1;
        fprintf(stderr, "bench: measuring\n");
    }
    if (B.phase == 2 && B.bulk && !B.bulk_start_us && now >= B.measure_from_us) {
        B.bulk_start_us = now;
        rpc_handlers bh = { bulk_ready, bulk_frame, bulk_close };
        B.bulker = rpc_connect(B.loop, (struct sockaddr *)&B.addr, &B.token, ATOLL__ROLE__ROLE_CLI, "bench-bulk", 0,
                               &bh, NULL);
    }
    if (B.phase == 2 && now >= B.measure_to_us + 500000) { /* let the last acks arrive */
        B.phase = 3;
        uv_timer_stop(&B.tick);
        for (int i = 0; i < B.n; i++)
            if (B.nodes[i].conn) rpc_close(B.nodes[i].conn, "bench done");
        if (B.cli) rpc_close(B.cli, "bench done");
        if (B.bulker) rpc_close(B.bulker, "bench done");
        if (!uv_is_closing((uv_handle_t *)&B.term)) uv_close((uv_handle_t *)&B.term, NULL);
        for (int i = 0; i < B.http_readers; i++)
            if (B.readers[i].pause.data) uv_close((uv_handle_t *)&B.readers[i].pause, NULL);
        uv_close((uv_handle_t *)&B.tick, NULL);
        return;
    }
    Atoll__RankMetrics rm[MAX_RANKS], *rp[MAX_RANKS];
    for (int i = 0; i < B.n; i++) {
        sim_node *s = &B.nodes[i];
        if (!s->registered || !s->conn) continue;
        if (B.phase == 1) { /* keep-alive while jobs are placed: one per period, no reports */
            if (s->next_us > now) continue;
            s->next_us = now + B.period_us;
        } else if (s->next_us > now) {
            continue;
        }
        Atoll__Heartbeat hb = ATOLL__HEARTBEAT__INIT;
        hb.seq = ++s->seq;
        hb.sent_us = now;
        int nr = B.phase == 2 ? B.ranks_per_node : 0;
        for (int k = 0; k < nr; k++) {
            Atoll__RankMetrics *m = &rm[k];
            atoll__rank_metrics__init(m);
            m->job = s->job;
            m->epoch = s->epoch;
            m->rank = k < s->nranks ? s->rank[k] : k;
            m->iteration = (int64_t)s->seq;
            m->loss = 2.5;
            m->tokens_per_s = 1e6;
            m->step_ms = 1000;
            m->flops_per_gpu = 4e14;
            m->peak_flops = 9.89e14;
            m->mfu = m->flops_per_gpu / m->peak_flops;
            m->memory_bytes = 60ull << 30;
            m->stage = -1;
            m->relay_seq = s->seq * (uint64_t)B.ranks_per_node + (uint64_t)k;
            rp[k] = m;
        }
        hb.n_ranks = (size_t)nr;
        hb.ranks = rp;
        if ((B.phase == 1 || now < B.measure_to_us) && rpc_send(s->conn, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base) == 0)
            B.sent++;
        if (B.phase == 2) {
            s->next_us += B.period_us;
            if (s->next_us < now) s->next_us = now + B.period_us; /* fell behind: do not burst */
        }
    }
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
    B.nodes_per_job = 8;
    B.http_path = "/api/jobs";
    B.http_interval = 1.0;
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
        else if (!strcmp(argv[i], "--ranks-per-node")) B.ranks_per_node = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--jobs")) B.jobs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--nodes-per-job")) B.nodes_per_job = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--finished-jobs")) B.finished_jobs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pending-jobs")) B.pending_jobs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bulk-requests")) B.bulk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--http")) http = argv[i + 1];
        else if (!strcmp(argv[i], "--http-readers")) B.http_readers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--http-path")) B.http_path = argv[i + 1];
        else if (!strcmp(argv[i], "--http-interval")) B.http_interval = atof(argv[i + 1]);
        else {
            fprintf(stderr, "bench_heartbeat: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (B.ranks_per_node < 0 || B.ranks_per_node > MAX_RANKS || B.nodes_per_job < 1 || (B.http_readers && !http)) {
        fprintf(stderr, "bench_heartbeat: --ranks-per-node 0..%d, --nodes-per-job >= 1, --http-readers needs --http\n",
                MAX_RANKS);
        return 2;
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
    if ((rlim_t)nodes + (rlim_t)B.http_readers + 64 > rl.rlim_cur) {
        fprintf(stderr, "bench_heartbeat: %d nodes need %d file descriptors; the limit is %llu\n", nodes, nodes + 64,
                (unsigned long long)rl.rlim_cur);
        return 2;
    }
    char err[512];
    if (rpc_resolve(coordinator, &B.addr, err, sizeof err) ||
        auth_token_load(&B.token, token_file, 0, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_heartbeat: %s\n", err);
        return 2;
    }
    if (http && rpc_resolve(http, &B.http_addr, err, sizeof err)) {
        fprintf(stderr, "bench_heartbeat: --http: %s\n", err);
        return 2;
    }
    B.readers = calloc((size_t)B.http_readers + 1, sizeof *B.readers);
    B.loop = uv_default_loop();
    B.n = nodes;
    B.rate = rate;
    B.period_us = (int64_t)(1e6 / rate);
    B.nodes = calloc((size_t)nodes, sizeof *B.nodes);
    B.start_us = mono_us();
    B.warmup_us = (int64_t)(warmup * 1e6);
    B.duration_us = (int64_t)(duration * 1e6);
    B.measure_from_us = B.measure_to_us = INT64_MAX; /* set once every node has registered */
    B.phase = B.finished_jobs || B.pending_jobs ? -1 : 0;
    uv_timer_init(B.loop, &B.tick);
    uv_timer_start(&B.tick, on_tick, 1, 1);
    uv_signal_init(B.loop, &B.term);
    uv_signal_start(&B.term, on_term, SIGTERM);
    uv_run(B.loop, UV_RUN_DEFAULT);

    qsort(B.rtt, B.nrtt, sizeof *B.rtt, cmp64);
    double window = (B.measure_to_us - B.measure_from_us) / 1e6;
    /* stopped before the window opened: an empty window, no rates (and no NaN in the JSON) */
    double per_s = window > 0 ? 1.0 / window : 0.0, hb_rate = B.nrtt * per_s;
    printf("nodes %d registered %d failed %d\n", B.n, B.registered, B.failed);
    printf("target %.0f heartbeats/s, acknowledged %.0f heartbeats/s in the %.1f s window (%zu samples, %llu errors)\n",
           B.n * rate, hb_rate, window, B.nrtt, (unsigned long long)B.errors);
    printf("round trip us: p50 %lld p90 %lld p99 %lld p99.9 %lld max %lld\n", (long long)pct(0.5),
           (long long)pct(0.9), (long long)pct(0.99), (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0));
    printf("rank reports per heartbeat %d; jobs %d submitted, %d nodes hold ranks; HTTP readers %d: %llu replies "
           "(%.1f/s, %.1f MB), %llu failed\n", B.ranks_per_node, B.submitted, B.launched_nodes, B.http_readers,
           (unsigned long long)B.http_done, B.http_done * per_s, B.http_bytes / 1e6, (unsigned long long)B.http_failed);
    double bulk_s = B.bulk_done_us > B.bulk_start_us ? (B.bulk_done_us - B.bulk_start_us) / 1e6 : -1;
    if (B.bulk)
        printf("bulk: %d pipelined JobsRequests, %d replies (%llu jobs), %d errors, all answered in %.2f s\n", B.bulk,
               B.bulk_replies, (unsigned long long)B.bulk_jobs, B.bulk_errors, bulk_s);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"nodes\":%d,\"registered\":%d,\"failed\":%d,\"rate_hz\":%g,\"target_per_s\":%.1f,"
                       "\"acked_per_s\":%.1f,\"window_s\":%.2f,\"samples\":%zu,\"errors\":%llu,"
                       "\"rtt_us\":{\"p50\":%lld,\"p90\":%lld,\"p99\":%lld,\"p999\":%lld,\"max\":%lld},"
                       "\"ranks_per_node\":%d,\"jobs\":%d,\"nodes_with_ranks\":%d,\"http_readers\":%d,"
                       "\"http_replies_per_s\":%.1f,\"http_replies\":%llu,\"http_failed\":%llu,\"pending_jobs\":%d,"
                       "\"finished_jobs\":%d,\"bulk\":{\"requests\":%d,\"replies\":%d,\"jobs\":%llu,\"errors\":%d,"
                       "\"seconds\":%.3f}}\n",
                    B.n, B.registered, B.failed, rate, B.n * rate, hb_rate, window, B.nrtt,
                    (unsigned long long)B.errors, (long long)pct(0.5), (long long)pct(0.9), (long long)pct(0.99),
                    (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0), B.ranks_per_node, B.submitted,
                    B.launched_nodes, B.http_readers, B.http_done * per_s, (unsigned long long)B.http_done,
                    (unsigned long long)B.http_failed, B.pending_jobs, B.finished_jobs, B.bulk, B.bulk_replies,
                    (unsigned long long)B.bulk_jobs, B.bulk_errors, bulk_s);
            fclose(f);
        }
    }
    uv_loop_close(B.loop);
    free(B.nodes);
    free(B.rtt);
    free(B.readers);
    return B.failed || B.registered < B.n || (B.bulk && B.bulk_replies < B.bulk) ? 1 : 0;
}
