/* workerd: the node agent. Flags: INTERFACES.md. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "discover.h"
#include "log.h"
#include "slurm.h"
#include "supervise.h"

static const char USAGE[] =
    "usage: workerd [flags]\n"
    "  --coordinator HOST:PORT  where to register (default $ATOLL_COORDINATOR; in a Slurm job the node srun\n"
    "                           ran on, port $ATOLL_COORDINATOR_PORT or 7420; else 127.0.0.1:7420)\n"
    "  --name NAME              node name, unique in the cluster (default: $SLURMD_NODENAME, else host name)\n"
    "  --token-file FILE        the cluster token (default $ATOLL_TOKEN_FILE or ./atoll-state/token)\n"
    "  --simulate PROFILE       pretend hardware: dgx-h100, dgx-a100, gb200-tray, cpu:N\n"
    "  --nvlink-domain ID       with gb200-tray: the 72-GPU NVLink domain this tray belongs to\n"
    "  --topology-xml FILE      take GPUs/NICs/PCI tree from an NCCL topology XML file\n"
    "  --sysfs-root DIR         where discovery reads sysfs (default /sys)\n"
    "  --leaf NAME              leaf switch this node hangs under (default: unknown)\n"
    "  --work-dir DIR           where rank processes run and log (default ./atoll-work):\n"
    "                           DIR/job-<id>/epoch-<e>/rank-<r>.log\n"
    "  --train-bin FILE         the atoll-train the ranks run (default: the one beside workerd)\n"
    "  --stop-grace SEC         on SIGTERM or `atoll cancel --checkpoint`, how long ranks get to commit a\n"
    "                           checkpoint before SIGKILL (default 30, Slurm's default KillWait)\n"
    "  --log-level LEVEL        debug, info, warn, error (default info)\n"
    "Without --simulate or --topology-xml, GPUs come from NVML and NICs from /sys/class/infiniband;\n"
    "in a Slurm step only the GPUs Slurm gave it ($SLURM_STEP_GPUS, else $SLURM_JOB_GPUS).\n"
    "SIGTERM stops the ranks with a checkpoint (SIGTERM to them), SIGINT at once.\n";

/* In a Slurm step, only the GPUs Slurm gave it are this node's to offer; their
 * ranks see them by the CUDA ordinals Slurm set up for the step. */
static int slurm_keep_gpus(agent *a, char *err, size_t errlen)
{
    int idx[SLURM_MAX_GPUS], cuda[SLURM_MAX_GPUS];
    int n = slurm_gpus(getenv, idx, cuda, SLURM_MAX_GPUS, err, errlen);
    if (n == -1) return 0;
    if (n < 0) return -1;
    topo_node *t = &a->topo;
    int kept = 0;
    char list[SLURM_MAX_GPUS * 6] = "";
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int found = 0;
        for (int g = 0; g < t->ngpus && !found; g++) found = t->gpus[g].index == idx[k];
        if (!found) {
            snprintf(err, errlen, "Slurm gave this step GPU %d, which discovery did not find (found %d GPUs)", idx[k],
                     t->ngpus);
            return -1;
        }
        if (idx[k] < TOPO_MAX_GPUS) a->cuda_ordinal[idx[k]] = cuda[k];
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%d", k ? "," : "", idx[k]);
    }
    for (int g = 0; g < t->ngpus; g++) {
        int given = 0;
        for (int k = 0; k < n && !given; k++) given = t->gpus[g].index == idx[k];
        if (given) t->gpus[kept++] = t->gpus[g];
    }
    log_info("Slurm job %s: this step has GPUs %s of the %d found", getenv("SLURM_JOB_ID"), n ? list : "(none)",
             t->ngpus);
    t->ngpus = kept;
    return 0;
}

