/* discover_ib: RDMA NICs from sysfs (<root>/class/infiniband/<dev>/), and PCI-tree
 * distances between sysfs devices, used to pair GPUs with their nearest NIC.
 *
 * Per device: ports/1/rate ("400 Gb/sec (4X NDR)"), ports/1/link_layer ("InfiniBand"
 * or "Ethernet" for RoCE), and `device`, a link to the PCI function. Software RDMA
 * devices (rxe, siw) have no PCI function and are not rails, so they are skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover_internal.h"

typedef struct ib_dev {
    topo_nic nic;
    char path[DISCOVER_PATH];
} ib_dev;

/* First line of a small sysfs file, without its newline; -1 when unreadable. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)len, f);
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

void discover_pci_path(const char *sysfs_root, const char *link, char *out, size_t len)
{
    char root[PATH_MAX], dev[PATH_MAX];
    out[0] = '\0';
    if (!realpath(sysfs_root, root) || !realpath(link, dev)) return;
    size_t rl = strlen(root);
    static const char DEVICES[] = "/devices/";
    if (strncmp(dev, root, rl) || strncmp(dev + rl, DEVICES, sizeof DEVICES - 1)) return;
    snprintf(out, len, "%s", dev + rl + sizeof DEVICES - 1);
}

static int components(const char *p) { int n = 1; for (; *p; p++) n += *p == '/'; return n; }

int discover_pci_hops(const char *a, const char *b)
{
    if (!*a || !*b) return -1;
    for (;;) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la)) break;
        if (!a[la] || !b[lb]) {
            a += la;
            b += lb;
            break;
        }
        a += la + 1;
        b += lb + 1;
    }
    /* What is left of each path after the shared ancestors, counted in edges. */
    return (*a ? components(*a == '/' ? a + 1 : a) : 0) + (*b ? components(*b == '/' ? b + 1 : b) : 0);
}

static int parse_rate(const char *file, const char *text, double *gbps, char *err, unsigned errlen)
{
    char *end;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    if (end == text || v < 0 || strncmp(end, "Gb/sec", 6)) {
        snprintf(err, errlen, "%s: rate '%s' is not '<N> Gb/sec (...)'", file, text);
        return -1;
    }
    *gbps = v;
    return 0;
}

/* 1: added, 0: skipped (no PCI function), -1: error. */
static int read_dev(const char *root, const char *name, ib_dev *d, char *err, unsigned errlen)
{
    char dir[DISCOVER_PATH], file[DISCOVER_PATH + 32], dev[PATH_MAX], line[128];
    snprintf(dir, sizeof dir, "%s/class/infiniband/%s", root, name);
    snprintf(file, sizeof file, "%s/device", dir);
    if (!realpath(file, dev)) return 0;
    memset(d, 0, sizeof *d);
    snprintf(d->nic.name, sizeof d->nic.name, "%.31s", name);
    const char *base = strrchr(dev, '/');
    discover_busid_norm(d->nic.pci_bus_id, sizeof d->nic.pci_bus_id, base ? base + 1 : dev);
    discover_pci_path(root, file, d->path, sizeof d->path);
    snprintf(file, sizeof file, "%s/ports/1/rate", dir);
    if (read_line(file, line, sizeof line)) {
        snprintf(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        return -1;
    }
    if (parse_rate(file, line, &d->nic.gbps, err, errlen)) return -1;
    snprintf(file, sizeof file, "%s/ports/1/link_layer", dir);
    if (!read_line(file, line, sizeof line)) snprintf(d->nic.link_layer, sizeof d->nic.link_layer, "%.15s", line);
    return 1;
}

static int by_bus(const void *a, const void *b)
{
    const ib_dev *x = a, *y = b;
    int c = strcmp(x->nic.pci_bus_id, y->nic.pci_bus_id);
    return c ? c : strcmp(x->nic.name, y->nic.name);
}

int discover_ib_nics(topo_node *n, const char *sysfs_root, char (*pcipath)[DISCOVER_PATH],
                     char *err, unsigned errlen)
{
    char dir[DISCOVER_PATH];
    snprintf(dir, sizeof dir, "%s/class/infiniband", sysfs_root);
    DIR *dp = opendir(dir);
    if (!dp) {
        if (errno == ENOENT) return 0; /* no RDMA driver loaded: no NICs to use */
        snprintf(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
        return -1;
    }
    ib_dev *devs = calloc(TOPO_MAX_NICS, sizeof *devs);
    int count = 0, rc = devs ? 0 : -1;
    if (!devs) snprintf(err, errlen, "%s: out of memory", dir);
    struct dirent *de;
    while (!rc && (de = readdir(dp))) {
        if (de->d_name[0] == '.') continue;
        if (count == TOPO_MAX_NICS) {
            snprintf(err, errlen, "%s: more than %d RDMA devices; a node may have at most that many", dir,
                     TOPO_MAX_NICS);
            rc = -1;
            break;
        }
        int r = read_dev(sysfs_root, de->d_name, &devs[count], err, errlen);
        if (r < 0) rc = -1;
        else count += r;
    }
    closedir(dp);
    if (!rc) {
        qsort(devs, (size_t)count, sizeof *devs, by_bus);
        for (int i = 0; i < count; i++) {
            n->nics[i] = devs[i].nic;
            n->nics[i].rail = i;
            memcpy(pcipath[i], devs[i].path, DISCOVER_PATH);
        }
        n->nnics = count;
    }
    free(devs);
    return rc;
}
