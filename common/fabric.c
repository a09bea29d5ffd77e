#include "fabric.h"
#include "errf.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FABRIC_MAX_RANGE 1000000 /* names one bracket may expand to; stops typos like [0-99999999] */
#define FABRIC_MAX_NAMES 1000000 /* names one hostlist may expand to (brackets multiply) */
#define FABRIC_MAX_NAME 255       /* characters in a node or switch name (a host name's limit) */
#define FABRIC_MAX_NODES (1 << 16) /* nodes in a whole fabric: a few KB of ranges must not become GBs */

typedef struct fab_switch {
    char *name;
    int parent, depth, line;
    char *child_list; /* raw Switches= value, resolved after every line is read */
} fab_switch;

typedef struct fab_node {
    char *name;
    int leaf;
} fab_node;

struct fabric {
    fab_switch *sw;
    int nsw, capsw;
    fab_node *slots; /* open-addressing table of node names */
    int nslots, nnodes;
};

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    /* FNV-1a's low bits cluster for names that differ in their last digits
     * (node0001, node0002, ...); mix the high bits down before masking. */
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

static fab_node *node_slot(const fabric *f, const char *name)
{
    if (!f->nslots) return NULL;
    uint32_t i = hash_name(name) & (uint32_t)(f->nslots - 1);
    while (f->slots[i].name && strcmp(f->slots[i].name, name)) i = (i + 1) & (uint32_t)(f->nslots - 1);
    return &f->slots[i];
}

static int node_table_grow(fabric *f)
{
    int n = f->nslots ? f->nslots * 2 : 256;
    fab_node *old = f->slots;
    int oldn = f->nslots;
    f->slots = calloc((size_t)n, sizeof *f->slots);
    if (!f->slots) { f->slots = old; return -1; }
    f->nslots = n;
    for (int i = 0; i < oldn; i++)
        if (old[i].name) *node_slot(f, old[i].name) = old[i];
    free(old);
    return 0;
}

/* ---- hostlists ---------------------------------------------------------------- */

static int expand_one(const char *item, size_t len, fabric_name_fn fn, void *ctx, long *left, char *err,
                      size_t errlen);

/* Expands the first bracket of item[0..len) and recurses on the rest of the name. */
static int expand_bracket(const char *item, size_t len, const char *lb, fabric_name_fn fn, void *ctx, long *left,
                          char *err, size_t errlen)
{
    const char *rb = memchr(lb, ']', len - (size_t)(lb - item));
    if (!rb) {
        atoll_errf(err, errlen, "hostlist \"%.*s\": '[' without ']'", (int)len, item);
        return -1;
    }
    size_t plen = (size_t)(lb - item), slen = len - (size_t)(rb + 1 - item);
    int count = 0;
    for (const char *r = lb + 1;;) {
        const char *comma = memchr(r, ',', (size_t)(rb - r));
        const char *end = comma ? comma : rb;
        const char *dash = memchr(r, '-', (size_t)(end - r));
        const char *hi = dash ? dash + 1 : r;
        size_t lo_len = (size_t)((dash ? dash : end) - r), hi_len = (size_t)(end - hi);
        for (size_t k = 0; k < lo_len; k++)
            if (!isdigit((unsigned char)r[k])) lo_len = 0;
        for (size_t k = 0; k < hi_len; k++)
            if (!isdigit((unsigned char)hi[k])) hi_len = 0;
        if (!lo_len || !hi_len || lo_len > 9 || hi_len > 9) {
            atoll_errf(err, errlen, "hostlist \"%.*s\": bad range \"%.*s\" (expected N or N-M)", (int)len, item,
                 (int)(end - r), r);
            return -1;
        }
        long lo = strtol(r, NULL, 10), hiv = strtol(hi, NULL, 10);
        if (hiv < lo || hiv - lo >= FABRIC_MAX_RANGE) {
            atoll_errf(err, errlen, "hostlist \"%.*s\": range \"%.*s\" is empty or longer than %d names", (int)len,
                 item, (int)(end - r), r, FABRIC_MAX_RANGE);
            return -1;
        }
        int width = (int)lo_len; /* Slurm pads to the width of the lower bound */
        for (long v = lo; v <= hiv; v++) {
            char buf[FABRIC_MAX_NAME + 1];
            int w = snprintf(buf, sizeof buf, "%.*s%0*ld%.*s", (int)plen, item, width, v, (int)slen, rb + 1);
            if (w < 0 || (size_t)w >= sizeof buf) {
                atoll_errf(err, errlen, "hostlist \"%.*s\": a name is longer than %d characters", (int)len, item,
                     FABRIC_MAX_NAME);
                return -1;
            }
            int rc = expand_one(buf, (size_t)w, fn, ctx, left, err, errlen);
            if (rc < 0) return -1;
            count += rc;
        }
        if (!comma) break;
        r = comma + 1;
    }
    return count;
}

