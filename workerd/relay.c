#include "relay.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

void relay_init(relay *r) { memset(r, 0, sizeof *r); }

static void free_item(relay_item *it)
{
    if (it->metrics) atoll__rank_metrics__free_unpacked(it->metrics, NULL);
    if (it->exit) {
        free(it->exit->log_tail);
        free(it->exit);
    }
    memset(it, 0, sizeof *it);
}

void relay_free(relay *r)
{
    for (size_t i = 0; i < r->n; i++) free_item(&r->v[(r->head + i) % r->cap]);
    free(r->v);
    memset(r, 0, sizeof *r);
}

static relay_item *at(relay *r, size_t i) { return &r->v[(r->head + i) % r->cap]; }

static void push(relay *r, relay_item it)
{
    if (r->n == RELAY_MAX) { /* full: the oldest metrics go (an exit is never dropped) */
        size_t k = 0;
        while (k < r->n && !at(r, k)->metrics) k++;
        if (k == r->n) { /* all exits: cannot happen with fewer ranks than RELAY_MAX; keep the newest */
            free_item(at(r, 0));
            r->head = (r->head + 1) % r->cap;
            r->n--;
        } else {
            free_item(at(r, k));
            for (size_t j = k; j > 0; j--) *at(r, j) = *at(r, j - 1);
            memset(at(r, 0), 0, sizeof(relay_item));
            r->head = (r->head + 1) % r->cap;
            r->n--;
        }
        if (r->dropped++ % 10000 == 0)
            log_warn("the coordinator has been away long: %llu step reports dropped so far (queue holds %d)",
                     (unsigned long long)r->dropped, RELAY_MAX);
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        relay_item *v = calloc(cap, sizeof *v);
        if (!v) abort(); /* the agent cannot go on */
        for (size_t i = 0; i < r->n; i++) v[i] = *at(r, i);
        free(r->v);
        r->v = v;
        r->cap = cap;
        r->head = 0;
    }
    it.seq = ++r->next_seq;
    *at(r, r->n++) = it;
}

void relay_push_metrics(relay *r, Atoll__RankMetrics *m)
{
    m->relay_seq = r->next_seq + 1;
    push(r, (relay_item){ .metrics = m });
}

Atoll__RankExit *relay_exit_new(void)
{
    Atoll__RankExit *e = calloc(1, sizeof *e);
    if (!e) abort();
    atoll__rank_exit__init(e);
    return e;
}

void relay_push_exit(relay *r, Atoll__RankExit *e)
{
    e->relay_seq = r->next_seq + 1;
    push(r, (relay_item){ .exit = e });
}

void relay_fill(relay *r, Atoll__Heartbeat *hb, void **scratch)
{
    size_t nm = 0, ne = 0, i = 0;
    while (i < r->n && at(r, i)->seq <= r->sent) i++;
    size_t first = i;
    for (; i < r->n && nm + ne < RELAY_PER_HEARTBEAT; i++) {
        if (at(r, i)->metrics) nm++;
        else ne++;
    }
    void **mem = malloc((nm + ne + 1) * sizeof(void *));
    if (!mem) abort();
    *scratch = mem;
    hb->ranks = (Atoll__RankMetrics **)mem;
    hb->exits = (Atoll__RankExit **)(mem + nm);
    hb->n_ranks = hb->n_exits = 0;
    for (size_t k = first; k < i; k++) {
        relay_item *it = at(r, k);
        if (it->metrics) hb->ranks[hb->n_ranks++] = it->metrics;
        else hb->exits[hb->n_exits++] = it->exit;
        r->sent = it->seq;
    }
}

void relay_acked(relay *r, uint64_t upto)
{
    while (r->n && at(r, 0)->seq <= upto) {
        free_item(at(r, 0));
        r->head = (r->head + 1) % r->cap;
        r->n--;
    }
}

void relay_rewind(relay *r)
{
    r->sent = r->n ? at(r, 0)->seq - 1 : r->next_seq;
}
