#include "kv.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_entry {
    struct kv_entry *next;   /* hash chain */
    uint64_t job;
    uint32_t epoch;
    uint64_t hash;
    char *key;
    uint8_t *val;
    size_t len;
} kv_entry;

typedef struct kv_scope {
    struct kv_scope *next;
    uint64_t job;
    uint32_t epoch;
    size_t bytes, keys;
} kv_scope;

typedef struct kv_waiter {
    struct kv_waiter *next;
    uint64_t job;
    uint32_t epoch;
    char *key;
    void *who;
    int64_t deadline_ms;
} kv_waiter;

struct kv_store {
    kv_entry **buckets;
    size_t nbuckets, nentries;
    kv_scope *scopes;
    kv_waiter *waiters;
    kv_answer_fn answer;
    void *ctx;
};

/* FNV-1a over the scope and the key. */
static uint64_t hash_of(uint64_t job, uint32_t epoch, const char *key)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)(job >> (8 * i))) * 1099511628211ull;
    for (int i = 0; i < 4; i++) h = (h ^ (uint8_t)(epoch >> (8 * i))) * 1099511628211ull;
    for (const char *p = key; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

kv_store *kv_new(kv_answer_fn answer, void *ctx)
{
    kv_store *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->nbuckets = 256;
    kv->buckets = calloc(kv->nbuckets, sizeof *kv->buckets);
    if (!kv->buckets) {
        free(kv);
        return NULL;
    }
    kv->answer = answer;
    kv->ctx = ctx;
    return kv;
}

static void free_entry(kv_entry *e)
{
    free(e->key);
    free(e->val);
    free(e);
}

void kv_free(kv_store *kv)
{
    if (!kv) return;
    for (size_t b = 0; b < kv->nbuckets; b++)
        for (kv_entry *e = kv->buckets[b], *n; e; e = n) {
            n = e->next;
            free_entry(e);
        }
    for (kv_scope *s = kv->scopes, *n; s; s = n) {
        n = s->next;
        free(s);
    }
    for (kv_waiter *w = kv->waiters, *n; w; w = n) {
        n = w->next;
        free(w->key);
        free(w);
    }
    free(kv->buckets);
    free(kv);
}

const char *kv_check_key(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0) return "a rendezvous key must not be empty";
    if (n > KV_MAX_KEY) return "a rendezvous key is at most 1024 bytes";
    return "";
}

static kv_scope *scope_of(kv_store *kv, uint64_t job, uint32_t epoch, int create)
{
    for (kv_scope *s = kv->scopes; s; s = s->next)
        if (s->job == job && s->epoch == epoch) return s;
    if (!create) return NULL;
    kv_scope *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->job = job;
    s->epoch = epoch;
    s->next = kv->scopes;
    kv->scopes = s;
    return s;
}

