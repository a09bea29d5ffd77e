/* discover_xml: a node's topology from an NCCL topology XML file.
 *
 * What the file says, in NCCL's vocabulary: <system> holds <cpu> (NUMA) elements, which
 * hold a tree of <pci busid= class=> elements (bridges and switches class 0x0604xx,
 * GPUs 0x03xxxx, NICs 0x02xxxx, NVSwitches 0x068000). A GPU's <pci> may hold a
 * <gpu dev= sm=> with <nvlink target= count= tclass=> children; a NIC's <pci> may hold
 * <nic> with one <net name= speed= port=> per usable port. NCCL itself classifies PCI
 * devices by the leading byte of the class, and so does this reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"
#include "discover_internal.h"

#define NVSWITCH_CLASS 0x068000L
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct xdev {
    int elem;    /* the element that stands for the device in the PCI tree */
    int order;   /* document position, to keep equal bus ids in file order */
    union { topo_gpu gpu; topo_nic nic; } u;
} xdev;

typedef struct xml_ctx {
    const dxml_doc *doc;
    const char *path;
    char *err;
    unsigned errlen;
    xdev gpus[TOPO_MAX_GPUS], nics[TOPO_MAX_NICS];
    int ngpus, nnics;
    unsigned char *has_net;  /* per element: a <net> below made it a named NIC */
} xml_ctx;

static int is(const dxml_doc *d, int e, const char *name) { return !strcmp(d->elems[e].name, name); }

/* The class attribute as a 24-bit number ("0x030200"; a 16-bit "0x0302" is widened),
 * or -1 when absent or unreadable. */
static long pci_class(const dxml_doc *d, int e)
{
    const char *c = dxml_attr_get(d, e, "class");
    if (!c) return -1;
    char *end;
    long v = strtol(c, &end, 16);
    if (end == c || *end || v < 0) return -1;
    return v <= 0xffff ? v << 8 : v;
}

static int ancestor(const dxml_doc *d, int e, const char *name)
{
    for (e = d->elems[e].parent; e >= 0; e = d->elems[e].parent)
        if (is(d, e, name)) return e;
    return -1;
}

static void busid_of(const dxml_doc *d, int e, char *out, size_t len)
{
    const char *b = is(d, e, "pci") ? dxml_attr_get(d, e, "busid") : NULL;
    discover_busid_norm(out, len, b ? b : "");
}

static int xerr(xml_ctx *x, int e, const char *what, const char *arg)
{
    snprintf(x->err, x->errlen, "%s:%d: %s%s", x->path, x->doc->elems[e].line, what, arg);
    return -1;
}

/* Index of the GPU that element `dev` stands for, added on first sight; -1 on error. */
static int gpu_at(xml_ctx *x, int dev)
{
    char bus[32];
    busid_of(x->doc, dev, bus, sizeof bus);
    for (int g = 0; g < x->ngpus; g++) {
        if (x->gpus[g].elem == dev) return g;
        if (*bus && !strcmp(bus, x->gpus[g].u.gpu.pci_bus_id)) return xerr(x, dev, "a second GPU with bus id ", bus);
    }
    if (x->ngpus == TOPO_MAX_GPUS) return xerr(x, dev, "more GPUs than a node may have: ", STR(TOPO_MAX_GPUS));
    xdev *d = &x->gpus[x->ngpus];
    memset(d, 0, sizeof *d);
    d->elem = d->order = dev;
    memcpy(d->u.gpu.pci_bus_id, bus, sizeof bus);
    return x->ngpus++;
}

/* GPUs: <pci> of a display class, and whatever <pci> (or lone <gpu>) holds a <gpu>.
 * The file knows no marketing name; the compute capability stands in for one. */
static int collect_gpus(xml_ctx *x)
{
    const dxml_doc *d = x->doc;
    for (int e = 0; e < d->nelems; e++) {
        if (is(d, e, "pci") && pci_class(d, e) >> 16 == 0x03) {
            if (gpu_at(x, e) < 0) return -1;
        } else if (is(d, e, "gpu")) {
            int pci = ancestor(d, e, "pci");
            int g = gpu_at(x, pci >= 0 ? pci : e);
            if (g < 0) return -1;
            const char *sm = dxml_attr_get(d, e, "sm");
            if (sm) snprintf(x->gpus[g].u.gpu.name, TOPO_NAME, "sm_%.20s", sm);
        }
    }
    return 0;
}

