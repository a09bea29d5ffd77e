#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int eng_adamw_segs_build(eng_adamw_segs *s, const eng_model *m, size_t lo, size_t hi)
{
    memset(s, 0, sizeof *s);
    s->end = malloc(sizeof(size_t) * (size_t)(m->nparams + 1));
    s->decay = malloc(sizeof(float) * (size_t)(m->nparams + 1));
    s->decoupled = malloc((size_t)(m->nparams + 1));
    s->wd = malloc(sizeof(float) * (size_t)(m->nparams + 1));
    s->end_from = malloc(sizeof(size_t) * (size_t)(m->nparams + 1));
    if (!s->end || !s->decay || !s->decoupled || !s->wd || !s->end_from) {
        eng_adamw_segs_free(s);
        return -1;
    }
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        size_t a = p->offset, b = i + 1 < m->nparams ? m->table[i + 1].offset : m->num_floats;
        if (i == 0) a = 0;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (a >= b) continue;
        float decay = p->decay ? 1.0f : 0.0f;
        char decoupled = p->decoupled && m->cfg.decoupled_lr > 0;
        if (s->n && s->decay[s->n - 1] == decay && s->decoupled[s->n - 1] == decoupled) s->end[s->n - 1] = b - lo;
        else s->end[s->n] = b - lo, s->decay[s->n] = decay, s->decoupled[s->n++] = decoupled;
    }
    return 0;
}

void eng_adamw_segs_free(eng_adamw_segs *s)
{
    free(s->end);
    free(s->decay);
    free(s->decoupled);
    free(s->wd);
    free(s->end_from);
    memset(s, 0, sizeof *s);
}

void eng_adamw_segs_step(eng_adamw_segs *s, const k_ops *k, const atoll_config *c, float *master,
                         uint16_t *param_bf16, const float *grad, float *m, float *v, const eng_rates *r,
                         float grad_scale, int t)
{
    for (int i = 0; i < s->n; i++) s->wd[i] = s->decay[i] * (float)r->wd;
    size_t at = 0;
    for (int i = 0, j; i < s->n; i = j) {
        for (j = i; j < s->n && s->decoupled[j] == s->decoupled[i]; j++) s->end_from[j - i] = s->end[j] - at;
        k->adamw_segments(master + at, param_bf16 ? param_bf16 + at : NULL, grad + at, m + at, v + at,
                          s->end[j - 1] - at, j - i, s->end_from, s->wd + i,
                          (float)(s->decoupled[i] ? r->lr_decoupled : r->lr), (float)c->adam_beta1,
                          (float)c->adam_beta2, (float)c->adam_eps, grad_scale, t);
        at = s->end[j - 1];
    }
}

eng_optim *eng_optim_create(const eng_model *m)
{
    eng_optim *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->k = m->k;
    o->n = m->num_floats;
    o->m = m->k->alloc(o->n * sizeof(float));
    o->v = m->k->alloc(o->n * sizeof(float));
    if (!o->m || !o->v || eng_adamw_segs_build(&o->segs, m, 0, m->num_floats)) {
        eng_optim_free(o);
        return NULL;
    }
    return o;
}

void eng_optim_free(eng_optim *o)
{
    if (!o) return;
    if (o->m) o->k->free(o->m);
    if (o->v) o->k->free(o->v);
    eng_adamw_segs_free(&o->segs);
    free(o);
}

void eng_sumsq_runs_begin(eng_sumsq_runs *r, const k_ops *k, const float *base, int count)
{
    r->k = k;
    r->base = base;
    r->lo = r->hi = 0;
    r->sum = 0.0;
    r->count = count;
    r->elems = r->nonzero = 0;
    r->runs = 0;
    r->run_lo = r->run_hi = 0;
}

