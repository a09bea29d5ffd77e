#include "scheduler.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "jobs.h"
#include "log.h"
#include "place.h"
#include "plan.h"
#include "topo.h"

/* ---- process groups (Megatron-Core RankGenerator order) ---- */

static void add_group(Atoll__JobLayout *out, msg_arena *a, const char *kind, const int *ranks, int n)
{
    Atoll__ProcessGroup *g = msg_alloc(a, sizeof *g);
    atoll__process_group__init(g);
    g->kind = (char *)kind;
    g->n_ranks = (size_t)n;
    g->ranks = msg_alloc(a, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) g->ranks[i] = ranks[i];
    out->groups[out->n_groups++] = g;
}

int sched_groups(const char *rank_order, int tp, int pp, int dp, Atoll__JobLayout *out, msg_arena *a,
                 char *err, size_t errlen)
{
    /* Strides follow the order string, first name fastest: "tp-cp-ep-dp-pp" gives
     * rank = t + tp*(d + dp*p). cp and ep are 1 here. */
    cfg_rank_order o;
    if (cfg_rank_order_parse(rank_order, tp, dp, pp, &o, err, errlen)) return -1;
    int stride_tp = o.stride[CFG_DIM_TP], stride_dp = o.stride[CFG_DIM_DP], stride_pp = o.stride[CFG_DIM_PP];
    int world = tp * pp * dp;
    size_t ngroups = (size_t)(world / tp + world / dp + world / pp + (pp > 1 ? world / pp : 0));
    out->groups = msg_alloc(a, sizeof(Atoll__ProcessGroup *) * (ngroups + 1));
    out->n_groups = 0;
    int *ranks = msg_alloc(a, sizeof(int) * (size_t)(world + 1));
    const struct { const char *kind; int size, stride; } dims[] = {
        { "tp", tp, stride_tp }, { "dp", dp, stride_dp }, { "pp", pp, stride_pp },
    };
    for (int d = 0; d < 3; d++) {
        /* A group varies one coordinate; its base ranks are those where it is 0. */
        for (int base = 0; base < world; base++) {
            if ((base / dims[d].stride) % dims[d].size) continue;
            for (int k = 0; k < dims[d].size; k++) ranks[k] = base + k * dims[d].stride;
            add_group(out, a, dims[d].kind, ranks, dims[d].size);
        }
    }
    /* Embedding groups tie the first and last pipeline stage (shared word embeddings). */
    if (pp > 1)
        for (int base = 0; base < world; base++) {
            if ((base / stride_pp) % pp) continue;
            ranks[0] = base;
            ranks[1] = base + (pp - 1) * stride_pp;
            add_group(out, a, "embedding", ranks, 2);
        }
    return 0;
}

/* Why a job of `world` ranks waits (one wording for every caller). */
static void waiting_for(int world, int free_slots, int usable, char *err, size_t errlen)
{
    snprintf(err, errlen, "waiting for %d GPUs: %d free on %d usable nodes", world, free_slots, usable);
}

int sched_place(const atoll_config *cfg, int world, const sched_node *nodes, int n,
                Atoll__JobLayout *out, msg_arena *a, char *err, size_t errlen)
{
    int tp = cfg->tensor_model_parallel_size, pp = cfg->pipeline_model_parallel_size;
    int dp = cfg_data_parallel_size(cfg, world);
    int free_slots = 0, usable = 0;
    for (int i = 0; i < n; i++) {
        int f = 0;
        for (int s = 0; s < nodes[i].slots; s++) f += !nodes[i].busy[s];
        free_slots += f;
        usable += f > 0;
    }
    if (free_slots < world) {
        waiting_for(world, free_slots, usable, err, errlen);
        return -1;
    }
    out->tp = tp;
    out->pp = pp;
    out->dp = dp;
    out->vpp = cfg_virtual_stages(cfg);
    out->n_ranks = (size_t)world;
    out->ranks = msg_alloc(a, sizeof(Atoll__RankPlacement *) * (size_t)world);
    int r = 0;
    for (int i = 0; i < n && r < world; i++) {
        int local = 0;
        for (int s = 0; s < nodes[i].slots && r < world; s++) {
            if (nodes[i].busy[s]) continue;
            Atoll__RankPlacement *p = msg_alloc(a, sizeof *p);
            atoll__rank_placement__init(p);
            p->rank = r;
            p->node = (char *)nodes[i].name;
            p->gpu = nodes[i].gpu[s];
            p->local_rank = local++;
            out->ranks[r++] = p;
        }
    }
    if (sched_groups(cfg->rank_order, tp, pp, dp, out, a, err, errlen)) return -1;
    return 0;
}

/* ---- cluster view ---- */

/* Calls fn for every GPU of the nodes that are not dead, as their agents reported them. */
static void each_gpu(coord *c, void (*fn)(const Atoll__Gpu *g, void *ctx), void *ctx)
{
    for (size_t i = 0; i < c->reg.n; i++) {
        reg_node *rn = c->reg.nodes[i];
        if (rn->live == NODE_DEAD || !rn->ngpus) continue;
        Atoll__Node *node = atoll__node__unpack(NULL, rn->info_len, rn->info);
        if (!node) continue;
        for (size_t g = 0; g < node->n_gpus; g++) fn(node->gpus[g], ctx);
        atoll__node__free_unpacked(node, NULL);
    }
}

