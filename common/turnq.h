/* turnq: connections waiting for their turn of the event loop, oldest first.
 *
 * A daemon serves a bounded amount of each connection's work per loop turn (RPC
 * frames, HTTP requests) so that no client holds up the others or the
 * heartbeats; what is left waits here for the next turn. The queue is intrusive:
 * the connection embeds a turnq_link and is in the queue at most once
 * (turnq_push on a queued link does nothing). No allocation; O(1) push and pop,
 * remove (a connection closed while waiting) walks the queue.
 *
 * Ownership: the queue borrows its links; remove a link before freeing it. */
#ifndef ATOLL_TURNQ_H
#define ATOLL_TURNQ_H

#include <stddef.h>

typedef struct turnq_link {
    struct turnq_link *next;
    int queued;
} turnq_link;

typedef struct turnq {
    turnq_link *head, *tail;
} turnq;

/* The struct of type `type` whose member `member` is the link `l`. */
#define TURNQ_ENTRY(l, type, member) ((type *)(void *)((char *)(l) - offsetof(type, member)))

/* Appends l unless it is already queued; 1 when it was appended. */
static inline int turnq_push(turnq *q, turnq_link *l)
{
    if (l->queued) return 0;
    l->queued = 1;
    l->next = NULL;
    if (q->tail) q->tail->next = l;
    else q->head = l;
    q->tail = l;
    return 1;
}

/* Takes the oldest link off the queue; NULL when it is empty. */
static inline turnq_link *turnq_pop(turnq *q)
{
    turnq_link *l = q->head;
    if (!l) return NULL;
    q->head = l->next;
    if (!q->head) q->tail = NULL;
    l->next = NULL;
    l->queued = 0;
    return l;
}

/* Takes l off the queue wherever it is (nothing when it is not queued). */
static inline void turnq_remove(turnq *q, turnq_link *l)
{
    if (!l->queued) return;
    turnq_link **pp = &q->head, *prev = NULL;
    while (*pp && *pp != l) prev = *pp, pp = &(*pp)->next;
    if (*pp) *pp = l->next;
    if (q->tail == l) q->tail = prev;
    l->next = NULL;
    l->queued = 0;
}

#endif
