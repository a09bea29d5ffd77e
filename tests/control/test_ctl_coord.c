/* The coordinator's handlers without sockets: registration rules, job spec
 * validation (each rule refused with its own message, nothing stored), naive
 * placement and Megatron process groups, liveness -> job restart, cancel,
 * rendezvous waits, and malformed requests. Time is a fake clock. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coord.h"
#include "jobs.h"
#include "supervise.h"
#include "log.h"
#include "msg.h"
#include "scheduler.h"
#include "slurm.h"
#include "topo.h"

typedef struct test_peer {
    coord_peer p;          /* first: the recorder casts back */
    uint16_t type;         /* last frame sent to this peer */
    uint8_t *buf;
    size_t len;
    int frames, launches, stops, asks;
} test_peer;

static int64_t fake_ms = 1000000;
static int64_t fake_now(void) { return fake_ms; }

static void record(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c;
    test_peer *t = (test_peer *)p;
    t->frames++;
    t->launches += type == ATOLL__MSG_TYPE__MSG_LAUNCH;
    t->stops += type == ATOLL__MSG_TYPE__MSG_STOP;
    t->asks += type == ATOLL__MSG_TYPE__MSG_REPORT_NOW;
    t->type = type;
    free(t->buf);
    t->len = protobuf_c_message_get_packed_size(m);
    t->buf = malloc(t->len + 1);
    protobuf_c_message_pack(m, t->buf);
}

static ProtobufCMessage *last(test_peer *t, uint16_t want)
{
    if (t->type != want) return NULL;
    return protobuf_c_message_unpack(msg_descriptor(t->type), NULL, t->len, t->buf);
}

/* The message of the Error last sent to t, or "" when the last frame was no Error. */
static const char *last_error(test_peer *t, int *code)
{
    static char text[512];
    text[0] = 0;
    Atoll__Error *e = (Atoll__Error *)last(t, ATOLL__MSG_TYPE__MSG_ERROR);
    if (e) {
        snprintf(text, sizeof text, "%s", e->message);
        if (code) *code = e->code;
        atoll__error__free_unpacked(e, NULL);
    }
    return text;
}

static void send_msg(coord *c, test_peer *t, uint16_t type, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n + 1);
    protobuf_c_message_pack(m, b);
    coord_dispatch(c, &t->p, type, b, n);
    free(b);
}

static uint64_t incarnation; /* of the agent process registering */

static void do_register(coord *c, test_peer *t, const char *name, const char *profile)
{
    topo_node n;
    char err[256];
    topo_simulate(&n, profile, name, NULL, err, sizeof err);
    msg_arena a = { 0 };
    Atoll__Node node;
    msg_node_from_topo(&node, &n, 0, &a);
    Atoll__Register r = ATOLL__REGISTER__INIT;
    r.node = &node;
    r.incarnation = incarnation;
    send_msg(c, t, ATOLL__MSG_TYPE__MSG_REGISTER, &r.base);
    msg_arena_free(&a);
}

static void heartbeat(coord *c, test_peer *t, Atoll__RankMetrics *m)
{
    Atoll__Heartbeat hb = ATOLL__HEARTBEAT__INIT;
    hb.seq = 1;
    if (m) {
        hb.n_ranks = 1;
        hb.ranks = &m;
    }
    send_msg(c, t, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base);
}

/* Rank 0 of (job, epoch) reports iterations first.. first+n-1, one heartbeat and
 * one tick per step of step_ms (the fake clock advances by it). */
static void report_steps(coord *c, test_peer *t, uint64_t job, uint32_t epoch, int64_t first, int n, double step_ms)
{
    for (int k = 0; k < n; k++) {
        fake_ms += (int64_t)step_ms;
        Atoll__RankMetrics sm = ATOLL__RANK_METRICS__INIT;
        sm.job = job;
        sm.epoch = epoch;
        sm.rank = 0;
        sm.iteration = first + k;
        sm.step_ms = step_ms;
        sm.time_ms = fake_ms;
        heartbeat(c, t, &sm);
        coord_tick(c);
    }
}

static void heartbeat_exit(coord *c, test_peer *t, Atoll__RankExit *e)
{
    Atoll__Heartbeat hb = ATOLL__HEARTBEAT__INIT;
    hb.seq = 2;
    hb.n_exits = 1;
    hb.exits = &e;
    send_msg(c, t, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hb.base);
}

static uint64_t last_relayed(test_peer *t)
{
    Atoll__HeartbeatAck *a = (Atoll__HeartbeatAck *)last(t, ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK);
    uint64_t r = a ? a->relayed : (uint64_t)-1;
    if (a) atoll__heartbeat_ack__free_unpacked(a, NULL);
    return r;
}

static void base_cfg(atoll_config *cfg)
{
    cfg_defaults(cfg);
    cfg->num_layers = 4;
    cfg->hidden_size = 64;
    cfg->num_attention_heads = 8;
    cfg->seq_length = 32;
    cfg->tensor_model_parallel_size = 2;
    cfg->pipeline_model_parallel_size = 2;
    cfg->global_batch_size = 16;
    cfg->num_gpus = 16;
}

static int max_restarts = -1; /* the spec's: -1 the coordinator's default */
static char **submit_env;      /* the spec's env (atoll submit --env) */
static size_t submit_n_env;
static char *submit_dependency; /* the spec's --dependency */
static int64_t submit_time_limit; /* the spec's --time, seconds */

/* Submits and returns the job id, or 0 with the error in *err. */
static uint64_t submit(coord *c, test_peer *t, const atoll_config *cfg, const char **err)
{
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, cfg, "t");
    spec.max_restarts = max_restarts;
    spec.env = submit_env;
    spec.n_env = submit_n_env;
    spec.dependency = submit_dependency ? submit_dependency : "";
    spec.time_limit_s = submit_time_limit;
    Atoll__SubmitRequest req = ATOLL__SUBMIT_REQUEST__INIT;
    req.spec = &spec;
    send_msg(c, t, ATOLL__MSG_TYPE__MSG_SUBMIT, &req.base);
    Atoll__SubmitReply *r = (Atoll__SubmitReply *)last(t, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY);
    *err = last_error(t, NULL);
    if (!r) return 0;
    uint64_t id = r->job;
    atoll__submit_reply__free_unpacked(r, NULL);
    return id;
}

static int job_state(coord *c, uint64_t id, store_job *out)
{
    if (store_job_get(c->st, id, out)) return -1;
    return out->state;
}

static int count_kind(void *ctx, const store_event *e)
{
    const char **k = ctx;
    if (!strcmp(e->kind, k[0])) k[1]++;
    return 0;
}

static int events_of(coord *c, const char *kind)
{
    const char *k[2] = { kind, NULL };
    store_events_each(c->st, 0, 0, count_kind, k);
    return (int)(intptr_t)k[1];
}

typedef struct {
    const char *kind, *want;
    int found;
} event_match;

static int match_event(void *ctx, const store_event *e)
{
    event_match *m = ctx;
    if (!strcmp(e->kind, m->kind) && strstr(e->message, m->want)) m->found++;
    return 0;
}

/* Events of `kind` whose message holds `want`. */
static int events_saying(coord *c, const char *kind, const char *want)
{
    event_match m = { kind, want, 0 };
    store_events_each(c->st, 0, 0, match_event, &m);
    return m.found;
}

/* A coordinator on the fake clock with two agents, n1 and n2 (8 H100s each),
 * and a CLI peer. */
static void two_nodes(coord *c, test_peer *w1, test_peer *w2, test_peer *cli)
{
    coord_opts o;
    coord_opts_defaults(&o);
    o.suspect_ms = 2000;
    char err[256];
    CHECK(coord_init(c, &o, ":memory:", err, sizeof err) == 0, "%s", err);
    c->now = fake_now;
    c->send = record;
    w1->p.role = w2->p.role = ATOLL__ROLE__ROLE_WORKER;
    cli->p.role = ATOLL__ROLE__ROLE_CLI;
    do_register(c, w1, "n1", "dgx-h100");
    do_register(c, w2, "n2", "dgx-h100");
}

static void two_nodes_free(coord *c, test_peer *w1, test_peer *w2, test_peer *cli)
{
    test_peer *all[] = { w1, w2, cli };
    for (int i = 0; i < 3; i++) free(all[i]->buf);
    coord_free(c);
}

/* Submits cfg, places it, and has its rank 0 on n1 report step 3: running on all
 * 16 GPUs. Returns the job id. */
static uint64_t run_on_both(coord *c, test_peer *w1, test_peer *cli, const atoll_config *cfg)
{
    const char *e;
    uint64_t id = submit(c, cli, cfg, &e);
    CHECK(id > 0, "submit refused: %s", e);
    coord_tick(c);
    Atoll__RankMetrics m = ATOLL__RANK_METRICS__INIT;
    m.job = id;
    m.iteration = 3;
    fake_ms += 500;
    heartbeat(c, w1, &m);
    coord_tick(c);
    store_job j;
    CHECK(job_state(c, id, &j) == ATOLL__JOB_STATE__JOB_RUNNING && j.world == 16, "running on both: %d %d", j.state,
          j.world);
    store_job_clear(&j);
    return id;
}

/* A node Slurm drains is lost to atoll while its agent still heartbeats: the job
 * restarts without it (DP shrunk) and nothing is placed there until Slurm
 * returns it to service; then the job can grow back. */