typedef struct { char id[TOPO_NAME]; } island_id;
typedef struct {
    island_id *v;
    size_t n, cap;
    uint64_t best_memory;
    char *name;
    size_t len;
} gpu_scan;

static int cmp_island(const void *a, const void *b) { return strcmp(a, b); }

static void note_gpu(const Atoll__Gpu *g, void *ctx)
{
    gpu_scan *x = ctx;
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 1024;
        island_id *nv = realloc(x->v, x->cap * sizeof *nv);
        if (!nv) abort();
        x->v = nv;
    }
    snprintf(x->v[x->n++].id, sizeof x->v->id, "%s", g->island);
    if (g->memory_bytes > x->best_memory) {
        x->best_memory = g->memory_bytes;
        snprintf(x->name, x->len, "%s", g->name ? g->name : "");
    }
}

/* The cluster as submissions see it: decoding every node's GPUs costs tens of
 * milliseconds at 10,000 nodes, so it is done again only when a node's
 * hardware or liveness has changed (registry.gen). */
static void refresh_view(coord *c)
{
    if (c->view.gen == c->reg.gen + 1) return;
    /* Islands may span nodes (NVL72), so count GPUs per island id over all nodes:
     * every GPU's island id, sorted, and the longest run of one id. */
    gpu_scan x = { .name = c->view.gpu_name, .len = sizeof c->view.gpu_name };
    c->view.gpu_name[0] = 0;
    each_gpu(c, note_gpu, &x);
    if (x.n) qsort(x.v, x.n, sizeof *x.v, cmp_island);
    int best = 0;
    for (size_t i = 0, run = 0; i < x.n; i++) {
        run = i && !strcmp(x.v[i].id, x.v[i - 1].id) ? run + 1 : 1;
        if ((int)run > best) best = (int)run;
    }
    free(x.v);
    c->view.max_island = best;
    c->view.max_gpu_memory = x.best_memory;
    c->view.gen = c->reg.gen + 1;
}

uint64_t sched_max_gpu_memory(coord *c, char *name, size_t len)
{
    refresh_view(c);
    if (len) snprintf(name, len, "%s", c->view.gpu_name);
    return c->view.max_gpu_memory;
}

int sched_fits_memory(coord *c, const atoll_config *cfg, char *why, size_t len)
{
    char gpu[128];
    uint64_t gmem = sched_max_gpu_memory(c, gpu, sizeof gpu);
    if (!gmem) return 1;
    plan_memory m;
    plan_memory_estimate(cfg, cfg_data_parallel_size(cfg, cfg->num_gpus), plan_engine_precision(cfg), &m);
    if (m.total_bytes <= (double)gmem) return 1;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char parts[256];
    plan_memory_parts(parts, sizeof parts, cfg, m.params_per_gpu, m.state_bytes, m.act_bytes, "");
    snprintf(why, len, "the layout needs about %.2f GiB per GPU (%s), more than the %.2f GiB of the largest GPU on "
             "the cluster (%s)", m.total_bytes / gib, parts, (double)gmem / gib, gpu[0] ? gpu : "unnamed");
    return 0;
}

int sched_max_island(coord *c)
{
    refresh_view(c);
    return c->view.max_island;
}

static Atoll__JobLayout *load_layout(coord *c, const store_job *j) { return coord_layout(c, j->id, j->epoch); }

int sched_job_uses_node(coord *c, const store_job *j, const char *node)
{
    Atoll__JobLayout *l = load_layout(c, j);
    if (!l) return 0;
    int uses = 0;
    for (size_t i = 0; i < l->n_ranks && !uses; i++) uses = !strcmp(l->ranks[i]->node, node);
    atoll__job_layout__free_unpacked(l, NULL);
    return uses;
}

typedef struct {
    uint16_t type;
    const ProtobufCMessage *m;
} node_frame;

static void send_frame(coord *c, reg_node *n, void *ctx)
{
    const node_frame *f = ctx;
    if (n->peer) c->send(c, n->peer, f->type, f->m);
}

static void send_stop(coord *c, const store_job *j, const char *reason, int checkpoint)
{
    Atoll__JobLayout *l = load_layout(c, j);
    if (!l) return;
    Atoll__Stop stop = ATOLL__STOP__INIT;
    stop.job = j->id;
    stop.epoch = j->epoch;
    stop.reason = (char *)reason;
    stop.checkpoint = checkpoint;
    node_frame f = { ATOLL__MSG_TYPE__MSG_STOP, &stop.base }; /* one Stop per node */
    coord_layout_nodes(c, l, send_frame, &f);
    atoll__job_layout__free_unpacked(l, NULL);
}

void sched_stop_job(coord *c, const store_job *j, const char *reason) { send_stop(c, j, reason, 0); }
void sched_checkpoint_job(coord *c, const store_job *j, const char *reason) { send_stop(c, j, reason, 1); }

/* ---- the run ---- */

#define SCHED_JOBS_PER_TICK 256 /* pending jobs looked at per run; the rest on the next tick */

typedef struct {
    reg_node *rn;
    int *gpu;
    unsigned char *busy;
} cand;

