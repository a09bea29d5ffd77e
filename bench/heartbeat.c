/* bench_heartbeat: one process that simulates thousands of nodes over loopback
 * against a real coordinatord. Each simulated node opens its own connection,
 * authenticates, registers a dgx-h100 topology, then heartbeats at --rate Hz,
 * phases spread evenly so the coordinator sees a smooth load. The round trip
 * (heartbeat sent -> ack received, timestamps from this process) bounds the
 * coordinator's handling latency from above; bench/heartbeat.sh also reads the
 * coordinator's own handling-time histogram from /metrics.
 *
 *   bench_heartbeat --coordinator HOST:PORT --token-file FILE [--nodes N] [--rate HZ]
 *                   [--warmup SEC] [--duration SEC] [--json FILE]
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
    int phase;              /* 0 connecting, 1 heartbeating, 2 done */
    uint8_t *reg_frame;
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
    if (now >= B.measure_to_us + 500000) { /* let the last acks arrive */
        B.phase = 2;
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
    const char *coordinator = "127.0.0.1:7420", *token_file = "./atoll-state/token", *json = NULL;
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
    if ((rlim_t)nodes + 64 > rl.rlim_cur) {
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
    uv_run(B.loop, UV_RUN_DEFAULT);

    qsort(B.rtt, B.nrtt, sizeof *B.rtt, cmp64);
    double window = (B.measure_to_us - B.measure_from_us) / 1e6;
    double hb_rate = B.nrtt / window;
    printf("nodes %d registered %d failed %d\n", B.n, B.registered, B.failed);
    printf("target %.0f heartbeats/s, acknowledged %.0f heartbeats/s in the %.1f s window (%zu samples, %llu errors)\n",
           B.n * rate, hb_rate, window, B.nrtt, (unsigned long long)B.errors);
    printf("round trip us: p50 %lld p90 %lld p99 %lld p99.9 %lld max %lld\n", (long long)pct(0.5),
           (long long)pct(0.9), (long long)pct(0.99), (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0));
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"nodes\":%d,\"registered\":%d,\"failed\":%d,\"rate_hz\":%g,\"target_per_s\":%.1f,"
                       "\"acked_per_s\":%.1f,\"window_s\":%.2f,\"samples\":%zu,\"errors\":%llu,"
                       "\"rtt_us\":{\"p50\":%lld,\"p90\":%lld,\"p99\":%lld,\"p999\":%lld,\"max\":%lld}}\n",
                    B.n, B.registered, B.failed, rate, B.n * rate, hb_rate, window, B.nrtt,
                    (unsigned long long)B.errors, (long long)pct(0.5), (long long)pct(0.9), (long long)pct(0.99),
                    (long long)pct(0.999), (long long)(B.nrtt ? B.rtt[B.nrtt - 1] : 0));
            fclose(f);
        }
    }
    uv_loop_close(B.loop);
    free(B.nodes);
    free(B.rtt);
    return B.failed || B.registered < B.n ? 1 : 0;
}