static void test_slurm_states(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli);
    atoll_config cfg;
    base_cfg(&cfg);
    uint64_t id = run_on_both(&c, &w1, &cli, &cfg);
    store_job j;

    /* states of nodes atoll does not know are skipped; n1 in service changes nothing */
    slurm_node v[3] = { { .name = "n1", .state = "MIXED" },
                        { .name = "n2", .state = "ALLOCATED+DRAIN", .reason = "atoll test", .out = 1 },
                        { .name = "gpu9", .state = "DOWN", .out = 1 } };
    slurm_watch_apply(&c, v, 1);
    CHECK(events_of(&c, "node.slurm_lost") == 0 && job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_RUNNING,
          "an in-service node is no event");
    store_job_clear(&j);
    slurm_watch_apply(&c, v, 3);
    reg_node *n2 = registry_find(&c.reg, "n2");
    CHECK(n2->slurm_out && registry_state(n2) == NODE_DRAINED && !n2->drained, "n2 drained by Slurm: state %d",
          registry_state(n2));
    CHECK(events_saying(&c, "node.slurm_lost", "Slurm state ALLOCATED+DRAIN (reason: atoll test): treated as lost") == 1,
          "node event with Slurm's state and reason");
    CHECK(events_saying(&c, "job.node_lost", "node n2 lost: Slurm state ALLOCATED+DRAIN (reason: atoll test)") == 1,
          "the job's fault names the node, Slurm's state and reason");
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_RESTARTING, "restarting: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    CHECK(w1.stops >= 1 && w2.stops >= 1, "both nodes told to stop the ranks (n2's agent is alive): %d %d", w1.stops,
          w2.stops);
    /* The same state again, or a new reason, is not a second loss. */
    slurm_watch_apply(&c, v, 3);
    snprintf(v[1].state, sizeof v[1].state, "IDLE+DRAIN");
    slurm_watch_apply(&c, v, 3);
    CHECK(events_of(&c, "node.slurm_lost") == 1 && events_of(&c, "job.node_lost") == 1, "one loss: %d",
          events_of(&c, "node.slurm_lost"));
    CHECK(strstr(n2->slurm_state, "IDLE+DRAIN (reason: atoll test)"), "newest Slurm state kept: %s", n2->slurm_state);
    msg_arena a = { 0 };
    Atoll__NodesReply nr;
    CHECK(coord_nodes_reply(&c, "n2", &nr, &a) == 0 && !strcmp(nr.nodes[0]->slurm_state, "IDLE+DRAIN (reason: atoll test)"),
          "atoll nodes shows Slurm's state");
    msg_arena_free(&a);

    /* Both agents report the ranks gone and keep heartbeating: the job is placed on n1 alone. */
    fake_ms += 500;
    heartbeat(&c, &w1, NULL);
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_STARTING && j.world == 8 && j.restarts == 1,
          "placed again without n2: %d world %d (%s)", j.state, j.world, j.message);
    store_job_clear(&j);
    CHECK(registry_state(n2) == NODE_DRAINED, "a heartbeat does not undo Slurm's drain");
    CHECK(sched_job_uses_node(&c, &(store_job){ .id = id, .epoch = 1 }, "n1") &&
              !sched_job_uses_node(&c, &(store_job){ .id = id, .epoch = 1 }, "n2"),
          "epoch 1 on n1 only");

    /* Slurm resumes it: placeable again, so the job can grow back to DP 4 at its next checkpoint */
    atoll_config jc;
    CHECK(job_state(&c, id, &j) >= 0 && jobs_config(&j, &jc) == 0 && sched_grow_dp(&c, &j, &jc, 2) == 2,
          "no room to grow while Slurm keeps n2 drained");
    snprintf(v[1].state, sizeof v[1].state, "IDLE");
    v[1].reason[0] = 0;
    v[1].out = 0;
    slurm_watch_apply(&c, v, 2);
    CHECK(!n2->slurm_out && registry_state(n2) == NODE_ALIVE && !n2->slurm_state[0], "n2 back: state %d",
          registry_state(n2));
    CHECK(events_saying(&c, "node.slurm_returned", "Slurm state IDLE: open for new work again") == 1, "returned event");
    CHECK(sched_grow_dp(&c, &j, &jc, 2) == 4, "room to grow back to DP 4 on n2: %d", sched_grow_dp(&c, &j, &jc, 2));
    store_job_clear(&j);

    two_nodes_free(&c, &w1, &w2, &cli);
}

/* A restart shrinks DP only as far as memory allows: with ZeRO-1 fewer DP ranks
 * each hold more optimizer state, so a layout that fits at DP 4 may not at DP 2.
 * Then the job waits for room instead of being placed where every rank would
 * refuse it, and goes back to its full size when the node returns. */
static void test_shrink_memory(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli);
    atoll_config cfg;
    base_cfg(&cfg); /* tp 2, pp 2 on 16 GPUs: DP 4 */
    cfg.num_layers = 40;
    cfg.hidden_size = 8192;
    cfg.num_attention_heads = 64;
    cfg.seq_length = 2048;
    cfg.vocab_size = 50304;
    cfg.bf16 = 1;
    cfg.use_distributed_optimizer = 1;
    cfg.recompute_granularity = RECOMPUTE_FULL;
    char why[512];
    atoll_config half = cfg;
    half.num_gpus = 8;
    CHECK(sched_fits_memory(&c, &cfg, why, sizeof why) && !sched_fits_memory(&c, &half, why, sizeof why),
          "premise: fits an H100 at DP 4, not at DP 2 (%s)", why);
    uint64_t id = run_on_both(&c, &w1, &cli, &cfg); /* accepted at DP 4 */
    store_job j;
    slurm_node v[2] = { { .name = "n1", .state = "MIXED" },
                        { .name = "n2", .state = "DOWN", .reason = "atoll test", .out = 1 } };
    slurm_watch_apply(&c, v, 2);
    fake_ms += 500;
    heartbeat(&c, &w1, NULL);
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_PENDING && j.epoch == 1 &&
              strstr(j.message, "not placed smaller: at data-parallel size 2 the layout needs about ") &&
              strstr(j.message, "more than the 79.65 GiB of the largest GPU on the cluster (NVIDIA H100 80GB HBM3); "
                                "waiting for room for a larger one"),
          "waits rather than shrink past memory: state %d epoch %u (%s)", j.state, j.epoch, j.message);
    store_job_clear(&j);
    snprintf(v[1].state, sizeof v[1].state, "IDLE");
    v[1].reason[0] = 0;
    v[1].out = 0;
    slurm_watch_apply(&c, v, 2);
    fake_ms += 500;
    heartbeat(&c, &w1, NULL);
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_STARTING && j.world == 16 && j.epoch == 1,
          "placed again at full size once n2 returned: %d world %d (%s)", j.state, j.world, j.message);
    store_job_clear(&j);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* Rank `rank` of pipeline stage `stage` reports `it` through agent t. */
static void stage_report(coord *c, test_peer *t, uint64_t job, int rank, int stage, int64_t it, double loss)
{
    Atoll__RankMetrics m = ATOLL__RANK_METRICS__INIT;
    m.job = job;
    m.rank = rank;
    m.stage = stage;
    m.iteration = it;
    m.loss = loss;
    m.bubble_measured = 0.1 * (stage + 1);
    heartbeat(c, t, &m);
}

/* The iterations and losses MetricsReply gives after `after`, as "it:loss ..." */
static const char *series_text(coord *c, test_peer *cli, uint64_t job, int64_t after)
{
    static char text[256];
    Atoll__MetricsRequest req = ATOLL__METRICS_REQUEST__INIT;
    req.job = job;
    req.after = after;
    send_msg(c, cli, ATOLL__MSG_TYPE__MSG_METRICS, &req.base);
    Atoll__MetricsReply *r = (Atoll__MetricsReply *)last(cli, ATOLL__MSG_TYPE__MSG_METRICS_REPLY);
    size_t at = 0;
    text[0] = 0;
    for (size_t i = 0; r && i < r->n_steps && at < sizeof text; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%lld:%g", i ? " " : "", (long long)r->steps[i]->step,
                               r->steps[i]->loss);
    if (r) atoll__metrics_reply__free_unpacked(r, NULL);
    return text;
}

/* A series shows a step once its reports are in. A step that only the second
 * pipeline stage has reported (rank 0's loss still on its way) is held back, not
 * sent with a loss of 0 that a client reading with `after` would keep; it comes
 * once rank 0's report does. */
static void test_series_settled(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli);
    atoll_config cfg;
    base_cfg(&cfg); /* tp 2, pp 2: ranks 0-7 stage 0 on n1, 8-15 stage 1 on n2 */
    uint64_t id = run_on_both(&c, &w1, &cli, &cfg); /* step 3: rank 0 only */
    stage_report(&c, &w1, id, 0, 0, 4, 3.5);
    stage_report(&c, &w2, id, 8, 1, 4, 0);
    stage_report(&c, &w2, id, 8, 1, 5, 0); /* rank 0's step 5 not in yet */
    coord_tick(&c);
    const char *got = series_text(&c, &cli, id, 0);
    CHECK(!strcmp(got, "3:0 4:3.5"), "steps 3 and 4, step 5 held back: '%s'", got);
    stage_report(&c, &w1, id, 0, 0, 5, 3.25);
    coord_tick(&c);
    got = series_text(&c, &cli, id, 4);
    CHECK(!strcmp(got, "5:3.25"), "step 5 once rank 0 reported it: '%s'", got);
    /* A step's ideal bubble is rank 0's for that step (a ramp's smaller batch, a shrunk dp: fewer or more
     * micro-batches), the job's for a step that came without one; the job's follows the newest step. */
    Atoll__MetricsRequest req = ATOLL__METRICS_REQUEST__INIT;
    req.job = id;
    req.after = 4;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_METRICS, &req.base);
    Atoll__MetricsReply *r = (Atoll__MetricsReply *)last(&cli, ATOLL__MSG_TYPE__MSG_METRICS_REPLY);
    CHECK(r && r->n_steps == 1 && fabs(r->steps[0]->bubble_theory - 0.2) < 1e-12, "step 5's theory, the job's: %g",
          r && r->n_steps ? r->steps[0]->bubble_theory : -1);
    if (r) atoll__metrics_reply__free_unpacked(r, NULL);
    Atoll__RankMetrics m = ATOLL__RANK_METRICS__INIT;
    m.job = id, m.rank = 0, m.stage = 0, m.iteration = 6, m.loss = 3.0, m.bubble_theory = 0.5;
    heartbeat(&c, &w1, &m);
    stage_report(&c, &w2, id, 8, 1, 6, 0);
    coord_tick(&c);
    req.after = 5;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_METRICS, &req.base);
    r = (Atoll__MetricsReply *)last(&cli, ATOLL__MSG_TYPE__MSG_METRICS_REPLY);
    CHECK(r && r->n_steps == 1 && r->steps[0]->bubble_theory == 0.5 && r->steps[0]->n_stages == 2 &&
              r->steps[0]->stages[1]->theory == 0.5, "step 6's theory, its own: %g",
          r && r->n_steps ? r->steps[0]->bubble_theory : -1);
    if (r) atoll__metrics_reply__free_unpacked(r, NULL);
    store_job j;
    CHECK(job_state(&c, id, &j) >= 0 && j.bubble_theory == 0.5, "the job's theory after step 6: %g", j.bubble_theory);
    store_job_clear(&j);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* The data-parallel sizes a restart may shrink to (or grow back to) are those
 * the ranks accept: whole micro-batches per DP rank, a multiple of pp of them
 * when interleaved, and every batch of a --rampup-batch-size ramp or a
 * --step-batch-size-schedule whole. */
