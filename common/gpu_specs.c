#include "gpu_specs.h"

#include <stdio.h>
#include <string.h>

#define GB 1e9
#define GiB (1024ULL * 1024 * 1024)

/* Order matters for device-name matching: the more specific names first. */
static const gpu_spec SPECS[] = {
    { "h200", "H200", 989e12, 141ULL * GB, 4.8e12, 450 * GB, 64 * GB, 50 * GB, 8 },
    /* PCIe and NVL H100s are slower parts; match them before the SXM default. */
    { "h100-pcie", "H100 PCIe", 756e12, 80 * GiB, 2.0e12, 300 * GB, 64 * GB, 50 * GB, 8 },
    { "h100-nvl", "H100 NVL", 835e12, 94ULL * GB, 3.9e12, 300 * GB, 64 * GB, 50 * GB, 8 },
    { "h100-sxm", "H100", 989e12, 80 * GiB, 3.35e12, 450 * GB, 64 * GB, 50 * GB, 8 },
    { "gb200", "GB200", 2500e12, 186ULL * GB, 8e12, 900 * GB, 64 * GB, 100 * GB, 4 },
    { "a100-80gb", "A100-SXM4-80GB", 312e12, 80 * GiB, 2.0e12, 300 * GB, 32 * GB, 25 * GB, 8 },
    { "a100-40gb", "A100", 312e12, 40 * GiB, 1.555e12, 300 * GB, 32 * GB, 25 * GB, 8 },
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

const gpu_spec *gpu_spec_by_type(const char *type)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (!strcmp(SPECS[i].type, type)) return &SPECS[i];
    return NULL;
}

const gpu_spec *gpu_spec_by_device_name(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < NSPECS; i++)
        if (strstr(name, SPECS[i].match)) {
            /* "NVIDIA A100-SXM4-80GB" matched above; an 80GB PCIe A100 says "A100 80GB PCIe". */
            if (!strcmp(SPECS[i].type, "a100-40gb") && strstr(name, "80GB"))
                return gpu_spec_by_type("a100-80gb");
            return &SPECS[i];
        }
    return NULL;
}

const gpu_spec *const *gpu_spec_all(void)
{
    static const gpu_spec *all[NSPECS + 1];
    for (size_t i = 0; i < NSPECS; i++) all[i] = &SPECS[i];
    all[NSPECS] = NULL;
    return all;
}

const char *gpu_spec_type_list(char *buf, unsigned buflen)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NSPECS && used < buflen; i++) {
        int n = snprintf(buf + used, buflen - used, "%s%s", i ? ", " : "", SPECS[i].type);
        if (n < 0) break;
        used += (size_t)n;
    }
    return buf;
}