void eng_sumsq_runs_add(eng_sumsq_runs *r, size_t lo, size_t hi)
{
    if (lo >= hi) return;
    r->elems += hi - lo;
    if (r->hi > r->lo && lo >= r->hi) { /* extends the run over the zero padding */
        r->hi = hi;
        return;
    }
    eng_sumsq_runs_break(r);
    r->lo = lo;
    r->hi = hi;
}

void eng_sumsq_runs_break(eng_sumsq_runs *r)
{
    if (r->hi > r->lo) {
        r->runs++;
        r->run_lo = r->lo, r->run_hi = r->hi;
        if (r->k) r->sum += r->k->sumsq(r->base + r->lo, r->hi - r->lo);
        if (r->k && r->count) r->nonzero += r->k->nonzeros(r->base + r->lo, r->hi - r->lo);
    }
    r->lo = r->hi = 0;
}

uint64_t eng_sumsq_runs_zeros(const eng_sumsq_runs *r) { return r->elems - r->nonzero; }

int eng_counts_in_norm(const eng_model *m, const eng_param *p)
{
    return !p->tied_copy && (p->shard_dim >= 0 || m->tp_rank == 0);
}

/* The tensors of [from, to) that count in the norm, as runs of r (begun). */
static void sumsq_walk(const eng_model *m, size_t from, size_t to, eng_sumsq_runs *r)
{
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        size_t lo = p->offset > from ? p->offset : from, hi = p->offset + p->numel < to ? p->offset + p->numel : to;
        if (!eng_counts_in_norm(m, p)) eng_sumsq_runs_break(r);
        else if (lo < hi) eng_sumsq_runs_add(r, lo - from, hi - from);
    }
    eng_sumsq_runs_break(r);
}

double eng_sumsq_range(const eng_model *m, const float *base, size_t from, size_t to, uint64_t *zeros)
{
    eng_sumsq_runs r;
    eng_sumsq_runs_begin(&r, m->k, base, zeros != NULL);
    sumsq_walk(m, from, to, &r);
    if (zeros) *zeros = eng_sumsq_runs_zeros(&r);
    return r.sum;
}

double eng_grad_sumsq(const eng_model *m, uint64_t *zeros) { return eng_sumsq_range(m, m->grads, 0, SIZE_MAX, zeros); }

