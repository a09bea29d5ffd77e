#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *STATE_NAMES[] = { "alive", "suspect", "dead", "drained" };

const char *topo_state_name(topo_node_state s)
{
    return (unsigned)s < 4 ? STATE_NAMES[s] : "unknown";
}

int topo_state_parse(const char *s, topo_node_state *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, STATE_NAMES[i])) { *out = (topo_node_state)i; return 0; }
    return -1;
}

typedef struct {
    const char *profile, *gpu_name;
    uint64_t mem;
    int ngpus, nnics;
    double gbps;
} profile_def;

static const profile_def PROFILES[] = {
    { "dgx-h100", "NVIDIA H100 80GB HBM3", 81559ULL << 20, 8, 8, 400 },
    { "dgx-a100", "NVIDIA A100-SXM4-80GB", 81920ULL << 20, 8, 8, 200 },
    { "gb200-tray", "NVIDIA GB200", 189471ULL << 20, 4, 4, 400 },
};

int topo_simulate(topo_node *out, const char *profile, const char *name,
                  const char *nvlink_domain, char *err, unsigned errlen)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->state = NODE_ALIVE;
    if (!strncmp(profile, "cpu:", 4)) {
        char *end;
        long n = strtol(profile + 4, &end, 10);
        if (*end || n < 1 || n > TOPO_MAX_GPUS) {
            snprintf(err, errlen, "--simulate %s: cpu:N needs 1 <= N <= %d", profile, TOPO_MAX_GPUS);
            return -1;
        }
        return 0; /* CPU ranks are counted by the caller, not as GPUs */
    }
    const profile_def *p = NULL;
    for (size_t i = 0; i < sizeof PROFILES / sizeof PROFILES[0]; i++)
        if (!strcmp(PROFILES[i].profile, profile)) p = &PROFILES[i];
    if (!p) {
        snprintf(err, errlen, "--simulate %s: unknown profile (accepted: dgx-h100, dgx-a100, gb200-tray, cpu:N)", profile);
        return -1;
    }
    const char *island = nvlink_domain && *nvlink_domain ? nvlink_domain : name;
    out->ngpus = p->ngpus;
    out->nnics = p->nnics;
    for (int g = 0; g < p->ngpus; g++) {
        topo_gpu *gpu = &out->gpus[g];
        gpu->index = g;
        /* UUIDs are stable per (node, index) so a re-registering node keeps them. */
        unsigned h = 2166136261u;
        for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
        snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-sim-%08x-%04d", h, g);
        snprintf(gpu->name, sizeof gpu->name, "%s", p->gpu_name);
        gpu->memory_bytes = p->mem;
        snprintf(gpu->pci_bus_id, sizeof gpu->pci_bus_id, "0000:%02x:00.0", 0x18 + 0x10 * g);
        snprintf(gpu->island, sizeof gpu->island, "%s", island);
        gpu->rail = g;
    }
    for (int i = 0; i < p->nnics; i++) {
        topo_nic *nic = &out->nics[i];
        snprintf(nic->name, sizeof nic->name, "mlx5_%d", i);
        nic->gbps = p->gbps;
        snprintf(nic->link_layer, sizeof nic->link_layer, "InfiniBand");
        snprintf(nic->pci_bus_id, sizeof nic->pci_bus_id, "0000:%02x:00.0", 0x19 + 0x10 * i);
        nic->rail = i;
    }
    return 0;
}

static int cmp_island(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts the island names once and counts runs: O(G log G), so a 16k-GPU
 * cluster answers in milliseconds rather than the seconds a pairwise scan takes. */
int topo_max_island_gpus(const topo_node *nodes, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)nodes[i].ngpus;
    if (!total) return 0;
    const char **isl = malloc(total * sizeof *isl);
    if (!isl) return 0;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < nodes[i].ngpus; g++) isl[k++] = nodes[i].gpus[g].island;
    qsort(isl, total, sizeof *isl, cmp_island);
    int best = 0, run = 0;
    for (size_t i = 0; i < total; i++) {
        run = (i && !strcmp(isl[i], isl[i - 1])) ? run + 1 : 1;
        if (run > best) best = run;
    }
    free(isl);
    return best;
}
