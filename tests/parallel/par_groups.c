/* par_groups: rank groups against an independent derivation.
 *
 * The reference here does not use the masked-shape algorithm of groups.c. It
 * gives each rank its coordinate on every dimension by peeling digits off the
 * rank id (order string, first = fastest), then says two ranks share a group of
 * kind K when they agree on every coordinate outside K. Groups are listed in
 * order of their lowest rank and members ascending, which is the order Megatron
 * produces (both orders are the same mixed-radix number read on the remaining
 * digits). Checked for every world size up to 64, every (tp, pp) dividing it,
 * several orders; plus Megatron's documented 16-GPU example and bad inputs. */
#include "check.h"
#include "groups.h"

#include <stdlib.h>
#include <string.h>

enum { D_TP, D_CP, D_EP, D_DP, D_PP, ND };
static const char *names[ND] = {"tp", "cp", "ep", "dp", "pp"};

/* coord[r][d] for every rank under `order` with sizes by dimension name. */
static void coords(const char *order, const int size[ND], int world, int (*coord)[ND])
{
    int seq[ND], n = 0, used[ND] = {0};
    char buf[64];
    snprintf(buf, sizeof buf, "%s", order);
    for (char *t = strtok(buf, "-"); t; t = strtok(NULL, "-"))
        for (int d = 0; d < ND; d++)
            if (!strcmp(t, names[d])) seq[n++] = d, used[d] = 1;
    for (int d = 0; d < ND; d++)
        if (!used[d]) seq[n++] = d;
    for (int r = 0; r < world; r++) {
        int x = r;
        for (int i = 0; i < n; i++) {
            coord[r][seq[i]] = x % size[seq[i]];
            x /= size[seq[i]];
        }
    }
}

/* Reference groups for the dimensions in `in` (bitmask); returns count, fills
 * out (count*gsize) and *gsize. */
static int ref_groups(int world, int (*coord)[ND], unsigned in, int *out, int *gsize)
{
    int *gid = malloc(sizeof(int) * (size_t)world), ng = 0, *fill = calloc((size_t)world, sizeof(int));
    for (int r = 0; r < world; r++) {
        gid[r] = -1;
        for (int q = 0; q < r && gid[r] < 0; q++) {
            int same = 1;
            for (int d = 0; d < ND; d++)
                if (!(in >> d & 1) && coord[q][d] != coord[r][d]) same = 0;
            if (same) gid[r] = gid[q];
        }
        if (gid[r] < 0) gid[r] = ng++;
    }
    *gsize = world / ng;
    for (int r = 0; r < world; r++) out[gid[r] * *gsize + fill[gid[r]]++] = r;
    free(gid);
    free(fill);
    return ng;
}

static int same_groups(const rank_groups *g, group_kind k, const int *ref, int count, int gsize)
{
    if (g->count[k] != count || g->size[k] != gsize) return 0;
    return memcmp(g->ranks[k], ref, sizeof(int) * (size_t)(count * gsize)) == 0;
}

static void check_layout(int world, int tp, int pp, const char *order)
{
    rank_groups g;
    char err[256];
    int rc = groups_build(&g, world, tp, pp, order, err, sizeof err);
    CHECK(rc == 0, "world %d tp %d pp %d order %s: %s", world, tp, pp, order, err);
    if (rc) return;
    int size[ND] = {tp, 1, 1, world / (tp * pp), pp};
    int (*coord)[ND] = malloc(sizeof(int[ND]) * (size_t)world);
    coords(order, size, world, coord);
    int *ref = malloc(sizeof(int) * (size_t)world), n, gs;
    static const unsigned masks[] = {1u << D_TP, 1u << D_PP, 1u << D_DP, 1u << D_TP | 1u << D_PP};
    for (int k = 0; k < 4; k++) {
        n = ref_groups(world, coord, masks[k], ref, &gs);
        CHECK(same_groups(&g, (group_kind)k, ref, n, gs), "world %d tp %d pp %d order %s: %s groups differ",
              world, tp, pp, order, groups_kind_name((group_kind)k));
    }
    /* embedding: ends of each reference PP group (ascending = stage order) */
    n = ref_groups(world, coord, 1u << D_PP, ref, &gs);
    int es = pp > 1 ? 2 : 1, ok = g.count[GROUP_EMBEDDING] == n && g.size[GROUP_EMBEDDING] == es;
    for (int i = 0; ok && i < n; i++) {
        ok = g.ranks[GROUP_EMBEDDING][i * es] == ref[i * gs];
        if (es == 2) ok = ok && g.ranks[GROUP_EMBEDDING][i * es + 1] == ref[i * gs + gs - 1];
    }
    CHECK(ok, "world %d tp %d pp %d order %s: embedding groups differ", world, tp, pp, order);
    /* groups_find agrees with the lists */
    for (int r = 0; r < world; r++) {
        int cnt, pos;
        const int *grp = groups_find(&g, GROUP_DP, r, &cnt, &pos);
        CHECK(grp && cnt == g.dp && grp[pos] == r, "groups_find dp rank %d", r);
    }
    free(coord);
    free(ref);
    groups_free(&g);
}