/* The nearest <pci> with a class at or above e decides the link layer. */
static void link_layer_of(const dxml_doc *d, int e, char *out, size_t len)
{
    for (; e >= 0; e = d->elems[e].parent) {
        long c = is(d, e, "pci") ? pci_class(d, e) : -1;
        if (c < 0) continue;
        snprintf(out, len, "%s", c >> 8 == 0x0207 ? "InfiniBand" : c >> 8 == 0x0200 ? "Ethernet" : "");
        return;
    }
}

static xdev *add_nic(xml_ctx *x, int dev, int order)
{
    if (x->nnics == TOPO_MAX_NICS) {
        xerr(x, order, "more NICs than a node may have: ", STR(TOPO_MAX_NICS));
        return NULL;
    }
    xdev *n = &x->nics[x->nnics++];
    memset(n, 0, sizeof *n);
    n->elem = dev;
    n->order = order;
    busid_of(x->doc, dev, n->u.nic.pci_bus_id, sizeof n->u.nic.pci_bus_id);
    link_layer_of(x->doc, dev, n->u.nic.link_layer, sizeof n->u.nic.link_layer);
    return n;
}

static int add_net(xml_ctx *x, int e)
{
    const dxml_doc *d = x->doc;
    int dev = ancestor(d, e, "pci");
    if (dev < 0) dev = ancestor(d, e, "nic");
    if (dev < 0) dev = e;
    x->has_net[dev] = 1;
    xdev *n = add_nic(x, dev, e);
    if (!n) return -1;
    const char *name = dxml_attr_get(d, e, "name");
    const char *port = dxml_attr_get(d, e, "port");
    const char *speed = dxml_attr_get(d, e, "speed");
    if (name && port && strcmp(port, "1") && strcmp(port, "0"))
        snprintf(n->u.nic.name, sizeof n->u.nic.name, "%.20s:%.8s", name, port);
    else if (name)
        snprintf(n->u.nic.name, sizeof n->u.nic.name, "%s", name);
    if (speed) {
        char *end;
        double mbps = strtod(speed, &end);
        if (end == speed || *end || mbps < 0)
            return xerr(x, e, "<net> speed is not a number of Mb/s: ", speed);
        n->u.nic.gbps = mbps / 1000.0;
    }
    return 0;
}

/* NICs: one per <net>; a NIC-class <pci> or a <nic> without any <net> is one unnamed NIC. */
static int collect_nics(xml_ctx *x)
{
    const dxml_doc *d = x->doc;
    for (int e = 0; e < d->nelems; e++)
        if (is(d, e, "net") && add_net(x, e)) return -1;
    for (int e = 0; e < d->nelems; e++) {
        int dev = -1;
        if (is(d, e, "pci") && pci_class(d, e) >> 16 == 0x02) dev = e;
        if (is(d, e, "nic")) dev = ancestor(d, e, "pci") >= 0 ? ancestor(d, e, "pci") : e;
        if (dev < 0 || x->has_net[dev]) continue;
        x->has_net[dev] = 1; /* a <pci> and its <nic> are one device */
        if (!add_nic(x, dev, e)) return -1;
    }
    return 0;
}

static int by_bus(const void *a, const void *b, int nic)
{
    const xdev *x = a, *y = b;
    int c = strcmp(nic ? x->u.nic.pci_bus_id : x->u.gpu.pci_bus_id,
                   nic ? y->u.nic.pci_bus_id : y->u.gpu.pci_bus_id);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}
static int gpu_cmp(const void *a, const void *b) { return by_bus(a, b, 0); }
static int nic_cmp(const void *a, const void *b) { return by_bus(a, b, 1); }

/* Edges between two elements of the XML tree. */
static int tree_hops(const dxml_doc *d, int a, int b)
{
    int h = 0;
    while (a != b) {
        if (d->elems[a].depth >= d->elems[b].depth) a = d->elems[a].parent;
        else b = d->elems[b].parent;
        h++;
    }
    return h;
}

static int gpu_owning(const xml_ctx *x, int e)
{
    for (; e >= 0; e = x->doc->elems[e].parent)
        for (int g = 0; g < x->ngpus; g++)
            if (x->gpus[g].elem == e) return g;
    return -1;
}

static int is_nvswitch(const dxml_doc *d, const char *bus)
{
    for (int e = 0; e < d->nelems; e++) {
        char b[32];
        if (!is(d, e, "pci") || pci_class(d, e) != NVSWITCH_CLASS) continue;
        busid_of(d, e, b, sizeof b);
        if (!strcmp(b, bus)) return 1;
    }
    return 0;
}

