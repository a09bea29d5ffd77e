/* discover: what hardware this node has, as a topo_node (common/topo.h).
 *
 * Two sources, one result shape:
 *   discover_nccl_xml  an NCCL topology XML file (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE format)
 *   discover_local     the running machine: NVML (dlopen'ed at run time) and sysfs InfiniBand
 *
 * Rules both follow, so a node looks the same whichever source described it:
 *   - GPUs are indexed in PCI bus-id order (NVML's order); NICs likewise.
 *   - Rails: GPUs in index order each take the NIC nearest them in the PCI tree (fewest
 *     hops); among equally near NICs the lowest index not yet taken (when all are
 *     taken, the least shared one, so 4 GPUs behind 2 NICs split 2 + 2).
 *     nic.rail is the NIC's own index; gpu.rail the index of its NIC (-1: no NICs).
 *   - Islands: GPUs joined by NVLink, directly or through NVSwitch, share one island.
 *     One island per node is named after the node; a node split into several names them
 *     "<node>#0", "<node>#1", ... in order of their lowest GPU. A multi-node NVLink domain
 *     (NVL72: NVML fabric info with a cluster UUID) is named "nvl-<cluster uuid>.<clique>",
 *     the same on every node of the domain.
 *
 * Ownership: `out` is caller-owned. Both calls keep out->name and out->leaf as the caller
 * set them and overwrite everything else. No heap memory survives a call.
 * Errors: -1 with a one-line message in err naming the file (and line) and the problem.
 */
#ifndef ATOLL_DISCOVER_H
#define ATOLL_DISCOVER_H

#include "topo.h"

/* Reads GPUs (pci class 0x03xxxx or <gpu>), NICs (pci class 0x02xxxx, <nic>, one per
 * <net name= speed= port=>), the PCI tree and <nvlink target= tclass=> elements.
 * Without any <nvlink> element all GPUs share the node's island (such files, like
 * Azure's, leave NVLink to NVML). NIC speed is in Mb/s in the file; gbps is 0 when
 * the file gives none. Files name no GPU models, so a GPU's name is its compute
 * capability ("sm_90") when the file has one, memory 0, and its UUID is made from node
 * and bus id; but where this machine's NVML reports a GPU at the same bus id (the
 * file describes this very machine, as NCCL_TOPO_FILE does on cloud VMs), NVML's
 * name, UUID and memory replace those. Returns 0 (err then ""), or -1 for a
 * missing, malformed or oversize file. */
int discover_nccl_xml(topo_node *out, const char *path, char *err, unsigned errlen);

/* GPUs from NVML (libnvidia-ml.so.1 opened with dlopen; no library or no driver means
 * zero GPUs, not an error), NICs from <sysfs_root>/class/infiniband/<dev>/ (ports/1/rate,
 * ports/1/link_layer, and the PCI path of the `device` link). sysfs_root is "/sys" on a
 * real machine (NULL or "" mean that too). Returns 0 (err then holds "" or a note worth
 * logging, such as why NVML was not used), or -1 when the driver or sysfs answered
 * something unusable. */
int discover_local(topo_node *out, const char *sysfs_root, char *err, unsigned errlen);

#endif
