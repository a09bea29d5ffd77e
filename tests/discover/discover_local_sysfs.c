/* discover_local on a fake sysfs tree: InfiniBand NICs, their rates, link layers,
 * PCI addresses and order; the refusals for unreadable sysfs; and, on a machine
 * without NVML (this one), zero GPUs with rc 0 and a note saying why. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "discover.h"
#include "fake_sysfs.h"

static topo_node node;
static char err[512];

static int run(const char *root)
{
    memset(&node, 0x77, sizeof node);
    snprintf(node.name, sizeof node.name, "local-node");
    err[0] = '\0';
    return discover_local(&node, root, err, sizeof err);
}

static void test_two_hcas(void)
{
    char root[512];
    fs_root(root, sizeof root, "discover_sysfs");
    /* Created in reverse order so directory order cannot stand in for bus order. */
    fs_ib(root, "mlx5_1", "pci0000:80/0000:80:01.0/0000:8c:00.0", "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
    fs_ib(root, "mlx5_0", "pci0000:00/0000:00:01.0/0000:0c:00.0", "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
    fs_ib(root, "rxe0", NULL, "10 Gb/sec (1X QDR)\n", "Ethernet\n"); /* software RoCE: not a rail */
    int rc = run(root);
    CHECK(rc == 0, "rc %d: %s", rc, err);
    CHECK(!strcmp(node.name, "local-node"), "name changed to %s", node.name);
    CHECK(node.nnics == 2, "%d NICs, want 2 (rxe0 skipped)", node.nnics);
    const char *bus[2] = { "0000:0c:00.0", "0000:8c:00.0" };
    for (int i = 0; i < node.nnics && i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "mlx5_%d", i);
        CHECK(!strcmp(node.nics[i].name, name), "NIC %d is %s, want %s", i, node.nics[i].name, name);
        CHECK(!strcmp(node.nics[i].pci_bus_id, bus[i]), "NIC %d bus %s, want %s", i, node.nics[i].pci_bus_id, bus[i]);
        CHECK_CLOSE(node.nics[i].gbps, 400.0, 1e-12);
        CHECK(!strcmp(node.nics[i].link_layer, "InfiniBand"), "NIC %d link '%s'", i, node.nics[i].link_layer);
        CHECK(node.nics[i].rail == i, "NIC %d rail %d", i, node.nics[i].rail);
    }
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml) {
        CHECK(node.ngpus == 0, "%d GPUs without NVML", node.ngpus);
        CHECK(strstr(err, "NVML") != NULL, "no note on the missing NVML: '%s'", err);
    } else {
        dlclose(nvml); /* a GPU machine: whatever it has, each GPU gets a real rail */
        for (int g = 0; g < node.ngpus; g++)
            CHECK(node.gpus[g].rail >= 0 && node.gpus[g].rail < 2, "GPU %d rail %d", g, node.gpus[g].rail);
    }
    printf("two HCAs: %d GPUs, %d NICs; note: %s\n", node.ngpus, node.nnics, err);
    fs_remove(root);
}

static void test_no_rdma(void)
{
    char root[512];
    fs_root(root, sizeof root, "discover_sysfs");
    int rc = run(root);
    CHECK(rc == 0 && node.nnics == 0, "no class/infiniband: rc %d, %d NICs: %s", rc, node.nnics, err);
    fs_remove(root);
}

static void expect_refusal(const char *what, const char *rate, const char *needle)
{
    char root[512];
    fs_root(root, sizeof root, "discover_sysfs");
    fs_ib(root, "mlx5_0", "pci0000:00/0000:00:01.0/0000:0c:00.0", "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
    fs_ib(root, "mlx5_3", "pci0000:00/0000:00:02.0/0000:0d:00.0", rate, "InfiniBand\n");
    int rc = run(root);
    CHECK(rc == -1, "%s: rc %d", what, rc);
    CHECK(strstr(err, "/class/infiniband/mlx5_3/ports/1/rate") != NULL, "%s: file not named: %s", what, err);
    CHECK(strstr(err, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err);
    CHECK(node.nnics == 0 && node.ngpus == 0 && !strcmp(node.name, "local-node"), "%s: node not reset", what);
    printf("%s: %s\n", what, err);
    fs_remove(root);
}

static void test_too_many(void)
{
    char root[512];
    fs_root(root, sizeof root, "discover_sysfs");
    for (int i = 0; i <= TOPO_MAX_NICS; i++) {
        char name[16], pci[128];
        snprintf(name, sizeof name, "mlx5_%d", i);
        snprintf(pci, sizeof pci, "pci0000:00/0000:00:01.0/0000:%02x:00.0", 0x10 + i);
        fs_ib(root, name, pci, "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
    }
    int rc = run(root);
    CHECK(rc == -1 && strstr(err, "/class/infiniband: more than 32 RDMA devices"), "33 NICs: rc %d: %s", rc, err);
    fs_remove(root);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_two_hcas();
    test_no_rdma();
    expect_refusal("unreadable rate", "fast\n", "'fast' is not '<N> Gb/sec");
    expect_refusal("missing rate", NULL, "cannot read");
    test_too_many();
    return check_summary(argv[0]);
}