typedef struct {
    coord *c;
    cand *cands;
    size_t n;
    int free_slots, usable; /* over all candidates, kept up to date as jobs are placed */
    topo_node *topo;        /* [n] the candidates' topologies, decoded once per run (topo_state 1) */
    int topo_state;         /* 0 not decoded yet, 1 decoded, -1 not all GPU nodes (slot placement) */
    int topo_borrowed;      /* topo is another context's (same candidates): not freed here */
} busy_ctx;

static void count_free(busy_ctx *b)
{
    b->free_slots = b->usable = 0;
    for (size_t i = 0; i < b->n; i++) {
        int f = 0;
        for (int s = 0; s < b->cands[i].rn->slots; s++) f += !b->cands[i].busy[s];
        b->free_slots += f;
        b->usable += f > 0;
    }
}

/* The candidate named `name` (candidates are in name order), or NULL. */
static cand *find_cand(busy_ctx *b, const char *name)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(b->cands[mid].rn->name, name);
        if (!d) return &b->cands[mid];
        if (d < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* The busy flag of the slot rank `rk` holds in b (its GPU, or its local rank on a
 * CPU node), or NULL; *cd caches the rank's candidate (ranks come node by node). */
static unsigned char *rank_slot(busy_ctx *b, cand **cd, const Atoll__RankPlacement *rk)
{
    if (!*cd || strcmp((*cd)->rn->name, rk->node)) *cd = find_cand(b, rk->node);
    for (int s = 0; *cd && s < (*cd)->rn->slots; s++)
        if ((*cd)->gpu[s] == rk->gpu && (rk->gpu >= 0 || s == rk->local_rank)) return &(*cd)->busy[s];
    return NULL;
}

/* The slots a layout's ranks hold, taken. */
static void mark_layout(busy_ctx *b, const Atoll__JobLayout *l)
{
    cand *cd = NULL;
    for (size_t r = 0; r < l->n_ranks; r++) {
        unsigned char *busy = rank_slot(b, &cd, l->ranks[r]);
        if (busy) *busy = 1;
    }
}

typedef struct {
    busy_ctx *b;
    uint64_t except, newer_than;
} busy_but;

static int mark_busy_but(void *ctx, store_job *j)
{
    busy_but *x = ctx;
    if (j->id == x->except || j->id <= x->newer_than) return 0;
    Atoll__JobLayout *l = load_layout(x->b->c, j);
    if (l) {
        mark_layout(x->b, l);
        atoll__job_layout__free_unpacked(l, NULL);
    }
    return 0;
}

/* Live, connected nodes with slots, and which slots the active jobs hold: those
 * submitted after job `newer_than` (0: all; UINT64_MAX: none), but job `except`'s
 * (0: none excepted). */
static void build_candidates(coord *c, busy_ctx *b, uint64_t except, uint64_t newer_than)
{
    reg_node **sorted = registry_sorted(&c->reg);
    b->cands = calloc(c->reg.n + 1, sizeof *b->cands);
    b->n = 0;
    if (!sorted || !b->cands) {
        free(sorted);
        return;
    }
    for (size_t i = 0; i < c->reg.n; i++) {
        reg_node *rn = sorted[i];
        if (registry_state(rn) != NODE_ALIVE || !rn->peer || rn->slots < 1) continue;
        cand *cd = &b->cands[b->n++];
        cd->rn = rn;
        cd->gpu = calloc((size_t)rn->slots, sizeof *cd->gpu);
        cd->busy = calloc((size_t)rn->slots, 1);
        Atoll__Node *node = atoll__node__unpack(NULL, rn->info_len, rn->info);
        for (int s = 0; s < rn->slots; s++)
            cd->gpu[s] = node && (size_t)s < node->n_gpus ? node->gpus[s]->index : -1;
        if (node) atoll__node__free_unpacked(node, NULL);
    }
    free(sorted);
    busy_but x = { b, except, newer_than };
    for (int s = ATOLL__JOB_STATE__JOB_PLACING; s <= ATOLL__JOB_STATE__JOB_RESTARTING; s++)
        store_jobs_each(c->st, s, mark_busy_but, &x);
    count_free(b);
}

static void free_candidates(busy_ctx *b)
{
    if (!b->topo_borrowed) free(b->topo);
    for (size_t i = 0; i < b->n; i++) {
        free(b->cands[i].gpu);
        free(b->cands[i].busy);
    }
    free(b->cands);
}

static void launch(coord *c, const store_job *j, Atoll__JobSpec *spec, Atoll__JobLayout *l)
{
    Atoll__Launch m = ATOLL__LAUNCH__INIT;
    m.spec = spec;
    m.layout = l;
    node_frame f = { ATOLL__MSG_TYPE__MSG_LAUNCH, &m.base }; /* once per node */
    coord_layout_nodes(c, l, send_frame, &f);
    log_info("job %llu epoch %u dispatched to its nodes", (unsigned long long)j->id, j->epoch);
}

/* The candidates' topologies, decoded by the first placement of a run; the others reuse them. */
static void decode_topo(coord *c, busy_ctx *b)
{
    int n = (int)b->n;
    if (!b->topo_state) {
        b->topo_state = -1;
        if (!(b->topo = calloc((size_t)n, sizeof *b->topo))) return;
        int i = 0;
        for (; i < n; i++) {
            Atoll__Node *info = atoll__node__unpack(NULL, b->cands[i].rn->info_len, b->cands[i].rn->info);
            char why[256];
            int bad = !info || msg_node_to_topo(info, &b->topo[i], why, sizeof why) || b->topo[i].ngpus < 1;
            if (info) atoll__node__free_unpacked(info, NULL);
            if (bad) break; /* CPU ranks or an unreadable node: the slot placement handles it */
            b->topo[i].state = NODE_ALIVE; /* build_candidates kept only live nodes */
        }
        if (i == n) {
            if (c->fab) fabric_apply(c->fab, b->topo, n);
            b->topo_state = 1;
        }
    }
}

/* Topology-aware placement (common/place.h, plan_place) on whole free GPU nodes:
 * TP inside NVLink islands, rail-aligned DP/PP groups, few leaf switches.
 * Returns 0 with `out` filled, 1 when it does not apply (CPU ranks, or not
 * enough whole free nodes; sched_place then decides), -1 on error. */
static int place_topology_aware(coord *c, busy_ctx *b, const atoll_config *cfg, Atoll__JobLayout *out,
                                msg_arena *a, char *err, size_t errlen)
{
    int n = (int)b->n, tp = cfg->tensor_model_parallel_size, pp = cfg->pipeline_model_parallel_size;
    int dp = cfg_data_parallel_size(cfg, cfg->num_gpus);
    if (n < 1 || dp < 1) return 1;
    decode_topo(c, b);
    if (b->topo_state < 0) return 1;
    const topo_node *nodes = b->topo;
    unsigned char *busy = calloc((size_t)n, 1);
    int rc = 1;
    if (!busy) goto out;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < b->cands[i].rn->slots; s++) busy[i] |= b->cands[i].busy[s];
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    cl.nodes = nodes;
    cl.nnodes = n;
    cl.busy = busy;
    cl.fab = c->fab;
    cl.gpu = gpu_spec_by_device_name(nodes[0].gpus[0].name);
    place_result r;
    char why[256];
    int placed;
    if (cl.gpu) {
        plan_links_default(cl.gpu, &cl.links);
        placed = plan_place(&cl, cfg, dp, &r, NULL, NULL, why, sizeof why);
    } else {
        place_request req = { tp, pp, dp, cfg->rank_order, 0 };
        placed = place_topology(nodes, n, busy, c->fab, &req, &r, why, sizeof why);
    }
    if (placed) goto out; /* e.g. only partly free nodes left: the slot placement may still fit */
    out->tp = tp;
    out->pp = pp;
    out->dp = dp;
    out->vpp = cfg_virtual_stages(cfg);
    out->n_ranks = (size_t)r.world;
    out->ranks = msg_alloc(a, sizeof(Atoll__RankPlacement *) * (size_t)r.world);
    int *local = calloc((size_t)n, sizeof *local);
    for (int k = 0; local && k < r.world; k++) {
        Atoll__RankPlacement *p = msg_alloc(a, sizeof *p);
        atoll__rank_placement__init(p);
        p->rank = k;
        p->node = (char *)b->cands[r.rank_node[k]].rn->name;
        p->gpu = nodes[r.rank_node[k]].gpus[r.rank_gpu[k]].index;
        p->local_rank = local[r.rank_node[k]]++;
        out->ranks[k] = p;
    }
    rc = local ? 0 : -1;
    if (!local) snprintf(err, errlen, "out of memory placing %d ranks", r.world);
    free(local);
    place_result_free(&r);
    if (!rc && sched_groups(cfg->rank_order, tp, pp, dp, out, a, err, errlen)) rc = -1;
out:
    free(busy);
    return rc;
}