static void test_dp_fits(void)
{
    atoll_config cfg;
    base_cfg(&cfg); /* tp 2, pp 2, global batch 16, micro-batch 1 */
    CHECK(sched_dp_fits(&cfg, 4) && sched_dp_fits(&cfg, 2) && !sched_dp_fits(&cfg, 3) && !sched_dp_fits(&cfg, 0),
          "global batch 16: dp 4 and 2, not 3 or 0");
    cfg.global_batch_size = 24;
    snprintf(cfg.rampup_batch_size, sizeof cfg.rampup_batch_size, "4 4 100");
    CHECK(sched_dp_fits(&cfg, 4) && sched_dp_fits(&cfg, 2) && !sched_dp_fits(&cfg, 3),
          "a ramp from 4 by 4 to 24: dp 3 divides 24 but not 4");
    cfg.rampup_batch_size[0] = 0;
    cfg.global_batch_size = 0; /* a step schedule's last batch is the global one: 24 */
    snprintf(cfg.step_batch_size_schedule, sizeof cfg.step_batch_size_schedule, "0:6 1000:12 2000:24");
    CHECK(sched_dp_fits(&cfg, 6) && sched_dp_fits(&cfg, 3) && !sched_dp_fits(&cfg, 4) && sched_dp_fits(&cfg, 2),
          "a schedule 6, 12, 24: dp 4 divides 12 and 24 but not 6");
    cfg.step_batch_size_schedule[0] = 0;
    cfg.global_batch_size = 36;
    cfg.num_layers_per_virtual_pipeline_stage = 1; /* 2 chunks per stage */
    CHECK(sched_dp_fits(&cfg, 6) && !sched_dp_fits(&cfg, 4) && sched_dp_fits(&cfg, 2),
          "interleaved: 36 / dp 4 = 9 micro-batches, not a multiple of pp 2");
    cfg.decrease_batch_size_if_needed = 1; /* dp 4 trains 32 of the 36 */
    CHECK(sched_dp_fits(&cfg, 4) && sched_dp_fits(&cfg, 5) && sched_dp_fits(&cfg, 18) && !sched_dp_fits(&cfg, 19),
          "--decrease-batch-size-if-needed: any dp with a round of pp micro-batches each (dp 18: 36 = 18 x 2)");
}

/* Submissions are checked against the largest GPU and NVLink island of the
 * nodes that are not dead; the coordinator keeps that view between submissions
 * and computes it again when a node registers, changes hardware or dies. */
static void test_cluster_view(void)
{
    coord c;
    static test_peer w1, w2, cli, w3;
    two_nodes(&c, &w1, &w2, &cli);
    char gpu[128];
    CHECK(sched_max_gpu_memory(&c, gpu, sizeof gpu) == 81559ULL << 20 && !strcmp(gpu, "NVIDIA H100 80GB HBM3") &&
              sched_max_island(&c) == 8, "two H100 nodes: %s, island %d", gpu, sched_max_island(&c));
    w3.p.role = ATOLL__ROLE__ROLE_WORKER;
    do_register(&c, &w3, "n3", "gb200-tray");
    CHECK(sched_max_gpu_memory(&c, gpu, sizeof gpu) == 189471ULL << 20 && !strcmp(gpu, "NVIDIA GB200"),
          "a GB200 tray joined: %s", gpu);
    for (int i = 0; i < 7; i++) { /* n3 falls silent until it is dead */
        fake_ms += 1000;
        heartbeat(&c, &w1, NULL);
        heartbeat(&c, &w2, NULL);
        coord_tick(&c);
    }
    CHECK(registry_state(registry_find(&c.reg, "n3")) == NODE_DEAD, "n3 dead");
    CHECK(sched_max_gpu_memory(&c, gpu, sizeof gpu) == 81559ULL << 20 && !strcmp(gpu, "NVIDIA H100 80GB HBM3"),
          "after n3 died: %s", gpu);
    do_register(&c, &w3, "n3", "gb200-tray");
    CHECK(sched_max_gpu_memory(&c, gpu, sizeof gpu) == 189471ULL << 20, "n3 back: %s", gpu);
    free(w3.buf);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* Jobs start in submission order: while the oldest waiting job (the head) cannot
 * be placed, a later one starts only where it leaves the head room; a job that
 * would not fit even the empty cluster holds nothing back. */
static void test_queue_order(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli); /* 16 GPUs */
    atoll_config cfg;
    const char *e;
    store_job j;
    uint64_t id[6];
    int gpus[6] = { 8, 64, 12, 4, 4, 4 }; /* running, huge, big (the head), fits, would starve big, the same */
    for (int k = 0; k < 6; k++) {
        base_cfg(&cfg);
        cfg.global_batch_size = 48; /* divisible at every data-parallel size here */
        cfg.num_gpus = gpus[k];
        id[k] = submit(&c, &cli, &cfg, &e);
        CHECK(id[k] > 0, "job of %d GPUs refused: %s", gpus[k], e);
        if (k == 0 || k == 3 || k == 4) coord_tick(&c); /* the last job submitted is tried on its own */
    }
    coord_tick(&c);
    const int want[6] = { ATOLL__JOB_STATE__JOB_STARTING, ATOLL__JOB_STATE__JOB_PENDING, ATOLL__JOB_STATE__JOB_PENDING,
                          ATOLL__JOB_STATE__JOB_STARTING, ATOLL__JOB_STATE__JOB_PENDING, ATOLL__JOB_STATE__JOB_PENDING };
    char behind[160];
    snprintf(behind, sizeof behind, "waiting behind job %llu (submitted earlier, waiting for 12 GPUs): later jobs "
             "start only on GPUs it leaves free (0 now)", (unsigned long long)id[2]);
    for (int k = 0; k < 6; k++) {
        CHECK(job_state(&c, id[k], &j) == want[k], "job %d (%d GPUs): state %d (%s)", k, gpus[k], j.state, j.message);
        if (k == 1) CHECK(strstr(j.message, "waiting for 64 GPUs"), "huge: %s", j.message);
        if (k == 2) CHECK(strstr(j.message, "waiting for 12 GPUs"), "the head: %s", j.message);
        if (k >= 4) CHECK(!strcmp(j.message, behind), "job %d: '%s'", k, j.message);
        store_job_clear(&j);
    }
    CHECK(c.sched_head == id[2], "the head is job %llu", (unsigned long long)c.sched_head);
    /* The first job ends: the head goes before the 4-GPU jobs that came after it. */
    Atoll__CancelRequest cr = ATOLL__CANCEL_REQUEST__INIT;
    cr.job = id[0];
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
    coord_tick(&c);
    CHECK(job_state(&c, id[2], &j) == ATOLL__JOB_STATE__JOB_STARTING && j.world == 12, "the head placed: %d (%s)",
          j.state, j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, id[4], &j) == ATOLL__JOB_STATE__JOB_PENDING && strstr(j.message, "waiting for 4 GPUs"),
          "the next one waits for room: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    CHECK(c.sched_head == id[4], "the head is now job %llu", (unsigned long long)c.sched_head);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* EASY backfill with --time: the head's reservation is free once the job holding
 * it has reached its limit, so a later job whose own limit ends before then may
 * use it; one with a longer limit, or none, waits behind the head. */
static void test_backfill_limits(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli); /* 16 GPUs */
    atoll_config cfg;
    const char *e;
    store_job j;
    base_cfg(&cfg);
    cfg.global_batch_size = 48;
    const struct { int gpus; int64_t limit_s; } jobs[5] = {
        { 8, 100 },  /* running: its limit frees the head's GPUs 100 s from now at the latest */
        { 12, 0 },   /* the head: needs some of the first job's GPUs */
        { 8, 200 },  /* ends after the reservation is free: waits behind the head */
        { 8, 0 },    /* no limit: waits behind the head */
        { 8, 10 },   /* ends before it: backfilled now */
    };
    uint64_t id[5];
    for (int k = 0; k < 5; k++) {
        cfg.num_gpus = jobs[k].gpus;
        submit_time_limit = jobs[k].limit_s;
        id[k] = submit(&c, &cli, &cfg, &e);
        CHECK(id[k] > 0, "job %d refused: %s", k, e);
        if (k < 2) coord_tick(&c);
    }
    submit_time_limit = 0;
    coord_tick(&c);
    const int want[5] = { ATOLL__JOB_STATE__JOB_STARTING, ATOLL__JOB_STATE__JOB_PENDING, ATOLL__JOB_STATE__JOB_PENDING,
                          ATOLL__JOB_STATE__JOB_PENDING, ATOLL__JOB_STATE__JOB_STARTING };
    for (int k = 0; k < 5; k++) {
        CHECK(job_state(&c, id[k], &j) == want[k], "job %d (%d GPUs, --time %lld s): state %d (%s)", k, jobs[k].gpus,
              (long long)jobs[k].limit_s, j.state, j.message);
        if (k == 2 || k == 3) CHECK(strstr(j.message, "waiting behind job"), "job %d: %s", k, j.message);
        store_job_clear(&j);
    }
    CHECK(c.sched_head == id[1], "the head is job %llu", (unsigned long long)c.sched_head);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* Submits cfg with `--dependency dep` (a format with one job id); 0 and *err when refused. */
static uint64_t submit_after(coord *c, test_peer *t, const atoll_config *cfg, const char *dep, uint64_t job,
                             const char **err)
{
    char text[64];
    snprintf(text, sizeof text, dep, (unsigned long long)job);
    submit_dependency = text;
    uint64_t id = submit(c, t, cfg, err);
    submit_dependency = NULL;
    return id;
}

/* --dependency: a job waits, holding no reservation, until the jobs it names have
 * ended as it asks; one whose condition can never hold is cancelled, or refused
 * when that is known at submission. */
static void test_dependency(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli); /* 16 GPUs */
    atoll_config cfg;
    base_cfg(&cfg);
    cfg.global_batch_size = 48;
    cfg.num_gpus = 4;
    const char *e;
    store_job j;
    char want[200];
    uint64_t a = submit(&c, &cli, &cfg, &e);
    coord_tick(&c);
    uint64_t ok = submit_after(&c, &cli, &cfg, "afterok:%llu", a, &e);
    uint64_t notok = submit_after(&c, &cli, &cfg, "afternotok:%llu", a, &e);
    cfg.num_gpus = 12; /* fits beside the first job: the two waiting ones reserve nothing */
    uint64_t big = submit(&c, &cli, &cfg, &e);
    CHECK(a && ok && notok && big, "submissions refused: %s", e);
    coord_tick(&c);
    snprintf(want, sizeof want, "waiting for job %llu to complete (--dependency afterok:%llu; it is starting)",
             (unsigned long long)a, (unsigned long long)a);
    CHECK(job_state(&c, ok, &j) == ATOLL__JOB_STATE__JOB_PENDING && !strcmp(j.message, want), "afterok: %d '%s'",
          j.state, j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, notok, &j) == ATOLL__JOB_STATE__JOB_PENDING && strstr(j.message, "to fail or be cancelled"),
          "afternotok: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, big, &j) == ATOLL__JOB_STATE__JOB_STARTING && c.sched_head == 0,
          "a later job is not held behind a dependency: %d (%s), head %llu", j.state, j.message,
          (unsigned long long)c.sched_head);
    store_job_clear(&j);
    /* refused at submission: what cannot parse, a job that is not there */
    cfg.num_gpus = 4;
    const struct { const char *dep, *says; } bad[] = {
        { "afterok:999", "invalid job spec: --dependency afterok:999: there is no job 999" },
        { "afterok:x", "--dependency 'afterok:x': 'x' after afterok: is not a job id (accepted: afterok:JOB" },
        { "after:1", "--dependency 'after:1': 'after:1' is not a condition" },
        { "afterok:1,", "ends with ','" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        submit_dependency = (char *)bad[i].dep;
        CHECK(submit(&c, &cli, &cfg, &e) == 0 && strstr(e, bad[i].says), "%s: '%s'", bad[i].dep, e);
        submit_dependency = NULL;
    }
    /* the first job completes (every rank exits 0): afterok goes ahead, afternotok never can */
    live_job *lj = jobs_live(&c, a);
    int world = lj ? lj->world : 0;
    for (int r = 0; r < world; r++) {
        Atoll__RankExit ex = ATOLL__RANK_EXIT__INIT;
        ex.job = a;
        ex.rank = r;
        ex.pid = 5000 + r;
        ex.relay_seq = 100 + (uint64_t)r;
        heartbeat_exit(&c, &w1, &ex);
    }
    coord_tick(&c);
    CHECK(world == 4 && job_state(&c, a, &j) == ATOLL__JOB_STATE__JOB_COMPLETED, "first job: %d '%s'", j.state,
          j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, ok, &j) == ATOLL__JOB_STATE__JOB_STARTING, "afterok placed: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    snprintf(want, sizeof want, "not started: --dependency afternotok:%llu can never hold: job %llu completed",
             (unsigned long long)a, (unsigned long long)a);
    CHECK(job_state(&c, notok, &j) == ATOLL__JOB_STATE__JOB_CANCELLED && !strcmp(j.message, want),
          "afternotok cancelled: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    CHECK(submit_after(&c, &cli, &cfg, "afternotok:%llu", a, &e) == 0 && strstr(e, "can never hold: job") &&
              strstr(e, "completed"), "afternotok of a completed job: '%s'", e);
    /* several conditions: all must hold; the first not yet met is named */
    char two[64];
    snprintf(two, sizeof two, "afterany:%llu,afterok:%llu", (unsigned long long)a, (unsigned long long)big);
    submit_dependency = two;
    uint64_t both = submit(&c, &cli, &cfg, &e);
    submit_dependency = NULL;
    coord_tick(&c);
    CHECK(both && job_state(&c, both, &j) == ATOLL__JOB_STATE__JOB_PENDING && strstr(j.message, "afterok:") &&
              strstr(j.message, "to complete"), "two conditions: %d '%s' (%s)", j.state, j.message, e);
    store_job_clear(&j);
    /* the job it waits on is cancelled: it is cancelled too, saying why */
    Atoll__CancelRequest cr = ATOLL__CANCEL_REQUEST__INIT;
    cr.job = big;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
    coord_tick(&c);
    CHECK(job_state(&c, both, &j) == ATOLL__JOB_STATE__JOB_CANCELLED && strstr(j.message, "job") &&
              strstr(j.message, "cancelled"), "after a cancelled job: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    two_nodes_free(&c, &w1, &w2, &cli);
}