int main(int argc, char **argv)
{
    static agent a; /* holds a 20 KB topo_node */
    const char *coordinator = getenv("ATOLL_COORDINATOR");
    const char *token_file = getenv("ATOLL_TOKEN_FILE");
    const char *name = NULL, *simulate = NULL, *domain = NULL, *xml = NULL, *leaf = NULL;
    const char *sysfs = "/sys", *work_dir = "./atoll-work", *train_bin = NULL;
    double stop_grace = 30;
    log_level level = LOG_INFO;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "workerd: %s needs a value (or is unknown)\n%s", f, USAGE);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--coordinator")) coordinator = v;
        else if (!strcmp(f, "--name")) name = v;
        else if (!strcmp(f, "--token-file")) token_file = v;
        else if (!strcmp(f, "--simulate")) simulate = v;
        else if (!strcmp(f, "--nvlink-domain")) domain = v;
        else if (!strcmp(f, "--topology-xml")) xml = v;
        else if (!strcmp(f, "--sysfs-root")) sysfs = v;
        else if (!strcmp(f, "--leaf")) leaf = v;
        else if (!strcmp(f, "--work-dir")) work_dir = v;
        else if (!strcmp(f, "--train-bin")) train_bin = v;
        else if (!strcmp(f, "--stop-grace")) {
            char *end;
            stop_grace = strtod(v, &end);
            if (*end || end == v || !(stop_grace > 0) || stop_grace > 86400) {
                fprintf(stderr, "workerd: --stop-grace '%s': expected seconds, more than 0 and at most 86400\n", v);
                return 2;
            }
        }
        else if (!strcmp(f, "--log-level")) {
            if (log_level_parse(v, &level)) {
                fprintf(stderr, "workerd: --log-level '%s': expected debug, info, warn or error\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "workerd: unknown flag '%s'\n%s", f, USAGE);
            return 2;
        }
    }
    if (simulate && xml) {
        fprintf(stderr, "workerd: give either --simulate or --topology-xml, not both\n");
        return 2;
    }
    log_init("workerd", level);
    char err[512];
    char slurm_coord[120];
    if (!coordinator || !*coordinator) {
        int rc = slurm_coordinator(getenv, slurm_coord, sizeof slurm_coord, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, "workerd: %s\n", err);
            return 2;
        }
        coordinator = rc == 0 ? slurm_coord : "127.0.0.1:7420";
    }
    if (!token_file) token_file = "./atoll-state/token";
    char host[64] = "localhost";
    gethostname(host, sizeof host - 1);
    if (!name) name = slurm_node_name(getenv);
    if (!name) name = host;
    /* A peer that goes away mid-write must cost us that connection (EPIPE), not the process. */
    signal(SIGPIPE, SIG_IGN);

    snprintf(a.coordinator, sizeof a.coordinator, "%s", coordinator);
    snprintf(a.host, sizeof a.host, "%s", host);
    if (rpc_resolve(coordinator, &a.addr, err, sizeof err)) {
        fprintf(stderr, "workerd: --coordinator: %s\n", err);
        return 2;
    }
    if (auth_token_load(&a.token, token_file, 0, NULL, err, sizeof err)) {
        fprintf(stderr, "workerd: %s\n", err);
        return 2;
    }
    int rc;
    if (simulate) {
        rc = topo_simulate(&a.topo, simulate, name, domain, err, sizeof err);
        if (!rc && !strncmp(simulate, "cpu:", 4)) a.cpu_ranks = atoi(simulate + 4);
    } else {
        snprintf(a.topo.name, sizeof a.topo.name, "%s", name);
        rc = xml ? discover_nccl_xml(&a.topo, xml, err, sizeof err) : discover_local(&a.topo, sysfs, err, sizeof err);
        if (!rc && err[0]) log_info("discovery: %s", err);
    }
    for (int g = 0; g < TOPO_MAX_GPUS; g++) a.cuda_ordinal[g] = g;
    if (!rc && !simulate && slurm_keep_gpus(&a, err, sizeof err)) rc = -1;
    if (rc) {
        fprintf(stderr, "workerd: %s\n", err);
        return 2;
    }
    if (strlen(name) >= sizeof a.topo.name) {
        fprintf(stderr, "workerd: --name '%s' is longer than %zu characters\n", name, sizeof a.topo.name - 1);
        return 2;
    }
    snprintf(a.topo.name, sizeof a.topo.name, "%s", name);
    if (leaf) snprintf(a.topo.leaf, sizeof a.topo.leaf, "%s", leaf);
    if (mkdir(work_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "workerd: --work-dir %s: %s\n", work_dir, strerror(errno));
        return 2;
    }
    /* Absolute, since ranks run in their own directories below it. */
    char *wd = realpath(work_dir, NULL);
    snprintf(a.work_dir, sizeof a.work_dir, "%s", wd ? wd : work_dir);
    free(wd);
    if (train_bin) {
        snprintf(a.train_bin, sizeof a.train_bin, "%s", train_bin);
    } else { /* beside this workerd */
        sup_exe_path("atoll-train", a.train_bin, sizeof a.train_bin);
    }
    if (access(a.train_bin, X_OK)) {
        fprintf(stderr, "workerd: cannot run %s (%s); give the rank program with --train-bin FILE\n", a.train_bin,
                strerror(errno));
        return 2;
    }
    a.simulated = simulate != NULL;
    a.stop_grace_ms = (int)(stop_grace * 1000 + 0.5);
    log_info("node %s: %d GPUs, %d NICs%s; coordinator %s", a.topo.name, a.topo.ngpus, a.topo.nnics,
             simulate ? " (simulated)" : "", coordinator);
    a.loop = uv_default_loop();
    return agent_run(&a);
}