float eng_clip_scale(double grad_norm, double clip)
{
    if (clip <= 0.0) return 1.0f;
    double c = clip / (grad_norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

/* The schedule's shape from --lr-warmup-init up to max_lr, then down to min_lr. */
static double lr_sched(const atoll_config *c, double it, double max_lr, double min_lr)
{
    long long warm = c->lr_warmup_iters;
    long long decay = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    if (warm > 0 && it <= warm) return c->lr_warmup_init + (max_lr - c->lr_warmup_init) * (double)it / (double)warm;
    if (c->lr_decay_style == LR_DECAY_CONSTANT) return max_lr;
    if (it > decay) return min_lr;
    if (c->lr_decay_style == LR_DECAY_INVSQRT) /* lr sqrt(warm-up / it), not below --min-lr */
        return fmax(min_lr, max_lr * sqrt((double)(warm > 1 ? warm : 1) / (it > 1 ? it : 1)));
    double span = (double)(decay - warm);
    double ratio = span > 0 ? (it - warm) / span : 1.0, coeff;
    switch (c->lr_decay_style) {
    case LR_DECAY_LINEAR: coeff = 1.0 - ratio; break;
    case LR_DECAY_WSD: { /* --lr at full until the last lr_wsd_decay_iters before `decay`, then down to --min-lr */
        long long start = decay - c->lr_wsd_decay_iters;
        double r = c->lr_wsd_decay_iters > 0 && it > start ? (double)(it - start) / c->lr_wsd_decay_iters : 0.0;
        coeff = c->lr_wsd_decay_style == WSD_LINEAR ? 1.0 - r
              : c->lr_wsd_decay_style == WSD_COSINE ? 0.5 * (cos(M_PI * r) + 1.0)
              : c->lr_wsd_decay_style == WSD_MINUS_SQRT ? 1.0 - sqrt(r)
              : 2.0 * pow(0.5, r) - 1.0; /* exponential: 1 down to 0 */
        break;
    }
    default: coeff = 0.5 * (cos(M_PI * ratio) + 1.0); break;
    }
    return min_lr + coeff * (max_lr - min_lr);
}

double eng_lr_at(const atoll_config *c, double it) { return lr_sched(c, it, c->lr, c->min_lr); }

double eng_decoupled_lr_at(const atoll_config *c, double it)
{
    if (c->decoupled_lr <= 0) return eng_lr_at(c, it);
    return lr_sched(c, it, c->decoupled_lr, cfg_decoupled_min_lr(c));
}

eng_rates eng_rates_at(const atoll_config *c, double it)
{
    eng_rates r = { eng_lr_at(c, it), eng_decoupled_lr_at(c, it), eng_wd_at(c, it) };
    return r;
}

double eng_param_lr(const eng_param *p, const eng_rates *r) { return p->decoupled ? r->lr_decoupled : r->lr; }

double eng_wd_at(const atoll_config *c, double it)
{
    if (c->weight_decay_incr_style == WD_INCR_CONSTANT) return c->weight_decay;
    double span = cfg_batch_varies(c) && c->global_batch_size > 0
                      ? (double)cfg_samples_after(c, 1, c->train_iters) / c->global_batch_size
                      : (double)c->train_iters;
    if (it > span) return c->end_weight_decay;
    double r = span > 0 ? it / span : 1.0;
    double coeff = c->weight_decay_incr_style == WD_INCR_LINEAR ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
    return c->start_weight_decay + coeff * (c->end_weight_decay - c->start_weight_decay);
}

int eng_optim_step_norm_clipped(eng_optim *o, eng_model *m, const eng_rates *r, double clip, int t, double *sumsq)
{
    const k_ops *k = m->k;
    if (!k->sumsq_begin || !k->sumsq_end || !k->adamw_segments || o->segs.n > K_ADAMW_MAX_SEGS) return 0;
    eng_sumsq_runs runs; /* the run eng_grad_sumsq sums: one, or the host path */
    eng_sumsq_runs_begin(&runs, NULL, m->grads, 0);
    sumsq_walk(m, 0, SIZE_MAX, &runs);
    if (runs.runs != 1) return 0;
    k->sumsq_begin(m->grads + runs.run_lo, runs.run_hi - runs.run_lo, clip);
    eng_optim_step(o, m, r, K_GRAD_SCALE_FROM_NORM, t); /* its one-launch path: the checks above */
    *sumsq = k->sumsq_end();
    return 1;
}

void eng_optim_step(eng_optim *o, eng_model *m, const eng_rates *r, float grad_scale, int t)
{
    const atoll_config *c = &m->cfg;
    if (m->k->adamw_segments && o->segs.n <= K_ADAMW_MAX_SEGS) { /* one launch for every tensor at one rate */
        eng_adamw_segs_step(&o->segs, m->k, c, m->params, m->params16, m->grads, o->m, o->v, r, grad_scale, t);
        eng_norms_updated(m);
        return;
    }
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        float pwd = p->decay ? (float)r->wd : 0.0f, lr = (float)eng_param_lr(p, r);
        if (m->params16) /* fused: the master weights and their bf16 copy in one pass */
            m->k->adamw_bf16(m->params + p->offset, m->params16 + p->offset, m->grads + p->offset,
                             o->m + p->offset, o->v + p->offset, p->numel, (float)lr, (float)c->adam_beta1,
                             (float)c->adam_beta2, (float)c->adam_eps, pwd, grad_scale, t);
        else
            m->k->adamw(m->params + p->offset, m->grads + p->offset, o->m + p->offset, o->v + p->offset,
                        p->numel, (float)lr, (float)c->adam_beta1, (float)c->adam_beta2,
                        (float)c->adam_eps, pwd, grad_scale, t);
    }
    eng_norms_updated(m);
}
