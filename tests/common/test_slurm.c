/* slurm: the allocation's environment as workerd reads it (a table stands in
 * for the environment; the real thing runs in tests/slurm). */
#include "slurm.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

static const char *const *env_table;

static char *table_get(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = env_table; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return (char *)*e + n + 1;
    return NULL;
}

static void test_outside(void)
{
    static const char *const none[] = { "CUDA_VISIBLE_DEVICES=0,1", "SLURM_STEP_GPUS=0", NULL };
    env_table = none;
    char out[64] = "unchanged", err[200] = "";
    int idx[8], cuda[8];
    CHECK(!slurm_in_job(table_get) && !slurm_node_name(table_get), "not in a job");
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == 1 && !strcmp(out, "unchanged"),
          "outside Slurm: %s", out);
    CHECK(slurm_gpus(table_get, idx, cuda, 8, err, sizeof err) == -1, "no GPU list outside a job");
}

static void test_coordinator(void)
{
    char out[64], err[200] = "";
    static const char *const launch[] = { "SLURM_JOB_ID=7", "SLURMD_NODENAME=gpu017",
                                          "SLURM_LAUNCH_NODE_IPADDR=10.1.2.3", "SLURM_JOB_NODELIST=gpu[017-020]",
                                          NULL };
    env_table = launch;
    CHECK(!strcmp(slurm_node_name(table_get), "gpu017"), "node name");
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == 0 && !strcmp(out, "10.1.2.3:7420"),
          "srun's host: %s %s", out, err);
    static const char *const list[] = { "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=gpu[017-020],cpu1",
                                        "ATOLL_COORDINATOR_PORT=9000", NULL };
    env_table = list;
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == 0 && !strcmp(out, "gpu017:9000"),
          "first node, zero padding kept: %s %s", out, err);
    static const char *const v6[] = { "SLURM_JOB_ID=7", "SLURM_LAUNCH_NODE_IPADDR=fd00::5", NULL };
    env_table = v6;
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == 0 && !strcmp(out, "[fd00::5]:7420"),
          "IPv6: %s", out);
    static const char *const badport[] = { "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n1", "ATOLL_COORDINATOR_PORT=70000",
                                           NULL };
    env_table = badport;
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == -1 &&
              strstr(err, "ATOLL_COORDINATOR_PORT '70000'") && strstr(err, "1..65535"),
          "bad port: %s", err);
    static const char *const badlist[] = { "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[3-1]", NULL };
    env_table = badlist;
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == -1 && strstr(err, "n[3-1]"),
          "bad nodelist: %s", err);
    static const char *const nothing[] = { "SLURM_JOB_ID=7", NULL };
    env_table = nothing;
    CHECK(slurm_coordinator(table_get, out, sizeof out, err, sizeof err) == -1 && strstr(err, "--coordinator"),
          "no host: %s", err);
}

static void test_gpus(void)
{
    int idx[8], cuda[8];
    char err[200] = "";
    /* Slurm confining devices renumbers CUDA_VISIBLE_DEVICES from 0 */
    static const char *const confined[] = { "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=2,3", "SLURM_JOB_GPUS=0,1,2,3",
                                            "CUDA_VISIBLE_DEVICES=0,1", NULL };
    env_table = confined;
    int n = slurm_gpus(table_get, idx, cuda, 8, err, sizeof err);
    CHECK(n == 2 && idx[0] == 2 && idx[1] == 3 && cuda[0] == 0 && cuda[1] == 1, "confined: n=%d %s", n, err);
    /* not confined: the ordinals are the indices; the job's list when the step has none */
    static const char *const plain[] = { "SLURM_JOB_ID=7", "SLURM_JOB_GPUS=4-6", NULL };
    env_table = plain;
    n = slurm_gpus(table_get, idx, cuda, 8, err, sizeof err);
    CHECK(n == 3 && idx[0] == 4 && idx[2] == 6 && cuda[0] == 4 && cuda[2] == 6, "plain: n=%d", n);
    static const char *const uuids[] = { "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=GPU-abc", NULL };
    env_table = uuids;
    n = slurm_gpus(table_get, idx, cuda, 8, err, sizeof err);
    CHECK(n == 1 && cuda[0] == 1, "UUIDs in CUDA_VISIBLE_DEVICES: the index (n=%d)", n);
    static const char *const bad[] = { "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=0,x", NULL };
    env_table = bad;
    CHECK(slurm_gpus(table_get, idx, cuda, 8, err, sizeof err) == -2 && strstr(err, "SLURM_STEP_GPUS '0,x'") &&
              strstr(err, "0,1,4"),
          "bad list: %s", err);
    static const char *const many[] = { "SLURM_JOB_ID=7", "SLURM_STEP_GPUS=0-9", NULL };
    env_table = many;
    CHECK(slurm_gpus(table_get, idx, cuda, 8, err, sizeof err) == -2 && strstr(err, "more than 8"), "too many: %s",
          err);
}

