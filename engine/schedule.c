#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sched_warmup(int p, int rank, int m, int v)
{
    int total = m * v;
    int w = v == 1 ? p - rank - 1 : (p - rank - 1) * 2 + (v - 1) * p;
    return w < total ? w : total;
}

double sched_bubble_theory(int p, int m, int v) { return (double)(p - 1) / ((double)v * m); }

const char *sched_op_name(sched_op op)
{
    static const char *const names[] = {"FWD", "BWD", "SEND_FWD", "RECV_FWD", "SEND_BWD", "RECV_BWD"};
    return op <= SCHED_RECV_BWD ? names[op] : "?";
}

/* The k-th forward (backward) of the interleaved order; for v = 1 this is
 * micro-batch k on chunk 0. */
static void nth(int p, int v, int k, int backward, int *mb, int *chunk)
{
    int in_group = k % (p * v);
    *chunk = in_group / p;
    if (backward) *chunk = v - 1 - *chunk;
    *mb = (k / (p * v)) * p + k % p;
}

static void push(sched_list *s, sched_op op, int mb, int chunk, int peer)
{
    s->a[s->n++] = (sched_action){op, mb, chunk, peer};
}

static void emit(sched_list *s, int k, int backward)
{
    int p = s->p, r = s->rank, mb, c;
    nth(p, s->v, k, backward, &mb, &c);
    int stage = sched_virtual_stage(p, r, c), last = s->v * p - 1;
    int prev = (r - 1 + p) % p, next = (r + 1) % p;
    if (!backward) {
        if (stage > 0) push(s, SCHED_RECV_FWD, mb, c, prev);
        push(s, SCHED_FWD, mb, c, -1);
        if (stage < last) push(s, SCHED_SEND_FWD, mb, c, next);
    } else {
        if (stage < last) push(s, SCHED_RECV_BWD, mb, c, next);
        push(s, SCHED_BWD, mb, c, -1);
        if (stage > 0) push(s, SCHED_SEND_BWD, mb, c, prev);
    }
}

int sched_build(int p, int rank, int m, int v, sched_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (p < 1 || m < 1 || v < 1 || rank < 0 || rank >= p) {
        snprintf(err, errlen, "schedule: need pipeline size >= 1, 0 <= rank < p, micro-batches >= 1 "
                 "and virtual stages >= 1 (got p=%d rank=%d m=%d v=%d)", p, rank, m, v);
        return -1;
    }
    if (v > 1 && p < 2) {
        snprintf(err, errlen, "schedule: interleaving (v=%d virtual stages) needs "
                 "--pipeline-model-parallel-size >= 2 (got %d)", v, p);
        return -1;
    }
    if (v > 1 && m % p != 0) {
        snprintf(err, errlen, "schedule: the interleaved schedule needs the number of micro-batches "
                 "(%d) to be a multiple of --pipeline-model-parallel-size (%d)", m, p);
        return -1;
    }
    int total = m * v;
    out->p = p;
    out->rank = rank;
    out->m = m;
    out->v = v;
    out->warmup = sched_warmup(p, rank, m, v);
    out->a = malloc(sizeof(sched_action) * (size_t)total * 6);
    for (int k = 0; k < out->warmup; k++) emit(out, k, 0);
    for (int i = 0; i < total - out->warmup; i++) {
        emit(out, out->warmup + i, 0);
        emit(out, i, 1);
    }
    for (int i = total - out->warmup; i < total; i++) emit(out, i, 1);
    return 0;
}

void sched_free(sched_list *s)
{
    free(s->a);
    memset(s, 0, sizeof *s);
}

