/* logs: `atoll logs`. A rank's log lives on its node (workerd's --work-dir); the
 * coordinator forwards the request to that node's agent (LogRead) and the answer
 * (LogData) back to the client, without waiting: each forwarded read is parked
 * here with its client until the answer comes, the client goes away, or
 * LOGS_TIMEOUT_MS passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "log.h"

#define LOGS_TIMEOUT_MS 5000
#define LOGS_MAX_BYTES (1u << 20)

struct logs_pending {
    struct logs_pending *next;
    uint64_t id;
    coord_peer *client;
    char node[64];
    uint32_t epoch;
    int64_t deadline_ms;
};

void logs_request(coord *c, coord_peer *p, const Atoll__LogsRequest *m)
{
    store_job j;
    if (coord_find_job(c, p, m->job, &j)) return;
    uint32_t epoch = m->by_epoch ? m->epoch : j.epoch;
    Atoll__JobLayout *l = epoch <= j.epoch ? coord_layout(c, j.id, epoch) : NULL;
    if (!l) {
        if (epoch > j.epoch)
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "job %llu has no epoch %u: its placements are epochs "
                        "0..%u", (unsigned long long)j.id, epoch, j.epoch);
        else if (epoch < j.epoch)
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "job %llu was never placed in epoch %u, so that "
                        "epoch has no logs", (unsigned long long)j.id, epoch);
        else
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "job %llu has not been placed yet (%s), so it has no "
                        "logs", (unsigned long long)j.id, j.message);
        store_job_clear(&j);
        return;
    }
    const char *node = NULL;
    for (size_t i = 0; i < l->n_ranks; i++)
        if (l->ranks[i]->rank == m->rank) node = l->ranks[i]->node;
    reg_node *n = node ? registry_find(&c->reg, node) : NULL;
    if (!node) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "job %llu has ranks 0..%zu in epoch %u; there is no rank %d",
                    (unsigned long long)j.id, l->n_ranks ? l->n_ranks - 1 : 0, epoch, m->rank);
    } else if (!n || !n->peer) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_NOT_FOUND,
                    "node %s (rank %d) is not connected now; its log is job-%llu/epoch-%u/rank-%d.log in that "
                    "workerd's --work-dir", node, m->rank, (unsigned long long)j.id, epoch, m->rank);
    } else {
        struct logs_pending *x = calloc(1, sizeof *x);
        if (!x) {
            coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
        } else {
            x->id = ++c->next_log_id;
            x->client = p;
            x->epoch = epoch;
            snprintf(x->node, sizeof x->node, "%s", node);
            x->deadline_ms = c->now() + LOGS_TIMEOUT_MS;
            x->next = c->logs;
            c->logs = x;
            Atoll__LogRead rd = ATOLL__LOG_READ__INIT;
            rd.id = x->id;
            rd.job = j.id;
            rd.epoch = epoch;
            rd.rank = m->rank;
            rd.offset = m->offset;
            rd.max_bytes = m->max_bytes == 0 ? 65536 : m->max_bytes > LOGS_MAX_BYTES ? LOGS_MAX_BYTES : m->max_bytes;
            c->send(c, n->peer, ATOLL__MSG_TYPE__MSG_LOG_READ, &rd.base);
        }
    }
    atoll__job_layout__free_unpacked(l, NULL);
    store_job_clear(&j);
}

void logs_data(coord *c, coord_peer *p, const Atoll__LogData *m)
{
    for (struct logs_pending **pp = &c->logs; *pp; pp = &(*pp)->next) {
        struct logs_pending *x = *pp;
        if (x->id != m->id) continue;
        if (!p->node || strcmp(p->node->name, x->node)) return; /* only the node asked may answer */
        *pp = x->next;
        if (m->error && m->error[0]) {
            coord_error(c, x->client, ATOLL__ERROR_CODE__ERR_NOT_FOUND, "node %s: %s", x->node, m->error);
        } else {
            Atoll__LogsReply r = ATOLL__LOGS_REPLY__INIT;
            r.data = m->data;
            r.offset = m->offset;
            r.size = m->size;
            r.node = x->node;
            r.running = m->running;
            r.epoch = x->epoch;
            c->send(c, x->client, ATOLL__MSG_TYPE__MSG_LOGS_REPLY, &r.base);
        }
        free(x);
        return;
    }
}

void logs_expire(coord *c, int64_t now_ms)
{
    for (struct logs_pending **pp = &c->logs; *pp;) {
        struct logs_pending *x = *pp;
        if (now_ms >= x->deadline_ms) {
            *pp = x->next;
            coord_error(c, x->client, ATOLL__ERROR_CODE__ERR_INTERNAL, "node %s did not answer the log read within %d ms",
                        x->node, LOGS_TIMEOUT_MS);
            free(x);
        } else {
            pp = &x->next;
        }
    }
}

void logs_peer_closed(coord *c, coord_peer *p)
{
    for (struct logs_pending **pp = &c->logs; *pp;) {
        struct logs_pending *x = *pp;
        if (x->client == p) {
            *pp = x->next;
            free(x);
        } else {
            pp = &x->next;
        }
    }
}

void logs_free_all(coord *c)
{
    while (c->logs) {
        struct logs_pending *x = c->logs;
        c->logs = x->next;
        free(x);
    }
}
