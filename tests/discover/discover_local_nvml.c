/* discover_local's NVML path against a stand-in libnvidia-ml.so.1 (fake_nvml.c, found
 * through LD_LIBRARY_PATH set by ctest): GPU fields, islands from NVSwitch links, from
 * GPU-GPU links and from a multi-node fabric, rails from the sysfs PCI tree, the
 * driverless and failing cases, and NVML filling in what a topology file lacks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "discover.h"
#include "fake_sysfs.h"

static topo_node node;
static char err[512], root[512];

static int run(const char *mode)
{
    setenv("FAKE_NVML_MODE", mode, 1);
    memset(&node, 0x77, sizeof node);
    snprintf(node.name, sizeof node.name, "gpu-node");
    err[0] = '\0';
    int rc = discover_local(&node, root, err, sizeof err);
    printf("%-12s rc %d, %d GPUs, %d NICs, island[0] %s; %s\n", mode, rc, rc ? 0 : node.ngpus, node.nnics,
           rc == 0 && node.ngpus ? node.gpus[0].island : "-", err);
    return rc;
}

/* Four PCIe switches; GPU g (bus 18 + 16 g, as the fake reports) shares switch g with a
 * NIC whose bus id falls as g rises, so the nearest NIC of GPU g is NIC 3 - g. */
static void build_tree(void)
{
    fs_root(root, sizeof root, "discover_nvml");
    for (int g = 0; g < 4; g++) {
        char p[256], name[16];
        snprintf(p, sizeof p, "pci0000:00/0000:00:0%d.0/0000:%02x:00.0", g + 1, 0x18 + 0x10 * g);
        fs_pci(root, p);
        snprintf(p, sizeof p, "pci0000:00/0000:00:0%d.0/0000:%02x:00.0", g + 1, 0x9f - 0x10 * g);
        snprintf(name, sizeof name, "mlx5_%d", g);
        fs_ib(root, name, p, "200 Gb/sec (4X HDR)\n", "InfiniBand\n");
    }
}

static void test_nvswitch(void)
{
    if (run("nvswitch")) { CHECK(0, "nvswitch: %s", err); return; }
    CHECK(node.ngpus == 4 && node.nnics == 4, "%d GPUs %d NICs", node.ngpus, node.nnics);
    for (int g = 0; g < node.ngpus && g < 4; g++) {
        const topo_gpu *gpu = &node.gpus[g];
        char bus[32], uuid[64];
        snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x18 + 0x10 * g);
        snprintf(uuid, sizeof uuid, "GPU-fake-%04d-0000-0000-0000-000000000000", g);
        CHECK(gpu->index == g, "GPU %d index %d", g, gpu->index);
        CHECK(!strcmp(gpu->pci_bus_id, bus), "GPU %d bus %s, want %s", g, gpu->pci_bus_id, bus);
        CHECK(!strcmp(gpu->uuid, uuid), "GPU %d uuid %s", g, gpu->uuid);
        CHECK(!strcmp(gpu->name, "NVIDIA H100 80GB HBM3"), "GPU %d name %s", g, gpu->name);
        CHECK(gpu->memory_bytes == 81559ULL << 20, "GPU %d memory %llu", g, (unsigned long long)gpu->memory_bytes);
        CHECK(!strcmp(gpu->island, "gpu-node"), "GPU %d island %s", g, gpu->island);
        CHECK(gpu->rail == 3 - g, "GPU %d rail %d, want %d", g, gpu->rail, 3 - g);
        /* The NIC on GPU g's switch is mlx5_g (names were given per switch). */
        char nic[16];
        snprintf(nic, sizeof nic, "mlx5_%d", g);
        if (gpu->rail >= 0 && gpu->rail < node.nnics)
            CHECK(!strcmp(node.nics[gpu->rail].name, nic), "GPU %d uses %s, want %s", g,
                  node.nics[gpu->rail].name, nic);
    }
    CHECK_CLOSE(node.nics[0].gbps, 200.0, 1e-12);
}

