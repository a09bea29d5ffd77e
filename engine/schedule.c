#include "schedule.h"
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double sched_bubble_theory(int p, int m, int v) { return (double)(p - 1) / ((double)v * m); }

const char *sched_op_name(sched_op op)
{
    static const char *const names[] = {"FWD", "BWD", "SEND_FWD", "RECV_FWD", "SEND_BWD", "RECV_BWD"};
    return op <= SCHED_RECV_BWD ? names[op] : "?";
}

/* The k-th forward (backward) of the interleaved order: micro-batches go in
 * groups of g through chunk 0, then the same group through chunk 1, and so on;
 * the last group holds what is left (m - first, at most g). Backward takes the
 * same order over the chunks reversed. For v = 1 this is micro-batch k on
 * chunk 0. */
static void nth(const sched_list *s, int k, int backward, int *mb, int *chunk)
{
    int g = s->g, v = s->v, first = k / (g * v) * g;
    int size = s->m - first < g ? s->m - first : g, at = k - first * v;
    *chunk = at / size;
    if (backward) *chunk = v - 1 - *chunk;
    *mb = first + at % size;
}

static void push(sched_list *s, sched_op op, int mb, int chunk, int peer)
{
    s->a[s->n++] = (sched_action){op, mb, chunk, peer};
}

/* One transfer for the k-th forward (backward): its input (recv) or its output
 * (send), when that crosses a stage boundary. */
static void xfer(sched_list *s, int k, int backward, int send)
{
    int p = s->p, r = s->rank, mb, c, last = s->v * p - 1;
    if (k < 0 || k >= s->m * s->v) return;
    nth(s, k, backward, &mb, &c);
    int stage = sched_virtual_stage(p, r, c), prev = (r - 1 + p) % p, next = (r + 1) % p;
    if (!backward && !send && stage > 0) push(s, SCHED_RECV_FWD, mb, c, prev);
    if (!backward && send && stage < last) push(s, SCHED_SEND_FWD, mb, c, next);
    if (backward && !send && stage < last) push(s, SCHED_RECV_BWD, mb, c, next);
    if (backward && send && stage > 0) push(s, SCHED_SEND_BWD, mb, c, prev);
}

static void compute(sched_list *s, int k, int backward)
{
    int mb, c;
    nth(s, k, backward, &mb, &c);
    push(s, backward ? SCHED_BWD : SCHED_FWD, mb, c, -1);
}

/* 1F1B: each receive right before the compute that needs it, each send right
 * after the compute that made it; the steady state is F, send-F/recv-B, B,
 * send-B/recv-F, as Megatron batches it. */
static void build_1f1b(sched_list *s)
{
    int total = s->m;
    for (int k = 0; k < s->warmup; k++) xfer(s, k, 0, 0), compute(s, k, 0), xfer(s, k, 0, 1);
    for (int i = 0; i < total - s->warmup; i++) {
        xfer(s, s->warmup + i, 0, 0), compute(s, s->warmup + i, 0), xfer(s, s->warmup + i, 0, 1);
        xfer(s, i, 1, 0), compute(s, i, 1), xfer(s, i, 1, 1);
    }
    for (int i = total - s->warmup; i < total; i++) xfer(s, i, 1, 0), compute(s, i, 1), xfer(s, i, 1, 1);
}

/* The receive an interleaved slot posts for compute j (forward or backward).
 * The leading rank of the direction (rank 0 forward, rank p-1 backward) takes
 * what the other end of the pipeline made in the order it made it: in place of
 * compute j's input it receives the output of the ending rank's compute j - p,
 * Megatron's alignment. With groups of p that is compute j's own input; with
 * larger groups it is a later compute's, received early and kept in its slot
 * (a last group of at least p leaves nothing unreceived: the ending rank's last
 * p computes are of its last chunk, which sends nothing round). */
static void recv_for(sched_list *s, int j, int backward)
{
    int p = s->p, a = j - p, mb, c;
    if (s->rank != (backward ? p - 1 : 0)) {
        xfer(s, j, backward, 0);
        return;
    }
    if (a < 0 || a >= s->m * s->v) return;
    nth(s, a, backward, &mb, &c);
    if (!backward && c < s->v - 1) push(s, SCHED_RECV_FWD, mb, c + 1, p - 1);
    if (backward && c > 0) push(s, SCHED_RECV_BWD, mb, c - 1, 0);
}

/* Interleaved: Megatron's slot structure. Each slot computes (a forward; a
 * forward and a backward; a backward) and then exchanges in one batch the
 * outputs of this slot and the inputs of the next one, so every rank's
 * transfers come in a few large groups that pair up under NCCL's rendezvous
 * semantics. The longer warm-up (2 more per earlier rank) is what lets the
 * gradient for the next backward be received one slot ahead. */
