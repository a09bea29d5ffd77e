/* dispatch: one handler per request type. Handlers see decoded messages and a
 * coord_peer, never a socket, so tests and the fuzzer drive them directly.
 * Every refusal is an Error frame with a one-line reason; the connection stays. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "fabric.h"
#include "goodput.h"
#include "jobs.h"
#include "log.h"
#include "msg.h"
#include "restart.h"
#include "scheduler.h"
#include "series.h"
#include "topo.h"

void coord_reply(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    c->send(c, p, type, m);
}

void coord_error(coord *c, coord_peer *p, int code, const char *fmt, ...)
{
    char text[2048]; /* a refusal with its advice can run past 1 KiB */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    Atoll__Error e = ATOLL__ERROR__INIT;
    e.code = (Atoll__ErrorCode)code;
    e.message = text;
    c->errors_sent++;
    log_info("refused a request from %s: %s", p->address[0] ? p->address : "peer", text);
    c->send(c, p, ATOLL__MSG_TYPE__MSG_ERROR, &e.base);
}

/* protobuf-c allocations from an arena: replies built from stored blobs are freed at once. */
static void *arena_alloc(void *data, size_t n) { return msg_alloc(data, n); }
static void arena_nofree(void *data, void *p) { (void)data; (void)p; }

static ProtobufCMessage *unpack_in(msg_arena *a, const ProtobufCMessageDescriptor *d, const uint8_t *b, size_t n)
{
    ProtobufCAllocator al = { arena_alloc, arena_nofree, a };
    return protobuf_c_message_unpack(d, &al, n, b);
}

static char *arena_strdup(msg_arena *a, const char *s)
{
    size_t n = strlen(s ? s : "");
    char *d = msg_alloc(a, n + 1);
    memcpy(d, s ? s : "", n);
    return d;
}

/* ---- nodes ---- */

static Atoll__Node *node_msg(coord *c, reg_node *rn, msg_arena *a)
{
    (void)c;
    Atoll__Node *n = (Atoll__Node *)unpack_in(a, &atoll__node__descriptor, rn->info, rn->info_len);
    if (!n) {
        n = msg_alloc(a, sizeof *n);
        atoll__node__init(n);
        n->name = rn->name;
    }
    n->state = (Atoll__NodeState)registry_state(rn);
    n->drained = rn->drained;
    if (rn->slurm_out) n->slurm_state = rn->slurm_state;
    n->registered_ms = rn->registered_ms;
    n->last_seen_ms = rn->last_seen_ms;
    n->address = rn->address;
    n->heartbeats = rn->heartbeats;
    int leaf = c->fab ? fabric_leaf_of(c->fab, n->name) : -1; /* --fabric names the leaf switch */
    if (leaf >= 0) n->leaf = (char *)fabric_switch_name(c->fab, leaf);
    return n;
}

int coord_nodes_reply(coord *c, const char *name, Atoll__NodesReply *out, msg_arena *a)
{
    atoll__nodes_reply__init(out);
    if (name && *name) {
        reg_node *rn = registry_find(&c->reg, name);
        if (!rn) return -1;
        out->n_nodes = 1;
        out->nodes = msg_alloc(a, sizeof *out->nodes);
        out->nodes[0] = node_msg(c, rn, a);
        return 0;
    }
    reg_node **sorted = registry_sorted(&c->reg);
    if (!sorted) return -1;
    out->nodes = msg_alloc(a, sizeof *out->nodes * (c->reg.n + 1));
    for (size_t i = 0; i < c->reg.n; i++) out->nodes[out->n_nodes++] = node_msg(c, sorted[i], a);
    free(sorted);
    return 0;
}