uint32_t sched_tag(const sched_list *s, const sched_action *a)
{
    int stage = sched_virtual_stage(s->p, s->rank, a->chunk), dir, to;
    switch (a->op) {
    case SCHED_SEND_FWD: dir = 0; to = stage + 1; break;
    case SCHED_RECV_FWD: dir = 0; to = stage; break;
    case SCHED_SEND_BWD: dir = 1; to = stage - 1; break;
    case SCHED_RECV_BWD: dir = 1; to = stage; break;
    default: return 0;
    }
    uint32_t stages = (uint32_t)(s->v * s->p);
    return (((uint32_t)a->mb * stages + (uint32_t)to) << 1) | (uint32_t)dir;
}

/* ---------------- simulator ---------------- */

typedef struct {
    int done; /* index of the next action */
    double clock, wait;
} sim_rank;

int sched_simulate(int p, int m, int v, double cost_fwd, double cost_bwd, sched_sim_result *res,
                   char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    sched_list *L = calloc((size_t)p, sizeof *L);
    int rc = 0;
    for (int r = 0; r < p && rc == 0; r++) rc = sched_build(p, r, m, v, &L[r], err, errlen);
    if (rc == 0) rc = sched_simulate_lists(L, cost_fwd, cost_bwd, 0, res);
    for (int r = 0; r < p; r++) sched_free(&L[r]);
    free(L);
    return rc;
}

int sched_simulate_lists(const sched_list *L, double cost_fwd, double cost_bwd,
                         double cost_xfer, sched_sim_result *res)
{
    memset(res, 0, sizeof *res);
    int p = L[0].p, m = L[0].m, v = L[0].v, rc = 0;
    sim_rank *R = calloc((size_t)p, sizeof *R);
    /* sent[dst][tag] = time the message became available, < 0 if not yet sent */
    size_t ntags = (size_t)m * (size_t)(v * p) * 2;
    double *sent = malloc(sizeof(double) * ntags * (size_t)p);
    for (size_t i = 0; i < ntags * (size_t)p; i++) sent[i] = -1;

    for (int moved = 1; rc == 0 && moved;) {
        moved = 0;
        for (int r = 0; r < p; r++) {
            sim_rank *x = &R[r];
            while (x->done < L[r].n) {
                const sched_action *a = &L[r].a[x->done];
                uint32_t tag = sched_tag(&L[r], a);
                if (a->op == SCHED_RECV_FWD || a->op == SCHED_RECV_BWD) {
                    double t = sent[(size_t)r * ntags + tag];
                    if (t < 0) break; /* blocked */
                    if (t > x->clock) {
                        x->wait += t - x->clock;
                        x->clock = t;
                    }
                } else if (a->op == SCHED_SEND_FWD || a->op == SCHED_SEND_BWD) {
                    sent[(size_t)a->peer * ntags + tag] = x->clock + cost_xfer;
                } else {
                    x->clock += a->op == SCHED_FWD ? cost_fwd : cost_bwd;
                }
                x->done++;
                moved = 1;
            }
        }
    }
    if (rc == 0) {
        int w = 0;
        for (int r = 0; r < p; r++) {
            if (R[r].done < L[r].n) {
                const sched_action *a = &L[r].a[R[r].done];
                res->deadlock = 1;
                w += snprintf(res->why + w, sizeof res->why - (size_t)w,
                              "%srank %d waits at action %d %s(mb %d, chunk %d) from rank %d",
                              w ? "; " : "", r, R[r].done, sched_op_name(a->op), a->mb, a->chunk,
                              a->peer);
                if (w >= (int)sizeof res->why) w = (int)sizeof res->why - 1;
            }
            if (r < SCHED_SIM_RANKS) {
                res->wait[r] = R[r].wait;
                res->finish[r] = R[r].clock;
            }
            if (R[r].clock > res->makespan) res->makespan = R[r].clock;
            if (R[r].wait > res->wait_max) res->wait_max = R[r].wait;
        }
        res->ideal = (double)m * v * (cost_fwd + cost_bwd);
        res->bubble = (res->makespan - res->ideal) / res->ideal;
    }
    free(R);
    free(sent);
    return rc;
}