static void build_interleaved(sched_list *s)
{
    int total = s->m * s->v, W = s->warmup, R = total - W;
    recv_for(s, 0, 0);
    for (int k = 0; k < W; k++) {
        compute(s, k, 0);
        xfer(s, k, 0, 1);
        recv_for(s, k + 1, 0); /* nothing past the last forward */
        if (k == W - 1) recv_for(s, 0, 1);
    }
    for (int k = 0; k < R; k++) {
        compute(s, W + k, 0);
        compute(s, k, 1);
        xfer(s, W + k, 0, 1);
        xfer(s, k, 1, 1);
        if (k + 1 < R) recv_for(s, W + k + 1, 0);
        recv_for(s, k + 1, 1);
    }
    for (int k = R; k < total; k++) {
        compute(s, k, 1);
        xfer(s, k, 1, 1);
        recv_for(s, k + 1, 1);
    }
}

int sched_build(int p, int rank, int m, int v, int g, sched_list *out, char *err, size_t errlen)
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
    if (cfg_microbatch_group_check(p, m, v, g, err, errlen)) return -1;
    int total = m * v;
    out->p = p;
    out->rank = rank;
    out->m = m;
    out->v = v;
    out->g = cfg_microbatch_group(p, v, g);
    out->warmup = cfg_pipeline_warmup(p, rank, m, v, g);
    out->a = malloc(sizeof(sched_action) * (size_t)total * 6);
    if (v == 1) build_1f1b(out);
    else build_interleaved(out);
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
    int done;        /* index of the next action */
    double clock, wait;
    int bend;        /* batched mode: end of the posted batch, 0 = none posted */
    double posted;   /* when the batch was posted */
    double scale;    /* this rank's compute costs are cost_fwd / cost_bwd times this */
} sim_rank;

static int simulate(const sched_list *L, double cost_fwd, double cost_bwd, double cost_xfer, sched_send_mode mode,
                    const double *scale, sched_sim_result *res);

static int is_xfer(sched_op op) { return op >= SCHED_SEND_FWD; }
static int is_send(sched_op op) { return op == SCHED_SEND_FWD || op == SCHED_SEND_BWD; }

int sched_simulate(int p, int m, int v, double cost_fwd, double cost_bwd, sched_sim_result *res,
                   char *err, size_t errlen)
{
    return sched_simulate_scaled(p, m, v, cost_fwd, cost_bwd, NULL, res, err, errlen);
}

int sched_simulate_scaled(int p, int m, int v, double cost_fwd, double cost_bwd, const double *scale,
                          sched_sim_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    sched_list *L = calloc((size_t)p, sizeof *L);
    int rc = 0;
    for (int r = 0; r < p && rc == 0; r++) rc = sched_build(p, r, m, v, 0, &L[r], err, errlen);
    if (rc == 0) rc = simulate(L, cost_fwd, cost_bwd, 0, SCHED_SENDS_BUFFERED, scale, res);
    for (int r = 0; r < p; r++) sched_free(&L[r]);
    free(L);
    return rc;
}

/* Buffered: a send records when its message can be received; a receive blocks
 * until then. Returns 1 if the rank moved. */
static int step_buffered(const sched_list *s, sim_rank *x, double *sent, size_t ntags, double cost_fwd,
                         double cost_bwd, double cost_xfer)
{
    int moved = 0;
    while (x->done < s->n) {
        const sched_action *a = &s->a[x->done];
        uint32_t tag = sched_tag(s, a);
        if (a->op == SCHED_RECV_FWD || a->op == SCHED_RECV_BWD) {
            double t = sent[(size_t)s->rank * ntags + tag];
            if (t < 0) break;
            if (t > x->clock) {
                x->wait += t - x->clock;
                x->clock = t;
            }
        } else if (is_send(a->op)) {
            sent[(size_t)a->peer * ntags + tag] = x->clock + cost_xfer;
        } else {
            x->clock += (a->op == SCHED_FWD ? cost_fwd : cost_bwd) * x->scale;
        }
        x->done++;
        moved = 1;
    }
    return moved;
}

/* Batched rendezvous (NCCL group semantics): a maximal run of adjacent
 * transfers is posted together; each transfer completes when its peer has
 * posted the matching one; the rank moves on when its whole batch completed.
 * done_at[r][i] holds the completion time of transfer i of rank r (< 0: not yet). */