static int expand_one(const char *item, size_t len, fabric_name_fn fn, void *ctx, long *left, char *err,
                      size_t errlen)
{
    const char *lb = memchr(item, '[', len);
    if (lb) return expand_bracket(item, len, lb, fn, ctx, left, err, errlen);
    if (memchr(item, ']', len)) {
        atoll_errf(err, errlen, "hostlist \"%.*s\": ']' without '['", (int)len, item);
        return -1;
    }
    char buf[FABRIC_MAX_NAME + 1];
    if (!len || len >= sizeof buf) {
        atoll_errf(err, errlen, "hostlist: a name is empty or longer than %d characters", FABRIC_MAX_NAME);
        return -1;
    }
    if (--*left < 0) {
        atoll_errf(err, errlen, "hostlist expands to more than %d names", FABRIC_MAX_NAMES);
        return -1;
    }
    memcpy(buf, item, len);
    buf[len] = 0;
    if (fn && fn(ctx, buf)) return -1;
    return 1;
}

int fabric_hostlist_expand(const char *list, fabric_name_fn fn, void *ctx, char *err, size_t errlen)
{
    int count = 0, depth = 0;
    long left = FABRIC_MAX_NAMES;
    const char *start = list;
    for (const char *p = list;; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if ((*p == ',' && depth == 0) || !*p) {
            int rc = expand_one(start, (size_t)(p - start), fn, ctx, &left, err, errlen);
            if (rc < 0) return -1;
            count += rc;
            start = p + 1;
        }
        if (!*p) break;
    }
    return count;
}

/* ---- parsing ------------------------------------------------------------------ */

typedef struct {
    fabric *f;
    int leaf;
    const char *fname;
    int line;
    char *err;
    size_t errlen;
} add_ctx;

static int add_node(void *vctx, const char *name)
{
    add_ctx *a = vctx;
    fabric *f = a->f;
    if (f->nnodes >= FABRIC_MAX_NODES) {
        atoll_errf(a->err, a->errlen, "%s:%d: more than %d nodes in the fabric; is a range mistyped?", a->fname, a->line,
             FABRIC_MAX_NODES);
        return -1;
    }
    if ((f->nnodes + 1) * 2 > f->nslots && node_table_grow(f)) {
        atoll_errf(a->err, a->errlen, "%s:%d: out of memory", a->fname, a->line);
        return -1;
    }
    fab_node *s = node_slot(f, name);
    if (s->name) {
        atoll_errf(a->err, a->errlen, "%s:%d: node %s is already under switch %s (a node hangs under one leaf)",
             a->fname, a->line, name, f->sw[s->leaf].name);
        return -1;
    }
    s->name = strdup(name);
    s->leaf = a->leaf;
    if (!s->name) return -1;
    f->nnodes++;
    return 0;
}

static int add_switch(fabric *f, const char *name, int line)
{
    if (f->nsw == f->capsw) {
        int cap = f->capsw ? f->capsw * 2 : 16;
        fab_switch *s = realloc(f->sw, (size_t)cap * sizeof *s);
        if (!s) return -1;
        f->sw = s;
        f->capsw = cap;
    }
    fab_switch *s = &f->sw[f->nsw];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    s->parent = -1;
    s->line = line;
    if (!s->name) return -1;
    return f->nsw++;
}

