/* pipeline: runs one rank's sched_build action list (dist.h).
 *
 * Each in-flight (micro-batch, chunk) has a slot: its activations, the buffer
 * its input activations are received into, and the buffer its output gradient
 * is received into. A slot is taken by the forward (or the receive before it)
 * and given back after the backward has sent its input gradient. Each run of
 * adjacent transfer actions goes out as one comm_p2p_batch on the PP group
 * (position = pipeline rank, tag = sched_tag), as the schedule requires.
 *
 * Idle time: where the PP group's calls wait on the host (comm_device_stalls
 * says 0), the host times each batch after the kernels queued before it have
 * run, and the closing barrier. On NCCL the batches are ordered on the device
 * and the host queues the whole schedule without waiting; the device's own
 * stalls in them are the idle time, read once the closing barrier has waited. */
#include "dist.h"
#include "errf.h"
#include "schedule.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dist_slot {
    eng_acts *a;
    void *xin, *dout;
    int mb, chunk, busy;
};

int dist_pipe_init(dist_pipe *p, dist *d, eng_model *m)
{
    memset(p, 0, sizeof *p);
    p->d = d;
    p->m = m;
    return 0;
}

void dist_pipe_free(dist_pipe *p)
{
    for (int i = 0; i < p->nslots; i++) {
        dist_slot *s = &p->slots[i];
        eng_acts_free(p->m, s->a);
        if (s->xin) p->m->k->free(s->xin);
        if (s->dout) p->m->k->free(s->dout);
    }
    free(p->slots);
    free(p->losses);
    memset(p, 0, sizeof *p);
}

static dist_slot *find_slot(dist_pipe *p, int mb, int chunk)
{
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].busy && p->slots[i].mb == mb && p->slots[i].chunk == chunk) return &p->slots[i];
    return NULL;
}

/* A free slot of this chunk (activations are per chunk), made on first need. */
static dist_slot *take_slot(dist_pipe *p, int mb, int chunk)
{
    dist_slot *s = find_slot(p, mb, chunk);
    if (s) return s;
    for (int i = 0; i < p->nslots && !s; i++)
        if (!p->slots[i].busy && p->slots[i].chunk == chunk) s = &p->slots[i];
    if (!s) {
        dist_slot *n = realloc(p->slots, sizeof *n * (size_t)(p->nslots + 1));
        if (!n) return NULL;
        p->slots = n;
        s = &p->slots[p->nslots];
        memset(s, 0, sizeof *s);
        size_t bytes = eng_boundary_bytes(p->m);
        s->chunk = chunk;
        s->a = eng_acts_create(p->m, chunk);
        s->xin = p->m->k->alloc(bytes);
        s->dout = p->m->k->alloc(bytes);
        if (!s->a || !s->xin || !s->dout) return NULL;
        p->nslots++;
    }
    s->busy = 1;
    s->mb = mb;
    return s;
}

static int is_transfer(sched_op op) { return op != SCHED_FWD && op != SCHED_BWD; }

/* Runs actions [i, j) (all transfers) as one batch; slots whose input gradient
 * went out are freed. */
static int run_transfers(dist_pipe *p, const sched_list *l, int i, int j, int on_device, double *idle, double *xfer,
                         char *err, size_t errlen)
{
    comm_p2p ops[16];
    size_t bytes = eng_boundary_bytes(p->m);
    int n = 0;
    for (int k = i; k < j; k++) {
        const sched_action *a = &l->a[k];
        dist_slot *s = a->op == SCHED_RECV_FWD ? take_slot(p, a->mb, a->chunk) : find_slot(p, a->mb, a->chunk);
        if (!s || n == 16) {
            atoll_errf(err, errlen, "pipeline: no activations for micro-batch %d chunk %d at %s", a->mb, a->chunk,
                 sched_op_name(a->op));
            return -1;
        }
        void *buf = a->op == SCHED_SEND_FWD ? (void *)eng_output(p->m, s->a)
                  : a->op == SCHED_RECV_FWD ? (void *)s->xin
                  : a->op == SCHED_SEND_BWD ? (void *)s->a->dinput : (void *)s->dout;
        int send = a->op == SCHED_SEND_FWD || a->op == SCHED_SEND_BWD;
        ops[n++] = (comm_p2p){ send, buf, bytes, a->peer, sched_tag(l, a) };
    }
    comm *pp = p->d->g[GROUP_PP];
    if (!on_device) p->m->k->sync(); /* the host times the batch, not the kernels before it */
    double t0 = atoll_mono_s(), x0 = pp->xfer_s;
    if (comm_p2p_batch(pp, ops, n)) {
        atoll_errf(err, errlen, "pipeline: %s", dist_error(p->d));
        return -1;
    }
    double dt = atoll_mono_s() - t0, dx = pp->xfer_s - x0;
    if (dx > dt) dx = dt;
    *idle += dt - dx;
    *xfer += dx;
    for (int k = i; k < j; k++)
        if (l->a[k].op == SCHED_SEND_BWD) find_slot(p, l->a[k].mb, l->a[k].chunk)->busy = 0;
    return 0;
}

