#include "agent.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "log.h"
#include "msg.h"

#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 5000
#define ACK_TIMEOUT_MS 10000

static void connect_now(agent *a);

static int64_t now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static void on_retry(uv_timer_t *t) { connect_now(t->data); }

static void schedule_retry(agent *a)
{
    if (a->stopping) return;
    int jitter = a->backoff_ms / 4;
    int delay = a->backoff_ms - jitter + (jitter ? rand() % (2 * jitter + 1) : 0);
    uv_timer_start(&a->retry_timer, on_retry, (uint64_t)delay, 0);
    a->backoff_ms = a->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : a->backoff_ms * 2;
}

static void send_register(agent *a)
{
    msg_arena ar = { 0 };
    Atoll__Node node;
    msg_node_from_topo(&node, &a->topo, a->cpu_ranks, &ar);
    node.host = a->host;
    Atoll__Register r = ATOLL__REGISTER__INIT;
    r.node = &node;
    r.version = "workerd 0.1";
    rpc_send(a->conn, ATOLL__MSG_TYPE__MSG_REGISTER, &r.base);
    msg_arena_free(&ar);
}

static void on_heartbeat(uv_timer_t *t)
{
    agent *a = t->data;
    if (!a->conn || !a->registered) return;
    uint64_t unacked = a->seq - a->last_acked_seq;
    if (unacked * (uint64_t)a->interval_ms > ACK_TIMEOUT_MS && unacked > 3) {
        rpc_close(a->conn, "no heartbeat acknowledged for 10 s");
        return;
    }
    Atoll__Heartbeat hb = ATOLL__HEARTBEAT__INIT;
    hb.seq = ++a->seq;
    hb.health = ATOLL__NODE_HEALTH__HEALTH_OK;
    hb.sent_us = now_us();
    rpc_send(a->conn, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base);
}

static void set_interval(agent *a, uint32_t ms)
{
    if (ms < 10) ms = 10; /* a coordinator bug must not turn us into a busy loop */
    if ((int)ms == a->interval_ms && uv_is_active((uv_handle_t *)&a->hb_timer)) return;
    a->interval_ms = (int)ms;
    uv_timer_start(&a->hb_timer, on_heartbeat, ms, ms);
}

static void on_ready(rpc_conn *c)
{
    agent *a = c->data;
    log_debug("authenticated with %s", a->coordinator);
    send_register(a);
}

static void handle_launch(agent *a, const uint8_t *p, size_t len)
{
    Atoll__Launch *m = atoll__launch__unpack(NULL, len, p);
    if (!m || !m->layout) {
        log_warn("coordinator sent an undecodable Launch");
        if (m) atoll__launch__free_unpacked(m, NULL);
        return;
    }
    int mine = 0;
    for (size_t i = 0; i < m->layout->n_ranks; i++) mine += !strcmp(m->layout->ranks[i]->node, a->topo.name);
    log_info("job %llu epoch %u: %d of %zu ranks placed here", (unsigned long long)m->layout->job,
             m->layout->epoch, mine, m->layout->n_ranks);
    Atoll__LaunchAck ack = ATOLL__LAUNCH_ACK__INIT;
    ack.job = m->layout->job;
    ack.epoch = m->layout->epoch;
    /* Spawning atoll-train ranks is not part of this agent yet; say so rather than pretend. */
    ack.ok = 0;
    ack.message = "this workerd does not launch rank processes yet";
    rpc_send(a->conn, ATOLL__MSG_TYPE__MSG_LAUNCH_ACK, &ack.base);
    atoll__launch__free_unpacked(m, NULL);
}

