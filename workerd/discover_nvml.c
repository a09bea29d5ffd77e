/* discover_nvml: GPUs of this machine through NVML, loaded with dlopen so that atoll
 * needs no driver to build and runs (with zero GPUs) on machines without one.
 *
 * Islands: a GPU whose fabric manager reports a multi-node NVLink clique (NVL72) takes
 * the clique's name, shared by every node of the domain. Otherwise NVLink peers seen
 * from NVML (GPU-GPU links and links into NVSwitches) form the node's islands; when no
 * GPU reports any active link (old driver, or links not visible) the node is one island.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "discover_internal.h"
#include "discover_nvml.h"

typedef struct nvml {
    void *lib;
    dnvml_return (*init)(void);
    dnvml_return (*shutdown)(void);
    const char *(*error_string)(dnvml_return);
    dnvml_return (*count)(unsigned *);
    dnvml_return (*handle)(unsigned, dnvml_device *);
    dnvml_return (*uuid)(dnvml_device, char *, unsigned);
    dnvml_return (*name)(dnvml_device, char *, unsigned);
    dnvml_return (*memory)(dnvml_device, dnvml_memory *);
    dnvml_return (*pci)(dnvml_device, dnvml_pci_info *);
    dnvml_return (*fabric_v)(dnvml_device, dnvml_fabric_info_v2 *);
    dnvml_return (*fabric)(dnvml_device, dnvml_fabric_info *);
    dnvml_return (*link_state)(dnvml_device, unsigned, int *);
    dnvml_return (*link_pci)(dnvml_device, unsigned, dnvml_pci_info *);
    dnvml_return (*link_type)(dnvml_device, unsigned, int *);
} nvml;

/* First of the given symbol versions the library has, or NULL. */
static void *sym(void *lib, const char *a, const char *b, const char *c)
{
    void *p = dlsym(lib, a);
    if (!p && b) p = dlsym(lib, b);
    if (!p && c) p = dlsym(lib, c);
    return p;
}

static const char *why(const nvml *m, dnvml_return r)
{
    return m->error_string ? m->error_string(r) : "NVML error";
}

