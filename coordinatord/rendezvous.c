/* rendezvous: the key-value store the ranks of cluster jobs meet through
 * (common/kv.h semantics, the same protocol and client as the standalone
 * launcher's store). Only a connection that proved a job's secret (ROLE_RANK,
 * rpc.c) may use keys, and only those of the (job, epoch) it proved; each scope
 * is bounded in memory and dropped when its job ends or restarts. Keys live in
 * memory: a rendezvous takes seconds, and ranks that lose the coordinator in the
 * middle of one fail and are restarted with the job. */
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "log.h"

static void answer(void *ctx, void *who, int found, const uint8_t *v, size_t len)
{
    coord *c = ctx;
    Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
    r.found = found;
    r.value.data = (uint8_t *)v;
    r.value.len = len;
    c->send(c, who, ATOLL__MSG_TYPE__MSG_KV_REPLY, &r.base);
}

int rendezvous_init(coord *c)
{
    c->kv = kv_new(answer, c);
    return c->kv ? 0 : -1;
}

/* The peer may use keys of (job, epoch): it authenticated with exactly that scope's secret. */
static int in_scope(coord *c, coord_peer *p, uint64_t job, uint32_t epoch)
{
    if (p->role != ATOLL__ROLE__ROLE_RANK) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                    "rendezvous keys belong to a job's ranks: authenticate as ROLE_RANK with the job secret "
                    "(ATOLL_JOB_SECRET_FD), not the cluster token");
        return 0;
    }
    if (job != p->job || epoch != p->epoch) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_UNAUTHENTICATED,
                    "this connection proved the secret of job %llu epoch %u, not of job %llu epoch %u",
                    (unsigned long long)p->job, p->epoch, (unsigned long long)job, epoch);
        return 0;
    }
    return 1;
}

void rendezvous_set(coord *c, coord_peer *p, const Atoll__KvSet *m)
{
    if (!in_scope(c, p, m->job, m->epoch)) return;
    char err[300];
    if (kv_set(c->kv, m->job, m->epoch, m->key, m->value.data, m->value.len, err, sizeof err)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "%s", err);
        return;
    }
    answer(c, p, 1, NULL, 0);
}

void rendezvous_get(coord *c, coord_peer *p, const Atoll__KvGet *m)
{
    if (!in_scope(c, p, m->job, m->epoch)) return;
    const char *why = kv_check_key(m->key);
    if (*why) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "%s", why);
        return;
    }
    const uint8_t *v;
    size_t len;
    if (kv_get(c->kv, m->job, m->epoch, m->key, &v, &len)) answer(c, p, 1, v, len);
    else if (!m->wait_ms) answer(c, p, 0, NULL, 0);
    else if (kv_wait(c->kv, m->job, m->epoch, m->key, p,
                     c->now() + (m->wait_ms > KV_MAX_WAIT_MS ? KV_MAX_WAIT_MS : m->wait_ms)))
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
}

void rendezvous_add(coord *c, coord_peer *p, const Atoll__KvAdd *m)
{
    if (!in_scope(c, p, m->job, m->epoch)) return;
    char err[300];
    int64_t out;
    if (kv_add(c->kv, m->job, m->epoch, m->key, m->delta, &out, err, sizeof err)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "%s", err);
        return;
    }
    Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
    r.found = 1;
    r.number = out;
    c->send(c, p, ATOLL__MSG_TYPE__MSG_KV_REPLY, &r.base);
}

void rendezvous_expire(coord *c, int64_t now_ms) { kv_expire(c->kv, now_ms); }
void rendezvous_peer_closed(coord *c, coord_peer *p) { kv_forget(c->kv, p); }

void rendezvous_job_changed(coord *c, uint64_t job, uint32_t epoch, int ended)
{
    kv_drop(c->kv, job, epoch, ended);
}

void rendezvous_free_all(coord *c)
{
    kv_free(c->kv);
    c->kv = NULL;
}
