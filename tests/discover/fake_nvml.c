/* fake_nvml: a stand-in libnvidia-ml.so.1 for discovery tests. It exports the NVML
 * calls discovery uses, with the ABI of workerd/discover_nvml.h, and describes
 * FAKE_NVML_GPUS GPUs (default 4) in the shape FAKE_NVML_MODE (read at nvmlInit):
 *   nvswitch     every GPU has links 0-3 active into NVSwitches
 *   pairs        GPU g has link 0 active to GPU g^1
 *   fabric       as nvswitch, plus a completed multi-node fabric (cluster 11..11, clique 5)
 *   zero_fabric  as nvswitch, plus a completed fabric with an all-zero cluster UUID
 *   fabric_v1    as fabric (cluster 22..22, clique 9), but only through the r535 call:
 *                the versioned one refuses with ARGUMENT_VERSION_MISMATCH
 *   nolinks      NVLink queries answer NOT_SUPPORTED
 *   nodriver     nvmlInit fails with DRIVER_NOT_LOADED
 *   badname      nvmlDeviceGetName fails for GPU 2
 *   mismatch     nvmlInit fails with LIB_RM_VERSION_MISMATCH (library and driver differ)
 * GPU g sits at bus 00000000:<18 + 16 g>:00.0 (upper case, as NVML writes it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover_nvml.h"

#define FAKE_ERROR_UNKNOWN 999
#define FAKE_ERROR_RM_MISMATCH 18
#define FAKE_ERROR_VERSION_MISMATCH 25

static char mode[32];
static unsigned ngpus;
static int inited;

typedef struct dnvml_device_st { unsigned index; } fake_dev;
static fake_dev devs[128];

static int is(const char *m) { return !strcmp(mode, m); }

dnvml_return nvmlInit_v2(void)
{
    const char *m = getenv("FAKE_NVML_MODE"), *n = getenv("FAKE_NVML_GPUS");
    snprintf(mode, sizeof mode, "%s", m ? m : "nvswitch");
    ngpus = n ? (unsigned)atoi(n) : 4;
    if (ngpus > 128) ngpus = 128;
    if (is("nodriver")) return DNVML_ERROR_DRIVER_NOT_LOADED;
    if (is("mismatch")) return FAKE_ERROR_RM_MISMATCH;
    inited++;
    return DNVML_SUCCESS;
}

dnvml_return nvmlShutdown(void)
{
    if (!inited) return DNVML_ERROR_UNINITIALIZED;
    inited--;
    return DNVML_SUCCESS;
}

const char *nvmlErrorString(dnvml_return r)
{
    return r == FAKE_ERROR_UNKNOWN         ? "Unknown Error"
           : r == FAKE_ERROR_RM_MISMATCH   ? "RM has detected an NVML/RM version mismatch."
           : r == DNVML_ERROR_NOT_SUPPORTED ? "Not Supported"
                                            : "error";
}

dnvml_return nvmlDeviceGetCount_v2(unsigned *count)
{
    if (!inited) return DNVML_ERROR_UNINITIALIZED;
    *count = ngpus;
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetHandleByIndex_v2(unsigned i, dnvml_device *d)
{
    if (!inited || i >= ngpus) return DNVML_ERROR_INVALID_ARGUMENT;
    devs[i].index = i;
    *d = &devs[i];
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetUUID(dnvml_device d, char *buf, unsigned len)
{
    snprintf(buf, len, "GPU-fake-%04u-0000-0000-0000-000000000000", d->index);
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetName(dnvml_device d, char *buf, unsigned len)
{
    if (is("badname") && d->index == 2) return FAKE_ERROR_UNKNOWN;
    snprintf(buf, len, "NVIDIA H100 80GB HBM3");
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetMemoryInfo(dnvml_device d, dnvml_memory *m)
{
    m->total = 81559ULL << 20;
    m->used = (unsigned long long)d->index << 20;
    m->free = m->total - m->used;
    return DNVML_SUCCESS;
}

static void fill_pci(unsigned index, dnvml_pci_info *p)
{
    memset(p, 0, sizeof *p);
    p->bus = 0x18 + 0x10 * index;
    snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
    snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "0000:%02X:00.0", p->bus);
}

dnvml_return nvmlDeviceGetPciInfo_v3(dnvml_device d, dnvml_pci_info *p)
{
    fill_pci(d->index, p);
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetGpuFabricInfoV(dnvml_device d, dnvml_fabric_info_v2 *fi)
{
    (void)d;
    if (fi->version != DNVML_FABRIC_INFO_V2 || is("fabric_v1")) return FAKE_ERROR_VERSION_MISMATCH;
    if (!is("fabric") && !is("zero_fabric")) return DNVML_ERROR_NOT_SUPPORTED;
    memset(fi->cluster_uuid, is("fabric") ? 0x11 : 0, sizeof fi->cluster_uuid);
    fi->status = DNVML_SUCCESS;
    fi->clique_id = 5;
    fi->state = DNVML_FABRIC_STATE_COMPLETED;
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetGpuFabricInfo(dnvml_device d, dnvml_fabric_info *fi)
{
    (void)d;
    if (!is("fabric_v1")) return DNVML_ERROR_NOT_SUPPORTED;
    memset(fi->cluster_uuid, 0x22, sizeof fi->cluster_uuid);
    fi->status = DNVML_SUCCESS;
    fi->clique_id = 9;
    fi->state = DNVML_FABRIC_STATE_COMPLETED;
    return DNVML_SUCCESS;
}

static int switched(void)
{
    return is("nvswitch") || is("fabric") || is("fabric_v1") || is("zero_fabric") || is("badname");
}

dnvml_return nvmlDeviceGetNvLinkState(dnvml_device d, unsigned link, int *active)
{
    (void)d;
    if (is("nolinks")) return DNVML_ERROR_NOT_SUPPORTED;
    if (link >= DNVML_NVLINK_MAX_LINKS) return DNVML_ERROR_INVALID_ARGUMENT;
    *active = switched() ? link < 4 : link == 0;
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetNvLinkRemoteDeviceType(dnvml_device d, unsigned link, int *type)
{
    (void)d; (void)link;
    *type = switched() ? DNVML_NVLINK_DEVICE_SWITCH : DNVML_NVLINK_DEVICE_GPU;
    return DNVML_SUCCESS;
}

dnvml_return nvmlDeviceGetNvLinkRemotePciInfo_v2(dnvml_device d, unsigned link, dnvml_pci_info *p)
{
    (void)link;
    if (switched()) return DNVML_ERROR_NOT_SUPPORTED;
    fill_pci(d->index ^ 1u, p);
    return DNVML_SUCCESS;
}
