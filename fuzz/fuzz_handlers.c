/* Fuzzes the coordinator's message handlers: the input is a byte stream of
 * frames (the wire format, without tags: handlers see frames after rpc.c has
 * checked them), dispatched as if from one of four peers chosen by the first
 * byte: a worker that registered at start, a CLI client, a fresh worker, and a
 * rank. A frame of type FUZZ_TICK advances the fake clock by 700 ms and runs the
 * periodic tick (liveness, rendezvous expiry, scheduling), so handler sequences
 * interact with state inside one input; one more tick ends every input.
 *
 * Each input starts from the same state (an empty in-memory store, one dgx-h100
 * node registered), so an input is reproducible on its own: after it the peers
 * close, what coord_free would release in memory is released (live jobs, pending
 * log reads, rendezvous keys, the registry), the store is emptied (store_reset:
 * building the schema again would cost most of the run) and the coordinator's
 * fields are put back as coord_init left them, with a new rendezvous store. Every
 * allocation of an input is returned, so libFuzzer's leak check stays cheap (it
 * scans the heap only after an input that allocated more than it freed) and a
 * leak in a handler is reported at the input that made it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "jobs.h"
#include "series.h"
#include "frame.h"
#include "log.h"
#include "msg.h"
#include "topo.h"

#define FUZZ_TICK 0xffff

static int64_t g_now;
static coord g_c, g_pristine;
static int64_t fake_now(void) { return g_now; }

static void sink(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c; (void)p;
    /* Pack every reply: a handler that builds a malformed message shows up here. */
    size_t len;
    uint8_t *f = msg_frame(type, m, 0, &len);
    free(f);
}

static void forget(coord *c, coord_peer *p, const char *reason)
{
    (void)c; (void)p; (void)reason;
}

/* The packed Register of a simulated dgx-h100, made once (it does not change). */
static uint8_t *g_register;
static size_t g_register_len;

static void make_register(void)
{
    topo_node n;
    char err[256];
    if (topo_simulate(&n, "dgx-h100", "seed", NULL, err, sizeof err)) abort();
    msg_arena a = { 0 };
    Atoll__Node node;
    msg_node_from_topo(&node, &n, 0, &a);
    Atoll__Register r = ATOLL__REGISTER__INIT;
    r.node = &node;
    g_register_len = protobuf_c_message_get_packed_size(&r.base);
    g_register = malloc(g_register_len);
    protobuf_c_message_pack(&r.base, g_register);
    msg_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_register) {
        log_init("fuzz_handlers", LOG_ERROR);
        make_register();
        coord_opts o;
        coord_opts_defaults(&o);
        o.heartbeat_ms = 1000;
        o.suspect_ms = 2000;
        o.node_timeout_ms = 5000;
        strcpy(o.listen, "127.0.0.1:7420");
        char err[256];
        if (coord_init(&g_c, &o, ":memory:", err, sizeof err)) abort();
        g_c.now = fake_now;
        g_c.send = sink;
        g_c.drop = forget;
        rendezvous_free_all(&g_c); /* each input gets its own */
        g_pristine = g_c;
    }
    if (size < 1) return 0;
    coord c = g_pristine;
    if (rendezvous_init(&c)) abort();
    g_now = 1000000;
    coord_peer peers[4];
    memset(peers, 0, sizeof peers);
    peers[0].role = peers[2].role = ATOLL__ROLE__ROLE_WORKER;
    peers[1].role = ATOLL__ROLE__ROLE_CLI;
    peers[3].role = ATOLL__ROLE__ROLE_RANK;
    /* A registered node so heartbeats, drains and placements reach deep code. */
    coord_dispatch(&c, &peers[0], ATOLL__MSG_TYPE__MSG_REGISTER, g_register, g_register_len);

    coord_peer *p = &peers[data[0] & 3];
    frame_decoder d;
    frame_decoder_init(&d, 1 << 16);
    frame_decoder_feed(&d, data + 1, size - 1);
    frame_header h;
    const uint8_t *payload;
    while (frame_decoder_next(&d, &h, &payload) == 1) {
        if (h.type == FUZZ_TICK) {
            g_now += 700;
            coord_tick(&c);
        } else {
            coord_dispatch(&c, p, h.type, payload, h.len);
        }
    }
    frame_decoder_free(&d);
    g_now += 700;
    coord_tick(&c);
    for (int i = 0; i < 4; i++) coord_peer_closed(&c, &peers[i]);
    series_flush(&c);
    jobs_live_free(&c);
    logs_free_all(&c);
    rendezvous_free_all(&c);
    registry_free(&c.reg);
    if (store_reset(c.st)) abort();
    return 0;
}
