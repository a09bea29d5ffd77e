/* bench/sched_place: how long one placement holds the coordinator's event loop.
 *
 * A coordinator (the real handlers and SQLite store, no sockets) with N
 * registered dgx-h100 nodes; jobs are submitted one by one and each scheduler
 * pass that places one is timed (CPU time of the process, so other work on the
 * machine does not count): that is the time heartbeats wait behind it.
 *   sched_place [NODES] [JOBS] [GPUS_PER_JOB] [BIG_JOB_GPUS]
 * Prints one line of figures per job size (median and max ms per submission and
 * per placement, the process's peak RSS), then the pass that places JOBS jobs
 * submitted together. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "coord.h"
#include "log.h"
#include "msg.h"
#include "scheduler.h"
#include "topo.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CPU time of this process: the loop's own work, whatever else the machine runs. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t last_job;
static size_t launches;

static void sink(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    (void)c;
    (void)p;
    if (type == ATOLL__MSG_TYPE__MSG_SUBMIT_REPLY) last_job = ((const Atoll__SubmitReply *)m)->job;
    launches += type == ATOLL__MSG_TYPE__MSG_LAUNCH;
}

static void dispatch(coord *c, coord_peer *p, uint16_t type, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n + 1);
    if (!b) abort();
    protobuf_c_message_pack(m, b);
    coord_dispatch(c, p, type, b, n);
    free(b);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void submit(coord *c, coord_peer *cli, int gpus)
{
    atoll_config cfg;
    cfg_defaults(&cfg);
    cfg.num_layers = 32;
    cfg.hidden_size = 4096;
    cfg.num_attention_heads = 32;
    cfg.seq_length = 2048;
    cfg.tensor_model_parallel_size = 8;
    cfg.pipeline_model_parallel_size = 4;
    cfg.num_gpus = gpus;
    cfg.global_batch_size = gpus / 32 * 8;
    Atoll__JobSpec spec;
    msg_spec_from_cfg(&spec, &cfg, "bench");
    Atoll__SubmitRequest req = ATOLL__SUBMIT_REQUEST__INIT;
    req.spec = &spec;
    dispatch(c, cli, ATOLL__MSG_TYPE__MSG_SUBMIT, &req.base);
}

/* Submits `jobs` jobs of `gpus` GPUs, then times the one scheduler pass that places them all. */
static void run_batch(coord *c, coord_peer *cli, int nodes, int jobs, int gpus)
{
    for (int j = 0; j < jobs; j++) submit(c, cli, gpus);
    size_t before = launches;
    double t0 = cpu_ms();
    sched_run(c);
    double t = cpu_ms() - t0;
    printf("| %d | %d | %d in one pass | %zu | | | %.1f for the pass | | |\n", nodes, gpus, jobs,
           (launches - before) / (size_t)(gpus / 8), t); /* a Launch per node, 8 GPUs a node */
    fflush(stdout);
}

/* Submits and places `jobs` jobs of `gpus` GPUs one at a time; prints the figures. */
static void run(coord *c, coord_peer *cli, int nodes, int jobs, int gpus)
{
    double *t = calloc((size_t)jobs, sizeof *t), *ts = calloc((size_t)jobs, sizeof *ts);
    if (!t || !ts) abort();
    int placed = 0;
    for (int j = 0; j < jobs; j++) {
        double t0 = cpu_ms();
        submit(c, cli, gpus);
        ts[j] = cpu_ms() - t0;
        size_t before = launches;
        t0 = cpu_ms();
        sched_run(c);
        t[j] = cpu_ms() - t0;
        placed += launches > before;
    }
    qsort(t, (size_t)jobs, sizeof *t, cmp);
    qsort(ts, (size_t)jobs, sizeof *ts, cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("| %d | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %ld |\n", nodes, gpus, jobs, placed, ts[jobs / 2],
           ts[jobs - 1], t[jobs / 2], t[jobs - 1], ru.ru_maxrss / 1024);
    fflush(stdout);
    free(t);
    free(ts);
}

/* A job too large for the free GPUs but not for the cluster waits at the head of
 * the queue with a reservation; times the pass that then places `jobs` jobs of
 * `gpus` GPUs around it, and the pass for one more submitted on its own. */
static void run_behind_head(coord *c, coord_peer *cli, int nodes, int jobs, int gpus, int used)
{
    int head = ((nodes * 8 - used) / 32 + gpus / 32 + 1) * 32;
    if (head > nodes * 8 - jobs * gpus - gpus) return; /* no room to show */
    submit(c, cli, head);
    sched_run(c);
    for (int j = 0; j < jobs; j++) submit(c, cli, gpus);
    size_t before = launches;
    double t0 = cpu_ms();
    sched_run(c);
    double t = cpu_ms() - t0;
    size_t placed = (launches - before) / (size_t)(gpus / 8);
    submit(c, cli, gpus);
    before = launches;
    t0 = cpu_ms();
    sched_run(c);
    double t1 = cpu_ms() - t0;
    printf("| %d | %d | %d in one pass behind a waiting %d-GPU job | %zu | | | %.1f for the pass | %.1f for one more "
           "(%s) | |\n", nodes, gpus, jobs, head, placed, t, t1, launches > before ? "placed" : "waits");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 10000, jobs = argc > 2 ? atoi(argv[2]) : 16;
    int gpus = argc > 3 ? atoi(argv[3]) : 64, big = argc > 4 ? atoi(argv[4]) : 8192;
    if (nodes < 1 || jobs < 1 || gpus < 32 || big < 32) {
        fprintf(stderr, "usage: sched_place [NODES>=1] [JOBS>=1] [GPUS_PER_JOB>=32] [BIG_JOB_GPUS>=32]\n");
        return 2;
    }
    log_init("sched_place", LOG_WARN);
    coord c;
    coord_opts o;
    coord_opts_defaults(&o);
    char err[256];
    if (coord_init(&c, &o, ":memory:", err, sizeof err)) {
        fprintf(stderr, "sched_place: %s\n", err);
        return 1;
    }
    c.now = now_ms;
    c.send = sink;
    coord_peer *peers = calloc((size_t)nodes + 1, sizeof *peers);
    if (!peers) abort();
    for (int i = 0; i < nodes; i++) {
        peers[i].role = ATOLL__ROLE__ROLE_WORKER;
        char name[64];
        snprintf(name, sizeof name, "node%05d", i);
        topo_node *n = calloc(1, sizeof *n);
        if (!n || topo_simulate(n, "dgx-h100", name, NULL, err, sizeof err)) {
            fprintf(stderr, "sched_place: %s\n", err);
            return 1;
        }
        msg_arena a = { 0 };
        Atoll__Node node;
        msg_node_from_topo(&node, n, 0, &a);
        Atoll__Register r = ATOLL__REGISTER__INIT;
        r.node = &node;
        r.incarnation = (uint64_t)i + 1;
        dispatch(&c, &peers[i], ATOLL__MSG_TYPE__MSG_REGISTER, &r.base);
        msg_arena_free(&a);
        free(n);
    }
    coord_peer *cli = &peers[nodes];
    cli->role = ATOLL__ROLE__ROLE_CLI;
    printf("| nodes | GPUs per job | jobs | placed | submit ms median | submit ms max | placement ms median | "
           "placement ms max | peak RSS MiB |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    run(&c, cli, nodes, jobs, gpus);
    run(&c, cli, nodes, 1, big);
    run_batch(&c, cli, nodes, jobs, gpus);
    run_behind_head(&c, cli, nodes, jobs, gpus, 2 * jobs * gpus + big);
    coord_free(&c);
    free(peers);
    return 0;
}