static kv_entry **find(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, uint64_t h)
{
    kv_entry **pp = &kv->buckets[h & (kv->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->job == job && (*pp)->epoch == epoch && !strcmp((*pp)->key, key)) return pp;
    return pp;
}

static void grow(kv_store *kv)
{
    size_t nb = kv->nbuckets * 2;
    kv_entry **b = calloc(nb, sizeof *b);
    if (!b) return; /* chains just get longer */
    for (size_t i = 0; i < kv->nbuckets; i++)
        for (kv_entry *e = kv->buckets[i], *n; e; e = n) {
            n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(kv->buckets);
    kv->buckets = b;
    kv->nbuckets = nb;
}

static void wake(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t *v, size_t len)
{
    for (kv_waiter **w = &kv->waiters; *w;) {
        kv_waiter *x = *w;
        if (x->job == job && x->epoch == epoch && !strcmp(x->key, key)) {
            *w = x->next;
            kv->answer(kv->ctx, x->who, 1, v, len);
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

static int put(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t *v, size_t len,
               char *err, size_t errlen)
{
    const char *why = kv_check_key(key);
    if (*why) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (len > KV_MAX_VALUE) {
        snprintf(err, errlen, "a rendezvous value is at most %u bytes, this one has %zu", KV_MAX_VALUE, len);
        return -1;
    }
    kv_scope *s = scope_of(kv, job, epoch, 1);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t h = hash_of(job, epoch, key);
    kv_entry **pp = find(kv, job, epoch, key, h);
    size_t klen = strlen(key), old = *pp ? klen + (*pp)->len : 0;
    if (s->bytes - old + klen + len > KV_SCOPE_BYTES || (!*pp && s->keys + 1 > KV_SCOPE_KEYS)) {
        snprintf(err, errlen, "job %" PRIu64 " epoch %u would hold more than %u MiB or %u keys of rendezvous "
                 "data; refused", job, epoch, KV_SCOPE_BYTES >> 20, KV_SCOPE_KEYS);
        return -1;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (len) memcpy(copy, v, len);
    kv_entry *e = *pp;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key))) {
            free(e);
            free(copy);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        e->job = job;
        e->epoch = epoch;
        e->hash = h;
        e->next = kv->buckets[h & (kv->nbuckets - 1)];
        kv->buckets[h & (kv->nbuckets - 1)] = e;
        s->keys++;
        if (++kv->nentries > 2 * kv->nbuckets) grow(kv);
    }
    free(e->val);
    e->val = copy;
    e->len = len;
    s->bytes = s->bytes - old + klen + len;
    wake(kv, job, epoch, key, copy, len);
    return 0;
}

int kv_set(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t *v, size_t len,
           char *err, size_t errlen)
{
    return put(kv, job, epoch, key, v, len, err, errlen);
}

int kv_get(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, const uint8_t **v, size_t *len)
{
    if (*kv_check_key(key)) return 0;
    kv_entry *e = *find(kv, job, epoch, key, hash_of(job, epoch, key));
    if (!e) return 0;
    *v = e->val;
    *len = e->len;
    return 1;
}

int kv_add(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, int64_t delta, int64_t *out,
           char *err, size_t errlen)
{
    const uint8_t *v;
    size_t len;
    int64_t cur = 0;
    if (kv_get(kv, job, epoch, key, &v, &len)) {
        char tmp[32];
        size_t l = len < sizeof tmp - 1 ? len : sizeof tmp - 1;
        memcpy(tmp, v, l);
        tmp[l] = 0;
        cur = strtoll(tmp, NULL, 10);
    }
    cur += delta;
    char num[32];
    int l = snprintf(num, sizeof num, "%" PRId64, cur);
    if (put(kv, job, epoch, key, (const uint8_t *)num, (size_t)l, err, errlen)) return -1;
    *out = cur;
    return 0;
}

int kv_wait(kv_store *kv, uint64_t job, uint32_t epoch, const char *key, void *who, int64_t deadline_ms)
{
    kv_waiter *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(key))) {
        free(w);
        return -1;
    }
    w->job = job;
    w->epoch = epoch;
    w->who = who;
    w->deadline_ms = deadline_ms;
    w->next = kv->waiters;
    kv->waiters = w;
    return 0;
}

void kv_expire(kv_store *kv, int64_t now_ms)
{
    for (kv_waiter **w = &kv->waiters; *w;) {
        kv_waiter *x = *w;
        if (now_ms >= x->deadline_ms) {
            *w = x->next;
            kv->answer(kv->ctx, x->who, 0, NULL, 0);
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

void kv_forget(kv_store *kv, void *who)
{
    for (kv_waiter **w = &kv->waiters; *w;) {
        kv_waiter *x = *w;
        if (x->who == who) {
            *w = x->next;
            free(x->key);
            free(x);
        } else {
            w = &x->next;
        }
    }
}

void kv_drop(kv_store *kv, uint64_t job, uint32_t keep_epoch, int all)
{
    int dropped = 0;
    for (kv_scope **s = &kv->scopes; *s;) {
        kv_scope *x = *s;
        if (x->job == job && (all || x->epoch < keep_epoch)) {
            *s = x->next;
            free(x);
            dropped = 1;
        } else {
            s = &x->next;
        }
    }
    if (!dropped) return;
    for (size_t b = 0; b < kv->nbuckets; b++)
        for (kv_entry **pp = &kv->buckets[b]; *pp;) {
            kv_entry *e = *pp;
            if (e->job == job && (all || e->epoch < keep_epoch)) {
                *pp = e->next;
                free_entry(e);
                kv->nentries--;
            } else {
                pp = &e->next;
            }
        }
}

size_t kv_scope_bytes(const kv_store *kv, uint64_t job, uint32_t epoch)
{
    for (kv_scope *s = kv->scopes; s; s = s->next)
        if (s->job == job && s->epoch == epoch) return s->bytes;
    return 0;
}
