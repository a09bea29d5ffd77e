/* discover_topo: the rules every discovery source shares — bus-id spelling, rail
 * pairing by PCI distance, island naming from NVLink components. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "discover_internal.h"

void discover_reset(topo_node *n)
{
    char name[TOPO_NAME], leaf[TOPO_NAME];
    memcpy(name, n->name, sizeof name);
    memcpy(leaf, n->leaf, sizeof leaf);
    memset(n, 0, sizeof *n);
    memcpy(n->name, name, sizeof name);
    memcpy(n->leaf, leaf, sizeof leaf);
    n->name[TOPO_NAME - 1] = n->leaf[TOPO_NAME - 1] = '\0';
    n->state = NODE_ALIVE;
}

/* Reads 1..maxdigits hex digits followed by `sep`; NULL when the text is not that. */
static const char *hex_field(const char *s, int maxdigits, char sep, unsigned *v)
{
    int k = 0;
    *v = 0;
    for (; k < maxdigits && isxdigit((unsigned char)s[k]); k++)
        *v = *v * 16 + (unsigned)(isdigit((unsigned char)s[k]) ? s[k] - '0' : tolower((unsigned char)s[k]) - 'a' + 10);
    return k && s[k] == sep ? s + k + (sep != '\0') : NULL;
}

void discover_busid_norm(char *out, size_t outlen, const char *in)
{
    unsigned dom, bus, dev, fn;
    const char *s = hex_field(in, 8, ':', &dom);
    if (s) s = hex_field(s, 2, ':', &bus);
    if (s) s = hex_field(s, 2, '.', &dev);
    if (s) s = hex_field(s, 1, '\0', &fn);
    if (s && dev <= 0x1f && fn <= 7) {
        /* NVML pads the domain to 8 digits, sysfs to 4; VMD domains (0x10000 and up)
         * keep their 5 digits in sysfs, which %04x also gives. */
        snprintf(out, outlen, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
        return;
    }
    size_t i = 0;
    for (; in[i] && i + 1 < outlen; i++) out[i] = (char)tolower((unsigned char)in[i]);
    if (outlen) out[i] = '\0';
}

void discover_assign_rails(topo_node *n, const int *hops)
{
    int users[TOPO_MAX_NICS] = {0};
    for (int i = 0; i < n->nnics; i++) n->nics[i].rail = i;
    for (int g = 0; g < n->ngpus; g++) {
        int best = INT_MAX;
        for (int i = 0; i < n->nnics; i++) {
            int h = hops[g * n->nnics + i];
            if (h >= 0 && h < best) best = h;
        }
        /* best == INT_MAX: no distance known, so every NIC is "nearest" alike.
         * Among the nearest, the least used (a free one first), then the lowest index. */
        int pick = -1;
        for (int i = 0; i < n->nnics; i++) {
            int h = hops[g * n->nnics + i];
            if ((h < 0 ? INT_MAX : h) == best && (pick < 0 || users[i] < users[pick])) pick = i;
        }
        if (pick >= 0) users[pick]++;
        n->gpus[g].rail = pick;
    }
}

int discover_uf_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

void discover_uf_join(int *parent, int a, int b)
{
    a = discover_uf_find(parent, a);
    b = discover_uf_find(parent, b);
    if (a != b) parent[a < b ? b : a] = a < b ? a : b;
}

void discover_name_islands(topo_node *n, const int *comp)
{
    int ids[TOPO_MAX_GPUS], nids = 0;
    for (int g = 0; g < n->ngpus; g++) {
        int k = 0;
        while (k < nids && ids[k] != comp[g]) k++;
        if (k == nids) ids[nids++] = comp[g];
    }
    for (int g = 0; g < n->ngpus; g++) {
        char *isl = n->gpus[g].island;
        if (nids == 1) {
            snprintf(isl, TOPO_NAME, "%s", n->name);
            continue;
        }
        int k = 0;
        while (ids[k] != comp[g]) k++;
        /* Keep the "#k" suffix even when a long node name has to be shortened,
         * otherwise two islands of one node could end up with the same name. */
        char suffix[16];
        int slen = snprintf(suffix, sizeof suffix, "#%d", k);
        int room = TOPO_NAME - 1 - slen;
        snprintf(isl, TOPO_NAME, "%.*s%s", room, n->name, suffix);
    }
}
