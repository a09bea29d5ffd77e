/* discover_nccl_xml on synthetic files in the shape of NCCL's own topology dumps:
 * <gpu> with <nvlink> to NVSwitches or to peer GPUs, <nic><net name speed port/></nic>.
 * Each file is generated here from a few parameters, and the expectations are computed
 * from the same parameters, never read back from the reader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "discover.h"

static char path[256];
static FILE *f;
static int nfiles;

static void begin(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/discover_xml_dgx_%d_%d.xml", tmp && *tmp ? tmp : "/tmp",
             (int)getpid(), nfiles++);
    f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
}

static int load(topo_node *n, const char *name)
{
    fclose(f);
    memset(n, 0, sizeof *n);
    snprintf(n->name, sizeof n->name, "%s", name);
    char err[256] = "";
    int rc = discover_nccl_xml(n, path, err, sizeof err);
    CHECK(rc == 0, "%s: rc %d: %s", path, rc, err);
    unlink(path);
    return rc;
}

/* DGX H100 style: 2 CPUs x 4 PCIe switches, each with one GPU and one 400G IB NIC.
 * NIC bus ids fall as GPU bus ids rise, so rail order is the reverse of GPU order:
 * a reader pairing by index instead of by PCI tree gets every rail wrong. */
static unsigned gpu_bus(int k) { return 0x18 + 0x10 * (unsigned)k; }
static unsigned nic_bus(int k) { return 0x9f - 0x10 * (unsigned)k; }

static void test_dgx_nvswitch(void)
{
    begin();
    fprintf(f, "<?xml version=\"1.0\"?>\n<!-- NCCL topology dump -->\n<system version=\"1\">\n");
    for (int c = 0; c < 2; c++) {
        fprintf(f, "  <cpu numaid=\"%d\" arch=\"x86_64\" vendor=\"GenuineIntel\">\n", c);
        for (int s = 0; s < 4; s++) {
            int k = c * 4 + s;
            fprintf(f, "    <pci busid=\"0000:%02x:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\">\n",
                    gpu_bus(k) - 3);
            fprintf(f, "      <pci busid=\"0000:%02X:00.0\" class=\"0x030200\">\n"
                       "        <gpu dev=\"%d\" sm=\"90\" rank=\"%d\" gdr=\"1\">\n", gpu_bus(k), k, k);
            for (int sw = 0; sw < 4; sw++)
                fprintf(f, "          <nvlink target=\"0000:%02x:00.0\" count=\"%d\" tclass=\"0x068000\"/>\n",
                        5 + sw, 4 + (sw & 1));
            fprintf(f, "        </gpu>\n      </pci>\n");
            fprintf(f, "      <pci busid='0000:%02x:00.0' class='0x020700'>\n        <nic>\n"
                       "          <net name=\"mlx5_%d\" dev=\"%d\" speed=\"400000\" port=\"1\" gdr=\"1\"/>\n"
                       "        </nic>\n      </pci>\n    </pci>\n", nic_bus(k), 7 - k, 7 - k);
        }
        fprintf(f, "  </cpu>\n");
    }
    for (int sw = 0; sw < 4; sw++)
        fprintf(f, "  <pci busid=\"0000:%02x:00.0\" class=\"0x068000\"/>\n", 5 + sw);
    fprintf(f, "</system>\n");
    static topo_node n;
    if (load(&n, "dgx-h100-a")) return;
    CHECK(!strcmp(n.name, "dgx-h100-a"), "name changed to %s", n.name);
    CHECK(n.ngpus == 8 && n.nnics == 8, "%d GPUs %d NICs", n.ngpus, n.nnics);
    for (int k = 0; k < n.ngpus && k < 8; k++) {
        char bus[32];
        snprintf(bus, sizeof bus, "0000:%02x:00.0", gpu_bus(k));
        CHECK(!strcmp(n.gpus[k].pci_bus_id, bus), "GPU %d bus %s, want %s (lower case, bus order)", k,
              n.gpus[k].pci_bus_id, bus);
        CHECK(!strcmp(n.gpus[k].island, "dgx-h100-a"), "GPU %d island %s", k, n.gpus[k].island);
        CHECK(!strcmp(n.gpus[k].name, "sm_90"), "GPU %d name %s", k, n.gpus[k].name);
        CHECK(n.gpus[k].rail == 7 - k, "GPU %d rail %d, want %d", k, n.gpus[k].rail, 7 - k);
    }
    for (int i = 0; i < n.nnics && i < 8; i++) {
        char name[16];
        snprintf(name, sizeof name, "mlx5_%d", i);
        CHECK(!strcmp(n.nics[i].name, name), "NIC %d name %s, want %s", i, n.nics[i].name, name);
        CHECK_CLOSE(n.nics[i].gbps, 400.0, 1e-12);
        CHECK(!strcmp(n.nics[i].link_layer, "InfiniBand"), "NIC %d link %s", i, n.nics[i].link_layer);
        CHECK(n.nics[i].rail == i, "NIC %d rail %d", i, n.nics[i].rail);
    }
    CHECK(strcmp(n.gpus[0].uuid, n.gpus[1].uuid) && n.gpus[0].uuid[0], "GPU uuids '%s' '%s' not distinct",
          n.gpus[0].uuid, n.gpus[1].uuid);
}