/* One line: "SwitchName=X [Nodes=...] [Switches=...] [LinkSpeed=N] [Level=N]". */
static int parse_line(fabric *f, char *line, const char *fname, int lineno, char *err, size_t errlen)
{
    char *name = NULL, *nodes = NULL, *switches = NULL;
    int level = 0;
    for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            atoll_errf(err, errlen, "%s:%d: \"%s\" is not KEY=VALUE", fname, lineno, tok);
            return -1;
        }
        *eq = 0;
        if (!strcasecmp(tok, "SwitchName")) name = eq + 1;
        else if (!strcasecmp(tok, "Nodes")) nodes = eq + 1;
        else if (!strcasecmp(tok, "Switches")) switches = eq + 1;
        else if (!strcasecmp(tok, "LinkSpeed")) continue;
        else if (!strcasecmp(tok, "Level")) level = 1;
        else {
            atoll_errf(err, errlen, "%s:%d: unknown key %s (accepted: SwitchName, Nodes, Switches, LinkSpeed, Level)",
                 fname, lineno, tok);
            return -1;
        }
    }
    /* `scontrol show topology` (Level= present) lists under an upper switch every
     * node below it; the leaves' lines say where each node hangs. */
    if (level && switches) nodes = NULL;
    if (!name) {
        atoll_errf(err, errlen, "%s:%d: a line needs SwitchName=NAME", fname, lineno);
        return -1;
    }
    if (fabric_switch_index(f, name) >= 0) {
        atoll_errf(err, errlen, "%s:%d: switch %s is defined twice", fname, lineno, name);
        return -1;
    }
    int sw = add_switch(f, name, lineno);
    if (sw < 0) {
        atoll_errf(err, errlen, "%s:%d: out of memory", fname, lineno);
        return -1;
    }
    if (switches && !(f->sw[sw].child_list = strdup(switches))) return -1;
    if (nodes) {
        add_ctx a = { f, sw, fname, lineno, err, errlen };
        char sub[256] = "";
        if (fabric_hostlist_expand(nodes, add_node, &a, sub, sizeof sub) < 0) {
            if (sub[0]) atoll_errf(err, errlen, "%s:%d: Nodes=%s: %s", fname, lineno, nodes, sub);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    fabric *f;
    int parent;
    const char *fname;
    int line;
    char *err;
    size_t errlen;
} link_ctx;

static int link_child(void *vctx, const char *name)
{
    link_ctx *l = vctx;
    int c = fabric_switch_index(l->f, name);
    if (c < 0) {
        atoll_errf(l->err, l->errlen, "%s:%d: Switches= names %s, which no SwitchName= line defines", l->fname, l->line,
             name);
        return -1;
    }
    if (l->f->sw[c].parent >= 0) {
        atoll_errf(l->err, l->errlen, "%s:%d: switch %s already has parent %s (a switch has one parent)", l->fname,
             l->line, name, l->f->sw[l->f->sw[c].parent].name);
        return -1;
    }
    l->f->sw[c].parent = l->parent;
    return 0;
}

/* Resolves Switches= lists, then depths; a parent chain longer than the switch
 * count means a cycle. */
static int link_tree(fabric *f, const char *fname, char *err, size_t errlen)
{
    for (int s = 0; s < f->nsw; s++) {
        if (!f->sw[s].child_list) continue;
        link_ctx l = { f, s, fname, f->sw[s].line, err, errlen };
        char sub[256] = "";
        if (fabric_hostlist_expand(f->sw[s].child_list, link_child, &l, sub, sizeof sub) < 0) {
            if (sub[0]) atoll_errf(err, errlen, "%s:%d: Switches=%s: %s", fname, f->sw[s].line, f->sw[s].child_list, sub);
            return -1;
        }
    }
    for (int s = 0; s < f->nsw; s++) {
        int d = 0;
        for (int p = f->sw[s].parent; p >= 0; p = f->sw[p].parent)
            if (++d > f->nsw) {
                atoll_errf(err, errlen, "%s:%d: switch %s is its own ancestor (cycle in Switches=)", fname, f->sw[s].line,
                     f->sw[s].name);
                return -1;
            }
        f->sw[s].depth = d;
    }
    return 0;
}

int fabric_parse(fabric **out, const char *text, const char *fname, char *err, size_t errlen)
{
    *out = NULL;
    fabric *f = calloc(1, sizeof *f);
    char *copy = strdup(text);
    if (!f || !copy) {
        free(f);
        free(copy);
        atoll_errf(err, errlen, "%s: out of memory", fname);
        return -1;
    }
    int lineno = 0, rc = 0;
    for (char *line = copy, *next; line && !rc; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (*p) rc = parse_line(f, p, fname, lineno, err, errlen);
    }
    free(copy);
    if (!rc && f->nsw == 0) {
        atoll_errf(err, errlen, "%s: no SwitchName= lines (expected a Slurm topology/tree topology.conf)", fname);
        rc = -1;
    }
    if (!rc) rc = link_tree(f, fname, err, errlen);
    if (rc) {
        fabric_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

char *fabric_read_text(FILE *fp, const char *name, char *err, size_t errlen)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len - 1, fp)) > 0;) {
        len += r;
        if (cap - len < 2) {
            char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    if (!buf) {
        atoll_errf(err, errlen, "%s: out of memory or larger than 64 MiB", name);
        return NULL;
    }
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        free(buf);
        atoll_errf(err, errlen, "%s: contains a NUL byte (not a text topology.conf)", name);
        return NULL;
    }
    return buf;
}

