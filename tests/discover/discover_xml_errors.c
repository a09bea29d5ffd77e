/* discover_nccl_xml on bad input: each refusal is -1 with one line naming the file,
 * the line where the problem is, and the problem; the node keeps only its name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "discover.h"

static char path[256];

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
}

/* line 0: the message need not name a line. */
static void expect_error(const char *what, const char *text, int line, const char *needle)
{
    if (text) write_file(text);
    static topo_node n;
    memset(&n, 0x33, sizeof n);
    snprintf(n.name, sizeof n.name, "node-e");
    char err[512] = "";
    int rc = discover_nccl_xml(&n, path, err, sizeof err);
    CHECK(rc == -1, "%s: rc %d, want -1", what, rc);
    CHECK(!strncmp(err, path, strlen(path)), "%s: message does not start with the file: %s", what, err);
    if (line) {
        char at[300];
        snprintf(at, sizeof at, "%s:%d: ", path, line);
        CHECK(!strncmp(err, at, strlen(at)), "%s: message does not name line %d: %s", what, line, err);
    }
    CHECK(strstr(err, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err);
    CHECK(!strchr(err, '\n'), "%s: message is not one line: %s", what, err);
    CHECK(n.ngpus == 0 && n.nnics == 0 && !strcmp(n.name, "node-e"), "%s: node not reset (%d GPUs, name %s)",
          what, n.ngpus, n.name);
    printf("%-22s %s\n", what, err);
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/discover_xml_errors_%d.xml", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    unlink(path);
    expect_error("missing file", NULL, 0, "cannot open");
    expect_error("empty file", "", 1, "no XML elements");
    expect_error("only a comment", "<!-- nothing -->\n", 2, "no XML elements");
    expect_error("wrong root", "<?xml version=\"1.0\"?>\n<topology/>\n", 2, "starts with <system>");
    expect_error("unclosed element", "<system>\n  <cpu numaid=\"0\">\n", 3, "file ends inside <cpu> opened at line 2");
    expect_error("mismatched close", "<system>\n <cpu>\n  <pci busid=\"0000:01:00.0\">\n </cpu>\n</system>\n", 4,
                 "</cpu> does not match <pci> opened at line 3");
    expect_error("stray close", "<system/>\n</system>\n", 2, "closes nothing");
    expect_error("unquoted value", "<system>\n<pci busid=0000:01:00.0/>\n</system>\n", 2, "must be quoted");
    expect_error("value never closed", "<system>\n<pci busid=\"0000:01:00.0/>\n</system>\n", 2, "missing closing quote");
    expect_error("no equals", "<system>\n\n<pci busid/>\n</system>\n", 3, "has no '=value'");
    expect_error("repeated attribute", "<system>\n<pci class=\"0x030200\" class=\"0x020700\"/></system>", 2,
                 "attribute 'class' repeated");
    expect_error("tag never closed", "<system>\n<pci busid=\"0000:01:00.0\"", 2, "never closed");
    expect_error("comment never closed", "<system>\n<!-- x\n</system>\n", 2, "comment is never closed");
    expect_error("two roots", "<system/>\n<system/>\n", 2, "second top-level element");
    expect_error("bad speed", "<system>\n<pci busid=\"0000:01:00.0\" class=\"0x020700\"><nic>\n"
                              "<net name=\"mlx5_0\" speed=\"fast\"/></nic></pci></system>\n", 3,
                 "speed is not a number");
    expect_error("duplicate GPU", "<system>\n<pci busid=\"0000:01:00.0\" class=\"0x030200\"/>\n"
                                  "<pci busid=\"0000:01:00.0\" class=\"0x030200\"/>\n</system>\n", 3,
                 "second GPU with bus id 0000:01:00.0");

    /* Over the limits of topo.h: refused, not truncated. */
    static char big[1 << 16];
    int k = snprintf(big, sizeof big, "<system>\n");
    for (int g = 0; g <= TOPO_MAX_GPUS; g++)
        k += snprintf(big + k, sizeof big - (size_t)k, "<pci busid=\"0001:%02x:00.0\" class=\"0x030200\"/>\n", g);
    snprintf(big + k, sizeof big - (size_t)k, "</system>\n");
    expect_error("too many GPUs", big, TOPO_MAX_GPUS + 2, "more GPUs than a node may have");
    k = snprintf(big, sizeof big, "<system>\n<pci busid=\"0000:01:00.0\" class=\"0x020700\"><nic>\n");
    for (int i = 0; i <= TOPO_MAX_NICS; i++)
        k += snprintf(big + k, sizeof big - (size_t)k, "<net name=\"mlx5_%d\"/>\n", i);
    snprintf(big + k, sizeof big - (size_t)k, "</nic></pci></system>\n");
    expect_error("too many NICs", big, TOPO_MAX_NICS + 3, "more NICs than a node may have: 32");
    k = 0;
    for (int d = 0; d < 70; d++) k += snprintf(big + k, sizeof big - (size_t)k, "<system>\n");
    expect_error("too deep", big, 65, "nested deeper than");

    /* One byte over the size limit, and exactly at it (then only the content is wrong). */
    for (int over = 1; over >= 0; over--) {
        FILE *f = fopen(path, "w");
        if (!f) { perror(path); return 1; }
        fputs("<system>", f);
        for (long i = 8; i < (16L << 20) + over; i++) fputc(' ', f);
        fclose(f);
        expect_error(over ? "one byte too large" : "at the size limit", NULL, over ? 0 : 1,
                     over ? "larger than 16 MiB" : "file ends inside <system>");
    }
    unlink(path);
    return check_summary(argv[0]);
}
