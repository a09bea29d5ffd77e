/* Node liveness from silence: alive -> suspect -> dead at the configured times,
 * back to alive on a heartbeat; drained is shown unless dead; lookup by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "registry.h"
#include "topo.h"

typedef struct {
    int suspect, dead, alive;
    char last[64];
} seen;

static void on_change(void *ctx, reg_node *n, int from, int to)
{
    seen *s = ctx;
    (void)from;
    if (to == NODE_SUSPECT) s->suspect++;
    if (to == NODE_DEAD) s->dead++;
    snprintf(s->last, sizeof s->last, "%s", n->name);
}

int main(int argc, char **argv)
{
    (void)argc;
    registry r;
    registry_init(&r, 400, 1000);
    reg_node *a = registry_add(&r, "a"), *b = registry_add(&r, "b");
    a->last_seen_ms = b->last_seen_ms = 10000;
    seen s = { 0 };
    CHECK(registry_tick(&r, 10399, on_change, &s) == 0, "change before the suspect time");
    /* b keeps heartbeating; a falls silent. */
    b->last_seen_ms = 10300;
    CHECK(registry_tick(&r, 10400, on_change, &s) == 1 && s.suspect == 1 && !strcmp(s.last, "a"), "a suspect at 400 ms");
    CHECK(a->live == NODE_SUSPECT && b->live == NODE_ALIVE, "states %d %d", a->live, b->live);
    b->last_seen_ms = 10900;
    CHECK(registry_tick(&r, 10999, on_change, &s) == 0, "dead too early");
    CHECK(registry_tick(&r, 11000, on_change, &s) == 1 && s.dead == 1, "a dead at 1000 ms");
    CHECK(registry_state(a) == NODE_DEAD, "a state %d", registry_state(a));
    CHECK(registry_tick(&r, 20000, on_change, &s) == 1 && s.dead == 2 && !strcmp(s.last, "b"), "b dead later, a once");
    /* A silent node jumps straight to dead if the tick comes late; one callback. */
    reg_node *c = registry_add(&r, "c");
    c->last_seen_ms = 20000;
    s = (seen){ 0 };
    CHECK(registry_tick(&r, 25000, on_change, &s) == 1 && s.dead == 1 && s.suspect == 0, "late tick");
    /* Drained shows unless dead. */
    reg_node *d = registry_add(&r, "d");
    d->last_seen_ms = 25000;
    d->drained = 1;
    CHECK(registry_state(d) == NODE_DRAINED, "drained alive node shows %d", registry_state(d));
    registry_tick(&r, 26000, NULL, NULL);
    CHECK(registry_state(d) == NODE_DEAD, "drained dead node shows %d", registry_state(d));
    registry_free(&r);

    /* Many nodes: every name found, sorted order, unknown names not found. */
    registry_init(&r, 400, 1000);
    char name[32];
    for (int i = 4999; i >= 0; i--) {
        snprintf(name, sizeof name, "node-%05d", i);
        CHECK(registry_add(&r, name) != NULL, "add %s", name);
    }
    int found = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "node-%05d", i);
        reg_node *n = registry_find(&r, name);
        found += n && !strcmp(n->name, name);
    }
    CHECK(found == 5000, "found %d of 5000", found);
    CHECK(registry_find(&r, "node-5000") == NULL && registry_find(&r, "") == NULL, "phantom node");
    reg_node **v = registry_sorted(&r);
    int ordered = 1;
    for (size_t i = 1; i < r.n; i++) ordered &= strcmp(v[i - 1]->name, v[i]->name) < 0;
    CHECK(ordered, "registry_sorted is not sorted");
    free(v);
    registry_free(&r);
    return check_summary(argv[0]);
}
