/* The rules every discovery source shares (discover_internal.h): bus-id spelling,
 * PCI-path distances, rail pairing, island naming. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "discover_internal.h"

static void test_busid(void)
{
    const char *cases[][2] = {
        { "00000000:1B:00.0", "0000:1b:00.0" },   /* NVML */
        { "0000:1b:00.0", "0000:1b:00.0" },       /* sysfs */
        { "0001:C4:1f.7", "0001:c4:1f.7" },
        { "ffff:ff:01.0", "ffff:ff:01.0" },
        { "00010000:E0:00.0", "10000:e0:00.0" },  /* VMD domain, as sysfs names it */
        { "not-a-BUS", "not-a-bus" },             /* kept, lower-cased */
        { "0000:1b:00.0x", "0000:1b:00.0x" },     /* trailing junk: not a bus id */
        { "0000:1b:20.0", "0000:1b:20.0" },       /* device > 0x1f: not a bus id, kept */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[32];
        discover_busid_norm(out, sizeof out, cases[i][0]);
        CHECK(!strcmp(out, cases[i][1]), "norm(%s) = %s, want %s", cases[i][0], out, cases[i][1]);
    }
}

static void test_hops(void)
{
    const char *a = "pci0000:00/0000:00:01.0/0000:0c:00.0";
    CHECK(discover_pci_hops(a, a) == 0, "same device");
    CHECK(discover_pci_hops(a, "pci0000:00/0000:00:01.0/0000:0d:00.0") == 2, "siblings");
    CHECK(discover_pci_hops(a, "pci0000:00/0000:00:01.0") == 1, "parent");
    CHECK(discover_pci_hops(a, "pci0000:00/0000:00:02.0/0000:2c:00.0") == 4, "cousins");
    CHECK(discover_pci_hops(a, "pci0000:80/0000:80:01.0/0000:8c:00.0") == 6, "other root complex");
    CHECK(discover_pci_hops(a, "pci0000:00/0000:00:01.00/0000:0c:00.0") == 4, "prefix of a name is not a match");
    CHECK(discover_pci_hops("", a) == -1 && discover_pci_hops(a, "") == -1, "unknown");
}

static void test_rails(void)
{
    static topo_node n;
    memset(&n, 0, sizeof n);
    n.ngpus = 4;
    n.nnics = 3;
    /* GPU 0 and 1 both nearest NIC 2; GPU 2 nearest NIC 2 as well (now shared);
     * GPU 3 knows no distance: ties all NICs, takes the free NIC 0. */
    const int hops[4 * 3] = {
        4, 6, 2,
        4, 6, 2,
        4, 4, 2,
        -1, -1, -1,
    };
    discover_assign_rails(&n, hops);
    const int want[4] = { 2, 2, 2, 0 };
    for (int g = 0; g < 4; g++) CHECK(n.gpus[g].rail == want[g], "GPU %d rail %d, want %d", g, n.gpus[g].rail, want[g]);
    for (int i = 0; i < 3; i++) CHECK(n.nics[i].rail == i, "NIC %d rail %d", i, n.nics[i].rail);
    /* Known beats unknown. */
    const int hops2[1 * 3] = { -1, 9, -1 };
    n.ngpus = 1;
    discover_assign_rails(&n, hops2);
    CHECK(n.gpus[0].rail == 1, "known distance loses to unknown: rail %d", n.gpus[0].rail);
    n.nnics = 0;
    discover_assign_rails(&n, hops2);
    CHECK(n.gpus[0].rail == -1, "no NICs: rail %d", n.gpus[0].rail);
}

static void test_islands(void)
{
    static topo_node n;
    memset(&n, 0, sizeof n);
    snprintf(n.name, sizeof n.name, "n1");
    n.ngpus = 4;
    const int one[4] = { 7, 7, 7, 7 }, split[4] = { 9, 3, 9, 3 };
    discover_name_islands(&n, one);
    for (int g = 0; g < 4; g++) CHECK(!strcmp(n.gpus[g].island, "n1"), "GPU %d island %s", g, n.gpus[g].island);
    discover_name_islands(&n, split);
    const char *want[4] = { "n1#0", "n1#1", "n1#0", "n1#1" };
    for (int g = 0; g < 4; g++)
        CHECK(!strcmp(n.gpus[g].island, want[g]), "GPU %d island %s, want %s", g, n.gpus[g].island, want[g]);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_busid();
    test_hops();
    test_rails();
    test_islands();
    return check_summary(argv[0]);
}