/* NVLink bridges between GPU pairs (no switch), one GPU with none, one NVLink to a CPU;
 * all 5 GPUs and 2 NICs on one PCIe switch; an Ethernet NIC with a second port. */
static void test_pairs_and_nics(void)
{
    begin();
    fprintf(f, "<system version=\"1\">\n <cpu numaid=\"0\">\n  <pci busid=\"0000:10:00.0\" class=\"0x060400\">\n");
    int peer[5] = { 1, 0, 3, 2, -1 };
    for (int g = 0; g < 5; g++) {
        fprintf(f, "   <pci busid=\"0000:%02x:00.0\" class=\"0x030200\"><gpu dev=\"%d\" sm=\"80\">", 0x20 + g, g);
        if (peer[g] >= 0)
            fprintf(f, "<nvlink target=\"0000:%02x:00.0\" count=\"12\" tclass=\"0x030200\"/>", 0x20 + peer[g]);
        if (g == 0) fprintf(f, "<nvlink target=\"0000:00:00.0\" count=\"2\" tclass=\"0x060400\"/>");
        fprintf(f, "</gpu></pci>\n");
    }
    fprintf(f, "   <pci busid=\"0000:30:00.0\" class=\"0x020700\"/>\n"); /* no <net>: unnamed, no speed */
    fprintf(f, "   <pci busid=\"0000:31:00.0\" class=\"0x020000\"><nic>"
               "<net name=\"mlx5_1\" speed=\"100000\" port=\"1\"/>"
               "<net name=\"mlx5_1\" speed=\"100000\" port=\"2\"/></nic></pci>\n");
    fprintf(f, "  </pci>\n </cpu>\n</system>\n");
    static topo_node n;
    if (load(&n, "pairs")) return;
    CHECK(n.ngpus == 5 && n.nnics == 3, "%d GPUs %d NICs", n.ngpus, n.nnics);
    if (n.ngpus != 5 || n.nnics != 3) return;
    const char *want_island[5] = { "pairs#0", "pairs#0", "pairs#1", "pairs#1", "pairs#2" };
    for (int g = 0; g < 5; g++)
        CHECK(!strcmp(n.gpus[g].island, want_island[g]), "GPU %d island %s, want %s", g,
              n.gpus[g].island, want_island[g]);
    CHECK(!strcmp(n.nics[0].name, "nic0"), "NIC 0 name %s", n.nics[0].name);
    CHECK(n.nics[0].gbps == 0.0, "NIC 0 gbps %g, want 0 (unknown)", n.nics[0].gbps);
    CHECK(!strcmp(n.nics[1].name, "mlx5_1") && !strcmp(n.nics[2].name, "mlx5_1:2"), "NIC names %s %s",
          n.nics[1].name, n.nics[2].name);
    CHECK(!strcmp(n.nics[1].link_layer, "Ethernet"), "NIC 1 link %s", n.nics[1].link_layer);
    CHECK_CLOSE(n.nics[2].gbps, 100.0, 1e-12);
    /* All equally near: the free NICs first in index order, then the least shared. */
    const int want_rail[5] = { 0, 1, 2, 0, 1 };
    for (int g = 0; g < 5; g++)
        CHECK(n.gpus[g].rail == want_rail[g], "GPU %d rail %d, want %d", g, n.gpus[g].rail, want_rail[g]);
}

