/* coord: setting up and tearing down the coordinator's state, and its counters. */
#include "coord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "fabric.h"
#include "slurm.h"
#include "jobs.h"
#include "series.h"
#include "log.h"
#include "topo.h"

int64_t coord_wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void discard(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c; (void)p; (void)type; (void)m;
}

static void forget(coord *c, coord_peer *p, const char *reason)
{
    (void)c; (void)p; (void)reason;
}

typedef struct {
    coord *c;
    int loaded;
} load_ctx;

/* Nodes come back with their identity, drain flag and liveness; their silence is
 * counted from the coordinator's start, so live agents have one node timeout to
 * reconnect before they are declared dead. */
static int load_node(void *ctx, const store_node *sn)
{
    load_ctx *l = ctx;
    reg_node *n = registry_add(&l->c->reg, sn->name);
    if (!n) return 1;
    Atoll__Node *node = atoll__node__unpack(NULL, sn->info_len, sn->info);
    int ngpus = node ? (int)node->n_gpus : 0;
    int slots = node ? (ngpus ? ngpus : node->cpu_ranks) : 0;
    if (node) atoll__node__free_unpacked(node, NULL);
    registry_set_info(&l->c->reg, n, sn->info, sn->info_len, ngpus, slots);
    registry_set_live(&l->c->reg, n, sn->state);
    n->drained = sn->drained;
    n->registered_ms = sn->registered_ms;
    n->last_seen_ms = l->c->now();
    l->loaded++;
    return 0;
}

void coord_opts_defaults(coord_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->listen, sizeof o->listen, "127.0.0.1:7420");
    snprintf(o->http, sizeof o->http, "127.0.0.1:7421");
    snprintf(o->state_dir, sizeof o->state_dir, "./atoll-state");
    o->heartbeat_ms = 1000;
    o->node_timeout_ms = 5000;
    o->max_frame = 16u << 20;
    o->http_max_conns = 512;
    o->hang_floor_ms = 10000;
    o->hang_factor = 3;
    o->straggler_threshold = 1.5;
    o->max_restarts = 3;
    o->slurm_poll_ms = 10000; /* main turns it off outside a Slurm job unless --slurm-poll says */
}

int coord_init(coord *c, const coord_opts *o, const char *db_path, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->o = *o;
    c->now = coord_wall_ms;
    c->send = discard;
    c->drop = forget;
    c->started_ms = coord_wall_ms();
    registry_init(&c->reg, o->suspect_ms, o->node_timeout_ms);
    if (o->fabric[0] && fabric_load(&c->fab, o->fabric, err, errlen)) return -1;
    if (!o->fabric[0] && o->fabric_from_slurm) {
        char from[700], why[400] = "";
        int rc = slurm_fabric(&c->fab, from, sizeof from, why, sizeof why);
        if (rc == 0)
            log_info("fabric from Slurm (%s): %d switches, %d nodes", from, fabric_num_switches(c->fab),
                     fabric_num_nodes(c->fab));
        else if (rc == 1)
            log_info("no switch tree from Slurm: %s; placement goes without leaf switches", from);
        else
            log_warn("the switch tree from Slurm (%s) is unusable, placing without it: %s", from, why);
    }
    if (rendezvous_init(c)) {
        snprintf(err, errlen, "out of memory");
        fabric_free(c->fab);
        c->fab = NULL;
        return -1;
    }
    if (store_open(&c->st, db_path, err, errlen)) {
        rendezvous_free_all(c);
        fabric_free(c->fab);
        c->fab = NULL;
        return -1;
    }
    load_ctx l = { c, 0 };
    if (store_nodes_each(c->st, load_node, &l)) {
        snprintf(err, errlen, "cannot load nodes from %s: %s", db_path, store_errmsg(c->st));
        coord_free(c);
        return -1;
    }
    if (l.loaded) log_info("loaded %d nodes from %s; waiting for their agents to reconnect", l.loaded, db_path);
    jobs_reconcile(c);
    return 0;
}

void coord_free(coord *c)
{
    series_flush(c);
    jobs_live_free(c);
    logs_free_all(c);
    rendezvous_free_all(c);
    store_close(c->st);
    c->st = NULL;
    registry_free(&c->reg);
    fabric_free(c->fab);
    c->fab = NULL;
}

void coord_hist_add(coord_hist *h, uint64_t us)
{
    int b = 0;
    while (b < COORD_HIST_BUCKETS - 1 && (1ull << b) <= us) b++;
    h->bucket[b]++;
    h->count++;
    h->sum_us += us;
}

uint64_t coord_hist_quantile(const coord_hist *h, double q)
{
    if (!h->count) return 0;
    uint64_t need = (uint64_t)(q * (double)h->count + 0.999999), seen = 0;
    for (int b = 0; b < COORD_HIST_BUCKETS; b++) {
        seen += h->bucket[b];
        if (seen >= need) return 1ull << b;
    }
    return 1ull << (COORD_HIST_BUCKETS - 1);
}
