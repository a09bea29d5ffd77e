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

double eng_grad_sumsq(const eng_model *m)
{
    double s = 0.0;
    for (int i = 0; i < m->nparams; i++) {
        const eng_param *p = &m->table[i];
        if (p->tied_copy || (p->shard_dim < 0 && m->tp_rank != 0)) continue;
        s += m->k->sumsq(m->grads + p->offset, p->numel);
    }
    return s;
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
        m->k->adamw(m->params + p->offset, m->grads + p->offset, o->m + p->offset, o->v + p->offset,
                    p->numel, (float)lr, (float)c->adam_beta1, (float)c->adam_beta2,
                    (float)c->adam_eps, p->decay ? (float)c->weight_decay : 0.0f, grad_scale, t);
    }
}