/* A job that stays pending says why; messages are written in one transaction
 * after the run rather than one fsync per job. */
typedef struct {
    uint64_t *ids;
    char (*msgs)[sizeof ((store_job *)0)->message];
    unsigned char *restart; /* a restart that nothing fits: worth a job.unplaceable event */
    size_t n, cap;
} why_list;

static void why_add(why_list *w, const store_job *j, const char *msg)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        uint64_t *ids = realloc(w->ids, cap * sizeof *ids);
        if (ids) w->ids = ids;
        char (*msgs)[sizeof w->msgs[0]] = ids ? realloc(w->msgs, cap * sizeof *msgs) : NULL;
        if (msgs) w->msgs = msgs;
        unsigned char *restart = msgs ? realloc(w->restart, cap) : NULL;
        if (!restart) return;
        w->restart = restart;
        w->cap = cap;
    }
    w->ids[w->n] = j->id;
    w->restart[w->n] = j->epoch > 0;
    snprintf(w->msgs[w->n++], sizeof w->msgs[0], "%s", msg);
}

/* One placement attempt of `cfg` (its num_gpus ranks) on the candidates. 0 placed. */
static int try_place(coord *c, busy_ctx *b, const atoll_config *cfg, Atoll__JobLayout *l, msg_arena *a, char *why,
                     size_t whylen)
{
    sched_node *nodes = calloc(b->n + 1, sizeof *nodes);
    if (!nodes) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < b->n; i++)
        nodes[i] = (sched_node){ b->cands[i].rn->name, b->cands[i].rn->slots, b->cands[i].gpu, b->cands[i].busy };
    int topo_rc = place_topology_aware(c, b, cfg, l, a, why, whylen);
    int rc = topo_rc < 0 || (topo_rc > 0 && sched_place(cfg, cfg->num_gpus, nodes, (int)b->n, l, a, why, whylen));
    free(nodes);
    return rc ? -1 : 0;
}