static int load(nvml *m, char *note, unsigned notelen, char *err, unsigned errlen)
{
    memset(m, 0, sizeof *m);
    m->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) {
        const char *e = dlerror();
        snprintf(note, notelen, "no GPUs: NVML not loaded (%s)", e ? e : "libnvidia-ml.so.1 not found");
        return 1;
    }
    *(void **)&m->init = sym(m->lib, "nvmlInit_v2", "nvmlInit", NULL);
    *(void **)&m->shutdown = sym(m->lib, "nvmlShutdown", NULL, NULL);
    *(void **)&m->error_string = sym(m->lib, "nvmlErrorString", NULL, NULL);
    *(void **)&m->count = sym(m->lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", NULL);
    *(void **)&m->handle = sym(m->lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex", NULL);
    *(void **)&m->uuid = sym(m->lib, "nvmlDeviceGetUUID", NULL, NULL);
    *(void **)&m->name = sym(m->lib, "nvmlDeviceGetName", NULL, NULL);
    *(void **)&m->memory = sym(m->lib, "nvmlDeviceGetMemoryInfo", NULL, NULL);
    *(void **)&m->pci = sym(m->lib, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", NULL);
    *(void **)&m->fabric_v = sym(m->lib, "nvmlDeviceGetGpuFabricInfoV", NULL, NULL);
    *(void **)&m->fabric = sym(m->lib, "nvmlDeviceGetGpuFabricInfo", NULL, NULL);
    *(void **)&m->link_state = sym(m->lib, "nvmlDeviceGetNvLinkState", NULL, NULL);
    *(void **)&m->link_pci = sym(m->lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", NULL, NULL);
    *(void **)&m->link_type = sym(m->lib, "nvmlDeviceGetNvLinkRemoteDeviceType", NULL, NULL);
    if (!m->init || !m->shutdown || !m->count || !m->handle || !m->uuid || !m->name || !m->memory || !m->pci) {
        snprintf(err, errlen, "libnvidia-ml.so.1 lacks the calls of driver r450 or later; update the driver");
        return -1;
    }
    dnvml_return r = m->init();
    if (r == DNVML_ERROR_DRIVER_NOT_LOADED) {
        snprintf(note, notelen, "no GPUs: NVML found no NVIDIA driver loaded");
        return 1;
    }
    if (r != DNVML_SUCCESS) {
        snprintf(err, errlen, "libnvidia-ml.so.1: nvmlInit failed: %s", why(m, r));
        return -1;
    }
    return 0;
}

static int device_info(nvml *m, unsigned i, dnvml_device d, topo_gpu *gpu, char *err, unsigned errlen)
{
    dnvml_memory mem;
    dnvml_pci_info pci;
    char buf[96];
    const char *call = "nvmlDeviceGetUUID";
    dnvml_return r = m->uuid(d, buf, sizeof buf);
    buf[sizeof buf - 1] = '\0';
    if (!r) snprintf(gpu->uuid, sizeof gpu->uuid, "%.*s", (int)sizeof gpu->uuid - 1, buf);
    if (!r) { call = "nvmlDeviceGetName"; r = m->name(d, buf, sizeof buf); }
    buf[sizeof buf - 1] = '\0';
    if (!r) snprintf(gpu->name, sizeof gpu->name, "%.*s", (int)sizeof gpu->name - 1, buf);
    if (!r) { call = "nvmlDeviceGetMemoryInfo"; r = m->memory(d, &mem); }
    if (!r) gpu->memory_bytes = mem.total;
    if (!r) { call = "nvmlDeviceGetPciInfo"; r = m->pci(d, &pci); }
    pci.bus_id[sizeof pci.bus_id - 1] = '\0';
    if (!r) discover_busid_norm(gpu->pci_bus_id, sizeof gpu->pci_bus_id, pci.bus_id);
    if (r) snprintf(err, errlen, "NVML %s(GPU %u) failed: %s", call, i, why(m, r));
    gpu->index = (int)i;
    gpu->rail = -1;
    return r ? -1 : 0;
}

/* Multi-node clique name, or "" when this GPU is not part of a registered fabric.
 * Single-node NVSwitch systems report a completed fabric with an all-zero cluster
 * UUID; those are left to the NVLink peer walk. */
static void fabric_island(nvml *m, dnvml_device d, char *out, size_t len)
{
    unsigned char uuid[DNVML_FABRIC_UUID_LEN] = {0};
    unsigned clique = 0;
    int ok = 0, answered = 0;
    out[0] = '\0';
    if (m->fabric_v) {
        dnvml_fabric_info_v2 fi = { .version = DNVML_FABRIC_INFO_V2 };
        answered = !m->fabric_v(d, &fi);
        ok = answered && fi.state == DNVML_FABRIC_STATE_COMPLETED && fi.status == DNVML_SUCCESS;
        memcpy(uuid, fi.cluster_uuid, sizeof uuid);
        clique = fi.clique_id;
    }
    /* r535 drivers have only the unversioned call; some refuse the versioned struct. */
    if (!answered && m->fabric) {
        dnvml_fabric_info fi;
        memset(&fi, 0, sizeof fi);
        ok = !m->fabric(d, &fi) && fi.state == DNVML_FABRIC_STATE_COMPLETED && fi.status == DNVML_SUCCESS;
        memcpy(uuid, fi.cluster_uuid, sizeof uuid);
        clique = fi.clique_id;
    }
    int zero = 1;
    for (int k = 0; k < DNVML_FABRIC_UUID_LEN; k++) zero &= uuid[k] == 0;
    if (!ok || zero) return;
    const unsigned char *u = uuid;
    snprintf(out, len, "nvl-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15], clique);
}

/* Joins g with the peers of its active NVLinks; vertex `sw` stands for the node's
 * NVSwitches. Returns how many active links g has. */
static int nvlink_peers(nvml *m, dnvml_device d, const topo_node *n, int g, int sw, int *parent)
{
    int active_links = 0;
    if (!m->link_state) return 0;
    for (unsigned l = 0; l < DNVML_NVLINK_MAX_LINKS; l++) {
        int active = 0, type = -1;
        if (m->link_state(d, l, &active) || active != DNVML_FEATURE_ENABLED) continue;
        active_links++;
        if (m->link_type && m->link_type(d, l, &type)) type = -1;
        if (type == DNVML_NVLINK_DEVICE_SWITCH) {
            discover_uf_join(parent, g, sw);
            continue;
        }
        dnvml_pci_info pci;
        char bus[32];
        if (!m->link_pci || m->link_pci(d, l, &pci)) continue;
        pci.bus_id[sizeof pci.bus_id - 1] = '\0';
        discover_busid_norm(bus, sizeof bus, pci.bus_id);
        for (int h = 0; h < n->ngpus; h++)
            if (!strcmp(n->gpus[h].pci_bus_id, bus)) discover_uf_join(parent, g, h);
    }
    return active_links;
}

static int read_gpus(nvml *m, topo_node *n, char *err, unsigned errlen)
{
    unsigned count = 0;
    dnvml_return r = m->count(&count);
    if (r) { snprintf(err, errlen, "NVML nvmlDeviceGetCount failed: %s", why(m, r)); return -1; }
    if (count > TOPO_MAX_GPUS) {
        snprintf(err, errlen, "NVML reports %u GPUs; a node may have at most %d", count, TOPO_MAX_GPUS);
        return -1;
    }
    dnvml_device dev[TOPO_MAX_GPUS];
    for (unsigned i = 0; i < count; i++) {
        r = m->handle(i, &dev[i]);
        if (r) { snprintf(err, errlen, "NVML nvmlDeviceGetHandleByIndex(%u) failed: %s", i, why(m, r)); return -1; }
        if (device_info(m, i, dev[i], &n->gpus[i], err, errlen)) return -1;
        n->ngpus = (int)i + 1;
    }
    int parent[TOPO_MAX_GPUS + 1], comp[TOPO_MAX_GPUS], links = 0;
    for (int i = 0; i <= n->ngpus; i++) parent[i] = i;
    for (int g = 0; g < n->ngpus; g++) links += nvlink_peers(m, dev[g], n, g, n->ngpus, parent);
    for (int g = 0; g < n->ngpus; g++) comp[g] = links ? discover_uf_find(parent, g) : 0;
    discover_name_islands(n, comp);
    for (int g = 0; g < n->ngpus; g++) {
        char isl[TOPO_NAME];
        fabric_island(m, dev[g], isl, sizeof isl);
        if (isl[0]) memcpy(n->gpus[g].island, isl, sizeof isl);
    }
    return 0;
}

int discover_nvml_gpus(topo_node *n, char *note, unsigned notelen, char *err, unsigned errlen)
{
    nvml m;
    int rc = load(&m, note, notelen, err, errlen);
    if (rc == 0) {
        rc = read_gpus(&m, n, err, errlen);
        m.shutdown();
    }
    if (rc < 0) n->ngpus = 0;
    if (m.lib) dlclose(m.lib);
    return rc < 0 ? -1 : 0;
}

/* Best effort: a failing NVML leaves the file's view of the node as it was. */
static int fill_matching(nvml *m, topo_node *n)
{
    unsigned count = 0;
    int matched = 0;
    if (m->count(&count)) return 0;
    for (unsigned i = 0; i < count; i++) {
        dnvml_device d;
        topo_gpu seen;
        char ignored[128];
        memset(&seen, 0, sizeof seen);
        if (m->handle(i, &d) || device_info(m, i, d, &seen, ignored, sizeof ignored)) continue;
        for (int g = 0; g < n->ngpus; g++) {
            topo_gpu *gpu = &n->gpus[g];
            if (strcmp(gpu->pci_bus_id, seen.pci_bus_id)) continue;
            memcpy(gpu->uuid, seen.uuid, sizeof gpu->uuid);
            memcpy(gpu->name, seen.name, sizeof gpu->name);
            gpu->memory_bytes = seen.memory_bytes;
            matched++;
        }
    }
    return matched;
}

int discover_nvml_fill(topo_node *n)
{
    if (!n->ngpus) return 0;
    nvml m;
    char note[256], err[256];
    int matched = 0;
    if (load(&m, note, sizeof note, err, sizeof err) == 0) {
        matched = fill_matching(&m, n);
        m.shutdown();
    }
    if (m.lib) dlclose(m.lib);
    return matched;
}
