/* discover_nccl_xml on the published Azure NDv5 (H100) and NDv4 (A100) topology files.
 * The expected pairing is derived here from the file text by a separate, line-based
 * scan (each <pci> on its own line, as in these files), not from the reader under test:
 * a GPU must use a NIC that sits under the same PCIe switch. Each file is also read
 * with its NICs' bus ids permuted, where pairing by index alone would be wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "discover.h"

#define MAXDEV 64

static char later[4][1024];
static int nlater;
static void unlink_later(const char *p) { if (nlater < 4) snprintf(later[nlater++], sizeof later[0], "%s", p); }

typedef struct {
    char bus[32], parent[32];
    long cls;
} scan_dev;

static int scan_file(const char *path, scan_dev *devs)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024], stack[8][32];
    int depth = 0, n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "</pci>")) { depth--; continue; }
        const char *p = strstr(line, "<pci ");
        if (!p) continue;
        char bus[32] = "";
        long cls = -1;
        const char *b = strstr(p, "busid=\""), *c = strstr(p, "class=\"");
        if (b) sscanf(b + 7, "%31[^\"]", bus);
        if (c) cls = strtol(c + 7, NULL, 16);
        if (strstr(p, "/>")) {
            if (n < MAXDEV) {
                snprintf(devs[n].bus, sizeof devs[n].bus, "%s", bus);
                snprintf(devs[n].parent, sizeof devs[n].parent, "%s", depth ? stack[depth - 1] : "");
                devs[n++].cls = cls;
            }
        } else if (depth < 8) {
            snprintf(stack[depth++], sizeof stack[0], "%s", bus);
        }
    }
    fclose(f);
    return n;
}

static const scan_dev *find(const scan_dev *devs, int n, const char *bus)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(devs[i].bus, bus)) return &devs[i];
    return NULL;
}

static int by_str(const void *a, const void *b) { return strcmp(a, b); }

/* A copy of `src` in which the NICs' bus ids are swapped so that their sorted order is
 * reversed (the k-th lowest takes the k-th highest's id). The PCI tree is unchanged, so
 * the right pairing is unchanged in terms of switches, but not in terms of indices: a
 * reader pairing GPU i with NIC i would now cross switches. */
static int write_reversed(const char *src, const char *dst, const scan_dev *devs, int ndev)
{
    char ids[MAXDEV][32];
    int n = 0;
    for (int i = 0; i < ndev; i++)
        if (devs[i].cls == 0x020700) memcpy(ids[n++], devs[i].bus, sizeof ids[0]);
    qsort(ids, (size_t)n, sizeof ids[0], by_str);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (!in || !out) return -1;
    char line[1024];
    while (fgets(line, sizeof line, in)) {
        char *b = strstr(line, "busid=\"");
        for (int k = 0; b && strstr(line, "0x020700") && k < n; k++)
            if (!strncmp(b + 7, ids[k], strlen(ids[k])) && b[7 + strlen(ids[k])] == '"') {
                memcpy(b + 7, ids[n - 1 - k], strlen(ids[k]));
                break;
            }
        fputs(line, out);
    }
    fclose(in);
    fclose(out);
    return 0;
}

