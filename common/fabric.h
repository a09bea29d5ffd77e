/* fabric: the switch tree of a cluster, read from a Slurm topology.conf
 * (topology/tree plugin), as given to `coordinatord --fabric FILE`.
 *
 * Accepted lines (one switch per line, '#' starts a comment, keys case-insensitive):
 *   SwitchName=leaf0 Nodes=node[000-007,010]    a leaf switch and the nodes under it
 *   SwitchName=spine0 Switches=leaf[0-3]         a switch above other switches
 *   LinkSpeed=N is accepted and ignored (Slurm uses it only for its own weights).
 * `scontrol show topology` output is accepted too: its Level=N is ignored, and so
 * are the Nodes= of a switch with Switches= (it repeats the nodes of the leaves).
 * A node may hang under one switch only; a switch may have one parent only; the
 * tree must have no cycles. Hostlists use Slurm's syntax: prefix[a-b,c,...]suffix,
 * with zero padding kept from the range's lower bound.
 *
 * Ownership: fabric_parse/fabric_load return a heap object the caller frees with
 * fabric_free; returned names point into it and live as long as it does.
 */
#ifndef ATOLL_FABRIC_H
#define ATOLL_FABRIC_H

#include <stddef.h>
#include <stdio.h>

#include "topo.h"

typedef struct fabric fabric;

/* Parses topology.conf text; `fname` is used only in messages ("FILE:LINE: ...").
 * Returns 0 and *out, or -1 with err set and *out NULL. */
int fabric_parse(fabric **out, const char *text, const char *fname, char *err, size_t errlen);
int fabric_load(fabric **out, const char *path, char *err, size_t errlen);
/* A whole topology text from a stream (64 MiB at most, no NUL bytes): a string from
 * malloc, or NULL with err set. */
char *fabric_read_text(FILE *fp, const char *name, char *err, size_t errlen);
void fabric_free(fabric *f);

int fabric_num_switches(const fabric *f);
int fabric_num_nodes(const fabric *f);
const char *fabric_switch_name(const fabric *f, int sw);
int fabric_switch_index(const fabric *f, const char *name);      /* -1 when unknown */
int fabric_parent(const fabric *f, int sw);                       /* -1 at a root */
int fabric_depth(const fabric *f, int sw);                        /* 0 at a root */

/* The switch a node hangs under (its leaf), -1 when the node is not listed. */
int fabric_leaf_of(const fabric *f, const char *node);

/* Lowest common ancestor of two switches; -1 when they are in different trees. */
int fabric_lca(const fabric *f, int a, int b);

/* Switch-to-switch links between two switches: 0 for the same switch, 2 for two
 * leaves under one spine, ...; -1 when no path exists (disconnected trees). */
int fabric_distance(const fabric *f, int a, int b);

/* Sets nodes[i].leaf from the fabric; nodes the fabric does not list keep "" and
 * are counted in the return value (so the caller can warn about them). */
int fabric_apply(const fabric *f, topo_node *nodes, int n);

/* Expands a Slurm hostlist ("node[000-003,007],gpu9") calling `fn` once per name
 * in order. Returns the number of names, or -1 with err naming the bad part.
 * `fn` may return non-zero to stop with an error it has already written. */
typedef int (*fabric_name_fn)(void *ctx, const char *name);
int fabric_hostlist_expand(const char *list, fabric_name_fn fn, void *ctx, char *err, size_t errlen);

#endif
