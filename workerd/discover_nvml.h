/* discover_nvml: the slice of NVML's C ABI that GPU discovery calls, declared here so
 * atoll builds without the driver's headers and loads libnvidia-ml.so.1 only at run
 * time. Layouts follow nvml.h of driver r535 and later (struct field order and sizes
 * are the ABI; names are ours). Only calls present since r450 are required; the fabric
 * (r535+) and NVLink peer queries are used when the library has them.
 */
#ifndef ATOLL_DISCOVER_NVML_H
#define ATOLL_DISCOVER_NVML_H

typedef int dnvml_return;                     /* nvmlReturn_t */
typedef struct dnvml_device_st *dnvml_device; /* nvmlDevice_t */

enum {
    DNVML_SUCCESS = 0,
    DNVML_ERROR_UNINITIALIZED = 1,
    DNVML_ERROR_INVALID_ARGUMENT = 2,
    DNVML_ERROR_NOT_SUPPORTED = 3,
    DNVML_ERROR_DRIVER_NOT_LOADED = 9,
};

typedef struct dnvml_memory { /* nvmlMemory_t */
    unsigned long long total, free, used;
} dnvml_memory;

typedef struct dnvml_pci_info { /* nvmlPciInfo_t (v3) */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];            /* "00000000:1B:00.0" */
} dnvml_pci_info;

#define DNVML_FABRIC_UUID_LEN 16
#define DNVML_FABRIC_STATE_COMPLETED 3

typedef struct dnvml_fabric_info { /* nvmlGpuFabricInfo_t (r535) */
    unsigned char cluster_uuid[DNVML_FABRIC_UUID_LEN];
    dnvml_return status;
    unsigned clique_id;
    unsigned char state;
} dnvml_fabric_info;

typedef struct dnvml_fabric_info_v2 { /* nvmlGpuFabricInfo_v2_t, for nvmlDeviceGetGpuFabricInfoV */
    unsigned version;           /* sizeof | 2 << 24 */
    unsigned char cluster_uuid[DNVML_FABRIC_UUID_LEN];
    dnvml_return status;
    unsigned clique_id;
    unsigned char state;
    unsigned health_mask;
} dnvml_fabric_info_v2;

#define DNVML_FABRIC_INFO_V2 ((unsigned)(sizeof(dnvml_fabric_info_v2) | (2u << 24)))

#define DNVML_NVLINK_MAX_LINKS 18
enum { DNVML_NVLINK_DEVICE_GPU = 0, DNVML_NVLINK_DEVICE_SWITCH = 2 };
enum { DNVML_FEATURE_DISABLED = 0, DNVML_FEATURE_ENABLED = 1 };

#endif
