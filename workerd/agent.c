#include "agent.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "log.h"
#include "msg.h"
#include "ranks.h"

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
    r.incarnation = a->incarnation;
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
    void *scratch = NULL;
    relay_fill(&a->relay, &hb, &scratch);
    hb.n_running = ranks_running(a, &hb.running);
    hb.n_watches = ranks_watches(a, &hb.watches);
    rpc_send(a->conn, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base);
    free(scratch);
    free(hb.watches);
    for (size_t i = 0; i < hb.n_running; i++) free(hb.running[i]);
    free(hb.running);
}

void agent_report_now(agent *a)
{
    if (a->conn && a->registered) on_heartbeat(&a->hb_timer);
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
    Atoll__LaunchAck ack = ATOLL__LAUNCH_ACK__INIT;
    char msg[512] = "";
    ranks_launch(a, m, &ack, msg, sizeof msg);
    if (!ack.ok) log_error("job %llu epoch %u: launch failed: %s", (unsigned long long)m->layout->job,
                           m->layout->epoch, msg);
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
        relay_rewind(&a->relay); /* a new connection: resend what was never acknowledged */
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
        relay_acked(&a->relay, r->relayed);
        set_interval(a, r->heartbeat_interval_ms);
        atoll__heartbeat_ack__free_unpacked(r, NULL);
        break;
    }
    case ATOLL__MSG_TYPE__MSG_LAUNCH:
        handle_launch(a, p, len);
        break;
    case ATOLL__MSG_TYPE__MSG_STOP: {
        Atoll__Stop *s = atoll__stop__unpack(NULL, len, p);
        if (s) ranks_stop(a, s->job, s->epoch, s->reason, s->checkpoint);
        if (s) atoll__stop__free_unpacked(s, NULL);
        break;
    }
    case ATOLL__MSG_TYPE__MSG_REPORT_NOW: /* the coordinator is judging a possible hang */
        agent_report_now(a);
        break;
    case ATOLL__MSG_TYPE__MSG_LOG_READ: {
        Atoll__LogRead *r = atoll__log_read__unpack(NULL, len, p);
        if (r) ranks_read_log(a, r);
        if (r) atoll__log_read__free_unpacked(r, NULL);
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
    if (!uv_is_closing((uv_handle_t *)&a->hb_timer)) uv_timer_stop(&a->hb_timer);
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

void agent_finish_stop(agent *a)
{
    uv_timer_stop(&a->hb_timer);
    uv_timer_stop(&a->retry_timer);
    uv_close((uv_handle_t *)&a->hb_timer, NULL);
    uv_close((uv_handle_t *)&a->retry_timer, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    if (a->conn) rpc_close(a->conn, "agent stopping");
}

static void on_signal(uv_signal_t *s, int signum)
{
    agent *a = s->data;
    if (a->stopping) return;
    log_info("stopping on %s%s", signum == SIGTERM ? "SIGTERM" : "SIGINT",
             !a->sets ? "" : signum == SIGTERM ? ": the ranks first, passing SIGTERM on (those with --save commit a "
                                                 "checkpoint)" : ": stopping the ranks first");
    a->stopping = 1;
    /* The ranks go first (their exits still reach the coordinator); the rest when the last is gone. */
    if (!ranks_stop_all(a, signum)) agent_finish_stop(a);
}

int agent_run(agent *a)
{
    srand((unsigned)now_us() ^ (unsigned)getpid());
    a->incarnation = ((uint64_t)now_us() << 16) ^ (uint64_t)getpid() ^ ((uint64_t)rand() << 40);
    a->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(a->loop, &a->hb_timer);
    uv_timer_init(a->loop, &a->retry_timer);
    a->hb_timer.data = a->retry_timer.data = a;
    uv_signal_init(a->loop, &a->sigterm);
    uv_signal_init(a->loop, &a->sigint);
    a->sigterm.data = a->sigint.data = a;
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    relay_init(&a->relay);
    connect_now(a);
    uv_run(a->loop, UV_RUN_DEFAULT);
    uv_loop_close(a->loop);
    relay_free(&a->relay);
    return 0;
}