int sched_dp_fits(const atoll_config *cfg, int dp)
{
    int64_t world = (int64_t)cfg->tensor_model_parallel_size * cfg->pipeline_model_parallel_size * dp;
    if (dp < 1 || world > CFG_MAX_RANKS) return 0;
    /* the one validator's rules for that size: whole micro-batches per DP rank, a multiple of pp of them
     * when interleaved, and every batch of a --rampup-batch-size ramp or a step schedule whole too */
    atoll_config small = *cfg;
    small.num_gpus = (int)world;
    char why[512];
    return cfg_validate_layout(&small, small.num_gpus, 0, why, sizeof why) == 0;
}

/* The job's placement: its full size, or for a restart the largest data-parallel
 * size below it that fits, keeping TP and PP and the global batch (so each DP
 * rank takes more micro-batches). 0 placed (*cfg then has the placed size). */
static int place_elastic(coord *c, busy_ctx *b, const store_job *j, atoll_config *cfg, Atoll__JobLayout *l,
                         msg_arena *a, char *why, size_t whylen)
{
    if (try_place(c, b, cfg, l, a, why, whylen) == 0) return 0;
    if (j->epoch == 0) return -1; /* a new job waits for its full size */
    int mp = cfg->tensor_model_parallel_size * cfg->pipeline_model_parallel_size;
    int full = cfg_data_parallel_size(cfg, cfg->num_gpus), free_slots = 0;
    for (size_t i = 0; i < b->n; i++)
        for (int s = 0; s < b->cands[i].rn->slots; s++) free_slots += !b->cands[i].busy[s];
    for (int dp = full - 1; dp >= 1; dp--) {
        if (!sched_dp_fits(cfg, dp) || mp * dp > free_slots) continue;
        atoll_config small = *cfg;
        small.num_gpus = mp * dp;
        /* Fewer DP ranks never need less memory (ZeRO-1 shards over fewer): wait for room instead. */
        char mem[400];
        if (!sched_fits_memory(c, &small, mem, sizeof mem)) {
            snprintf(why, whylen, "not placed smaller: at data-parallel size %d %s; waiting for room for a larger one",
                     dp, mem);
            return -1;
        }
        Atoll__JobLayout sl = ATOLL__JOB_LAYOUT__INIT;
        char w2[256];
        if (try_place(c, b, &small, &sl, a, w2, sizeof w2) == 0) {
            *cfg = small;
            *l = sl;
            return 0;
        }
    }
    snprintf(why, whylen, "cannot place again: even data-parallel size 1 needs %d ranks (tp %d x pp %d) on healthy "
             "nodes with free slots; %d free", mp, cfg->tensor_model_parallel_size, cfg->pipeline_model_parallel_size,
             free_slots);
    return -1;
}

/* ---- the order of the queue ----
 * Jobs are placed in submission order. One that cannot be placed does not stop
 * the queue, but the oldest one that waits, the head, gets a reservation (EASY
 * backfill, with no run times to go on): the GPUs it would take once every job
 * submitted before it has ended, that is placed where only the jobs submitted
 * after it hold GPUs. Later jobs start only on GPUs outside the reservation, so
 * a stream of small jobs cannot keep a large one waiting for ever. A head that
 * would not fit even the cluster with no job on it waits for nodes, not for
 * other jobs, and reserves nothing; one that later jobs already stand in the way
 * of holds every later job back. Restarts are not held back: their jobs were
 * running. With time limits (atoll submit --time) it is EASY backfill proper: the
 * reservation is free once the jobs holding it end, by their limits at the latest,
 * and a later job whose own limit ends before that may use it too. */
typedef struct {
    uint64_t id;       /* the head; 0: none */
    atoll_config cfg;  /* what it waits for: a new job's full size, a restart's smallest */
    int block_all;     /* no reservation could be made: later new jobs wait */
    busy_ctx bh;       /* the run's candidates with the reservation taken too (bh.n = 0 with block_all) */
    busy_ctx resv;     /* the same candidates with only the reservation marked */
    int64_t start_ms;  /* when the reservation is free by the limits of the jobs holding it;
                        * 0 not worked out yet, INT64_MAX when one of them has no limit */
} head_hold;

/* The smallest placement a restart may take: the data-parallel size, from 1 up,
 * that keeps the global batch and fits GPU memory (place_elastic's rules). */
static void smallest_restart(coord *c, atoll_config *cfg)
{
    int mp = cfg->tensor_model_parallel_size * cfg->pipeline_model_parallel_size;
    int full = cfg_data_parallel_size(cfg, cfg->num_gpus);
    for (int dp = 1; dp < full; dp++) {
        atoll_config small = *cfg;
        small.num_gpus = mp * dp;
        char mem[400];
        if (sched_dp_fits(cfg, dp) && sched_fits_memory(c, &small, mem, sizeof mem)) {
            *cfg = small;
            return;
        }
    }
}

