/* relay: what workerd reports about its ranks, kept until the coordinator has
 * stored it.
 *
 * Every per-step report a rank writes (RankMetrics) and every rank exit
 * (RankExit) gets the next relay sequence number and waits in this queue. Each
 * heartbeat carries the reports not yet sent on the current connection (at most
 * RELAY_PER_HEARTBEAT); the coordinator answers with the highest sequence it has
 * committed (HeartbeatAck.relayed), and those are dropped. After a reconnect
 * everything unacknowledged is sent again (the coordinator ignores what it
 * already has), so a coordinator that is away or restarted loses nothing.
 * Bounded: past RELAY_MAX queued reports the oldest metrics are dropped (never
 * exits), counted and logged.
 *
 * Ownership: the queue owns the messages in it (unpacked protobuf). */
#ifndef ATOLL_RELAY_H
#define ATOLL_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "atoll.pb-c.h"

#define RELAY_MAX 200000
#define RELAY_PER_HEARTBEAT 4000

typedef struct relay_item {
    uint64_t seq;
    Atoll__RankMetrics *metrics; /* exactly one of these */
    Atoll__RankExit *exit;
} relay_item;

typedef struct relay {
    relay_item *v;               /* ring */
    size_t cap, head, n;
    uint64_t next_seq;           /* last assigned */
    uint64_t sent;               /* highest sent on this connection */
    uint64_t dropped;
} relay;

void relay_init(relay *r);
void relay_free(relay *r);
/* Takes ownership of m (unpacked with the default allocator). */
void relay_push_metrics(relay *r, Atoll__RankMetrics *m);
/* Takes ownership of e (built with relay_exit_new). */
void relay_push_exit(relay *r, Atoll__RankExit *e);
Atoll__RankExit *relay_exit_new(void);
/* Points hb->ranks and hb->exits at the next unsent reports (memory from the
 * queue and *scratch, valid until the next relay call; free *scratch after
 * sending). */
void relay_fill(relay *r, Atoll__Heartbeat *hb, void **scratch);
/* The coordinator stored everything up to `upto`. */
void relay_acked(relay *r, uint64_t upto);
/* A new connection: send everything unacknowledged again. */
void relay_rewind(relay *r);

#endif