static void on_frame(rpc_conn *c, uint16_t type, const uint8_t *p, size_t len)
{
    agent *a = c->data;
    switch (type) {
    case ATOLL__MSG_TYPE__MSG_REGISTER_REPLY: {
        Atoll__RegisterReply *r = atoll__register_reply__unpack(NULL, len, p);
        if (!r) {
            rpc_close(c, "undecodable RegisterReply");
            return;
        }
        a->registered = 1;
        a->registrations++;
        a->last_acked_seq = a->seq;
        a->backoff_ms = BACKOFF_MIN_MS;
        log_info("registered %s with %s (%d GPUs, %d NICs%s); heartbeat every %u ms", a->topo.name,
                 a->coordinator, a->topo.ngpus, a->topo.nnics,
                 r->reregistered ? ", known node: identity kept" : ", new node", r->heartbeat_interval_ms);
        set_interval(a, r->heartbeat_interval_ms);
        atoll__register_reply__free_unpacked(r, NULL);
        on_heartbeat(&a->hb_timer); /* report at once, not one interval later */
        break;
    }
    case ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK: {
        Atoll__HeartbeatAck *r = atoll__heartbeat_ack__unpack(NULL, len, p);
        if (!r) break;
        a->acks++;
        if (r->seq > a->last_acked_seq) a->last_acked_seq = r->seq;
        set_interval(a, r->heartbeat_interval_ms);
        atoll__heartbeat_ack__free_unpacked(r, NULL);
        break;
    }
    case ATOLL__MSG_TYPE__MSG_LAUNCH:
        handle_launch(a, p, len);
        break;
    case ATOLL__MSG_TYPE__MSG_STOP: {
        Atoll__Stop *s = atoll__stop__unpack(NULL, len, p);
        if (s) log_info("stop job %llu epoch %u: %s", (unsigned long long)s->job, s->epoch, s->reason);
        if (s) atoll__stop__free_unpacked(s, NULL);
        break;
    }
    case ATOLL__MSG_TYPE__MSG_ERROR: {
        Atoll__Error *e = atoll__error__unpack(NULL, len, p);
        log_error("coordinator refused: %s", e ? e->message : "(undecodable error)");
        if (e) atoll__error__free_unpacked(e, NULL);
        /* Before registration an error means the coordinator will not have us as we are:
         * start over later rather than heartbeat into the void. */
        if (!a->registered) rpc_close(c, "registration refused");
        break;
    }
    default:
        log_warn("ignoring unexpected %s (type %u) from the coordinator", msg_type_name(type), type);
    }
}

static void on_close(rpc_conn *c)
{
    agent *a = c->data;
    if (a->conn == c) a->conn = NULL;
    uv_timer_stop(&a->hb_timer);
    int was = a->registered;
    a->registered = 0;
    if (a->stopping) return;
    if (was || a->backoff_ms == BACKOFF_MIN_MS)
        log_warn("coordinator %s: %s; reconnecting with backoff", a->coordinator, c->err[0] ? c->err : "closed");
    else
        log_debug("coordinator %s: %s", a->coordinator, c->err);
    schedule_retry(a);
}

static void connect_now(agent *a)
{
    if (a->stopping || a->conn) return;
    rpc_handlers h = { on_ready, on_frame, on_close };
    a->conn = rpc_connect(a->loop, (struct sockaddr *)&a->addr, &a->token, ATOLL__ROLE__ROLE_WORKER,
                          a->topo.name, 0, &h, a);
    if (!a->conn) schedule_retry(a);
}

static void on_signal(uv_signal_t *s, int signum)
{
    agent *a = s->data;
    log_info("stopping on %s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    a->stopping = 1;
    uv_timer_stop(&a->hb_timer);
    uv_timer_stop(&a->retry_timer);
    uv_close((uv_handle_t *)&a->hb_timer, NULL);
    uv_close((uv_handle_t *)&a->retry_timer, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    if (a->conn) rpc_close(a->conn, "agent stopping");
}

int agent_run(agent *a)
{
    srand((unsigned)now_us() ^ (unsigned)getpid());
    a->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(a->loop, &a->hb_timer);
    uv_timer_init(a->loop, &a->retry_timer);
    a->hb_timer.data = a->retry_timer.data = a;
    uv_signal_init(a->loop, &a->sigterm);
    uv_signal_init(a->loop, &a->sigint);
    a->sigterm.data = a->sigint.data = a;
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    connect_now(a);
    uv_run(a->loop, UV_RUN_DEFAULT);
    uv_loop_close(a->loop);
    return 0;
}
