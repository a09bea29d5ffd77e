#include "groups.h"

#include "config.h"

#include <stdlib.h>
#include <string.h>

#define NDIM CFG_NDIMS

typedef struct {
    int ndim;
    int size[NDIM]; /* by position in the order string */
    int name[NDIM]; /* cfg_dim */
} layout;

/* The order string is parsed by common/config (cfg_rank_order_parse), as the
 * scheduler and placement do. */
static int parse_order(layout *L, const char *order, int tp, int dp, int pp, char *err, size_t errlen)
{
    cfg_rank_order o;
    if (cfg_rank_order_parse(order, tp, dp, pp, &o, err, errlen)) return -1;
    L->ndim = o.ndim;
    for (int i = 0; i < o.ndim; i++) {
        L->name[i] = o.dim[i];
        L->size[i] = o.size[o.dim[i]];
    }
    return 0;
}

/* Groups of the ranks that share every digit outside `mask` (a bit per
 * dimension name). Writes count*size ranks to *out. */
static void masked_groups(const layout *L, int world, unsigned mask, int **out, int *count,
                          int *size)
{
    int stride[NDIM], in_sh[NDIM], in_st[NDIM], out_sh[NDIM], out_st[NDIM], ni = 0, no = 0;
    int s = 1;
    for (int i = 0; i < L->ndim; i++) {
        stride[i] = s;
        s *= L->size[i];
    }
    for (int i = 0; i < L->ndim; i++) {
        if (mask >> L->name[i] & 1) {
            in_sh[ni] = L->size[i];
            in_st[ni++] = stride[i];
        } else {
            out_sh[no] = L->size[i];
            out_st[no++] = stride[i];
        }
    }
    int gsize = 1;
    for (int i = 0; i < ni; i++) gsize *= in_sh[i];
    int ngroups = world / gsize;
    int *r = malloc(sizeof(int) * (size_t)world);
    for (int g = 0; g < ngroups; g++) {
        int base = 0, rest = g;
        for (int i = 0; i < no; i++) {
            base += (rest % out_sh[i]) * out_st[i];
            rest /= out_sh[i];
        }
        for (int m = 0; m < gsize; m++) {
            int off = 0, rm = m;
            for (int i = 0; i < ni; i++) {
                off += (rm % in_sh[i]) * in_st[i];
                rm /= in_sh[i];
            }
            r[g * gsize + m] = base + off;
        }
    }
    *out = r;
    *count = ngroups;
    *size = gsize;
}

int groups_build(rank_groups *g, int world, int tp, int pp, const char *order, char *err,
                 size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (world < 1 || tp < 1 || pp < 1) {
        snprintf(err, errlen, "world size (%d), --tensor-model-parallel-size (%d) and "
                 "--pipeline-model-parallel-size (%d) must all be >= 1", world, tp, pp);
        return -1;
    }
    if ((long long)tp * pp > world || world % ((long long)tp * pp) != 0) {
        snprintf(err, errlen, "world size %d is not divisible by tensor x pipeline parallel size "
                 "%d x %d = %lld", world, tp, pp, (long long)tp * pp);
        return -1;
    }
    int dp = world / (tp * pp);
    layout L;
    if (parse_order(&L, order, tp, dp, pp, err, errlen) != 0) return -1;
    g->world = world;
    g->tp = tp;
    g->pp = pp;
    g->dp = dp;
    int w = 0;
    for (int i = 0; i < L.ndim; i++)
        w += snprintf(g->order + w, sizeof g->order - (size_t)w, "%s%s", i ? "-" : "",
                      cfg_dim_name((cfg_dim)L.name[i]));

    enum { TP = 1 << CFG_DIM_TP, DP = 1 << CFG_DIM_DP, PP = 1 << CFG_DIM_PP };
    masked_groups(&L, world, TP, &g->ranks[GROUP_TP], &g->count[GROUP_TP], &g->size[GROUP_TP]);
    masked_groups(&L, world, PP, &g->ranks[GROUP_PP], &g->count[GROUP_PP], &g->size[GROUP_PP]);
    masked_groups(&L, world, DP, &g->ranks[GROUP_DP], &g->count[GROUP_DP], &g->size[GROUP_DP]);
    masked_groups(&L, world, TP | PP, &g->ranks[GROUP_MP], &g->count[GROUP_MP],
                  &g->size[GROUP_MP]);

    /* Embedding: first and last stage of each pipeline group (tied word
     * embeddings live on both); the whole (one-rank) group when pp = 1. */
    int np = g->count[GROUP_PP], es = pp > 1 ? 2 : 1;
    g->count[GROUP_EMBEDDING] = np;
    g->size[GROUP_EMBEDDING] = es;
    g->ranks[GROUP_EMBEDDING] = malloc(sizeof(int) * (size_t)(np * es));
    for (int i = 0; i < np; i++) {
        const int *p = g->ranks[GROUP_PP] + i * pp;
        g->ranks[GROUP_EMBEDDING][i * es] = p[0];
        if (es == 2) g->ranks[GROUP_EMBEDDING][i * es + 1] = p[pp - 1];
    }
    return 0;
}

void groups_free(rank_groups *g)
{
    for (int k = 0; k < GROUP_KINDS; k++) free(g->ranks[k]);
    memset(g, 0, sizeof *g);
}

const char *groups_kind_name(group_kind k)
{
    static const char *const names[GROUP_KINDS] = {"tp", "pp", "dp", "mp", "embedding"};
    return k < GROUP_KINDS ? names[k] : "?";
}

const int *groups_find(const rank_groups *g, group_kind kind, int rank, int *n, int *pos)
{
    int sz = g->size[kind];
    for (int i = 0; i < g->count[kind] * sz; i++)
        if (g->ranks[kind][i] == rank) {
            if (n) *n = sz;
            if (pos) *pos = i % sz;
            return g->ranks[kind] + (i / sz) * sz;
        }
    return NULL;
}

void groups_write_json(FILE *f, const rank_groups *g)
{
    fprintf(f, "{\"world\":%d,\"order\":\"%s\",\"tp_size\":%d,\"pp_size\":%d,\"dp_size\":%d",
            g->world, g->order, g->tp, g->pp, g->dp);
    for (int k = 0; k < GROUP_KINDS; k++) {
        fprintf(f, ",\"%s\":[", groups_kind_name((group_kind)k));
        for (int i = 0; i < g->count[k]; i++) {
            fputs(i ? ",[" : "[", f);
            for (int j = 0; j < g->size[k]; j++)
                fprintf(f, j ? ",%d" : "%d", g->ranks[k][i * g->size[k] + j]);
            fputc(']', f);
        }
        fputc(']', f);
    }
    fputs("}\n", f);
}

int groups_print_json(FILE *f, int world, int tp, int pp, const char *order)
{
    rank_groups g;
    char err[256];
    if (groups_build(&g, world, tp, pp, order, err, sizeof err) != 0) {
        fprintf(stderr, "atoll-train: --print-groups: %s\n", err);
        return -1;
    }
    groups_write_json(f, &g);
    groups_free(&g);
    return 0;
}