static void check_file(const char *dir, const char *file, int gpus_per_switch, int reversed)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    scan_dev devs[MAXDEV];
    int ndev = scan_file(path, devs);
    if (reversed) {
        const char *tmp = getenv("TMPDIR");
        char copy[1024];
        snprintf(copy, sizeof copy, "%s/reversed-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), file);
        CHECK(ndev > 0 && write_reversed(path, copy, devs, ndev) == 0, "%s: cannot write %s", file, copy);
        snprintf(path, sizeof path, "%s", copy);
        ndev = scan_file(path, devs);
        unlink_later(path);
    }
    CHECK(ndev > 0, "%s: cannot scan", path);
    int scan_gpus = 0, scan_nics = 0;
    for (int i = 0; i < ndev; i++) {
        scan_gpus += devs[i].cls == 0x030200;
        scan_nics += devs[i].cls == 0x020700;
    }
    CHECK(scan_gpus == 8 && scan_nics == 8, "%s: scan found %d GPUs, %d NICs", file, scan_gpus, scan_nics);

    static topo_node node;
    memset(&node, 0x5a, sizeof node); /* garbage the reader must overwrite */
    snprintf(node.name, sizeof node.name, "azure-%s", file);
    char err[256] = "";
    int rc = discover_nccl_xml(&node, path, err, sizeof err);
    CHECK(rc == 0, "%s: rc %d: %s", file, rc, err);
    CHECK(!strncmp(node.name, "azure-", 6), "%s: node name was cleared: %s", file, node.name);
    CHECK(node.ngpus == 8, "%s: %d GPUs", file, node.ngpus);
    CHECK(node.nnics == 8, "%s: %d NICs", file, node.nnics);
    if (rc || node.ngpus != 8 || node.nnics != 8) return;

    int rail_users[8] = {0};
    for (int g = 0; g < 8; g++) {
        const topo_gpu *gpu = &node.gpus[g];
        const scan_dev *sg = find(devs, ndev, gpu->pci_bus_id);
        CHECK(gpu->index == g, "%s: GPU %d has index %d", file, g, gpu->index);
        CHECK(sg && sg->cls == 0x030200, "%s: GPU %d bus %s is not a GPU in the file", file, g, gpu->pci_bus_id);
        if (g) CHECK(strcmp(node.gpus[g - 1].pci_bus_id, gpu->pci_bus_id) < 0,
                     "%s: GPUs not in bus order at %d", file, g);
        CHECK(!strcmp(gpu->island, node.name), "%s: GPU %d island '%s', want the node's", file, g, gpu->island);
        CHECK(gpu->rail >= 0 && gpu->rail < 8, "%s: GPU %d rail %d", file, g, gpu->rail);
        if (!sg || gpu->rail < 0 || gpu->rail >= 8) continue;
        rail_users[gpu->rail]++;
        const topo_nic *nic = &node.nics[gpu->rail];
        const scan_dev *sn = find(devs, ndev, nic->pci_bus_id);
        CHECK(sn && sn->cls == 0x020700, "%s: NIC %s is not a NIC in the file", file, nic->pci_bus_id);
        CHECK(sn && !strcmp(sn->parent, sg->parent),
              "%s: GPU %s (switch %s) paired with NIC %s (switch %s)", file, gpu->pci_bus_id,
              sg->parent, nic->pci_bus_id, sn ? sn->parent : "?");
        /* These machines are rail-aligned: bus order lists GPUs and NICs switch by switch. */
        if (!reversed) CHECK(gpu->rail == g, "%s: GPU %d on rail %d", file, g, gpu->rail);
    }
    for (int r = 0; r < 8; r++) {
        CHECK(rail_users[r] == 1, "%s: rail %d used by %d GPUs", file, r, rail_users[r]);
        CHECK(node.nics[r].rail == r, "%s: NIC %d rail %d", file, r, node.nics[r].rail);
        CHECK(!strcmp(node.nics[r].link_layer, "InfiniBand"), "%s: NIC %d link '%s'", file, r,
              node.nics[r].link_layer);
        CHECK(node.nics[r].name[0] != '\0', "%s: NIC %d unnamed", file, r);
    }
    /* Per switch: as many GPUs as the file's layout says, using that many distinct NICs. */
    for (int i = 0; i < ndev; i++) {
        if (devs[i].cls != 0x030200) continue;
        int gpus = 0, nics = 0;
        for (int j = 0; j < ndev; j++)
            if (!strcmp(devs[j].parent, devs[i].parent)) {
                gpus += devs[j].cls == 0x030200;
                nics += devs[j].cls == 0x020700;
            }
        CHECK(gpus == gpus_per_switch && nics == gpus_per_switch, "%s: switch %s holds %d GPUs, %d NICs",
              file, devs[i].parent, gpus, nics);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOPOLOGIES_DIR\n", argv[0]);
        return 2;
    }
    check_file(argv[1], "azure-ndv5-h100.xml", 1, 0);
    check_file(argv[1], "azure-ndv4-a100.xml", 2, 0);
    check_file(argv[1], "azure-ndv5-h100.xml", 1, 1);
    check_file(argv[1], "azure-ndv4-a100.xml", 2, 1);
    for (int i = 0; i < nlater; i++) unlink(later[i]);
    return check_summary(argv[0]);
}