/* Data-parallel overlap: a layer's gradients are final once the last
 * micro-batch's backward has passed it. */
static void layer_done(void *ctx, int chunk, int layer)
{
    dist_pipe *p = ctx;
    size_t lo = (size_t)-1, hi = 0;
    (void)chunk;
    for (int i = 0; i < p->m->nparams; i++) {
        const eng_param *t = &p->m->table[i];
        if (t->layer != layer) continue;
        if (t->offset < lo) lo = t->offset;
        if (t->offset + t->numel > hi) hi = t->offset + t->numel;
    }
    if (lo < hi) dist_overlap_push(p->d, lo, hi - lo);
}

/* ... and the chunk's embeddings, final LayerNorm and head after its whole backward. */
static void chunk_done(dist_pipe *p, int chunk)
{
    for (int i = 0; i < p->m->nparams; i++) {
        const eng_param *t = &p->m->table[i];
        if (t->chunk == chunk && t->layer < 0) dist_overlap_push(p->d, t->offset, t->numel);
    }
}

static int run_compute(dist_pipe *p, const sched_action *a, const int32_t *tokens, const int32_t *targets,
                       float dloss, char *err, size_t errlen)
{
    eng_model *m = p->m;
    const eng_chunk *ch = &m->chunks[a->chunk];
    size_t off = (size_t)a->mb * m->B * m->T;
    dist_slot *s = a->op == SCHED_FWD && ch->first ? take_slot(p, a->mb, a->chunk) : find_slot(p, a->mb, a->chunk);
    if (!s) {
        atoll_errf(err, errlen, "pipeline: %s of micro-batch %d chunk %d before its input", sched_op_name(a->op), a->mb,
             a->chunk);
        return -1;
    }
    float w = p->mb_scale ? p->mb_scale[a->mb] : 1.0f; /* --eod-mask-loss */
    if (a->op == SCHED_FWD) {
        s->a->sample0 = p->sample_base + dist_sample_offset(p->d, &m->cfg, a->mb);
        if (eng_forward(m, s->a, tokens + off, s->xin, targets + off, dloss * w, NULL)) {
            atoll_errf(err, errlen, "forward pass failed: %s", dist_error(p->d));
            return -1;
        }
        /* read with the step's gradient norm: the backward is queued without waiting for the loss */
        if (ch->last) eng_losses_to_host_later(m, s->a, p->losses + off);
        return 0;
    }
    int final = p->overlap && a->mb == p->d->nmicro - 1;
    if (final) {
        m->layer_done = layer_done;
        m->layer_done_ctx = p;
    }
    int rc = eng_backward(m, s->a, ch->last ? NULL : s->dout, dloss * w);
    m->layer_done = NULL;
    if (rc) {
        atoll_errf(err, errlen, "backward pass failed: %s", dist_error(p->d));
        return -1;
    }
    dist_fold_grads(p->d, m); /* --deterministic-dp */
    if (final) chunk_done(p, a->chunk);
    if (ch->first) s->busy = 0; /* nothing to send back */
    return 0;
}

