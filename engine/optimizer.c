#include "optimizer.h"

#include <math.h>
#include <stdlib.h>

eng_optim *eng_optim_create(const eng_model *m)
{
    eng_optim *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->k = m->k;
    o->n = m->num_floats;
    o->m = m->k->alloc(o->n * sizeof(float));
    o->v = m->k->alloc(o->n * sizeof(float));
    if (!o->m || !o->v) {
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
    free(o);
}

void eng_sumsq_runs_begin(eng_sumsq_runs *r, const k_ops *k, const float *base)
{
    r->k = k;
    r->base = base;
    r->lo = r->hi = 0;
    r->sum = 0.0;
}

void eng_sumsq_runs_add(eng_sumsq_runs *r, size_t lo, size_t hi)
{
    if (lo >= hi) return;
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
    if (r->hi > r->lo) r->sum += r->k->sumsq(r->base + r->lo, r->hi - r->lo);
    r->lo = r->hi = 0;
}

double eng_grad_sumsq(const eng_model *m)
{
    eng_sumsq_runs r;
    eng_sumsq_runs_begin(&r, m->k, m->grads);
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (p->tied_copy || (p->shard_dim < 0 && m->tp_rank != 0)) eng_sumsq_runs_break(&r);
        else eng_sumsq_runs_add(&r, p->offset, p->offset + p->numel);
    }
    eng_sumsq_runs_break(&r);
    return r.sum;
}

float eng_clip_scale(double grad_norm, double clip)
{
    if (clip <= 0.0) return 1.0f;
    double c = clip / (grad_norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

double eng_lr_at(const atoll_config *c, long long it)
{
    long long warm = c->lr_warmup_iters;
    long long decay = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    if (warm > 0 && it <= warm) return c->lr * (double)it / (double)warm;
    if (c->lr_decay_style == LR_DECAY_CONSTANT) return c->lr;
    if (it > decay) return c->min_lr;
    double span = (double)(decay - warm);
    double ratio = span > 0 ? (double)(it - warm) / span : 1.0;
    double coeff = c->lr_decay_style == LR_DECAY_LINEAR ? 1.0 - ratio
                                                         : 0.5 * (cos(M_PI * ratio) + 1.0);
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

void eng_optim_step(eng_optim *o, eng_model *m, double lr, float grad_scale, int t)
{
    const atoll_config *c = &m->cfg;
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        float wd = p->decay ? (float)c->weight_decay : 0.0f;
        if (m->params16) /* fused: the master weights and their bf16 copy in one pass */
            m->k->adamw_bf16(m->params + p->offset, m->params16 + p->offset, m->grads + p->offset,
                             o->m + p->offset, o->v + p->offset, p->numel, (float)lr, (float)c->adam_beta1,
                             (float)c->adam_beta2, (float)c->adam_eps, wd, grad_scale, t);
        else
            m->k->adamw(m->params + p->offset, m->grads + p->offset, o->m + p->offset, o->v + p->offset,
                        p->numel, (float)lr, (float)c->adam_beta1, (float)c->adam_beta2,
                        (float)c->adam_eps, wd, grad_scale, t);
    }
}
