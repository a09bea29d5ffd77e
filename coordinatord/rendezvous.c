/* rendezvous: the key-value store ranks use to exchange NCCL unique ids and
 * host-transport addresses. Keys live in SQLite, scoped to (job, epoch), so a
 * restart of the coordinator does not lose a half-finished rendezvous; a get with
 * wait_ms parks the request until the key is set or the wait runs out. */
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "log.h"

struct kv_waiter {
    kv_waiter *next;
    coord_peer *peer;
    uint64_t job;
    uint32_t epoch;
    char *key;
    int64_t deadline_ms;
};

#define KV_MAX_KEY 256
#define KV_MAX_VALUE (1u << 20)

static void reply(coord *c, coord_peer *p, int found, const uint8_t *v, size_t len)
{
    Atoll__KvReply r = ATOLL__KV_REPLY__INIT;
    r.found = found;
    r.value.data = (uint8_t *)v;
    r.value.len = len;
    c->send(c, p, ATOLL__MSG_TYPE__MSG_KV_REPLY, &r.base);
}

static int check_key(coord *c, coord_peer *p, const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > KV_MAX_KEY) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "rendezvous key must be 1..%d bytes, got %zu", KV_MAX_KEY, n);
        return -1;
    }
    return 0;
}

void rendezvous_set(coord *c, coord_peer *p, const Atoll__KvSet *m)
{
    if (check_key(c, p, m->key)) return;
    if (m->value.len > KV_MAX_VALUE) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INVALID, "rendezvous value is %zu bytes; at most %u",
                    m->value.len, KV_MAX_VALUE);
        return;
    }
    if (store_kv_set(c->st, m->job, m->epoch, m->key, m->value.data, m->value.len)) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot store key: %s", store_errmsg(c->st));
        return;
    }
    reply(c, p, 1, m->value.data, m->value.len);
    /* Wake whoever waits for this key. */
    for (kv_waiter **w = &c->waiters; *w;) {
        kv_waiter *x = *w;
        if (x->job == m->job && x->epoch == m->epoch && !strcmp(x->key, m->key)) {
            reply(c, x->peer, 1, m->value.data, m->value.len);
            *w = x->next;
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

void rendezvous_get(coord *c, coord_peer *p, const Atoll__KvGet *m)
{
    if (check_key(c, p, m->key)) return;
    uint8_t *v = NULL;
    size_t len = 0;
    int r = store_kv_get(c->st, m->job, m->epoch, m->key, &v, &len);
    if (r < 0) {
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "cannot read key: %s", store_errmsg(c->st));
        return;
    }
    if (r == 0 || m->wait_ms == 0) {
        reply(c, p, r == 0, v, len);
        free(v);
        return;
    }
    kv_waiter *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(m->key))) {
        free(w);
        coord_error(c, p, ATOLL__ERROR_CODE__ERR_INTERNAL, "out of memory");
        return;
    }
    w->peer = p;
    w->job = m->job;
    w->epoch = m->epoch;
    w->deadline_ms = c->now() + (m->wait_ms > 600000 ? 600000 : m->wait_ms);
    w->next = c->waiters;
    c->waiters = w;
}

void rendezvous_expire(coord *c, int64_t now_ms)
{
    for (kv_waiter **w = &c->waiters; *w;) {
        kv_waiter *x = *w;
        if (now_ms >= x->deadline_ms) {
            reply(c, x->peer, 0, NULL, 0);
            *w = x->next;
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

void rendezvous_peer_closed(coord *c, coord_peer *p)
{
    for (kv_waiter **w = &c->waiters; *w;) {
        kv_waiter *x = *w;
        if (x->peer == p) {
            *w = x->next;
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

void rendezvous_free_all(coord *c)
{
    while (c->waiters) {
        kv_waiter *x = c->waiters;
        c->waiters = x->next;
        free(x->key);
        free(x);
    }
}
