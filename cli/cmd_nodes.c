/* atoll nodes | node NAME | drain NAME | undrain NAME */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "jsonw.h"
#include "msg.h"
#include "msg_json.h"

static int fetch(cli_ctx *c, const char *name, Atoll__NodesReply **out)
{
    Atoll__NodesRequest req = ATOLL__NODES_REQUEST__INIT;
    req.name = (char *)(name ? name : "");
    return cli_call(c, ATOLL__MSG_TYPE__MSG_NODES, &req.base, ATOLL__MSG_TYPE__MSG_NODES_REPLY,
                    (ProtobufCMessage **)out);
}

/* "n1" or "n1,n1#1" (distinct islands in GPU order) */
static void islands(const Atoll__Node *n, char *buf, size_t len)
{
    buf[0] = 0;
    for (size_t i = 0; i < n->n_gpus; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++) seen = !strcmp(n->gpus[k]->island, n->gpus[i]->island);
        if (seen) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? "," : "", n->gpus[i]->island);
    }
    if (!buf[0]) snprintf(buf, len, "-");
}

static void gpus(const Atoll__Node *n, char *buf, size_t len)
{
    if (n->n_gpus) snprintf(buf, len, "%zu x %s", n->n_gpus, n->gpus[0]->name);
    else if (n->cpu_ranks) snprintf(buf, len, "cpu:%d", n->cpu_ranks);
    else snprintf(buf, len, "none");
}

static void nics(const Atoll__Node *n, char *buf, size_t len)
{
    if (!n->n_nics) {
        snprintf(buf, len, "-");
        return;
    }
    int lo = n->nics[0]->rail, hi = lo;
    for (size_t i = 0; i < n->n_nics; i++) {
        if (n->nics[i]->rail < lo) lo = n->nics[i]->rail;
        if (n->nics[i]->rail > hi) hi = n->nics[i]->rail;
    }
    const char *ll = n->nics[0]->link_layer;
    snprintf(buf, len, "%zu x %.0f Gb/s %s, rails %d-%d", n->n_nics, n->nics[0]->gbps,
             !strcmp(ll, "InfiniBand") ? "IB" : ll, lo, hi);
}

int cmd_nodes(cli_ctx *c, int argc, char **argv)
{
    (void)argv;
    if (argc > 1) return cli_usage(c, "nodes", "unexpected argument '%s'", argv[1]);
    Atoll__NodesReply *r;
    int rc = fetch(c, NULL, &r);
    if (rc) return rc;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_key(&w, "nodes");
        jsonw_arr(&w);
        for (size_t i = 0; i < r->n_nodes; i++) msg_json_node(&w, r->nodes[i]);
        jsonw_arr_end(&w);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("%-20s %-8s %-32s %-16s %-32s %s\n", "NAME", "STATE", "GPUS", "ISLAND", "NICS", "LEAF");
        for (size_t i = 0; i < r->n_nodes; i++) {
            const Atoll__Node *n = r->nodes[i];
            char g[128], isl[256], x[128];
            gpus(n, g, sizeof g);
            islands(n, isl, sizeof isl);
            nics(n, x, sizeof x);
            printf("%-20s %-8s %-32s %-16s %-32s %s\n", n->name, msg_node_state_name(n->state), g, isl, x,
                   n->leaf[0] ? n->leaf : "-");
        }
        if (!r->n_nodes) printf("(no nodes registered; start `workerd --coordinator %s`)\n", c->coordinator);
    }
    atoll__nodes_reply__free_unpacked(r, NULL);
    return 0;
}

static void print_node(const Atoll__Node *n)
{
    char t1[32], t2[32], g[128], isl[256], x[128];
    cli_time(n->registered_ms, t1, sizeof t1);
    cli_time(n->last_seen_ms, t2, sizeof t2);
    gpus(n, g, sizeof g);
    islands(n, isl, sizeof isl);
    nics(n, x, sizeof x);
    printf("node %s: %s%s%s%s\n", n->name, msg_node_state_name(n->state), n->drained && n->state != 3 ? " (drained)" : "",
           n->slurm_state[0] ? ", Slurm: " : "", n->slurm_state);
    printf("  host %s, agent %s, leaf %s\n", n->host[0] ? n->host : "-", n->address[0] ? n->address : "-",
           n->leaf[0] ? n->leaf : "-");
    printf("  registered %s UTC, last heartbeat %s UTC (%llu heartbeats)\n", t1, t2,
           (unsigned long long)n->heartbeats);
    printf("  GPUs: %s; NVLink islands: %s\n", g, isl);
    if (n->n_gpus) printf("    %-5s %-26s %-10s %-14s %-16s %s\n", "INDEX", "NAME", "MEMORY", "PCI", "ISLAND", "RAIL");
    for (size_t i = 0; i < n->n_gpus; i++) {
        const Atoll__Gpu *q = n->gpus[i];
        printf("    %-5d %-26s %-10.1f %-14s %-16s %d\n", q->index, q->name, q->memory_bytes / 1073741824.0,
               q->pci_bus_id, q->island, q->rail);
    }
    printf("  NICs: %s\n", x);
    for (size_t i = 0; i < n->n_nics; i++) {
        const Atoll__Nic *q = n->nics[i];
        printf("    %-10s %6.0f Gb/s %-11s %-14s rail %d\n", q->name, q->gbps, q->link_layer, q->pci_bus_id, q->rail);
    }
}

int cmd_node(cli_ctx *c, int argc, char **argv)
{
    if (argc != 2) return cli_usage(c, "node", "expected one node name");
    Atoll__NodesReply *r;
    int rc = fetch(c, argv[1], &r);
    if (rc) return rc;
    if (r->n_nodes != 1) {
        atoll__nodes_reply__free_unpacked(r, NULL);
        fprintf(stderr, "atoll: the coordinator answered with %zu nodes for one name\n", r->n_nodes);
        return CLI_REFUSED;
    }
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        msg_json_node(&w, r->nodes[0]);
        jsonw_print_free(jsonw_take(&w));
    } else {
        print_node(r->nodes[0]);
    }
    atoll__nodes_reply__free_unpacked(r, NULL);
    return 0;
}

int cmd_drain(cli_ctx *c, int argc, char **argv)
{
    if (argc != 2) return cli_usage(c, argv[0], "expected one node name");
    Atoll__DrainRequest req = ATOLL__DRAIN_REQUEST__INIT;
    req.name = argv[1];
    req.drain = !strcmp(argv[0], "drain");
    Atoll__NodesReply *r;
    int rc = cli_call(c, ATOLL__MSG_TYPE__MSG_DRAIN, &req.base, ATOLL__MSG_TYPE__MSG_NODES_REPLY,
                      (ProtobufCMessage **)&r);
    if (rc) return rc;
    const Atoll__Node *n = r->n_nodes ? r->nodes[0] : NULL;
    if (c->json) {
        jsonw w;
        jsonw_init(&w);
        jsonw_obj(&w);
        jsonw_kstr(&w, "node", argv[1]);
        jsonw_kstr(&w, "state", n ? msg_node_state_name(n->state) : "unknown");
        jsonw_kbool(&w, "drained", n ? n->drained : req.drain);
        jsonw_obj_end(&w);
        jsonw_print_free(jsonw_take(&w));
    } else {
        printf("node %s %s (state %s)\n", argv[1], req.drain ? "drained: no new work will be placed on it"
                                                             : "undrained: open for new work",
               n ? msg_node_state_name(n->state) : "unknown");
    }
    atoll__nodes_reply__free_unpacked(r, NULL);
    return 0;
}