int dist_pipeline(dist_pipe *p, const int32_t *tokens, const int32_t *targets, float dloss,
                  dist_step_result *r, char *err, size_t errlen)
{
    dist *d = p->d;
    sched_list l;
    memset(r, 0, sizeof *r);
    size_t nl = (size_t)d->nmicro * p->m->B * p->m->T;
    if (nl > p->losses_cap) {
        float *n = realloc(p->losses, nl * sizeof *n);
        if (!n) {
            atoll_errf(err, errlen, "out of memory for the step's losses");
            return -1;
        }
        p->losses = n;
        p->losses_cap = nl;
    }
    if (sched_build(d->pp, d->pp_rank, d->nmicro, d->v, d->mgroup, &l, err, errlen)) return -1;
    comm *pp = d->g[GROUP_PP];
    int on_device = d->pp > 1 ? comm_device_stalls(pp, NULL) : 0; /* forgets stalls from before the step */
    if (on_device < 0) {
        atoll_errf(err, errlen, "pipeline: %s", dist_error(d));
        sched_free(&l);
        return -1;
    }
    double t0 = atoll_mono_s(), idle = 0.0, xfer = 0.0;
    int rc = 0;
    for (int i = 0; i < l.n && !rc;) {
        if (!is_transfer(l.a[i].op)) {
            rc = run_compute(p, &l.a[i], tokens, targets, dloss, err, errlen);
            i++;
            continue;
        }
        int j = i;
        while (j < l.n && is_transfer(l.a[j].op)) j++;
        rc = run_transfers(p, &l, i, j, on_device, &idle, &xfer, err, errlen);
        i = j;
    }
    sched_free(&l);
    /* The closing synchronisation: a stage that finished early is idle until
     * the last one is done, and that idleness is bubble too. */
    if (!rc && d->pp > 1) {
        double tb = atoll_mono_s();
        if (comm_barrier(pp)) {
            atoll_errf(err, errlen, "pipeline: %s", dist_error(d));
            rc = -1;
        }
        idle += atoll_mono_s() - tb;
    }
    if (!rc && on_device) {
        /* The host clock timed queueing and, in the barrier, this stage's own
         * kernels still queued: the device's stalls are the idle time, and the
         * time the thread counts inside comm calls (compute_s, the straggler
         * scores) is corrected to them. */
        double host_idle = idle;
        if (comm_device_stalls(pp, &idle) < 0) {
            atoll_errf(err, errlen, "pipeline: %s", dist_error(d));
            rc = -1;
        } else {
            comm_thread_waited(idle - host_idle);
        }
    }
    r->idle_s = idle;
    r->transfer_s = xfer;
    r->busy_s = atoll_mono_s() - t0 - idle - xfer;
    return rc;
}

/* Forward only, micro-batch by micro-batch through the virtual stages in
 * order. Sends complete without the receiver on the host transport, so this
 * order cannot deadlock there. */
int dist_forward_only(dist_pipe *p, const int32_t *tokens, const int32_t *targets, double *loss_sum,
                      char *err, size_t errlen)
{
    dist *d = p->d;
    eng_model *m = p->m;
    comm *pp = d->g[GROUP_PP];
    size_t bytes = eng_boundary_bytes(m);
    int S = d->pp * d->v;
    *loss_sum = 0.0;
    for (int mb = 0; mb < d->nmicro; mb++)
        for (int c = 0; c < d->v; c++) {
            const eng_chunk *ch = &m->chunks[c];
            int stage = c * d->pp + d->pp_rank;
            dist_slot *s = take_slot(p, mb, c);
            if (!s) { atoll_errf(err, errlen, "out of memory for activations"); return -1; }
            uint32_t tag = (uint32_t)(mb * S + stage);
            if (!ch->first && comm_recv(pp, s->xin, bytes, (d->pp_rank + d->pp - 1) % d->pp, tag)) goto fail;
            size_t off = (size_t)mb * m->B * m->T;
            double ls = 0.0;
            if (eng_forward(m, s->a, tokens + off, s->xin, targets + off, 0.0f, &ls)) goto fail;
            *loss_sum += ls * (p->mb_scale ? p->mb_scale[mb] : 1.0f);
            if (!ch->last && comm_send(pp, eng_output(m, s->a), bytes, (d->pp_rank + 1) % d->pp, tag + 1)) goto fail;
            s->busy = 0;
        }
    if (d->pp > 1 && comm_device_stalls(pp, NULL) < 0) goto fail; /* an evaluation's stalls: not read, forgotten */
    return 0;
fail:
    atoll_errf(err, errlen, "evaluation: %s", dist_error(d));
    return -1;
}