/* Candidates like b's (the same nodes in the same order, in the same run), sharing
 * its decoded topologies: with the slots held by jobs submitted after job
 * `newer_than` (UINT64_MAX: none), or (copy) with b's own busy slots. */
static int candidates_like(coord *c, busy_ctx *b, busy_ctx *out, uint64_t newer_than, int copy)
{
    decode_topo(c, b);
    *out = (busy_ctx){ .c = c };
    if (copy) {
        out->cands = calloc(b->n + 1, sizeof *out->cands);
        for (size_t i = 0; out->cands && i < b->n; i++, out->n++) {
            int slots = b->cands[i].rn->slots;
            cand *cd = &out->cands[i];
            cd->rn = b->cands[i].rn;
            cd->gpu = malloc((size_t)slots * sizeof *cd->gpu);
            cd->busy = malloc((size_t)slots);
            if (!cd->gpu || !cd->busy) {
                out->n++; /* freed with the rest */
                break;
            }
            memcpy(cd->gpu, b->cands[i].gpu, (size_t)slots * sizeof *cd->gpu);
            memcpy(cd->busy, b->cands[i].busy, (size_t)slots);
        }
    } else {
        build_candidates(c, out, 0, newer_than);
    }
    if (out->n != b->n) return -1; /* out of memory, or a node changed within the run */
    out->topo = b->topo;
    out->topo_state = b->topo_state;
    out->topo_borrowed = 1;
    count_free(out);
    return 0;
}

/* Makes waiting job j the head and reserves its GPUs in hh->bh. -1 (no head)
 * when it would not fit even the cluster with no job on it. */
static int hold_for(coord *c, busy_ctx *b, head_hold *hh, const store_job *j)
{
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    char why[256];
    int bad = !spec || msg_spec_to_cfg(spec, &hh->cfg, why, sizeof why);
    if (spec) atoll__job_spec__free_unpacked(spec, NULL);
    if (bad) return -1;
    if (j->epoch > 0) smallest_restart(c, &hh->cfg);
    msg_arena a = { 0 };
    Atoll__JobLayout r = ATOLL__JOB_LAYOUT__INIT;
    busy_ctx empty;
    int fits = !candidates_like(c, b, &empty, UINT64_MAX, 0) && !try_place(c, &empty, &hh->cfg, &r, &a, why, sizeof why);
    free_candidates(&empty);
    msg_arena_free(&a);
    if (!fits) return -1;
    hh->id = j->id;
    /* where it would go once the jobs before it have ended */
    busy_ctx later;
    r = (Atoll__JobLayout)ATOLL__JOB_LAYOUT__INIT;
    int reserved = !candidates_like(c, b, &later, j->id, 0) && !try_place(c, &later, &hh->cfg, &r, &a, why, sizeof why);
    free_candidates(&later);
    int bh_ok = reserved && candidates_like(c, b, &hh->bh, 0, 1) == 0;
    int resv_ok = bh_ok && candidates_like(c, b, &hh->resv, 0, 1) == 0; /* a copy, then only r marked */
    if (resv_ok) {
        mark_layout(&hh->bh, &r);
        count_free(&hh->bh);
        for (size_t i = 0; i < hh->resv.n; i++) memset(hh->resv.cands[i].busy, 0, (size_t)hh->resv.cands[i].rn->slots);
        mark_layout(&hh->resv, &r);
    } else {
        if (reserved) free_candidates(&hh->bh); /* candidates_like allocates even when it fails */
        if (bh_ok) free_candidates(&hh->resv);
        hh->block_all = 1;
    }
    msg_arena_free(&a);
    return 0;
}

typedef struct {
    coord *c;
    head_hold *hh;
    int64_t latest; /* the latest end of a job holding reserved GPUs; INT64_MAX: one has no limit */
} holders_ctx;

static int note_holder(void *ctx, store_job *j)
{
    holders_ctx *x = ctx;
    if (j->id == x->hh->id || x->latest == INT64_MAX) return 0;
    Atoll__JobLayout *l = load_layout(x->c, j);
    int holds = 0;
    cand *cd = NULL;
    for (size_t r = 0; l && r < l->n_ranks && !holds; r++) {
        const unsigned char *reserved = rank_slot(&x->hh->resv, &cd, l->ranks[r]);
        holds = reserved && *reserved;
    }
    if (l) atoll__job_layout__free_unpacked(l, NULL);
    if (!holds) return 0;
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    int64_t end = spec && spec->time_limit_s > 0 && j->started_ms ? j->started_ms + spec->time_limit_s * 1000 : INT64_MAX;
    if (spec) atoll__job_spec__free_unpacked(spec, NULL);
    if (end > x->latest) x->latest = end;
    return 0;
}

/* When the head's reservation is free at the latest: the end, by its --time
 * limit, of every active job that holds some of its GPUs (worked out once a pass,
 * when a later job with a limit asks). */