static int valid_node_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static void handle_register(coord *c, coord_peer *p, Atoll__Register *m)
{
    if (p->role != ATOLL__ROLE__ROLE_WORKER) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "Register is for node agents: authenticate with role WORKER");
        return;
    }
    if (!m->node || !valid_node_name(m->node->name)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID,
                    "node name '%s' is not valid: use 1-63 characters from A-Z a-z 0-9 . _ -",
                    m->node && m->node->name ? m->node->name : "");
        return;
    }
    static topo_node t; /* 20 KB: keep it off the stack; one loop, one caller */
    char why[256];
    if (msg_node_to_topo(m->node, &t, why, sizeof why)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "node %s: %s", m->node->name, why);
        return;
    }
    if (m->node->cpu_ranks < 0 || m->node->cpu_ranks > 4096) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "node %s: cpu_ranks %d is outside 0..4096",
                    m->node->name, m->node->cpu_ranks);
        return;
    }
    reg_node *n = registry_find(&c->reg, m->node->name);
    if (p->node && p->node != n) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_CONFLICT, "this connection already registered node %s", p->node->name);
        return;
    }
    if (n && n->peer && n->peer != p) {
        int64_t quiet = c->now() - n->last_seen_ms;
        if (quiet < c->o.suspect_ms) {
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_CONFLICT,
                        "node name %s is in use by a connected agent at %s (last heartbeat %lld ms ago); "
                        "give this one another --name", n->name, n->address, (long long)quiet);
            return;
        }
        /* The old connection has gone quiet (a half-open socket after a network cut, say):
         * the agent that is talking now owns the name. */
        coord_peer *old = n->peer;
        log_info("node %s: replacing its silent connection %s with %s", n->name, old->address, p->address);
        old->node = NULL;
        n->peer = NULL;
        c->drop(c, old, "replaced by a newer registration of the same node");
    }
    int is_new = n == NULL;
    if (is_new && !(n = registry_add(&c->reg, m->node->name))) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
        return;
    }
    int64_t now = c->now();
    int was = n->live;
    /* Keep only the topology: liveness fields are the coordinator's to fill. */
    Atoll__Node *node = m->node;
    node->state = 0;
    node->drained = 0;
    node->registered_ms = node->last_seen_ms = 0;
    /* free_unpacked frees every string but the shared default: swap ours for it */
    if (node->address && node->address != protobuf_c_empty_string) free(node->address);
    node->address = (char *)protobuf_c_empty_string;
    node->heartbeats = 0;
    size_t len = protobuf_c_message_get_packed_size(&node->base);
    uint8_t *blob = malloc(len ? len : 1);
    if (!blob) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
        return;
    }
    protobuf_c_message_pack(&node->base, blob);
    int slots = t.ngpus ? t.ngpus : node->cpu_ranks;
    registry_set_info(&c->reg, n, blob, len, t.ngpus, slots);
    free(blob);
    if (is_new) n->registered_ms = now;
    registry_set_live(&c->reg, n, NODE_ALIVE);
    n->last_seen_ms = now;
    n->peer = p;
    if (m->incarnation != n->incarnation) { /* a new agent process: its relay sequence starts over */
        n->incarnation = m->incarnation;
        n->relay_seen = n->relay_durable = 0;
    }
    snprintf(n->address, sizeof n->address, "%s", p->address);
    p->node = n;
    c->registrations++;

    store_node sn = { .info = n->info, .info_len = n->info_len, .state = NODE_ALIVE, .drained = n->drained,
                      .registered_ms = n->registered_ms, .last_seen_ms = now };
    snprintf(sn.name, sizeof sn.name, "%s", n->name);
    int rc = store_begin(c->st);
    if (!rc) rc = store_node_put(c->st, &sn);
    if (!rc)
        rc = events_add(c, is_new ? "node.registered" : "node.reregistered", n->name,
                        "%d GPUs%s%s, %d NICs, %d slots, from %s%s", t.ngpus, t.ngpus ? " " : "",
                        t.ngpus ? t.gpus[0].name : "", t.nnics, slots, p->address,
                        is_new ? "" : was == NODE_DEAD ? " (was dead)" : " (identity kept)");
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        store_rollback(c->st);
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot store node %s: %s", n->name, store_errmsg(c->st));
        return;
    }
    Atoll__RegisterReply r = ATOLL__REGISTER_REPLY__INIT;
    r.heartbeat_interval_ms = (uint32_t)c->o.heartbeat_ms;
    r.reregistered = !is_new;
    r.registered_ms = n->registered_ms;
    coord_reply(c, p, ATOLL__MSG_TYPE__MSG_REGISTER_REPLY, &r.base);
    sched_capacity_changed(c); /* a node joined or came back */
}

