#include "registry.h"

#include <stdlib.h>
#include <string.h>

#include "topo.h"

void registry_init(registry *r, int64_t suspect_ms, int64_t dead_ms)
{
    memset(r, 0, sizeof *r);
    r->suspect_ms = suspect_ms;
    r->dead_ms = dead_ms;
}

void registry_free(registry *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->nodes[i]->info);
        free(r->nodes[i]);
    }
    free(r->nodes);
    free(r->index);
    memset(r, 0, sizeof *r);
}

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

reg_node *registry_find(const registry *r, const char *name)
{
    if (!r->index_cap) return NULL;
    for (size_t i = hash(name) & (r->index_cap - 1);; i = (i + 1) & (r->index_cap - 1)) {
        uint32_t v = r->index[i];
        if (!v) return NULL;
        if (!strcmp(r->nodes[v - 1]->name, name)) return r->nodes[v - 1];
    }
}

static void index_insert(uint32_t *index, size_t cap, const char *name, uint32_t v)
{
    size_t i = hash(name) & (cap - 1);
    while (index[i]) i = (i + 1) & (cap - 1);
    index[i] = v;
}

reg_node *registry_add(registry *r, const char *name)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        reg_node **nodes = realloc(r->nodes, cap * sizeof *nodes);
        if (!nodes) return NULL;
        r->nodes = nodes;
        r->cap = cap;
    }
    /* Keep the index at most half full so probes stay short. */
    if ((r->n + 1) * 2 > r->index_cap) {
        size_t cap = r->index_cap ? r->index_cap * 2 : 128;
        uint32_t *index = calloc(cap, sizeof *index);
        if (!index) return NULL;
        for (size_t i = 0; i < r->n; i++) index_insert(index, cap, r->nodes[i]->name, (uint32_t)i + 1);
        free(r->index);
        r->index = index;
        r->index_cap = cap;
    }
    reg_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    strncpy(n->name, name, sizeof n->name - 1);
    n->live = NODE_ALIVE;
    r->gen++;
    r->nodes[r->n++] = n;
    index_insert(r->index, r->index_cap, n->name, (uint32_t)r->n);
    return n;
}

void registry_set_live(registry *r, reg_node *n, int live)
{
    r->gen += n->live != live;
    n->live = live;
}

int registry_set_info(registry *r, reg_node *n, const uint8_t *info, size_t len, int ngpus, int slots)
{
    r->gen++;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    if (len) memcpy(copy, info, len);
    free(n->info);
    n->info = copy;
    n->info_len = len;
    n->ngpus = ngpus;
    n->slots = slots;
    return 0;
}

int registry_state(const reg_node *n)
{
    if (n->live == NODE_DEAD) return NODE_DEAD;
    return n->drained || n->slurm_out ? NODE_DRAINED : n->live;
}

int registry_tick(registry *r, int64_t now_ms, registry_change_fn fn, void *ctx)
{
    int changes = 0;
    for (size_t i = 0; i < r->n; i++) {
        reg_node *n = r->nodes[i];
        int64_t silent = now_ms - n->last_seen_ms;
        int want = silent >= r->dead_ms ? NODE_DEAD : silent >= r->suspect_ms ? NODE_SUSPECT : NODE_ALIVE;
        /* Only silence moves a node down; coming back is the heartbeat handler's job. */
        if (want > n->live) {
            int from = n->live;
            registry_set_live(r, n, want);
            changes++;
            if (fn) fn(ctx, n, from, want);
        }
    }
    return changes;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(reg_node *const *)a)->name, (*(reg_node *const *)b)->name);
}

reg_node **registry_sorted(const registry *r)
{
    reg_node **v = malloc((r->n ? r->n : 1) * sizeof *v);
    if (!v) return NULL;
    if (r->n) memcpy(v, r->nodes, r->n * sizeof *v);
    qsort(v, r->n, sizeof *v, by_name);
    return v;
}
