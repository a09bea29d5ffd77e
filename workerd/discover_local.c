/* discover_local: this machine's hardware — GPUs from NVML, NICs from sysfs — with
 * each GPU paired to the NIC nearest it in the PCI tree as sysfs shows it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"
#include "discover_internal.h"

static int pair_rails(topo_node *n, const char *sysfs_root, char (*nicpath)[DISCOVER_PATH])
{
    int *hops = malloc(sizeof(int) * (size_t)(n->ngpus * n->nnics + 1));
    if (!hops) return -1;
    for (int g = 0; g < n->ngpus; g++) {
        char link[DISCOVER_PATH + 64], gpath[DISCOVER_PATH];
        snprintf(link, sizeof link, "%s/bus/pci/devices/%s", sysfs_root, n->gpus[g].pci_bus_id);
        discover_pci_path(sysfs_root, link, gpath, sizeof gpath);
        for (int i = 0; i < n->nnics; i++) hops[g * n->nnics + i] = discover_pci_hops(gpath, nicpath[i]);
    }
    discover_assign_rails(n, hops);
    free(hops);
    return 0;
}

int discover_local(topo_node *out, const char *sysfs_root, char *err, unsigned errlen)
{
    discover_reset(out);
    if (!sysfs_root || !*sysfs_root) sysfs_root = "/sys";
    char note[256] = "";
    char (*nicpath)[DISCOVER_PATH] = calloc(TOPO_MAX_NICS, sizeof *nicpath);
    int rc = -1;
    if (!nicpath)
        snprintf(err, errlen, "hardware discovery: out of memory");
    else if (!discover_nvml_gpus(out, note, sizeof note, err, errlen) &&
             !discover_ib_nics(out, sysfs_root, nicpath, err, errlen)) {
        rc = pair_rails(out, sysfs_root, nicpath);
        if (rc) snprintf(err, errlen, "hardware discovery: out of memory");
    }
    free(nicpath);
    if (rc) {
        discover_reset(out);
        return -1;
    }
    snprintf(err, errlen, "%s", note);
    return 0;
}