static void set_live(coord *c, reg_node *n, int to, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void set_live(coord *c, reg_node *n, int to, const char *kind, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    registry_set_live(&c->reg, n, to);
    int rc = store_begin(c->st);
    if (!rc) rc = store_node_set_state(c->st, n->name, to, n->drained, n->last_seen_ms);
    if (!rc) rc = events_add(c, kind, n->name, "%s", msg);
    if (!rc) rc = store_commit(c->st);
    if (rc) {
        store_rollback(c->st);
        log_error("node %s: cannot store state %s: %s", n->name, topo_state_name(to), store_errmsg(c->st));
    }
}

static void handle_heartbeat(coord *c, coord_peer *p, Atoll__Heartbeat *m)
{
    reg_node *n = p->node;
    if (!n) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "send Register before heartbeats");
        return;
    }
    int64_t now = c->now();
    int64_t silent = now - n->last_seen_ms;
    n->last_seen_ms = now;
    n->heartbeats++;
    c->heartbeats++;
    if (n->live != NODE_ALIVE) {
        int was = n->live;
        set_live(c, n, NODE_ALIVE, "node.alive", "heartbeat after %.1f s of silence (was %s)", silent / 1000.0,
                 topo_state_name(was));
        /* Placement skips nodes that are not alive: a job queued meanwhile may fit now. */
        sched_capacity_changed(c);
    }
    /* Reports come in relay order; one already received is a resend after a reconnect. */
    for (size_t i = 0; i < m->n_ranks; i++) {
        const Atoll__RankMetrics *r = m->ranks[i];
        if (r->relay_seq && r->relay_seq <= n->relay_seen) continue;
        series_add(c, r);
        if (r->relay_seq > n->relay_seen) n->relay_seen = r->relay_seq;
    }
    for (size_t i = 0; i < m->n_exits; i++) {
        const Atoll__RankExit *e = m->exits[i];
        if (e->relay_seq && e->relay_seq <= n->relay_seen) continue;
        jobs_rank_exit(c, n->name, e);
        if (e->relay_seq > n->relay_seen) n->relay_seen = e->relay_seq;
    }
    restart_heartbeat(c, n->name, m);
    /* Watchdog reports are state (the newest per rank), not history: kept by hang.c. */
    for (size_t i = 0; i < m->n_watches; i++) {
        Atoll__RankWatch *w = m->watches[i];
        m->watches[i] = NULL; /* hang.c owns it now (free_unpacked skips NULL) */
        hang_watch(c, n->name, w);
    }
    hang_heard(c, n);
    /* Ranks of a job that is no longer active here (cancelled while the agent was
     * away, or an older placement) are told to stop. */
    for (size_t i = 0; i < m->n_running; i++) {
        live_job *lj = jobs_live(c, m->running[i]->job);
        if (lj && lj->epoch == m->running[i]->epoch) continue;
        Atoll__Stop stop = ATOLL__STOP__INIT;
        stop.job = m->running[i]->job;
        stop.epoch = m->running[i]->epoch;
        stop.reason = lj ? "the job was placed again" : "the job is not active";
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_STOP, &stop.base);
        if (n->stale_job != stop.job || n->stale_epoch != stop.epoch) { /* a node back from a partition, say */
            n->stale_job = stop.job;
            n->stale_epoch = stop.epoch;
            char subject[32];
            snprintf(subject, sizeof subject, "job %llu", (unsigned long long)stop.job);
            if (lj)
                events_add(c, "job.stale_ranks", subject, "node %s still runs ranks of epoch %u, which epoch %u replaced: "
                           "told to stop them (the job's --save, if any, is epoch %u's: they commit nothing there)",
                           n->name, stop.epoch, lj->epoch, lj->epoch);
            else
                events_add(c, "job.stale_ranks", subject, "node %s still runs ranks of epoch %u of a job that is not "
                           "active: told to stop them", n->name, stop.epoch);
        }
    }
    Atoll__HeartbeatAck ack = ATOLL__HEARTBEAT_ACK__INIT;
    ack.seq = m->seq;
    ack.heartbeat_interval_ms = (uint32_t)c->o.heartbeat_ms;
    ack.sent_us = m->sent_us;
    ack.relayed = n->relay_durable;
    coord_reply(c, p, ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK, &ack.base);
}