static int step_batched(const sched_list *L, sim_rank *R, double **done_at, int r, double cost_fwd,
                        double cost_bwd, double cost_xfer)
{
    const sched_list *s = &L[r];
    sim_rank *x = &R[r];
    int moved = 0;
    while (x->done < s->n) {
        const sched_action *a = &s->a[x->done];
        if (!is_xfer(a->op)) {
            x->clock += (a->op == SCHED_FWD ? cost_fwd : cost_bwd) * x->scale;
            x->done++;
            moved = 1;
            continue;
        }
        if (!x->bend) {
            x->bend = x->done;
            while (x->bend < s->n && is_xfer(s->a[x->bend].op)) x->bend++;
            x->posted = x->clock;
            moved = 1;
        }
        /* match what the peers have posted */
        for (int i = x->done; i < x->bend; i++) {
            if (done_at[r][i] >= 0) continue;
            const sched_action *o = &s->a[i];
            int q = o->peer;
            sim_rank *y = &R[q];
            if (!y->bend) continue;
            for (int j = y->done; j < y->bend; j++) {
                const sched_action *b = &L[q].a[j];
                if (b->peer == r && is_send(b->op) != is_send(o->op) && done_at[q][j] < 0 &&
                    sched_tag(&L[q], b) == sched_tag(s, o)) {
                    double t = (x->posted > y->posted ? x->posted : y->posted) + cost_xfer;
                    done_at[r][i] = done_at[q][j] = t;
                    moved = 1;
                    break;
                }
            }
        }
        double end = x->clock;
        for (int i = x->done; i < x->bend; i++) {
            if (done_at[r][i] < 0) return moved;
            if (done_at[r][i] > end) end = done_at[r][i];
        }
        x->wait += end - x->clock;
        x->clock = end;
        x->done = x->bend;
        x->bend = 0;
        moved = 1;
    }
    return moved;
}

int sched_simulate_lists(const sched_list *L, double cost_fwd, double cost_bwd, double cost_xfer,
                         sched_send_mode mode, sched_sim_result *res)
{
    return simulate(L, cost_fwd, cost_bwd, cost_xfer, mode, NULL, res);
}

static int simulate(const sched_list *L, double cost_fwd, double cost_bwd, double cost_xfer, sched_send_mode mode,
                    const double *scale, sched_sim_result *res)
{
    memset(res, 0, sizeof *res);
    int p = L[0].p, m = L[0].m, v = L[0].v;
    sim_rank *R = calloc((size_t)p, sizeof *R);
    double smax = 0;
    for (int r = 0; r < p; r++) {
        R[r].scale = scale ? scale[r] : 1;
        if (R[r].scale > smax) smax = R[r].scale;
    }
    size_t ntags = (size_t)m * (size_t)(v * p) * 2;
    double *sent = malloc(sizeof(double) * ntags * (size_t)p);
    for (size_t i = 0; i < ntags * (size_t)p; i++) sent[i] = -1;
    double **done_at = calloc((size_t)p, sizeof *done_at);
    for (int r = 0; r < p; r++) {
        done_at[r] = malloc(sizeof(double) * (size_t)(L[r].n ? L[r].n : 1));
        for (int i = 0; i < L[r].n; i++) done_at[r][i] = -1;
    }
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < p; r++)
            moved |= mode == SCHED_SENDS_BUFFERED
                         ? step_buffered(&L[r], &R[r], sent, ntags, cost_fwd, cost_bwd, cost_xfer)
                         : step_batched(L, R, done_at, r, cost_fwd, cost_bwd, cost_xfer);
    }
    int w = 0;
    for (int r = 0; r < p; r++) {
        if (R[r].done < L[r].n) {
            const sched_action *a = &L[r].a[R[r].done];
            res->deadlock = 1;
            if (w < (int)sizeof res->why - 1)
                w += snprintf(res->why + w, sizeof res->why - (size_t)w,
                              "%srank %d waits at action %d %s(mb %d, chunk %d) peer %d", w ? "; " : "",
                              r, R[r].done, sched_op_name(a->op), a->mb, a->chunk, a->peer);
        }
        if (r < SCHED_SIM_RANKS) {
            res->wait[r] = R[r].wait;
            res->finish[r] = R[r].clock;
        }
        if (R[r].clock > res->makespan) res->makespan = R[r].clock;
        if (R[r].wait > res->wait_max) res->wait_max = R[r].wait;
    }
    res->ideal = (double)m * v * (cost_fwd + cost_bwd) * smax; /* the slowest rank's compute */
    res->bubble = (res->makespan - res->ideal) / res->ideal;
    for (int r = 0; r < p; r++) free(done_at[r]);
    free(done_at);
    free(R);
    free(sent);
    return 0;
}
