/* discover_internal: pieces shared by the discovery sources (not part of the API).
 *
 * dxml_*      a small tolerant XML reader: elements and attributes, nothing else.
 * discover_*  the rules every source applies the same way: bus-id spelling, rails
 *             from PCI distances, islands from NVLink components.
 */
#ifndef ATOLL_DISCOVER_INTERNAL_H
#define ATOLL_DISCOVER_INTERNAL_H

#include <stddef.h>

#include "topo.h"

/* ---- XML ---------------------------------------------------------------- */

typedef struct dxml_attr {
    const char *name, *value;  /* entity references in values are decoded */
} dxml_attr;

typedef struct dxml_elem {
    const char *name;
    int parent;                /* index into elems; -1 for the root */
    int depth;                 /* root is 0 */
    int line;                  /* where the start tag begins, 1-based */
    int attr0, nattrs;         /* a range of doc->attrs */
} dxml_elem;

/* Elements in document order, so a parent always precedes its children.
 * The doc owns every string; dxml_free releases them all. */
typedef struct dxml_doc {
    dxml_elem *elems;
    int nelems;
    dxml_attr *attrs;
    int nattrs;
    char *strings;
} dxml_doc;

#define DXML_MAX_BYTES (16u << 20)
#define DXML_MAX_DEPTH 64

/* Parses `len` bytes of `text`; errors read "<path>:<line>: <what>". */
int dxml_parse(dxml_doc *doc, const char *text, size_t len, const char *path,
               char *err, unsigned errlen);
/* Reads and parses a file (at most DXML_MAX_BYTES). */
int dxml_load(dxml_doc *doc, const char *path, char *err, unsigned errlen);
void dxml_free(dxml_doc *doc);
/* Value of attribute `name` of element `e`, or NULL. */
const char *dxml_attr_get(const dxml_doc *doc, int e, const char *name);

/* ---- shared rules ------------------------------------------------------- */

/* Clears everything in `n` but name and leaf. */
void discover_reset(topo_node *n);

/* Canonical bus id "dddd:bb:dd.f" as sysfs spells it: lower case, domain padded to 4
 * digits (NVML pads it to 8, upper case). Input that is not a bus id is copied
 * lower-cased. */
void discover_busid_norm(char *out, size_t outlen, const char *in);

/* hops[g * nnics + i]: PCI hops between GPU g and NIC i, or -1 when unknown (an
 * unknown distance ties with every other unknown one and loses to any known one).
 * Sets gpu.rail and nic.rail as discover.h describes. */
void discover_assign_rails(topo_node *n, const int *hops);

/* comp[g]: any integer naming GPU g's NVLink component. Sets gpu.island. */
void discover_name_islands(topo_node *n, const int *comp);

/* ---- sources of discover_local ----------------------------------------- */

#define DISCOVER_PATH 512

/* Appends the GPUs NVML reports (NVML index order, islands named). Without NVML
 * (no library, no driver) adds none, returns 0 and says why in `note`. */
int discover_nvml_gpus(topo_node *n, char *note, unsigned notelen, char *err, unsigned errlen);

/* For GPUs already in `n` (from a topology file) that NVML also reports at the same
 * bus id: takes NVML's UUID, name and memory size, which files do not carry.
 * Best effort; returns how many GPUs matched (0 without NVML). */
int discover_nvml_fill(topo_node *n);

/* Appends the RDMA devices of <sysfs_root>/class/infiniband in bus-id order; pcipath[i]
 * receives NIC i's place in the PCI tree (see discover_pci_path). No such directory
 * means no NICs. */
int discover_ib_nics(topo_node *n, const char *sysfs_root, char (*pcipath)[DISCOVER_PATH],
                     char *err, unsigned errlen);

/* A device's place in the PCI tree: the resolved sysfs path of `link` below
 * <sysfs_root>/devices/, e.g. "pci0000:00/0000:00:01.0/0000:0c:00.0"; "" if unknown. */
void discover_pci_path(const char *sysfs_root, const char *link, char *out, size_t len);

/* Edges between two such paths; -1 when either is unknown. */
int discover_pci_hops(const char *a, const char *b);

/* Union-find over `parent` (parent[i] == i for roots). */
int discover_uf_find(int *parent, int x);
void discover_uf_join(int *parent, int a, int b);

#endif