static void handle_launch_ack(coord *c, coord_peer *p, Atoll__LaunchAck *m)
{
    if (!p->node) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "send Register before answering launches");
        return;
    }
    char subject[32];
    snprintf(subject, sizeof subject, "job %llu", (unsigned long long)m->job);
    store_job j;
    int got = store_job_get(c->st, m->job, &j) == 0;
    int have = got && j.epoch == m->epoch && jobs_is_active(j.state);
    if (store_begin(c->st) == 0) {
        events_add(c, m->ok ? "job.launch" : "job.launch_refused", subject, "node %s, epoch %u: %s",
                   p->node->name, m->epoch, m->message);
        /* A node that cannot start its ranks fails the job: it would never run. */
        if (have && !m->ok && (j.state == ATOLL__JOB_STATE__JOB_STARTING || j.state == ATOLL__JOB_STATE__JOB_RUNNING))
            jobs_change(c, &j, ATOLL__JOB_STATE__JOB_FAILED, "node %s could not start its ranks: %s", p->node->name,
                        m->message);
        if (store_commit(c->st)) store_rollback(c->st);
    }
    if (have && !m->ok) sched_stop_job(c, &j, "the launch failed on another node");
    if (got) store_job_clear(&j);
}

static void handle_nodes(coord *c, coord_peer *p, Atoll__NodesRequest *m)
{
    msg_arena a = { 0 };
    Atoll__NodesReply r;
    if (coord_nodes_reply(c, m->name, &r, &a))
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "no node named '%s' (`atoll nodes` lists them)", m->name);
    else
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_NODES_REPLY, &r.base);
    msg_arena_free(&a);
}

static void handle_drain(coord *c, coord_peer *p, Atoll__DrainRequest *m)
{
    reg_node *n = registry_find(&c->reg, m->name);
    if (!n) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "no node named '%s' (`atoll nodes` lists them)", m->name);
        return;
    }
    if (n->drained != (int)m->drain) {
        n->drained = m->drain;
        int rc = store_begin(c->st);
        if (!rc) rc = store_node_set_state(c->st, n->name, n->live, n->drained, n->last_seen_ms);
        if (!rc) rc = events_add(c, m->drain ? "node.drained" : "node.undrained", n->name, "%s",
                                 m->drain ? "no new work will be placed here" : "open for new work");
        if (!rc) rc = store_commit(c->st);
        if (rc) {
            store_rollback(c->st);
            n->drained = !m->drain;
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot store the change: %s", store_errmsg(c->st));
            return;
        }
        if (!m->drain) sched_capacity_changed(c);
    }
    Atoll__NodesRequest one = ATOLL__NODES_REQUEST__INIT;
    one.name = n->name;
    handle_nodes(c, p, &one);
}

/* ---- jobs ---- */

void coord_job_msg(const store_job *j, Atoll__Job *out, Atoll__JobSpec **spec_out, msg_arena *a)
{
    atoll__job__init(out);
    out->id = j->id;
    out->name = (char *)j->name;
    out->state = (Atoll__JobState)j->state;
    out->restarts = j->restarts;
    out->epoch = j->epoch;
    out->message = (char *)j->message;
    out->created_ms = j->created_ms;
    out->updated_ms = j->updated_ms;
    Atoll__JobSpec *spec = (Atoll__JobSpec *)unpack_in(a, &atoll__job_spec__descriptor, j->spec, j->spec_len);
    out->spec = spec;
    if (spec_out) *spec_out = spec;
    atoll_config cfg;
    char err[256];
    if (spec && msg_spec_to_cfg(spec, &cfg, err, sizeof err) == 0) {
        out->tp = cfg.tensor_model_parallel_size;
        out->pp = cfg.pipeline_model_parallel_size;
        /* the current placement's: below the spec's while data parallel is shrunk */
        out->dp = cfg_data_parallel_size(&cfg, j->world > 0 ? j->world : cfg.num_gpus);
        out->vpp = cfg_virtual_stages(&cfg);
    }
    out->world = j->world;
    Atoll__JobMetrics *mt = msg_alloc(a, sizeof *mt);
    atoll__job_metrics__init(mt);
    mt->step = j->step;
    mt->loss = j->loss;
    mt->tokens_per_s = j->tokens_per_s;
    mt->mfu = j->mfu;
    mt->bubble_measured = j->bubble_measured;
    mt->bubble_theory = j->bubble_theory;
    out->metrics = mt;
}

int coord_find_job(coord *c, coord_peer *p, uint64_t id, store_job *out)
{
    int r = store_job_get(c->st, id, out);
    if (!r) return 0;
    coord_error(c, p, r > 0 ? ATOLL__ERROR_CODE__ERR_NOT_FOUND : ATOLL__ERROR_CODE__ERR_INTERNAL,
                "no job %llu (`atoll jobs` lists them)", (unsigned long long)id);
    return -1;
}

