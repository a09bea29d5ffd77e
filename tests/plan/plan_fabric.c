/* fabric: Slurm topology.conf parsing, hostlists, leaf lookup, distances, errors. */
#include "check.h"
#include "fabric.h"

#include <stdlib.h>
#include <string.h>

typedef struct { char names[16][32]; int n; } name_list;

static int collect(void *ctx, const char *name)
{
    name_list *l = ctx;
    if (l->n < 16) snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
    l->n++;
    return 0;
}

static void test_hostlist(void)
{
    name_list l = { .n = 0 };
    char err[256] = "";
    int n = fabric_hostlist_expand("node[000-002,010],gpu9,r[1-2]n[08-09]", collect, &l, err, sizeof err);
    CHECK(n == 9, "expanded %d names: %s", n, err);
    CHECK(!strcmp(l.names[0], "node000") && !strcmp(l.names[2], "node002"), "padding kept: %s %s", l.names[0], l.names[2]);
    CHECK(!strcmp(l.names[3], "node010"), "list item after range: %s", l.names[3]);
    CHECK(!strcmp(l.names[4], "gpu9"), "plain name: %s", l.names[4]);
    CHECK(!strcmp(l.names[5], "r1n08") && !strcmp(l.names[7], "r2n08"), "two brackets: %s %s", l.names[5], l.names[7]);

    const char *bad[] = { "node[1-", "node[3-1]", "node[a-b]", "node]1", "node[1-2,]", "node[]", "node[0-99999999]",
                          "a[0-999]b[0-999]c[0-9]" /* 10M names: brackets multiply */ };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(fabric_hostlist_expand(bad[i], NULL, NULL, err, sizeof err) < 0 && strstr(err, "hostlist"),
              "%s should be refused with a hostlist message, got \"%s\"", bad[i], err);
    }
}

static void test_shared_file(void)
{
    fabric *f;
    char err[256] = "";
    int rc = fabric_load(&f, ATOLL_SHARED_DIR "/topologies/slurm-topology-2pods.conf", err, sizeof err);
    CHECK(rc == 0, "load: %s", err);
    if (rc) return;
    CHECK(fabric_num_nodes(f) == 64, "64 nodes, got %d", fabric_num_nodes(f));
    CHECK(fabric_num_switches(f) == 11, "8 leaves + 2 spines + core, got %d", fabric_num_switches(f));
    int l0 = fabric_leaf_of(f, "node000"), l1 = fabric_leaf_of(f, "node015"), l4 = fabric_leaf_of(f, "node033");
    CHECK(l0 >= 0 && !strcmp(fabric_switch_name(f, l0), "leaf0"), "node000 under leaf0");
    CHECK(l1 >= 0 && !strcmp(fabric_switch_name(f, l1), "leaf1"), "node015 under leaf1");
    CHECK(l4 >= 0 && !strcmp(fabric_switch_name(f, l4), "leaf4"), "node033 under leaf4");
    CHECK(fabric_leaf_of(f, "node064") == -1, "unlisted node");
    CHECK(fabric_distance(f, l0, l0) == 0, "same leaf");
    CHECK(fabric_distance(f, l0, l1) == 2, "leaf-spine-leaf: %d", fabric_distance(f, l0, l1));
    CHECK(fabric_distance(f, l0, l4) == 4, "through the core: %d", fabric_distance(f, l0, l4));
    CHECK(!strcmp(fabric_switch_name(f, fabric_lca(f, l0, l1)), "spine0"), "lca spine0");
    CHECK(!strcmp(fabric_switch_name(f, fabric_lca(f, l0, l4)), "core"), "lca core");
    CHECK(fabric_depth(f, fabric_switch_index(f, "core")) == 0 && fabric_depth(f, l0) == 2, "depths");

    topo_node nodes[2];
    memset(nodes, 0, sizeof nodes);
    snprintf(nodes[0].name, sizeof nodes[0].name, "node042");
    snprintf(nodes[1].name, sizeof nodes[1].name, "stranger");
    CHECK(fabric_apply(f, nodes, 2) == 1, "one node missing");
    CHECK(!strcmp(nodes[0].leaf, "leaf5") && nodes[1].leaf[0] == 0, "apply: %s", nodes[0].leaf);
    fabric_free(f);
}

static void expect_error(const char *text, const char *needle)
{
    fabric *f = NULL;
    char err[256] = "";
    int rc = fabric_parse(&f, text, "t.conf", err, sizeof err);
    CHECK(rc == -1 && f == NULL && strstr(err, needle), "\"%s\": wanted error containing \"%s\", got \"%s\"", text,
          needle, err);
    fabric_free(f);
}

static void test_errors(void)
{
    expect_error("SwitchName=a Nodes=n1\nBogus=1\n", "t.conf:2: unknown key Bogus");
    expect_error("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2\n", "t.conf:2: node n2 is already under switch a");
    expect_error("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", "t.conf:2: switch a is defined twice");
    expect_error("SwitchName=top Switches=leafX\n", "t.conf:1: Switches= names leafX");
    expect_error("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "cycle");
    expect_error("Nodes=n1\n", "t.conf:1: a line needs SwitchName");
    expect_error("# only a comment\n", "no SwitchName");
    expect_error("SwitchName=a Nodes=n[5-1]\n", "t.conf:1: Nodes=n[5-1]");
    expect_error("SwitchName=a Nodes\n", "t.conf:1: \"Nodes\" is not KEY=VALUE");
    fabric *f;
    char err[256] = "";
    CHECK(fabric_load(&f, "/nonexistent/topology.conf", err, sizeof err) == -1 && strstr(err, "/nonexistent"),
          "missing file: %s", err);
    /* comments, blank lines, LinkSpeed and case-insensitive keys are accepted */
    int rc = fabric_parse(&f, "\n# c\nswitchname=s1 nodes=a[1-3] linkspeed=100 # trailing\nSwitchName=s0 Switches=s1\n",
                          "ok.conf", err, sizeof err);
    CHECK(rc == 0, "ok.conf: %s", err);
    if (!rc) {
        CHECK(fabric_parent(f, fabric_leaf_of(f, "a2")) == fabric_switch_index(f, "s0"), "parent link");
        fabric_free(f);
    }
}

/* What `scontrol show topology` prints (Slurm 22.05, topology/tree): upper
 * switches repeat every node below them, which must not count as a second leaf. */
static void test_scontrol_output(void)
{
    fabric *f = NULL;
    char err[256] = "";
    int rc = fabric_parse(&f,
                          "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
                          "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node3\n"
                          "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-3] Switches=leaf[1-2]\n",
                          "scontrol show topology", err, sizeof err);
    CHECK(rc == 0, "scontrol output: %s", err);
    if (rc) return;
    CHECK(fabric_num_nodes(f) == 3 && fabric_num_switches(f) == 3, "%d nodes, %d switches", fabric_num_nodes(f),
          fabric_num_switches(f));
    CHECK(!strcmp(fabric_switch_name(f, fabric_leaf_of(f, "node3")), "leaf2"), "node3's leaf");
    CHECK(fabric_distance(f, fabric_leaf_of(f, "node1"), fabric_leaf_of(f, "node3")) == 2, "leaf1-leaf2 distance");
    fabric_free(f);
    /* in a topology.conf (no Level=) a switch's own Nodes= still count */
    expect_error("SwitchName=a Nodes=n1\nSwitchName=b Nodes=n1 Switches=a\n", "node n1 is already under switch a");
}

int main(int argc, char **argv)
{
    (void)argc;
    test_scontrol_output();
    test_hostlist();
    test_shared_file();
    test_errors();
    return check_summary(argv[0]);
}
