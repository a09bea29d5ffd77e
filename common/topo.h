/* topo: the cluster model. A node has GPUs and NICs; each GPU belongs to an NVLink
 * island (the node's NVSwitch domain, or a multi-node NVL72 domain) and a rail
 * (the index of the NIC nearest it in the PCI tree); each node hangs under a leaf
 * switch of the fabric (see fabric.h for the switch tree).
 *
 * Ownership: a topo_node is a plain value (fixed arrays, no heap pointers).
 * Fixed-size strings so nodes copy with memcpy and store without pointers.
 */
#ifndef ATOLL_TOPO_H
#define ATOLL_TOPO_H

#include <stdint.h>

#define TOPO_NAME 64
#define TOPO_MAX_GPUS 64
#define TOPO_MAX_NICS 32

typedef struct topo_gpu {
    int index;                  /* local index, CUDA/NVML order */
    char uuid[TOPO_NAME];
    char name[TOPO_NAME];       /* "NVIDIA H100 80GB HBM3" */
    uint64_t memory_bytes;
    char pci_bus_id[32];        /* "0000:1b:00.0" */
    char island[TOPO_NAME];     /* NVLink domain id; GPUs with equal ids share NVLink */
    int rail;                   /* NIC rail this GPU uses; -1 when none */
} topo_gpu;

typedef struct topo_nic {
    char name[32];              /* "mlx5_0" */
    double gbps;                /* line rate */
    char link_layer[16];        /* "InfiniBand", "Ethernet" */
    char pci_bus_id[32];
    int rail;
} topo_nic;

typedef enum { NODE_ALIVE = 0, NODE_SUSPECT, NODE_DEAD, NODE_DRAINED } topo_node_state;

typedef struct topo_node {
    char name[TOPO_NAME];
    char leaf[TOPO_NAME];       /* leaf switch; "" when the fabric is unknown */
    topo_node_state state;
    int ngpus, nnics;
    topo_gpu gpus[TOPO_MAX_GPUS];
    topo_nic nics[TOPO_MAX_NICS];
} topo_node;

const char *topo_state_name(topo_node_state s);
int topo_state_parse(const char *s, topo_node_state *out); /* 0 or -1 */

/* Fills `out` as the named simulated hardware profile would appear on node `name`:
 *   dgx-h100   8 x H100 80GB, one NVSwitch island per node, 8 x 400 Gb/s IB rails
 *   dgx-a100   8 x A100 80GB, one island per node, 8 x 200 Gb/s IB rails
 *   gb200-tray 4 x GB200 of the 72-GPU NVLink domain `nvlink_domain`, 4 x 400 Gb/s rails
 *   cpu:N      N CPU ranks, no GPUs, no NICs
 * `nvlink_domain` may be NULL (the island is then the node itself).
 * Returns 0, or -1 with err naming the accepted profiles. */
int topo_simulate(topo_node *out, const char *profile, const char *name,
                  const char *nvlink_domain, char *err, unsigned errlen);

/* Largest number of GPUs sharing one island across `n` nodes (islands may span
 * nodes). Used for the "TP fits in an island" rule. */
int topo_max_island_gpus(const topo_node *nodes, int n);

#endif