Atoll__JobLayout *coord_layout(coord *c, uint64_t job, uint32_t epoch)
{
    uint8_t *blob;
    size_t len;
    if (store_layout_get(c->st, job, epoch, &blob, &len)) return NULL;
    Atoll__JobLayout *l = atoll__job_layout__unpack(NULL, len, blob);
    free(blob);
    return l;
}

int coord_layout_nodes(coord *c, const Atoll__JobLayout *l, void (*fn)(coord *c, reg_node *n, void *ctx), void *ctx)
{
    uint64_t walk = ++c->visit;
    int count = 0;
    for (size_t i = 0; l && i < l->n_ranks; i++) {
        if (i && !strcmp(l->ranks[i - 1]->node, l->ranks[i]->node)) continue; /* a node's ranks are mostly adjacent */
        reg_node *n = registry_find(&c->reg, l->ranks[i]->node);
        if (!n || n->visit == walk) continue;
        n->visit = walk;
        count++;
        if (fn) fn(c, n, ctx);
    }
    return count;
}

static void handle_submit(coord *c, coord_peer *p, Atoll__SubmitRequest *m)
{
    if (!m->spec) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "SubmitRequest carries no job spec");
        return;
    }
    uint64_t id;
    int existing;
    char err[2048];
    int code = jobs_submit(c, m->spec, m->request_id, &id, &existing, err, sizeof err);
    if (code) {
        coord_error(c, p, code, "%s", err);
        return;
    }
    Atoll__SubmitReply r = ATOLL__SUBMIT_REPLY__INIT;
    r.job = id;
    r.existing = existing;
    store_job j;
    r.state = existing && store_job_get(c->st, id, &j) == 0 ? (Atoll__JobState)j.state : ATOLL__JOB_STATE__JOB_PENDING;
    if (existing) store_job_clear(&j);
    r.message = existing ? "already submitted with this request id" : "queued";
    coord_reply(c, p, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY, &r.base);
}

typedef struct {
    msg_arena *a;
    Atoll__JobsReply *r;
    size_t cap;
} jobs_ctx;

static int add_job(void *ctx, store_job *j)
{
    jobs_ctx *x = ctx;
    if (x->r->n_jobs == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        Atoll__Job **v = msg_alloc(x->a, cap * sizeof *v);
        if (x->r->n_jobs) memcpy(v, x->r->jobs, x->r->n_jobs * sizeof *v);
        x->r->jobs = v;
        x->cap = cap;
    }
    /* The callback's job is cleared afterwards: copy what the message borrows. */
    store_job *keep = msg_alloc(x->a, sizeof *keep);
    *keep = *j;
    keep->spec = msg_alloc(x->a, j->spec_len + 1);
    memcpy(keep->spec, j->spec, j->spec_len);
    Atoll__Job *job = msg_alloc(x->a, sizeof *job);
    coord_job_msg(keep, job, NULL, x->a);
    x->r->jobs[x->r->n_jobs++] = job;
    return 0;
}

/* The ranks of an active job's placement: straggler scores and watchdog state. */
static void job_ranks(coord *c, uint64_t id, Atoll__Job *out, msg_arena *a)
{
    live_job *lj = jobs_live(c, id);
    if (!lj || jobs_live_ranks(c, lj)) return;
    out->world = lj->nranks;
    out->ranks = msg_alloc(a, sizeof *out->ranks * (size_t)(lj->nranks + 1));
    int64_t now = c->now();
    for (int i = 0; i < lj->nranks; i++) {
        const live_rank *r = &lj->ranks[i];
        Atoll__RankHealth *h = msg_alloc(a, sizeof *h);
        atoll__rank_health__init(h);
        h->rank = i;
        h->node = (char *)r->node;
        h->compute_ms = r->compute_ms;
        h->score = r->score;
        h->straggler = r->straggler;
        char what[200];
        hang_describe(r, what, sizeof what);
        h->watch = arena_strdup(a, r->watch ? what : "");
        h->watch_age_ms = r->watch ? now - r->watch_ms : 0;
        out->ranks[out->n_ranks++] = h;
    }
}

typedef struct {
    msg_arena *a;
    Atoll__Job *job;
    size_t cap;
} history_ctx;

