/* gpu_specs: the published figures of the GPUs atoll knows, for MFU and planning.
 *
 * Peak figures are dense bf16 tensor-core FLOP/s from the vendor's datasheets
 * (no sparsity). Bandwidths are per GPU: NVLink is the unidirectional NVLink
 * bandwidth one GPU has into its island; NIC is one rail's line rate.
 * The table is static; lookups return pointers into it (never free them).
 */
#ifndef ATOLL_GPU_SPECS_H
#define ATOLL_GPU_SPECS_H

#include <stdint.h>

typedef struct gpu_spec {
    const char *type;        /* short name used by flags: "h100-sxm" */
    const char *match;       /* substring of the device name NVML/CUDA reports */
    double peak_bf16_flops;  /* dense */
    uint64_t memory_bytes;
    double hbm_bytes_per_s;
    double nvlink_bytes_per_s; /* per direction, per GPU */
    double pcie_bytes_per_s;
    double nic_bytes_per_s;    /* one rail of the reference system */
    int gpus_per_node;         /* of the reference system */
} gpu_spec;

/* By flag name (`--gpu h100-sxm`); NULL when unknown. */
const gpu_spec *gpu_spec_by_type(const char *type);
/* By the device name a driver reports ("NVIDIA H100 80GB HBM3"); NULL when unknown,
 * so callers can refuse to print an MFU against a made-up peak. */
const gpu_spec *gpu_spec_by_device_name(const char *device_name);
/* All known types, NULL-terminated, for --help texts. */
const gpu_spec *const *gpu_spec_all(void);
/* The known type names joined by ", " into buf (for "accepted: ..." messages); returns buf. */
const char *gpu_spec_type_list(char *buf, unsigned buflen);

#endif
