/* server: the coordinator's libuv side. One loop: the RPC listener, the HTTP
 * listener, a 100 ms tick for liveness, rendezvous timeouts and scheduling, the
 * Slurm node-state poll (slurm_watch.c), and
 * SIGTERM/SIGINT for a clean stop. With --stop-grace, SIGTERM while jobs are
 * active keeps serving until they have ended (their ranks are stopping too when
 * Slurm ends the allocation, and their exits say how), and 2 s more for clients
 * to read how, or until the grace has passed; with none active, 2 s (a job may
 * have ended on the same signal just before). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "coord.h"
#include "log.h"
#include "rpc.h"

#define TICK_MS 100
#define DRAIN_LINGER_MS 2000

typedef struct server_state {
    uv_loop_t *loop;
    rpc_server rpc;
    uv_timer_t tick;
    uv_signal_t sigterm, sigint;
    int stopping;
    uint64_t drain_until_ms; /* SIGTERM with --stop-grace: stop then */
    int drained;             /* no job active any more: DRAIN_LINGER_MS left for clients to read how they ended */
} server_state;

static void send_rpc(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c;
    if (p && p->conn) rpc_send(p->conn, type, m);
}

static void drop_rpc(coord *c, coord_peer *p, const char *reason)
{
    (void)c;
    if (p && p->conn) rpc_close(p->conn, reason);
}

static coord *coord_of(rpc_conn *conn) { return conn->server->data; }

static void on_ready(rpc_conn *conn)
{
    coord_peer *p = calloc(1, sizeof *p);
    if (!p) {
        rpc_close(conn, "out of memory");
        return;
    }
    p->conn = conn;
    p->role = conn->role;
    p->job = conn->job;
    p->epoch = conn->epoch;
    snprintf(p->name, sizeof p->name, "%s", conn->name);
    snprintf(p->address, sizeof p->address, "%s", conn->peer);
    conn->data = p;
    log_debug("authenticated %s (%s)", p->address, p->name);
}

static void on_frame(rpc_conn *conn, uint16_t type, const uint8_t *payload, size_t len)
{
    if (conn->data) coord_dispatch(coord_of(conn), conn->data, type, payload, len);
}

static void on_close(rpc_conn *conn)
{
    coord_peer *p = conn->data;
    if (!p) return;
    coord_peer_closed(coord_of(conn), p);
    free(p);
    conn->data = NULL;
}

static void stop(coord *c, const char *why);

static void on_tick(uv_timer_t *t)
{
    coord *c = t->data;
    coord_tick(c);
    server_state *s = c->server;
    if (!s->drain_until_ms) return;
    uint64_t now = (uint64_t)c->now();
    if (c->live.n == 0 && !s->drained) {
        s->drained = 1;
        if (now + DRAIN_LINGER_MS < s->drain_until_ms) s->drain_until_ms = now + DRAIN_LINGER_MS;
        log_info("SIGTERM: no job is active any more; stopping in %d ms", (int)(s->drain_until_ms - now));
    }
    if (now >= s->drain_until_ms) stop(c, s->drained ? "SIGTERM; the jobs have ended" : "SIGTERM; --stop-grace has passed");
}

static void stop(coord *c, const char *why)
{
    server_state *s = c->server;
    if (s->stopping) return;
    s->stopping = 1;
    log_info("stopping: %s", why);
    uv_timer_stop(&s->tick);
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    rpc_server_close(&s->rpc);
    http_stop(c);
    slurm_watch_stop(c);
    uv_stop(s->loop);
}