static int add_restart(void *ctx, const store_restart *r)
{
    history_ctx *x = ctx;
    if (x->job->n_history == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 8;
        Atoll__RestartRecord **v = msg_alloc(x->a, cap * sizeof *v);
        if (x->job->n_history) memcpy(v, x->job->history, x->job->n_history * sizeof *v);
        x->job->history = v;
        x->cap = cap;
    }
    Atoll__RestartRecord *h = msg_alloc(x->a, sizeof *h);
    atoll__restart_record__init(h);
    h->epoch = r->epoch;
    h->cause = arena_strdup(x->a, r->cause);
    h->detail = arena_strdup(x->a, r->detail);
    h->node = arena_strdup(x->a, r->node);
    h->rank = r->rank;
    h->fault_ms = r->fault_ms;
    h->detected_ms = r->detected_ms;
    h->running_ms = r->running_ms > 0 ? r->running_ms : 0;
    h->steps_recomputed = r->steps_recomputed;
    h->from_iteration = r->from_iteration;
    h->dp = r->dp;
    h->counted = r->counted;
    x->job->history[x->job->n_history++] = h;
    return 0;
}

void coord_job_detail(coord *c, const store_job *j, Atoll__Job *out, msg_arena *a)
{
    job_ranks(c, j->id, out, a);
    out->max_restarts = jobs_max_restarts(c, out->spec);
    history_ctx x = { a, out, 0 };
    store_restarts_each(c->st, j->id, add_restart, &x);
    Atoll__Goodput *g = msg_alloc(a, sizeof *g);
    goodput_of(c, j, g);
    out->goodput = g;
}

static void reply_one_job(coord *c, coord_peer *p, const store_job *j)
{
    msg_arena a = { 0 };
    Atoll__JobsReply r = ATOLL__JOBS_REPLY__INIT;
    jobs_ctx x = { &a, &r, 0 };
    add_job(&x, (store_job *)j);
    coord_job_detail(c, j, r.jobs[0], &a);
    /* One job: its latest step in full (every stage's bubble, FLOP/s, memory). */
    Atoll__JobMetrics *mt = msg_alloc(&a, sizeof *mt);
    if (series_latest(c, j->id, mt, &a) == 0) r.jobs[0]->metrics = mt;
    coord_reply(c, p, ATOLL__MSG_TYPE__MSG_JOBS_REPLY, &r.base);
    msg_arena_free(&a);
}

static void handle_jobs(coord *c, coord_peer *p, Atoll__JobsRequest *m)
{
    if (m->job) {
        store_job j;
        if (coord_find_job(c, p, m->job, &j)) return;
        reply_one_job(c, p, &j);
        store_job_clear(&j);
        return;
    }
    /* A page at a time: one reply's cost stays bounded however many jobs are stored. */
    msg_arena a = { 0 };
    Atoll__JobsReply r = ATOLL__JOBS_REPLY__INIT;
    jobs_ctx x = { &a, &r, 0 };
    unsigned limit = m->limit && m->limit < COORD_JOBS_PAGE ? m->limit : COORD_JOBS_PAGE;
    if (store_jobs_page(c->st, m->after_id, limit + 1, add_job, &x)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot list jobs: %s", store_errmsg(c->st));
    } else {
        if (r.n_jobs > limit) { /* the one past the page only says there is more */
            r.n_jobs = limit;
            r.next_after_id = r.jobs[limit - 1]->id;
        }
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_JOBS_REPLY, &r.base);
    }
    msg_arena_free(&a);
}

static void handle_cancel(coord *c, coord_peer *p, Atoll__CancelRequest *m)
{
    store_job j;
    char err[512];
    int code = jobs_cancel(c, m->job, m->checkpoint, &j, err, sizeof err);
    if (code) {
        coord_error(c, p, code, "%s", err);
        return;
    }
    reply_one_job(c, p, &j);
    store_job_clear(&j);
}

static void handle_layout(coord *c, coord_peer *p, Atoll__LayoutRequest *m)
{
    store_job j;
    if (coord_find_job(c, p, m->job, &j)) return;
    Atoll__JobLayout *l = coord_layout(c, j.id, j.epoch);
    if (!l) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "job %llu has no layout yet (%s: %s)",
                    (unsigned long long)j.id, msg_job_state_name(j.state), j.message);
    } else {
        Atoll__LayoutReply rep = ATOLL__LAYOUT_REPLY__INIT;
        rep.layout = l;
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_LAYOUT_REPLY, &rep.base);
        atoll__job_layout__free_unpacked(l, NULL);
    }
    store_job_clear(&j);
}