static int64_t reservation_free_ms(coord *c, head_hold *hh)
{
    if (hh->start_ms) return hh->start_ms;
    holders_ctx x = { c, hh, 0 };
    for (int s = ATOLL__JOB_STATE__JOB_PLACING; s <= ATOLL__JOB_STATE__JOB_RESTARTING; s++)
        store_jobs_each(c->st, s, note_holder, &x);
    hh->start_ms = x.latest > 0 ? x.latest : c->now();
    return hh->start_ms;
}

/* Places job j if it can: 0 placed, 1 waiting (for room, or behind the head),
 * 2 waiting for its --dependency (it holds no reservation: it does not wait for
 * GPUs), -1 failed or, its dependency never able to hold, cancelled. */
static int place_one(coord *c, busy_ctx *b, store_job *j, why_list *waiting, head_hold *hh)
{
    atoll_config cfg;
    Atoll__JobSpec *spec = atoll__job_spec__unpack(NULL, j->spec_len, j->spec);
    char why[sizeof j->message];
    int dep = j->epoch == 0 && spec && spec->dependency && spec->dependency[0]
                  ? jobs_dependency(c, spec, why, sizeof why) : 0;
    if (dep) {
        if (dep > 0 && strcmp(j->message, why)) why_add(waiting, j, why);
        if (dep < 0) jobs_set_state(c, j, ATOLL__JOB_STATE__JOB_CANCELLED, "not started: %s", why);
        atoll__job_spec__free_unpacked(spec, NULL);
        return dep > 0 ? 2 : -1;
    }
    /* A new job after the head: only on GPUs outside its reservation, unless its
     * --time ends before the reservation is free. */
    int after_head = hh->id && j->id > hh->id, held = after_head && j->epoch == 0;
    if (held && !hh->block_all && spec && spec->time_limit_s > 0 &&
        c->now() + spec->time_limit_s * 1000 <= reservation_free_ms(c, hh))
        held = 0;
    busy_ctx *on = held ? &hh->bh : b;
    char behind[sizeof j->message];
    snprintf(behind, sizeof behind, "waiting behind job %llu (submitted earlier, waiting for %d GPUs): later jobs "
             "start only on GPUs it leaves free (%d now)", (unsigned long long)hh->id, hh->cfg.num_gpus,
             held && !hh->block_all ? hh->bh.free_slots : 0);
    /* Cannot fit: say so without trying a placement (a restart may still fit shrunk). */
    if (spec && j->epoch == 0 && (spec->num_gpus > on->free_slots || (held && hh->block_all))) {
        if (held && spec->num_gpus <= b->free_slots) snprintf(why, sizeof why, "%s", behind);
        else waiting_for(spec->num_gpus, b->free_slots, b->usable, why, sizeof why);
        if (strcmp(j->message, why)) why_add(waiting, j, why);
        atoll__job_spec__free_unpacked(spec, NULL);
        return 1;
    }
    if (!spec || msg_spec_to_cfg(spec, &cfg, j->message, sizeof j->message)) {
        jobs_set_state(c, j, ATOLL__JOB_STATE__JOB_PLACING, "placing");
        jobs_set_state(c, j, ATOLL__JOB_STATE__JOB_FAILED, "stored job spec is unreadable");
        if (spec) atoll__job_spec__free_unpacked(spec, NULL);
        return -1;
    }
    msg_arena a = { 0 };
    Atoll__JobLayout l = ATOLL__JOB_LAYOUT__INIT;
    int full = cfg.num_gpus, status = 1;
    if (place_elastic(c, on, j, &cfg, &l, &a, why, sizeof why)) {
        if (held) snprintf(why, sizeof why, "%s", behind);
        if (strcmp(j->message, why)) why_add(waiting, j, why); /* no state change: no event but for a restart */
        goto out;
    }
    if (after_head && !hh->block_all) { /* the reservation's view sees these GPUs taken too */
        mark_layout(&hh->bh, &l);
        count_free(&hh->bh);
    }
    status = -1;
    if (jobs_set_state(c, j, ATOLL__JOB_STATE__JOB_PLACING, "placing %d ranks", cfg.num_gpus)) goto out;
    l.job = j->id;
    l.epoch = j->epoch;
    /* A restart resumes from the job's own checkpoints once it has committed one. */
    l.checkpoint = j->checkpoint > 0 && cfg.save[0] ? cfg.save : cfg.load;
    l.rendezvous = c->o.listen;
    size_t len = protobuf_c_message_get_packed_size(&l.base);
    uint8_t *blob = malloc(len ? len : 1);
    if (!blob) goto out;
    protobuf_c_message_pack(&l.base, blob);
    j->world = (int)l.n_ranks;
    if (!j->started_ms) j->started_ms = c->now();
    store_restart r;
    int rc = store_begin(c->st);
    if (!rc) rc = store_layout_put(c->st, j->id, j->epoch, blob, len);
    if (!rc && j->epoch > 0 && store_restart_get(c->st, j->id, j->epoch, &r) == 0) {
        r.dp = l.dp;
        rc = store_restart_put(c->st, &r);
    }
    if (!rc)
        rc = jobs_change(c, j, ATOLL__JOB_STATE__JOB_STARTING, "layout tp=%d pp=%d dp=%d on %zu ranks%s", l.tp, l.pp,
                         l.dp, l.n_ranks, (int)l.n_ranks < full ? " (data parallel shrunk to fit; global batch kept)" : "");
    if (!rc) rc = store_commit(c->st);
    free(blob);
    if (rc) {
        store_rollback(c->st);
        log_error("job %llu: cannot store its layout: %s", (unsigned long long)j->id, store_errmsg(c->st));
        goto out;
    }
    cand *cd = NULL;
    for (size_t r = 0; r < l.n_ranks; r++) { /* later jobs in this run see these GPUs taken */
        if (!cd || strcmp(cd->rn->name, l.ranks[r]->node)) cd = find_cand(b, l.ranks[r]->node);
        for (int s = 0; cd && s < cd->rn->slots; s++)
            if (cd->gpu[s] == l.ranks[r]->gpu && !cd->busy[s]) {
                cd->busy[s] = 1;
                break;
            }
    }
    count_free(b);
    launch(c, j, spec, &l);
    status = 0;
out:
    msg_arena_free(&a);
    atoll__job_spec__free_unpacked(spec, NULL);
    return status;
}

