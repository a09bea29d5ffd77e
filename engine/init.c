/* init: parameter initialisation that does not depend on the layout.
 *
 * Element e of tensor `name` (e = row-major index in the FULL logical shape) is
 * std * N(0,1) drawn from the counter-based RNG keyed by (seed, FNV-1a(name)),
 * counter e. A rank holding a slice computes only its elements, and gets the
 * same values the single-rank model has there. Constant tensors (LayerNorm 1/0,
 * biases 0) take init_value. */
#include "model.h"
#include "rng.h"

#include <stdlib.h>
#include <string.h>

static int64_t logical_index(const eng_param *p, int64_t i, int64_t j)
{
    if (p->shard_dim == 0) i += p->shard_off;
    if (p->shard_dim == 1) j += p->shard_off;
    return i * p->full[1] + j;
}

int eng_init_params(eng_model *m, uint64_t seed)
{
    size_t maxn = 0;
    for (int t = 0; t < m->nparams; t++)
        if (m->table[t].numel > maxn) maxn = m->table[t].numel;
    float *host = malloc(sizeof(float) * (maxn ? maxn : 1));
    if (!host) return -1;
    for (int t = 0; t < m->nparams; t++) {
        const eng_param *p = &m->table[t];
        uint64_t key = rng_key(seed, eng_fnv1a(p->name, strlen(p->name), ENG_FNV_INIT));
        for (int64_t i = 0; i < p->local[0]; i++)
            for (int64_t j = 0; j < p->local[1]; j++) {
                size_t at = (size_t)(i * p->local[1] + j);
                host[at] = p->init_std == 0.0f
                               ? p->init_value
                               : (float)(p->init_std * rng_normal(key, (uint64_t)logical_index(p, i, j)));
            }
        m->k->to_device(m->params + p->offset, host, p->numel * sizeof(float));
    }
    free(host);
    return 0;
}