typedef struct {
    msg_arena *a;
    Atoll__MetricsReply *r;
    size_t cap;
    double theory;
    int64_t settled;
} steps_ctx;

static int add_step(void *ctx, const store_step *st)
{
    steps_ctx *x = ctx;
    if (!series_shown(st, x->settled)) return 0;
    if (x->r->n_steps == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 256;
        Atoll__JobMetrics **v = msg_alloc(x->a, cap * sizeof *v);
        if (x->r->n_steps) memcpy(v, x->r->steps, x->r->n_steps * sizeof *v);
        x->r->steps = v;
        x->cap = cap;
    }
    Atoll__JobMetrics *m = msg_alloc(x->a, sizeof *m);
    series_msg(st, x->theory, m, x->a);
    x->r->steps[x->r->n_steps++] = m;
    return 0;
}

static void handle_metrics(coord *c, coord_peer *p, Atoll__MetricsRequest *m)
{
    store_job j;
    if (coord_find_job(c, p, m->job, &j)) return;
    msg_arena a = { 0 };
    Atoll__MetricsReply rep = ATOLL__METRICS_REPLY__INIT;
    rep.job = j.id;
    steps_ctx x = { &a, &rep, 0, j.bubble_theory, series_settled(c, j.id) };
    if (store_steps_each(c->st, j.id, m->after, m->limit > 10000 || !m->limit ? 10000 : m->limit, add_step, &x))
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot read metrics: %s", store_errmsg(c->st));
    else
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_METRICS_REPLY, &rep.base);
    msg_arena_free(&a);
    store_job_clear(&j);
}

typedef struct {
    msg_arena *a;
    Atoll__Event **v;
    size_t n, cap;
} events_ctx;

static int add_event(void *ctx, const store_event *e)
{
    events_ctx *x = ctx;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        Atoll__Event **v = msg_alloc(x->a, cap * sizeof *v);
        if (x->n) memcpy(v, x->v, x->n * sizeof *v);
        x->v = v;
        x->cap = cap;
    }
    Atoll__Event *ev = msg_alloc(x->a, sizeof *ev);
    atoll__event__init(ev);
    ev->id = e->id;
    ev->time_ms = e->time_ms;
    ev->kind = arena_strdup(x->a, e->kind);
    ev->subject = arena_strdup(x->a, e->subject);
    ev->message = arena_strdup(x->a, e->message);
    x->v[x->n++] = ev;
    return 0;
}

static void handle_events(coord *c, coord_peer *p, Atoll__EventsRequest *m)
{
    msg_arena a = { 0 };
    events_ctx x = { &a, NULL, 0, 0 };
    if (store_events_each(c->st, m->after_id, m->limit > 100000 ? 100000 : m->limit, add_event, &x)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot read events: %s", store_errmsg(c->st));
    } else {
        Atoll__EventsReply r = ATOLL__EVENTS_REPLY__INIT;
        r.events = x.v;
        r.n_events = x.n;
        coord_reply(c, p, ATOLL__MSG_TYPE__MSG_EVENTS_REPLY, &r.base);
    }
    msg_arena_free(&a);
}

