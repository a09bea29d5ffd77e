/* Fuzzes the coordinator's message handlers: the input is a byte stream of
 * frames (the wire format), dispatched as if from one of four peers: a worker
 * that registered at start, a CLI client, a fresh worker, and a rank. Between
 * inputs the fake clock advances and the periodic tick runs (liveness,
 * rendezvous expiry, scheduling), so handler sequences interact with state. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "frame.h"
#include "log.h"
#include "msg.h"
#include "topo.h"

static coord g_c;
static int g_ready, g_runs;
static int64_t g_now = 1000000;
static coord_peer g_peers[4];

static int64_t fake_now(void) { return g_now; }

static void sink(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c; (void)p; (void)type;
    /* Pack every reply: a handler that builds a malformed message shows up here. */
    size_t len;
    uint8_t *f = msg_frame(type, m, &len);
    free(f);
}

static void setup(void)
{
    coord_opts o;
    coord_opts_defaults(&o);
    o.suspect_ms = 2000;
    strcpy(o.listen, "127.0.0.1:7420");
    char err[256];
    if (coord_init(&g_c, &o, ":memory:", err, sizeof err)) abort();
    g_c.now = fake_now;
    g_c.send = sink;
    memset(g_peers, 0, sizeof g_peers);
    g_peers[0].role = g_peers[2].role = ATOLL__ROLE__ROLE_WORKER;
    g_peers[1].role = ATOLL__ROLE__ROLE_CLI;
    g_peers[3].role = ATOLL__ROLE__ROLE_RANK;
    /* A registered node so heartbeats, drains and placements reach deep code. */
    topo_node n;
    topo_simulate(&n, "dgx-h100", "seed", NULL, err, sizeof err);
    msg_arena a = { 0 };
    Atoll__Node node;
    msg_node_from_topo(&node, &n, 0, &a);
    Atoll__Register r = ATOLL__REGISTER__INIT;
    r.node = &node;
    size_t len = protobuf_c_message_get_packed_size(&r.base);
    uint8_t *b = malloc(len);
    protobuf_c_message_pack(&r.base, b);
    coord_dispatch(&g_c, &g_peers[0], ATOLL__MSG_TYPE__MSG_REGISTER, b, len);
    free(b);
    msg_arena_free(&a);
    g_ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ready) {
        log_init("fuzz_handlers", LOG_ERROR);
        setup();
    }
    if (size < 1) return 0;
    coord_peer *p = &g_peers[data[0] & 3];
    frame_decoder d;
    frame_decoder_init(&d, 1 << 16);
    frame_decoder_feed(&d, data + 1, size - 1);
    frame_header h;
    const uint8_t *payload;
    while (frame_decoder_next(&d, &h, &payload) == 1) coord_dispatch(&g_c, p, h.type, payload, h.len);
    frame_decoder_free(&d);
    g_now += 700;
    coord_tick(&g_c);
    /* Start over now and then so the in-memory database stays small. */
    if (++g_runs % 2000 == 0) {
        for (int i = 0; i < 4; i++) coord_peer_closed(&g_c, &g_peers[i]);
        coord_free(&g_c);
        setup();
    }
    return 0;
}