/* Every rank of job `id` (epoch 0) exits with `status` on node n1's agent. */
static void all_ranks_exit(coord *c, test_peer *w, uint64_t id, int status, uint64_t *seq)
{
    live_job *lj = jobs_live(c, id);
    int world = lj ? lj->world : 0;
    for (int r = 0; r < world; r++) {
        Atoll__RankExit ex = ATOLL__RANK_EXIT__INIT;
        ex.job = id;
        ex.rank = r;
        ex.pid = 7000 + r;
        ex.exit_status = status;
        ex.relay_seq = ++*seq;
        heartbeat_exit(c, w, &ex);
    }
}

/* The fake clock on by ms in 1 s ticks, both agents heartbeating (no node is lost). */
static void live_for(coord *c, test_peer *w1, test_peer *w2, int64_t ms)
{
    for (int64_t left = ms; left > 0; left -= 1000) {
        fake_ms += left < 1000 ? left : 1000;
        heartbeat(c, w1, NULL);
        heartbeat(c, w2, NULL);
        coord_tick(c);
    }
}

/* --time: counted from the first start; a running job with --save commits a
 * checkpoint and stops, one without is cancelled at once, and one whose ranks do
 * not stop within the grace period is cancelled then. Each says so. */
static void test_time_limit(void)
{
    coord c;
    static test_peer w1, w2, cli;
    two_nodes(&c, &w1, &w2, &cli);
    c.o.hang_floor_ms = 3600 * 1000; /* no step for a minute here is the test's doing, not a hang */
    atoll_config cfg;
    base_cfg(&cfg);
    cfg.global_batch_size = 48;
    cfg.num_gpus = 4;
    const char *e;
    store_job j;
    uint64_t seq = 200;
    submit_time_limit = -5;
    CHECK(submit(&c, &cli, &cfg, &e) == 0 && strstr(e, "time_limit_s -5 is outside 0 (none)"), "negative: '%s'", e);
    submit_time_limit = 10;
    uint64_t plain = submit(&c, &cli, &cfg, &e);
    snprintf(cfg.save, sizeof cfg.save, "/ck/saved");
    uint64_t saved = submit(&c, &cli, &cfg, &e);
    snprintf(cfg.save, sizeof cfg.save, "/ck/stuck");
    uint64_t stuck = submit(&c, &cli, &cfg, &e);
    submit_time_limit = 0;
    CHECK(plain && saved && stuck, "submit: %s", e);
    coord_tick(&c);
    uint64_t ids[3] = { plain, saved, stuck };
    for (int k = 0; k < 3; k++) report_steps(&c, &w1, ids[k], 0, 1, 3, 100);
    CHECK(job_state(&c, stuck, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "running: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    int stops = w1.stops + w2.stops;
    int64_t started = job_state(&c, plain, &j) >= 0 ? j.started_ms : 0; /* all three placed at the same tick */
    store_job_clear(&j);
    live_for(&c, &w1, &w2, started + 10000 - 1 - fake_ms);
    CHECK(job_state(&c, plain, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "1 ms before the limit: %d", j.state);
    store_job_clear(&j);
    live_for(&c, &w1, &w2, 1);
    CHECK(job_state(&c, plain, &j) == ATOLL__JOB_STATE__JOB_CANCELLED &&
              !strcmp(j.message, "time limit (--time 0:00:10) reached at step 3"), "no --save: %d '%s'", j.state,
          j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, saved, &j) == ATOLL__JOB_STATE__JOB_RUNNING &&
              !strcmp(j.message, "time limit (--time 0:00:10) reached: the ranks are committing a checkpoint to "
                                 "/ck/saved"), "with --save: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    CHECK(w1.stops + w2.stops >= stops + 3 && events_saying(&c, "job.time_limit", "--time 0:00:10 reached at step 3") == 2,
          "stops %d, time-limit events %d", w1.stops + w2.stops - stops, events_saying(&c, "job.time_limit", "--time"));
    /* the ranks commit and exit 75 (as workerd reports a checkpoint stop: not as stopped) */
    all_ranks_exit(&c, &w1, saved, SUP_EXIT_SAVED, &seq);
    coord_tick(&c);
    CHECK(job_state(&c, saved, &j) == ATOLL__JOB_STATE__JOB_CANCELLED &&
              !strcmp(j.message, "time limit (--time 0:00:10) reached: stopped after step 3 with a checkpoint "
                                 "committed to /ck/saved (resume with --load)"), "saved: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    /* the third never exits: cancelled once the grace period has passed */
    live_for(&c, &w1, &w2, JOBS_TIME_GRACE_MS - 2000);
    CHECK(job_state(&c, stuck, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "within the grace period: %d", j.state);
    store_job_clear(&j);
    live_for(&c, &w1, &w2, 3000);
    CHECK(job_state(&c, stuck, &j) == ATOLL__JOB_STATE__JOB_CANCELLED &&
              strstr(j.message, "reached at step 3; no checkpoint was committed within the grace period"),
          "stuck: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    two_nodes_free(&c, &w1, &w2, &cli);
}

int main(int argc, char **argv)
{
    (void)argc;
    log_init("test_ctl_coord", LOG_WARN);
    coord c;
    coord_opts o;
    coord_opts_defaults(&o);
    o.suspect_ms = 2000;
    snprintf(o.listen, sizeof o.listen, "127.0.0.1:7420");
    char err[256];
    CHECK(coord_init(&c, &o, ":memory:", err, sizeof err) == 0, "%s", err);
    c.now = fake_now;
    c.send = record;
    static test_peer w1, w2, w3, cli, cli2;
    w1.p.role = w2.p.role = w3.p.role = ATOLL__ROLE__ROLE_WORKER;
    cli.p.role = cli2.p.role = ATOLL__ROLE__ROLE_CLI;

    /* ---- registration ---- */
    do_register(&c, &w1, "n1", "dgx-h100");
    Atoll__RegisterReply *rr = (Atoll__RegisterReply *)last(&w1, ATOLL__MSG_TYPE__MSG_REGISTER_REPLY);
    CHECK(rr && rr->heartbeat_interval_ms == 1000 && !rr->reregistered, "register reply");
    if (rr) atoll__register_reply__free_unpacked(rr, NULL);
    do_register(&c, &w2, "n2", "dgx-h100");
    CHECK(w2.type == ATOLL__MSG_TYPE__MSG_REGISTER_REPLY, "n2 registered");
    do_register(&c, &w3, "n1", "dgx-h100");
    int code = 0;
    CHECK(strstr(last_error(&w3, &code), "in use") && code == ATOLL__ERROR_CODE__ERR_CONFLICT,
          "duplicate live name: '%s'", last_error(&w3, NULL));
    do_register(&c, &w3, "bad name!", "dgx-h100");
    CHECK(strstr(last_error(&w3, NULL), "not valid"), "bad name: '%s'", last_error(&w3, NULL));
    do_register(&c, &cli, "n9", "dgx-h100");
    CHECK(strstr(last_error(&cli, NULL), "role WORKER"), "CLI registering: '%s'", last_error(&cli, NULL));
    CHECK(c.reg.n == 2, "registry has %zu nodes", c.reg.n);
    CHECK(sched_max_island(&c) == 8, "largest island %d", sched_max_island(&c));

    /* ---- spec validation: each rule refused with its message, nothing stored ---- */
    atoll_config cfg;
    const char *e;
    base_cfg(&cfg); cfg.hidden_size = 96; cfg.num_attention_heads = 6; cfg.tensor_model_parallel_size = 4;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4"), "heads%%tp: '%s'", e);
    base_cfg(&cfg); cfg.num_layers = 6; cfg.pipeline_model_parallel_size = 4; cfg.tensor_model_parallel_size = 1;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--num-layers 6 is not divisible by --pipeline-model-parallel-size 4"), "layers%%pp: '%s'", e);
    base_cfg(&cfg); cfg.global_batch_size = 10;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--global-batch-size 10 is not divisible"), "gbs: '%s'", e);
    base_cfg(&cfg); cfg.tensor_model_parallel_size = 16; cfg.pipeline_model_parallel_size = 1; cfg.num_attention_heads = 16;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "NVLink island (8 GPUs)"), "tp > island: '%s'", e);
    base_cfg(&cfg); cfg.num_gpus = 0;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--num-gpus"), "world size: '%s'", e);
    base_cfg(&cfg); cfg.num_layers = 8; cfg.num_layers_per_virtual_pipeline_stage = 3;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "virtual-pipeline-stage 3"), "vpp: '%s'", e);
    base_cfg(&cfg); cfg.num_gpus = 10;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--num-gpus 10 is not divisible by tp*pp"), "world%%mp: '%s'", e);
    base_cfg(&cfg); cfg.hidden_size = 0;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--hidden-size is required"), "missing hidden: '%s'", e);
    /* Issue 12: layouts whose 32-bit products overflowed to 0 and became divisors
     * (SIGFPE), and hyper-parameters that should never be taken. */
    base_cfg(&cfg); cfg.micro_batch_size = 1073741824; cfg.global_batch_size = 8; cfg.num_gpus = 4;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--micro-batch-size: 1073741824 is above"), "huge mbs: '%s'", e);
    base_cfg(&cfg); cfg.tensor_model_parallel_size = cfg.pipeline_model_parallel_size = 65536; cfg.num_gpus = 4;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "4294967296 is more than"), "tp*pp overflow: '%s'", e);
    base_cfg(&cfg); cfg.tensor_model_parallel_size = cfg.pipeline_model_parallel_size = 1;
    cfg.micro_batch_size = 1 << 20; cfg.num_gpus = 1 << 20; cfg.global_batch_size = 0;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "give --global-batch-size"), "default gbs 2^40: '%s'", e);
    base_cfg(&cfg); cfg.lr = 1.0 / 0.0;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--lr: 'inf' is not a finite number"), "lr inf: '%s'", e);
    base_cfg(&cfg); cfg.lr = -1;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--lr: -1 is below"), "lr -1: '%s'", e);
    base_cfg(&cfg); snprintf(cfg.rank_order, sizeof cfg.rank_order, "tp-dp-dp");
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "--rank-order 'tp-dp-dp': repeated token 'dp'"), "order: '%s'", e);
    /* the job's environment: what the supervisor sets itself, malformed or repeated names */
    base_cfg(&cfg);
    char *env_ours[] = { "NCCL_DEBUG=INFO", "MASTER_PORT=1" }, *env_bad[] = { "NCCL DEBUG=INFO" },
         *env_twice[] = { "A=1", "B=2", "A=3" }, *env_bare[] = { "NCCL_DEBUG" };
    submit_env = env_ours, submit_n_env = 2;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "invalid job spec: environment variable MASTER_PORT is set by atoll"),
          "env MASTER_PORT: '%s'", e);
    submit_env = env_bad, submit_n_env = 1;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "'NCCL DEBUG=INFO': expected NAME=VALUE"), "env name: '%s'", e);
    submit_env = env_twice, submit_n_env = 3;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "environment variable A is given twice"), "env twice: '%s'", e);
    submit_env = env_bare, submit_n_env = 1;
    CHECK(!submit(&c, &cli, &cfg, &e) && strstr(e, "'NCCL_DEBUG': expected NAME=VALUE"), "env bare: '%s'", e);
    submit_env = NULL, submit_n_env = 0;
    store_job j;
    CHECK(store_job_get(c.st, 1, &j) == 1, "a refused spec was stored");

    /* ---- a valid job is queued, then placed on the next tick ---- */
    base_cfg(&cfg);
    uint64_t id = submit(&c, &cli, &cfg, &e);
    CHECK(id == 1, "valid job refused: '%s'", e);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_PENDING, "state %d", j.state);
    CHECK_CLOSE(j.bubble_theory, 1.0 / 5.0, 1e-12); /* (p-1)/(v*m + p-1), m = 16/(1*4) */
    store_job_clear(&j);
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_STARTING, "after tick: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    CHECK(w1.launches == 1 && w2.launches == 1, "launches %d %d", w1.launches, w2.launches);
    Atoll__LayoutRequest lr = ATOLL__LAYOUT_REQUEST__INIT;
    lr.job = id;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_LAYOUT, &lr.base);
    Atoll__LayoutReply *lay = (Atoll__LayoutReply *)last(&cli, ATOLL__MSG_TYPE__MSG_LAYOUT_REPLY);
    CHECK(lay && lay->layout->n_ranks == 16, "layout");
    if (lay) {
        Atoll__JobLayout *l = lay->layout;
        CHECK(l->tp == 2 && l->pp == 2 && l->dp == 4, "sizes %d %d %d", l->tp, l->pp, l->dp);
        int ok = 1;
        for (int r = 0; r < 16; r++)
            ok &= l->ranks[r]->rank == r && !strcmp(l->ranks[r]->node, r < 8 ? "n1" : "n2") && l->ranks[r]->gpu == r % 8;
        CHECK(ok, "naive placement: ranks fill n1 then n2 in GPU order");
        /* Megatron order tp-cp-ep-dp-pp: rank = t + 2*(d + 4*p). */
        int ntp = 0, ndp = 0, npp = 0, nemb = 0, good = 1;
        for (size_t g = 0; g < l->n_groups; g++) {
            Atoll__ProcessGroup *pg = l->groups[g];
            int r0 = pg->ranks[0];
            if (!strcmp(pg->kind, "tp")) { ntp++; good &= pg->n_ranks == 2 && pg->ranks[1] == r0 + 1; }
            if (!strcmp(pg->kind, "dp")) { ndp++; good &= pg->n_ranks == 4 && pg->ranks[3] == r0 + 6; }
            if (!strcmp(pg->kind, "pp")) { npp++; good &= pg->n_ranks == 2 && pg->ranks[1] == r0 + 8; }
            if (!strcmp(pg->kind, "embedding")) nemb++;
        }
        CHECK(ntp == 8 && ndp == 4 && npp == 8 && nemb == 8 && good, "groups tp %d dp %d pp %d emb %d shape %d",
              ntp, ndp, npp, nemb, good);
        atoll__layout_reply__free_unpacked(lay, NULL);
    }

    /* Rank orders: each name once, only known names; an absent one only when its
     * size is 1 (Megatron-Core's rule, cfg_rank_order_parse). */
    msg_arena ga = { 0 };
    Atoll__JobLayout gl = ATOLL__JOB_LAYOUT__INIT;
    char gerr[256];
    CHECK(sched_groups("tp-tp-dp-pp", 2, 2, 2, &gl, &ga, gerr, sizeof gerr) == -1 && strstr(gerr, "repeated"),
          "repeated name accepted: %s", gerr);
    CHECK(sched_groups("tp-xx-dp-pp", 2, 2, 2, &gl, &ga, gerr, sizeof gerr) == -1 && strstr(gerr, "unknown"),
          "unknown name accepted: %s", gerr);
    CHECK(sched_groups("tp-dp", 2, 2, 2, &gl, &ga, gerr, sizeof gerr) == -1 && strstr(gerr, "leaves out pp"),
          "missing pp of size 2 accepted: %s", gerr);
    msg_arena_free(&ga);
    gl = (Atoll__JobLayout)ATOLL__JOB_LAYOUT__INIT;
    CHECK(sched_groups("pp-dp-tp", 2, 2, 2, &gl, &ga, gerr, sizeof gerr) == 0 && gl.n_groups == 4 + 4 + 4 + 4, "pp first: %zu groups",
          gl.n_groups);
    /* pp fastest: rank = p + 2*(d + 2*t), so tp groups stride 4. */
    CHECK(!strcmp(gl.groups[0]->kind, "tp") && gl.groups[0]->ranks[1] == 4, "tp stride under pp-dp-tp");
    msg_arena_free(&ga);

    /* ---- metrics make it running; a dead node restarts it ---- */
    Atoll__RankMetrics m = ATOLL__RANK_METRICS__INIT;
    m.job = id;
    m.rank = 0;
    m.iteration = 5;
    m.loss = 3.25;
    fake_ms += 500;
    heartbeat(&c, &w1, &m);
    CHECK(w1.type == ATOLL__MSG_TYPE__MSG_HEARTBEAT_ACK, "heartbeat ack");
    coord_tick(&c); /* steps are written once per tick */
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_RUNNING && j.step == 5 && j.loss == 3.25,
          "running with metrics: state %d step %lld", j.state, (long long)j.step);
    store_job_clear(&j);
    for (int i = 0; i < 6; i++) { /* n1 heartbeats every second, n2 is silent */
        fake_ms += 1000;
        heartbeat(&c, &w1, NULL);
        coord_tick(&c);
    }
    CHECK(registry_state(registry_find(&c.reg, "n2")) == NODE_DEAD, "n2 not dead after 6.5 s of silence");
    CHECK(registry_state(registry_find(&c.reg, "n1")) == NODE_ALIVE, "n1 should be alive");
    CHECK(events_of(&c, "node.suspect") == 1 && events_of(&c, "node.dead") == 1, "liveness events");
    /* Restarted at once on what is left: n1's 8 GPUs, TP and PP kept, DP 4 -> 2 (global batch kept). */
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_STARTING && j.restarts == 1 && j.epoch == 1 && j.world == 8,
          "after node loss: state %d restarts %u epoch %u world %d (%s)", j.state, j.restarts, j.epoch, j.world,
          j.message);
    CHECK(strstr(j.message, "dp=2 on 8 ranks (data parallel shrunk"), "placed shrunk: '%s'", j.message);
    store_job_clear(&j);
    CHECK(w1.stops >= 1, "surviving node was not told to stop the job");
    CHECK(events_of(&c, "job.node_lost") == 1 && events_of(&c, "job.restart") == 1, "fault and restart events");
    store_restart rs;
    CHECK(store_restart_get(c.st, id, 1, &rs) == 0 && !strcmp(rs.cause, "node-lost") && !strcmp(rs.node, "n2") &&
          rs.counted && rs.dp == 2 && rs.detected_ms - rs.fault_ms >= 5000 && rs.reached == 5 && rs.running_ms == 0,
          "restart row: %s node %s dp %d detection %lld ms", rs.cause, rs.node, rs.dp,
          (long long)(rs.detected_ms - rs.fault_ms));
    /* The new placement's first step closes the row: resumed from step 4, one step done again. */
    Atoll__RankMetrics m1 = ATOLL__RANK_METRICS__INIT;
    m1.job = id;
    m1.epoch = 1;
    m1.rank = 0;
    m1.iteration = 5;
    m1.start_iteration = 4;
    m1.step_ms = 100;
    fake_ms += 1000;
    m1.time_ms = fake_ms;
    heartbeat(&c, &w1, &m1);
    coord_tick(&c);
    CHECK(store_restart_get(c.st, id, 1, &rs) == 0 && rs.running_ms == fake_ms - 100 && rs.from_iteration == 4 &&
          rs.steps_recomputed == 1, "closed row: running %lld from %lld recomputed %lld", (long long)rs.running_ms,
          (long long)rs.from_iteration, (long long)rs.steps_recomputed);
    CHECK(events_of(&c, "job.recovered") == 1, "recovered event");
    /* n2 comes back: nothing moves until the job commits a checkpoint, then DP grows back to 4. */
    heartbeat(&c, &w2, NULL);
    CHECK(registry_state(registry_find(&c.reg, "n2")) == NODE_ALIVE, "n2 revived by its heartbeat");
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_RUNNING && j.epoch == 1, "still shrunk: %d", j.state);
    store_job_clear(&j);
    m1.iteration = 7;
    m1.checkpoint_iteration = 6;
    m1.save_stall_ms = 30;
    heartbeat(&c, &w1, &m1);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_RESTARTING && j.checkpoint == 6 && j.lost_ckpt_ms == 30,
          "scale-up at the checkpoint: state %d checkpoint %lld stall %lld", j.state, (long long)j.checkpoint,
          (long long)j.lost_ckpt_ms);
    store_job_clear(&j);
    CHECK(store_restart_get(c.st, id, 2, &rs) == 0 && !strcmp(rs.cause, "scale-up") && !rs.counted,
          "scale-up row: %s counted %d", rs.cause, rs.counted);
    fake_ms += 100;
    heartbeat(&c, &w1, NULL); /* the old ranks are gone: their nodes list no running job */
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_STARTING && j.epoch == 2 && j.world == 16 && j.restarts == 2,
          "grown back: state %d epoch %u world %d (%s)", j.state, j.epoch, j.world, j.message);
    store_job_clear(&j);

    /* ---- cancel ---- */
    Atoll__CancelRequest cr = ATOLL__CANCEL_REQUEST__INIT;
    cr.job = id;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
    CHECK(job_state(&c, id, &j) == ATOLL__JOB_STATE__JOB_CANCELLED, "cancelled: %d", j.state);
    store_job_clear(&j);
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
    CHECK(strstr(last_error(&cli, NULL), "already cancelled"), "second cancel: '%s'", last_error(&cli, NULL));
    cr.job = 99;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_CANCEL, &cr.base);
    CHECK(strstr(last_error(&cli, &code), "no job 99") && code == ATOLL__ERROR_CODE__ERR_NOT_FOUND, "unknown job");
    CHECK(jobs_transition_allowed(ATOLL__JOB_STATE__JOB_CANCELLED, ATOLL__JOB_STATE__JOB_RUNNING) == 0 &&
          jobs_transition_allowed(ATOLL__JOB_STATE__JOB_PENDING, ATOLL__JOB_STATE__JOB_RUNNING) == 0 &&
          jobs_transition_allowed(ATOLL__JOB_STATE__JOB_RUNNING, ATOLL__JOB_STATE__JOB_RESTARTING) == 1,
          "transition table");

    /* ---- reports are acknowledged once stored, replays change nothing, a failed rank fails the job ---- */
    base_cfg(&cfg);
    max_restarts = 0; /* fails at the first fault */
    uint64_t id2 = submit(&c, &cli, &cfg, &e);
    max_restarts = -1;
    coord_tick(&c);
    CHECK(job_state(&c, id2, &j) == ATOLL__JOB_STATE__JOB_STARTING, "second job placed: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    int stops_before = w1.stops + w2.stops;
    Atoll__RankMetrics r0 = ATOLL__RANK_METRICS__INIT;
    r0.job = id2;
    r0.rank = 0;
    r0.iteration = 1;
    r0.loss = 4.0;
    r0.relay_seq = 7;
    heartbeat(&c, &w1, &r0);
    CHECK(last_relayed(&w1) < 7, "a report is not acknowledged before it is stored");
    coord_tick(&c);
    heartbeat(&c, &w1, NULL);
    CHECK(last_relayed(&w1) == 7, "acknowledged once stored: %llu", (unsigned long long)last_relayed(&w1));
    r0.loss = 99.0; /* the same report again (a worker resending after a reconnect) */
    heartbeat(&c, &w1, &r0);
    coord_tick(&c);
    store_step st;
    CHECK(store_step_get(c.st, id2, 1, &st) == 0 && st.loss == 4.0, "a replayed report changes nothing: loss %g",
          st.loss);
    CHECK(job_state(&c, id2, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "running after its first report: %d", j.state);
    store_job_clear(&j);
    Atoll__RankExit ex2 = ATOLL__RANK_EXIT__INIT; /* a peer that lost its link to rank 5, reported first */
    ex2.job = id2;
    ex2.rank = 9;
    ex2.pid = 4343;
    ex2.exit_status = 1;
    ex2.relay_seq = 3;
    heartbeat_exit(&c, &w2, &ex2);
    coord_tick(&c);
    CHECK(job_state(&c, id2, &j) == ATOLL__JOB_STATE__JOB_RUNNING,
          "an exit by itself is judged only after the settle period: %d", j.state);
    store_job_clear(&j);
    fake_ms += JOBS_SETTLE_MS / 2;
    Atoll__RankExit ex = ATOLL__RANK_EXIT__INIT;
    ex.job = id2;
    ex.rank = 5;
    ex.pid = 4242;
    ex.term_signal = 9;
    ex.relay_seq = 8;
    ex.log_tail = "step 1 done\nboom";
    heartbeat_exit(&c, &w1, &ex);
    coord_tick(&c); /* killed by a signal: the cause, judged at once */
    CHECK(job_state(&c, id2, &j) == ATOLL__JOB_STATE__JOB_FAILED &&
          strstr(j.message, "rank 5 (pid 4242) was killed by signal 9") && strstr(j.message, "on node n1") &&
          strstr(j.message, "boom") && strstr(j.message, "no restarts left (max 0)"),
          "failed, naming the rank killed by a signal: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    CHECK(w1.stops + w2.stops > stops_before, "the other ranks were told to stop");

    /* ---- a hang: step progress stops; the watchdog reports name the rank that never entered ---- */
    c.o.hang_floor_ms = 1000;
    base_cfg(&cfg);
    uint64_t id3 = submit(&c, &cli, &cfg, &e);
    fake_ms += 100;
    heartbeat(&c, &w1, NULL);
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_STARTING, "third job placed: %d (%s)", j.state, j.message);
    store_job_clear(&j);
    report_steps(&c, &w1, id3, 0, 1, 3, 200); /* 200 ms steps */
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "third job running: %d", j.state);
    store_job_clear(&j);
    live_job *lj3 = jobs_live(&c, id3);
    CHECK(lj3 && hang_bound_ms(&c, lj3) == 1000, "bound max(1 s floor, 3 x 0.2 s): %lld",
          lj3 ? (long long)hang_bound_ms(&c, lj3) : -1);
    /* Rank 1 was stopped while computing step 4; rank 0, its TP peer, waits for it in tp all-reduce #41;
     * everyone else waits on rank 0 or 1 further down (the pipeline and data parallel peers). */
    int32_t tp01[2] = { 0, 1 }, pp0[2] = { 0, 8 }, pp1[2] = { 1, 9 };
    Atoll__WatchOp op_tp = ATOLL__WATCH_OP__INIT, op_pp0 = ATOLL__WATCH_OP__INIT, op_pp1 = ATOLL__WATCH_OP__INIT;
    op_tp.group = "tp"; op_tp.op = "all-reduce"; op_tp.seq = 41; op_tp.members = tp01; op_tp.n_members = 2;
    op_tp.waited_ms = 900;
    op_pp0.group = "pp"; op_pp0.op = "send/recv"; op_pp0.members = pp0; op_pp0.n_members = 1; op_pp0.waited_ms = 800;
    op_pp1.group = "pp"; op_pp1.op = "send/recv"; op_pp1.members = pp1; op_pp1.n_members = 1; op_pp1.waited_ms = 800;
    Atoll__WatchOp *ops0[1] = { &op_tp }, *ops8[1] = { &op_pp0 }, *ops9[1] = { &op_pp1 };
    fake_ms += 900;
    Atoll__RankWatch wv[16], *wp[16];
    for (int r = 0; r < 16; r++) {
        Atoll__RankWatch *w = &wv[r];
        atoll__rank_watch__init(w);
        w->job = id3;
        w->rank = r;
        w->iteration = 3;
        w->phase = "step";
        w->pid = 5000 + r;
        w->age_ms = 100;
        if (r == 0) w->ops = ops0, w->n_ops = 1;
        if (r == 8) w->ops = ops8, w->n_ops = 1;
        if (r == 9) w->ops = ops9, w->n_ops = 1;
        if (r == 1) w->age_ms = 1100, w->stopped = 1; /* silent since it stopped */
        wp[r] = w;
    }
    Atoll__Heartbeat hw = ATOLL__HEARTBEAT__INIT;
    hw.seq = 5;
    hw.watches = wp; /* n1's ranks: 0..7 */
    hw.n_watches = 8;
    send_msg(&c, &w1, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    hw.watches = wp + 8;
    send_msg(&c, &w2, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    int culprits[4];
    char why[512];
    lj3 = jobs_live(&c, id3);
    int nc = lj3 ? hang_culprits(lj3, fake_ms, 1000, culprits, 4, why, sizeof why) : -1;
    CHECK(nc == 1 && culprits[0] == 1, "culprit: %d ranks, first %d: %s", nc, nc > 0 ? culprits[0] : -1, why);
    CHECK(strstr(why, "culprit rank 1 on node n1 (pid 5001): never entered tp all-reduce #41") &&
          strstr(why, "process stopped (SIGSTOP)") && strstr(why, "last seen computing at iteration 3"), "why: %s", why);
    coord_tick(&c);
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "not hung within the bound: %d", j.state);
    store_job_clear(&j);
    /* The next heartbeats, 0.6 s later: rank 1 still silent, rank 0 still waiting; no step. */
    fake_ms += 600; /* (ticks come every 100 ms: a longer gap means a held-up loop) */
    for (int r = 0; r < 16; r++) wv[r].age_ms = r == 1 ? 1700 : 100;
    op_tp.waited_ms = 1500;
    hw.watches = wp;
    send_msg(&c, &w1, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    hw.watches = wp + 8;
    send_msg(&c, &w2, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    coord_tick(&c);
    CHECK(events_of(&c, "job.hang") == 0, "judged after a held-up loop");
    fake_ms += 100;
    coord_tick(&c);
    CHECK(events_of(&c, "job.hang") == 1, "one hang event, got %d", events_of(&c, "job.hang"));
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_RESTARTING, "a hung job restarts: %d", j.state);
    store_job_clear(&j);
    /* Nothing fits (both nodes drained): the restart waits, and an event says why. */
    Atoll__DrainRequest dr = ATOLL__DRAIN_REQUEST__INIT;
    dr.drain = 1;
    dr.name = "n1";
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_DRAIN, &dr.base);
    dr.name = "n2";
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_DRAIN, &dr.base);
    fake_ms += 100;
    heartbeat(&c, &w1, NULL); /* no running ranks listed: the old ones are gone */
    heartbeat(&c, &w2, NULL);
    coord_tick(&c);
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_PENDING && j.epoch == 1 &&
          strstr(j.message, "cannot place again: even data-parallel size 1 needs 4 ranks (tp 2 x pp 2)"),
          "unplaceable restart: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    CHECK(events_of(&c, "job.unplaceable") == 1, "job.unplaceable event: %d", events_of(&c, "job.unplaceable"));
    dr.drain = 0;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_DRAIN, &dr.base);
    fake_ms += 100;
    coord_tick(&c);
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_STARTING && j.world == 8,
          "placed again on n2 once it is undrained: %d world %d (%s)", j.state, j.world, j.message);
    store_job_clear(&j);
    CHECK(w1.asks == 0 && w2.asks == 0, "no rank reported a long wait: nobody asked to report now (%d, %d)", w1.asks,
          w2.asks);

    /* ---- a bound shorter than the heartbeat interval: judged on fresh reports ---- */
    c.o.hang_floor_ms = 300;
    c.o.hang_factor = 2;
    report_steps(&c, &w2, id3, 1, 11, 3, 100); /* epoch 1 on n2: 100 ms steps, bound max(0.3 s, 2 x 0.1 s) */
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_RUNNING, "epoch 1 running: %d", j.state);
    store_job_clear(&j);
    lj3 = jobs_live(&c, id3);
    CHECK(lj3 && hang_bound_ms(&c, lj3) == 300, "bound 0.3 s: %lld", lj3 ? (long long)hang_bound_ms(&c, lj3) : -1);
    int64_t last_step = fake_ms;
    /* 100 ms later rank 0's watchdog relays at once (urgent) that it has waited in tp
     * all-reduce #41 for 100 ms; rank 1 seems to compute. */
    fake_ms += 100;
    op_tp.waited_ms = 100;
    for (int r = 0; r < 8; r++) {
        wv[r].epoch = 1;
        wv[r].iteration = 13;
        wv[r].age_ms = 10;
        wv[r].stopped = 0;
        wv[r].n_ops = r == 0;
        wv[r].ops = ops0;
        wv[r].urgent = r == 0;
    }
    hw.watches = wp;
    hw.n_watches = 8;
    send_msg(&c, &w2, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    int hangs = events_of(&c, "job.hang");
    while (fake_ms < last_step + 300) {
        fake_ms += 100;
        coord_tick(&c);
    }
    CHECK(w2.asks == 0, "not asked before the bound passed: %d", w2.asks);
    fake_ms += 100; /* the bound passed 100 ms ago; n2 was last heard before it */
    coord_tick(&c);
    CHECK(w2.asks == 1 && w2.type == ATOLL__MSG_TYPE__MSG_REPORT_NOW && w1.asks == 0,
          "n2 (not n1: none of the job's ranks) asked to report now: %d, %d", w2.asks, w1.asks);
    coord_tick(&c);
    CHECK(w2.asks == 1, "asked once per half bound: %d", w2.asks);
    CHECK(events_of(&c, "job.hang") == hangs, "no verdict before the answer");
    /* Its answer: rank 1 is stopped, rank 0 has waited 400 ms. Judged as it arrives. */
    op_tp.waited_ms = 400;
    for (int r = 0; r < 8; r++) wv[r].urgent = 0;
    wv[1].stopped = 1;
    wv[1].age_ms = 300;
    send_msg(&c, &w2, ATOLL__MSG_TYPE__MSG_HEARTBEAT, &hw.base);
    CHECK(events_of(&c, "job.hang") == hangs + 1, "hang declared on the answer, 0.4 s after the last step: %d",
          events_of(&c, "job.hang") - hangs);
    CHECK(job_state(&c, id3, &j) == ATOLL__JOB_STATE__JOB_RESTARTING && strstr(j.message, "hang") ,
          "restarting after the hang: %d '%s'", j.state, j.message);
    store_job_clear(&j);
    c.o.hang_floor_ms = 1000;
    c.o.hang_factor = 3;

    /* Every rank inside the same all-reduce, one of them silent: that one holds it. */
    live_job tj;
    memset(&tj, 0, sizeof tj);
    live_rank tr[2];
    memset(tr, 0, sizeof tr);
    Atoll__RankWatch tw[2];
    for (int r = 0; r < 2; r++) {
        atoll__rank_watch__init(&tw[r]);
        tw[r].phase = "step";
        tw[r].ops = ops0;
        tw[r].n_ops = 1;
        tr[r].watch = &tw[r];
        tr[r].watch_ms = fake_ms - (r == 1 ? 3000 : 100);
        tw[r].age_ms = r == 1 ? 3000 : 100;
        snprintf(tr[r].node, sizeof tr[r].node, "n%d", r);
    }
    tj.ranks = tr;
    tj.nranks = 2;
    nc = hang_culprits(&tj, fake_ms, 1000, culprits, 4, why, sizeof why);
    CHECK(nc == 1 && culprits[0] == 1 && strstr(why, "watchdog silent 3.0 s"), "silent inside the op: %s", why);

    /* ---- rendezvous: only ranks of the scope they proved ---- */
    static test_peer r1, r2, other;
    r1.p.role = r2.p.role = other.p.role = ATOLL__ROLE__ROLE_RANK;
    r1.p.job = r2.p.job = 7;
    other.p.job = 8;
    Atoll__KvGet g = ATOLL__KV_GET__INIT;
    g.job = 7;
    g.key = "nccl-id";
    g.wait_ms = 3000;
    int before = r2.frames;
    send_msg(&c, &r2, ATOLL__MSG_TYPE__MSG_KV_GET, &g.base);
    CHECK(r2.frames == before, "a waiting get answered at once");
    Atoll__KvSet s = ATOLL__KV_SET__INIT;
    s.job = 7;
    s.key = "nccl-id";
    s.value.data = (uint8_t *)"ID";
    s.value.len = 2;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_KV_SET, &s.base);
    CHECK(strstr(last_error(&cli, &code), "ROLE_RANK") && code == ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
          "the CLI (cluster token) may not write a job's keys: '%s'", last_error(&cli, NULL));
    send_msg(&c, &other, ATOLL__MSG_TYPE__MSG_KV_SET, &s.base);
    CHECK(strstr(last_error(&other, NULL), "not of job 7"), "a rank of job 8 may not write job 7's keys: '%s'",
          last_error(&other, NULL));
    CHECK(r2.frames == before, "refused sets woke nobody");
    Atoll__JobsRequest jr_all = ATOLL__JOBS_REQUEST__INIT;
    send_msg(&c, &other, ATOLL__MSG_TYPE__MSG_JOBS, &jr_all.base);
    CHECK(strstr(last_error(&other, NULL), "only use its job's rendezvous keys"), "a rank may not list jobs: '%s'",
          last_error(&other, NULL));
    send_msg(&c, &r1, ATOLL__MSG_TYPE__MSG_KV_SET, &s.base);
    Atoll__KvReply *kr = (Atoll__KvReply *)last(&r2, ATOLL__MSG_TYPE__MSG_KV_REPLY);
    CHECK(kr && kr->found && kr->value.len == 2 && !memcmp(kr->value.data, "ID", 2), "waiter woken with the value");
    if (kr) atoll__kv_reply__free_unpacked(kr, NULL);
    Atoll__KvAdd ad = ATOLL__KV_ADD__INIT;
    ad.job = 7;
    ad.key = "count";
    ad.delta = 3;
    send_msg(&c, &r1, ATOLL__MSG_TYPE__MSG_KV_ADD, &ad.base);
    send_msg(&c, &r2, ATOLL__MSG_TYPE__MSG_KV_ADD, &ad.base);
    kr = (Atoll__KvReply *)last(&r2, ATOLL__MSG_TYPE__MSG_KV_REPLY);
    CHECK(kr && kr->number == 6, "add over two ranks: %lld", kr ? (long long)kr->number : -1);
    if (kr) atoll__kv_reply__free_unpacked(kr, NULL);
    g.key = "never";
    send_msg(&c, &r2, ATOLL__MSG_TYPE__MSG_KV_GET, &g.base);
    fake_ms += 3001;
    coord_tick(&c);
    kr = (Atoll__KvReply *)last(&r2, ATOLL__MSG_TYPE__MSG_KV_REPLY);
    CHECK(kr && !kr->found, "expired wait answered not-found");
    if (kr) atoll__kv_reply__free_unpacked(kr, NULL);

    /* ---- malformed requests: refused, and the next one is served ---- */
    coord_dispatch(&c, &cli.p, ATOLL__MSG_TYPE__MSG_NODES, (const uint8_t *)"\xff\xff\xff", 3);
    CHECK(strstr(last_error(&cli, &code), "does not decode") && code == ATOLL__ERROR_CODE__ERR_BAD_MESSAGE,
          "garbage payload: '%s'", last_error(&cli, NULL));
    coord_dispatch(&c, &cli.p, 999, NULL, 0);
    CHECK(strstr(last_error(&cli, &code), "999") && code == ATOLL__ERROR_CODE__ERR_UNKNOWN_TYPE, "unknown type");
    coord_dispatch(&c, &cli.p, ATOLL__MSG_TYPE__MSG_NODES_REPLY, NULL, 0);
    CHECK(code == ATOLL__ERROR_CODE__ERR_UNKNOWN_TYPE, "a reply type sent as a request");
    heartbeat(&c, &cli, NULL);
    CHECK(strstr(last_error(&cli, NULL), "Register before"), "heartbeat without registering");
    Atoll__NodesRequest nr = ATOLL__NODES_REQUEST__INIT;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_NODES, &nr.base);
    Atoll__NodesReply *nodes = (Atoll__NodesReply *)last(&cli, ATOLL__MSG_TYPE__MSG_NODES_REPLY);
    CHECK(nodes && nodes->n_nodes == 2 && !strcmp(nodes->nodes[0]->name, "n1") && nodes->nodes[0]->n_gpus == 8,
          "nodes after all that");
    if (nodes) atoll__nodes_reply__free_unpacked(nodes, NULL);

    /* ---- a closed worker connection keeps the node; its name can register again ---- */
    uint64_t seen = registry_find(&c.reg, "n1")->relay_seen;
    coord_peer_closed(&c, &w1.p);
    do_register(&c, &w3, "n1", "dgx-h100");
    rr = (Atoll__RegisterReply *)last(&w3, ATOLL__MSG_TYPE__MSG_REGISTER_REPLY);
    CHECK(rr && rr->reregistered, "re-registration keeps identity");
    if (rr) atoll__register_reply__free_unpacked(rr, NULL);
    CHECK(seen > 0 && registry_find(&c.reg, "n1")->relay_seen == seen,
          "the same agent reconnecting keeps its relay sequence: %llu", (unsigned long long)seen);
    /* A restarted agent (a new process) numbers its reports from 1 again: none may be taken for a resend. */
    coord_peer_closed(&c, &w3.p);
    incarnation = 77;
    do_register(&c, &w3, "n1", "dgx-h100");
    CHECK(registry_find(&c.reg, "n1")->relay_seen == 0, "a new agent process starts a new relay sequence");
    CHECK(events_of(&c, "node.reregistered") == 2, "re-registration event");

    /* A still-attached but silent connection loses its name to a new registration. */
    static test_peer w4;
    w4.p.role = ATOLL__ROLE__ROLE_WORKER;
    fake_ms += 1000;
    heartbeat(&c, &w2, NULL);
    do_register(&c, &w4, "n2", "dgx-h100");
    CHECK(strstr(last_error(&w4, &code), "in use") && code == ATOLL__ERROR_CODE__ERR_CONFLICT, "fresh conflict");
    fake_ms += 2500; /* past suspect_ms without a heartbeat from w2 */
    do_register(&c, &w4, "n2", "dgx-h100");
    CHECK(w4.type == ATOLL__MSG_TYPE__MSG_REGISTER_REPLY, "takeover of a silent name: '%s'", last_error(&w4, NULL));
    CHECK(w2.p.node == NULL && registry_find(&c.reg, "n2")->peer == &w4.p, "old connection still owns n2");
    free(w4.buf);
    w4.buf = NULL;

    /* ---- idempotent submissions: a retry with the same request id gets the same job ---- */
    base_cfg(&cfg);
    cfg.num_gpus = 64; /* more than the cluster has: stays pending */
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, "retry");
    Atoll__SubmitRequest sr = ATOLL__SUBMIT_REQUEST__INIT;
    sr.spec = &spec;
    sr.request_id = "req-42";
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &sr.base);
    Atoll__SubmitReply *s1 = (Atoll__SubmitReply *)last(&cli, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY);
    send_msg(&c, &cli2, ATOLL__MSG_TYPE__MSG_SUBMIT, &sr.base); /* the retry, on another connection */
    Atoll__SubmitReply *s2 = (Atoll__SubmitReply *)last(&cli2, ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY);
    CHECK(s1 && s2 && s1->job == s2->job && !s1->existing && s2->existing, "retry: jobs %llu and %llu",
          s1 ? (unsigned long long)s1->job : 0ULL, s2 ? (unsigned long long)s2->job : 0ULL);
    uint64_t retried = s1 ? s1->job : 0;
    if (s1) atoll__submit_reply__free_unpacked(s1, NULL);
    if (s2) atoll__submit_reply__free_unpacked(s2, NULL);
    spec.num_layers = 8; /* the same id with another spec is a client bug, not a retry */
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &sr.base);
    CHECK(strstr(last_error(&cli, &code), "already created job") && code == ATOLL__ERROR_CODE__ERR_CONFLICT,
          "same id, other spec: '%s'", last_error(&cli, NULL));
    sr.request_id = "bad id!";
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &sr.base);
    CHECK(strstr(last_error(&cli, &code), "request id 'bad id!' is not valid") && code == ATOLL__ERROR_CODE__ERR_INVALID,
          "bad request id: '%s'", last_error(&cli, NULL));

    /* ---- a tick retries old pending jobs only when capacity may have grown ---- */
    coord_tick(&c);
    store_job_set_message(c.st, retried, "sentinel");
    spec.num_layers = 4;
    sr.request_id = "req-43";
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &sr.base);
    coord_tick(&c);
    CHECK(job_state(&c, retried, &j) == ATOLL__JOB_STATE__JOB_PENDING && !strcmp(j.message, "sentinel"),
          "an old pending job was tried again on a submit: '%s'", j.message);
    store_job_clear(&j);
    CHECK(job_state(&c, retried + 1, &j) == ATOLL__JOB_STATE__JOB_PENDING && strstr(j.message, "waiting for 64 GPUs"),
          "the new job was tried: '%s'", j.message);
    store_job_clear(&j);
    dr = (Atoll__DrainRequest)ATOLL__DRAIN_REQUEST__INIT;
    dr.name = "n1";
    dr.drain = 0; /* undrain: capacity may have grown */
    registry_find(&c.reg, "n1")->drained = 1;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_DRAIN, &dr.base);
    coord_tick(&c);
    CHECK(job_state(&c, retried, &j) == ATOLL__JOB_STATE__JOB_PENDING && strstr(j.message, "waiting for 64 GPUs"),
          "after an undrain every pending job is tried: '%s'", j.message);
    store_job_clear(&j);

    /* ---- job lists come a page at a time ---- */
    Atoll__JobsRequest jr = ATOLL__JOBS_REQUEST__INIT;
    jr.limit = 2;
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_JOBS, &jr.base);
    Atoll__JobsReply *page = (Atoll__JobsReply *)last(&cli, ATOLL__MSG_TYPE__MSG_JOBS_REPLY);
    CHECK(page && page->n_jobs == 2 && page->jobs[0]->id == 1 && page->next_after_id == page->jobs[1]->id,
          "first page of 2");
    uint64_t next = page ? page->next_after_id : 0;
    if (page) atoll__jobs_reply__free_unpacked(page, NULL);
    jr.after_id = next;
    jr.limit = 0; /* the default page holds the rest */
    send_msg(&c, &cli, ATOLL__MSG_TYPE__MSG_JOBS, &jr.base);
    page = (Atoll__JobsReply *)last(&cli, ATOLL__MSG_TYPE__MSG_JOBS_REPLY);
    CHECK(page && page->n_jobs >= 1 && page->jobs[0]->id > next && page->jobs[page->n_jobs - 1]->id == retried + 1 &&
              page->next_after_id == 0, "last page: %zu jobs", page ? page->n_jobs : 0);
    if (page) atoll__jobs_reply__free_unpacked(page, NULL);

    test_peer *all[] = { &w1, &w2, &w3, &cli, &cli2 };
    for (int i = 0; i < 5; i++) free(all[i]->buf);
    coord_free(&c);
    test_slurm_states();
    test_shrink_memory();
    test_series_settled();
    test_dp_fits();
    test_queue_order();
    test_dependency();
    test_backfill_limits();
    test_time_limit();
    test_cluster_view();
    return check_summary(argv[0]);
}