int fabric_load(fabric **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        atoll_errf(err, errlen, "%s: cannot open (--fabric expects a Slurm topology.conf)", path);
        return -1;
    }
    char *buf = fabric_read_text(fp, path, err, errlen);
    fclose(fp);
    if (!buf) return -1;
    int rc = fabric_parse(out, buf, path, err, errlen);
    free(buf);
    return rc;
}

void fabric_free(fabric *f)
{
    if (!f) return;
    for (int i = 0; i < f->nsw; i++) {
        free(f->sw[i].name);
        free(f->sw[i].child_list);
    }
    for (int i = 0; i < f->nslots; i++) free(f->slots[i].name);
    free(f->sw);
    free(f->slots);
    free(f);
}

/* ---- queries ------------------------------------------------------------------ */

int fabric_num_switches(const fabric *f) { return f->nsw; }
int fabric_num_nodes(const fabric *f) { return f->nnodes; }

const char *fabric_switch_name(const fabric *f, int sw)
{
    return sw >= 0 && sw < f->nsw ? f->sw[sw].name : NULL;
}

int fabric_switch_index(const fabric *f, const char *name)
{
    for (int i = 0; i < f->nsw; i++)
        if (!strcmp(f->sw[i].name, name)) return i;
    return -1;
}

int fabric_parent(const fabric *f, int sw) { return sw >= 0 && sw < f->nsw ? f->sw[sw].parent : -1; }
int fabric_depth(const fabric *f, int sw) { return sw >= 0 && sw < f->nsw ? f->sw[sw].depth : -1; }

int fabric_leaf_of(const fabric *f, const char *node)
{
    fab_node *s = node_slot(f, node);
    return s && s->name ? s->leaf : -1;
}

int fabric_lca(const fabric *f, int a, int b)
{
    if (a < 0 || b < 0 || a >= f->nsw || b >= f->nsw) return -1;
    while (f->sw[a].depth > f->sw[b].depth) a = f->sw[a].parent;
    while (f->sw[b].depth > f->sw[a].depth) b = f->sw[b].parent;
    while (a != b && a >= 0 && b >= 0) {
        a = f->sw[a].parent;
        b = f->sw[b].parent;
    }
    return a == b ? a : -1;
}

int fabric_distance(const fabric *f, int a, int b)
{
    int l = fabric_lca(f, a, b);
    if (l < 0) return -1;
    return (f->sw[a].depth - f->sw[l].depth) + (f->sw[b].depth - f->sw[l].depth);
}

int fabric_apply(const fabric *f, topo_node *nodes, int n)
{
    int missing = 0;
    for (int i = 0; i < n; i++) {
        int leaf = fabric_leaf_of(f, nodes[i].name);
        if (leaf < 0) {
            nodes[i].leaf[0] = 0;
            missing++;
        } else {
            snprintf(nodes[i].leaf, sizeof nodes[i].leaf, "%s", f->sw[leaf].name);
        }
    }
    return missing;
}