/* `scontrol -o show node` lines as Slurm 22.05 prints them (captured from the
 * cluster tests/slurm starts; the states vary as a drain, a job, a failure make them). */
#define NODE_LINE(name, state, tail)                                                                              \
    "NodeName=" name " Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=16.21 "                \
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.77.0.12 NodeHostName=" name              \
    " Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 AllocMem=0 FreeMem=21900 "   \
    "Sockets=4 Boards=1 State=" state " ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "                \
    "Partitions=debug  BootTime=2026-11-22T21:42:07 SlurmdStartTime=2026-11-23T01:21:53 "                           \
    "LastBusyTime=2026-11-23T01:21:53 CfgTRES=cpu=4,mem=1M,billing=4 AllocTRES= CapWatts=n/a CurrentWatts=0 "       \
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s" tail "\n"

static void test_node_states(void)
{
    static const struct { const char *state; int out; } states[] = {
        { "IDLE", 0 },          { "ALLOCATED", 0 },        { "MIXED", 0 },           { "IDLE*", 0 },
        { "ALLOCATED+COMPLETING", 0 }, { "IDLE+POWERED_DOWN", 0 }, { "RESERVED", 0 },
        { "ALLOCATED+NOT_RESPONDING", 0 },
        { "DRAIN", 1 },         { "DRAINED", 1 },          { "DRAINING", 1 },        { "DOWN", 1 },
        { "DOWN*", 1 },         { "IDLE+DRAIN", 1 },       { "ALLOCATED+DRAIN", 1 }, { "MIXED+DRAIN", 1 },
        { "FAIL", 1 },          { "FAILING", 1 },          { "DOWN+FAIL", 1 },       { "ALLOCATED+FAIL", 1 },
        { "DOWN*+DRAIN", 1 },   { "IDLE+DRAIN+RESERVED", 1 }, { "DRAINAGE", 0 },
    };
    for (size_t i = 0; i < sizeof states / sizeof *states; i++)
        CHECK(slurm_state_out(states[i].state) == states[i].out, "state %s: out %d, expected %d", states[i].state,
              slurm_state_out(states[i].state), states[i].out);

    const char *text = NODE_LINE("node1", "IDLE", "")
        NODE_LINE("node2", "IDLE+DRAIN", " Reason=atoll test x [root@2026-11-23T01:21:53]")
        NODE_LINE("node3", "ALLOCATED+DRAIN", " Reason=bad=dimm [slurm@2026-11-23T01:21:56]")
        NODE_LINE("node4", "DOWN*", " Reason=Not responding [slurm@2026-11-23T01:22:10]")
        "\n"
        NODE_LINE("node5", "MIXED", "")
        NODE_LINE("node6", "DOWN+FAIL", " Reason=failx")
        NODE_LINE("node7", "ALLOCATED", "");
    slurm_node v[8];
    char err[300] = "";
    int n = slurm_parse_nodes(text, v, 8, err, sizeof err);
    CHECK(n == 7, "7 nodes (a blank line skipped): %d %s", n, err);
    if (n == 7) {
        CHECK(!strcmp(v[0].name, "node1") && !strcmp(v[0].state, "IDLE") && !v[0].out && !v[0].reason[0],
              "idle: %s %s out %d '%s'", v[0].name, v[0].state, v[0].out, v[0].reason);
        CHECK(!strcmp(v[1].name, "node2") && !strcmp(v[1].state, "IDLE+DRAIN") && v[1].out &&
                  !strcmp(v[1].reason, "atoll test x"),
              "drained, the reason's spaces kept and its stamp dropped: %s '%s'", v[1].state, v[1].reason);
        CHECK(v[2].out && !strcmp(v[2].reason, "bad=dimm"), "draining: '%s'", v[2].reason);
        CHECK(v[3].out && !strcmp(v[3].state, "DOWN*") && !strcmp(v[3].reason, "Not responding"), "down: %s '%s'",
              v[3].state, v[3].reason);
        CHECK(!v[4].out && !strcmp(v[4].name, "node5"), "mixed: %s", v[4].state);
        CHECK(v[5].out && !strcmp(v[5].reason, "failx"), "failed, no stamp: '%s'", v[5].reason);
        CHECK(!v[6].out && !strcmp(v[6].state, "ALLOCATED"), "allocated: %s", v[6].state);
    }
    /* A reason that says "State=" does not change the state. */
    n = slurm_parse_nodes("NodeName=n1 State=IDLE Reason=was State=DOWN before\n", v, 8, err, sizeof err);
    CHECK(n == 1 && !strcmp(v[0].state, "IDLE") && !v[0].out && !strcmp(v[0].reason, "was State=DOWN before"),
          "State= inside the reason: %d %s '%s'", n, v[0].state, v[0].reason);
    CHECK(slurm_parse_nodes("", v, 8, err, sizeof err) == 0, "no output, no nodes");

    /* malformed input: what was wrong, where, and what is expected */
    err[0] = 0;
    CHECK(slurm_parse_nodes(NODE_LINE("node1", "IDLE", "") "Node nodeX not found\n", v, 8, err, sizeof err) == -1 &&
              strstr(err, "line 2") && strstr(err, "Node nodeX not found") && strstr(err, "NodeName=NAME"),
          "not a node line: %s", err);
    CHECK(slurm_parse_nodes("NodeName=n1 Arch=x86_64 CPUTot=4\n", v, 8, err, sizeof err) == -1 &&
              strstr(err, "line 1") && strstr(err, "State=STATE"),
          "no State=: %s", err);
    CHECK(slurm_parse_nodes("NodeName= State=IDLE\n", v, 8, err, sizeof err) == -1 && strstr(err, "line 1"),
          "empty name: %s", err);
    CHECK(slurm_parse_nodes("NodeName=n1 State=\n", v, 8, err, sizeof err) == -1, "empty state: %s", err);
    char longname[200] = "NodeName=";
    memset(longname + 9, 'x', 100);
    strcpy(longname + 109, " State=IDLE");
    CHECK(slurm_parse_nodes(longname, v, 8, err, sizeof err) == -1 && strstr(err, "NodeName longer than 63"),
          "long name: %s", err);
    CHECK(slurm_parse_nodes(NODE_LINE("a", "IDLE", "") NODE_LINE("b", "IDLE", ""), v, 1, err, sizeof err) == -1 &&
              strstr(err, "more than the 1 nodes"),
          "more nodes than asked for: %s", err);
}

