/* groups: the process groups of a (tp, pp, dp) layout, in Megatron-Core's order.
 *
 * Megatron-Core's RankGenerator lays ranks out as a mixed-radix number whose
 * digits are the parallel dimensions in the order string (first = fastest), e.g.
 * "tp-cp-ep-dp-pp": rank = tp_i + tp*(cp_i + cp*(ep_i + ep*(dp_i + dp*pp_i))).
 * The groups of a token set (say "tp-pp") are the ranks that agree on every other
 * digit; groups are listed by those other digits (first fastest), and members by
 * the token digits in order-string order. Context and expert sizes are 1 here.
 *
 * Kinds: TP, PP, DP, MP (model parallel: "tp-pp"), EMBEDDING (first and last
 * stage of each PP group; the one rank itself when pp = 1). Same names, same
 * rank lists as Megatron for the same sizes and order, so a layout here and a
 * Megatron layout name the same ranks.
 *
 * Ownership: rank_groups owns its arrays; groups_free releases them.
 */
#ifndef ATOLL_GROUPS_H
#define ATOLL_GROUPS_H

#include <stddef.h>
#include <stdio.h>


typedef enum { GROUP_TP, GROUP_PP, GROUP_DP, GROUP_MP, GROUP_EMBEDDING, GROUP_KINDS } group_kind;

typedef struct rank_groups {
    int world, tp, pp, dp;
    char order[32];        /* normalised: every token present */
    int count[GROUP_KINDS]; /* number of groups of each kind */
    int size[GROUP_KINDS];  /* ranks per group (all groups of a kind have one size) */
    int *ranks[GROUP_KINDS]; /* count*size world ranks, group g at [g*size] */
} rank_groups;

/* order NULL or "" = CFG_DEFAULT_RANK_ORDER (config.h), parsed by cfg_rank_order_parse. Returns 0, or -1 with err naming the
 * rule that failed (sizes >= 1, world divisible by tp*pp, order tokens). */
int groups_build(rank_groups *g, int world, int tp, int pp, const char *order, char *err,
                 size_t errlen);
void groups_free(rank_groups *g);

const char *groups_kind_name(group_kind k); /* "tp", "pp", "dp", "mp", "embedding" */

/* The group of `kind` that holds `rank`: its ranks (size in *n), this rank's
 * position in *pos. NULL when no group of that kind holds it. */
const int *groups_find(const rank_groups *g, group_kind kind, int rank, int *n, int *pos);

/* {"world":8,"order":"tp-cp-ep-dp-pp","tp":[[0,1],...],"pp":[...],"dp":[...],
 *  "mp":[...],"embedding":[...]} and a newline. */
void groups_write_json(FILE *f, const rank_groups *g);
/* For `atoll-train --print-groups`: builds and writes; on bad sizes prints the
 * reason to stderr and returns -1. */
int groups_print_json(FILE *f, int world, int tp, int pp, const char *order);

#endif