static void test_islands(void)
{
    if (!run("pairs")) {
        const char *want[4] = { "gpu-node#0", "gpu-node#0", "gpu-node#1", "gpu-node#1" };
        for (int g = 0; g < 4 && g < node.ngpus; g++)
            CHECK(!strcmp(node.gpus[g].island, want[g]), "pairs: GPU %d island %s, want %s", g,
                  node.gpus[g].island, want[g]);
    } else CHECK(0, "pairs: %s", err);
    if (!run("fabric")) {
        const char *want = "nvl-11111111-1111-1111-1111-111111111111.5";
        for (int g = 0; g < node.ngpus; g++)
            CHECK(!strcmp(node.gpus[g].island, want), "fabric: GPU %d island %s, want %s", g,
                  node.gpus[g].island, want);
    } else CHECK(0, "fabric: %s", err);
    if (!run("fabric_v1")) {
        const char *want = "nvl-22222222-2222-2222-2222-222222222222.9";
        for (int g = 0; g < node.ngpus; g++)
            CHECK(!strcmp(node.gpus[g].island, want), "fabric_v1: GPU %d island %s, want %s", g,
                  node.gpus[g].island, want);
    } else CHECK(0, "fabric_v1: %s", err);
    const char *node_wide[2] = { "zero_fabric", "nolinks" };
    for (int k = 0; k < 2; k++) {
        if (run(node_wide[k])) { CHECK(0, "%s: %s", node_wide[k], err); continue; }
        CHECK(node.ngpus == 4, "%s: %d GPUs", node_wide[k], node.ngpus);
        for (int g = 0; g < node.ngpus; g++)
            CHECK(!strcmp(node.gpus[g].island, "gpu-node"), "%s: GPU %d island %s", node_wide[k], g,
                  node.gpus[g].island);
    }
}

static void test_failures(void)
{
    int rc = run("nodriver");
    CHECK(rc == 0 && node.ngpus == 0 && node.nnics == 4, "nodriver: rc %d, %d GPUs, %d NICs", rc, node.ngpus,
          node.nnics);
    CHECK(strstr(err, "driver") != NULL, "nodriver: note '%s'", err);
    /* A driver that is there but unusable is an error, not "no GPUs". */
    rc = run("mismatch");
    CHECK(rc == -1 && strstr(err, "libnvidia-ml.so.1: nvmlInit failed: RM has detected"), "mismatch: rc %d: %s", rc, err);
    rc = run("badname");
    CHECK(rc == -1, "badname: rc %d", rc);
    CHECK(strstr(err, "nvmlDeviceGetName(GPU 2)") && strstr(err, "Unknown Error"), "badname: %s", err);
    CHECK(node.ngpus == 0 && !strcmp(node.name, "gpu-node"), "badname: node not reset");
    setenv("FAKE_NVML_GPUS", "65", 1);
    rc = run("nvswitch");
    CHECK(rc == -1 && strstr(err, "at most 64"), "65 GPUs: rc %d: %s", rc, err);
    unsetenv("FAKE_NVML_GPUS");
}

/* A topology file describing this very machine: the file gives the layout, NVML the
 * names, UUIDs and memory of the GPUs it also sees (matched by bus id). */
static void test_xml_enriched(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/topo.xml", root);
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs("<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:10:00.0\" class=\"0x060400\">"
          "<pci busid=\"0000:18:00.0\" class=\"0x030200\"/>"
          "<pci busid=\"0000:28:00.0\" class=\"0x030200\"><gpu dev=\"1\" sm=\"90\"/></pci>"
          "<pci busid=\"0000:99:00.0\" class=\"0x030200\"><gpu dev=\"2\" sm=\"90\"/></pci>"
          "</pci></cpu></system>\n", f);
    fclose(f);
    setenv("FAKE_NVML_MODE", "pairs", 1);
    memset(&node, 0, sizeof node);
    snprintf(node.name, sizeof node.name, "xml-node");
    int rc = discover_nccl_xml(&node, path, err, sizeof err);
    CHECK(rc == 0 && node.ngpus == 3, "xml: rc %d, %d GPUs: %s", rc, node.ngpus, err);
    if (rc || node.ngpus != 3) return;
    for (int g = 0; g < 2; g++) {
        char uuid[64];
        snprintf(uuid, sizeof uuid, "GPU-fake-%04d-0000-0000-0000-000000000000", g);
        CHECK(!strcmp(node.gpus[g].uuid, uuid), "xml: GPU %d uuid %s, want NVML's %s", g, node.gpus[g].uuid, uuid);
        CHECK(!strcmp(node.gpus[g].name, "NVIDIA H100 80GB HBM3"), "xml: GPU %d name %s", g, node.gpus[g].name);
        CHECK(node.gpus[g].memory_bytes == 81559ULL << 20, "xml: GPU %d memory %llu", g,
              (unsigned long long)node.gpus[g].memory_bytes);
    }
    CHECK(!strncmp(node.gpus[2].uuid, "GPU-xml-", 8) && !strcmp(node.gpus[2].name, "sm_90") &&
          node.gpus[2].memory_bytes == 0, "xml: GPU unknown to NVML changed: %s %s", node.gpus[2].uuid,
          node.gpus[2].name);
    /* Islands follow the file (no <nvlink>: one island), not NVML's pairs. */
    for (int g = 0; g < 3; g++)
        CHECK(!strcmp(node.gpus[g].island, "xml-node"), "xml: GPU %d island %s", g, node.gpus[g].island);
    unlink(path);
}

int main(int argc, char **argv)
{
    (void)argc;
    build_tree();
    test_nvswitch();
    test_islands();
    test_failures();
    test_xml_enriched();
    fs_remove(root);
    return check_summary(argv[0]);
}