/* sbatch --time's forms, and the way Slurm prints a limit back. */
static void test_time(void)
{
    const struct { const char *text; long long s; } ok[] = {
        { "90", 5400 }, { "90:30", 5430 }, { "1:02:03", 3723 }, { "2-3", 2 * 86400 + 3 * 3600 },
        { "2-3:04", 2 * 86400 + 3 * 3600 + 240 }, { "2-03:04:05", 2 * 86400 + 3 * 3600 + 245 }, { "0:10", 10 },
        { "366-0", 366LL * 86400 },
    };
    char err[256], out[32];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t s = -1;
        CHECK(slurm_parse_time(ok[i].text, &s, err, sizeof err) == 0 && s == ok[i].s, "%s: %lld (%s)", ok[i].text,
              (long long)s, err);
    }
    const char *bad[] = { "", "0", "0:00", "abc", "1:2:3:4", "-5", "1-", "1--2", "5x", "1:60x", "367-0", "+5", "1- 2",
                          "99999999999", "99999999999999999-0", NULL };
    for (int i = 0; bad[i]; i++) {
        int64_t s = 0;
        err[0] = 0;
        CHECK(slurm_parse_time(bad[i], &s, err, sizeof err) == -1 && strstr(err, "expected MINUTES, MINUTES:SECONDS"),
              "'%s' accepted (%lld)", bad[i], (long long)s);
    }
    slurm_format_time(3723, out, sizeof out);
    CHECK(!strcmp(out, "1:02:03"), "format: %s", out);
    slurm_format_time(2 * 86400 + 245, out, sizeof out);
    CHECK(!strcmp(out, "2-00:04:05"), "format with days: %s", out);
}

int main(int argc, char **argv)
{
    (void)argc;
    test_time();
    test_outside();
    test_coordinator();
    test_gpus();
    test_node_states();
    return check_summary(argv[0]);
}