/* NVLink components. NCCL folds every NVSwitch of a node into one switch, since all
 * GPUs behind them reach each other at full speed; vertex ngpus plays that switch. */
static void nvlink_islands(xml_ctx *x, int *comp)
{
    const dxml_doc *d = x->doc;
    int parent[TOPO_MAX_GPUS + 1], links = 0;
    for (int i = 0; i <= x->ngpus; i++) parent[i] = i;
    for (int e = 0; e < d->nelems; e++) {
        if (!is(d, e, "nvlink")) continue;
        links++;
        int g = gpu_owning(x, e);
        const char *t = dxml_attr_get(d, e, "target");
        if (g < 0 || !t) continue;
        char bus[32];
        discover_busid_norm(bus, sizeof bus, t);
        int peer = -1;
        for (int h = 0; h < x->ngpus; h++)
            if (!strcmp(x->gpus[h].u.gpu.pci_bus_id, bus)) peer = h;
        const char *tc = dxml_attr_get(d, e, "tclass");
        long tclass = tc ? strtol(tc, NULL, 16) : -1;
        if (peer < 0 && (tclass == NVSWITCH_CLASS || is_nvswitch(d, bus))) peer = x->ngpus;
        /* Anything else (NVLink to a CPU, as on POWER9) joins no GPUs. */
        if (peer >= 0) discover_uf_join(parent, g, peer);
    }
    for (int g = 0; g < x->ngpus; g++) comp[g] = links ? discover_uf_find(parent, g) : 0;
}

static void fill_node(xml_ctx *x, topo_node *out)
{
    qsort(x->gpus, (size_t)x->ngpus, sizeof x->gpus[0], gpu_cmp);
    qsort(x->nics, (size_t)x->nnics, sizeof x->nics[0], nic_cmp);
    unsigned h = 2166136261u; /* stable per node, so a re-registering node keeps its ids */
    for (const char *c = out->name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    out->ngpus = x->ngpus;
    for (int g = 0; g < x->ngpus; g++) {
        topo_gpu *gpu = &out->gpus[g];
        *gpu = x->gpus[g].u.gpu;
        gpu->index = g;
        snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-xml-%08x-%.31s", h, x->gpus[g].u.gpu.pci_bus_id);
    }
    out->nnics = x->nnics;
    for (int i = 0; i < x->nnics; i++) {
        out->nics[i] = x->nics[i].u.nic;
        if (!out->nics[i].name[0]) snprintf(out->nics[i].name, sizeof out->nics[i].name, "nic%d", i);
    }
    int comp[TOPO_MAX_GPUS];
    nvlink_islands(x, comp);
    discover_name_islands(out, comp);
}

static int pair_rails(xml_ctx *x, topo_node *out)
{
    int *hops = malloc(sizeof(int) * (size_t)(x->ngpus * x->nnics + 1));
    if (!hops) {
        snprintf(x->err, x->errlen, "%s: out of memory", x->path);
        return -1;
    }
    for (int g = 0; g < x->ngpus; g++)
        for (int i = 0; i < x->nnics; i++)
            hops[g * x->nnics + i] = tree_hops(x->doc, x->gpus[g].elem, x->nics[i].elem);
    discover_assign_rails(out, hops);
    free(hops);
    return 0;
}

int discover_nccl_xml(topo_node *out, const char *path, char *err, unsigned errlen)
{
    discover_reset(out);
    if (errlen) err[0] = '\0';
    if (!path || !*path) {
        snprintf(err, errlen, "--topology-xml: no file given");
        return -1;
    }
    dxml_doc doc;
    if (dxml_load(&doc, path, err, errlen)) return -1;
    int rc = -1;
    xml_ctx *x = calloc(1, sizeof *x);
    if (x) x->has_net = calloc((size_t)doc.nelems, 1);
    if (!x || !x->has_net) {
        snprintf(err, errlen, "%s: out of memory", path);
    } else if (!is(&doc, 0, "system")) {
        snprintf(err, errlen, "%s:%d: top-level element is <%s>; an NCCL topology file starts with <system>",
                 path, doc.elems[0].line, doc.elems[0].name);
    } else {
        x->doc = &doc;
        x->path = path;
        x->err = err;
        x->errlen = errlen;
        if (!collect_gpus(x) && !collect_nics(x)) {
            fill_node(x, out);
            rc = pair_rails(x, out);
            if (!rc) discover_nvml_fill(out);
        }
    }
    if (rc) discover_reset(out);
    if (x) free(x->has_net);
    free(x);
    dxml_free(&doc);
    return rc;
}