static char *json_of(int world, int tp, int pp, const char *order)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = groups_print_json(f, world, tp, pp, order);
    fclose(f);
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *orders[] = {"tp-cp-ep-dp-pp", "tp-pp-dp", "tp-dp-pp", "pp-dp-tp", "dp-tp-pp"};
    int layouts = 0;
    for (int world = 1; world <= 64; world++)
        for (int tp = 1; tp <= world; tp++)
            for (int pp = 1; tp * pp <= world; pp++) {
                if (world % (tp * pp)) continue;
                for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) check_layout(world, tp, pp, orders[o]);
                layouts++;
            }
    printf("checked %d (world, tp, pp) layouts x %zu orders\n", layouts, sizeof orders / sizeof *orders);

    /* Megatron's documented example: 16 GPUs, tp 2, pp 4 (order tp-dp-pp
     * relative: tp fastest, pp slowest). */
    char *j = json_of(16, 2, 4, NULL);
    const char *js = j ? j : "(null)";
    CHECK(j && strstr(j, "\"tp\":[[0,1],[2,3],[4,5],[6,7],[8,9],[10,11],[12,13],[14,15]]"), "tp: %s", js);
    CHECK(j && strstr(j, "\"pp\":[[0,4,8,12],[1,5,9,13],[2,6,10,14],[3,7,11,15]]"), "pp: %s", js);
    CHECK(j && strstr(j, "\"dp\":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]]"), "dp: %s", js);
    CHECK(j && strstr(j, "\"embedding\":[[0,12],[1,13],[2,14],[3,15]]"), "embedding: %s", js);
    CHECK(j && strstr(j, "\"mp\":[[0,1,4,5,8,9,12,13],[2,3,6,7,10,11,14,15]]"), "mp: %s", js);
    CHECK(j && strncmp(j, "{\"world\":16,", 12) == 0, "json starts with world: %s", js);
    free(j);
    j = json_of(4, 1, 1, NULL);
    js = j ? j : "(null)";
    CHECK(j && strstr(j, "\"embedding\":[[0],[1],[2],[3]]"), "pp=1 embedding is the rank itself: %s", js);
    free(j);

    /* bad inputs give one clear line and no output */
    rank_groups g;
    char err[256];
    CHECK(groups_build(&g, 6, 4, 1, NULL, err, sizeof err) == -1 && strstr(err, "not divisible"), "%s", err);
    CHECK(groups_build(&g, 8, 2, 2, "tp-xx-pp", err, sizeof err) == -1 && strstr(err, "unknown token 'xx'"), "%s", err);
    CHECK(groups_build(&g, 8, 2, 2, "tp-pp-tp", err, sizeof err) == -1 && strstr(err, "repeated"), "%s", err);
    CHECK(groups_build(&g, 8, 2, 2, "tp-dp", err, sizeof err) == -1 && strstr(err, "leaves out pp"), "%s", err);
    CHECK(groups_build(&g, 8, 0, 2, NULL, err, sizeof err) == -1 && strstr(err, ">= 1"), "%s", err);
    CHECK(json_of(6, 4, 1, NULL) == NULL, "print_json refuses a bad layout");
    return check_summary(argv[0]);
}
