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

int main(int argc, char **argv)
{
    (void)argc;
    test_outside();
    test_coordinator();
    test_gpus();
    return check_summary(argv[0]);
}
