/* discover_nccl_xml on thousands of damaged copies of a valid file (bytes flipped to
 * markup characters, spans cut or repeated, the end cut off). Each must come back as
 * either a consistent node or -1 with a one-line message naming the file; under the
 * sanitizer build any out-of-bounds access fails the test. Seeded, so repeatable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "discover.h"

#define ROUNDS 2000

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static size_t base_file(char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "<?xml version=\"1.0\"?>\n<system version=\"1\">\n <cpu numaid=\"0\">\n");
    for (int g = 0; g < 4; g++)
        k += (size_t)snprintf(buf + k, cap - k,
                              "  <pci busid=\"0000:%02x:00.0\" class=\"0x060400\">\n"
                              "   <pci busid=\"0000:%02x:00.0\" class=\"0x030200\"><gpu dev=\"%d\" sm=\"90\">"
                              "<nvlink target=\"0000:05:00.0\" count=\"18\" tclass=\"0x068000\"/></gpu></pci>\n"
                              "   <pci busid='0000:%02x:00.0' class='0x020700'><nic><net name=\"mlx5_%d\" "
                              "speed=\"400000\" port=\"1\"/></nic></pci>\n  </pci>\n",
                              0x10 + g, 0x18 + g, g, 0x40 + g, g);
    k += (size_t)snprintf(buf + k, cap - k, " </cpu>\n</system>\n");
    return k;
}

static void check_result(int rc, const topo_node *n, const char *err, const char *path, int round)
{
    CHECK(rc == 0 || rc == -1, "round %d: rc %d", round, rc);
    CHECK(!strcmp(n->name, "mut"), "round %d: name changed", round);
    if (rc) {
        CHECK(!strncmp(err, path, strlen(path)) && !strchr(err, '\n'), "round %d: message %s", round, err);
        CHECK(n->ngpus == 0 && n->nnics == 0, "round %d: failed but node not reset", round);
        return;
    }
    CHECK(n->ngpus >= 0 && n->ngpus <= TOPO_MAX_GPUS && n->nnics >= 0 && n->nnics <= TOPO_MAX_NICS,
          "round %d: %d GPUs %d NICs", round, n->ngpus, n->nnics);
    for (int g = 0; g < n->ngpus; g++) {
        const topo_gpu *gpu = &n->gpus[g];
        CHECK(gpu->index == g && gpu->island[0], "round %d: GPU %d index %d island '%s'", round, g, gpu->index,
              gpu->island);
        CHECK(n->nnics ? gpu->rail >= 0 && gpu->rail < n->nnics : gpu->rail == -1, "round %d: GPU %d rail %d",
              round, g, gpu->rail);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    static char base[8192], buf[16384];
    size_t blen = base_file(base, sizeof base);
    char path[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/discover_xml_mut_%d.xml", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    static const char MARKUP[] = "<>/\"'= \n!?-&;x0";
    int ok = 0;
    for (int round = 0; round < ROUNDS; round++) {
        memcpy(buf, base, blen);
        size_t len = blen;
        for (unsigned m = 1 + rnd(3); m; m--) {
            size_t at = rnd((unsigned)len), span = 1 + rnd(40);
            if (at + span > len) span = len - at;
            switch (rnd(4)) {
            case 0: buf[at] = MARKUP[rnd(sizeof MARKUP - 1)]; break;
            case 1: memmove(buf + at, buf + at + span, len - at - span); len -= span; break;
            case 2:
                if (len + span < sizeof buf) {
                    memmove(buf + at + span, buf + at, len - at);
                    len += span;
                }
                break;
            default: len = at; break;
            }
        }
        FILE *f = fopen(path, "wb");
        if (!f) { perror(path); return 1; }
        fwrite(buf, 1, len, f);
        fclose(f);
        static topo_node n;
        memset(&n, 0x5c, sizeof n);
        snprintf(n.name, sizeof n.name, "mut");
        char err[512] = "";
        int rc = discover_nccl_xml(&n, path, err, sizeof err);
        ok += rc == 0;
        check_result(rc, &n, err, path, round);
    }
    unlink(path);
    printf("%d of %d damaged files still read as a topology\n", ok, ROUNDS);
    CHECK(ok > 0 && ok < ROUNDS, "mutations should both keep and break files (%d kept)", ok);
    return check_summary(argv[0]);
}