/* NVSwitch links named only by target (no tclass), GPUs under different CPUs from the
 * NICs; and a file without NICs: rails are -1. */
static void test_switch_by_target_no_nics(void)
{
    begin();
    fprintf(f, "<system version=\"1\"><cpu numaid=\"0\">"
               "<pci busid=\"0000:e1:00.0\" class=\"0x068000\"/>");
    for (int g = 0; g < 4; g++)
        fprintf(f, "<pci busid=\"0000:%02x:00.0\" class=\"0x030200\"><gpu dev=\"%d\">"
                   "<nvlink target=\"0000:e1:00.0\" count=\"18\"/></gpu></pci>", 0x40 + g, g);
    fprintf(f, "</cpu></system>");
    static topo_node n;
    if (load(&n, "nvs")) return;
    CHECK(n.ngpus == 4 && n.nnics == 0, "%d GPUs %d NICs", n.ngpus, n.nnics);
    for (int g = 0; g < n.ngpus; g++) {
        CHECK(!strcmp(n.gpus[g].island, "nvs"), "GPU %d island %s", g, n.gpus[g].island);
        CHECK(n.gpus[g].rail == -1, "GPU %d rail %d without NICs", g, n.gpus[g].rail);
    }
}

/* A long node name still gives distinct island names. */
static void test_long_name(void)
{
    begin();
    fprintf(f, "<system><cpu>");
    for (int g = 0; g < 2; g++)
        fprintf(f, "<pci busid=\"0000:%02x:00.0\" class=\"0x0302\"><gpu><nvlink target=\"0000:%02x:00.0\" "
                   "tclass=\"0x030200\"/></gpu></pci>", 0x50 + g, 0x50 + g);
    fprintf(f, "</cpu></system>");
    static topo_node n;
    char name[TOPO_NAME];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    if (load(&n, name)) return;
    CHECK(n.ngpus == 2, "%d GPUs", n.ngpus);
    CHECK(strcmp(n.gpus[0].island, n.gpus[1].island), "islands not distinct: %s", n.gpus[0].island);
    CHECK(strlen(n.gpus[1].island) == TOPO_NAME - 1 && !strcmp(n.gpus[1].island + TOPO_NAME - 3, "#1"),
          "island %s", n.gpus[1].island);
}

/* What real files carry besides elements: a BOM, CRLF line ends, a prolog, DOCTYPE,
 * comments, CDATA, text, spaces around '=', single quotes, tabs, entities. */
static void test_tolerant_syntax(void)
{
    begin();
    fputs("\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<!DOCTYPE system>\r\n"
          "<system version = '1'>\r\n  <!-- dumped <by> hand -->\r\n"
          "\t<cpu\tnumaid=\"0\" >text that means nothing<![CDATA[ <pci/> ]]>\r\n"
          "\t\t<pci busid = '0000:3A:00.0'\r\n\t\t     class=\"0x030200\"></pci >\r\n"
          "\t\t<pci busid=\"0000:3b:00.0\" class=\"0x020700\"><nic>"
          "<net name=\"ib&amp;0\" speed=\"200000\" port=\"1\"/></nic></pci>\r\n"
          "\t</cpu>\r\n</system>\r\n", f);
    static topo_node n;
    if (load(&n, "tolerant")) return;
    CHECK(n.ngpus == 1 && n.nnics == 1, "%d GPUs %d NICs (the CDATA <pci/> is not an element)", n.ngpus, n.nnics);
    if (n.ngpus != 1 || n.nnics != 1) return;
    CHECK(!strcmp(n.gpus[0].pci_bus_id, "0000:3a:00.0"), "GPU bus %s", n.gpus[0].pci_bus_id);
    CHECK(!strcmp(n.nics[0].name, "ib&0"), "NIC name %s", n.nics[0].name);
    CHECK_CLOSE(n.nics[0].gbps, 200.0, 1e-12);
    CHECK(n.gpus[0].rail == 0 && !strcmp(n.gpus[0].island, "tolerant"), "rail %d island %s", n.gpus[0].rail,
          n.gpus[0].island);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_dgx_nvswitch();
    test_tolerant_syntax();
    test_pairs_and_nics();
    test_switch_by_target_no_nics();
    test_long_name();
    return check_summary(argv[0]);
}