void sched_capacity_changed(coord *c)
{
    c->sched_gen++;
    c->schedule_pending = 1;
}

int sched_grow_dp(coord *c, const store_job *j, const atoll_config *cfg, int dp_now)
{
    busy_ctx b = { .c = c };
    build_candidates(c, &b, j->id, 0); /* the job's own slots count as free: it would move */
    int best = dp_now;
    int mp = cfg->tensor_model_parallel_size * cfg->pipeline_model_parallel_size;
    int full = cfg_data_parallel_size(cfg, cfg->num_gpus);
    for (int dp = full; dp > dp_now; dp--) {
        if (!sched_dp_fits(cfg, dp)) continue;
        atoll_config big = *cfg;
        big.num_gpus = mp * dp;
        msg_arena a = { 0 };
        Atoll__JobLayout l = ATOLL__JOB_LAYOUT__INIT;
        char why[256];
        int ok = try_place(c, &b, &big, &l, &a, why, sizeof why) == 0;
        msg_arena_free(&a);
        if (ok) {
            best = dp;
            break;
        }
    }
    free_candidates(&b);
    return best;
}

void sched_run(coord *c)
{
    c->schedule_pending = 0;
    if (c->sched_gen != c->sched_seen_gen) { /* capacity may have grown: every pending job again */
        c->sched_seen_gen = c->sched_gen;
        c->sched_cursor = 0;
        c->sched_full = 1;
    }
    /* A pass from the first pending job finds the head again; a later part of a
     * pass, or a run for new jobs only, keeps the one found before while it waits. */
    if (c->sched_full && !c->sched_cursor) c->sched_head = 0;
    /* At most SCHED_JOBS_PER_TICK jobs a tick, so a long queue costs heartbeats nothing
     * noticeable; the rest continue on the next tick. */
    store_idlist pending = { 0 };
    store_job_ids(c->st, ATOLL__JOB_STATE__JOB_PENDING, c->sched_full ? c->sched_cursor : c->sched_seen_id,
                  SCHED_JOBS_PER_TICK, &pending);
    if (pending.n == SCHED_JOBS_PER_TICK) {
        c->sched_cursor = pending.ids[pending.n - 1];
        c->schedule_pending = 1;
    } else {
        c->sched_full = 0;
    }
    if (!pending.n) return;
    /* Ids only grow (AUTOINCREMENT): a job submitted later has a higher one. */
    if (pending.ids[pending.n - 1] > c->sched_seen_id) c->sched_seen_id = pending.ids[pending.n - 1];
    busy_ctx b = { .c = c };
    build_candidates(c, &b, 0, 0);
    head_hold hh = { 0 };
    if (c->sched_head) {
        store_job hj;
        int waits = store_job_get(c->st, c->sched_head, &hj) == 0;
        if (!waits || hj.state != ATOLL__JOB_STATE__JOB_PENDING || hold_for(c, &b, &hh, &hj)) c->sched_head = 0;
        if (waits) store_job_clear(&hj);
    }
    why_list waiting = { 0 };
    for (size_t i = 0; i < pending.n; i++) {
        store_job j;
        if (store_job_get(c->st, pending.ids[i], &j)) continue;
        if (place_one(c, &b, &j, &waiting, &hh) == 1 && !hh.id && hold_for(c, &b, &hh, &j) == 0)
            c->sched_head = j.id;
        store_job_clear(&j);
    }
    if (hh.id && !hh.block_all) {
        free_candidates(&hh.bh);
        free_candidates(&hh.resv);
    }
    if (waiting.n && store_begin(c->st) == 0) {
        int rc = 0;
        for (size_t i = 0; i < waiting.n && !rc; i++) {
            rc = store_job_set_message(c->st, waiting.ids[i], waiting.msgs[i]);
            char subject[32];
            snprintf(subject, sizeof subject, "job %llu", (unsigned long long)waiting.ids[i]);
            /* a restart that nothing fits is worth an event: the job waits for nodes */
            if (!rc && waiting.restart[i]) rc = events_add(c, "job.unplaceable", subject, "%s", waiting.msgs[i]);
        }
        if (rc || store_commit(c->st)) store_rollback(c->st);
    }
    free(waiting.ids);
    free(waiting.msgs);
    free(waiting.restart);
    free_candidates(&b);
    free(pending.ids);
}