/* ---- entry ---- */

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void coord_dispatch(coord *c, coord_peer *p, uint16_t type, const uint8_t *payload, size_t len)
{
    int64_t t0 = mono_us();
    c->frames++;
    const ProtobufCMessageDescriptor *d = msg_descriptor(type);
    int served = type == ATOLL__MSG_TYPE__MSG_REGISTER || type == ATOLL__MSG_TYPE__MSG_HEARTBEAT ||
                 type == ATOLL__MSG_TYPE__MSG_LAUNCH_ACK || type == ATOLL__MSG_TYPE__MSG_NODES ||
                 type == ATOLL__MSG_TYPE__MSG_DRAIN || type == ATOLL__MSG_TYPE__MSG_SUBMIT ||
                 type == ATOLL__MSG_TYPE__MSG_JOBS || type == ATOLL__MSG_TYPE__MSG_CANCEL ||
                 type == ATOLL__MSG_TYPE__MSG_LAYOUT || type == ATOLL__MSG_TYPE__MSG_EVENTS ||
                 type == ATOLL__MSG_TYPE__MSG_KV_SET || type == ATOLL__MSG_TYPE__MSG_KV_GET ||
                 type == ATOLL__MSG_TYPE__MSG_KV_ADD || type == ATOLL__MSG_TYPE__MSG_METRICS ||
                 type == ATOLL__MSG_TYPE__MSG_LOGS || type == ATOLL__MSG_TYPE__MSG_LOG_DATA;
    if (!d || !served) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_UNKNOWN_TYPE,
                    "message type %u (%s) is not a request the coordinator serves", type, msg_type_name(type));
        return;
    }
    int kv = type == ATOLL__MSG_TYPE__MSG_KV_SET || type == ATOLL__MSG_TYPE__MSG_KV_GET ||
             type == ATOLL__MSG_TYPE__MSG_KV_ADD;
    if (p->role == ATOLL__ROLE__ROLE_RANK && !kv) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                    "a rank's connection (job secret) may only use its job's rendezvous keys, not %s",
                    msg_type_name(type));
        return;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, payload);
    if (!m) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_BAD_MESSAGE,
                    "the %zu-byte payload of a %s frame (type %u) does not decode as atoll.%s",
                    len, msg_type_name(type), type, msg_type_name(type));
        return;
    }
    switch (type) {
    case ATOLL__MSG_TYPE__MSG_REGISTER: handle_register(c, p, (Atoll__Register *)m); break;
    case ATOLL__MSG_TYPE__MSG_HEARTBEAT: handle_heartbeat(c, p, (Atoll__Heartbeat *)m); break;
    case ATOLL__MSG_TYPE__MSG_LAUNCH_ACK: handle_launch_ack(c, p, (Atoll__LaunchAck *)m); break;
    case ATOLL__MSG_TYPE__MSG_NODES: handle_nodes(c, p, (Atoll__NodesRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_DRAIN: handle_drain(c, p, (Atoll__DrainRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_SUBMIT: handle_submit(c, p, (Atoll__SubmitRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_JOBS: handle_jobs(c, p, (Atoll__JobsRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_CANCEL: handle_cancel(c, p, (Atoll__CancelRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_LAYOUT: handle_layout(c, p, (Atoll__LayoutRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_EVENTS: handle_events(c, p, (Atoll__EventsRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_KV_SET: rendezvous_set(c, p, (Atoll__KvSet *)m); break;
    case ATOLL__MSG_TYPE__MSG_KV_GET: rendezvous_get(c, p, (Atoll__KvGet *)m); break;
    case ATOLL__MSG_TYPE__MSG_KV_ADD: rendezvous_add(c, p, (Atoll__KvAdd *)m); break;
    case ATOLL__MSG_TYPE__MSG_METRICS: handle_metrics(c, p, (Atoll__MetricsRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_LOGS: logs_request(c, p, (Atoll__LogsRequest *)m); break;
    case ATOLL__MSG_TYPE__MSG_LOG_DATA: logs_data(c, p, (Atoll__LogData *)m); break;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    if (type == ATOLL__MSG_TYPE__MSG_HEARTBEAT) coord_hist_add(&c->hb_hist, (uint64_t)(mono_us() - t0));
}

void coord_peer_closed(coord *c, coord_peer *p)
{
    rendezvous_peer_closed(c, p);
    logs_peer_closed(c, p);
    if (p->node && p->node->peer == p) {
        log_info("node %s disconnected (%s); liveness now follows its silence", p->node->name, p->address);
        p->node->peer = NULL;
    }
    p->node = NULL;
}

/* ---- periodic ---- */

static void on_live_change(void *ctx, reg_node *n, int from, int to)
{
    coord *c = ctx;
    (void)from;
    double silent = (c->now() - n->last_seen_ms) / 1000.0;
    if (to == NODE_SUSPECT)
        set_live(c, n, to, "node.suspect", "no heartbeat for %.1f s (dead after %.1f s)", silent,
                 c->o.node_timeout_ms / 1000.0);
    else if (to == NODE_DEAD) {
        char why[128];
        snprintf(why, sizeof why, "no heartbeat for %.1f s (node timeout %.1f s)", silent, c->o.node_timeout_ms / 1000.0);
        set_live(c, n, to, "node.dead", "%s", why);
        jobs_node_lost(c, n->name, n->last_seen_ms, why);
    }
}

void coord_tick(coord *c)
{
    int64_t now = c->now();
    registry_tick(&c->reg, now, on_live_change, c);
    rendezvous_expire(c, now);
    logs_expire(c, now);
    series_flush(c);
    jobs_tick(c);
    restart_tick(c);
    hang_tick(c);
    straggler_tick(c);
    if (c->schedule_pending) sched_run(c);
}