static void on_signal(uv_signal_t *h, int signum)
{
    coord *c = h->data;
    server_state *s = c->server;
    if (signum == SIGTERM && !s->drain_until_ms && c->o.stop_grace_ms > 0) {
        uint64_t now = (uint64_t)c->now();
        if (c->live.n > 0) {
            s->drain_until_ms = now + (uint64_t)c->o.stop_grace_ms;
            log_info("SIGTERM: %zu job(s) active; serving until they end, at most %d s (--stop-grace; SIGINT stops "
                     "at once)", c->live.n, (c->o.stop_grace_ms + 999) / 1000);
            return;
        }
        /* None active: a job's end may have just been recorded (Slurm signals the ranks too, and the loop can
         * see their exits before this signal); its clients get the same DRAIN_LINGER_MS to read it. */
        s->drained = 1;
        s->drain_until_ms = now + (uint64_t)(c->o.stop_grace_ms < DRAIN_LINGER_MS ? c->o.stop_grace_ms : DRAIN_LINGER_MS);
        log_info("SIGTERM: no job is active; stopping in %d ms (--stop-grace; SIGINT stops at once)",
                 (int)(s->drain_until_ms - now));
        return;
    }
    stop(c, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void close_any(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (uv_is_closing(h)) return;
    if (h->type == UV_TCP && h->data) {
        /* An rpc connection: let rpc.c free it. */
        rpc_conn *conn = h->data;
        if ((void *)&conn->tcp == (void *)h) {
            rpc_close(conn, "coordinator stopping");
            return;
        }
    }
    uv_close(h, NULL);
}

static void write_addr_file(const coord *c, const char *file, int port)
{
    char path[700], host[128];
    snprintf(path, sizeof path, "%s/%s", c->o.state_dir, file);
    snprintf(host, sizeof host, "%s", file[0] == 'h' ? c->o.http : c->o.listen);
    char *colon = strrchr(host, ':');
    if (colon) *colon = 0;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%s:%d\n", host, port);
    fclose(f);
}

int server_run(coord *c, char *err, size_t errlen)
{
    server_state s;
    memset(&s, 0, sizeof s);
    s.loop = uv_default_loop();
    c->server = &s;
    c->send = send_rpc;
    c->drop = drop_rpc;
    rpc_handlers h = { on_ready, on_frame, on_close };
    if (rpc_server_listen(&s.rpc, s.loop, c->o.listen, &c->token, c->o.max_frame, &h, c, err, errlen))
        return -1;
    write_addr_file(c, "coordinatord.addr", s.rpc.port);
    char *colon = strrchr(c->o.listen, ':');
    if (colon) snprintf(colon + 1, sizeof c->o.listen - (size_t)(colon + 1 - c->o.listen), "%d", s.rpc.port);
    log_info("listening on %s (port %d), heartbeat %d ms, suspect after %d ms, dead after %d ms",
             c->o.listen, s.rpc.port, c->o.heartbeat_ms, c->o.suspect_ms, c->o.node_timeout_ms);
    if (c->o.http[0]) {
        int port;
        if (http_start(c, s.loop, c->o.http, &port, err, errlen)) {
            rpc_server_close(&s.rpc);
            uv_run(s.loop, UV_RUN_NOWAIT);
            return -1;
        }
        write_addr_file(c, "http.addr", port);
        log_info("HTTP on %s (port %d): /metrics, /api/nodes, /api/jobs, /api/events", c->o.http, port);
    }
    uv_timer_init(s.loop, &s.tick);
    s.tick.data = c;
    uv_timer_start(&s.tick, on_tick, TICK_MS, TICK_MS);
    uv_signal_init(s.loop, &s.sigterm);
    uv_signal_init(s.loop, &s.sigint);
    s.sigterm.data = s.sigint.data = c;
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    if (slurm_watch_start(c, s.loop)) log_warn("cannot watch Slurm's node states: out of memory");
    uv_run(s.loop, UV_RUN_DEFAULT);
    /* Close every connection and let the callbacks run, so nothing leaks. */
    uv_walk(s.loop, close_any, NULL);
    uv_run(s.loop, UV_RUN_DEFAULT);
    uv_loop_close(s.loop);
    slurm_watch_free(c);
    c->server = NULL;
    return 0;
}
